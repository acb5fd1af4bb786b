//! The lsp worker process: its entry point, the request handler of the lsp channel, and the
//! spawner that starts every language server through the project's one command runner.
//!
//! The worker forks its command launcher (`hanzo_tools::launcher`) before it confines itself —
//! its own seccomp allow-list admits no `execve` — and starts each server through it
//! ([`RunnerSpawner`]): a new session, fds closed, an environment built here and nothing else,
//! rlimits, a keeper that kills everything the server started, and the server's own confinement
//! ([`server_profile`]: the workspace read-only, the system's toolchains read-only, its own home
//! and temp directory in the run directory, **no socket at all**). The worker runs in tier A (it
//! only reads); its launcher's profile is `launcher_profile(Role::Lsp, ..)`, which the supervisor
//! verifies as one of the worker's helpers.

use crate::registry::{LspServers, Registry};
use crate::servers::{EventSink, LanguageServers, LanguageServersConfig, ServerEvent};
use crate::spawn::{
    BoxFuture, LaunchSpec, ServerExit, ServerProcess, ServerSpawner, SpawnedServer,
};
use crate::types::LspFailure;
use crate::LspError;
use hanzo_ipc::channel::{Handler, ItemSink};
use hanzo_ipc::proto::{RemoteError, RemoteErrorKind};
use hanzo_ipc::roles::lsp::{Event, LspProtocol, Request, Response};
use hanzo_ipc::Role;
use hanzo_policy::isolation::Tier;
use hanzo_policy::profile::{CommandProfile, FsScope, NetAccess, Rlimits};
use hanzo_tools::runner::{Pipes, Runner, Running, Spawn};
use hanzo_worker::{handle_common, WorkerOptions};
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncWrite};

/// What every language server may reach: the workspace read-only (plus the system directories
/// every command reads), the device nodes ordinary programs open, its private home and temp
/// directory inside the run directory, and no network (`socket(2)` refused outright). A server
/// installed outside the system directories also reads `prefixes`, its installation prefixes
/// ([`crate::prefix`], granted to the lsp role at its start).
pub fn server_profile(prefixes: &[PathBuf]) -> CommandProfile {
    CommandProfile {
        fs: FsScope::WorkspaceRo,
        extra_read: prefixes.to_vec(),
        extra_write: Vec::new(),
        network: NetAccess::None,
        devices: true,
    }
}

/// The rlimits of a server: no core dumps, 1024 open files, files of at most 1 GiB (it should
/// write none but its caches in its temp directory).
pub const SERVER_RLIMITS: Rlimits = Rlimits {
    core: 0,
    nofile: 1024,
    fsize: Some(1 << 30),
};

