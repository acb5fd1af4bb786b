//! `hanzo-dev acp`: the Agent Client Protocol (JSON-RPC 2.0, one message per line, over stdio)
//! that editors (Zed, JetBrains IDEs, Neovim plugins) use to drive a coding agent. stdout carries
//! protocol messages only; everything else goes to stderr.
//!
//! Each ACP session is a session of the store (its turns are runs, as `chat`'s) on its own
//! worker tree, started by the session host (`cli/host.rs`) in the session's `cwd` with the
//! refusals and trust rules of `run`. The servers an editor passes in `mcpServers` join that tree
//! through the MCP bridge in the same sandbox profile as configured stdio servers. File reads and
//! writes stay in our tools worker: the client's fs and terminal capabilities are not used.
//!
//! Wire types are our own serde_json values matching the ACP v1 schema (`wire.rs`), not the
//! `agent-client-protocol` crate: see ARCHITECTURE.md for why.

mod updates;
pub mod wire;

use super::host::{prepare, Host, Prepared, Ready};
use super::run::{self as run_cmd};
use crate::agent::approval::{approval_parser, ApprovalMode};
use crate::agent::session::placeholder;
use crate::mcp::ExtraServers;
use crate::secrets::StartEnv;
use hanzo_broker::mcp_http::McpAllowError;
use hanzo_ipc::roles::mcp::{
    EnvValue, McpFilesystem, McpServerConfig, McpServerProfile, McpTransport,
};
use hanzo_ipc::roles::mcphttp::{McpHeader, McpLogin, McpRemote, SecretText};
use hanzo_store::{NewSession, RunStatus, SessionId};
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, watch};
use updates::{update, AcpEvents, AcpPrompter, Asks, Current, Out};
use wire::{Incoming, Message};

/// Requests held while a prompt runs (answered after it); beyond this many, one is refused at
/// once, so a client cannot make the agent hold an unbounded backlog.
const MAX_QUEUED: usize = 256;

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u64 = 1;

/// What `hanzo-dev acp` takes.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Agent of new sessions: a built-in (`plan`, `solve`, `code`, `review`, `auto`) or a stored
    /// one [default: code].
    #[arg(long)]
    pub agent: Option<String>,
    /// What to do when a call needs approval [default: prompt, which asks the editor through
    /// `session/request_permission`].
    #[arg(long, value_parser = approval_parser())]
    pub approval: Option<ApprovalMode>,
    /// The limits and model flags `acp` shares with `run`.
    #[command(flatten)]
    pub session: run_cmd::SessionFlags,
    /// Play a cassette instead of calling a provider (each session's worker tree plays it from
    /// its start).
    #[arg(long, value_name = "FILE", conflicts_with = "record")]
    pub replay: Option<PathBuf>,
    /// Write every model exchange to FILE as a cassette (rewritten after each turn).
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
}

impl Args {
    /// The `run` arguments of a session in `cwd`: the same refusals, the same settings.
    fn run_args(&self, cwd: &Path, agent: Option<String>) -> run_cmd::Args {
        run_cmd::Args {
            agent: agent.or_else(|| self.agent.clone()),
            approval: self.approval,
            workspace: Some(cwd.to_path_buf()),
            replay: self.replay.clone(),
            record: self.record.clone(),
            ..run_cmd::Args::for_session("(acp)", &self.session)
        }
    }
}

/// An error answer: the code and the message.
type Refusal = (i64, String);

/// The store session an ACP session opens: one to create once its workers are ready, or a
/// stored one (`session/load`).
enum SessionTarget {
    New(NewSession),
    Stored(SessionId),
}

fn refuse<T>(code: i64, message: impl Into<String>) -> Result<T, Refusal> {
    Err((code, message.into()))
}

/// One ACP session, live in this process.
struct Live {
    host: Host,
    ready: Ready,
    rargs: run_cmd::Args,
    store_session: SessionId,
    prompter: AcpPrompter,
    current: Current,
}

struct Server<'a> {
    args: &'a Args,
    env: &'a StartEnv,
    out: Out,
    sessions: HashMap<String, Live>,
    asks: Arc<Mutex<Asks>>,
    /// The broker's credentials (name, kind, source), asked once.
    credentials: Option<Vec<(String, String, String)>>,
}

