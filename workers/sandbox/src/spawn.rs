//! What happens between `fork` and `exec` of a worker or a command: inherited fds moved to their
//! numbers, the cgroups joined, a new session, the parent-death signal, fd hygiene, rlimits,
//! `no_new_privs`, and for a command its keeper and its own confinement (capabilities dropped, a
//! Landlock domain, seccomp filters) — in one hook, [`configure`], so every spawn gets the same
//! steps in the same order.
//!
//! The hook runs in the forked child of a possibly multi-threaded parent, so it uses raw,
//! async-signal-safe libc calls only and allocates nothing: everything it needs (rulesets,
//! compiled filters, scratch space) is built in the parent first.

use crate::keeper::KeeperPlan;
use crate::seccomp::{self, FilterError};
use hanzo_policy::profile::{CommandLimits, Rlimits, SandboxProfile};
use seccompiler::BpfProgram;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::Arc;

/// Exit status of a child whose parent died between `fork` and the parent-death signal being set:
/// it exits before `exec` rather than live on as an orphan.
pub const PARENT_DIED_EXIT_CODE: i32 = 117;

/// Configuration applied between fork and exec of a worker or a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildSetup {
    /// (source fd in the parent, target fd number in the child), e.g. `[(sock, 3), (sock2, 4)]`.
    pub fds: Vec<(RawFd, RawFd)>,
    /// Resource limits set in the child before exec.
    pub rlimits: Rlimits,
    /// pid of the process that spawns (`std::process::id()` at spawn time); if the child's
    /// `getppid()` differs after setting `PDEATHSIG`, the parent already died: `_exit(117)`.
    pub parent_pid: i32,
    /// Whether the child starts a session of its own (`setsid`), leaving the terminal behind.
    pub new_session: bool,
    /// `cgroup.procs` files (opened for writing by the parent) the child joins first, so that it
    /// and everything it ever starts are counted from its first instruction.
    pub join_cgroups: Vec<RawFd>,
}

/// A command's own confinement, compiled in the parent and entered by the child before `exec`:
/// every capability dropped (the bounding set too, and securebits locked, when the spawner holds
/// `CAP_SETPCAP`), a Landlock domain, and seccomp filters.
#[derive(Debug)]
pub struct CommandConfinement {
    ruleset: Option<OwnedFd>,
    programs: Vec<BpfProgram>,
    /// The granted paths, in words (what the ruleset holds).
    pub grants: Vec<String>,
}