const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Starts servers through the command runner (the worker's launcher, or a local runner in tests).
pub struct RunnerSpawner {
    runner: Arc<Runner>,
    /// The run's private directory: each server's `HOME` and `TMPDIR` are made under
    /// `<run>/lsp/<server>/`.
    run_dir: PathBuf,
    path: String,
    /// The installation prefixes granted to the lsp role (`ProfileContext::toolchains`), which
    /// every server may read (each is vetted before it starts: [`crate::prefix`]).
    prefixes: Vec<PathBuf>,
}

impl RunnerSpawner {
    /// `path` is the servers' `PATH` (the worker's own, else a system default).
    pub fn new(runner: Arc<Runner>, run_dir: impl Into<PathBuf>, path: Option<String>) -> Self {
        RunnerSpawner {
            runner,
            run_dir: run_dir.into(),
            path: path.unwrap_or_else(|| DEFAULT_PATH.to_string()),
            prefixes: Vec::new(),
        }
    }

    /// Servers may also read these installation prefixes (the lsp role's
    /// `ProfileContext::toolchains`; outside them the sandbox refuses).
    pub fn with_prefixes(mut self, prefixes: Vec<PathBuf>) -> Self {
        self.prefixes = prefixes;
        self
    }

    /// The complete environment of a server: nothing of the worker's reaches it but `PATH`,
    /// with the `bin` of the toolchain or version installation the program belongs to first
    /// ([`crate::prefix::install_bin`]), so what it runs is that installation's own.
    fn env(&self, program: &Path, home: &Path, tmp: &Path) -> Vec<(String, String)> {
        let real = std::fs::canonicalize(program).unwrap_or_else(|_| program.to_path_buf());
        let path = match crate::prefix::install_bin(&real) {
            Some(bin) if !bin.to_string_lossy().contains(':') => {
                format!("{}:{}", bin.display(), self.path)
            }
            _ => self.path.clone(),
        };
        vec![
            ("PATH".to_string(), path),
            ("LANG".to_string(), "C.UTF-8".to_string()),
            ("HOME".to_string(), home.display().to_string()),
            ("TMPDIR".to_string(), tmp.display().to_string()),
        ]
    }
}

/// A server's name as a directory name.
fn dir_name(server: &str) -> String {
    server
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

impl ServerSpawner for RunnerSpawner {
    fn spawn(&self, spec: &LaunchSpec) -> io::Result<SpawnedServer> {
        if !spec.program.exists() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} does not exist", spec.program.display()),
            ));
        }
        let base = self.run_dir.join("lsp").join(dir_name(&spec.server));
        let (home, tmp) = (base.join("home"), base.join("tmp"));
        std::fs::create_dir_all(&home)?;
        std::fs::create_dir_all(&tmp)?;
        let spawn = Spawn {
            program: spec.program.clone(),
            args: spec.args.iter().map(Into::into).collect(),
            env: self.env(&spec.program, &home, &tmp),
            cwd: spec.cwd.clone(),
            rlimits: SERVER_RLIMITS,
            profile: server_profile(&self.prefixes),
        };
        let mut running = self
            .runner
            .start(spawn, Pipes::ALL)
            .map_err(|e| io::Error::other(e.to_string()))?;
        let missing = || io::Error::other("the runner did not create the server's pipes");
        let stdin = running.stdin.take().ok_or_else(missing)?;
        let stdout = running.stdout.take().ok_or_else(missing)?;
        let stderr = running.stderr.take();
        Ok(SpawnedServer {
            stdin: Box::new(stdin) as Box<dyn AsyncWrite + Send + Unpin>,
            stdout: Box::new(stdout) as Box<dyn AsyncRead + Send + Unpin>,
            stderr: stderr.map(|s| Box::new(s) as Box<dyn AsyncRead + Send + Unpin>),
            process: Box::new(RunnerProcess { running }),
        })
    }
}

/// A server started by the runner: killed (with everything it started) by its keeper.
struct RunnerProcess {
    running: Running,
}

impl ServerProcess for RunnerProcess {
    fn id(&self) -> Option<u32> {
        // The keeper knows it; the worker signals only through the keeper.
        None
    }

    fn start_kill(&mut self) -> io::Result<()> {
        self.running.kill();
        Ok(())
    }

    fn wait(&mut self) -> BoxFuture<'_, io::Result<ServerExit>> {
        Box::pin(async move {
            let status = self
                .running
                .wait()
                .await
                .map_err(|e| io::Error::other(e.to_string()))?;
            Ok(ServerExit {
                code: status.code(),
                signal: status.signal(),
            })
        })
    }
}

/// What the handler serves from: the servers of the current table, built on first use.
struct State {
    registry: Registry,
    servers: Option<Arc<LanguageServers>>,
    /// The `Configure` text in effect: the same table again changes nothing (the supervisor
    /// sends it to each new worker process before its first call, and may send it again).
    configured: Option<String>,
}

/// Serves the lsp channel.
pub struct LspHandler {
    root: Result<PathBuf, String>,
    spawner: Arc<dyn ServerSpawner>,
    events: EventSink,
    template: LanguageServersConfig,
    state: Mutex<State>,
}

impl LspHandler {
    /// `root` is the workspace, or why there is none (answered on every call). Servers start
    /// through `spawner`; what they do is reported to `events`.
    pub fn new(
        root: Result<PathBuf, String>,
        spawner: Arc<dyn ServerSpawner>,
        events: EventSink,
    ) -> Self {
        let template = LanguageServersConfig::new(root.clone().unwrap_or_default());
        LspHandler {
            root,
            spawner,
            events,
            state: Mutex::new(State {
                registry: template.registry.clone(),
                servers: None,
                configured: None,
            }),
            template,
        }
    }

