//! The mcp worker process: one [`McpClient`] per configured server, served on the `mcp` channel
//! (`hanzo_ipc::roles::mcp`).
//!
//! Stdio servers are started by the tools crate's command launcher (`hanzo_tools::runner`), the
//! same machinery as every tool command: a launcher forked before this worker confines itself,
//! and each server confined at spawn with its own [`CommandProfile`] (filesystem none, workspace
//! read-only by default, or read-write; extra read paths; no network), a cleared environment
//! built from the entry, a keeper that kills the whole process tree when the server is dropped.
//! The worker itself has no network and no credentials: remote (streamable-HTTP) servers are
//! reached through the broker on the direct channel (fd 4, [`crate::broker_http`]).
//!
//! An entry's environment may name secrets (`EnvValue::Secret`): the worker asks the broker for
//! their values on the same channel as it spawns the server (the broker answers only for what
//! the supervisor granted that server), puts them in the server's environment, keeps only their
//! fingerprints ([`crate::redact`]) and zeroes the values once the server is spawned. Every
//! string the worker passes on (answers, progress, events, its stderr) has them replaced by
//! `[redacted]`. A secret the broker does not hold fails that server, naming the variable and
//! the secret, never a value.
//!
//! A server whose connection ends on its own (it crashed, broke the protocol, flooded a line) is
//! restarted with backoff, a bounded number of times; calls in flight fail with a typed error.

use crate::broker_http::BrokerLink;
use crate::classify::CallOutcome;
use crate::client::{CallOptions, ClientOptions, McpClient, Progress, ServerEvent};
use crate::error::{CloseReason, McpError};
use crate::redact::Redactor;
use crate::stdio::{ServerExit, ServerIo, ServerProcess, ServerSpawner, SpawnError, StdioSpec};
use crate::BoxFuture;
use hanzo_ipc::channel::{EventSink, Handler, ItemSink};
use hanzo_ipc::proto::{RemoteError, RemoteErrorKind};
use hanzo_ipc::roles::mcp::{
    EnvValue, Event, Item, McpCallOutcome, McpConfig, McpFailureKind, McpFilesystem, McpProtocol,
    McpServerConfig, McpServerProfile, McpServerState, McpServerStatus, McpToolCall, McpToolInfo,
    McpTransport, Request, Response,
};
use hanzo_ipc::roles::{CommonEvent, LogLevel};
use hanzo_ipc::socket::WriteHalf;
use hanzo_ipc::Role;
use hanzo_policy::isolation::Tier;
use hanzo_policy::profile::{CommandProfile, FsScope, NetAccess, Rlimits};
use hanzo_tools::runner::{Pipes, RunError, Runner, Running, Spawn};
use hanzo_worker::{handle_common, WorkerOptions};
use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `PATH` of a server whose entry sets none.
pub const DEFAULT_SERVER_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// How long a listing waits for a server's tool list refresh after `list_changed`.
pub const FRESH_TOOLS_PATIENCE: Duration = Duration::from_secs(5);

/// Restarts of a server whose connection ended on its own, before it is left failed.
pub const MAX_RESTARTS: u32 = 3;

/// A server that ran this long before its connection ended starts its count of restarts afresh.
pub const STABLE_AFTER: Duration = Duration::from_secs(60);

/// Open files a server may hold (node needs a few hundred).
const SERVER_NOFILE: u64 = 1024;
/// Largest file a server may write (where its profile lets it write at all).
const SERVER_FSIZE: u64 = 256 << 20;

