//! Tier B's command launcher: how commands get loopback networking while the tools worker itself
//! keeps refusing every socket.
//!
//! Seccomp filters and Landlock domains are inherited and can never be loosened, so a command
//! forked by the worker could never create an inet socket the worker may not. The launcher is
//! the worker's sibling: forked by tier B's pid 1 just before it forks the worker (so inside the
//! namespaces — the private network namespace whose only interface is `lo` — but never under the
//! worker's filters), connected to the worker by a socket pair made before the namespaces. It
//! confines itself with [`hanzo_policy::profile::tools_tier_b_commands`] (the tools filesystem
//! grants; any socket family at the profile level) plus a filter refusing every family but
//! `AF_INET`/`AF_INET6`, and from then on only starts commands for the worker.
//!
//! Per command the worker makes a `SOCK_SEQPACKET` pair and sends the launcher one message: the
//! command as JSON, with the output pipe's write end and one end of the pair attached. The
//! launcher spawns the command under a keeper (`hanzo_sandbox::keeper`) whose line is that end:
//! the worker shuts its end down (timeout), or drops it (cancellation, or the worker died) to have
//! the keeper kill every process of the command; the keeper answers with the command's wait status
//! once they are all gone. A launcher that cannot spawn answers `E` and the reason instead.
//!
//! The launcher never reads the worker's memory or channel (it closed every fd but its own
//! socket), and what it can do is what a command can do.

use hanzo_policy::profile::{ProfileContext, Rlimits};
use hanzo_sandbox::fdpass;
use hanzo_sandbox::keeper::Keeper;
use hanzo_sandbox::spawn::{configure_command, ChildSetup};
use serde::{Deserialize, Serialize};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;

/// Largest request (command text and environment) one message may carry.
const MAX_REQUEST: usize = 1 << 20;

/// One command for the launcher.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Request {
    shell: PathBuf,
    command: String,
    env: Vec<(String, String)>,
    cwd: PathBuf,
    core: u64,
    nofile: u64,
    fsize: Option<u64>,
}

/// The worker's handle on its launcher.
#[derive(Debug)]
pub struct Launcher {
    control: OwnedFd,
    /// Cleared when a send fails (the launcher died): commands then run from the worker itself,
    /// without network, rather than not at all.
    alive: std::sync::atomic::AtomicBool,
}

static LAUNCHER: OnceLock<Launcher> = OnceLock::new();

/// The running launcher, when the worker started one (tier B).
pub fn get() -> Option<&'static Launcher> {
    LAUNCHER.get()
}

