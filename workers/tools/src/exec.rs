//! Command execution (`bash`): `/bin/sh -c COMMAND` in the workspace, in its own session and
//! process group, stdin closed, stdout and stderr combined into one pipe (so their order is kept),
//! an environment built from an allow-list, the profile's rlimits, and a hard timeout. Output is
//! capped, keeping its head and its tail.
//!
//! Every process the command starts is killed at the timeout, when the request is cancelled (the
//! future is dropped: a guard does it), and after the command exits (so nothing it left running
//! in the background outlives the call) — also those that left its process group or session
//! (`setsid`, a double-forked daemon). Where the kernel scopes signals by Landlock domain (ABI 6),
//! the command runs under a keeper (`hanzo_sandbox::keeper`): the spawned process is the keeper,
//! the command its child in a nested Landlock domain that no descendant can leave, and the keeper
//! sweeps that domain with `kill(-1, SIGKILL)` before it exits. `run` returns only after the
//! keeper has exited, i.e. after every process of the command is gone. Elsewhere the process
//! group is killed (and a `setsid` escapes it until the worker ends).

use hanzo_policy::profile::{is_secret_env, Rlimits};
use hanzo_sandbox::keeper::{Keeper, KillSwitch};
use hanzo_sandbox::spawn::{configure_command, ChildSetup};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncReadExt;

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);
/// Combined output kept per command (head and tail halves).
pub const DEFAULT_OUTPUT_CAP: usize = 64 * 1024;
/// How long the output pipe may stay open after the command is gone: without a keeper, only a
/// process that left the group (`setsid`) can still hold it, and we stop reading rather than wait.
const DRAIN_GRACE: Duration = Duration::from_millis(300);

/// The keeper's scoped ruleset, created on first use (after confinement: the Landlock syscalls
/// stay allowed), or why there is none.
pub fn keeper() -> Result<&'static Keeper, &'static str> {
    static KEEPER: std::sync::OnceLock<Result<Keeper, String>> = std::sync::OnceLock::new();
    KEEPER
        .get_or_init(|| Keeper::new().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(String::as_str)
}

/// The fixed part of every command's environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecConfig {
    pub shell: PathBuf,
    /// The command's working directory: the workspace.
    pub cwd: PathBuf,
    /// The run's private directory: `HOME` is `<run>/home`, `TMPDIR` is `<run>/tmp`.
    pub run_dir: PathBuf,
    /// Extra variables from the configuration (never a secret: those are dropped).
    pub extra_env: Vec<(String, String)>,
    /// `PATH`, `LANG`, `TERM` as the worker received them (from the supervisor's allow-list).
    pub inherited: Vec<(String, String)>,
    pub rlimits: Rlimits,
    pub output_cap: usize,
}

/// Names taken from the worker's own environment when present.
pub const INHERITED_ENV: &[&str] = &["PATH", "LANG", "LC_ALL", "TERM", "TZ"];
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

impl ExecConfig {
    pub fn new(cwd: PathBuf, run_dir: PathBuf, rlimits: Rlimits) -> ExecConfig {
        let inherited = std::env::vars()
            .filter(|(k, _)| INHERITED_ENV.contains(&k.as_str()))
            .collect();
        ExecConfig {
            shell: PathBuf::from("/bin/sh"),
            cwd,
            run_dir,
            extra_env: Vec::new(),
            inherited,
            rlimits,
            output_cap: DEFAULT_OUTPUT_CAP,
        }
    }

    pub fn home(&self) -> PathBuf {
        self.run_dir.join("home")
    }

    pub fn tmp(&self) -> PathBuf {
        self.run_dir.join("tmp")
    }