/// The mcp worker's `main`: enter tier B's namespaces unless `opts.isolation` is `tier-a` (as the
/// tools worker does: the host filesystem read-only, the workspace read-only, a private `/tmp`,
/// no network interface but `lo`), fork the command launcher there, confine, handshake and serve.
/// Each server is then confined by Landlock and seccomp at spawn, inside those namespaces. With
/// `strict`, a worker that cannot enter tier B exits rather than run weaker; with `auto` it falls
/// back to tier A and says why. Tier A cannot keep a hidden path inside the workspace out of a
/// workspace-ro server's reach, so there such a workspace is refused unless the context allows it.
pub fn worker_main(opts: WorkerOptions) -> i32 {
    use hanzo_policy::isolation::IsolationMode;
    use hanzo_sandbox::namespaces::{self, Side, TierB, WaitAs};
    let fail = |what: &str| {
        eprintln!("hanzo-dev mcp worker: {what}");
        hanzo_worker::exit::CONFINE_FAILED
    };
    let isolation = opts.isolation;
    let dangerous = opts.ctx.hidden_in_workspace();
    let tier_a_refused = || -> Option<String> {
        (!dangerous.is_empty() && !opts.ctx.allow_dangerous_workspace).then(|| {
            format!(
                "the workspace contains {}, which an MCP server's sandbox cannot keep out of \
                 reach in tier A; move the workspace or pass --allow-dangerous-workspace",
                dangerous
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
    };
    let mut launcher = match hanzo_tools::launcher::prepare() {
        Ok(l) => l,
        Err(e) => return fail(&e.to_string()),
    };
    let want_b = match isolation {
        IsolationMode::TierA => false,
        IsolationMode::Strict => true,
        IsolationMode::Auto => hanzo_sandbox::doctor::probe_kernel().tier_b().is_ok(),
    };
    // The egress control socket (its number from the role table): given only when a run's stdio
    // servers ask for network. Pid 1 hands it to the forwarder it forks first; no other process
    // here keeps a copy.
    const EGRESS_CONTROL_FD: i32 =
        hanzo_ipc::role::fd(hanzo_ipc::role::Channel::McpEgress, hanzo_ipc::Role::Mcp);
    let mut egress_control = hanzo_sandbox::confine::adopt_inherited_fd(EGRESS_CONTROL_FD).ok();
    let mut egress_port: Option<Result<u16, String>> = None;
    let mut tier = Tier::A;
    if want_b {
        // Only the run directory (the servers' own `HOME`/`TMPDIR`) stays writable; the
        // workspace is read-only in the mount namespace as well as by Landlock. Unless a server
        // asks for the workspace read-write: then it is writable as in the tools worker's
        // namespace, with the protected paths (the git directory, the hooks path, `.hanzo`)
        // bound read-only and pinned, and each server's Landlock profile narrows it again.
        let cfg = match (&opts.ctx.workspace, opts.ctx.mcp_workspace_write) {
            (Some(ws), true) => {
                let mut keep_rw = vec![ws.clone()];
                keep_rw.extend(opts.ctx.run_dir.iter().cloned());
                TierB::new(
                    keep_rw,
                    // The servers' `read_paths`, bound back read-only.
                    opts.ctx.mcp_extra_read.clone(),
                    opts.ctx.hidden.clone(),
                    hanzo_tools::paths::protected_paths(ws),
                    hanzo_policy::profile::COMMAND_ETC,
                    hanzo_policy::profile::CommandLimits::default().tmp_size,
                )
            }
            _ => TierB::new(
                opts.ctx.run_dir.iter().cloned().collect(),
                opts.ctx
                    .workspace
                    .iter()
                    .chain(&opts.ctx.mcp_extra_read)
                    .cloned()
                    .collect(),
                opts.ctx.hidden.clone(),
                Vec::new(),
                hanzo_policy::profile::COMMAND_ETC,
                hanzo_policy::profile::CommandLimits::default().tmp_size,
            ),
        };
        let ctx = opts.ctx.clone();
        let control = &mut egress_control;
        let port = &mut egress_port;
        let entered = namespaces::enter_with(&cfg, |lo_up| {
            // The forwarder first, so that it is pid 2 (`egress_forward::NS_PID`), where the
            // supervisor looks for it. It listens on every loopback address: each server given
            // network is pointed at its own `127.0.0.N`.
            if let Some(control) = control.take() {
                *port = Some(if lo_up {
                    hanzo_tools::egress_forward::start_on(
                        hanzo_tools::egress_forward::ALL_LOOPBACK,
                        control,
                    )
                    .map_err(|e| e.to_string())
                } else {
                    Err("the namespace's lo did not come up".to_string())
                });
            }
            launcher.fork(Role::Mcp, &ctx, Tier::B)
        });
        match entered {
            Ok(Side::Parent(parent)) => {
                drop(egress_control.take());
                std::mem::forget(launcher);
                return parent.wait(WaitAs {
                    confine: true,
                    forward_signals: false,
                });
            }
            Ok(Side::Child) => tier = Tier::B,
            Err(e) if isolation == IsolationMode::Auto && e.can_fall_back() => {
                eprintln!("hanzo-dev mcp worker: tier B is unavailable ({e}); running in tier A");
            }
            Err(e) => return fail(&format!("cannot enter tier B: {e}")),
        }
    }
    // A forwarder that could not start leaves the servers that ask for network failing with
    // the reason; the others run.
    let egress = match egress_port {
        None => Egress::None,
        Some(Ok(port)) => Egress::Port(port),
        Some(Err(e)) => Egress::Broken(e),
    };
    // What a `workspace-rw` server may write: in tier B the workspace (the mount namespace
    // keeps the protected paths read-only); in tier A, which has none, the entries around them,
    // found here, before confinement (the worker itself lists no directory afterwards), as tier
    // B binds what exists as it starts.
    let mut workspace_write = WorkspaceWrite::None;
    if let (Some(ws), true) = (&opts.ctx.workspace, opts.ctx.mcp_workspace_write) {
        workspace_write = WorkspaceWrite::Whole;
        if tier == Tier::A {
            let mut keep_out = hanzo_tools::paths::protected_paths(ws);
            keep_out.extend(opts.ctx.hidden.iter().cloned());
            workspace_write = match hanzo_tools::paths::writable_around(ws, &keep_out) {
                Ok(paths) => WorkspaceWrite::Around(paths),
                Err(e) => WorkspaceWrite::Unavailable(format!(
                    "the workspace could not be read to keep its protected paths out of reach \
                     ({e})"
                )),
            };
        }
    }
    if tier == Tier::A {
        // No namespace to put a forwarder in: no egress for servers.
        drop(egress_control.take());
        if let Some(why) = tier_a_refused() {
            return fail(&why);
        }
        launcher.fork(Role::Mcp, &opts.ctx, Tier::A);
    }
    let attestation = match launcher.finish() {
        Ok(a) => a,
        Err(e) => return fail(&format!("no command launcher: {e}")),
    };
    hanzo_worker::run_with_helpers::<McpProtocol, _, _>(opts, vec![attestation], move |ctx| {
        tokio::spawn(async {
            hanzo_tools::runner::launcher_gone().await;
            eprintln!("hanzo-dev mcp worker: the command launcher is gone; exiting");
            std::process::exit(hanzo_worker::exit::LAUNCHER_GONE);
        });
        let runner = hanzo_tools::runner::launcher_runner().map_err(|e| e.to_string());
        McpHandler::new(
            runner,
            ctx.opts.ctx.workspace.clone(),
            ctx.opts.ctx.run_dir.clone(),
            Some(ctx.events),
        )
        .with_broker(Arc::new(BrokerLink::new(ctx.direct)))
        .with_egress(tier, egress)
        .with_workspace_write(workspace_write)
    })
}

/// What `workspace-rw` servers may write in this worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkspaceWrite {
    /// Nothing: the worker was started with the workspace read-only.
    None,
    /// The whole workspace (tier B: its mount namespace keeps the protected paths read-only).
    Whole,
    /// Tier A: these entries (`hanzo_tools::paths::writable_around`), found as the worker
    /// started.
    Around(Vec<PathBuf>),
    /// Tier A, and the workspace could not be read (why).
    Unavailable(String),
}

/// What network the worker can give the stdio servers that ask for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Egress {
    /// No egress control socket: the run gives servers no network.
    None,
    /// The forwarder listens on this port on every loopback address of tier B's namespace.
    Port(u16),
    /// The forwarder could not start (why).
    Broken(String),
}

/// Serves the mcp channel.
pub struct McpHandler {
    inner: Arc<Inner>,
}

struct Inner {
    runner: Result<Arc<Runner>, String>,
    workspace: Option<PathBuf>,
    run_dir: Option<PathBuf>,
    events: Option<EventSink<McpProtocol, WriteHalf>>,
    /// How remote servers are reached (the broker); `None`: they are refused.
    broker: Option<Arc<BrokerLink>>,
    /// The worker's tier and its egress forwarder, for servers that ask for network.
    tier: Tier,
    egress: Egress,
    /// What `workspace-rw` servers may write.
    workspace_write: WorkspaceWrite,
    /// The fingerprints of the stdio servers' secrets, replaced in everything passed on.
    redactor: Arc<Redactor>,
    state: Mutex<State>,
    /// Serialises `Configure`s.
    configuring: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct State {
    /// Bumped by every `Configure`: a restart task of an older configuration stops.
    generation: u64,
    limits: (usize, usize),
    roots: Vec<PathBuf>,
    servers: BTreeMap<String, Entry>,
}

struct Entry {
    config: McpServerConfig,
    status: McpServerStatus,
    client: Option<Arc<McpClient>>,
    /// Restarts since the server last ran for [`STABLE_AFTER`].
    restarts: u32,
    /// When it last became ready.
    ready_since: Option<Instant>,
}

impl McpHandler {
    /// A handler starting servers with `runner` (the worker's launcher; tests may pass a local
    /// runner), answering `roots/list` with the configured roots.
    pub fn new(
        runner: Result<Arc<Runner>, String>,
        workspace: Option<PathBuf>,
        run_dir: Option<PathBuf>,
        events: Option<EventSink<McpProtocol, WriteHalf>>,
    ) -> McpHandler {
        McpHandler {
            inner: Arc::new(Inner {
                runner,
                workspace,
                run_dir,
                events,
                broker: None,
                tier: Tier::A,
                egress: Egress::None,
                workspace_write: WorkspaceWrite::None,
                redactor: Arc::new(Redactor::new()),
                state: Mutex::new(State::default()),
                configuring: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// Reach remote servers through `broker`. Must be called before the handler is shared.
    pub fn with_broker(mut self, broker: Arc<BrokerLink>) -> McpHandler {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.broker = Some(broker);
        }
        self
    }

    /// Give network to the servers that ask for it through `egress`, in `tier`. Must be called
    /// before the handler is shared.
    pub fn with_egress(mut self, tier: Tier, egress: Egress) -> McpHandler {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.tier = tier;
            inner.egress = egress;
        }
        self
    }

    /// Let `workspace-rw` servers write `write` (the worker was started with
    /// [`ProfileContext::mcp_workspace_write`](hanzo_policy::profile::ProfileContext)). Must be
    /// called before the handler is shared.
    pub fn with_workspace_write(mut self, write: WorkspaceWrite) -> McpHandler {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.workspace_write = write;
        }
        self
    }

    /// Replace the configured servers and start them; the statuses once each is ready or failed.
    pub async fn configure(&self, config: McpConfig) -> Vec<McpServerStatus> {
        let inner = &self.inner;
        let _one = inner.configuring.lock().await;
        let (old, generation) = {
            let mut st = inner.lock();
            st.generation += 1;
            st.limits = (
                usize::try_from(config.max_result_bytes).unwrap_or(usize::MAX),
                usize::try_from(config.max_message_bytes).unwrap_or(usize::MAX),
            );
            st.roots = config.roots.iter().map(PathBuf::from).collect();
            let names: Vec<&str> = config.servers.iter().map(|s| s.name.as_str()).collect();
            inner.redactor.retain(&names);
            let old: Vec<Arc<McpClient>> = std::mem::take(&mut st.servers)
                .into_values()
                .filter_map(|e| e.client)
                .collect();
            for s in &config.servers {
                st.servers.insert(
                    s.name.clone(),
                    Entry {
                        config: s.clone(),
                        status: status_of(s, McpServerState::Starting, None),
                        client: None,
                        restarts: 0,
                        ready_since: None,
                    },
                );
            }
            (old, st.generation)
        };
        for c in old {
            c.shutdown().await;
        }
        let mut starts = tokio::task::JoinSet::new();
        for s in config.servers {
            let inner = inner.clone();
            starts.spawn(async move { inner.start_server(s, generation).await });
        }
        while starts.join_next().await.is_some() {}
        self.statuses()
    }

    /// Every configured server and its state (its secrets redacted).
    pub fn statuses(&self) -> Vec<McpServerStatus> {
        let statuses: Vec<McpServerStatus> = self
            .inner
            .lock()
            .servers
            .values()
            .map(|e| e.status.clone())
            .collect();
        statuses
            .into_iter()
            .map(|s| scrub_status(&self.inner.redactor, s))
            .collect()
    }

    /// The cached tools of `server`, or of every ready server; a server whose
    /// `notifications/tools/list_changed` is still being listed is waited for (at most
    /// [`FRESH_TOOLS_PATIENCE`]), so that a change announced before a call's answer is in the
    /// next listing.
    pub async fn tools(&self, server: Option<&str>) -> Result<Vec<McpToolInfo>, RemoteError> {
        let clients: Vec<(String, Arc<McpClient>)> = {
            let st = self.inner.lock();
            if let Some(name) = server {
                if !st.servers.contains_key(name) {
                    return Err(RemoteError::new(
                        RemoteErrorKind::BadRequest,
                        format!("no MCP server named {name:?} is configured"),
                    ));
                }
            }
            st.servers
                .iter()
                .filter(|(name, _)| server.is_none_or(|s| s == *name))
                .filter_map(|(name, e)| e.client.clone().map(|c| (name.clone(), c)))
                .collect()
        };
        let mut out = Vec::new();
        for (name, client) in &clients {
            client.fresh_tools(FRESH_TOOLS_PATIENCE).await;
            let tools = match client.qualified_tools() {
                Ok(tools) => {
                    self.inner.record_tools_problem(name, None);
                    tools
                }
                Err(err) => {
                    let why = err.to_string();
                    self.inner.record_tools_problem(name, Some(why.clone()));
                    // Asked for this server alone: say why it has nothing to offer. In the
                    // listing of every server (what a run offers the model), it contributes
                    // nothing and the others go on: one server must not take every run's tools
                    // down with it.
                    if server.is_some() {
                        return Err(RemoteError::new(
                            RemoteErrorKind::Refused,
                            self.inner.redactor.scrub(&why),
                        ));
                    }
                    continue;
                }
            };
            let redactor = &self.inner.redactor;
            for (qualified, t) in tools {
                // A tool named after a secret cannot be redacted (it is called by that name):
                // it is left out.
                if redactor.found_in(&t.name) {
                    self.inner.log(
                        LogLevel::Warn,
                        format!(
                            "MCP server {name:?}: a tool whose name holds a secret is left out"
                        ),
                    );
                    continue;
                }
                out.push(McpToolInfo {
                    server: name.clone(),
                    tool: t.name,
                    qualified_name: qualified,
                    description: t.description.map(|d| redactor.scrub(&d)),
                    input_schema_json: redactor.scrub(&t.input_schema.to_string()),
                });
            }
        }
        Ok(out)
    }

    /// One call, classified; `progress` receives the server's progress notifications. The
    /// servers' secrets are redacted in both.
    pub async fn call(
        &self,
        call: McpToolCall,
        progress: Option<Arc<dyn Fn(Progress) + Send + Sync>>,
    ) -> McpCallOutcome {
        let redactor = self.inner.redactor.clone();
        let progress = progress.map(|p| {
            let redactor = redactor.clone();
            Arc::new(move |mut step: Progress| {
                if let Some(m) = &mut step.message {
                    redactor.scrub_in_place(m);
                }
                p(step)
            }) as Arc<dyn Fn(Progress) + Send + Sync>
        });
        scrub_outcome(&redactor, self.call_unscrubbed(call, progress).await)
    }

    async fn call_unscrubbed(
        &self,
        call: McpToolCall,
        progress: Option<Arc<dyn Fn(Progress) + Send + Sync>>,
    ) -> McpCallOutcome {
        let failed = |kind, message: String| McpCallOutcome::Failed { kind, message };
        let client = {
            let st = self.inner.lock();
            let Some(e) = st.servers.get(&call.server) else {
                return failed(
                    McpFailureKind::UnknownServer,
                    format!("no MCP server named {:?} is configured", call.server),
                );
            };
            match &e.client {
                Some(c) => c.clone(),
                None => {
                    return failed(
                        McpFailureKind::ServerDown,
                        format!(
                            "the MCP server {:?} is not ready ({})",
                            call.server,
                            describe_state(&e.status.state)
                        ),
                    )
                }
            }
        };
        if !client.tools().tools.iter().any(|t| t.name == call.tool) {
            return failed(
                McpFailureKind::UnknownTool,
                format!(
                    "the MCP server {:?} lists no tool named {:?}",
                    call.server, call.tool
                ),
            );
        }
        let arguments: serde_json::Value = match serde_json::from_str(&call.arguments_json) {
            Ok(v @ serde_json::Value::Object(_)) => v,
            Ok(_) => {
                return failed(
                    McpFailureKind::Transport,
                    "the tool arguments must be a JSON object".to_string(),
                )
            }
            Err(e) => {
                return failed(
                    McpFailureKind::Transport,
                    format!("the tool arguments are not JSON: {e}"),
                )
            }
        };
        let opts = CallOptions {
            timeout: call.timeout_ms.map(Duration::from_millis),
            progress,
        };
        match client.call_tool(&call.tool, arguments, opts).await {
            Ok(CallOutcome::Allowed(r)) => McpCallOutcome::Allowed {
                result_json: r.value.to_string(),
                is_error: r.is_error,
                truncated: r.truncated,
                bytes: r.bytes as u64,
            },
            Ok(CallOutcome::Denied { reason }) => McpCallOutcome::Denied { reason },
            Ok(CallOutcome::Fault { reason }) => McpCallOutcome::Fault { reason },
            Err(e) => {
                let kind = match &e {
                    McpError::Timeout { .. } | McpError::InitializeTimeout { .. } => {
                        McpFailureKind::Timeout
                    }
                    McpError::Closed(_) => McpFailureKind::Closed,
                    _ => McpFailureKind::Transport,
                };
                failed(kind, format!("{}: {e}", call.server))
            }
        }
    }

    /// Shut every server down, all at once (each has its own grace).
    pub async fn shutdown(&self) {
        let clients: Vec<Arc<McpClient>> = {
            let mut st = self.inner.lock();
            st.generation += 1;
            st.servers
                .values_mut()
                .filter_map(|e| e.client.take())
                .collect()
        };
        let mut stopping = tokio::task::JoinSet::new();
        for c in clients {
            stopping.spawn(async move { c.shutdown().await });
        }
        while stopping.join_next().await.is_some() {}
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn emit(&self, event: Event) {
        let event = match event {
            Event::Common(CommonEvent::Log { level, mut message }) => {
                self.redactor.scrub_in_place(&mut message);
                Event::Common(CommonEvent::Log { level, message })
            }
            Event::ServerState(status) => Event::ServerState(scrub_status(&self.redactor, status)),
            other => other,
        };
        if let Some(events) = self.events.clone() {
            tokio::spawn(async move {
                // A closed channel means the worker is ending anyway.
                let _ = events.send(event).await;
            });
        }
    }

    fn log(&self, level: LogLevel, message: String) {
        self.emit(Event::Common(CommonEvent::Log { level, message }));
    }

    /// A warning both as a log event and on the worker's stderr (which the supervisor logs at
    /// warn), with the servers' secrets replaced. Tool and server names in it are quoted with
    /// `{:?}`, so a control character a server put in a name is escaped, never printed.
    fn warn(&self, message: String) {
        let message = self.redactor.scrub(&message);
        eprintln!("hanzo-dev mcp worker: {message}");
        self.log(LogLevel::Warn, message);
    }

    /// Record why `name`'s tools cannot be offered (`None`: they can), in its status; a problem
    /// not recorded before is warned about once.
    fn record_tools_problem(&self, name: &str, problem: Option<String>) {
        let changed = {
            let mut st = self.lock();
            let Some(e) = st.servers.get_mut(name) else {
                return;
            };
            if e.status.tools_problem == problem {
                return;
            }
            e.status.tools_problem = problem.clone();
            e.status.clone()
        };
        if let Some(why) = &problem {
            self.warn(tools_problem_warning(why));
        }
        self.emit(Event::ServerState(changed));
    }

    /// A stdio server's environment from its entry: plain values as written, and the secrets it
    /// names with their values from the broker (remembered by the redactor as this server's).
    /// Fails, naming the variable and the secret and never a value, when the broker gives none.
    async fn server_env(
        &self,
        server: &str,
        env: &[(String, EnvValue)],
    ) -> Result<Vec<(String, String)>, String> {
        let named: Vec<(&str, &str)> = env
            .iter()
            .filter_map(|(k, v)| match v {
                EnvValue::Secret(name) => Some((k.as_str(), name.as_str())),
                EnvValue::Plain(_) => None,
            })
            .collect();
        let values = if named.is_empty() {
            self.redactor.set(server, &[]);
            Vec::new()
        } else {
            let Some(broker) = &self.broker else {
                return Err(format!(
                    "its environment variable {} names the secret {}, which only the broker \
                     gives, and this mcp worker has no channel to it",
                    named[0].0, named[0].1
                ));
            };
            let mut names: Vec<String> = named.iter().map(|(_, n)| n.to_string()).collect();
            names.sort();
            names.dedup();
            let values = broker.resolve_secrets(server, names).await.map_err(|why| {
                let list: Vec<String> = named
                    .iter()
                    .map(|(k, n)| format!("{k} = secret {n}"))
                    .collect();
                format!(
                    "its environment names secrets ({}), and {why}",
                    list.join(", ")
                )
            })?;
            if let Some((k, n)) = named
                .iter()
                .find(|(_, n)| !values.iter().any(|v| v.name == *n && v.value.is_some()))
            {
                return Err(format!(
                    "its environment variable {k} names the secret {n}, which the broker does \
                     not hold: set {n} in the environment hanzo-dev is started in (it is handed \
                     to the broker alone), or remove it from the entry"
                ));
            }
            self.redactor.set(
                server,
                &values
                    .iter()
                    .filter_map(|v| v.value.as_ref().map(|s| s.expose()))
                    .collect::<Vec<_>>(),
            );
            values
        };
        let mut out = Vec::with_capacity(env.len());
        for (k, v) in env {
            match v {
                EnvValue::Plain(v) => out.push((k.clone(), v.clone())),
                EnvValue::Secret(name) => {
                    if let Some(value) = values
                        .iter()
                        .find(|r| r.name == *name)
                        .and_then(|r| r.value.as_ref())
                    {
                        out.push((k.clone(), value.expose().to_string()));
                    }
                }
            }
        }
        // `values` (zeroizing) is dropped here; the copies in `out` are zeroed after the spawn.
        Ok(out)
    }

    /// Update a server's state if the configuration is still `generation`; `false` otherwise.
    fn set_state(
        &self,
        name: &str,
        generation: u64,
        state: McpServerState,
        client: Option<Arc<McpClient>>,
    ) -> bool {
        let status = {
            let mut st = self.lock();
            if st.generation != generation {
                return false;
            }
            let Some(e) = st.servers.get_mut(name) else {
                return false;
            };
            let info = client.as_ref().map(|c| c.server_info().clone());
            let tools = client.as_ref().map(|c| c.tools().tools.len()).unwrap_or(0);
            let before = e.status.tools_problem.take();
            if state == McpServerState::Ready {
                e.ready_since = Some(Instant::now());
            }
            e.status = status_of(&e.config, state, info.as_ref());
            e.status.tool_count = u32::try_from(tools).unwrap_or(u32::MAX);
            e.status.tools_problem = client.as_deref().and_then(tools_problem);
            e.client = client;
            (e.status.clone(), before)
        };
        let (status, before) = status;
        if let Some(why) = &status.tools_problem {
            if before.as_ref() != Some(why) {
                self.warn(tools_problem_warning(why));
            }
        }
        self.emit(Event::ServerState(status));
        true
    }

    /// Start (or restart, `attempt` > 0) one server and record the outcome.
    fn start_server(
        self: Arc<Self>,
        cfg: McpServerConfig,
        generation: u64,
    ) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let name = cfg.name.clone();
            match self.connect(&cfg, generation).await {
                Ok(client) => {
                    let client = Arc::new(client);
                    if !self.set_state(
                        &name,
                        generation,
                        McpServerState::Ready,
                        Some(client.clone()),
                    ) {
                        client.shutdown().await;
                    }
                }
                Err(reason) => {
                    self.log(
                        LogLevel::Warn,
                        format!("MCP server {name:?} failed to start: {reason}"),
                    );
                    self.set_state(&name, generation, McpServerState::Failed { reason }, None);
                }
            }
        })
    }

    /// The connection of `cfg`, initialized.
    async fn connect(
        self: &Arc<Self>,
        cfg: &McpServerConfig,
        generation: u64,
    ) -> Result<McpClient, String> {
        let (roots, (max_result, max_message)) = {
            let st = self.lock();
            (st.roots.clone(), st.limits)
        };
        // The server's own cap (its settings entry's `max_result_bytes`) overrides the run's.
        let max_result = cfg
            .max_result_bytes
            .map_or(max_result, |b| usize::try_from(b).unwrap_or(usize::MAX));
        let weak = Arc::downgrade(self);
        let server_cfg = cfg.clone();
        let on_event: crate::client::EventFn = Arc::new(move |server, event| {
            let Some(inner) = weak.upgrade() else { return };
            match event {
                ServerEvent::ToolsChanged { count } => {
                    let client = {
                        let mut st = inner.lock();
                        let current = st.generation == generation;
                        match st.servers.get_mut(server) {
                            Some(e) if current => {
                                e.status.tool_count = u32::try_from(count).unwrap_or(u32::MAX);
                                e.client.clone()
                            }
                            _ => None,
                        }
                    };
                    // The new list may bring a collision (or end one).
                    if let Some(client) = client {
                        inner.record_tools_problem(server, tools_problem(&client));
                    }
                    inner.emit(Event::ToolsChanged {
                        server: server.to_string(),
                        tool_count: u32::try_from(count).unwrap_or(u32::MAX),
                    });
                }
                ServerEvent::Log { level, message } => inner.log(
                    LogLevel::Info,
                    format!("MCP server {server:?} [{level}]: {message}"),
                ),
                ServerEvent::Closed(CloseReason::ShutDown) => {}
                ServerEvent::Closed(reason) => {
                    tokio::spawn(
                        inner
                            .clone()
                            .restart(server_cfg.clone(), generation, reason),
                    );
                }
            }
        });
        let redactor = self.redactor.clone();
        let on_stderr: crate::stdio::StderrFn = Arc::new(move |server, line, cut| {
            let more = if cut { " […]" } else { "" };
            let line = redactor.scrub(line);
            eprintln!("hanzo-dev mcp worker: server {server:?} stderr: {line}{more}");
        });
        let options = ClientOptions {
            roots,
            sampling: None,
            elicitation: cfg.elicitation_defaults.then(|| {
                Arc::new(crate::requests::AcceptSchemaDefaults)
                    as Arc<dyn crate::requests::ElicitationHandler>
            }),
            initialize_timeout: Duration::from_millis(cfg.initialize_timeout_ms),
            request_timeout: Duration::from_millis(cfg.call_timeout_ms),
            max_message_bytes: max_message,
            max_result_bytes: max_result,
            on_event: Some(on_event),
            on_stderr: Some(on_stderr),
            ..ClientOptions::default()
        };
        match &cfg.transport {
            McpTransport::Stdio {
                command,
                args,
                env,
                cwd,
                profile,
            } => {
                let runner = self.runner.clone()?;
                let (profile, proxy_env) =
                    server_profile(profile, self.tier, &self.workspace_write, &self.egress)?;
                let mut server_env = self.server_env(&cfg.name, env).await?;
                // The proxy variables replace any the entry set: its network is the proxy's.
                server_env.retain(|(k, _)| !proxy_env.iter().any(|(p, _)| p == k));
                server_env.extend(proxy_env);
                let home = self.run_dir.clone().unwrap_or_else(std::env::temp_dir);
                for (k, v) in [
                    ("PATH", DEFAULT_SERVER_PATH.to_string()),
                    ("HOME", home.display().to_string()),
                    ("TMPDIR", home.display().to_string()),
                ] {
                    if !server_env.iter().any(|(name, _)| name == k) {
                        server_env.push((k.to_string(), v));
                    }
                }
                let cwd = cwd.as_ref().map(PathBuf::from).or_else(|| {
                    if profile.fs == FsScope::None {
                        Some(home.clone())
                    } else {
                        self.workspace.clone()
                    }
                });
                let spec = StdioSpec {
                    command: command.clone(),
                    args: args.clone(),
                    env: server_env,
                    cwd,
                };
                let spawner = SandboxSpawner {
                    runner,
                    profile,
                    fallback_cwd: home,
                };
                let mut spec = spec;
                let connected = McpClient::connect_stdio(&cfg.name, &spec, &spawner, options).await;
                // The server has its environment (or failed to start): the secrets' values go.
                hanzo_tools::runner::zeroize_env(&mut spec.env);
                connected.map_err(|e| self.redactor.scrub(&e.to_string()))
            }
            McpTransport::Http { url, .. } => {
                let Some(broker) = &self.broker else {
                    return Err(format!(
                        "{url} is a remote (streamable HTTP) server, which the mcp worker \
                         reaches only through the broker, and this worker has no channel to it"
                    ));
                };
                McpClient::connect_http(&cfg.name, url, broker.for_server(&cfg.name), options)
                    .await
                    .map_err(|e| e.to_string())
            }
        }
    }

    /// After the connection of a running server ended on its own: back off, then start the
    /// server again, at most [`MAX_RESTARTS`] times in a row (a server that ran for
    /// [`STABLE_AFTER`] starts its count afresh).
    fn restart(
        self: Arc<Self>,
        cfg: McpServerConfig,
        generation: u64,
        reason: CloseReason,
    ) -> BoxFuture<'static, ()> {
        Box::pin(self.restart_now(cfg, generation, reason))
    }

    async fn restart_now(
        self: Arc<Self>,
        cfg: McpServerConfig,
        generation: u64,
        reason: CloseReason,
    ) {
        let name = cfg.name.clone();
        let attempt = {
            let mut st = self.lock();
            if st.generation != generation {
                return;
            }
            let Some(e) = st.servers.get_mut(&name) else {
                return;
            };
            // Only a server that was running is restarted. The end of a connection whose start
            // (or restart) failed is that same failure seen again: it is reported once, as
            // failed with its reason (answering it with a restart as well made the state shown
            // depend on which of the two was handled first).
            if e.status.state != McpServerState::Ready {
                return;
            }
            if e.ready_since.is_some_and(|t| t.elapsed() >= STABLE_AFTER) {
                e.restarts = 0;
            }
            e.restarts += 1;
            e.restarts
        };
        if attempt > MAX_RESTARTS {
            self.set_state(
                &name,
                generation,
                McpServerState::Failed {
                    reason: format!("{reason}; gave up after {MAX_RESTARTS} restarts"),
                },
                None,
            );
            return;
        }
        if !self.set_state(
            &name,
            generation,
            McpServerState::Restarting {
                attempt,
                reason: reason.to_string(),
            },
            None,
        ) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250u64 << attempt.min(6))).await;
        match self.connect(&cfg, generation).await {
            Ok(client) => {
                let client = Arc::new(client);
                if !self.set_state(
                    &name,
                    generation,
                    McpServerState::Ready,
                    Some(client.clone()),
                ) {
                    client.shutdown().await;
                }
            }
            Err(why) => {
                self.set_state(
                    &name,
                    generation,
                    McpServerState::Failed {
                        reason: format!("restart {attempt} after \"{reason}\" failed: {why}"),
                    },
                    None,
                );
            }
        }
    }
}