/// Runs `hanzo-dev acp`: serves the client on stdin and stdout until stdin closes; returns the
/// exit code.
pub async fn run(args: &Args, env: StartEnv) -> anyhow::Result<i32> {
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<String>();
    let writer = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt as _;
        let mut stdout = tokio::io::stdout();
        while let Some(line) = out_rx.recv().await {
            let ok = stdout.write_all(line.as_bytes()).await.is_ok()
                && stdout.write_all(b"\n").await.is_ok()
                && stdout.flush().await.is_ok();
            if !ok {
                break;
            }
        }
    });
    let (in_tx, mut in_rx) = mpsc::channel(16);
    tokio::spawn(wire::read_lines(
        tokio::io::BufReader::new(tokio::io::stdin()),
        wire::MAX_LINE,
        in_tx,
    ));
    let mut server = Server {
        args,
        env: &env,
        out: out_tx,
        sessions: HashMap::new(),
        asks: Arc::default(),
        credentials: None,
    };
    let mut queue: VecDeque<Message> = VecDeque::new();
    let mut ended = false;
    while !ended {
        let msg = match queue.pop_front() {
            Some(m) => m,
            None => match in_rx.recv().await {
                Some(Incoming::Line(l)) => wire::parse_owned(l),
                Some(Incoming::TooLong) => {
                    server.too_long();
                    continue;
                }
                Some(Incoming::Eof) | None => break,
            },
        };
        match msg {
            Message::Request { id, method, params } if method == "session/prompt" => {
                let answer = server
                    .prompt(&params, &mut in_rx, &mut queue, &mut ended)
                    .await;
                server.reply(&id, answer);
            }
            Message::Request {
                id,
                method,
                mut params,
            } => {
                let answer = server.request(&method, &mut params).await;
                server.reply(&id, answer);
            }
            Message::Notification { method, params } => server.notification(&method, &params),
            Message::Response { id, outcome } => server.answer(&id, outcome),
            Message::Invalid { id, code, message } => {
                updates::send(&server.out, &wire::error(&id, code, &message));
            }
        }
    }
    for (_, live) in server.sessions.drain() {
        live.host.shutdown().await;
    }
    drop(server);
    let _ = writer.await;
    Ok(0)
}

