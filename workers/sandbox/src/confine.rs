//! Applying a profile to the calling process (a worker right after exec, the command launcher,
//! tier B's waiting processes) and attesting what the kernel now enforces.

use crate::procfs::{self, ProcStatus};
use crate::seccomp::{self, FilterError, FilterSet};
use crate::sys;
use caps::{CapSet, Capability};
use hanzo_ipc::attest::{
    AllowListAttestation, Attestation, CapsAttestation, LandlockAttestation, LandlockStatus,
    SeccompAttestation, SocketPolicy,
};
use hanzo_policy::profile::{FsAccess, SandboxProfile};
use landlock::{
    Access, AccessFs, AccessNet, BitFlags, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};
use nix::sys::stat::{fstat, SFlag};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Why a worker could not confine itself; it then exits rather than run unconfined.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// Another thread exists, which the filters and the capability drop would miss.
    #[error(
        "the sandbox must be applied before any other thread starts, but this process has \
         {threads} threads (seccomp and the capability drop would cover only the calling thread)"
    )]
    NotSingleThreaded {
        /// How many threads `/proc/self/status` counted.
        threads: u32,
    },
    /// `/proc/self/status` could not be read to count threads or check the result.
    #[error("reading /proc/self/status: {0}")]
    ProcStatus(#[source] io::Error),
    /// A capability set could not be cleared.
    #[error("dropping capabilities ({step}): {source}")]
    Capabilities {
        /// Which set (`effective`, `bounding`, `ambient`, …).
        step: &'static str,
        /// What the kernel said.
        #[source]
        source: caps::errors::CapsError,
    },
    /// A `prctl` (no-new-privs, dumpable) failed.
    #[error("prctl({op}): {source}")]
    Prctl {
        /// Which one.
        op: &'static str,
        /// What the kernel said.
        #[source]
        source: nix::Error,
    },
    /// The Landlock ruleset could not be built or entered.
    #[error("Landlock: {0}")]
    Landlock(#[from] landlock::RulesetError),
    /// The profile's seccomp filters could not be compiled.
    #[error(transparent)]
    Filter(#[from] FilterError),
    /// The kernel refused a seccomp filter.
    #[error("installing the seccomp filter: {0}")]
    Seccomp(#[from] seccompiler::Error),
    /// The handler that reports a refused syscall could not be installed.
    #[error("installing the SIGSYS reporter: {0}")]
    Sigsys(#[source] io::Error),
}

/// In the worker right after exec: take ownership of an inherited fd, setting `FD_CLOEXEC` at
/// once (so nothing the worker runs inherits its channel) and checking it is a socket.
pub fn adopt_inherited_fd(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: the number is only borrowed for the check; `fcntl` on a closed number fails with
    // EBADF before anything is adopted.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let flags = fcntl(borrowed, FcntlArg::F_GETFD).map_err(io::Error::from)?;
    // SAFETY: the fd is open (F_GETFD succeeded) and was passed to this process for it to own:
    // nothing else in the worker refers to it. From here it is closed on every error path.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    fcntl(
        owned.as_fd(),
        FcntlArg::F_SETFD(FdFlag::from_bits_truncate(flags) | FdFlag::FD_CLOEXEC),
    )
    .map_err(io::Error::from)?;
    let st = fstat(owned.as_fd()).map_err(io::Error::from)?;
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFSOCK {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("inherited fd {fd} is not a socket"),
        ));
    }
    Ok(owned)
}

/// Apply `profile` to the calling process and attest the result.
///
/// Must be called before any other thread exists (checked: `/proc/self/status` `Threads:` must be
/// 1). In order: drop every capability, the bounding set included (which needs `CAP_SETPCAP`;
/// without it the bounding set is left and a note says so), and lock the securebits when
/// possible; `PR_SET_DUMPABLE` 0; `no_new_privs`; Landlock at the best ABI the kernel offers,
/// with the ruleset status checked; for an allow-list, the `SIGSYS` reporter
/// ([`crate::sigsys`]); the seccomp filters of [`crate::seccomp`], the socket policy among them.
/// The attestation is then built by reading the state back from the kernel, not from what was
/// intended: the capability sets and filter count from `/proc/self/status`, and the filters'
/// answers to harmless calls.
pub fn confine_current_process(profile: &SandboxProfile) -> Result<Attestation, ConfineError> {
    // Opened now: after Landlock the process may not open anything under /proc.
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
    nix::sys::prctl::set_dumpable(false).map_err(|source| ConfineError::Prctl {
        op: "PR_SET_DUMPABLE",
        source,
    })?;
    // Landlock and seccomp both need it without CAP_SYS_ADMIN; spawn sets it too.
    nix::sys::prctl::set_no_new_privs().map_err(|source| ConfineError::Prctl {
        op: "PR_SET_NO_NEW_PRIVS",
        source,
    })?;

    let landlock = apply_landlock(profile, &mut notes)?;

    let filters = seccomp::build(profile)?;
    if let Some(list) = filters.allow_list {
        let who: &'static str = Box::leak(
            format!("{} {} ({})", profile.role, kind_of(profile), list.file()).into_boxed_str(),
        );
        crate::sigsys::install(who).map_err(ConfineError::Sigsys)?;
    }
    install_programs(&filters)?;
    // `ps` and `scripts/seccomp-trace.py` tell the confined processes apart by this name (set
    // last, so a trace counts only what the process does under its filters).
    match filters.allow_list {
        Some(list) => set_name(&format!("hz-{}", list.name)),
        None if profile.command_rules() => set_name("hz-launcher"),
        None => {}
    }

    // Read back.
    let after = procfs::reread_status(&status_file).map_err(ConfineError::ProcStatus)?;
    let seccomp = read_back_seccomp(&after, &filters, &mut notes);
    let no_new_privs =
        nix::sys::prctl::get_no_new_privs().map_err(|source| ConfineError::Prctl {
            op: "PR_GET_NO_NEW_PRIVS",
            source,
        })? && after.no_new_privs;
    let non_dumpable = !nix::sys::prctl::get_dumpable().map_err(|source| ConfineError::Prctl {
        op: "PR_GET_DUMPABLE",
        source,
    })?;

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
        helpers: Vec::new(),
    })
}