#[derive(Debug, thiserror::Error)]
pub enum LauncherError {
    #[error("tier B has no loopback (lo is down)")]
    NoLoopback,
    #[error("no keeper: {0}")]
    NoKeeper(String),
    #[error("launcher socket: {0}")]
    Socket(#[source] std::io::Error),
    #[error("forking the launcher: {0}")]
    Fork(#[source] std::io::Error),
}

/// The worker's end of the launcher's socket, made before entering tier B.
pub struct Pending {
    ours: OwnedFd,
    theirs: Option<OwnedFd>,
}

/// Whether pid 1 started the launcher (set in pid 1 before it forks the worker, so the worker
/// inherits it), or why not.
static STARTED: OnceLock<Result<(), String>> = OnceLock::new();

/// Make the launcher's socket pair (before `namespaces::enter_with`).
pub fn prepare() -> Result<Pending, LauncherError> {
    let (ours, theirs) = fdpass::seqpacket_pair(false).map_err(LauncherError::Socket)?;
    // Above the numbers `hanzo_worker::run_with` adopts as channels (3, and 4 when present).
    let ours = fdpass::move_above(ours, 10).map_err(LauncherError::Socket)?;
    let theirs = fdpass::move_above(theirs, 10).map_err(LauncherError::Socket)?;
    Ok(Pending {
        ours,
        theirs: Some(theirs),
    })
}

impl Pending {
    /// In pid 1 (the `enter_with` hook; `lo_up`: whether the namespace has its loopback): fork
    /// the launcher as the worker's sibling. Single-threaded and unconfined here; the launcher
    /// confines itself at once.
    pub fn fork_in_pid1(&mut self, ctx: &ProfileContext, lo_up: bool) {
        let result = (|| {
            if !lo_up {
                return Err(LauncherError::NoLoopback);
            }
            // Without a keeper (Landlock ABI < 6) nothing could kill what a command started.
            Keeper::new().map_err(|e| LauncherError::NoKeeper(e.to_string()))?;
            let theirs = self.theirs.take().ok_or_else(|| {
                LauncherError::Fork(std::io::Error::other("the launcher was started already"))
            })?;
            let profile = hanzo_policy::profile::tools_tier_b_commands(ctx);
            let keep = theirs.as_raw_fd();
            // The parent's copy of `theirs` closes when the closure is dropped there.
            fdpass::fork_helper(keep, true, move || serve(theirs, &profile))
                .map_err(LauncherError::Fork)?;
            Ok(())
        })();
        let _ = STARTED.set(result.map_err(|e| e.to_string()));
    }

    /// In the worker: keep the handle for [`get`] when pid 1 started the launcher.
    pub fn finish(self) -> Result<(), String> {
        drop(self.theirs);
        match STARTED.get() {
            Some(Ok(())) => {
                let _ = LAUNCHER.set(Launcher {
                    control: self.ours,
                    alive: std::sync::atomic::AtomicBool::new(true),
                });
                Ok(())
            }
            Some(Err(e)) => Err(e.clone()),
            None => Err("tier B was not entered".to_string()),
        }
    }
}

/// The launcher's life: confine, then start commands until the worker hangs up.
fn serve(control: OwnedFd, profile: &hanzo_policy::profile::SandboxProfile) -> i32 {
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        eprintln!("hanzo-dev tools launcher: {what}: {e}");
        hanzo_worker::exit::CONFINE_FAILED
    };
    // As strict as the one-shot sandbox: no command runs without Landlock and seccomp. (The
    // worker then finds the launcher gone and runs commands itself, without network.)
    match hanzo_sandbox::confine::confine_current_process(profile) {
        Ok(a)
            if a.seccomp.installed
                && !matches!(
                    a.landlock.status,
                    hanzo_ipc::attest::LandlockStatus::NotEnforced
                        | hanzo_ipc::attest::LandlockStatus::Unsupported
                ) => {}
        Ok(a) => return fail("not confined", &a.notes.join("; ")),
        Err(e) => return fail("cannot confine", &e),
    }
    if let Err(e) = crate::nosocket::deny_non_inet_sockets() {
        return fail("socket filter", &e);
    }
    let keeper = match Keeper::new() {
        Ok(k) => k,
        Err(e) => return fail("no keeper", &e),
    };
    let mut buf = vec![0u8; MAX_REQUEST];
    loop {
        let (n, mut fds) = match fdpass::recv(control.as_fd(), &mut buf) {
            Ok((0, _)) => return 0,
            Ok(m) => m,
            Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => continue,
            Err(e) => return fail("receiving", &e),
        };
        if fds.len() != 2 {
            continue;
        }
        let line = fds.pop().expect("two fds");
        let output = fds.pop().expect("two fds");
        if let Err(e) = spawn(&buf[..n], output, &line, &keeper) {
            let mut msg = b"E".to_vec();
            msg.extend_from_slice(e.as_bytes());
            let _ = fdpass::send(line.as_fd(), &msg, &[]);
        }
    }
}

/// Start one command; the keeper owns `line` from here on (a copy of it, that is: ours closes).
fn spawn(request: &[u8], output: OwnedFd, line: &OwnedFd, keeper: &Keeper) -> Result<(), String> {
    let req: Request = serde_json::from_slice(request).map_err(|e| e.to_string())?;
    let err_out = output.try_clone().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(&req.shell);
    cmd.arg("-c")
        .arg(&req.command)
        .env_clear()
        .envs(req.env)
        .current_dir(&req.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::from(output))
        .stderr(Stdio::from(err_out));
    configure_command(
        &mut cmd,
        ChildSetup {
            fds: Vec::new(),
            rlimits: Rlimits {
                core: req.core,
                nofile: req.nofile,
                fsize: req.fsize,
            },
            parent_pid: std::process::id() as i32,
            new_session: true,
        },
    );
    keeper.attach_to(&mut cmd, line.try_clone().map_err(|e| e.to_string())?);
    // The child is the keeper; SIGCHLD is ignored here, so the kernel reaps it.
    cmd.spawn().map(drop).map_err(|e| e.to_string())
}

/// A command started through the launcher, seen from the worker.
#[derive(Debug)]
pub struct Remote {
    /// The worker's end of the keeper's line: a `SOCK_SEQPACKET` socket, driven through tokio's
    /// datagram type (plain `recv`/`shutdown` on the fd; one message per `recv`).
    line: tokio::net::UnixDatagram,
}

impl Launcher {
    /// Whether the launcher still takes commands.
    pub fn alive(&self) -> bool {
        self.alive.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Start `command` (`shell -c command`) with `env` in `cwd`, output to `output`.
    pub fn start(
        &self,
        shell: &std::path::Path,
        command: &str,
        env: Vec<(String, String)>,
        cwd: PathBuf,
        rlimits: Rlimits,
        output: OwnedFd,
    ) -> std::io::Result<Remote> {
        let req = Request {
            shell: shell.to_path_buf(),
            command: command.to_string(),
            env,
            cwd,
            core: rlimits.core,
            nofile: rlimits.nofile,
            fsize: rlimits.fsize,
        };
        let bytes = serde_json::to_vec(&req).map_err(std::io::Error::other)?;
        if bytes.len() > MAX_REQUEST {
            return Err(std::io::Error::other("the command is too long"));
        }
        let (ours, theirs) = fdpass::seqpacket_pair(true)?;
        // A short blocking send: the launcher only ever waits for the next message.
        if let Err(e) = fdpass::send(
            self.control.as_fd(),
            &bytes,
            &[output.as_fd(), theirs.as_fd()],
        ) {
            if matches!(
                e.raw_os_error(),
                Some(libc::EPIPE | libc::ECONNRESET | libc::ECONNREFUSED)
            ) {
                tracing::warn!("the tools command launcher is gone; commands lose loopback");
                self.alive
                    .store(false, std::sync::atomic::Ordering::Relaxed);
            }
            return Err(e);
        }
        let line = std::os::unix::net::UnixDatagram::from(ours);
        Ok(Remote {
            line: tokio::net::UnixDatagram::from_std(line)?,
        })
    }
}

impl Remote {
    /// Have the keeper kill every process of the command (it then reports the status).
    pub fn kill(&self) {
        let _ = self.line.shutdown(std::net::Shutdown::Write);
    }

    /// The command's status, once the command and everything it started are gone.
    /// Cancel-safe: nothing is consumed until the keeper's one message is there.
    pub async fn wait(&self) -> std::io::Result<ExitStatus> {
        let mut buf = [0u8; 4096];
        let n = self.line.recv(&mut buf).await?;
        match &buf[..n] {
            [b'S', a, b, c, d] => Ok(ExitStatus::from_raw(i32::from_ne_bytes([*a, *b, *c, *d]))),
            [] => Err(std::io::Error::other(
                "the command's keeper ended without a status",
            )),
            [_, msg @ ..] => Err(std::io::Error::other(format!(
                "cannot start: {}",
                String::from_utf8_lossy(msg)
            ))),
        }
    }
}