impl Server<'_> {
    fn reply(&self, id: &Value, answer: Result<Value, Refusal>) {
        let v = match answer {
            Ok(result) => wire::response(id, result),
            Err((code, message)) => wire::error(id, code, &message),
        };
        updates::send(&self.out, &v);
    }

    fn too_long(&self) {
        updates::send(
            &self.out,
            &wire::error(
                &Value::Null,
                wire::INVALID_REQUEST,
                &format!(
                    "invalid request: a message longer than {} MiB was refused",
                    wire::MAX_LINE >> 20
                ),
            ),
        );
    }

    /// The client's answer to one of our requests; an answer to a request never asked is
    /// ignored.
    fn answer(&self, id: &Value, outcome: Result<Value, Value>) {
        let known = self
            .asks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .answer(id, outcome);
        if !known {
            eprintln!(
                "acp: ignored an answer to request {} that was never asked (or already answered)",
                wire::encode(id)
            );
        }
    }

    /// A notification between turns: `session/cancel` closes the session's open questions (no
    /// turn runs); anything else is ignored (JSON-RPC never answers a notification).
    fn notification(&self, method: &str, params: &Value) {
        if method != "session/cancel" {
            return;
        }
        if let Some(session) = params["sessionId"].as_str() {
            self.asks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .cancel_session(session);
        }
    }

    async fn request(&mut self, method: &str, params: &mut Value) -> Result<Value, Refusal> {
        match method {
            "initialize" => self.initialize(params).await,
            "authenticate" => self.authenticate(params).await,
            "session/new" => self.new_session(params).await,
            "session/load" => self.load_session(params).await,
            "session/set_mode" => self.set_mode(params),
            _ => refuse(
                wire::METHOD_NOT_FOUND,
                format!("method not found: {method}"),
            ),
        }
    }

    async fn initialize(&mut self, params: &Value) -> Result<Value, Refusal> {
        if !params["protocolVersion"].is_u64() {
            return refuse(
                wire::INVALID_PARAMS,
                "initialize: protocolVersion is a whole number",
            );
        }
        // The client's version if we speak it, else the latest we do (ACP's negotiation).
        let credentials = self.credentials().await;
        let mut methods: Vec<Value> = credentials
            .iter()
            .map(|(name, kind, source)| {
                json!({
                    "id": name,
                    "name": format!("{name} ({kind})"),
                    "description": format!(
                        "a credential of kind {kind} the broker holds (from {source}); its value never \
                         leaves the broker"
                    ),
                })
            })
            .collect();
        for p in ["hanzo", "anthropic", "openai"] {
            if !credentials.iter().any(|(n, _, _)| n == p) {
                methods.push(json!({
                    "id": p,
                    "name": format!("Log in to {p}"),
                    "description": format!(
                        "none stored: run `hanzo-dev login {p}` in a terminal (the token stays \
                         in the broker)"
                    ),
                }));
            }
        }
        Ok(json!({
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": true,
                "promptCapabilities": {"image": false, "audio": false, "embeddedContext": true},
                "mcpCapabilities": {"http": true, "sse": false},
            },
            "authMethods": methods,
            "agentInfo": {"name": "hanzo-dev", "version": env!("CARGO_PKG_VERSION")},
        }))
    }

    /// The broker's credentials, never their values (the broker's answer carries none).
    async fn credentials(&mut self) -> Vec<(String, String, String)> {
        if let Some(c) = &self.credentials {
            return c.clone();
        }
        let found = match super::login::broker_only(self.env).await {
            Ok((sup, _run_dir)) => {
                let reply = sup
                    .broker
                    .call(hanzo_ipc::roles::broker::Request::AuthStatus)
                    .await;
                sup.shutdown().await;
                match reply {
                    Ok(hanzo_ipc::roles::broker::Response::AuthStatus(r)) => r
                        .entries
                        .iter()
                        .map(|e| {
                            (
                                e.name.clone(),
                                e.kind.as_str().to_string(),
                                format!("{:?}", e.source).to_lowercase(),
                            )
                        })
                        .collect(),
                    other => {
                        eprintln!("acp: the broker did not describe its credentials: {other:?}");
                        Vec::new()
                    }
                }
            }
            Err(e) => {
                eprintln!("acp: the broker did not start: {e:#}");
                Vec::new()
            }
        };
        self.credentials = Some(found.clone());
        found
    }

    async fn authenticate(&mut self, params: &Value) -> Result<Value, Refusal> {
        let Some(method) = params["methodId"].as_str() else {
            return refuse(wire::INVALID_PARAMS, "authenticate: methodId is a string");
        };
        if self.credentials().await.iter().any(|(n, _, _)| n == method) {
            return Ok(json!({}));
        }
        refuse(
            wire::AUTH_REQUIRED,
            format!(
                "authentication required: run `hanzo-dev login {}` in a terminal; the token \
                 stays in the broker",
                crate::term::sanitize_line_for_terminal(method)
            ),
        )
    }

    /// `cwd`: absolute, and an existing directory.
    fn cwd(params: &Value) -> Result<PathBuf, Refusal> {
        let Some(cwd) = params["cwd"].as_str() else {
            return refuse(wire::INVALID_PARAMS, "cwd is a string");
        };
        let p = PathBuf::from(cwd);
        if !p.is_absolute() {
            return refuse(
                wire::INVALID_PARAMS,
                format!("cwd must be an absolute path, not {cwd:?}"),
            );
        }
        if !p.is_dir() {
            return refuse(
                wire::INVALID_PARAMS,
                format!("cwd {cwd:?} is not an existing directory"),
            );
        }
        Ok(p)
    }

    /// Settle everything for a session in `cwd` before any worker starts.
    fn prepare(
        &self,
        cwd: &Path,
        agent: Option<String>,
    ) -> Result<(run_cmd::Args, Prepared), Refusal> {
        let rargs = self.args.run_args(cwd, agent);
        match prepare(&rargs, self.env, None) {
            Ok(Ok(prep)) => Ok((rargs, prep)),
            Ok(Err(code)) => refuse(
                wire::INTERNAL_ERROR,
                format!("the session cannot start in this workspace (exit code {code}; the reason is on stderr)"),
            ),
            Err(e) => refuse(wire::INVALID_PARAMS, format!("{e:#}")),
        }
    }

    /// Start the worker tree of a prepared session and register it. A new session's row is
    /// created only once its workers are ready, so a session whose workers fail leaves nothing
    /// in the store (there would be nothing to load: no turn, and no worker tree to run one).
    async fn open(
        &mut self,
        rargs: run_cmd::Args,
        prep: Prepared,
        target: SessionTarget,
        mcp: ExtraServers,
    ) -> Result<String, Refusal> {
        let internal = |e: anyhow::Error| (wire::INTERNAL_ERROR, format!("{e:#}"));
        let mut host = Host::start(prep, &rargs, self.env)
            .await
            .map_err(internal)?;
        let ready = match host.ready(&rargs, mcp).await {
            Ok(Ok(r)) => r,
            Ok(Err(code)) => {
                host.shutdown().await;
                return refuse(
                    wire::INTERNAL_ERROR,
                    format!("the workers cannot serve this session (exit code {code}; the reason is on stderr)"),
                );
            }
            Err(e) => {
                host.shutdown().await;
                return Err(internal(e));
            }
        };
        let store_session = match target {
            SessionTarget::Stored(id) => id,
            SessionTarget::New(new) => match host.prep.store.create_session(&new) {
                Ok(s) => s.id,
                Err(e) => {
                    host.shutdown().await;
                    return refuse(wire::INTERNAL_ERROR, format!("the store: {e}"));
                }
            },
        };
        let id = store_session.0.to_string();
        let current = Current::default();
        let mode = rargs.approval.unwrap_or(ApprovalMode::Prompt);
        let prompter = AcpPrompter::new(
            id.clone(),
            self.out.clone(),
            self.asks.clone(),
            mode,
            current.clone(),
        );
        self.sessions.insert(
            id.clone(),
            Live {
                host,
                ready,
                rargs,
                store_session,
                prompter,
                current,
            },
        );
        Ok(id)
    }

    async fn new_session(&mut self, params: &mut Value) -> Result<Value, Refusal> {
        let cwd = Self::cwd(params)?;
        let mcp = mcp_servers(&mut params["mcpServers"], self.env)?;
        let (rargs, prep) = self.prepare(&cwd, None)?;
        let new = NewSession {
            agent: prep.agent_name.clone(),
            workspace: prep.workspace.display().to_string(),
            title: None,
        };
        let id = self.open(rargs, prep, SessionTarget::New(new), mcp).await?;
        let modes = self.modes_of(&id);
        Ok(json!({"sessionId": id, "modes": modes}))
    }

    async fn load_session(&mut self, params: &mut Value) -> Result<Value, Refusal> {
        let Some(id) = params["sessionId"].as_str().map(str::to_string) else {
            return refuse(wire::INVALID_PARAMS, "sessionId is a string");
        };
        let id = id.as_str();
        let cwd = Self::cwd(params)?;
        let mcp = mcp_servers(&mut params["mcpServers"], self.env)?;
        let Ok(n) = id.parse::<i64>() else {
            return refuse(wire::NOT_FOUND, format!("no session {id:?}"));
        };
        if !self.sessions.contains_key(id) {
            let (_, probe) = self.prepare(&cwd, None)?;
            let stored = probe
                .store
                .get_session(SessionId(n))
                .map_err(|_| (wire::NOT_FOUND, format!("no session {id:?} in this store")))?;
            if stored.workspace != probe.workspace.display().to_string() {
                return refuse(
                    wire::INVALID_PARAMS,
                    format!(
                        "session {id} belongs to another workspace ({}); load it with that cwd",
                        stored.workspace
                    ),
                );
            }
            drop(probe);
            let (rargs, prep) = self.prepare(&cwd, Some(stored.agent.clone()))?;
            self.open(rargs, prep, SessionTarget::Stored(stored.id), mcp)
                .await?;
        }
        let live = self.sessions.get(id).expect("opened above");
        if cwd.canonicalize().ok().as_deref() != Some(live.host.prep.workspace.as_path()) {
            return refuse(
                wire::INVALID_PARAMS,
                format!(
                    "session {id} belongs to another workspace ({}); load it with that cwd",
                    live.host.prep.workspace.display()
                ),
            );
        }
        replay_history(live, id, &self.out)
            .map_err(|e| (wire::INTERNAL_ERROR, format!("the store: {e:#}")))?;
        Ok(json!({"modes": self.modes_of(id)}))
    }

    /// The modes a session can be in: the approval modes; `allow` only when this agent was started
    /// with `--approval allow` (it approves without asking, so only the person who launched the
    /// agent can enable it).
    fn available_modes(&self) -> Vec<ApprovalMode> {
        ApprovalMode::ALL
            .into_iter()
            .filter(|m| {
                *m != ApprovalMode::Allow || self.args.approval == Some(ApprovalMode::Allow)
            })
            .collect()
    }

    /// ACP's `SessionModeState` of live session `id`.
    fn modes_of(&self, id: &str) -> Value {
        let current = self
            .sessions
            .get(id)
            .map_or(ApprovalMode::Prompt, |l| l.prompter.mode.get());
        mode_state(&self.available_modes(), current)
    }

    /// `session/set_mode` between turns (during one, [`Self::prompt`] answers it at once).
    fn set_mode(&self, params: &Value) -> Result<Value, Refusal> {
        let Some(id) = params["sessionId"].as_str() else {
            return refuse(wire::INVALID_PARAMS, "sessionId is a string");
        };
        let Some(live) = self.sessions.get(id) else {
            return refuse(wire::NOT_FOUND, format!("no session {id:?} here"));
        };
        change_mode(
            &self.out,
            id,
            &live.prompter.mode,
            &self.available_modes(),
            params,
        )
    }

    /// `session/prompt`: one turn, while the client's other messages are served: answers to our
    /// permission requests, `session/cancel` and `session/set_mode` of this session at once, other
    /// requests after the turn.
    async fn prompt(
        &mut self,
        params: &Value,
        in_rx: &mut mpsc::Receiver<Incoming>,
        queue: &mut VecDeque<Message>,
        ended: &mut bool,
    ) -> Result<Value, Refusal> {
        let Some(id) = params["sessionId"].as_str().map(str::to_string) else {
            return refuse(wire::INVALID_PARAMS, "sessionId is a string");
        };
        let task = prompt_text(&params["prompt"])?;
        let available = self.available_modes();
        let Server {
            sessions,
            out,
            asks,
            ..
        } = self;
        let Some(live) = sessions.get_mut(&id) else {
            return refuse(
                wire::NOT_FOUND,
                format!("no session {id:?} here: create it with session/new or session/load"),
            );
        };
        let store = &mut live.host.prep.store;
        if store
            .get_session(live.store_session)
            .map(|s| s.title.is_none())
            .unwrap_or(false)
        {
            if let Some(t) = hanzo_store::title_from(&task) {
                let _ = store.set_session_title(live.store_session, &t);
            }
        }
        let stages = live
            .host
            .prep
            .stages
            .iter()
            .map(|s| s.name.clone())
            .collect();
        let mode = live.prompter.mode.clone();
        let sink = AcpEvents::new(id.clone(), out.clone(), live.current.clone(), stages);
        let (cancel_tx, cancel_rx) = watch::channel(false);
        let model = live.ready.model.clone();
        let fut = live.host.turn(
            &live.ready,
            &live.rargs,
            &model,
            &sink,
            &live.prompter,
            cancel_rx,
            live.store_session,
            &task,
        );
        tokio::pin!(fut);
        let result = loop {
            tokio::select! {
                r = &mut fut => break r,
                m = in_rx.recv(), if !*ended => match m {
                    Some(Incoming::Line(l)) => match wire::parse_owned(l) {
                        Message::Response { id, outcome } => {
                            let known = asks
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner)
                                .answer(&id, outcome);
                            if !known {
                                eprintln!("acp: ignored an answer to request {} that was never asked", wire::encode(&id));
                            }
                        }
                        Message::Notification { method, params } if method == "session/cancel" => {
                            if params["sessionId"].as_str() == Some(id.as_str()) {
                                let _ = cancel_tx.send(true);
                            }
                            if let Some(s) = params["sessionId"].as_str() {
                                asks.lock()
                                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                                    .cancel_session(s);
                            }
                        }
                        Message::Notification { .. } => {}
                        Message::Invalid { id, code, message } => {
                            updates::send(out, &wire::error(&id, code, &message));
                        }
                        Message::Request { id: rid, method, params }
                            if method == "session/set_mode" && params["sessionId"].as_str() == Some(id.as_str()) =>
                        {
                            let answer = change_mode(out, &id, &mode, &available, &params);
                            let v = match answer {
                                Ok(result) => wire::response(&rid, result),
                                Err((code, message)) => wire::error(&rid, code, &message),
                            };
                            updates::send(out, &v);
                        }
                        Message::Request { id, .. } if queue.len() >= MAX_QUEUED => {
                            updates::send(out, &wire::error(&id, wire::INTERNAL_ERROR, &format!(
                                "too many requests ({MAX_QUEUED}) are waiting for the running prompt to end; send this one again later"
                            )));
                        }
                        request @ Message::Request { .. } => queue.push_back(request),
                    },
                    Some(Incoming::TooLong) => updates::send(
                        out,
                        &wire::error(&Value::Null, wire::INVALID_REQUEST, "invalid request: a message longer than 16 MiB was refused"),
                    ),
                    Some(Incoming::Eof) | None => {
                        // The client has gone: end the turn (recorded cancelled), then exit.
                        *ended = true;
                        let _ = cancel_tx.send(true);
                        asks.lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .cancel_session(&id);
                    }
                },
            }
        };
        let report = result.map_err(|e| {
            (
                wire::INTERNAL_ERROR,
                format!("the run store could not be written, so the turn stopped: {e:#}"),
            )
        })?;
        let stop = match report.status {
            RunStatus::Succeeded => "end_turn",
            RunStatus::Cancelled => "cancelled",
            _ if report.outcome.starts_with("step limit") => "max_turn_requests",
            _ if report.outcome.starts_with("token budget") => "max_tokens",
            _ if report.outcome.starts_with("every tool call was denied") => "end_turn",
            _ => {
                return refuse(
                    wire::INTERNAL_ERROR,
                    format!(
                        "the turn failed (run {}): {}",
                        report.run_id.0, report.outcome
                    ),
                )
            }
        };
        Ok(json!({"stopReason": stop}))
    }
}