    fn servers(&self) -> Result<Arc<LanguageServers>, RemoteError> {
        let root = self
            .root
            .as_ref()
            .map_err(|e| RemoteError::new(RemoteErrorKind::Internal, e.clone()))?;
        let mut st = lock(&self.state);
        if let Some(s) = &st.servers {
            return Ok(s.clone());
        }
        let config = LanguageServersConfig {
            root: root.clone(),
            registry: st.registry.clone(),
            ..self.template.clone()
        };
        let servers = LanguageServers::new(config, self.spawner.clone(), self.events.clone())
            .map_err(|e| RemoteError::new(RemoteErrorKind::Internal, e.to_string()))?;
        let servers = Arc::new(servers);
        st.servers = Some(servers.clone());
        Ok(servers)
    }

    /// Under a sandbox: the installation prefixes it was given and hanzo's hidden directories,
    /// against which each server is checked before it starts
    /// ([`LanguageServersConfig::granted_prefixes`]).
    pub fn with_prefixes(mut self, granted: Vec<PathBuf>, hidden: Vec<PathBuf>) -> Self {
        self.template.granted_prefixes = Some(granted);
        self.template.hidden = hidden;
        self
    }

    /// Replace the table of servers; running ones are stopped. The table in effect again is a
    /// no-op.
    pub async fn configure(&self, servers_json: &str) -> Result<Response, RemoteError> {
        let bad = |e: String| {
            RemoteError::new(
                RemoteErrorKind::BadRequest,
                format!(
                    "lsp_servers in the settings: {e}; fix the entry (`hanzo-dev config show`)"
                ),
            )
        };
        if lock(&self.state).configured.as_deref() == Some(servers_json) {
            return Ok(Response::Done);
        }
        let entries: LspServers = if servers_json.trim().is_empty() {
            LspServers::new()
        } else {
            serde_json::from_str(servers_json).map_err(|e| bad(e.to_string()))?
        };
        let registry = Registry::with_settings(&entries).map_err(|e| bad(e.to_string()))?;
        let old = {
            let mut st = lock(&self.state);
            st.registry = registry;
            st.configured = Some(servers_json.to_string());
            st.servers.take()
        };
        if let Some(old) = old {
            old.shutdown().await;
        }
        Ok(Response::Done)
    }

