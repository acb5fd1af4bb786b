//! The one command runner: how every command, hook and server is started — the `bash` tool,
//! hooks, the one-shot `hanzo-dev sandbox`, and (later) MCP stdio servers and language servers.
//!
//! # Contract
//!
//! Every spawn, whatever starts it, gets in this order ([`command`], on top of
//! `hanzo_sandbox::spawn::configure`):
//!
//! - **a new session**: no controlling terminal (so nothing it runs can push input into the
//!   caller's terminal with `TIOCSTI`, which its filter refuses anyway), not in the caller's
//!   process group;
//! - **every fd above 2 closed** (only the stdio the caller chose survives the `exec`);
//! - **the environment given, nothing else** (`env_clear`; callers build it from an allow-list —
//!   [`crate::exec::ExecConfig::env`]);
//! - **rlimits** (core dumps off, open files, file size) and `no_new_privs`;
//! - **the cgroup** of the worker (inherited: the worker joined it before forking anything) or,
//!   for the one-shot, its own (joined before the keeper forks);
//! - **a keeper** (`hanzo_sandbox::keeper`) that kills every process the command started —
//!   `setsid`, double forks and all — at the timeout, on cancellation, when the caller hangs up
//!   or dies, and after the command exits, and only then reports its status;
//! - **its own confinement**, from a [`CommandProfile`] declared by the caller as data
//!   (`hanzo_policy::profile::command_profile`): a Landlock domain (filesystem none, workspace
//!   read-only or read-write, extra read and write paths, device nodes) and a seccomp filter
//!   (network none, tier B's loopback, or later the broker's egress) nested in the launcher's,
//!   so a command can be narrower than the worker that starts it, never wider. Every capability
//!   is dropped.
//!
//! # Two ways to use it
//!
//! A worker forks its [`launcher`](crate::launcher) before it confines itself (its seccomp
//! allow-list admits neither `execve` nor the command deny list's wide syscall set), and asks it
//! for every spawn through a [`Runner`]:
//!
//! - **run to completion** — [`Runner::run`]: output captured (stdout and stderr combined, in
//!   order), capped head-and-tail, streamed to a callback, with a hard timeout; returns once
//!   every process of the command is gone;
//! - **a long-lived process with pipes** — [`Runner::start`]: stdin, stdout and stderr as pipes
//!   the caller keeps ([`Running`]), for an MCP stdio server or a language server; dropping the
//!   [`Running`] (or [`Running::kill`]) kills it and everything it started.
//!
//! The one-shot sandbox runs in an unconfined process of its own and uses the same [`command`]
//! directly.

use hanzo_ipc::Role;
use hanzo_policy::isolation::Tier;
use hanzo_policy::profile::{command_profile, CommandProfile, ProfileContext, Rlimits};
use hanzo_sandbox::fdpass;
use hanzo_sandbox::keeper::{Keeper, KeeperPlan};
use hanzo_sandbox::spawn::{configure, ChildSetup, CommandConfinement, SpawnPlan};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncReadExt;

/// What to run, and under what profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spawn {
    /// The program to execute.
    pub program: PathBuf,
    /// Its arguments, without the program name.
    pub args: Vec<OsString>,
    /// The complete environment.
    pub env: Vec<(String, String)>,
    /// Its working directory.
    pub cwd: PathBuf,
    /// Resource limits set before exec.
    pub rlimits: Rlimits,
    /// What it may reach: its Landlock domain and seccomp filter, nested in the launcher's.
    pub profile: CommandProfile,
}

impl Spawn {
    /// `shell -c command`.
    pub fn shell(
        shell: impl Into<PathBuf>,
        command: &str,
        env: Vec<(String, String)>,
        cwd: impl Into<PathBuf>,
        rlimits: Rlimits,
        profile: CommandProfile,
    ) -> Spawn {
        Spawn {
            program: shell.into(),
            args: vec!["-c".into(), command.into()],
            env,
            cwd: cwd.into(),
            rlimits,
            profile,
        }
    }
}

/// Where a child's stderr goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Stderr {
    /// `/dev/null`.
    Null,
    /// A pipe of its own.
    Pipe,
    /// The stdout pipe (combined output, in order).
    Stdout,
}

