//! The language servers of one workspace: each started lazily on the first file of its
//! language, routed to by the file's path, restarted with backoff after a crash (and given up on
//! after too many), reported once when not installed, stopped together.

use crate::client::{ClientOptions, LspClient, ServerSetup};
use crate::conn::lock;
use crate::documents::Snapshot;
use crate::error::LspError;
use crate::inbound::{LogSink, ServerLog};
use crate::registry::{
    find_typescript, resolve_program, with_tsserver_path, Registry, ServerSpec, TypeScriptLib,
};
use crate::spawn::{LaunchSpec, ServerSpawner};
use crate::types::{FileDiagnostics, HoverInfo, Location, Position, ServerState, ServerStatus};
use hanzo_backoff::Backoff;
use std::collections::VecDeque;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// When a crashed server is started again, and when it is given up on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartPolicy {
    /// Backoff before a restart: full jitter between zero and `base · 2ⁿ`, at most `max`.
    pub base: Duration,
    /// The longest backoff.
    pub max: Duration,
    /// More crashes than this within `window` and the server is unavailable for the session.
    pub max_crashes: usize,
    /// The period in which `max_crashes` is counted.
    pub window: Duration,
    /// A server that ran this long before it crashed starts its backoff over.
    pub healthy_after: Duration,
    /// Failed starts in a row (it exits or errs before answering `initialize`) before the server
    /// is unavailable for the session.
    pub max_start_failures: u32,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            base: Duration::from_millis(200),
            max: Duration::from_secs(30),
            max_crashes: 5,
            window: Duration::from_secs(300),
            healthy_after: Duration::from_secs(60),
            max_start_failures: 2,
        }
    }
}

/// What the language servers of a workspace are set up with.
#[derive(Debug, Clone)]
pub struct LanguageServersConfig {
    /// The workspace root.
    pub root: PathBuf,
    /// The server definitions (built-in and from settings).
    pub registry: Registry,
    /// Where server programs are looked up (the lsp worker's `PATH`, plus what the user adds).
    pub search_path: Vec<PathBuf>,
    /// Limits and timeouts of each client.
    pub client: ClientOptions,
    /// When and how often a crashed server is started again.
    pub restart: RestartPolicy,
    /// Directories expanded by [`LanguageServers::expand`] (for `lsp check`) yield at most this
    /// many files.
    pub max_check_files: usize,
    /// Under a sandbox, the installation prefixes it was given (`ProfileContext::toolchains`):
    /// a server outside the system directories and the workspace starts only when its prefixes
    /// ([`crate::prefix::server_prefixes`]) are among them, and is refused, naming the path,
    /// otherwise. `None` (no sandbox, as with [`crate::TokioSpawner`]): nothing is checked.
    pub granted_prefixes: Option<Vec<PathBuf>>,
    /// hanzo's hidden directories, which no prefix may overlap.
    pub hidden: Vec<PathBuf>,
}

impl LanguageServersConfig {
    /// Servers for the workspace at `root`: the built-in registry, `PATH` from this process's
    /// environment, default limits, no sandbox prefixes checked.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        LanguageServersConfig {
            root: root.into(),
            registry: Registry::builtin(),
            search_path: crate::registry::path_from_env(),
            client: ClientOptions::default(),
            restart: RestartPolicy::default(),
            max_check_files: 500,
            granted_prefixes: None,
            hidden: Vec::new(),
        }
    }
}

/// What happened to a server, for the supervisor's event stream and the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerEvent {
    /// A server process started and initialized.
    Started {
        /// The server's name.
        server: String,
        /// Its pid, if known.
        pid: Option<u32>,
        /// Times it was started in this session, this one included.
        starts: u32,
        /// The installation prefixes its sandbox reads it from, beyond the system directories
        /// and the workspace (empty for most servers).
        prefixes: Vec<PathBuf>,
    },
    /// The program is not installed: sent once per server and session.
    Missing {
        /// The server's name.
        server: String,
        /// The program that was not found.
        program: String,
        /// How to install it.
        hint: String,
    },
    /// It ended without being asked to (crash, kill, protocol violation, flood, hang).
    Exited {
        /// The server's name.
        server: String,
        /// How it ended, sanitised.
        detail: String,
    },
    /// It will be started again after `delay`, on the next call that needs it.
    Restarting {
        /// The server's name.
        server: String,
        /// Which restart this is (1-based).
        attempt: u32,
        /// The backoff before it.
        delay: Duration,
    },
    /// It will not be started again in this session.
    Unavailable {
        /// The server's name.
        server: String,
        /// Why, sanitised.
        reason: String,
    },
    /// A line the server logged.
    Log(ServerLog),
}

