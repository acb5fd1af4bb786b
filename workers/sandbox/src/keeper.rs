//! A keeper per command: the process that kills *everything* a command started — including
//! descendants that left its process group or session (`setsid`, `setpgid`, a double-forked
//! daemon) — when told to, when the command exits, or when the process that ran it dies.
//!
//! Why this design (and not the alternatives):
//!
//! - **Process groups** are chosen by the command: one `setsid` and `killpg` misses it.
//! - **Walking the descendant tree** (`/proc/<pid>/task/*/children`, freezing with `SIGSTOP`
//!   first) needs `/proc`, which Landlock keeps out of the tools role's reach; and a daemon that
//!   double-forks is re-parented out of the tree before anyone looks.
//! - **A per-command pids cgroup** needs write access to cgroupfs in the worker; commands inherit
//!   the worker's Landlock, so they could move themselves out of it again.
//! - **A per-command pid namespace** needs `unshare`/`clone(CLONE_NEWPID)` after the worker's
//!   seccomp filter forbids both (and the worker has no capabilities left to use them).
//!
//! What a command cannot leave is its **Landlock domain**: it is inherited across `fork`,
//! `setsid` and re-parenting, and never removed. With Landlock's signal scoping (ABI 6,
//! `LANDLOCK_SCOPE_SIGNAL`) a process can signal only processes of its own domain or of domains
//! nested inside it. So, between the worker's `fork` and the command's `exec`:
//!
//! 1. the forked child enters a fresh scoped domain `K` (nested in the worker's) and becomes a
//!    child subreaper: this is the keeper;
//! 2. it forks again; that child enters a further domain `C` nested in `K` and goes on to `exec`
//!    the command. Everything the command ever starts is in `C` (or deeper);
//! 3. the keeper keeps only its end of a "kill" pipe, and waits for the command to exit or the
//!    pipe to become readable or hung up (the worker writes, closes it, or dies);
//! 4. then it sends `kill(-1, SIGKILL)`, which the kernel delivers to every process the keeper
//!    may signal — exactly `C` and below: not the keeper itself, not its parent domain (the
//!    worker), not another command's domain (a sibling), not the supervisor. It repeats this and
//!    reaps (orphans come to it, a subreaper, so every process of `C` is in its subtree) until no
//!    child is left, then exits with the command's own status.
//!
//! `kill(-1)` walks the task list under `tasklist_lock`, and `fork` attaches a child under the
//! same lock and fails when the parent has a fatal signal pending, so a process forking during
//! the sweep cannot leave an unsignalled child behind; no freezing is needed. The command cannot
//! kill its keeper (the keeper's domain is outside the command's), cannot `ptrace` it (seccomp)
//! and holds no copy of the kill pipe (close-on-exec).
//!
//! Without signal scoping (Landlock ABI < 6 or Landlock off) `kill(-1)` would reach every
//! process of the user: [`Keeper::new`] then fails and the caller falls back to killing the
//! process group (and, in tier B, to the pid namespace ending with the worker).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// `LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET` from `<linux/landlock.h>`.
const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
/// `LANDLOCK_SCOPE_SIGNAL`.
const SCOPE_SIGNAL: u64 = 1 << 1;
/// The first Landlock ABI with scopes.
pub const MIN_ABI: u32 = 6;
/// How many sweeps (about 1 ms apart after the first few) before the keeper gives up waiting for
/// a process stuck in the kernel to die.
const MAX_SWEEPS: u32 = 10_000;