/// Which of the child's standard streams are pipes to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pipes {
    /// Whether stdin is a pipe from the caller (otherwise `/dev/null`).
    pub stdin: bool,
    /// Whether stdout is a pipe to the caller (otherwise `/dev/null`).
    pub stdout: bool,
    /// Where stderr goes.
    pub stderr: Stderr,
}

impl Pipes {
    /// Stdin closed, stdout and stderr combined into one pipe (the `bash` tool).
    pub const COMBINED: Pipes = Pipes {
        stdin: false,
        stdout: true,
        stderr: Stderr::Stdout,
    };
    /// All three piped (hooks, servers).
    pub const ALL: Pipes = Pipes {
        stdin: true,
        stdout: true,
        stderr: Stderr::Pipe,
    };
}

/// The child's ends of its standard streams (`None`: `/dev/null`, or the caller's own for the
/// one-shot).
#[derive(Debug, Default)]
pub struct ChildStdio {
    /// The fd to make the child's stdin, if any.
    pub stdin: Option<OwnedFd>,
    /// The fd to make the child's stdout, if any.
    pub stdout: Option<OwnedFd>,
    /// The fd to make the child's stderr, if any.
    pub stderr: Option<OwnedFd>,
    /// Leave the caller's stdio as it is where no fd is given (the one-shot: the command talks
    /// to the caller's terminal) instead of `/dev/null`.
    pub inherit: bool,
}

/// The `std::process::Command` of `spawn`, with every step of the contract installed (see the
/// module documentation): `confinement` compiled from the spawn's profile, `keeper` (when the
/// command must run under one), `join_cgroups` (fds of `cgroup.procs` files), `parent_pid` (the
/// spawning process's pid, for the parent-death check).
pub fn command(
    spawn: &Spawn,
    stdio: ChildStdio,
    confinement: Arc<CommandConfinement>,
    keeper: Option<KeeperPlan>,
    join_cgroups: Vec<RawFd>,
    parent_pid: i32,
) -> std::process::Command {
    let mut cmd = std::process::Command::new(&spawn.program);
    cmd.args(&spawn.args)
        .env_clear()
        .envs(spawn.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&spawn.cwd);
    let stream = |fd: Option<OwnedFd>| match fd {
        Some(fd) => Some(Stdio::from(fd)),
        None if stdio.inherit => None,
        None => Some(Stdio::null()),
    };
    if let Some(s) = stream(stdio.stdin) {
        cmd.stdin(s);
    }
    if let Some(s) = stream(stdio.stdout) {
        cmd.stdout(s);
    }
    if let Some(s) = stream(stdio.stderr) {
        cmd.stderr(s);
    }
    configure(
        &mut cmd,
        SpawnPlan {
            setup: Some(ChildSetup {
                fds: Vec::new(),
                rlimits: spawn.rlimits,
                parent_pid,
                new_session: true,
                join_cgroups,
            }),
            keeper,
            confinement: Some(confinement),
        },
    );
    cmd
}

/// Why a spawn through the launcher failed before the command ran.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The worker forked no launcher (or it failed to start); holds why.
    #[error("this worker has no command launcher ({0})")]
    NoLauncher(String),
    /// The launcher process ended; no command can start until the worker restarts.
    #[error("the command launcher is gone; the worker must be restarted")]
    LauncherGone,
    /// The spawn request exceeds one launcher message; holds its size in bytes.
    #[error("the command is too long for the launcher ({0} bytes)")]
    TooLong(usize),
    /// The launcher could not start the command (exec failed, confinement failed).
    #[error("cannot start {program}: {reason}")]
    Start {
        /// The program as given.
        program: String,
        /// What the launcher reported.
        reason: String,
    },
    /// Talking to the launcher (or, locally, spawning) failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// How commands get started: through the worker's launcher, or (a process that is not confined
/// itself: tests, benchmarks, the tools used in-process) by this process directly, under the same
/// steps with the command's complete profile.
#[derive(Debug)]
pub struct Runner {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Launcher {
        control: OwnedFd,
        /// Serialises sends on the control socket (each message carries its fds).
        send: Mutex<()>,
    },
    Local {
        role: Role,
        // Boxed: the context is large next to the launcher variant.
        ctx: Box<ProfileContext>,
        keeper: Keeper,
        compiled: Mutex<HashMap<CommandProfile, Arc<CommandConfinement>>>,
    },
}