/// Why `client`'s tools cannot be offered: two of them normalise to the same qualified name.
fn tools_problem(client: &McpClient) -> Option<String> {
    client.qualified_tools().err().map(|e| e.to_string())
}

/// The warning for a server whose tools are not offered (`why` names the server).
fn tools_problem_warning(why: &str) -> String {
    format!("{why}; none of its tools is offered until it lists them under distinct names")
}

fn describe_state(s: &McpServerState) -> String {
    match s {
        McpServerState::Starting => "starting".into(),
        McpServerState::Ready => "ready".into(),
        McpServerState::Failed { reason } => format!("failed: {reason}"),
        McpServerState::Restarting { attempt, reason } => {
            format!("restarting, attempt {attempt}, after: {reason}")
        }
        McpServerState::Stopped => "stopped".into(),
    }
}

/// `status` with `redactor`'s values replaced (a failure's reason, the server's own name and
/// version).
fn scrub_status(redactor: &Redactor, mut status: McpServerStatus) -> McpServerStatus {
    if redactor.is_empty() {
        return status;
    }
    match &mut status.state {
        McpServerState::Failed { reason } | McpServerState::Restarting { reason, .. } => {
            redactor.scrub_in_place(reason)
        }
        _ => {}
    }
    if let Some((name, version)) = &mut status.server_info {
        redactor.scrub_in_place(name);
        redactor.scrub_in_place(version);
    }
    if let Some(v) = &mut status.protocol_version {
        redactor.scrub_in_place(v);
    }
    if let Some(p) = &mut status.tools_problem {
        redactor.scrub_in_place(p);
    }
    status
}