    /// Stop every server (`shutdown`, `exit`, then kill).
    pub async fn shutdown(&self) {
        let servers = lock(&self.state).servers.take();
        if let Some(s) = servers {
            s.shutdown().await;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn failed(e: &LspError) -> Response {
    Response::Failed(e.to_failure())
}

fn failure(e: LspError) -> LspFailure {
    e.to_failure()
}

/// Serves the lsp requests against `servers` (everything but the common requests and
/// `Configure`).
pub async fn serve_request(servers: &LanguageServers, request: Request) -> Response {
    use hanzo_ipc::roles::lsp::Position;
    let pos = |p: Position| crate::types::Position::new(p.line, p.column);
    match request {
        Request::FileChanged { path } => match servers.file_changed(Path::new(&path)).await {
            Ok(()) | Err(LspError::NoServer { .. }) => Response::Done,
            Err(e) => failed(&e),
        },
        Request::Touch { path } => match servers.touch(Path::new(&path)).await {
            Ok(()) | Err(LspError::NoServer { .. }) => Response::Done,
            Err(e) => failed(&e),
        },
        Request::Diagnostics { paths } => {
            let paths: Vec<PathBuf> = paths.iter().map(PathBuf::from).collect();
            Response::Diagnostics(
                servers
                    .diagnostics_of(&paths)
                    .await
                    .into_iter()
                    .map(|(_, r)| r.map_err(failure))
                    .collect(),
            )
        }
        Request::ChangedDiagnostics { paths } => {
            let paths: Vec<PathBuf> = paths.iter().map(PathBuf::from).collect();
            Response::Diagnostics(
                servers
                    .changed_diagnostics(&paths)
                    .await
                    .into_iter()
                    .map(|(_, r)| r.map_err(failure))
                    .collect(),
            )
        }
        Request::Definition { path, position } => {
            match servers.definition(Path::new(&path), pos(position)).await {
                Ok(l) => Response::Locations(l),
                Err(e) => failed(&e),
            }
        }
        Request::References {
            path,
            position,
            include_declaration,
        } => match servers
            .references(Path::new(&path), pos(position), include_declaration)
            .await
        {
            Ok(l) => Response::Locations(l),
            Err(e) => failed(&e),
        },
        Request::Hover { path, position } => {
            match servers.hover(Path::new(&path), pos(position)).await {
                Ok(h) => Response::Hover(h),
                Err(e) => failed(&e),
            }
        }
        Request::Check { paths } => {
            let paths: Vec<PathBuf> = paths.iter().map(PathBuf::from).collect();
            Response::Check(crate::check(servers, &paths).await)
        }
        Request::Status => Response::Status(servers.status()),
        Request::Common(_) | Request::Configure { .. } => Response::Failed(LspFailure {
            kind: crate::types::LspFailureKind::Protocol,
            server: None,
            message: "this request is not served here".to_string(),
        }),
    }
}

impl<W: AsyncWrite + Unpin + Send + 'static> Handler<LspProtocol, W> for LspHandler {
    async fn handle(
        &self,
        request: Request,
        items: ItemSink<LspProtocol, W>,
    ) -> Result<Response, RemoteError> {
        match request {
            Request::Common(c) => handle_common::<LspProtocol, W>(c, items)
                .await
                .map(Response::Common),
            Request::Configure { servers_json } => self.configure(&servers_json).await,
            Request::Touch { path } => {
                // A warm-up, answered at once: the server starts (and opens the file) in the
                // background, so the read that prompted it is not delayed by a server's start. A
                // failure shows on the next real call, which waits for the same start.
                let servers = self.servers()?;
                tokio::spawn(async move {
                    if let Err(e) = servers.touch(Path::new(&path)).await {
                        tracing::debug!("warming up the server of {path}: {e}");
                    }
                });
                Ok(Response::Done)
            }
            other => {
                let servers = self.servers()?;
                Ok(serve_request(&servers, other).await)
            }
        }
    }

    /// The run is over: every server gets `shutdown` and `exit`, as when it is replaced.
    async fn stop(&self) {
        self.shutdown().await;
    }
}

/// A server event as the lsp channel carries it (`None`: logs, which stay in the worker's log).
pub fn to_channel_event(e: ServerEvent) -> Option<Event> {
    Some(match e {
        ServerEvent::Started {
            server,
            pid,
            starts,
            prefixes,
        } => {
            if !prefixes.is_empty() {
                tracing::info!(
                    server = %server,
                    "started, reading its installation prefix {}",
                    prefixes
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            Event::ServerStarted {
                server,
                pid,
                starts,
            }
        }
        ServerEvent::Missing {
            server,
            program,
            hint,
        } => Event::ServerMissing {
            server,
            program,
            hint,
        },
        ServerEvent::Exited { server, detail } => Event::ServerExited { server, detail },
        ServerEvent::Restarting {
            server,
            attempt,
            delay,
        } => Event::ServerRestarting {
            server,
            attempt,
            delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
        },
        ServerEvent::Unavailable { server, reason } => Event::ServerUnavailable { server, reason },
        ServerEvent::Log(l) => {
            tracing::debug!(server = %l.server, "{}", l.message);
            return None;
        }
    })
}

/// The workspace the servers may serve, or why none: tier A cannot keep hanzo's own hidden
/// directories out of a server's reach when they are inside the workspace.
fn workspace_of(ctx: &hanzo_policy::profile::ProfileContext) -> Result<PathBuf, String> {
    let ws = ctx
        .workspace
        .clone()
        .ok_or_else(|| "the lsp worker was started without a workspace".to_string())?;
    let dangerous = ctx.hidden_in_workspace();
    if !dangerous.is_empty() && !ctx.allow_dangerous_workspace {
        return Err(format!(
            "the workspace {} contains {}, which a language server could read; no language \
             server is started (--allow-dangerous-workspace runs them anyway)",
            ws.display(),
            dangerous
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(ws)
}

/// The lsp worker's `main`: fork the command launcher (before confinement, from this still
/// single-threaded process), then confine, handshake and serve with the launcher's attestation
/// among the helpers. Returns the process exit code.
pub fn worker_main(opts: WorkerOptions) -> i32 {
    let fail = |what: &str| {
        eprintln!("hanzo-dev lsp worker: {what}");
        hanzo_worker::exit::CONFINE_FAILED
    };
    let mut launcher = match hanzo_tools::launcher::prepare() {
        Ok(l) => l,
        Err(e) => return fail(&e.to_string()),
    };
    launcher.fork(Role::Lsp, &opts.ctx, Tier::A);
    let launcher_att = match launcher.finish() {
        Ok(a) => a,
        Err(e) => return fail(&format!("no command launcher: {e}")),
    };
    hanzo_worker::run_with_helpers::<LspProtocol, _, _>(opts, vec![launcher_att], move |ctx| {
        tokio::spawn(async {
            hanzo_tools::runner::launcher_gone().await;
            eprintln!("hanzo-dev lsp worker: the command launcher is gone; exiting");
            std::process::exit(hanzo_worker::exit::LAUNCHER_GONE);
        });
        let root = workspace_of(&ctx.opts.ctx);
        let run_dir = ctx
            .opts
            .ctx
            .run_dir
            .clone()
            .unwrap_or_else(std::env::temp_dir);
        let runner = Runner::shared(Role::Lsp, ctx.opts.ctx.clone());
        let toolchains = ctx.opts.ctx.toolchains.clone();
        let spawner = Arc::new(
            RunnerSpawner::new(runner, run_dir, std::env::var("PATH").ok())
                .with_prefixes(toolchains.clone()),
        );
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
        let events = ctx.events;
        tokio::spawn(async move {
            while let Some(e) = rx.recv().await {
                if events.send(e).await.is_err() {
                    break;
                }
            }
        });
        let sink: EventSink = Arc::new(move |e| {
            if let Some(e) = to_channel_event(e) {
                let _ = tx.send(e);
            }
        });
        LspHandler::new(root, spawner, sink).with_prefixes(toolchains, ctx.opts.ctx.hidden.clone())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TokioSpawner;

    #[tokio::test]
    async fn the_same_table_again_keeps_the_servers_and_another_replaces_them() {
        let dir = tempfile::tempdir().expect("tmp");
        let h = LspHandler::new(
            Ok(dir.path().to_path_buf()),
            Arc::new(TokioSpawner::new()),
            Arc::new(|_| {}),
        );
        h.configure("{}").await.expect("configure");
        let first = h.servers().expect("servers");
        h.configure("{}").await.expect("again");
        assert!(Arc::ptr_eq(&first, &h.servers().expect("servers")));
        let table = r#"{"x": {"command": "x", "files": ["**/*.x"]}}"#;
        h.configure(table).await.expect("another table");
        let second = h.servers().expect("servers");
        assert!(!Arc::ptr_eq(&first, &second));
        assert!(second.status().iter().any(|s| s.name == "x"));
        let err = h
            .configure(r#"{"y": {"files": ["*.y"]}}"#)
            .await
            .expect_err("no command");
        assert!(err.message.contains("lsp_servers"), "{}", err.message);
        // A refused table leaves the one in effect.
        assert!(Arc::ptr_eq(&second, &h.servers().expect("servers")));
    }

    #[test]
    fn a_workspace_holding_hanzos_hidden_directories_starts_no_server() {
        let ctx = hanzo_policy::profile::ProfileContext {
            workspace: Some("/home/u".into()),
            hidden: vec!["/home/u/.config/hanzo".into()],
            ..Default::default()
        };
        let err = workspace_of(&ctx).expect_err("refused");
        assert!(err.contains("/home/u/.config/hanzo"), "{err}");
    }
}