/// ACP's `SessionModeState`: the approval modes as session modes.
fn mode_state(available: &[ApprovalMode], current: ApprovalMode) -> Value {
    let modes: Vec<Value> = available
        .iter()
        .map(|m| {
            let (name, description) = match m {
                ApprovalMode::Prompt => (
                    "Ask",
                    "ask the editor about each call the permission rules leave open",
                ),
                ApprovalMode::AllowListed => (
                    "Read-only",
                    "approve the read-only tools the rules leave open; deny the rest",
                ),
                ApprovalMode::Deny => ("Deny", "deny every call the rules leave open"),
                ApprovalMode::Allow => (
                    "Allow",
                    "approve every call the rules do not deny (still sandboxed)",
                ),
            };
            json!({"id": m.as_str(), "name": name, "description": description})
        })
        .collect();
    json!({"currentModeId": current.as_str(), "availableModes": modes})
}

/// Set session `id`'s mode to `params.modeId` (one of `available`) and tell the editor with a
/// `current_mode_update`.
fn change_mode(
    out: &Out,
    id: &str,
    mode: &updates::ModeHandle,
    available: &[ApprovalMode],
    params: &Value,
) -> Result<Value, Refusal> {
    let Some(asked) = params["modeId"].as_str() else {
        return refuse(wire::INVALID_PARAMS, "modeId is a string");
    };
    let Some(m) = available.iter().find(|m| m.as_str() == asked) else {
        let ids: Vec<&str> = available.iter().map(|m| m.as_str()).collect();
        return refuse(
            wire::INVALID_PARAMS,
            format!(
                "no mode {:?} here; the modes are {} (allow only when the agent was started \
                 with --approval allow)",
                crate::term::sanitize_line_for_terminal(asked),
                ids.join(", ")
            ),
        );
    };
    mode.set(*m);
    update(
        out,
        id,
        json!({"sessionUpdate": "current_mode_update", "currentModeId": m.as_str()}),
    );
    Ok(json!({}))
}