/// `outcome` with `redactor`'s values replaced in the result and every reason.
fn scrub_outcome(redactor: &Redactor, mut outcome: McpCallOutcome) -> McpCallOutcome {
    match &mut outcome {
        McpCallOutcome::Allowed { result_json, .. } => redactor.scrub_in_place(result_json),
        McpCallOutcome::Denied { reason } | McpCallOutcome::Fault { reason } => {
            redactor.scrub_in_place(reason)
        }
        McpCallOutcome::Failed { message, .. } => redactor.scrub_in_place(message),
    }
    outcome
}

fn status_of(
    cfg: &McpServerConfig,
    state: McpServerState,
    info: Option<&crate::ServerInfo>,
) -> McpServerStatus {
    McpServerStatus {
        name: cfg.name.clone(),
        transport: match cfg.transport {
            McpTransport::Stdio { .. } => "stdio",
            McpTransport::Http { .. } => "http",
        }
        .to_string(),
        state,
        tool_count: 0,
        protocol_version: info.map(|i| i.protocol_version.clone()),
        server_info: info.map(|i| (i.name.clone(), i.version.clone())),
        tools_problem: None,
    }
}

/// The command profile of a stdio server's entry, and the proxy environment it gets when it asks
/// for network (the worker is in `tier`, may write `write`, and has `egress`).
pub fn server_profile(
    p: &McpServerProfile,
    tier: Tier,
    write: &WorkspaceWrite,
    egress: &Egress,
) -> Result<(CommandProfile, Vec<(String, String)>), String> {
    let mut profile = command_profile(p, write)?;
    if !p.network {
        return Ok((profile, Vec::new()));
    }
    if tier == Tier::A {
        return Err(
            "its profile asks for network (network_allow), which MCP servers get only through \
             the broker's egress proxy in sandbox tier B, and the mcp worker runs in tier A \
             here; it is not started (run where user namespaces work, or remove its \
             network_allow)"
                .to_string(),
        );
    }
    let port = match egress {
        Egress::Port(port) => *port,
        Egress::Broken(why) => {
            return Err(format!(
                "its profile asks for network, but the mcp worker's egress forwarder did not \
                 start ({why})"
            ))
        }
        Egress::None => {
            return Err(
                "its profile asks for network, and none is given to it here: MCP servers get \
                 network in a run, for those of their network_allow entries that the run's \
                 sandbox.network_allow also allows"
                    .to_string(),
            )
        }
    };
    let ip = match p
        .egress_address
        .as_deref()
        .map(str::parse::<std::net::Ipv4Addr>)
    {
        Some(Ok(ip)) if ip.is_loopback() && ip != std::net::Ipv4Addr::LOCALHOST => ip,
        Some(_) => {
            return Err(
                "its proxy address is not a loopback address other than 127.0.0.1".to_string(),
            )
        }
        None => {
            return Err(
                "its profile asks for network, and none of its network_allow entries is \
                 allowed by this run's sandbox.network_allow; it is not started"
                    .to_string(),
            )
        }
    };
    profile.network = NetAccess::Egress;
    Ok((profile, hanzo_tools::egress_forward::proxy_env_at(ip, port)))
}