/// Why a command's confinement could not be compiled.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// Landlock is absent (the errno of the probe).
    #[error(
        "Landlock is unavailable on this kernel (errno {0}): a command would reach every file"
    )]
    NoLandlock(i32),
    /// The capability or prctl part failed.
    #[error(transparent)]
    Confine(#[from] crate::confine::ConfineError),
    /// The seccomp filters could not be compiled.
    #[error(transparent)]
    Filter(#[from] FilterError),
}

impl CommandConfinement {
    /// The confinement of `profile` on its own: its Landlock ruleset and every one of its filters
    /// (for a command spawned by an unconfined process: the one-shot sandbox).
    pub fn full(profile: &SandboxProfile) -> Result<CommandConfinement, CompileError> {
        let set = seccomp::build(profile)?;
        Self::with_programs(profile, set.programs)
    }

    /// The confinement of `profile` nested in `parent`'s, which the spawning process already
    /// carries: its own Landlock ruleset (the kernel intersects it with the parent's) and only
    /// the filters that are stricter than the parent's.
    pub fn nested(
        profile: &SandboxProfile,
        parent: &SandboxProfile,
    ) -> Result<CommandConfinement, CompileError> {
        let programs = seccomp::nested_programs(profile, parent)?;
        Self::with_programs(profile, programs)
    }

    fn with_programs(
        profile: &SandboxProfile,
        programs: Vec<BpfProgram>,
    ) -> Result<CommandConfinement, CompileError> {
        let abi = crate::sys::landlock_abi().map_err(CompileError::NoLandlock)?;
        let mut notes = Vec::new();
        let (grants, created) = crate::confine::ruleset_for(profile, abi, &mut notes)?;
        Ok(CommandConfinement {
            ruleset: created.into(),
            programs,
            grants,
        })
    }
}

/// Everything one spawn gets. `keeper`: run the command under a keeper (see
/// [`crate::keeper`]); `confinement`: confine the command itself.
#[derive(Debug, Default)]
pub struct SpawnPlan {
    /// What the child sets up between fork and exec (fds, limits, parent-death signal).
    pub setup: Option<ChildSetup>,
    /// A keeper that kills the command's whole tree when asked or when we die.
    pub keeper: Option<KeeperPlan>,
    /// The command's own confinement, entered just before exec.
    pub confinement: Option<Arc<CommandConfinement>>,
}

/// `CLOSE_RANGE_CLOEXEC` from `<linux/close_range.h>` (Linux 5.11).
const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;

/// Install the pre-exec hook of a worker (no keeper, no confinement of its own: the worker
/// confines itself after exec). See [`configure`].
pub fn configure_command(cmd: &mut Command, setup: ChildSetup) {
    configure(
        cmd,
        SpawnPlan {
            setup: Some(setup),
            keeper: None,
            confinement: None,
        },
    );
}

/// Install one `pre_exec` hook on `cmd` doing, with raw async-signal-safe libc calls and no
/// allocation, in this order:
///
/// 1. each `(source, target)` fd duplicated to `target` with `FD_CLOEXEC` clear — also when
///    `source == target`, and correct when one pair's source is another pair's target;
/// 2. every cgroup in `join_cgroups` joined (`0` written to its `cgroup.procs`);
/// 3. `setsid` when `new_session` (no controlling terminal: nothing it runs can push input into
///    the caller's terminal);
/// 4. `prctl(PR_SET_PDEATHSIG, SIGKILL)`, then `getppid() != parent_pid` → `_exit(117)`;
/// 5. every other fd above 2 marked close-on-exec (`close_range(…, CLOSE_RANGE_CLOEXEC)`, falling
///    back to a loop), so all of them are closed by the `exec` itself. Marking rather than closing
///    keeps std's own exec-error pipe working until the `exec`, so a failed `exec` is still
///    reported to the parent as an error;
/// 6. `setrlimit`: `RLIMIT_CORE` (from the profile, 0), `RLIMIT_NOFILE` (soft = hard = the
///    profile's value, clamped to the current hard limit), `RLIMIT_FSIZE` when set;
/// 7. `prctl(PR_SET_NO_NEW_PRIVS, 1)`;
/// 8. with a confinement: every capability dropped (bounding set and securebits when permitted);
/// 9. with a keeper: the keeper forks the command (see [`crate::keeper`]) and never returns; the
///    command enters its own Landlock domain (the confinement's, or the keeper's scope again);
///    without a keeper, the process itself enters the confinement's domain;
/// 10. the confinement's seccomp filters.
///
/// The parent-death signal belongs to the *thread* that forks: spawn from a thread that lives as
/// long as the children should.
pub fn configure(cmd: &mut Command, plan: SpawnPlan) {
    let setup = plan.setup;
    let max_target = setup
        .as_ref()
        .and_then(|s| s.fds.iter().map(|&(_, target)| target).max())
        .unwrap_or(2)
        .max(2);
    // Allocated here, in the parent: the hook only writes into it.
    let mut scratch: Vec<RawFd> = vec![-1; setup.as_ref().map_or(0, |s| s.fds.len())];
    let keeper = plan.keeper;
    let confinement = plan.confinement;
    let hook = move || {
        if let Some(setup) = &setup {
            child_setup(setup, &mut scratch, max_target)?;
        }
        if let Some(c) = &confinement {
            drop_capabilities_raw()?;
            let command_ruleset = c.ruleset.as_ref().map(|r| r.as_raw_fd());
            match &keeper {
                Some(k) => crate::keeper::fork_keeper(k, command_ruleset)?,
                None => {
                    if let Some(r) = command_ruleset {
                        if crate::sys::landlock_restrict_self_raw(r) < 0 {
                            return Err(io::Error::last_os_error());
                        }
                    }
                }
            }
            for program in &c.programs {
                install_filter_raw(program)?;
            }
        } else if let Some(k) = &keeper {
            no_new_privs()?;
            crate::keeper::fork_keeper(k, None)?;
        }
        Ok(())
    };
    // SAFETY: the hook only makes async-signal-safe system calls (fcntl, dup2, write, setsid,
    // prctl, getppid, close_range, getrlimit/setrlimit, capset, landlock_restrict_self, clone,
    // poll, wait4, kill, seccomp, _exit), allocates nothing (the scratch buffer, rulesets and
    // filters were made before the fork and only read) and touches no lock, which is what
    // `pre_exec` requires.
    unsafe {
        cmd.pre_exec(hook);
    }
}

fn no_new_privs() -> io::Result<()> {
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integers only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The body of the pre-exec steps 1–7. Runs in the child only.
fn child_setup(setup: &ChildSetup, scratch: &mut [RawFd], max_target: RawFd) -> io::Result<()> {
    // 1. Inherited fds. First move every source above all targets (close-on-exec copies), then
    // put each copy on its target: no target can overwrite a source still needed, and `dup2`
    // clears FD_CLOEXEC on the target even when source and target were the same number.
    for (slot, &(source, _)) in scratch.iter_mut().zip(&setup.fds) {
        // SAFETY: fcntl(F_DUPFD_CLOEXEC) on any integer is memory-safe; a bad fd yields EBADF.
        let copy = unsafe { libc::fcntl(source, libc::F_DUPFD_CLOEXEC, max_target + 1) };
        if copy < 0 {
            return Err(io::Error::last_os_error());
        }
        *slot = copy;
    }
    for (&copy, &(_, target)) in scratch.iter().zip(&setup.fds) {
        // SAFETY: dup2 of an fd we own onto a number; the old fd at `target` (if any) is ours.
        if unsafe { libc::dup2(copy, target) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }

    // 2. The cgroups, before anything else can fork.
    for &procs in &setup.join_cgroups {
        // SAFETY: write reads one byte from a static string; "0" means "the writing process".
        if unsafe { libc::write(procs, b"0".as_ptr().cast(), 1) } != 1 {
            return Err(io::Error::last_os_error());
        }
    }

    // 3. A new session: no controlling terminal, not in the caller's process group, so a
    // terminal's ^C reaches the caller only and it decides what its children do, and TIOCSTI has
    // no terminal to push into.
    // SAFETY: setsid takes no arguments.
    if setup.new_session && unsafe { libc::setsid() } < 0 {
        return Err(io::Error::last_os_error());
    }

    // 4. Die with the parent. The parent may already have died before the prctl: then we have
    // been re-parented and must not go on.
    // SAFETY: PR_SET_PDEATHSIG takes a signal number and no pointers.
    if unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        )
    } < 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: getppid takes no arguments and cannot fail.
    if unsafe { libc::getppid() } != setup.parent_pid {
        // SAFETY: _exit is async-signal-safe and never returns.
        unsafe { libc::_exit(PARENT_DIED_EXIT_CODE) };
    }

    // 5. Fd hygiene: nothing but 0-2 and the targets survives the exec.
    for fd in 3..=max_target {
        if !setup.fds.iter().any(|&(_, target)| target == fd) {
            set_cloexec(fd);
        }
    }
    let first = (max_target + 1).unsigned_abs();
    // SAFETY: close_range with the CLOEXEC flag only changes fd flags in our own table.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        )
    };
    if r < 0 {
        // Kernels before 5.11 (ENOSYS / EINVAL for the flag): walk the table up to the limit.
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the rlimit we pass.
        let upper = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
            lim.rlim_cur.min(1 << 20) as RawFd
        } else {
            65536
        };
        for fd in (max_target + 1)..upper {
            set_cloexec(fd);
        }
    }

    // 6. Resource limits.
    set_rlimit(libc::RLIMIT_CORE, setup.rlimits.core)?;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the rlimit we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // Raising the hard limit needs CAP_SYS_RESOURCE; a lower one is always allowed.
    set_rlimit(libc::RLIMIT_NOFILE, setup.rlimits.nofile.min(lim.rlim_max))?;
    if let Some(fsize) = setup.rlimits.fsize {
        set_rlimit(libc::RLIMIT_FSIZE, fsize)?;
    }

    // 7. Nothing exec'd from here on can gain privileges (setuid bits, file capabilities).
    no_new_privs()
}

