//! Sandbox attestation: what a worker reports, in its `Ready` message, that it actually applied.
//!
//! The worker fills this from the results of the system calls it made (not from what it intended),
//! and the supervisor compares it with what the role's profile requires before using the worker.

use crate::Role;
use serde::{Deserialize, Serialize};

/// What a worker reports in its `Ready` message about the confinement it actually applied,
/// read back from the kernel after applying it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attestation {
    /// The role the worker serves; the supervisor refuses an attestation for another role.
    pub role: Role,
    /// The confined process's own pid (`getpid`), in its own pid namespace.
    pub pid: u32,
    /// `PR_GET_NO_NEW_PRIVS` read back after exec.
    pub no_new_privs: bool,
    /// `PR_GET_DUMPABLE` read back as 0.
    pub non_dumpable: bool,
    /// The capability sets after the drop.
    pub caps: CapsAttestation,
    /// The Landlock ruleset in force.
    pub landlock: LandlockAttestation,
    /// The seccomp filter in force.
    pub seccomp: SeccompAttestation,
    /// Namespaces the worker lives in beyond the host's (tier B), e.g. `["user", "mount", "net"]`.
    pub namespaces: Vec<String>,
    /// Anything applied only partly, in words, for `doctor` and the logs.
    pub notes: Vec<String>,
    /// Processes the worker started before confining itself, to act for it, each confined on its
    /// own and attesting for itself (the tools worker's command launcher).
    pub helpers: Vec<Attestation>,
}

/// Capability sets after the drop, read back from the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapsAttestation {
    /// The effective set is empty.
    pub effective_empty: bool,
    /// The permitted set is empty, so no capability can be raised again.
    pub permitted_empty: bool,
    /// The inheritable set is empty.
    pub inheritable_empty: bool,
    /// The ambient set is empty, so an exec'd program gains nothing.
    pub ambient_empty: bool,
    /// The bounding set is empty, so not even a set-uid exec can grant a capability.
    pub bounding_empty: bool,
}

impl CapsAttestation {
    /// Whether all five sets are empty (what every worker profile requires).
    pub fn all_empty(&self) -> bool {
        self.effective_empty
            && self.permitted_empty
            && self.inheritable_empty
            && self.ambient_empty
            && self.bounding_empty
    }
}

/// How much of the requested Landlock ruleset the running kernel enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LandlockStatus {
    /// Every access right the profile asked for is handled by the running kernel.
    FullyEnforced,
    /// A ruleset is in force but the kernel's ABI lacks some rights the profile asked for.
    PartiallyEnforced,
    /// The kernel supports Landlock but the ruleset could not be applied.
    NotEnforced,
    /// The kernel has no Landlock.
    Unsupported,
}

/// The Landlock state of a process, as `landlock_create_ruleset` and `landlock_restrict_self`
/// answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandlockAttestation {
    /// The ABI version the kernel reports (0: none).
    pub kernel_abi: u32,
    /// How much of the profile's ruleset is enforced.
    pub status: LandlockStatus,
    /// The paths granted, as `"rw /work/ws"`, `"ro /usr"`; empty means no filesystem at all.
    pub grants: Vec<String>,
    /// Abstract unix sockets and signals scoped to the sandbox (Landlock ABI 6+).
    pub scoped: bool,
}

/// Which `socket(2)` calls a process may make. `socketpair(2)` (in-process plumbing) is always
/// allowed: it reaches nothing outside the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SocketPolicy {
    /// `socket()` only for `AF_UNIX`; every other family fails.
    UnixOnly,
    /// Any socket family (the broker, which speaks HTTPS).
    Any,
    /// No `socket()` at all: a host unix socket cannot even be tried.
    None,
    /// `AF_INET` and `AF_INET6` only, for a process inside a private network namespace whose only
    /// interface is `lo` (tier B commands): their own loopback and nothing else. Unix sockets stay
    /// refused (a host socket is reachable by path).
    InetOnly,
}

impl SocketPolicy {
    /// Whether `self` allows no more than `other` does.
    pub fn within(self, other: SocketPolicy) -> bool {
        use SocketPolicy::*;
        match (self, other) {
            (a, b) if a == b => true,
            (None, _) => true,
            (_, Any) => true,
            _ => false,
        }
    }
}

/// A seccomp allow-list in force: only the syscalls it names run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllowListAttestation {
    /// Which list (`policy/seccomp/<name>.txt`).
    pub name: String,
    /// How many syscalls it admits.
    pub syscalls: u32,
    /// SHA-256 of the admitted names, one per line in order, hex.
    pub digest: String,
}

/// The seccomp state of a process, read back after installing the filter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeccompAttestation {
    /// A filter is installed (`/proc/self/status` reports `Seccomp: 2`).
    pub installed: bool,
    /// Which `socket(2)` families the filter admits.
    pub sockets: SocketPolicy,
    /// Syscalls the filter refuses, by name.
    pub denied_syscalls: Vec<String>,
    /// Syscall numbers with the x32 bit are refused.
    pub x32_denied: bool,
    /// `clone` with namespace flags and `clone3` are refused.
    pub namespace_creation_denied: bool,
    /// The allow-list in force, when the filter admits only listed syscalls (read back by calling
    /// one syscall outside every list and seeing it refused).
    pub allow_list: Option<AllowListAttestation>,
    /// The rules for commands are in force: `ioctl(TIOCSTI)`/`TIOCLINUX` and inode-flag changes,
    /// set-id bits in modes, and extended-attribute writes are refused (read back with a
    /// `TIOCSTI` that the kernel alone would answer with `ENOTTY`).
    pub command_rules: bool,
    /// How many filters are stacked on the process (`Seccomp_filters` in `/proc/self/status`).
    pub filters: u32,
}
