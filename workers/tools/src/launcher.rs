//! The command launcher: the process that starts every command for a worker, so that the worker
//! itself can run under a seccomp allow-list with neither `execve` nor the wide syscall set that
//! commands need, and (in tier B) without any socket while its commands get the namespace's
//! loopback.
//!
//! Seccomp filters and Landlock domains are inherited and can never be loosened, so a command
//! forked by the worker could never do what the worker may not. The launcher is forked *before*
//! the worker confines itself — by the worker in tier A, by tier B's pid 1 (as the worker's
//! sibling, inside the namespaces) in tier B — connected to the worker by a `SOCK_SEQPACKET`
//! pair made first. It confines itself with the role's launcher profile
//! (`hanzo_policy::profile::launcher_profile`: what any of its commands may have, the command
//! deny list and rules, no sockets in tier A, inet only in tier B), attests that to the worker
//! (which puts it among its own attestation's helpers, so the supervisor checks it too), and
//! from then on only starts commands.
//!
//! Per command the worker sends one message ([`crate::runner::Runner::start`]): the spawn as
//! JSON, with the keeper's line and the pipes attached. The launcher compiles the command's own
//! confinement from its [`CommandProfile`] (once per
//! distinct profile), nested in its own, and spawns it under a keeper whose line is the one
//! received: the worker shuts its end down (timeout) or drops it (cancellation, or the worker
//! died) to have the keeper kill every process of the command; the keeper answers with the
//! command's wait status once they are all gone. A launcher that cannot start a command answers
//! `E` and the reason instead.
//!
//! The launcher never reads the worker's memory or channel (it closed every fd but its own
//! socket), and what it can do is what a command can do. When it dies, the worker cannot start
//! commands any more and exits, so the supervisor restarts both.

use crate::runner::{command, ChildStdio, Request, Runner, Stderr, MAX_REQUEST};
use hanzo_ipc::attest::Attestation;
use hanzo_ipc::Role;
use hanzo_policy::isolation::Tier;
use hanzo_policy::profile::{
    command_profile, launcher_profile, CommandProfile, ProfileContext, SandboxProfile,
};
use hanzo_sandbox::fdpass;
use hanzo_sandbox::keeper::Keeper;
use hanzo_sandbox::spawn::CommandConfinement;
use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc as StdArc;
use std::sync::{Arc, Mutex, OnceLock};

/// Why the command launcher could not be started.
#[derive(Debug, thiserror::Error)]
pub enum LauncherError {
    /// The socketpair to the launcher could not be made.
    #[error("launcher socket: {0}")]
    Socket(#[source] std::io::Error),
    /// The launcher process could not be forked.
    #[error("forking the launcher: {0}")]
    Fork(#[source] std::io::Error),
}

/// The worker's end of the launcher's socket, made before the launcher is forked.
pub struct Pending {
    ours: OwnedFd,
    theirs: Option<OwnedFd>,
    slot: &'static Slot,
}

/// What one launcher leaves for the worker: whether its fork worked (set in the process that
/// forked it — tier B's pid 1, whose child the worker inherits the value), why there is no
/// runner, and the runner once the launcher attested.
pub(crate) struct Slot {
    forked: OnceLock<Result<(), String>>,
    why_none: Mutex<Option<String>>,
    pub(crate) runner: OnceLock<StdArc<Runner>>,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            forked: OnceLock::new(),
            why_none: Mutex::new(None),
            runner: OnceLock::new(),
        }
    }

    /// Why there is no runner in this worker (for messages).
    pub(crate) fn why_none(&self) -> String {
        self.why_none
            .lock()
            .ok()
            .and_then(|w| w.clone())
            .unwrap_or_else(|| "it was not started".to_string())
    }
}

/// The launcher of every command.
pub(crate) static COMMANDS: Slot = Slot::new();
/// Tier B's git launcher ([`Pending::fork_git`]): the git tool's commands only.
pub(crate) static GIT: Slot = Slot::new();

/// Make the command launcher's socket pair (before `namespaces::enter_with`, or before forking
/// in tier A).
pub fn prepare() -> Result<Pending, LauncherError> {
    prepare_for(&COMMANDS)
}

/// Make the git launcher's socket pair (tier B only, before `namespaces::enter_with`).
pub fn prepare_git() -> Result<Pending, LauncherError> {
    prepare_for(&GIT)
}

fn prepare_for(slot: &'static Slot) -> Result<Pending, LauncherError> {
    let (ours, theirs) = fdpass::seqpacket_pair(false).map_err(LauncherError::Socket)?;
    // Above the numbers `hanzo_worker::run_with` adopts as channels (3, and 4 when present).
    let ours = fdpass::move_above(ours, 10).map_err(LauncherError::Socket)?;
    let theirs = fdpass::move_above(theirs, 10).map_err(LauncherError::Socket)?;
    Ok(Pending {
        ours,
        theirs: Some(theirs),
        slot,
    })
}