/// Confine a process that only waits for children and passes on their status (tier B's pid 1
/// and the process waiting for it): no capabilities, not dumpable, `no_new_privs`, an empty
/// Landlock domain (no filesystem at all), and the reaper's allow-list with its `SIGSYS` reporter.
/// Everything is built before the first filter goes in, so nothing allocates afterwards.
pub fn confine_reaper(role: hanzo_ipc::Role) -> Result<(), ConfineError> {
    let profile = hanzo_policy::profile::reaper_profile(role);
    let mut notes = Vec::new();
    drop_capabilities(&mut notes)?;
    nix::sys::prctl::set_dumpable(false).map_err(|source| ConfineError::Prctl {
        op: "PR_SET_DUMPABLE",
        source,
    })?;
    nix::sys::prctl::set_no_new_privs().map_err(|source| ConfineError::Prctl {
        op: "PR_SET_NO_NEW_PRIVS",
        source,
    })?;
    if let Ok(abi) = sys::landlock_abi() {
        // Signals unscoped: pid 1 forwards the terminal's ^C to pid 2's group, and pid 2's
        // domain is not nested in this one (pid 1 confines itself after forking it), so a
        // scoped pid 1 would get EPERM. Pid 1 can name only its own namespace's processes, and
        // its allow-list has no fork, no exec and no file.
        let (_, created) = ruleset_scoped(&profile, abi, &mut notes, false)?;
        created.restrict_self()?;
    }
    let filters = seccomp::build(&profile)?;
    if let Some(list) = filters.allow_list {
        let who: &'static str =
            Box::leak(format!("{} tier-B reaper ({})", role, list.file()).into_boxed_str());
        crate::sigsys::install(who).map_err(ConfineError::Sigsys)?;
        set_name("hz-reaper");
    }
    install_programs(&filters)?;
    // `filters` and `notes` are freed here: munmap/brk are on the reaper's list for that.
    Ok(())
}