/// The command profile of a stdio server's entry, without its network (see [`server_profile`]).
///
/// `workspace-rw`: in tier B the workspace whole (the mount namespace keeps the protected paths
/// read-only, as for the `bash` tool's commands); in tier A, which has no such namespace, the
/// workspace read-only plus the entries around the protected and hidden paths read-write
/// ([`WorkspaceWrite::Around`]).
pub fn command_profile(
    p: &McpServerProfile,
    write: &WorkspaceWrite,
) -> Result<CommandProfile, String> {
    let mut extra_write = Vec::new();
    let fs = match p.filesystem {
        McpFilesystem::None => FsScope::None,
        McpFilesystem::WorkspaceRo => FsScope::WorkspaceRo,
        // A server's sandbox nests inside the launcher's, which writes the workspace only when
        // the supervisor started the worker so.
        McpFilesystem::WorkspaceRw => match write {
            WorkspaceWrite::None => {
                return Err(
                    "its profile asks for the workspace read-write, and this mcp worker was \
                     started with the workspace read-only (the supervisor gives it write access \
                     when a configured server's filesystem is \"workspace-rw\")"
                        .to_string(),
                )
            }
            WorkspaceWrite::Unavailable(why) => {
                return Err(format!(
                    "its profile asks for the workspace read-write, and {why}"
                ))
            }
            WorkspaceWrite::Whole => FsScope::WorkspaceRw,
            WorkspaceWrite::Around(paths) => {
                extra_write = paths.clone();
                FsScope::WorkspaceRo
            }
        },
    };
    Ok(CommandProfile {
        fs,
        extra_read: p.extra_read.iter().map(PathBuf::from).collect(),
        extra_write,
        network: NetAccess::None,
        devices: true,
    })
}