/// `struct landlock_ruleset_attr` (ABI 6 layout).
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum KeeperError {
    #[error("Landlock signal scoping needs ABI {MIN_ABI}; this kernel has {0}")]
    OldAbi(u32),
    #[error("Landlock is unavailable (errno {0})")]
    NoLandlock(i32),
    #[error("creating the scoped Landlock ruleset: {0}")]
    Create(#[source] io::Error),
}

/// A scoped, otherwise empty Landlock ruleset, created once and entered by every keeper and
/// command (each `landlock_restrict_self` with it adds one nested domain).
#[derive(Debug)]
pub struct Keeper {
    ruleset: OwnedFd,
}

/// The worker's end of one keeper's kill pipe. Firing it (or dropping it) makes the keeper kill
/// everything the command started, then exit.
#[derive(Debug)]
pub struct KillSwitch {
    fd: Option<OwnedFd>,
}

impl KillSwitch {
    /// Tell the keeper to kill now (close our end: the keeper sees the hang-up).
    pub fn fire(&mut self) {
        self.fd.take();
    }
}

impl Drop for KillSwitch {
    fn drop(&mut self) {
        self.fire();
    }
}

impl Keeper {
    /// The ruleset, when this kernel scopes signals by Landlock domain.
    pub fn new() -> Result<Keeper, KeeperError> {
        let abi = crate::sys::landlock_abi().map_err(KeeperError::NoLandlock)?;
        if abi < MIN_ABI {
            return Err(KeeperError::OldAbi(abi));
        }
        let attr = RulesetAttr {
            handled_access_fs: 0,
            handled_access_net: 0,
            scoped: SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX_SOCKET,
        };
        // SAFETY: the kernel reads `size_of::<RulesetAttr>()` bytes from a live struct we own.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                &attr as *const RulesetAttr,
                std::mem::size_of::<RulesetAttr>(),
                0u32,
            )
        };
        if fd < 0 {
            return Err(KeeperError::Create(io::Error::last_os_error()));
        }
        // SAFETY: the kernel just returned this fd (close-on-exec) and nothing else owns it.
        let ruleset = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        Ok(Keeper { ruleset })
    }

    /// Make `cmd` run under a keeper (see the module documentation): the spawned process is the
    /// keeper, whose exit status is the command's (exit code, or death by the same signal), and
    /// which exits only once every process of the command is gone. Install after every other
    /// pre-exec step that should apply to the keeper too (`configure_command`): this hook forks.
    ///
    /// Do not kill the spawned process yourself (no `kill_on_drop`, no `killpg`): fire the switch
    /// and wait for it.
    pub fn attach(&self, cmd: &mut Command) -> io::Result<KillSwitch> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: pipe2 writes two fds into the array we own.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both fds were just created and are owned by nothing else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        self.attach_to(cmd, read);
        Ok(KillSwitch { fd: Some(write) })
    }

    /// Like [`attach`](Self::attach), with `control` (one end of a socket pair whose other end
    /// the caller keeps) as the keeper's line: the keeper sweeps when the other end is shut down
    /// for writing or closed, and before it exits sends one message on it: `S` and the command's
    /// wait status (4 bytes, native order). For a caller that is not the keeper's parent and so
    /// cannot `wait` for it (the tier-B command launcher's client).
    pub fn attach_to(&self, cmd: &mut Command, control: OwnedFd) {
        let ruleset = self.ruleset.as_raw_fd();
        // The closure owns the keeper's end, so the caller's copy closes with the `Command`.
        let hook = move || keeper_fork(ruleset, control.as_raw_fd());
        // SAFETY: `keeper_fork` makes only async-signal-safe raw system calls (landlock, prctl,
        // clone, sigprocmask, close_range, poll, wait4, kill, nanosleep, _exit), allocates
        // nothing and takes no lock; the ruleset fd outlives the `Command` (it lives in `self`,
        // which the caller keeps across spawn).
        unsafe {
            cmd.pre_exec(hook);
        }
    }
}

fn restrict_self(ruleset: RawFd) -> io::Result<()> {
    // SAFETY: landlock_restrict_self takes an fd and flags, no pointers.
    if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The pre-exec hook: returns `Ok` in the command's process (which std then `exec`s); the keeper
/// never returns.
fn keeper_fork(ruleset: RawFd, kill: RawFd) -> io::Result<()> {
    // Entering a domain needs no_new_privs (or CAP_SYS_ADMIN); set it here too, for callers that
    // spawn without `configure_command`.
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integers only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    restrict_self(ruleset)?;
    // SAFETY: prctl options taking integers only.
    unsafe {
        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0 {
            return Err(io::Error::last_os_error());
        }
        // The keeper must outlive a dying worker long enough to sweep: the closed pipe tells it.
        libc::prctl(libc::PR_SET_PDEATHSIG, 0, 0, 0, 0);
        // A parent that reaps automatically (SIGCHLD ignored) must not pass that on: the keeper
        // waits for its children, and the command's shell for its own.
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
    }
    // A raw clone, not glibc's fork: this process is the child of a multi-threaded one, and
    // fork's atfork handlers may wait for locks that a vanished thread held. With no stack and
    // no thread pointers, the argument order (which differs by architecture) does not matter.
    // SAFETY: a fork-like clone; the child continues on a copy of this stack.
    let pid = unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_ulong, 0, 0, 0, 0) };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // The command: a domain nested in the keeper's, so it can never signal the keeper.
        restrict_self(ruleset)?;
        return Ok(());
    }
    keeper_main(pid as libc::pid_t, kill)
}