impl Pending {
    /// Fork the launcher for `role` in `tier`. From a single-threaded, unconfined process: the
    /// worker itself in tier A, tier B's pid 1 (the `enter_with` hook) in tier B.
    pub fn fork(&mut self, role: Role, ctx: &ProfileContext, tier: Tier) {
        self.fork_with(move |theirs, ctx| serve(theirs, role, ctx, tier), ctx);
    }

    /// Fork tier B's **git launcher** (from the `enter_with` hook, like the command launcher):
    /// it first moves to the git view (`namespaces::open_git_view`: the git directory `git_dir`
    /// writable but for its configuration, hooks and links, and `keep_read_only`), then confines
    /// itself exactly as the command launcher does and starts only what the worker's git tool
    /// sends it. Commands never reach this view: they are children of the other launcher, in
    /// another Landlock domain, which may not look into this one's processes (`/proc/PID/root`
    /// needs ptrace access, which Landlock refuses across domains), and this launcher is not
    /// dumpable.
    pub fn fork_git(
        &mut self,
        role: Role,
        ctx: &ProfileContext,
        git_dir: PathBuf,
        keep_read_only: Vec<PathBuf>,
    ) {
        self.fork_with(
            move |theirs, ctx| {
                if let Err(e) = hanzo_sandbox::namespaces::open_git_view(&git_dir, &keep_read_only)
                {
                    let msg = format!("the git launcher: no git view: {e}");
                    let _ = fdpass::send(theirs.as_fd(), format!("E{msg}").as_bytes(), &[]);
                    return hanzo_worker::exit::CONFINE_FAILED;
                }
                serve(theirs, role, ctx, Tier::B)
            },
            ctx,
        );
    }

    fn fork_with(
        &mut self,
        body: impl FnOnce(OwnedFd, &ProfileContext) -> i32,
        ctx: &ProfileContext,
    ) {
        let result = (|| {
            let theirs = self.theirs.take().ok_or_else(|| {
                LauncherError::Fork(std::io::Error::other("the launcher was started already"))
            })?;
            let ctx = ctx.clone();
            let keep = theirs.as_raw_fd();
            // The parent's copy of `theirs` closes when the closure is dropped there.
            fdpass::fork_helper(keep, true, move || body(theirs, &ctx))
                .map_err(LauncherError::Fork)?;
            Ok(())
        })();
        let _ = self
            .slot
            .forked
            .set(result.map_err(|e: LauncherError| e.to_string()));
    }

    /// In the worker, before it confines itself: wait for the launcher's attestation and keep
    /// the runner for [`crate::runner::launcher_runner`] (or [`crate::runner::git_runner`]).
    /// Returns the attestation (for the worker's own).
    pub fn finish(mut self) -> Result<Attestation, String> {
        drop(self.theirs.take());
        let result = (|| {
            match self.slot.forked.get() {
                Some(Ok(())) => {}
                Some(Err(e)) => return Err(e.clone()),
                None => return Err("the launcher was not forked".to_string()),
            }
            let mut buf = vec![0u8; 64 * 1024];
            let (n, _) = fdpass::recv(self.ours.as_fd(), &mut buf)
                .map_err(|e| format!("reading the launcher's attestation: {e}"))?;
            match buf.first() {
                Some(b'A') => serde_json::from_slice::<Attestation>(&buf[1..n])
                    .map_err(|e| format!("the launcher's attestation: {e}")),
                Some(b'E') => Err(String::from_utf8_lossy(&buf[1..n]).into_owned()),
                _ => Err("the launcher ended before attesting".to_string()),
            }
        })();
        match result {
            Ok(att) => {
                let _ = self
                    .slot
                    .runner
                    .set(StdArc::new(Runner::launcher(self.ours)));
                Ok(att)
            }
            Err(e) => {
                if let Ok(mut w) = self.slot.why_none.lock() {
                    *w = Some(e.clone());
                }
                Err(e)
            }
        }
    }
}