    /// The complete environment of a command: nothing else reaches it.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = Vec::new();
        let mut set = |k: &str, v: String| {
            env.retain(|(name, _)| name != k);
            env.push((k.to_string(), v));
        };
        set("PATH", DEFAULT_PATH.to_string());
        set("LANG", "C.UTF-8".to_string());
        set("TERM", "dumb".to_string());
        for (k, v) in &self.inherited {
            if INHERITED_ENV.contains(&k.as_str()) {
                set(k, v.clone());
            }
        }
        set("HOME", self.home().display().to_string());
        set("TMPDIR", self.tmp().display().to_string());
        for (k, v) in &self.extra_env {
            if !is_secret_env(k, &[]) && k != "HOME" && k != "TMPDIR" {
                set(k, v.clone());
            }
        }
        env
    }

    /// Create `HOME` and `TMPDIR` inside the run directory.
    pub fn prepare_dirs(&self) -> std::io::Result<()> {
        std::fs::create_dir_all(self.home())?;
        std::fs::create_dir_all(self.tmp())
    }
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
    /// Killed (with its whole group) at the timeout.
    TimedOut,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutcome {
    pub exit: Exit,
    /// Combined output, capped: head, a marker, tail.
    pub output: String,
    /// Bytes left out of the middle.
    pub omitted: u64,
    /// The command's process group id (its keeper's pid, under a keeper); 0 when it ran through
    /// the tier-B launcher.
    pub pgid: i32,
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
    pub fn new(cap: usize) -> Capture {
        Capture {
            cap: cap.max(2),
            head: Vec::new(),
            tail: std::collections::VecDeque::new(),
            omitted: 0,
        }
    }

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

/// Kills a process group when dropped, unless disarmed: a cancelled request (its future dropped
/// mid-way) still takes every process of its command with it.
pub struct GroupKill {
    pgid: Option<i32>,
}

impl GroupKill {
    pub fn new(pgid: i32) -> GroupKill {
        GroupKill { pgid: Some(pgid) }
    }

    /// Kill the group now (repeatedly, until no member is left or a bound is hit: a member may
    /// be forking while the first signal is delivered).
    pub fn kill_now(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            kill_group(pgid);
        }
    }
}

impl Drop for GroupKill {
    fn drop(&mut self) {
        self.kill_now();
    }
}

/// How a running command is stopped.
enum Stop {
    /// Close the keeper's kill pipe; the keeper sweeps the command's domain and exits.
    Keeper(KillSwitch),
    /// No keeper on this kernel: kill the process group.
    Group(GroupKill),
}

impl Stop {
    fn now(&mut self) {
        match self {
            Stop::Keeper(k) => k.fire(),
            Stop::Group(g) => g.kill_now(),
        }
    }
}

/// SIGKILL to every process in group `pgid`, repeated while members remain.
pub fn kill_group(pgid: i32) {
    if pgid <= 1 {
        // Never signal group 0 (our own) or -1 (everything we may signal).
        return;
    }
    for _ in 0..64 {
        if killpg(Pid::from_raw(pgid), Signal::SIGKILL).is_err() {
            // ESRCH: no process is left in the group.
            return;
        }
        std::thread::yield_now();
    }
}

/// Run `command` under `cfg`. `on_chunk` sees output as it arrives (for streaming).
///
/// In tier B, when the worker started its launcher (`crate::launcher`), the command is started
/// there — inside the private network namespace with inet sockets allowed — and this process
/// only reads its output and talks to its keeper.
pub async fn run(
    cfg: &ExecConfig,
    command: &str,
    timeout: Duration,
    mut on_chunk: impl FnMut(&[u8]),
) -> std::io::Result<ExecOutcome> {
    if let Some(launcher) = crate::launcher::get().filter(|l| l.alive()) {
        match run_remote(launcher, cfg, command, timeout, &mut on_chunk).await {
            // The launcher died before taking the command: run it here (without network).
            Err(_) if !launcher.alive() => {}
            other => return other,
        }
    }
    run_local(cfg, command, timeout, on_chunk).await
}