/// The worker's launcher runner, once the launcher runs ([`crate::launcher`]), or why not.
pub fn launcher_runner() -> Result<Arc<Runner>, RunError> {
    let slot = &crate::launcher::COMMANDS;
    slot.runner
        .get()
        .cloned()
        .ok_or_else(|| RunError::NoLauncher(slot.why_none()))
}

/// Tier B's git launcher's runner (`launcher::Pending::fork_git`), when it runs: the git tool
/// starts git there, where the git directory is writable but for its configuration and hooks.
pub fn git_runner() -> Result<Arc<Runner>, String> {
    let slot = &crate::launcher::GIT;
    slot.runner.get().cloned().ok_or_else(|| slot.why_none())
}

/// Resolves when the worker's launcher is gone (its end of the control socket closed): no
/// command can start any more. Pending forever where there is no launcher.
pub async fn launcher_gone() {
    let fd = match crate::launcher::COMMANDS.runner.get().map(|r| &r.inner) {
        Some(Inner::Launcher { control, .. }) => control.try_clone().ok(),
        _ => None,
    };
    let Some(fd) = fd else {
        return std::future::pending().await;
    };
    // The launcher sends nothing after its attestation: a message is end-of-file. A thread of
    // its own blocks on the socket (it stays in blocking mode for the sends).
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name("hanzo-launcher-watch".into())
        .spawn(move || {
            let mut buf = [0u8; 64];
            loop {
                match fdpass::recv(fd.as_fd(), &mut buf) {
                    Ok((0, _)) => break,
                    Err(e) if e.kind() != std::io::ErrorKind::Interrupted => break,
                    _ => {}
                }
            }
            let _ = tx.send(());
        });
    if spawned.is_err() {
        return std::future::pending().await;
    }
    let _ = rx.await;
}

impl Runner {
    pub(crate) fn launcher(control: OwnedFd) -> Runner {
        Runner {
            inner: Inner::Launcher {
                control,
                send: Mutex::new(()),
            },
        }
    }

    /// A runner that spawns from this process, each command confined with its complete profile
    /// for `role` in `ctx` (tier A: this process has no namespaces of its own).
    pub fn local(role: Role, ctx: ProfileContext) -> Runner {
        Runner {
            inner: Inner::Local {
                role,
                ctx: Box::new(ctx),
                keeper: Keeper::best().0,
                compiled: Mutex::new(HashMap::new()),
            },
        }
    }

    /// The worker's launcher when there is one, else a local runner for `role` in `ctx`.
    pub fn shared(role: Role, ctx: ProfileContext) -> Arc<Runner> {
        launcher_runner().unwrap_or_else(|_| Arc::new(Runner::local(role, ctx)))
    }
}

/// One request to the launcher, as sent with its fds: `[line, stdin?, stdout?, stderr?]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Request {
    pub spawn: Spawn,
    pub pipes: Pipes,
}

/// Overwrite the values of `env` (they may be secrets, such as an MCP server's) before it is
/// dropped.
pub fn zeroize_env(env: &mut [(String, String)]) {
    use zeroize::Zeroize;
    for (_, v) in env.iter_mut() {
        v.zeroize();
    }
}

/// Largest request (command text and environment) one message may carry.
pub(crate) const MAX_REQUEST: usize = 1 << 20;

/// A started command, seen from the worker: its pipes and its keeper's line.
#[derive(Debug)]
pub struct Running {
    /// The write end of the command's stdin, when [`Pipes::stdin`] asked for it.
    pub stdin: Option<tokio::net::unix::pipe::Sender>,
    /// The read end of its stdout, when asked for.
    pub stdout: Option<tokio::net::unix::pipe::Receiver>,
    /// The read end of its stderr, when it has a pipe of its own.
    pub stderr: Option<tokio::net::unix::pipe::Receiver>,
    /// A local runner's keeper process (our child, reaped by tokio once it exits).
    _keeper: Option<tokio::process::Child>,
    remote: Remote,
}

impl Running {
    /// Have the keeper kill every process of the command (then [`Running::wait`] returns).
    pub fn kill(&self) {
        self.remote.kill();
    }

    /// The command's status, once the command and everything it started are gone.
    /// Cancel-safe.
    pub async fn wait(&self) -> Result<ExitStatus, RunError> {
        self.remote.wait().await
    }
}