/// The calling thread's name (`comm`, at most 15 bytes): what `ps` shows.
fn set_name(name: &str) {
    if let Ok(c) = std::ffi::CString::new(name) {
        let _ = nix::sys::prctl::set_name(&c);
    }
}

/// Install the programs last first: the allow-list (the first program) goes in last, since
/// installing a filter is itself a syscall (`prctl`) an allow-list need not admit. The order does
/// not change what the kernel answers: it evaluates every program and takes the strictest.
fn install_programs(filters: &FilterSet) -> Result<(), ConfineError> {
    for program in filters.programs.iter().rev() {
        seccompiler::apply_filter(program)?;
    }
    Ok(())
}

/// "worker" for a role's own allow-list, else what the process is (the reaper's list).
fn kind_of(profile: &SandboxProfile) -> &'static str {
    match profile.syscalls {
        hanzo_policy::profile::Syscalls::AllowList(l) if l.name == "reaper" => "tier-B reaper",
        _ => "worker",
    }
}

/// Every securebit and its lock: root gets no capabilities on exec or setuid, nor keeps or raises
/// any, and none of this can be undone.
pub const SECUREBITS_LOCKED_NOROOT: libc::c_ulong = 0xef;

/// Drop every capability of the calling (single-threaded) process: the bounding set first while
/// `CAP_SETPCAP` is held, then the securebits, then ambient, inheritable, effective, permitted.
pub(crate) fn drop_capabilities(notes: &mut Vec<String>) -> Result<(), ConfineError> {
    let caps_err = |step| move |source| ConfineError::Capabilities { step, source };
    let setpcap = caps::has_cap(None, CapSet::Effective, Capability::CAP_SETPCAP)
        .map_err(caps_err("reading the effective set"))?;
    if setpcap {
        // The bounding set limits what any later exec can gain; it can only shrink, and only
        // while CAP_SETPCAP is held, so it goes first.
        for cap in caps::runtime::thread_all_supported() {
            caps::drop(None, CapSet::Bounding, cap).map_err(caps_err("bounding set"))?;
        }
        if let Err(e) = sys::set_securebits(SECUREBITS_LOCKED_NOROOT) {
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
    fstat(fd.as_fd())
        .is_ok_and(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFDIR)
}

/// The Landlock ABI this kernel offers as the crate names it (capped at the newest it knows).
pub(crate) fn abi_of(kernel_abi: u32) -> ABI {
    ABI::from(i32::try_from(kernel_abi).unwrap_or(i32::MAX))
}

/// A Landlock ruleset for `profile`'s grants (every right the running kernel can enforce
/// handled, signals and abstract sockets scoped from ABI 6), not yet applied, and the granted
/// paths in words. A command's ruleset becomes an fd (`Option<OwnedFd>::from`) that its pre-exec
/// step enters.
pub fn ruleset_for(
    profile: &SandboxProfile,
    kernel_abi: u32,
    notes: &mut Vec<String>,
) -> Result<(Vec<String>, RulesetCreated), ConfineError> {
    ruleset_scoped(profile, kernel_abi, notes, true)
}

/// [`ruleset_for`], with signals scoped or not (abstract unix sockets always are from ABI 6).
fn ruleset_scoped(
    profile: &SandboxProfile,
    kernel_abi: u32,
    notes: &mut Vec<String>,
    scope_signals: bool,
) -> Result<(Vec<String>, RulesetCreated), ConfineError> {
    // Every right the running kernel can enforce (capped at the newest ABI this build knows), so
    // the status can honestly be "fully enforced": asking for rights the kernel lacks would
    // always yield "partially".
    let abi = abi_of(kernel_abi);
    let all = AccessFs::from_all(abi);
    let read_exec = AccessFs::from_read(abi);
    let file_rights = AccessFs::from_file(abi);

    let mut ruleset = Ruleset::default().handle_access(all)?;
    // Without network rules, TCP bind/connect are refused for roles that may not use inet (on top
    // of seccomp).
    let inet_allowed = matches!(profile.sockets, SocketPolicy::Any | SocketPolicy::InetOnly);
    if !inet_allowed && abi >= ABI::V4 {
        ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
    }
    if abi >= ABI::V6 {
        // No connecting to abstract unix sockets and no signals outside the sandbox's domain.
        let mut scopes = Scope::from_all(abi);
        if !scope_signals {
            scopes.remove(Scope::Signal);
        }
        ruleset = ruleset.scope(scopes)?;
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
    Ok((grants, created))
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
    let scoped = abi_of(kernel_abi) >= ABI::V6;
    let (grants, created) = ruleset_for(profile, kernel_abi, notes)?;
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

/// What the filters actually do, checked with harmless calls: `Seccomp: 2` and the filter count
/// from the kernel; `socket(AF_UNIX)` and `socket(AF_INET)` (closed at once) for the socket
/// policy; `clone3(NULL, 0)` refused with `ENOSYS` (the kernel alone would say `EINVAL`); an x32
/// `getpid` refused; `syslog(SIZE_BUFFER)` — on every deny list — *trapped* (a deny list refuses
/// with `EPERM`; only an allow-list's mismatch traps); `ioctl(TIOCSTI)` on a pipe refused with
/// `EPERM` (the kernel alone says `ENOTTY`) for the command rules.
fn read_back_seccomp(
    after: &ProcStatus,
    filters: &FilterSet,
    notes: &mut Vec<String>,
) -> SeccompAttestation {
    let installed = after.seccomp_mode == 2;
    // Calls outside an allow-list trap: record them instead of stopping.
    let probe = filters.allow_list.map(|_| crate::sigsys::probing());
    let trapped = |probe: &Option<crate::sigsys::Probing>| probe.as_ref().and_then(|p| p.take());

    let may_create = |family: AddressFamily, probe: &Option<crate::sigsys::Probing>| {
        let r = socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None);
        if trapped(probe).is_some() {
            // The "result" of a trapped call is meaningless; nothing was created.
            std::mem::forget(r);
            return false;
        }
        r.is_ok()
    };
    let unix = may_create(AddressFamily::Unix, &probe);
    let inet = may_create(AddressFamily::Inet, &probe);
    let sockets = match (unix, inet) {
        (true, true) => SocketPolicy::Any,
        (true, false) => SocketPolicy::UnixOnly,
        (false, true) => SocketPolicy::InetOnly,
        (false, false) => SocketPolicy::None,
    };
    if sockets != filters.sockets {
        notes.push(format!(
            "socket check: expected {:?}, found {:?}",
            filters.sockets, sockets
        ));
    }

    let clone3_refused = sys::clone3_probe_refused_with_enosys() && trapped(&probe).is_none();
    let namespace_creation_denied = filters.namespace_creation_denied && clone3_refused;
    if filters.namespace_creation_denied && !clone3_refused {
        notes.push("clone3 is not refused by the filter".to_string());
    }

    let x32_refused = sys::x32_getpid_refused();
    let x32_denied = filters.x32_denied && (x32_refused || trapped(&probe).is_some());
    if filters.x32_denied && !x32_denied {
        notes.push("x32 syscall numbers are not refused by the filter".to_string());
    }

    let allow_list = filters.allow_list.and_then(|list| {
        let errno = sys::syslog_size_probe();
        if trapped(&probe).is_some() {
            Some(AllowListAttestation {
                name: list.name.to_string(),
                syscalls: u32::try_from(list.syscalls.len()).unwrap_or(u32::MAX),
                digest: list.digest(),
            })
        } else {
            notes.push(format!(
                "the allow-list does not trap a syscall outside it (syslog answered {})",
                sys::errno_name(errno)
            ));
            None
        }
    });

    let command_rules = filters.command_rules && sys::tiocsti_refused_with_eperm();
    if filters.command_rules && !command_rules {
        notes.push("ioctl(TIOCSTI) is not refused by the filter".to_string());
    }
    drop(probe);

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
        allow_list,
        command_rules,
        filters: after.seccomp_filters,
    }
}
