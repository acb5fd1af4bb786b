//! Applying a role's profile to the calling process, in the worker right after exec, and
//! attesting what the kernel now enforces.

use crate::procfs::{self, ProcStatus};
use crate::seccomp::{self, FilterError, FilterSet};
use crate::sys;
use caps::{CapSet, Capability};
use hanzo_ipc::attest::{
    Attestation, CapsAttestation, LandlockAttestation, LandlockStatus, SeccompAttestation,
    SocketPolicy,
};
use hanzo_policy::profile::{FsAccess, SandboxProfile};
use landlock::{
    Access, AccessFs, AccessNet, BitFlags, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};

#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error(
        "the sandbox must be applied before any other thread starts, but this process has \
         {threads} threads (seccomp and the capability drop would cover only the calling thread)"
    )]
    NotSingleThreaded { threads: u32 },
    #[error("reading /proc/self/status: {0}")]
    ProcStatus(#[source] io::Error),
    #[error("dropping capabilities ({step}): {source}")]
    Capabilities {
        step: &'static str,
        #[source]
        source: caps::errors::CapsError,
    },
    #[error("prctl({op}): {source}")]
    Prctl {
        op: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("Landlock: {0}")]
    Landlock(#[from] landlock::RulesetError),
    #[error(transparent)]
    Filter(#[from] FilterError),
    #[error("installing the seccomp filter: {0}")]
    Seccomp(#[from] seccompiler::Error),
}

/// In the worker right after exec: take ownership of an inherited fd, setting `FD_CLOEXEC` at
/// once (so nothing the worker runs inherits its channel) and checking it is a socket.
pub fn adopt_inherited_fd(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_GETFD on an integer is memory-safe; EBADF tells us the fd is not open.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above; setting FD_CLOEXEC changes only the fd's flags.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the fd is open (F_GETFD succeeded) and was passed to this process for it to own:
    // nothing else in the worker refers to it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: fstat writes into the zero-initialised stat buffer we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on an fd we own, writing into `st`.
    if unsafe { libc::fstat(owned.as_raw_fd(), &mut st) } < 0 {
        return Err(io::Error::last_os_error());
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("inherited fd {fd} is not a socket"),
        ));
    }
    Ok(owned)
}

/// In a worker right after exec: if the supervisor passed its pids cgroup's `cgroup.procs` file as
/// `fd`, join that cgroup (write `0`: "this process") and close the fd. Must run before the worker
/// forks anything (tier B forks while entering its namespaces), so every process it ever has is
/// counted against the cgroup's `pids.max`. Returns whether a cgroup was joined.
pub fn join_inherited_cgroup(fd: RawFd) -> io::Result<bool> {
    // SAFETY: F_GETFD on an integer is memory-safe; EBADF tells us the fd is not open.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Ok(false);
    }
    // SAFETY: the fd is open and was passed to this process for it to own; nothing else in the
    // worker refers to it. It is closed when `file` drops.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut file = std::fs::File::from(owned);
    // SAFETY: fstat writes into the zero-initialised stat buffer we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on an fd we own, writing into `st`.
    if unsafe { libc::fstat(file.as_raw_fd(), &mut st) } < 0 {
        return Err(io::Error::last_os_error());
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("inherited fd {fd} is not a cgroup.procs file"),
        ));
    }
    use std::io::Write;
    file.write_all(b"0")?;
    Ok(true)
}

/// Apply `profile` to the calling process and attest the result.
///
/// Must be called before any other thread exists (checked: `/proc/self/status` `Threads:` must be
/// 1). In order: drop every capability, the bounding set included (which needs `CAP_SETPCAP`;
/// without it the bounding set is left and a note says so), and lock the securebits when
/// possible; `PR_SET_DUMPABLE` 0; `no_new_privs`; Landlock at the best ABI the kernel offers,
/// with the ruleset status checked; the seccomp filters of [`crate::seccomp`]. The attestation is
/// then built by reading the state back from the kernel, not from what was intended.
pub fn confine_current_process(profile: &SandboxProfile) -> Result<Attestation, ConfineError> {
    // Opened now: after Landlock the worker may not open anything under /proc.
    let status_file = File::open("/proc/self/status").map_err(ConfineError::ProcStatus)?;
    let before = procfs::reread_status(&status_file).map_err(ConfineError::ProcStatus)?;
    if before.threads != 1 {
        return Err(ConfineError::NotSingleThreaded {
            threads: before.threads,
        });
    }
    let mut notes = Vec::new();

    drop_capabilities(&mut notes)?;

    // A non-dumpable process cannot be ptrace-attached or have its memory read through /proc by
    // same-uid processes, and writes no core file.
    set_prctl(libc::PR_SET_DUMPABLE, 0, "PR_SET_DUMPABLE")?;
    // Landlock and seccomp both need it without CAP_SYS_ADMIN; spawn sets it too.
    set_prctl(libc::PR_SET_NO_NEW_PRIVS, 1, "PR_SET_NO_NEW_PRIVS")?;

    let landlock = apply_landlock(profile, &mut notes)?;

    let filters = seccomp::build(profile)?;
    for program in &filters.programs {
        seccompiler::apply_filter(program)?;
    }

    // Read back.
    let after = procfs::reread_status(&status_file).map_err(ConfineError::ProcStatus)?;
    let seccomp = read_back_seccomp(&after, &filters, &mut notes);
    let no_new_privs =
        sys::prctl_get(libc::PR_GET_NO_NEW_PRIVS).map_err(|source| ConfineError::Prctl {
            op: "PR_GET_NO_NEW_PRIVS",
            source,
        })? == 1
            && after.no_new_privs;
    let non_dumpable =
        sys::prctl_get(libc::PR_GET_DUMPABLE).map_err(|source| ConfineError::Prctl {
            op: "PR_GET_DUMPABLE",
            source,
        })? == 0;

    Ok(Attestation {
        role: profile.role,
        pid: std::process::id(),
        no_new_privs,
        non_dumpable,
        caps: caps_attestation(&after),
        landlock,
        seccomp,
        namespaces: Vec::new(),
        notes,
    })
}