/// Receives every [`ServerEvent`]; called from the servers' tasks, so it must not block.
pub type EventSink = Arc<dyn Fn(ServerEvent) + Send + Sync>;

struct SlotState {
    client: Option<Arc<LspClient>>,
    starts: u32,
    unavailable: Option<String>,
    last_exit: Option<String>,
    crashes: VecDeque<Instant>,
    backoff: Backoff,
    start_failures: u32,
    started_at: Option<Instant>,
}

struct Slot {
    spec: ServerSpec,
    start: tokio::sync::Mutex<()>,
    state: std::sync::Mutex<SlotState>,
}

/// The language servers of one workspace.
pub struct LanguageServers {
    root: PathBuf,
    registry: Registry,
    search_path: Vec<PathBuf>,
    options: ClientOptions,
    restart: RestartPolicy,
    max_check_files: usize,
    granted_prefixes: Option<Vec<PathBuf>>,
    hidden: Vec<PathBuf>,
    spawner: Arc<dyn ServerSpawner>,
    events: EventSink,
    slots: Vec<Slot>,
    stopped: std::sync::atomic::AtomicBool,
}

impl LanguageServers {
    /// Nothing starts here: each server starts on the first call that needs it.
    pub fn new(
        config: LanguageServersConfig,
        spawner: Arc<dyn ServerSpawner>,
        events: EventSink,
    ) -> Result<Self, LspError> {
        let root = std::fs::canonicalize(&config.root).map_err(|e| LspError::Read {
            path: config.root.clone(),
            detail: format!("the workspace root: {e}"),
        })?;
        let slots = config
            .registry
            .servers()
            .iter()
            .map(|spec| Slot {
                spec: spec.clone(),
                start: tokio::sync::Mutex::new(()),
                state: std::sync::Mutex::new(SlotState {
                    client: None,
                    starts: 0,
                    unavailable: None,
                    last_exit: None,
                    crashes: VecDeque::new(),
                    backoff: Backoff::new(config.restart.base, config.restart.max),
                    start_failures: 0,
                    started_at: None,
                }),
            })
            .collect();
        Ok(LanguageServers {
            root,
            registry: config.registry,
            search_path: config.search_path,
            options: config.client,
            restart: config.restart,
            max_check_files: config.max_check_files,
            granted_prefixes: config.granted_prefixes,
            hidden: config.hidden,
            spawner,
            events,
            slots,
            stopped: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The workspace root, links resolved.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Every configured server and what it is doing.
    pub fn status(&self) -> Vec<ServerStatus> {
        self.slots
            .iter()
            .map(|slot| {
                let st = lock(&slot.state);
                let running = st.client.as_ref().filter(|c| c.is_alive());
                let state = if let Some(reason) = &st.unavailable {
                    ServerState::Unavailable(reason.clone())
                } else if running.is_some() {
                    ServerState::Running
                } else if let Some(c) = &st.client {
                    ServerState::Exited(c.exit_error().map(|e| e.to_string()).unwrap_or_default())
                } else if let Some(exit) = &st.last_exit {
                    ServerState::Exited(exit.clone())
                } else {
                    ServerState::Idle
                };
                ServerStatus {
                    name: slot.spec.name.clone(),
                    state,
                    pid: running.and_then(|c| c.pid()),
                    pending_requests: running.map_or(0, |c| c.pending_requests()),
                    starts: st.starts,
                }
            })
            .collect()
    }

    /// The running client of a server, if any (for tests and diagnostics of the worker).
    pub fn client(&self, server: &str) -> Option<Arc<LspClient>> {
        let slot = self.slots.iter().find(|s| s.spec.name == server)?;
        lock(&slot.state).client.clone().filter(|c| c.is_alive())
    }

    /// Opens the file on its server (starting the server if needed).
    pub async fn touch(&self, path: &Path) -> Result<(), LspError> {
        let (client, abs) = self.route(path).await?;
        client.sync(&abs).await.map(|_| ())
    }

    /// A file changed on disk (a tool wrote, created or deleted it): its server (started if
    /// needed) gets the new content, and every running server's file watchers hear of it.
    pub async fn file_changed(&self, path: &Path) -> Result<(), LspError> {
        self.sync_changed(path).await.map(|_| ())
    }

    /// [`LanguageServers::file_changed`], returning the owner's client and the document as it
    /// was synced (`None` when no server handles the file, or it is gone).
    async fn sync_changed(
        &self,
        path: &Path,
    ) -> Result<Option<(Arc<LspClient>, Snapshot)>, LspError> {
        let abs = self.resolve(path)?;
        let owner = self.index_for(&abs);
        for (i, slot) in self.slots.iter().enumerate() {
            if Some(i) == owner {
                continue;
            }
            let running = lock(&slot.state).client.clone().filter(|c| c.is_alive());
            if let Some(c) = running {
                // Another server's watcher is a courtesy; its failure is that server's problem,
                // seen on its next call.
                let _ = c.file_changed(&abs, false).await;
            }
        }
        let Some(owner) = owner else { return Ok(None) };
        let client = self.client_at(owner).await?;
        let synced = client.file_changed(&abs, true).await?;
        Ok(synced.map(|snap| (client, snap)))
    }

    /// Files a tool wrote, created or deleted, and then their diagnostics, in one call (the
    /// agent loop's sync after every edit): each path is synced as by
    /// [`LanguageServers::file_changed`], then answered as by [`LanguageServers::diagnostics_of`]
    /// from the content just synced, without reading the files again. The server gets the
    /// `didChange` and the diagnostics pull together, as from an editor. A path that could not be
    /// synced is answered with that failure; one that is gone, or that no server handles, with
    /// the failure `diagnostics` gives it.
    pub async fn changed_diagnostics(
        &self,
        paths: &[PathBuf],
    ) -> Vec<(PathBuf, Result<FileDiagnostics, LspError>)> {
        let mut synced = Vec::with_capacity(paths.len());
        for p in paths {
            synced.push(self.sync_changed(p).await);
        }
        let mut out = Vec::with_capacity(paths.len());
        for (p, s) in paths.iter().zip(synced) {
            let result = match s {
                Ok(Some((client, snap))) => client.diagnostics_of_synced(snap).await,
                Ok(None) => self.diagnostics(p).await,
                Err(e) => Err(e),
            };
            out.push((p.clone(), result));
        }
        out
    }

    /// The diagnostics of a file as it is now on disk.
    pub async fn diagnostics(&self, path: &Path) -> Result<FileDiagnostics, LspError> {
        let (client, abs) = self.route(path).await?;
        client.diagnostics(&abs).await
    }

    /// Diagnostics of several files: all are opened first, so servers analyse them together.
    pub async fn diagnostics_of(
        &self,
        paths: &[PathBuf],
    ) -> Vec<(PathBuf, Result<FileDiagnostics, LspError>)> {
        let mut routed = Vec::new();
        for p in paths {
            match self.route(p).await {
                Ok((client, abs)) => {
                    let synced = client.sync(&abs).await.map(|snap| (client, snap));
                    routed.push((p.clone(), synced));
                }
                Err(e) => routed.push((p.clone(), Err(e))),
            }
        }
        let mut out = Vec::new();
        for (p, r) in routed {
            let result = match r {
                Ok((client, snap)) => client.diagnostics_of_synced(snap).await,
                Err(e) => Err(e),
            };
            out.push((p, result));
        }
        out
    }

    /// Where the symbol at `pos` in `path` is defined, from the file's server.
    pub async fn definition(&self, path: &Path, pos: Position) -> Result<Vec<Location>, LspError> {
        let (client, abs) = self.route(path).await?;
        client.definition(&abs, pos).await
    }

    /// Where the symbol at `pos` in `path` is used, from the file's server (with its declaration
    /// when `include_declaration`).
    pub async fn references(
        &self,
        path: &Path,
        pos: Position,
        include_declaration: bool,
    ) -> Result<Vec<Location>, LspError> {
        let (client, abs) = self.route(path).await?;
        client.references(&abs, pos, include_declaration).await
    }

    /// The file's server's description of the symbol at `pos`, if it has one.
    pub async fn hover(&self, path: &Path, pos: Position) -> Result<Option<HoverInfo>, LspError> {
        let (client, abs) = self.route(path).await?;
        client.hover(&abs, pos).await
    }

    /// Stops every running server (`shutdown`, `exit`, then kill after the grace period), all
    /// at once, so one slow server does not delay the others. Later calls fail with
    /// [`LspError::Unavailable`].
    pub async fn shutdown(&self) {
        self.stopped
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let mut stopping = tokio::task::JoinSet::new();
        for slot in &self.slots {
            let _guard = slot.start.lock().await;
            let client = lock(&slot.state).client.take();
            if let Some(c) = client {
                stopping.spawn(async move { c.stop().await });
            }
        }
        while stopping.join_next().await.is_some() {}
    }

    /// Files under `paths` (directories expanded, `.gitignore` respected) that some server
    /// handles, at most `max_check_files` from directories; and how many were left out.
    pub fn expand(&self, paths: &[PathBuf]) -> (Vec<PathBuf>, Vec<(PathBuf, LspError)>, usize) {
        let mut files = Vec::new();
        let mut errors = Vec::new();
        let mut left_out = 0usize;
        for p in paths {
            let abs = match self.resolve(p) {
                Ok(a) => a,
                Err(e) => {
                    errors.push((p.clone(), e));
                    continue;
                }
            };
            if !abs.is_dir() {
                files.push(abs);
                continue;
            }
            let walk = ignore::WalkBuilder::new(&abs)
                .hidden(true)
                .git_ignore(true)
                .require_git(false)
                .build();
            for entry in walk.flatten() {
                if !entry.file_type().is_some_and(|t| t.is_file()) {
                    continue;
                }
                let f = entry.into_path();
                if self.index_for(&f).is_none() {
                    continue;
                }
                if files.len() >= self.max_check_files {
                    left_out += 1;
                } else {
                    files.push(f);
                }
            }
        }
        files.sort();
        files.dedup();
        (files, errors, left_out)
    }

    fn index_for(&self, abs: &Path) -> Option<usize> {
        let rel = abs.strip_prefix(&self.root).ok()?;
        self.registry.index_for(&self.root, rel)
    }

    /// An absolute path inside the workspace, links resolved where the file exists.
    fn resolve(&self, path: &Path) -> Result<PathBuf, LspError> {
        let joined = if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.root.join(path)
        };
        let lexical = normalize(&joined);
        let outside = || LspError::OutsideWorkspace {
            path: path.to_path_buf(),
        };
        let resolved = match std::fs::canonicalize(&lexical) {
            Ok(real) => real,
            // A deleted file: resolve its directory.
            Err(_) => match (
                lexical.parent().and_then(|d| std::fs::canonicalize(d).ok()),
                lexical.file_name(),
            ) {
                (Some(dir), Some(name)) => dir.join(name),
                _ => lexical,
            },
        };
        if resolved.starts_with(&self.root) {
            Ok(resolved)
        } else {
            Err(outside())
        }
    }

    async fn route(&self, path: &Path) -> Result<(Arc<LspClient>, PathBuf), LspError> {
        let abs = self.resolve(path)?;
        let idx = self.index_for(&abs).ok_or_else(|| LspError::NoServer {
            path: crate::sanitize::one_line(&path.to_string_lossy()),
        })?;
        Ok((self.client_at(idx).await?, abs))
    }

    fn emit(&self, e: ServerEvent) {
        (self.events)(e);
    }

    async fn client_at(&self, idx: usize) -> Result<Arc<LspClient>, LspError> {
        let slot = &self.slots[idx];
        let name = slot.spec.name.clone();
        let unavailable = |reason: &str| LspError::Unavailable {
            server: name.clone(),
            reason: reason.to_string(),
        };
        if self.stopped.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(unavailable("the language servers were stopped"));
        }
        if let Some(c) = self.live(slot)? {
            return Ok(c);
        }
        let _guard = slot.start.lock().await;
        if let Some(c) = self.live(slot)? {
            return Ok(c);
        }
        // The server ended since its last use, or never started: decide how long to wait.
        let delay = {
            let mut st = lock(&slot.state);
            match st.client.take() {
                None if st.start_failures == 0 => Duration::ZERO,
                None => st.backoff.next_delay(),
                Some(dead) => {
                    let detail = dead.exit_error().map(|e| e.to_string()).unwrap_or_default();
                    st.last_exit = Some(detail.clone());
                    let now = Instant::now();
                    st.crashes.push_back(now);
                    while st
                        .crashes
                        .front()
                        .is_some_and(|t| now.duration_since(*t) > self.restart.window)
                    {
                        st.crashes.pop_front();
                    }
                    if st.crashes.len() > self.restart.max_crashes {
                        let reason = format!(
                            "it ended {} times within {} s; last: {detail}",
                            st.crashes.len(),
                            self.restart.window.as_secs()
                        );
                        st.unavailable = Some(reason.clone());
                        drop(st);
                        self.emit(ServerEvent::Unavailable {
                            server: name.clone(),
                            reason: reason.clone(),
                        });
                        return Err(unavailable(&reason));
                    }
                    if st
                        .started_at
                        .is_some_and(|t| t.elapsed() >= self.restart.healthy_after)
                    {
                        st.backoff.reset();
                    }
                    let attempt = st.backoff.attempt() + 1;
                    let delay = st.backoff.next_delay();
                    drop(st);
                    self.emit(ServerEvent::Restarting {
                        server: name.clone(),
                        attempt,
                        delay,
                    });
                    delay
                }
            }
        };
        tokio::time::sleep(delay).await;
        match self.start(&slot.spec).await {
            Ok((client, prefixes)) => {
                let client = Arc::new(client);
                let starts = {
                    let mut st = lock(&slot.state);
                    st.client = Some(client.clone());
                    st.starts += 1;
                    st.start_failures = 0;
                    st.started_at = Some(Instant::now());
                    st.starts
                };
                self.emit(ServerEvent::Started {
                    server: name.clone(),
                    pid: client.pid(),
                    starts,
                    prefixes,
                });
                self.watch_exit(&client);
                Ok(client)
            }
            Err(StartError::Missing { program, hint }) => {
                let reason = format!("{program} is not installed; {hint}");
                lock(&slot.state).unavailable = Some(reason);
                self.emit(ServerEvent::Missing {
                    server: name.clone(),
                    program: program.clone(),
                    hint: hint.clone(),
                });
                Err(LspError::ServerMissing {
                    server: name,
                    program,
                    hint,
                })
            }
            Err(StartError::Refused(detail)) => {
                lock(&slot.state).unavailable = Some(detail.clone());
                self.emit(ServerEvent::Unavailable {
                    server: name.clone(),
                    reason: detail.clone(),
                });
                Err(LspError::Refused {
                    server: name,
                    detail,
                })
            }
            Err(StartError::Failed(e)) => {
                let mut st = lock(&slot.state);
                st.start_failures += 1;
                st.last_exit = Some(e.to_string());
                if st.start_failures >= self.restart.max_start_failures {
                    let reason =
                        format!("it failed to start {} times; last: {e}", st.start_failures);
                    st.unavailable = Some(reason.clone());
                    drop(st);
                    self.emit(ServerEvent::Unavailable {
                        server: name,
                        reason,
                    });
                }
                Err(e)
            }
        }
    }

    /// The slot's client if it is running; the slot's verdict if it is unavailable.
    fn live(&self, slot: &Slot) -> Result<Option<Arc<LspClient>>, LspError> {
        let st = lock(&slot.state);
        if let Some(reason) = &st.unavailable {
            return Err(LspError::Unavailable {
                server: slot.spec.name.clone(),
                reason: reason.clone(),
            });
        }
        Ok(st.client.clone().filter(|c| c.is_alive()))
    }

    /// Reports the end of a server as soon as it happens (a restart waits for the next call).
    fn watch_exit(&self, client: &Arc<LspClient>) {
        let events = self.events.clone();
        let name = client.name().to_string();
        let weak = Arc::downgrade(client);
        let mut ended = client.death_watch();
        tokio::spawn(async move {
            while ended.borrow_and_update().is_none() {
                if ended.changed().await.is_err() {
                    return;
                }
            }
            let stopped = matches!(*ended.borrow(), Some(crate::conn::Death::Stopped));
            if let (false, Some(c)) = (stopped, weak.upgrade()) {
                let detail = c.exit_error().map(|e| e.to_string()).unwrap_or_default();
                events(ServerEvent::Exited {
                    server: name,
                    detail,
                });
            }
        });
    }

    /// The installation prefixes `program` is read from, when a sandbox gave them; refused when
    /// one would open too much or was not given.
    fn check_prefixes(&self, program: &Path) -> Result<Vec<PathBuf>, StartError> {
        let Some(granted) = &self.granted_prefixes else {
            return Ok(Vec::new());
        };
        let rules = crate::prefix::PrefixRules {
            home: None,
            workspace: self.root.clone(),
            hidden: self.hidden.clone(),
            search_path: self.search_path.clone(),
        };
        let prefixes = crate::prefix::server_prefixes(program, &rules)
            .map_err(|e| StartError::Refused(e.to_string()))?;
        if let Some(p) = prefixes
            .iter()
            .find(|p| !granted.iter().any(|g| p.starts_with(g)))
        {
            return Err(StartError::Refused(format!(
                "{} is installed under {}, which was not opened to the language servers when \
                 the lsp worker started (its sandbox is fixed then; `hanzo-dev` grants the \
                 prefixes of the servers found on PATH at the start of a run)",
                program.display(),
                p.display()
            )));
        }
        Ok(prefixes)
    }

    async fn start(&self, spec: &ServerSpec) -> Result<(LspClient, Vec<PathBuf>), StartError> {
        let missing = || StartError::Missing {
            program: spec.command.clone(),
            hint: spec.install_hint.clone(),
        };
        let program =
            resolve_program(&spec.command, &self.search_path, &self.root).ok_or_else(missing)?;
        let prefixes = self.check_prefixes(&program)?;
        let mut initialization_options = spec.initialization_options.clone();
        if spec.needs_typescript {
            match find_typescript(&self.root, &program) {
                TypeScriptLib::Workspace => {}
                TypeScriptLib::Beside(lib) => initialization_options = Some(with_tsserver_path(initialization_options, &lib)),
                TypeScriptLib::Missing => {
                    return Err(StartError::Missing {
                        program: "typescript (tsserver)".into(),
                        hint: "install it in the workspace (`npm install --save-dev typescript`) or beside \
                               typescript-language-server (`npm install -g typescript`)"
                            .into(),
                    })
                }
            }
        }
        let launch = LaunchSpec {
            server: spec.name.clone(),
            program,
            args: spec.args.clone(),
            cwd: self.root.clone(),
        };
        let spawned = self.spawner.spawn(&launch).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                missing()
            } else {
                StartError::Failed(LspError::Spawn {
                    server: spec.name.clone(),
                    detail: e.to_string(),
                })
            }
        })?;
        let events = self.events.clone();
        let log: LogSink = Arc::new(move |l: &ServerLog| events(ServerEvent::Log(l.clone())));
        let setup = ServerSetup {
            name: spec.name.clone(),
            root: self.root.clone(),
            language_id: spec.language_id.clone(),
            initialization_options,
            settings: spec.settings.clone(),
        };
        LspClient::start(setup, spawned, self.options, log)
            .await
            .map(|c| (c, prefixes))
            .map_err(StartError::Failed)
    }
}

enum StartError {
    Missing {
        program: String,
        hint: String,
    },
    /// Its installation prefix may not be opened to it (the message names the path).
    Refused(String),
    Failed(LspError),
}

/// `a/./b/../c` → `a/c`, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_fold_lexically() {
        assert_eq!(
            normalize(Path::new("/ws/./a/../b/c")),
            PathBuf::from("/ws/b/c")
        );
        assert_eq!(normalize(Path::new("/ws/../../etc")), PathBuf::from("/etc"));
    }
}