/// Starts stdio servers through the sandboxed command runner.
pub struct SandboxSpawner {
    /// The worker's command launcher, which starts each server.
    pub runner: Arc<Runner>,
    /// The sandbox each server runs in.
    pub profile: CommandProfile,
    /// Where a server whose spec names no directory starts.
    pub fallback_cwd: PathBuf,
}

impl ServerSpawner for SandboxSpawner {
    fn spawn<'a>(&'a self, spec: &'a StdioSpec) -> BoxFuture<'a, Result<ServerIo, SpawnError>> {
        Box::pin(async move {
            let spawn = Spawn {
                program: PathBuf::from(&spec.command),
                args: spec.args.iter().map(Into::into).collect(),
                env: spec.env.clone(),
                cwd: spec
                    .cwd
                    .clone()
                    .unwrap_or_else(|| self.fallback_cwd.clone()),
                rlimits: Rlimits {
                    core: 0,
                    nofile: SERVER_NOFILE,
                    fsize: Some(SERVER_FSIZE),
                },
                profile: self.profile.clone(),
            };
            let mut running = self
                .runner
                .start(spawn, Pipes::ALL)
                .map_err(|e| SpawnError(e.to_string()))?;
            let missing = || SpawnError("the runner returned no pipes".to_string());
            let stdin = running.stdin.take().ok_or_else(missing)?;
            let stdout = running.stdout.take().ok_or_else(missing)?;
            let stderr = running.stderr.take();
            Ok(ServerIo {
                stdin: Box::new(stdin),
                stdout: Box::new(stdout),
                stderr: stderr.map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
                process: Box::new(SandboxedProcess {
                    running,
                    start_error: None,
                }),
            })
        })
    }
}

