//! How a language server process comes to exist. The client never spawns anything itself: the
//! lsp worker hands it a [`ServerSpawner`] backed by the project's sandboxed command runner
//! (workspace read-only, toolchain read-only, no network, a private temp directory); tests and
//! tools without a sandbox use [`TokioSpawner`].

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use tokio::io::{AsyncRead, AsyncWrite};

/// What to run: a resolved program, its arguments, and the directory to run it in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchSpec {
    /// The server's name in the registry (`pyright`, `typescript`, …), for the sandbox's records.
    pub server: String,
    /// The program, already resolved to an absolute path.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// The workspace root.
    pub cwd: PathBuf,
}

/// How a server process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerExit {
    /// Its exit status, if it exited.
    pub code: Option<i32>,
    /// The signal that killed it, if one did.
    pub signal: Option<i32>,
}

impl std::fmt::Display for ServerExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.code, self.signal) {
            (Some(c), _) => write!(f, "exit status {c}"),
            (None, Some(s)) => write!(f, "killed by signal {s}"),
            (None, None) => f.write_str("ended"),
        }
    }
}

/// A boxed, sendable future (what [`ServerProcess`] methods return).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The running process behind a server's streams.
pub trait ServerProcess: Send {
    /// Its process id, if it has one the caller could signal.
    fn id(&self) -> Option<u32>;
    /// Starts killing it and everything it started; returns without waiting.
    fn start_kill(&mut self) -> io::Result<()>;
    /// Waits for it to end (cancel-safe: dropping the future and calling again is fine).
    fn wait(&mut self) -> BoxFuture<'_, io::Result<ServerExit>>;
}

/// A started server: its three streams and its process.
pub struct SpawnedServer {
    /// Where we write to the server.
    pub stdin: Box<dyn AsyncWrite + Send + Unpin>,
    /// What the server writes to us (the protocol).
    pub stdout: Box<dyn AsyncRead + Send + Unpin>,
    /// Its stderr, when it is a pipe.
    pub stderr: Option<Box<dyn AsyncRead + Send + Unpin>>,
    /// The process, to wait for or kill.
    pub process: Box<dyn ServerProcess>,
}

/// Starts server processes. `Err` with [`io::ErrorKind::NotFound`] means the program is not
/// installed (reported to the user once, with how to install it).
pub trait ServerSpawner: Send + Sync {
    /// Start the server `spec` describes.
    fn spawn(&self, spec: &LaunchSpec) -> io::Result<SpawnedServer>;
}

/// Spawns servers as plain child processes with tokio: no sandbox. Each server gets its own
/// process group, killed as a whole, and an environment reduced to an allow-list.
#[derive(Debug, Clone)]
pub struct TokioSpawner {
    env: Vec<(String, String)>,
}

/// Variables a language server needs to find its runtime and a temp directory.
pub const DEFAULT_ENV_ALLOW: &[&str] = &["PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "NODE_PATH"];

impl TokioSpawner {
    /// Passes the allow-listed variables of this process's environment ([`DEFAULT_ENV_ALLOW`]).
    pub fn new() -> Self {
        let env = DEFAULT_ENV_ALLOW
            .iter()
            .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
            .collect();
        TokioSpawner { env }
    }

    /// Adds (or replaces) one variable.
    pub fn with_env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        let key = key.into();
        self.env.retain(|(k, _)| *k != key);
        self.env.push((key, value.into()));
        self
    }
}

impl Default for TokioSpawner {
    fn default() -> Self {
        Self::new()
    }
}

impl ServerSpawner for TokioSpawner {
    fn spawn(&self, spec: &LaunchSpec) -> io::Result<SpawnedServer> {
        let mut cmd = tokio::process::Command::new(&spec.program);
        cmd.args(&spec.args)
            .current_dir(&spec.cwd)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = cmd.spawn()?;
        let missing = || io::Error::other("a pipe of the child was not created");
        let stdin = child.stdin.take().ok_or_else(missing)?;
        let stdout = child.stdout.take().ok_or_else(missing)?;
        let stderr = child.stderr.take();
        Ok(SpawnedServer {
            stdin: Box::new(stdin),
            stdout: Box::new(stdout),
            stderr: stderr.map(|s| Box::new(s) as Box<dyn AsyncRead + Send + Unpin>),
            process: Box::new(TokioProcess { child }),
        })
    }
}

struct TokioProcess {
    child: tokio::process::Child,
}

impl ServerProcess for TokioProcess {
    fn id(&self) -> Option<u32> {
        self.child.id()
    }

    fn start_kill(&mut self) -> io::Result<()> {
        if let Some(pid) = self.child.id().and_then(|p| i32::try_from(p).ok()) {
            // The group first: a server's helpers (tsserver under typescript-language-server)
            // must not outlive it. The child leads its own group (process_group(0)).
            let group = nix::unistd::Pid::from_raw(pid);
            let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        }
        match self.child.start_kill() {
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => Ok(()), // already reaped
            other => other,
        }
    }

    fn wait(&mut self) -> BoxFuture<'_, io::Result<ServerExit>> {
        Box::pin(async move {
            use std::os::unix::process::ExitStatusExt;
            let status = self.child.wait().await?;
            Ok(ServerExit {
                code: status.code(),
                signal: status.signal(),
            })
        })
    }
}