/// The launcher's life: confine, attest, then start commands until the worker hangs up.
fn serve(control: OwnedFd, role: Role, ctx: &ProfileContext, tier: Tier) -> i32 {
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        let msg = format!("the {role} command launcher: {what}: {e}");
        let _ = fdpass::send(control.as_fd(), format!("E{msg}").as_bytes(), &[]);
        eprintln!("hanzo-dev {msg}");
        hanzo_worker::exit::CONFINE_FAILED
    };
    let profile = launcher_profile(role, ctx, tier);
    // As strict as a worker: no command runs without Landlock and seccomp.
    let att = match hanzo_sandbox::confine::confine_current_process(&profile) {
        Ok(a) => a,
        Err(e) => return fail("cannot confine", &e),
    };
    let attested = match serde_json::to_vec(&att) {
        Ok(mut v) => {
            v.insert(0, b'A');
            v
        }
        Err(e) => return fail("attestation", &e),
    };
    if let Err(e) = fdpass::send(control.as_fd(), &attested, &[]) {
        return fail("sending its attestation", &e);
    }
    let (keeper, _unscoped) = Keeper::best();
    let mut compiled: HashMap<CommandProfile, Arc<CommandConfinement>> = HashMap::new();
    let mut buf = vec![0u8; MAX_REQUEST];
    loop {
        let (n, mut fds) = match fdpass::recv(control.as_fd(), &mut buf) {
            Ok((0, _)) => return 0,
            Ok(m) => m,
            Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => continue,
            Err(e) => return fail("receiving", &e),
        };
        if fds.is_empty() {
            continue;
        }
        let line = fds.remove(0);
        let spawned = spawn(
            &buf[..n],
            fds,
            &line,
            &keeper,
            &mut compiled,
            role,
            ctx,
            tier,
            &profile,
        );
        // The request's environment may hold secrets: not left in the buffer.
        buf[..n].fill(0);
        if let Err(e) = spawned {
            let mut msg = b"E".to_vec();
            msg.extend_from_slice(e.as_bytes());
            let _ = fdpass::send(line.as_fd(), &msg, &[]);
        }
    }
}

/// Start one command; the keeper owns `line` from here on (a copy of it, that is: ours closes).
#[allow(clippy::too_many_arguments)]
fn spawn(
    request: &[u8],
    fds: Vec<OwnedFd>,
    line: &OwnedFd,
    keeper: &Keeper,
    compiled: &mut HashMap<CommandProfile, Arc<CommandConfinement>>,
    role: Role,
    ctx: &ProfileContext,
    tier: Tier,
    launcher: &SandboxProfile,
) -> Result<(), String> {
    let mut req: Request = serde_json::from_slice(request).map_err(|e| e.to_string())?;
    let spawned = spawn_request(&req, fds, line, keeper, compiled, role, ctx, tier, launcher);
    crate::runner::zeroize_env(&mut req.spawn.env);
    spawned
}

/// [`spawn`] of a parsed request.
#[allow(clippy::too_many_arguments)]
fn spawn_request(
    req: &Request,
    fds: Vec<OwnedFd>,
    line: &OwnedFd,
    keeper: &Keeper,
    compiled: &mut HashMap<CommandProfile, Arc<CommandConfinement>>,
    role: Role,
    ctx: &ProfileContext,
    tier: Tier,
    launcher: &SandboxProfile,
) -> Result<(), String> {
    let want = usize::from(req.pipes.stdin)
        + usize::from(req.pipes.stdout)
        + usize::from(req.pipes.stderr == Stderr::Pipe);
    if fds.len() != want {
        return Err(format!("{} descriptors for {want} pipes", fds.len()));
    }
    let confinement = match compiled.get(&req.spawn.profile) {
        Some(c) => c.clone(),
        None => {
            let p =
                command_profile(role, &req.spawn.profile, ctx, tier).map_err(|e| e.to_string())?;
            let c = Arc::new(CommandConfinement::nested(&p, launcher).map_err(|e| e.to_string())?);
            compiled.insert(req.spawn.profile.clone(), c.clone());
            c
        }
    };
    let mut fds = fds.into_iter();
    let stdin = if req.pipes.stdin { fds.next() } else { None };
    let stdout = if req.pipes.stdout { fds.next() } else { None };
    let stderr = match req.pipes.stderr {
        Stderr::Pipe => fds.next(),
        Stderr::Stdout => stdout
            .as_ref()
            .map(|o| o.try_clone())
            .transpose()
            .map_err(|e| e.to_string())?,
        Stderr::Null => None,
    };
    let plan = keeper.plan_with_line(line.try_clone().map_err(|e| e.to_string())?);
    let mut cmd = command(
        &req.spawn,
        ChildStdio {
            stdin,
            stdout,
            stderr,
            inherit: false,
        },
        confinement,
        Some(plan),
        Vec::new(),
        hanzo_sandbox::own_pid(),
    );
    // The child is the keeper; SIGCHLD is ignored here, so the kernel reaps it — except during
    // the spawn itself, so that a failed `exec` is an error std can return rather than a panic
    // (see `with_sigchld_default`), which the worker gets as this spawn's `E` line.
    fdpass::with_sigchld_default(|| cmd.spawn())
        .map(drop)
        .map_err(|e| e.to_string())
}