/// The text of a prompt: its text blocks, embedded text resources and resource links, in order.
fn prompt_text(prompt: &Value) -> Result<String, Refusal> {
    let Some(blocks) = prompt.as_array() else {
        return refuse(wire::INVALID_PARAMS, "prompt is an array of content blocks");
    };
    let mut parts = Vec::new();
    for b in blocks {
        match b["type"].as_str() {
            Some("text") => parts.push(b["text"].as_str().unwrap_or_default().to_string()),
            Some("resource_link") => {
                parts.push(format!(
                    "[resource: {}]",
                    b["uri"].as_str().unwrap_or_default()
                ));
            }
            Some("resource") => {
                let r = &b["resource"];
                match r["text"].as_str() {
                    Some(t) => parts.push(format!(
                        "[resource {}]\n{t}",
                        r["uri"].as_str().unwrap_or_default()
                    )),
                    None => {
                        return refuse(
                            wire::INVALID_PARAMS,
                            "binary embedded resources are not supported",
                        )
                    }
                }
            }
            other => {
                return refuse(
                    wire::INVALID_PARAMS,
                    format!(
                        "content blocks of type {} are not supported (promptCapabilities says so)",
                        other.unwrap_or("(none)")
                    ),
                )
            }
        }
    }
    let text = parts.join("\n");
    if text.trim().is_empty() {
        return refuse(wire::INVALID_PARAMS, "the prompt is empty");
    }
    Ok(text)
}