/// Step 8: every capability gone, so that a command run as root is not root in any way that
/// matters. The bounding set and the securebits can only be changed while `CAP_SETPCAP` is held
/// (a spawner that has dropped it has no capabilities to pass on anyway).
fn drop_capabilities_raw() -> io::Result<()> {
    #[repr(C)]
    struct CapHeader {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct CapData {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    const CAP_SETPCAP: libc::c_ulong = 8;
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut current = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capget writes a v3 header's two data structs into the array we own.
    let got = unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut header as *mut CapHeader,
            current.as_mut_ptr(),
        )
    };
    let setpcap = got == 0 && current[0].effective & (1 << CAP_SETPCAP) != 0;
    if setpcap {
        // Capability numbers run from 0 to the kernel's last without a gap, so the first one it
        // does not know (EINVAL) ends the loop (about 23 syscalls fewer than trying all 64 on a
        // current kernel; the attestation checks that the bounding set came out empty).
        for cap in 0..64 {
            // SAFETY: PR_CAPBSET_DROP takes a capability number; unknown numbers fail (EINVAL).
            if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } < 0
                && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL)
            {
                break;
            }
        }
        // SAFETY: PR_SET_SECUREBITS takes an integer only.
        if unsafe {
            libc::prctl(
                libc::PR_SET_SECUREBITS,
                crate::confine::SECUREBITS_LOCKED_NOROOT,
                0,
                0,
                0,
            )
        } < 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: PR_CAP_AMBIENT_CLEAR_ALL takes integers only.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    let none = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capset reads a v3 header and two data structs, both valid for the call; clearing
    // every set is always permitted.
    if unsafe {
        libc::syscall(
            libc::SYS_capset,
            &mut header as *mut CapHeader,
            none.as_ptr(),
        )
    } < 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Step 10: one seccomp program, installed with the raw call (seccompiler's `apply_filter` is
/// not documented as async-signal-safe). `no_new_privs` is set (step 7).
fn install_filter_raw(program: &BpfProgram) -> io::Result<()> {
    let fprog = libc::sock_fprog {
        // The kernel takes at most BPF_MAXINSNS (4096) instructions.
        len: libc::c_ushort::try_from(program.len())
            .map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?,
        filter: program.as_ptr().cast_mut().cast(),
    };
    // SAFETY: seccomp(SET_MODE_FILTER) reads `fprog` and the `len` instructions it points to,
    // which live in `program` (allocated before the fork) for the duration of the call;
    // seccompiler's `sock_filter` has the kernel's layout.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0u32,
            &fprog as *const libc::sock_fprog,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets `FD_CLOEXEC` on `fd` if it is open; a closed number is left alone.
fn set_cloexec(fd: RawFd) {
    // SAFETY: F_GETFD/F_SETFD on an integer are memory-safe; a closed fd yields EBADF.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
            libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
        }
    }
}