/// The keeper's line, seen from the worker.
#[derive(Debug)]
struct Remote {
    /// A `SOCK_SEQPACKET` socket, driven through tokio's datagram type (plain `recv`/`shutdown`
    /// on the fd; one message per `recv`). Dropping it makes the keeper kill and exit.
    line: tokio::net::UnixDatagram,
    /// What arrived so far: the keeper's status, the launcher's start error.
    got: Mutex<(Option<ExitStatus>, Option<String>)>,
    program: String,
}

impl Remote {
    fn kill(&self) {
        let _ = self.line.shutdown(std::net::Shutdown::Write);
    }

    /// Reads the line to its end (the keeper sends `S` and the status before exiting; the
    /// launcher `E` and the reason when it could not start the command; both then close).
    async fn wait(&self) -> Result<ExitStatus, RunError> {
        let mut buf = [0u8; 4096];
        loop {
            let n = self.line.recv(&mut buf).await?;
            let mut got = self.got.lock().unwrap_or_else(|p| p.into_inner());
            match &buf[..n] {
                [] => {
                    return match (got.1.take(), got.0) {
                        (Some(reason), _) => Err(RunError::Start {
                            program: self.program.clone(),
                            reason,
                        }),
                        (None, Some(status)) => Ok(status),
                        (None, None) => Err(RunError::Start {
                            program: self.program.clone(),
                            reason: "its keeper ended without a status".to_string(),
                        }),
                    };
                }
                [b'S', a, b, c, d] => {
                    got.0 = Some(ExitStatus::from_raw(i32::from_ne_bytes([*a, *b, *c, *d])))
                }
                [b'E', msg @ ..] => got.1 = Some(String::from_utf8_lossy(msg).into_owned()),
                _ => {}
            }
        }
    }
}