/// The editor's MCP servers: stdio servers as the mcp worker's configuration, in the profile of
/// configured ones (workspace read-only, no network); `http` (streamable-HTTP) servers by URL,
/// reached through the broker under the URL rules of settings (`https`, or `http` to a loopback
/// address named literally), their headers for the broker alone. An environment variable with a
/// secret's name is refused: secrets reach a stdio server from the broker (`${secret:NAME}` in
/// the user's settings), never through the supervisor; and so is a `${secret:NAME}` value, which
/// an editor may not use to pick one of the user's secrets. Header values are moved out of `list` (not copied)
/// into zeroizing [`SecretText`]s; no error names one.
fn mcp_servers(list: &mut Value, env: &StartEnv) -> Result<ExtraServers, Refusal> {
    let Some(list) = list.as_array_mut() else {
        return refuse(wire::INVALID_PARAMS, "mcpServers is an array");
    };
    let configured = env.extra_secret_names();
    let mut out = ExtraServers::default();
    for s in list {
        let name = s["name"].as_str().unwrap_or_default().to_string();
        let bad = |m: String| (wire::INVALID_PARAMS, format!("mcpServers {name:?}: {m}"));
        hanzo_mcp::validate_server_name(&name).map_err(|e| bad(e.to_string()))?;
        if out.servers.iter().any(|c| c.name == name) {
            return Err(bad("two servers have this name".into()));
        }
        match s["type"].as_str() {
            None | Some("stdio") => {}
            Some("http") => {
                let (config, headers) = http_server(&name, s).map_err(bad)?;
                out.servers.push(config);
                out.headers.push((name, headers));
                continue;
            }
            Some("sse") => {
                return Err(bad(
                    "sse servers (the deprecated HTTP+SSE transport) are not supported \
                     (mcpCapabilities.sse is false); give the server's streamable-HTTP endpoint \
                     as type http"
                        .into(),
                ))
            }
            Some(t) => return Err(bad(format!("unknown server type {t:?}"))),
        }
        let Some(command) = s["command"].as_str() else {
            return Err(bad("command is a string".into()));
        };
        let args: Vec<String> = s["args"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let mut vars = Vec::new();
        for e in s["env"].as_array().into_iter().flatten() {
            let (Some(k), Some(v)) = (e["name"].as_str(), e["value"].as_str()) else {
                return Err(bad("env entries are {name, value} strings".into()));
            };
            // `${secret:NAME}` is the settings' way to name a secret the broker gives a server.
            // Not honoured from an editor: what it passes is plain text, and an editor (or what
            // drives it) cannot choose which of the user's secrets a server is given.
            if matches!(crate::mcp::env_value(v), EnvValue::Secret(_)) {
                return Err(bad(format!(
                    "env {k} names a secret; an editor cannot give an MCP server the user's \
                     secrets: configure the server in the user's settings with \
                     \"${{secret:NAME}}\""
                )));
            }
            if crate::secrets::is_secret_name(k, &configured) || crate::secrets::is_secret_value(v)
            {
                return Err(bad(format!(
                    "env {k} looks like a secret; secrets reach MCP servers from the broker: \
                     configure the server in settings with \"${{secret:{k}}}\""
                )));
            }
            vars.push((k.to_string(), EnvValue::Plain(v.to_string())));
        }
        out.servers.push(McpServerConfig {
            name: name.to_string(),
            transport: McpTransport::Stdio {
                command: command.to_string(),
                args,
                env: vars.into_iter().collect(),
                cwd: None,
                profile: McpServerProfile {
                    filesystem: McpFilesystem::WorkspaceRo,
                    extra_read: Vec::new(),
                    network: false,
                    egress_address: None,
                },
            },
            initialize_timeout_ms: crate::mcp::INITIALIZE_TIMEOUT_MS,
            call_timeout_ms: crate::mcp::CALL_TIMEOUT_MS,
            elicitation_defaults: false,
            max_result_bytes: None,
        });
    }
    Ok(out)
}

/// One `{"type": "http", name, url, headers: [{name, value}]}` server: its configuration for the
/// mcp worker (the URL, no header), and its headers, each checked as the broker checks them.
fn http_server(name: &str, s: &mut Value) -> Result<(McpServerConfig, Vec<McpHeader>), String> {
    let Some(url) = s["url"].as_str().map(str::to_string) else {
        return Err("url is a string".into());
    };
    // The same URL rules as settings' `url` servers, with the broker's own check.
    let probe = McpRemote {
        server: name.to_string(),
        url: url.clone(),
        client_id: None,
        scopes: Vec::new(),
        client_metadata_url: None,
        client_env: None,
        login: McpLogin::Never,
        headers: Vec::new(),
        settings_headers: Vec::new(),
    };
    if let Err(e) = hanzo_broker::mcp_http::McpServers::new(vec![probe]) {
        return Err(match e {
            McpAllowError::Insecure { .. } => format!(
                "{url:?} is refused: only https is allowed, or http to a loopback address named \
                 literally (127.0.0.1, [::1], localhost)"
            ),
            McpAllowError::UserInfo { .. } => {
                format!("{url:?} carries a user name or password; give credentials as headers")
            }
            other => other.to_string(),
        });
    }
    let mut headers = Vec::new();
    let list = match s.get_mut("headers") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => std::mem::take(a),
        Some(_) => return Err("headers is an array of {name, value}".into()),
    };
    for mut h in list {
        let (Some(hname), Some(Value::String(value))) = (
            h["name"].as_str().map(str::to_string),
            h.get_mut("value").map(Value::take),
        ) else {
            return Err("headers are {name, value} strings".into());
        };
        let value = SecretText::new(value);
        hanzo_broker::mcp_http::check_header(name, &hname, value.expose())
            .map_err(|e| e.to_string())?;
        headers.push(McpHeader { name: hname, value });
    }
    let config = McpServerConfig {
        name: name.to_string(),
        transport: McpTransport::Http {
            url,
            credential: None,
        },
        initialize_timeout_ms: crate::mcp::INITIALIZE_TIMEOUT_MS,
        call_timeout_ms: crate::mcp::CALL_TIMEOUT_MS,
        max_result_bytes: None,
        elicitation_defaults: false,
    };
    Ok((config, headers))
}