/// Reads `pipe` into `capture` (and `on_chunk`) until EOF, or for at most `DRAIN_GRACE`.
async fn drain(
    pipe: &mut tokio::net::unix::pipe::Receiver,
    buf: &mut [u8],
    capture: &mut Capture,
    on_chunk: &mut impl FnMut(&[u8]),
) {
    let drain = async {
        loop {
            match pipe.read(buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    on_chunk(&buf[..n]);
                    capture.push(&buf[..n]);
                }
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_GRACE, drain).await;
}

fn exit_of(status: std::process::ExitStatus, timed_out: bool) -> Exit {
    if timed_out {
        Exit::TimedOut
    } else if let Some(code) = status.code() {
        Exit::Code(code)
    } else {
        Exit::Signal(status.signal().unwrap_or(0))
    }
}

/// The tier-B path through the launcher. Dropping this future drops the keeper's line, and the
/// keeper kills everything the command started.
async fn run_remote(
    launcher: &crate::launcher::Launcher,
    cfg: &ExecConfig,
    command: &str,
    timeout: Duration,
    mut on_chunk: impl FnMut(&[u8]),
) -> std::io::Result<ExecOutcome> {
    let (reader, writer) = std::io::pipe()?;
    let remote = launcher.start(
        &cfg.shell,
        command,
        cfg.env(),
        cfg.cwd.clone(),
        cfg.rlimits,
        writer.into(),
    )?;
    let mut pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(reader.into())?;
    let mut capture = Capture::new(cfg.output_cap);
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
    if pipe_open {
        drain(&mut pipe, &mut buf, &mut capture, &mut on_chunk).await;
    }
    let status = status.expect("the loop ends only with a status");
    let (output, omitted) = capture.finish();
    Ok(ExecOutcome {
        exit: exit_of(status, timed_out),
        output,
        omitted,
        pgid: 0,
    })
}

/// The path without a launcher (tier A, or tier B without loopback): the worker spawns the
/// command itself, under a keeper when the kernel scopes signals, else killing its group.
async fn run_local(
    cfg: &ExecConfig,
    command: &str,
    timeout: Duration,
    mut on_chunk: impl FnMut(&[u8]),
) -> std::io::Result<ExecOutcome> {
    let (reader, writer) = std::io::pipe()?;
    let mut cmd = std::process::Command::new(&cfg.shell);
    cmd.arg("-c")
        .arg(command)
        .env_clear()
        .envs(cfg.env())
        .current_dir(&cfg.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer.try_clone()?))
        .stderr(Stdio::from(writer));
    configure_command(
        &mut cmd,
        ChildSetup {
            fds: Vec::new(),
            rlimits: cfg.rlimits,
            parent_pid: std::process::id() as i32,
            new_session: true,
        },
    );
    // Under a keeper the spawned process is the keeper: it must not be killed from here (it
    // would die before its sweep); firing the switch (also on drop) makes it kill and exit.
    let switch = match keeper() {
        Ok(k) => Some(k.attach(&mut cmd)?),
        Err(_) => None,
    };
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(switch.is_none());
    let mut child = cmd.spawn()?;
    // `cmd` still holds the pipe's write end (through its Stdio) and the kill pipe's read end:
    // drop them so EOF and the keeper's hang-up can come.
    drop(cmd);
    let pgid = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .ok_or_else(|| std::io::Error::other("the command exited before its pid was read"))?;
    // From here on, whatever happens to this future, every process of the command dies with it.
    let mut guard = match switch {
        Some(s) => Stop::Keeper(s),
        None => Stop::Group(GroupKill::new(pgid)),
    };
    let mut pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(reader.into())?;
    let mut capture = Capture::new(cfg.output_cap);
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
            s = child.wait() => status = Some(s?),
            _ = tokio::time::sleep_until(deadline) => {
                timed_out = true;
                // The keeper exits (and `wait` returns) once the sweep found nothing left.
                guard.now();
                status = Some(child.wait().await?);
            }
        }
    }
    // The command is gone: whatever it left running goes too (the keeper did this already
    // before exiting), then the pipe drains.
    guard.now();
    if pipe_open {
        drain(&mut pipe, &mut buf, &mut capture, &mut on_chunk).await;
    }
    let status = status.expect("the loop ends only with a status");
    let exit = exit_of(status, timed_out);
    let (output, omitted) = capture.finish();
    Ok(ExecOutcome {
        exit,
        output,
        omitted,
        pgid,
    })
}

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
    fn env_is_built_from_the_allow_list_only() {
        let mut cfg = ExecConfig::new(
            "/w".into(),
            "/r".into(),
            Rlimits {
                core: 0,
                nofile: 256,
                fsize: None,
            },
        );
        cfg.inherited = vec![
            ("PATH".into(), "/p".into()),
            ("SECRET_API_KEY".into(), "x".into()),
            ("HOME".into(), "/root".into()),
        ];
        cfg.extra_env = vec![
            ("CARGO_TERM_COLOR".into(), "never".into()),
            ("GITHUB_TOKEN".into(), "ghp".into()),
            ("HOME".into(), "/root".into()),
        ];
        let env = cfg.env();
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            ["LANG", "TERM", "PATH", "HOME", "TMPDIR", "CARGO_TERM_COLOR"]
        );
        assert!(env.contains(&("HOME".into(), "/r/home".into())));
        assert!(env.contains(&("TMPDIR".into(), "/r/tmp".into())));
        assert!(env.contains(&("PATH".into(), "/p".into())));
    }
}