/// The keeper's whole life (see the module documentation).
fn keeper_main(command: libc::pid_t, kill: RawFd) -> ! {
    // Keep nothing but the kill pipe: not the command's output pipe (its reader waits for EOF),
    // not std's exec-error pipe, not another command's kill pipe forked along with us.
    // SAFETY: close_range closes fds of our own table.
    unsafe {
        if kill > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, (kill - 1) as u32, 0u32);
        }
        libc::syscall(libc::SYS_close_range, (kill + 1) as u32, u32::MAX, 0u32);
    }
    // SAFETY: pidfd_open takes a pid and flags; failure (old kernel) leaves us polling on a timer.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, command, 0u32) } as RawFd;
    let mut status: Option<libc::c_int> = None;
    loop {
        let mut fds = [
            libc::pollfd {
                fd: kill,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: pidfd,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let nfds = if pidfd >= 0 { 2 } else { 1 };
        // Orphans of the command come to us while it runs: reap them every 100 ms.
        let timeout = if pidfd >= 0 { 100 } else { 10 };
        // SAFETY: poll reads and writes the array we own, of `nfds` entries.
        unsafe { libc::poll(fds.as_mut_ptr(), nfds, timeout) };
        reap(command, &mut status);
        // Readable (a byte, end-of-file after a shutdown) or hung up: sweep now.
        if status.is_some() || fds[0].revents != 0 {
            break;
        }
    }
    sweep(command, &mut status);
    let status = status.unwrap_or(libc::SIGKILL);
    // For a socket line (`attach_to`): the status, before exiting. On a pipe this fails (ENOTSOCK).
    let mut msg = [0u8; 5];
    msg[0] = b'S';
    msg[1..].copy_from_slice(&status.to_ne_bytes());
    // SAFETY: send reads our 5-byte buffer; MSG_NOSIGNAL: no SIGPIPE if the reader is gone.
    unsafe { libc::send(kill, msg.as_ptr().cast(), msg.len(), libc::MSG_NOSIGNAL) };
    exit_like(status)
}

/// Reap every child that has ended, keeping the command's status.
fn reap(command: libc::pid_t, status: &mut Option<libc::c_int>) -> bool {
    loop {
        let mut st = 0;
        // SAFETY: waitpid writes into our local.
        let r = unsafe { libc::waitpid(-1, &mut st, libc::WNOHANG) };
        if r == command {
            *status = Some(st);
        }
        if r <= 0 {
            // 0: children left, none ended; -1 ECHILD: no child at all.
            return r < 0;
        }
    }
}

/// SIGKILL to everything in the command's domain, until no child is left to reap.
///
/// The end is known from `waitpid`, not from `kill`: `kill(-1)` reports success whenever the
/// namespace holds any other process, even when every one of them refused the signal. Every
/// process of the command's domain descends from the keeper — a child subreaper, so orphans are
/// re-parented to it, never out of its subtree — hence "no child left" is "nothing left".
fn sweep(command: libc::pid_t, status: &mut Option<libc::c_int>) {
    for round in 0..MAX_SWEEPS {
        // SAFETY: kill(-1) signals every process we may signal: Landlock scopes that to the
        // command's domain and those nested in it (the caller itself is excluded by the kernel).
        unsafe { libc::kill(-1, libc::SIGKILL) };
        if reap(command, status) {
            return;
        }
        if round > 4 {
            let ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 1_000_000,
            };
            // SAFETY: nanosleep reads our timespec; the remainder pointer may be null.
            unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
        }
    }
}

/// End with the command's status: its exit code, or death by the signal that killed it.
fn exit_like(status: libc::c_int) -> ! {
    if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        // SAFETY: resetting a disposition, unblocking and raising a signal on ourselves are
        // async-signal-safe; core dumps are off (RLIMIT_CORE 0).
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::kill(libc::getpid(), sig);
        }
        // SAFETY: _exit never returns.
        unsafe { libc::_exit(128 + sig) }
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        1
    };
    // SAFETY: _exit never returns.
    unsafe { libc::_exit(code) }
}