/// A server started by the worker's launcher. The launcher starts it after `Runner::start` has
/// returned, so a program that cannot be started shows only when waiting: kept for
/// [`ServerProcess::start_error`].
struct SandboxedProcess {
    running: Running,
    start_error: Option<String>,
}

impl ServerProcess for SandboxedProcess {
    fn wait(&mut self) -> BoxFuture<'_, ServerExit> {
        Box::pin(async move {
            match self.running.wait().await {
                Ok(status) => ServerExit {
                    code: status.code(),
                    signal: status.signal(),
                },
                Err(e) => {
                    if let RunError::Start { .. } = e {
                        self.start_error = Some(e.to_string());
                    }
                    ServerExit {
                        code: None,
                        signal: None,
                    }
                }
            }
        })
    }

    fn start_error(&self) -> Option<String> {
        self.start_error.clone()
    }

    fn kill(&mut self) -> BoxFuture<'_, ()> {
        self.running.kill();
        Box::pin(async {})
    }
}

impl Handler<McpProtocol, WriteHalf> for McpHandler {
    async fn handle(
        &self,
        request: Request,
        items: ItemSink<McpProtocol, WriteHalf>,
    ) -> Result<Response, RemoteError> {
        match request {
            Request::Common(c) => handle_common::<McpProtocol, _>(c, items)
                .await
                .map(Response::Common),
            Request::Configure(config) => Ok(Response::Servers(self.configure(config).await)),
            Request::ListServers => Ok(Response::Servers(self.statuses())),
            Request::ListTools { server } => {
                self.tools(server.as_deref()).await.map(Response::Tools)
            }
            Request::CallTool(call) => {
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Progress>();
                let progress: Arc<dyn Fn(Progress) + Send + Sync> = Arc::new(move |p| {
                    let _ = tx.send(p);
                });
                let run = self.call(call, Some(progress));
                tokio::pin!(run);
                let send = |p: Progress| {
                    items.send(Item::Progress {
                        progress: p.progress,
                        total: p.total,
                        message: p.message,
                    })
                };
                let outcome = loop {
                    tokio::select! {
                        outcome = &mut run => break outcome,
                        Some(p) = rx.recv() => { let _ = send(p).await; }
                    }
                };
                while let Ok(p) = rx.try_recv() {
                    let _ = send(p).await;
                }
                Ok(Response::Call(outcome))
            }
        }
    }