/// A loaded session's history as `session/update` notifications: each turn's message, its tool
/// calls with their status and output, and the answer.
fn replay_history(live: &Live, id: &str, out: &Out) -> anyhow::Result<()> {
    let store = &live.host.prep.store;
    for t in store.session_turns(live.store_session)? {
        update(
            out,
            id,
            json!({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": t.user}}),
        );
        let run = store.load_run(t.run)?;
        for call in run.steps.iter().flat_map(|s| &s.tool_calls) {
            let c = &call.call;
            let failed = !c.allowed || c.error.is_some();
            let shown = match (&c.error, &c.output) {
                (Some(e), _) => e.clone(),
                (None, Some(o)) => o.clone(),
                (None, None) => c.decision_reason.clone(),
            };
            let shown = crate::agent::approval::cut(&shown, 2000);
            update(
                out,
                id,
                json!({
                    "sessionUpdate": "tool_call",
                    "toolCallId": format!("run{}-{}", t.run.0, c.tool_use_id.clone().unwrap_or_else(|| call.id.to_string())),
                    "title": updates::tool_title(&c.name, &c.input),
                    "kind": updates::tool_kind(&c.name),
                    "status": if failed { "failed" } else { "completed" },
                    "rawInput": c.input,
                    "content": [{"type": "content", "content": {"type": "text", "text": shown}}],
                }),
            );
        }
        let answer = t.answer.clone().unwrap_or_else(|| placeholder(t.status));
        update(
            out,
            id,
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": answer}}),
        );
    }
    Ok(())
}