#[cfg(target_env = "gnu")]
type RlimitResource = libc::__rlimit_resource_t;
#[cfg(not(target_env = "gnu"))]
type RlimitResource = libc::c_int;

/// Sets soft and hard limit of `resource` to `value`.
fn set_rlimit(resource: RlimitResource, value: u64) -> io::Result<()> {
    let lim = libc::rlimit {
        rlim_cur: value as libc::rlim_t,
        rlim_max: value as libc::rlim_t,
    };
    // SAFETY: setrlimit reads the rlimit we pass.
    if unsafe { libc::setrlimit(resource, &lim) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Lowers this process's process-count and address-space limits (soft and hard) to
/// `limits`' (`CommandLimits::processes`, `CommandLimits::address_space`), so that everything
/// it starts inherits them and none can raise them. A limit is never raised. Called by the
/// process that forks commands (the tools worker, the one-shot `sandbox`) before it is confined.
pub fn lower_process_limits(limits: &CommandLimits) -> nix::Result<()> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let lower = |res: Resource, want: Option<u64>| -> nix::Result<()> {
        let Some(want) = want else { return Ok(()) };
        let (_, hard) = getrlimit(res)?;
        let v = want.min(hard);
        setrlimit(res, v, v)
    };
    lower(Resource::RLIMIT_NPROC, limits.processes)?;
    lower(Resource::RLIMIT_AS, limits.address_space)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::resource::{getrlimit, Resource};

    // nextest runs each test in a process of its own, so lowering this one's limits is contained.
    #[test]
    fn process_limits_are_lowered_to_the_declared_values_and_never_raised() {
        let (_, hard) = getrlimit(Resource::RLIMIT_NPROC).expect("getrlimit");
        let want = hard.min(1 << 20) - 1;
        let limits = CommandLimits {
            processes: Some(want),
            address_space: None,
            ..CommandLimits::default()
        };
        lower_process_limits(&limits).expect("lower");
        assert_eq!(
            getrlimit(Resource::RLIMIT_NPROC).expect("getrlimit"),
            (want, want)
        );
        let (as_before, _) = getrlimit(Resource::RLIMIT_AS).expect("getrlimit");
        // Asking for more than the current hard limit leaves it where it is.
        let higher = CommandLimits {
            processes: Some(want + 100),
            ..limits
        };
        lower_process_limits(&higher).expect("lower again");
        assert_eq!(
            getrlimit(Resource::RLIMIT_NPROC).expect("getrlimit"),
            (want, want)
        );
        assert_eq!(
            getrlimit(Resource::RLIMIT_AS).expect("getrlimit").0,
            as_before
        );
    }
}