    /// The run is over: each server's session ends as the transport says (stdio: stdin closed,
    /// a grace, then the kill; HTTP: the session's `DELETE`). The calls that were in flight have
    /// already sent their `notifications/cancelled` (their tasks were aborted first), which the
    /// stdio writer delivers before it closes stdin.
    async fn stop(&self) {
        self.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hanzo_ipc::roles::mcp::McpFilesystem;

    #[test]
    fn workspace_rw_follows_what_the_worker_may_write() {
        let rw = McpServerProfile {
            filesystem: McpFilesystem::WorkspaceRw,
            extra_read: Vec::new(),
            network: false,
            egress_address: None,
        };
        let b = command_profile(&rw, &WorkspaceWrite::Whole).unwrap();
        assert_eq!((b.fs, b.extra_write.len()), (FsScope::WorkspaceRw, 0));
        let around = vec![PathBuf::from("/w/README.md"), PathBuf::from("/w/src")];
        let a = command_profile(&rw, &WorkspaceWrite::Around(around.clone())).unwrap();
        assert_eq!(
            (a.fs, a.extra_write),
            (FsScope::WorkspaceRo, around.clone())
        );
        let why =
            command_profile(&rw, &WorkspaceWrite::Unavailable("it is gone".into())).unwrap_err();
        assert!(why.ends_with("and it is gone"), "{why}");
        // Read-only stays read-only whatever the worker may do.
        let ro = McpServerProfile {
            filesystem: McpFilesystem::WorkspaceRo,
            ..rw
        };
        let ro = command_profile(&ro, &WorkspaceWrite::Around(around)).unwrap();
        assert_eq!((ro.fs, ro.extra_write.len()), (FsScope::WorkspaceRo, 0));
    }

    #[test]
    fn a_profile_this_build_cannot_give_is_refused_in_one_readable_sentence() {
        let profile = |filesystem, network| McpServerProfile {
            filesystem,
            extra_read: Vec::new(),
            network,
            egress_address: network.then(|| "127.0.0.2".to_string()),
        };
        let net = profile(McpFilesystem::None, true);
        let mut unlisted = net.clone();
        unlisted.egress_address = None;
        let mut host_lo = net.clone();
        host_lo.egress_address = Some("127.0.0.1".into());
        for (p, tier, egress, says) in [
            (
                profile(McpFilesystem::WorkspaceRw, false),
                Tier::B,
                Egress::None,
                "started with the workspace read-only",
            ),
            (net.clone(), Tier::A, Egress::Port(1), "tier A"),
            (
                net.clone(),
                Tier::B,
                Egress::None,
                "none is given to it here",
            ),
            (
                net.clone(),
                Tier::B,
                Egress::Broken("no lo".into()),
                "did not start (no lo)",
            ),
            (
                unlisted,
                Tier::B,
                Egress::Port(1),
                "none of its network_allow",
            ),
            (host_lo, Tier::B, Egress::Port(1), "other than 127.0.0.1"),
        ] {
            let why = server_profile(&p, tier, &WorkspaceWrite::None, &egress).unwrap_err();
            assert!(why.contains(says), "{why}");
            // Written as one sentence: no line-continuation gap left in it.
            assert!(!why.contains("  ") && !why.contains('\n'), "{why:?}");
        }
        let ok = command_profile(
            &profile(McpFilesystem::WorkspaceRo, false),
            &WorkspaceWrite::None,
        )
        .unwrap();
        assert_eq!(ok.fs, FsScope::WorkspaceRo);
        assert_eq!(ok.network, NetAccess::None);
        // Given network: the egress profile, and the proxy variables at its own address.
        let (p, env) =
            server_profile(&net, Tier::B, &WorkspaceWrite::None, &Egress::Port(4321)).unwrap();
        assert_eq!(p.network, NetAccess::Egress);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("HTTPS_PROXY"), Some("http://127.0.0.2:4321"));
        assert_eq!(get("all_proxy"), Some("socks5h://127.0.0.2:4321"));
        // Without network asked for: no variables, whatever the worker could give.
        let (p, env) = server_profile(
            &profile(McpFilesystem::None, false),
            Tier::B,
            &WorkspaceWrite::None,
            &Egress::Port(1),
        )
        .unwrap();
        assert_eq!(p.network, NetAccess::None);
        assert!(env.is_empty());
    }
}