impl Runner {
    /// Start `spawn` with `pipes`; the returned [`Running`] holds the caller's ends. Dropping it
    /// kills the command and everything it started.
    pub fn start(&self, mut spawn: Spawn, pipes: Pipes) -> Result<Running, RunError> {
        let program = spawn.program.display().to_string();
        let (ours, theirs) = fdpass::seqpacket_pair(true)?;
        let mut child_fds: Vec<OwnedFd> = vec![theirs];
        let (mut stdin, mut stdout, mut stderr) = (None, None, None);
        if pipes.stdin {
            let (r, w) = std::io::pipe()?;
            child_fds.push(r.into());
            stdin = Some(tokio::net::unix::pipe::Sender::from_owned_fd(w.into())?);
        }
        if pipes.stdout {
            let (r, w) = std::io::pipe()?;
            child_fds.push(w.into());
            stdout = Some(tokio::net::unix::pipe::Receiver::from_owned_fd(r.into())?);
        }
        if pipes.stderr == Stderr::Pipe {
            let (r, w) = std::io::pipe()?;
            child_fds.push(w.into());
            stderr = Some(tokio::net::unix::pipe::Receiver::from_owned_fd(r.into())?);
        }
        let local = match &self.inner {
            Inner::Launcher { control, send } => {
                // The environment may hold secrets (an MCP server's, resolved by the broker):
                // neither the request nor its encoding is left behind in freed memory. The
                // buffer is sized so that encoding it does not reallocate (and leave a copy).
                let estimate = spawn
                    .env
                    .iter()
                    .map(|(k, v)| k.len() + v.len())
                    .sum::<usize>()
                    + spawn.args.iter().map(|a| a.len()).sum::<usize>();
                let mut req = Request { spawn, pipes };
                let mut bytes =
                    zeroize::Zeroizing::new(Vec::with_capacity(estimate.saturating_mul(2) + 4096));
                let encoded = serde_json::to_writer(&mut *bytes, &req);
                zeroize_env(&mut req.spawn.env);
                encoded.map_err(|e| RunError::Io(std::io::Error::other(e)))?;
                if bytes.len() > MAX_REQUEST {
                    return Err(RunError::TooLong(bytes.len()));
                }
                let _guard = send.lock().unwrap_or_else(|p| p.into_inner());
                let borrowed: Vec<_> = child_fds.iter().map(|f| f.as_fd()).collect();
                // A short blocking send: the launcher only ever waits for the next message.
                if let Err(e) = fdpass::send(control.as_fd(), &bytes, &borrowed) {
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EPIPE | libc::ECONNRESET | libc::ECONNREFUSED)
                    ) {
                        return Err(RunError::LauncherGone);
                    }
                    return Err(e.into());
                }
                None
            }
            Inner::Local {
                role,
                ctx,
                keeper,
                compiled,
            } => {
                let confinement = {
                    let mut cache = compiled.lock().unwrap_or_else(|p| p.into_inner());
                    match cache.get(&spawn.profile) {
                        Some(c) => c.clone(),
                        None => {
                            let p = command_profile(*role, &spawn.profile, ctx, Tier::A).map_err(
                                |e| RunError::Start {
                                    program: program.clone(),
                                    reason: e.to_string(),
                                },
                            )?;
                            let c = Arc::new(CommandConfinement::full(&p).map_err(|e| {
                                RunError::Start {
                                    program: program.clone(),
                                    reason: e.to_string(),
                                }
                            })?);
                            cache.insert(spawn.profile.clone(), c.clone());
                            c
                        }
                    }
                };
                let mut fds = child_fds.drain(..);
                let line = fds.next().expect("the line is always first");
                let stdin = if pipes.stdin { fds.next() } else { None };
                let stdout = if pipes.stdout { fds.next() } else { None };
                let stderr = match pipes.stderr {
                    Stderr::Pipe => fds.next(),
                    Stderr::Stdout => stdout.as_ref().map(|o| o.try_clone()).transpose()?,
                    Stderr::Null => None,
                };
                drop(fds);
                let cmd = command(
                    &spawn,
                    ChildStdio {
                        stdin,
                        stdout,
                        stderr,
                        inherit: false,
                    },
                    confinement,
                    Some(keeper.plan_with_line(line)),
                    Vec::new(),
                    hanzo_sandbox::own_pid(),
                );
                zeroize_env(&mut spawn.env);
                // Spawned through tokio so that the keeper, our child, is reaped.
                let mut cmd = tokio::process::Command::from(cmd);
                cmd.kill_on_drop(false);
                let child = cmd.spawn().map_err(|e| RunError::Start {
                    program: program.clone(),
                    reason: e.to_string(),
                })?;
                Some(child)
            }
        };
        // Our copies of the child's ends close now: EOF and the keeper's hang-up can come.
        drop(child_fds);
        let line = std::os::unix::net::UnixDatagram::from(ours);
        Ok(Running {
            stdin,
            stdout,
            stderr,
            _keeper: local,
            remote: Remote {
                line: tokio::net::UnixDatagram::from_std(line)?,
                got: Mutex::new((None, None)),
                program,
            },
        })
    }

    /// Run `spawn` to completion with stdin closed and stdout and stderr combined: see
    /// [`run_combined`].
    pub async fn run(
        &self,
        spawn: Spawn,
        timeout: Duration,
        cap: usize,
        on_chunk: impl FnMut(&[u8]),
    ) -> Result<Outcome, RunError> {
        let running = self.start(spawn, Pipes::COMBINED)?;
        run_combined(running, timeout, cap, on_chunk).await
    }
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this status code.
    Code(i32),
    /// It was killed by this signal number.
    Signal(i32),
    /// Killed (with everything it started) at the timeout.
    TimedOut,
}

impl Exit {
    /// How a process ended, from its wait status and whether the timeout killed it.
    pub fn of(status: ExitStatus, timed_out: bool) -> Exit {
        if timed_out {
            Exit::TimedOut
        } else if let Some(code) = status.code() {
            Exit::Code(code)
        } else {
            Exit::Signal(status.signal().unwrap_or(0))
        }
    }
}

/// A command run to completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// How it ended.
    pub exit: Exit,
    /// Combined output, capped: head, a marker, tail.
    pub output: String,
    /// Bytes left out of the middle.
    pub omitted: u64,
}

/// Head-and-tail capture of a stream.
#[derive(Debug)]
pub struct Capture {
    cap: usize,
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    omitted: u64,
}

impl Capture {
    /// A capture keeping at most `cap` bytes (at least 2): the first half and the last half.
    pub fn new(cap: usize) -> Capture {
        Capture {
            cap: cap.max(2),
            head: Vec::new(),
            tail: std::collections::VecDeque::new(),
            omitted: 0,
        }
    }

