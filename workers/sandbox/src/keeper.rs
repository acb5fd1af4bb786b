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
//!
//! The rulesets are built with the `landlock` crate; only entering them is a raw
//! `landlock_restrict_self`, because it happens between fork and exec.

use crate::sys;
use landlock::{Access, Ruleset, RulesetAttr, Scope, ABI};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// The first Landlock ABI with scopes.
pub const MIN_ABI: u32 = 6;
/// How many sweeps (about 1 ms apart after the first few) before the keeper gives up waiting for
/// a process stuck in the kernel to die.
const MAX_SWEEPS: u32 = 10_000;

/// Why a keeper could not be set up for a command.
#[derive(Debug, thiserror::Error)]
pub enum KeeperError {
    /// The kernel's Landlock lacks signal scoping (the ABI it has).
    #[error("Landlock signal scoping needs ABI {MIN_ABI}; this kernel has {0}")]
    OldAbi(u32),
    /// Landlock is absent or disabled (the errno of the probe).
    #[error("Landlock is unavailable (errno {0})")]
    NoLandlock(i32),
    /// The scoped ruleset could not be built.
    #[error("creating the scoped Landlock ruleset: {0}")]
    Create(#[from] landlock::RulesetError),
    /// The kernel returned no ruleset fd.
    #[error("creating the scoped Landlock ruleset: the kernel gave no ruleset")]
    NoRuleset,
    /// The pipe whose closing kills the command could not be made.
    #[error("making the kill pipe: {0}")]
    Pipe(#[source] io::Error),
}

/// A scoped, otherwise empty Landlock ruleset (built with the `landlock` crate: a scope alone is
/// a complete ruleset), created once and entered by every keeper (each `landlock_restrict_self`
/// with it adds one nested domain). A command enters its own ruleset — scoped too — nested in the
/// keeper's, or this one again when it has none.
#[derive(Debug)]
pub struct Keeper {
    /// `None`: no signal scoping on this kernel; the keeper then kills the command's process
    /// group, which a command that calls `setsid` leaves.
    ruleset: Option<OwnedFd>,
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

/// What a spawn needs from its keeper: the scoped ruleset and the keeper's end of its line (a
/// kill pipe, or a socket whose peer is told the status). Consumed by
/// [`crate::spawn::configure`].
#[derive(Debug)]
pub struct KeeperPlan {
    pub(crate) ruleset: Option<RawFd>,
    pub(crate) line: OwnedFd,
}

impl Keeper {
    /// The ruleset, when this kernel scopes signals by Landlock domain.
    pub fn new() -> Result<Keeper, KeeperError> {
        let abi = sys::landlock_abi().map_err(KeeperError::NoLandlock)?;
        if abi < MIN_ABI {
            return Err(KeeperError::OldAbi(abi));
        }
        let created = Ruleset::default()
            .scope(Scope::from_all(ABI::V6))?
            .create()?;
        let ruleset: Option<OwnedFd> = created.into();
        Ok(Keeper {
            ruleset: Some(ruleset.ok_or(KeeperError::NoRuleset)?),
        })
    }

    /// A keeper without signal scoping (Landlock ABI < 6): it kills the command's process group
    /// (the command is its group's leader), so a descendant that calls `setsid` escapes it —
    /// until the worker's cgroup or tier B's pid namespace ends. [`Keeper::new`], else this.
    pub fn best() -> (Keeper, Option<KeeperError>) {
        match Keeper::new() {
            Ok(k) => (k, None),
            Err(e) => (Keeper { ruleset: None }, Some(e)),
        }
    }

    /// Whether this keeper reaches every process of its command (signal scoping), or only its
    /// process group.
    pub fn scoped(&self) -> bool {
        self.ruleset.is_some()
    }

    /// A keeper for one spawn with a kill pipe: fire the switch (or drop it) to have the keeper
    /// kill every process of the command and exit. The spawned process is the keeper, whose exit
    /// status is the command's (exit code, or death by the same signal), and which exits only once
    /// every process of the command is gone. Do not kill the spawned process yourself (no
    /// `kill_on_drop`, no `killpg`): fire the switch and wait for it.
    pub fn plan(&self) -> Result<(KeeperPlan, KillSwitch), KeeperError> {
        let (read, write) = std::io::pipe().map_err(KeeperError::Pipe)?;
        Ok((
            self.plan_with_line(OwnedFd::from(read)),
            KillSwitch {
                fd: Some(OwnedFd::from(write)),
            },
        ))
    }

    /// A keeper whose line is `control` (one end of a socket pair whose other end the caller
    /// keeps): the keeper sweeps when the other end is shut down for writing or closed, and
    /// before it exits sends one message on it: `S` and the command's wait status (4 bytes,
    /// native order). For a caller that is not the keeper's parent and so cannot `wait` for it
    /// (the command launcher's client).
    pub fn plan_with_line(&self, control: OwnedFd) -> KeeperPlan {
        KeeperPlan {
            ruleset: self.ruleset.as_ref().map(|r| r.as_raw_fd()),
            line: control,
        }
    }
}

/// In the pre-exec step: become the keeper (enter its domain, become a child subreaper), fork
/// the command, and in the command enter `command_ruleset` (nested in the keeper's domain).
/// Returns `Ok` in the command's process (which goes on to its own confinement and `exec`); the
/// keeper never returns.
pub(crate) fn fork_keeper(plan: &KeeperPlan, command_ruleset: Option<RawFd>) -> io::Result<()> {
    if let Some(r) = plan.ruleset {
        if sys::landlock_restrict_self_raw(r) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: prctl options taking integers only; signal() with SIG_DFL installs no handler code.
    unsafe {
        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0 {
            return Err(io::Error::last_os_error());
        }
        // The keeper must outlive a dying worker long enough to sweep: the closed line tells it.
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
        match (plan.ruleset, command_ruleset) {
            // The command: a domain nested in the keeper's, so it can never signal the keeper.
            (Some(_), Some(r)) | (Some(r), None) => {
                if sys::landlock_restrict_self_raw(r) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            // Unscoped: the command leads a process group of its own, which the keeper kills.
            (None, c) => {
                // SAFETY: setsid takes no arguments.
                if unsafe { libc::setsid() } < 0 {
                    return Err(io::Error::last_os_error());
                }
                if let Some(r) = c {
                    if sys::landlock_restrict_self_raw(r) < 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
            }
        }
        return Ok(());
    }
    keeper_main(
        crate::sys::syscall_int(pid),
        plan.line.as_raw_fd(),
        plan.ruleset.is_some(),
    )
}

/// The keeper's whole life (see the module documentation).
fn keeper_main(command: libc::pid_t, kill: RawFd, scoped: bool) -> ! {
    // Keep nothing but the kill line: not the command's output pipe (its reader waits for EOF),
    // not std's exec-error pipe, not another command's kill pipe forked along with us.
    // SAFETY: close_range closes fds of our own table.
    unsafe {
        if kill > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, (kill - 1).unsigned_abs(), 0u32);
        }
        libc::syscall(
            libc::SYS_close_range,
            (kill + 1).unsigned_abs(),
            u32::MAX,
            0u32,
        );
    }
    // Terminal signals forwarded to the command's process group (the one-shot sandbox does so)
    // are for the command, not for the keeper, which must live to sweep.
    // SAFETY: SIG_IGN installs no handler code.
    unsafe {
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
    // SAFETY: pidfd_open takes a pid and flags; failure (old kernel) leaves us polling on a timer.
    let pidfd =
        crate::sys::syscall_int(unsafe { libc::syscall(libc::SYS_pidfd_open, command, 0u32) });
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
    sweep(command, &mut status, scoped);
    let status = status.unwrap_or(libc::SIGKILL);
    // For a socket line (`plan_with_line`): the status, before exiting. On a pipe this fails
    // (ENOTSOCK).
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
fn sweep(command: libc::pid_t, status: &mut Option<libc::c_int>, scoped: bool) {
    for round in 0..MAX_SWEEPS {
        // SAFETY: kill(-1) signals every process we may signal: Landlock scopes that to the
        // command's domain and those nested in it (the caller itself is excluded by the kernel).
        // Unscoped, only the command's own process group (it is its leader; never group 0 or 1).
        unsafe {
            if scoped {
                libc::kill(-1, libc::SIGKILL);
            } else if command > 1 {
                libc::kill(-command, libc::SIGKILL);
            }
        };
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
