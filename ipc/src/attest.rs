//! Sandbox attestation: what a worker reports, in its `Ready` message, that it actually applied.
//!
//! The worker fills this from the results of the system calls it made (not from what it intended),
//! and the supervisor compares it with what the role's profile requires before using the worker.

use crate::Role;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attestation {
    pub role: Role,
    pub pid: u32,
    /// `PR_GET_NO_NEW_PRIVS` read back after exec.
    pub no_new_privs: bool,
    /// `PR_GET_DUMPABLE` read back as 0.
    pub non_dumpable: bool,
    pub caps: CapsAttestation,
    pub landlock: LandlockAttestation,
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
    pub effective_empty: bool,
    pub permitted_empty: bool,
    pub inheritable_empty: bool,
    pub ambient_empty: bool,
    pub bounding_empty: bool,
}

impl CapsAttestation {
    pub fn all_empty(&self) -> bool {
        self.effective_empty
            && self.permitted_empty
            && self.inheritable_empty
            && self.ambient_empty
            && self.bounding_empty
    }
}

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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandlockAttestation {
    /// The ABI version the kernel reports (0: none).
    pub kernel_abi: u32,
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeccompAttestation {
    /// A filter is installed (`/proc/self/status` reports `Seccomp: 2`).
    pub installed: bool,
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
