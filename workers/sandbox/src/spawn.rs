//! What happens between `fork` and `exec` of a worker (or, later, of a command): inherited fds
//! moved to their numbers, a new session, the parent-death signal, fd hygiene, rlimits and
//! `no_new_privs`.
//!
//! The hook runs in the forked child of a possibly multi-threaded parent, so it uses raw,
//! async-signal-safe libc calls only and allocates nothing.

use hanzo_policy::profile::Rlimits;
use std::io;
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Exit status of a child whose parent died between `fork` and the parent-death signal being set:
/// it exits before `exec` rather than live on as an orphan.
pub const PARENT_DIED_EXIT_CODE: i32 = 117;

/// Configuration applied between fork and exec of a worker (or later, a command).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildSetup {
    /// (source fd in the parent, target fd number in the child), e.g. `[(sock, 3), (sock2, 4)]`.
    pub fds: Vec<(RawFd, RawFd)>,
    pub rlimits: Rlimits,
    /// pid of the process that spawns (`std::process::id()` at spawn time); if the child's
    /// `getppid()` differs after setting `PDEATHSIG`, the parent already died: `_exit(117)`.
    pub parent_pid: i32,
    pub new_session: bool,
}

/// `CLOSE_RANGE_CLOEXEC` from `<linux/close_range.h>` (Linux 5.11).
const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;

/// Install a `pre_exec` hook on `cmd` doing, with raw async-signal-safe libc calls and no
/// allocation, in this order:
///
/// 1. each `(source, target)` fd duplicated to `target` with `FD_CLOEXEC` clear — also when
///    `source == target`, and correct when one pair's source is another pair's target;
/// 2. `setsid` when `new_session`;
/// 3. `prctl(PR_SET_PDEATHSIG, SIGKILL)`, then `getppid() != parent_pid` → `_exit(117)`;
/// 4. every other fd above 2 marked close-on-exec (`close_range(…, CLOSE_RANGE_CLOEXEC)`, falling
///    back to a loop), so all of them are closed by the `exec` itself. Marking rather than closing
///    keeps std's own exec-error pipe working until the `exec`, so a failed `exec` is still
///    reported to the parent as an error;
/// 5. `setrlimit`: `RLIMIT_CORE` (from the profile, 0), `RLIMIT_NOFILE` (soft = hard = the
///    profile's value, clamped to the current hard limit), `RLIMIT_FSIZE` when set;
/// 6. `prctl(PR_SET_NO_NEW_PRIVS, 1)`.
///
/// The parent-death signal belongs to the *thread* that forks: spawn from a thread that lives as
/// long as the children should.
pub fn configure_command(cmd: &mut Command, setup: ChildSetup) {
    let max_target = setup
        .fds
        .iter()
        .map(|&(_, target)| target)
        .max()
        .unwrap_or(2)
        .max(2);
    // Allocated here, in the parent: the hook only writes into it.
    let mut scratch: Vec<RawFd> = vec![-1; setup.fds.len()];
    let hook = move || child_setup(&setup, &mut scratch, max_target);
    // SAFETY: `child_setup` only makes async-signal-safe system calls (fcntl, dup2, setsid, prctl,
    // getppid, syscall(close_range), getrlimit/setrlimit, _exit), allocates nothing (the scratch
    // buffer was allocated before the fork) and touches no lock, which is what `pre_exec` requires.
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// The body of the pre-exec hook. Runs in the child only.
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

    // 2. A new session: no controlling terminal, not in the supervisor's process group, so a
    // terminal's ^C reaches the supervisor only and it decides what the workers do.
    // SAFETY: setsid takes no arguments.
    if setup.new_session && unsafe { libc::setsid() } < 0 {
        return Err(io::Error::last_os_error());
    }

    // 3. Die with the parent. The parent may already have died before the prctl: then we have
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

    // 4. Fd hygiene: nothing but 0-2 and the targets survives the exec.
    for fd in 3..=max_target {
        if !setup.fds.iter().any(|&(_, target)| target == fd) {
            set_cloexec(fd);
        }
    }
    let first = (max_target + 1) as libc::c_uint;
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

    // 5. Resource limits.
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

    // 6. Nothing exec'd from here on can gain privileges (setuid bits, file capabilities).
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integers only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } < 0 {
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

/// Run `setup` in the child between `fork` and `exec` of `cmd`, for a caller that is
/// single-threaded (checked now; it must stay so until `spawn`). Unlike [`configure_command`]'s
/// hook, `setup` may allocate and use std freely: the child of a single-threaded process is a
/// complete copy, with no lock held by a thread that did not come along. What it is for:
/// confining the child only (Landlock, seccomp), so that the parent stays free to clean up after
/// it (the one-shot sandbox removes its private directory, which Landlock would forbid).
pub fn in_child_of_single_threaded(
    cmd: &mut Command,
    setup: impl FnMut() -> io::Result<()> + Send + Sync + 'static,
) -> io::Result<()> {
    let threads = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|v| v.trim().parse::<u32>().ok())
        })
        .unwrap_or(0);
    if threads != 1 {
        return Err(io::Error::other(
            "a child set-up that allocates needs a single-threaded parent",
        ));
    }
    // SAFETY: the parent is single-threaded (checked above, and the caller keeps it so until
    // spawn), so the forked child is a complete copy of it: allocation, locks and std are as
    // usable as in the parent.
    unsafe {
        cmd.pre_exec(setup);
    }
    Ok(())
}