    /// Take more bytes of the stream.
    pub fn push(&mut self, mut bytes: &[u8]) {
        let head_cap = self.cap / 2;
        if self.head.len() < head_cap {
            let n = (head_cap - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        let tail_cap = self.cap - head_cap;
        self.tail.extend(bytes);
        let excess = self.tail.len().saturating_sub(tail_cap);
        if excess > 0 {
            self.tail.drain(..excess);
            self.omitted += excess as u64;
        }
    }

    /// The kept text (invalid UTF-8 replaced) with a marker where bytes were left out, and how
    /// many were.
    pub fn finish(self) -> (String, u64) {
        let mut out = String::from_utf8_lossy(&self.head).into_owned();
        if self.omitted > 0 {
            out.push_str(&format!(
                "\n[… {} bytes of output omitted …]\n",
                self.omitted
            ));
        }
        let tail: Vec<u8> = self.tail.into_iter().collect();
        out.push_str(&String::from_utf8_lossy(&tail));
        (out, self.omitted)
    }
}

/// Read a started command's combined output until it is gone or `timeout` passes (then its
/// keeper kills everything it started), capped to `cap` bytes head and tail, each chunk also
/// given to `on_chunk`. Dropping this future drops the keeper's line: the keeper kills
/// everything the command started.
pub async fn run_combined(
    running: Running,
    timeout: Duration,
    cap: usize,
    mut on_chunk: impl FnMut(&[u8]),
) -> Result<Outcome, RunError> {
    let Running {
        stdout,
        remote,
        _keeper,
        ..
    } = running;
    let mut pipe = stdout.ok_or_else(|| RunError::Io(std::io::Error::other("no output pipe")))?;
    let mut capture = Capture::new(cap);
    let mut buf = vec![0u8; 16 * 1024];
    let deadline = tokio::time::Instant::now() + timeout;
    let mut pipe_open = true;
    let mut status = None;
    let mut timed_out = false;
    while status.is_none() {
        tokio::select! {
            r = pipe.read(&mut buf), if pipe_open => match r {
                Ok(0) | Err(_) => pipe_open = false,
                Ok(n) => {
                    on_chunk(&buf[..n]);
                    capture.push(&buf[..n]);
                }
            },
            s = remote.wait() => status = Some(s?),
            _ = tokio::time::sleep_until(deadline) => {
                timed_out = true;
                // The keeper answers once its sweep found nothing left.
                remote.kill();
                status = Some(remote.wait().await?);
            }
        }
    }
    // Everything the command started is gone: what is left in the pipe is all there will be.
    if pipe_open {
        let drain = async {
            loop {
                match pipe.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        on_chunk(&buf[..n]);
                        capture.push(&buf[..n]);
                    }
                }
            }
        };
        // Without signal scoping a `setsid` escapee can hold the pipe: stop reading then.
        let _ = tokio::time::timeout(DRAIN_GRACE, drain).await;
    }
    let status = status.expect("the loop ends only with a status");
    let (output, omitted) = capture.finish();
    Ok(Outcome {
        exit: Exit::of(status, timed_out),
        output,
        omitted,
    })
}

/// How long the output pipe may stay open after the command is gone: under a keeper with
/// signal scoping nothing can hold it; without, only a process that left the group can.
const DRAIN_GRACE: Duration = Duration::from_millis(300);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_keeps_head_and_tail() {
        let mut c = Capture::new(10);
        c.push(b"0123456789abcdefghij");
        let (out, omitted) = c.finish();
        assert_eq!(omitted, 10);
        assert_eq!(out, "01234\n[… 10 bytes of output omitted …]\nfghij");
        let mut c = Capture::new(100);
        c.push(b"short");
        assert_eq!(c.finish(), ("short".to_string(), 0));
    }

    #[test]
    fn requests_round_trip_through_json() {
        let spawn = Spawn::shell(
            "/bin/sh",
            "echo 'a b'",
            vec![("PATH".into(), "/bin".into())],
            "/w",
            Rlimits {
                core: 0,
                nofile: 64,
                fsize: Some(1),
            },
            CommandProfile::hook(),
        );
        let req = Request {
            spawn: spawn.clone(),
            pipes: Pipes::ALL,
        };
        let back: Request =
            serde_json::from_slice(&serde_json::to_vec(&req).expect("json")).expect("parse");
        assert_eq!(back.spawn, spawn);
        assert_eq!(back.pipes, Pipes::ALL);
    }
}