fn set_prctl(
    option: libc::c_int,
    value: libc::c_ulong,
    op: &'static str,
) -> Result<(), ConfineError> {
    // SAFETY: the options used here (PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_SECUREBITS) take
    // integers only.
    if unsafe { libc::prctl(option, value, 0, 0, 0) } < 0 {
        return Err(ConfineError::Prctl {
            op,
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Every securebit and its lock: root gets no capabilities on exec or setuid, nor keeps or raises
/// any, and none of this can be undone.
const SECUREBITS_LOCKED_NOROOT: libc::c_ulong = 0xef;

fn drop_capabilities(notes: &mut Vec<String>) -> Result<(), ConfineError> {
    let caps_err = |step| move |source| ConfineError::Capabilities { step, source };
    let setpcap = caps::has_cap(None, CapSet::Effective, Capability::CAP_SETPCAP)
        .map_err(caps_err("reading the effective set"))?;
    if setpcap {
        // The bounding set limits what any later exec can gain; it can only shrink, and only
        // while CAP_SETPCAP is held, so it goes first.
        for cap in caps::runtime::thread_all_supported() {
            caps::drop(None, CapSet::Bounding, cap).map_err(caps_err("bounding set"))?;
        }
        if let Err(e) = set_prctl(
            libc::PR_SET_SECUREBITS,
            SECUREBITS_LOCKED_NOROOT,
            "PR_SET_SECUREBITS",
        ) {
            notes.push(format!("securebits not locked: {e}"));
        }
    } else {
        notes.push(
            "CAP_SETPCAP not held: the capability bounding set was left as it is \
             (no_new_privs keeps exec from gaining capabilities)"
                .to_string(),
        );
    }
    if caps::runtime::ambient_set_supported().is_ok() {
        caps::clear(None, CapSet::Ambient).map_err(caps_err("ambient set"))?;
    }
    caps::clear(None, CapSet::Inheritable).map_err(caps_err("inheritable set"))?;
    // Effective before permitted: the kernel requires effective ⊆ permitted at every step.
    caps::clear(None, CapSet::Effective).map_err(caps_err("effective set"))?;
    caps::clear(None, CapSet::Permitted).map_err(caps_err("permitted set"))?;
    Ok(())
}

fn caps_attestation(s: &ProcStatus) -> CapsAttestation {
    CapsAttestation {
        effective_empty: s.cap_eff == 0,
        permitted_empty: s.cap_prm == 0,
        inheritable_empty: s.cap_inh == 0,
        ambient_empty: s.cap_amb == 0,
        bounding_empty: s.cap_bnd == 0,
    }
}

/// Whether `fd` (an `O_PATH` fd from `PathFd`) is something other than a directory: Landlock
/// rejects directory-only rights (list, create, remove…) on such a rule.
fn is_non_directory(fd: &PathFd) -> bool {
    // SAFETY: fstat writes into the zero-initialised stat buffer we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on a valid O_PATH fd borrowed from `fd`, writing into `st`.
    let r = unsafe { libc::fstat(fd.as_fd().as_raw_fd(), &mut st) };
    r == 0 && st.st_mode & libc::S_IFMT != libc::S_IFDIR
}

fn apply_landlock(
    profile: &SandboxProfile,
    notes: &mut Vec<String>,
) -> Result<LandlockAttestation, ConfineError> {
    let kernel_abi = match sys::landlock_abi() {
        Ok(v) => v,
        Err(e) => {
            notes.push(format!(
                "Landlock unavailable ({}): no filesystem confinement",
                if e == libc::EOPNOTSUPP {
                    "built in but not enabled at boot; add landlock to the lsm= boot parameter"
                } else {
                    "the kernel has no Landlock; Linux 5.13 or later is needed"
                }
            ));
            return Ok(LandlockAttestation {
                kernel_abi: 0,
                status: LandlockStatus::Unsupported,
                grants: Vec::new(),
                scoped: false,
            });
        }
    };
    // Every right the running kernel can enforce (capped at the newest ABI this build knows), so
    // the status can honestly be "fully enforced": asking for rights the kernel lacks would
    // always yield "partially".
    let abi = ABI::from(i32::try_from(kernel_abi).unwrap_or(i32::MAX));
    let all = AccessFs::from_all(abi);
    let read_exec = AccessFs::from_read(abi);
    let file_rights = AccessFs::from_file(abi);

    let mut ruleset = Ruleset::default().handle_access(all)?;
    // Without network rules, TCP bind/connect are refused for unix-only roles (on top of seccomp).
    if profile.sockets == SocketPolicy::UnixOnly && abi >= ABI::V4 {
        ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
    }
    let scoped = abi >= ABI::V6;
    if scoped {
        // No connecting to abstract unix sockets and no signals outside the sandbox's domain.
        ruleset = ruleset.scope(Scope::from_all(abi))?;
    }
    let mut created = ruleset.create()?;
    let mut grants = Vec::new();
    for grant in &profile.fs {
        let fd = match PathFd::new(&grant.path) {
            Ok(fd) => fd,
            Err(e) => {
                notes.push(format!(
                    "grant {} {} skipped: {e}",
                    grant.access.short(),
                    grant.path.display()
                ));
                continue;
            }
        };
        let mut access: BitFlags<AccessFs> = match grant.access {
            FsAccess::ReadExec => read_exec,
            FsAccess::ReadWrite => all,
        };
        if is_non_directory(&fd) {
            access &= file_rights;
        }
        created = created.add_rule(PathBeneath::new(fd, access))?;
        grants.push(format!("{} {}", grant.access.short(), grant.path.display()));
    }
    let restricted = created.restrict_self()?;
    let status = match restricted.ruleset {
        RulesetStatus::FullyEnforced => LandlockStatus::FullyEnforced,
        RulesetStatus::PartiallyEnforced => LandlockStatus::PartiallyEnforced,
        RulesetStatus::NotEnforced => LandlockStatus::NotEnforced,
    };
    Ok(LandlockAttestation {
        kernel_abi,
        status,
        grants,
        scoped: scoped && status != LandlockStatus::NotEnforced,
    })
}

/// What the filters actually do, checked with harmless calls where one exists: `Seccomp: 2` from
/// the kernel, an inet `socket` refused with `EAFNOSUPPORT`, `clone3(NULL, 0)` refused with
/// `ENOSYS` (the kernel alone would say `EINVAL`), an x32 `getpid` refused with `EPERM`.
fn read_back_seccomp(
    after: &ProcStatus,
    filters: &FilterSet,
    notes: &mut Vec<String>,
) -> SeccompAttestation {
    let installed = after.seccomp_mode == 2;

    // SAFETY: socket() with integer arguments; a descriptor it returns is closed at once.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    let inet_errno = if fd < 0 { sys::errno() } else { 0 };
    if fd >= 0 {
        // SAFETY: closing the descriptor we just created.
        unsafe { libc::close(fd) };
    }
    let sockets = if inet_errno == libc::EAFNOSUPPORT {
        SocketPolicy::UnixOnly
    } else {
        SocketPolicy::Any
    };
    if sockets != filters.sockets {
        notes.push(format!(
            "inet socket check: expected {:?}, found {:?}",
            filters.sockets, sockets
        ));
    }

    // SAFETY: clone3 with a null argument pointer and size 0 is rejected before any memory is
    // read or any process created (EINVAL from the kernel, ENOSYS from our filter).
    let r = unsafe { libc::syscall(libc::SYS_clone3, std::ptr::null::<libc::c_void>(), 0usize) };
    let clone3_refused = r < 0 && sys::errno() == libc::ENOSYS;
    let namespace_creation_denied = filters.namespace_creation_denied && clone3_refused;
    if filters.namespace_creation_denied && !clone3_refused {
        notes.push("clone3 is not refused by the filter".to_string());
    }

    let x32_denied = filters.x32_denied && x32_getpid_refused();
    if filters.x32_denied && !x32_denied {
        notes.push("x32 syscall numbers are not refused by the filter".to_string());
    }

    SeccompAttestation {
        installed,
        sockets,
        denied_syscalls: if installed {
            filters.denied_syscalls.clone()
        } else {
            Vec::new()
        },
        x32_denied,
        namespace_creation_denied,
    }
}

#[cfg(target_arch = "x86_64")]
fn x32_getpid_refused() -> bool {
    let nr = libc::SYS_getpid | seccomp::X32_SYSCALL_BIT as libc::c_long;
    // SAFETY: getpid takes no arguments and has no effect, under any ABI.
    let r = unsafe { libc::syscall(nr) };
    r < 0 && sys::errno() == libc::EPERM
}

#[cfg(not(target_arch = "x86_64"))]
fn x32_getpid_refused() -> bool {
    false
}
