//! Tier A keeps the host's unix sockets (docker, ssh-agent, D-Bus, X11) out of reach of commands
//! by refusing `socket(2)` altogether in the tools worker and everything it runs: Landlock does
//! not govern `connect(2)` to a pathname socket, and a seccomp filter cannot read the path, so the
//! socket is refused before it exists. `socketpair(2)` (in-process plumbing: tokio, Python's
//! `multiprocessing`, `make`'s job server) keeps working, and the worker's channel was inherited
//! already connected. Abstract sockets are also scoped away by Landlock (ABI 6+), inet sockets by
//! the profile's filter; this covers the rest.

use seccompiler::{
    apply_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

/// The errno a command sees: "permission to create a socket … is denied".
pub const SOCKET_ERRNO: i32 = libc::EACCES;

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;
#[cfg(target_arch = "riscv64")]
const ARCH: TargetArch = TargetArch::riscv64;

#[derive(Debug, thiserror::Error)]
pub enum NoSocketError {
    #[error("building the no-socket filter: {0}")]
    Build(#[from] seccompiler::BackendError),
    #[error("installing the no-socket filter: {0}")]
    Install(#[from] seccompiler::Error),
}

/// Install the filter on the calling thread; threads and processes created later inherit it.
/// Needs `no_new_privs` (set by confinement).
pub fn deny_socket_creation() -> Result<(), NoSocketError> {
    let filter = SeccompFilter::new(
        BTreeMap::from([(libc::SYS_socket, Vec::new())]),
        SeccompAction::Allow,
        SeccompAction::Errno(SOCKET_ERRNO as u32),
        ARCH,
    )?;
    let program = BpfProgram::try_from(filter)?;
    apply_filter(&program)?;
    Ok(())
}

/// Tier B's variant, for commands only (the one-shot sandbox's process and the worker's command
/// launcher, both inside the private network namespace whose only interface is `lo`): `socket(2)`
/// refused for every family but `AF_INET` and `AF_INET6`. Unix sockets stay refused (host sockets
/// are reachable by path); inet sockets reach the namespace's loopback and nothing else.
pub fn deny_non_inet_sockets() -> Result<(), NoSocketError> {
    let not = |family: i32| {
        SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, family as u64)
    };
    // The conditions of one rule must all hold: neither inet family.
    let rule = SeccompRule::new(vec![not(libc::AF_INET)?, not(libc::AF_INET6)?])?;
    let filter = SeccompFilter::new(
        BTreeMap::from([(libc::SYS_socket, vec![rule])]),
        SeccompAction::Allow,
        SeccompAction::Errno(SOCKET_ERRNO as u32),
        ARCH,
    )?;
    let program = BpfProgram::try_from(filter)?;
    apply_filter(&program)?;
    Ok(())
}
