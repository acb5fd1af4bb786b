//! One MCP server, connected: `initialize` (version negotiation, our real capabilities),
//! `notifications/initialized`, the tool cache (paginated `tools/list`, refreshed on
//! `notifications/tools/list_changed` without losing one that races the first list), `tools/call`
//! classified fail-closed, `ping`, and shutdown.

use crate::classify::{classify, CallOutcome, Reply};
use crate::error::McpError;
use crate::http::{HttpClient, HttpConnection};
use crate::jsonrpc::excerpt;
use crate::names::{qualified_names, NameError};
use crate::peer::{Peer, RequestOpts};
use crate::requests::{ElicitationHandler, SamplingHandler, ServerRequests};
use crate::stdio::{ServerSpawner, StderrFn, StdioConnection, StdioSpec};
use crate::{CloseReason, CLIENT_NAME, LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// One `notifications/progress` of a call.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// Work done so far, in the server's own unit.
    pub progress: f64,
    /// The total in the same unit, when the server knows it.
    pub total: Option<f64>,
    /// The server's description of the step, unfiltered.
    pub message: Option<String>,
}

/// Receives a call's progress.
pub type ProgressFn = Arc<dyn Fn(Progress) + Send + Sync>;

/// Something a server did that the worker reports upward.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerEvent {
    /// The tool cache was refreshed after `notifications/tools/list_changed`.
    ToolsChanged {
        /// How many tools the server lists now.
        count: usize,
    },
    /// `notifications/message` (bounded, control characters removed).
    Log {
        /// The server's log level (`info`, `error`, …).
        level: String,
        /// The message.
        message: String,
    },
    /// The connection ended.
    Closed(CloseReason),
}

/// Receives a server's events, with the server's name.
pub type EventFn = Arc<dyn Fn(&str, ServerEvent) + Send + Sync>;

/// How a client behaves towards one server.
#[derive(Clone)]
pub struct ClientOptions {
    /// Answered to `roots/list` (the workspace).
    pub roots: Vec<PathBuf>,
    /// `None` (the default): `sampling/createMessage` is refused and not declared.
    pub sampling: Option<Arc<dyn SamplingHandler>>,
    /// `None` (the default): `elicitation/create` is refused and not declared.
    pub elicitation: Option<Arc<dyn ElicitationHandler>>,
    /// Time from start to `initialize`'s answer.
    pub initialize_timeout: Duration,
    /// Default per-call timeout (a call may set its own).
    pub request_timeout: Duration,
    /// Largest single message accepted from the server; a larger one ends a stdio server.
    pub max_message_bytes: usize,
    /// Largest `tools/call` result passed on; longer ones are cut and marked.
    pub max_result_bytes: usize,
    /// How long a stdio server may take to exit after its stdin closes before it is killed.
    pub shutdown_grace: Duration,
    /// Receives the server's events (tool list changes, log messages, the end).
    pub on_event: Option<EventFn>,
    /// Receives the lines of a stdio server's stderr.
    pub on_stderr: Option<StderrFn>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            roots: Vec::new(),
            sampling: None,
            elicitation: None,
            initialize_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(60),
            max_message_bytes: 8 * 1024 * 1024,
            max_result_bytes: 1024 * 1024,
            shutdown_grace: Duration::from_secs(2),
            on_event: None,
            on_stderr: None,
        }
    }
}

/// Per-call settings.
#[derive(Clone, Default)]
pub struct CallOptions {
    /// Overrides [`ClientOptions::request_timeout`].
    pub timeout: Option<Duration>,
    /// Set: a `progressToken` is sent and each progress notification is passed here.
    pub progress: Option<ProgressFn>,
}

/// A tool as the server lists it (untrusted text, passed on as is).
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    /// The tool's name, as the server calls it.
    pub name: String,
    /// A name for people, if the server gave one.
    pub title: Option<String>,
    /// What the tool does, unfiltered.
    pub description: Option<String>,
    /// JSON Schema of its arguments.
    pub input_schema: Value,
    /// The tool's annotations (`readOnlyHint`, …), untrusted hints.
    pub annotations: Option<Value>,
}

/// The cached tool list of a server; `generation` counts refreshes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolSet {
    /// The tools, in the server's order.
    pub tools: Vec<Tool>,
    /// How many times the list was fetched (0 before the first listing).
    pub generation: u64,
    /// The `list_changed` notifications that had arrived when this list was asked for: a later
    /// one makes the set stale until the refresh it started is published.
    pub listed_epoch: u64,
}

/// What `initialize` told us.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerInfo {
    /// `serverInfo.name`.
    pub name: String,
    /// `serverInfo.version`.
    pub version: String,
    /// The protocol version both sides agreed on.
    pub protocol_version: String,
    /// The server's `capabilities` object.
    pub capabilities: Value,
    /// The server's `instructions` for the model, unfiltered.
    pub instructions: Option<String>,
}

enum Connection {
    Stdio(StdioConnection),
    Http(HttpConnection),
}

/// A connected MCP server.
pub struct McpClient {
    peer: Arc<Peer>,
    connection: Connection,
    info: ServerInfo,
    options: ClientOptions,
    tools: watch::Receiver<Arc<ToolSet>>,
    refresher: JoinHandle<()>,
}

/// Most pages of one `tools/list`.
const MAX_PAGES: usize = 100;
/// Most back-to-back re-lists when `list_changed` keeps arriving during a list.
const MAX_RELISTS: usize = 8;

impl McpClient {
    /// Start a stdio server with `spawner` and initialize it.
    pub async fn connect_stdio(
        name: &str,
        spec: &StdioSpec,
        spawner: &dyn ServerSpawner,
        options: ClientOptions,
    ) -> Result<McpClient, McpError> {
        let peer = new_peer(name, &options);
        let io = spawner
            .spawn(spec)
            .await
            .map_err(|e| McpError::Spawn(format!("{}: {e}", excerpt(&spec.command, 200))))?;
        let conn = StdioConnection::start(
            &peer,
            io,
            options.max_message_bytes,
            options.on_stderr.clone(),
        );
        Self::handshake(peer, Connection::Stdio(conn), options).await
    }

    /// Connect to a streamable-HTTP server at `url` through `http` and initialize it.
    pub async fn connect_http(
        name: &str,
        url: &str,
        http: Arc<dyn HttpClient>,
        options: ClientOptions,
    ) -> Result<McpClient, McpError> {
        let peer = new_peer(name, &options);
        let conn = HttpConnection::start(&peer, http, url, options.max_message_bytes);
        Self::handshake(peer, Connection::Http(conn), options).await
    }

    async fn handshake(
        peer: Arc<Peer>,
        connection: Connection,
        options: ClientOptions,
    ) -> Result<McpClient, McpError> {
        match Self::initialize(&peer, &connection, &options).await {
            Ok(info) => {
                let (tx, rx) = watch::channel(Arc::new(ToolSet::default()));
                let tx = Arc::new(tx);
                let has_tools = info.capabilities.get("tools").is_some();
                let timeout = options.request_timeout;
                let refresher_peer = peer.clone();
                let refresher_tx = tx.clone();
                let refresher = tokio::spawn(async move {
                    loop {
                        refresher_peer.list_changed.notify.notified().await;
                        if refresher_peer.close_reason().is_some() {
                            return;
                        }
                        match refresh(&refresher_peer, &refresher_tx, timeout).await {
                            Ok(count) => {
                                refresher_peer.emit(crate::ServerEvent::ToolsChanged { count })
                            }
                            Err(e) => {
                                tracing::warn!(server = %refresher_peer.name, "tool list refresh failed: {e}")
                            }
                        }
                    }
                });
                let client = McpClient {
                    peer,
                    connection,
                    info,
                    options,
                    tools: rx,
                    refresher,
                };
                if has_tools {
                    if let Err(e) = refresh(&client.peer, &tx, timeout).await {
                        client.shutdown().await;
                        return Err(e);
                    }
                }
                Ok(client)
            }
            Err(e) => {
                match &connection {
                    Connection::Stdio(c) => c.shutdown(Duration::ZERO).await,
                    Connection::Http(c) => c.shutdown().await,
                }
                Err(e)
            }
        }
    }

    async fn initialize(
        peer: &Arc<Peer>,
        connection: &Connection,
        options: &ClientOptions,
    ) -> Result<ServerInfo, McpError> {
        let requests = requests_of(options);
        let params = json!({
            "protocolVersion": LATEST_PROTOCOL_VERSION,
            "capabilities": requests.capabilities(),
            "clientInfo": {"name": CLIENT_NAME, "version": env!("CARGO_PKG_VERSION")},
        });
        let opts = RequestOpts {
            timeout: options.initialize_timeout,
            progress: None,
            cancellable: false,
        };
        let result = match peer.request("initialize", Some(params), opts).await {
            Err(McpError::Timeout { after, .. }) => {
                return Err(McpError::InitializeTimeout { after })
            }
            other => lifecycle_result("initialize", other)?,
        };
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                McpError::Protocol("`initialize` result has no protocolVersion".into())
            })?;
        if !SUPPORTED_PROTOCOL_VERSIONS.contains(&version) {
            return Err(McpError::UnsupportedProtocolVersion {
                offered: excerpt(version, 40),
            });
        }
        let text = |ptr: &str| {
            result
                .pointer(ptr)
                .and_then(Value::as_str)
                .map(|s| excerpt(s, 200))
        };
        let info = ServerInfo {
            name: text("/serverInfo/name").unwrap_or_default(),
            version: text("/serverInfo/version").unwrap_or_default(),
            protocol_version: version.to_string(),
            capabilities: result.get("capabilities").cloned().unwrap_or(json!({})),
            instructions: result
                .get("instructions")
                .and_then(Value::as_str)
                .map(|s| excerpt(s, 8192)),
        };
        if let Connection::Http(c) = connection {
            c.set_protocol_version(version);
        }
        peer.notify("notifications/initialized", None).await?;
        if let Connection::Http(c) = connection {
            c.start_listening().await;
        }
        Ok(info)
    }

    /// The server's name in `mcp_servers`.
    pub fn name(&self) -> &str {
        &self.peer.name
    }

    /// What `initialize` told us.
    pub fn server_info(&self) -> &ServerInfo {
        &self.info
    }

    /// The cached tools.
    pub fn tools(&self) -> Arc<ToolSet> {
        self.tools.borrow().clone()
    }

    /// Watch the cache (changes after each refresh).
    pub fn tools_watch(&self) -> watch::Receiver<Arc<ToolSet>> {
        self.tools.clone()
    }

    /// The cached tools under their model-facing names; an error names two that collide.
    pub fn qualified_tools(&self) -> Result<Vec<(String, Tool)>, NameError> {
        let set = self.tools();
        let names = qualified_names(self.name(), set.tools.iter().map(|t| t.name.as_str()))?;
        Ok(names.into_iter().zip(set.tools.iter().cloned()).collect())
    }

    /// The cached tools once no `notifications/tools/list_changed` that arrived so far is still
    /// being listed (the refresh it started has been published), waiting at most `within`; the
    /// cache as it is after that. A notification read before a call's answer is thus reflected
    /// in the next listing after the answer.
    pub async fn fresh_tools(&self, within: Duration) -> Arc<ToolSet> {
        let arrived = self.peer.list_changed.epoch.load(Ordering::SeqCst);
        let mut rx = self.tools.clone();
        let _ = tokio::time::timeout(within, rx.wait_for(|set| set.listed_epoch >= arrived)).await;
        self.tools()
    }

    /// Call a tool. `Ok` is the classified answer; `Err` means no answer came (the connection
    /// ended, the call timed out, or the request could not be sent). Dropping the future cancels
    /// the call with `notifications/cancelled`.
    pub async fn call_tool(
        &self,
        tool: &str,
        arguments: Value,
        opts: CallOptions,
    ) -> Result<CallOutcome, McpError> {
        let params = json!({"name": tool, "arguments": arguments});
        let req = RequestOpts {
            timeout: opts.timeout.unwrap_or(self.options.request_timeout),
            progress: opts.progress,
            cancellable: true,
        };
        let reply = self.peer.request("tools/call", Some(params), req).await?;
        Ok(classify(reply, self.options.max_result_bytes))
    }

    /// `ping` the server.
    pub async fn ping(&self) -> Result<(), McpError> {
        let opts = RequestOpts {
            timeout: self.options.request_timeout,
            progress: None,
            cancellable: true,
        };
        lifecycle_result("ping", self.peer.request("ping", None, opts).await).map(|_| ())
    }

    /// Answers that matched no request in flight (e.g. to a cancelled call), ignored so far.
    pub fn stray_responses(&self) -> u64 {
        self.peer.stray_responses()
    }

    /// Why the connection ended, if it did.
    pub fn closed(&self) -> Option<CloseReason> {
        self.peer.close_reason()
    }

    /// The HTTP session id, if the server assigned one.
    pub fn session_id(&self) -> Option<String> {
        match &self.connection {
            Connection::Http(c) => c.session_id(),
            Connection::Stdio(_) => None,
        }
    }

    /// End the connection: stdio closes stdin, waits the grace period, then kills; HTTP sends
    /// DELETE for its session. Requests in flight fail with [`CloseReason::ShutDown`].
    pub async fn shutdown(&self) {
        self.refresher.abort();
        match &self.connection {
            Connection::Stdio(c) => c.shutdown(self.options.shutdown_grace).await,
            Connection::Http(c) => c.shutdown().await,
        }
    }
}

impl Drop for McpClient {
    fn drop(&mut self) {
        self.refresher.abort();
        if let Connection::Stdio(c) = &self.connection {
            c.begin_shutdown(self.options.shutdown_grace);
        }
        self.peer.close(CloseReason::ShutDown);
    }
}

fn requests_of(options: &ClientOptions) -> ServerRequests {
    ServerRequests {
        roots: options.roots.clone(),
        sampling: options.sampling.clone(),
        elicitation: options.elicitation.clone(),
    }
}

fn new_peer(name: &str, options: &ClientOptions) -> Arc<Peer> {
    Peer::new(name, requests_of(options), options.on_event.clone())
}

fn lifecycle_result(method: &str, reply: Result<Reply, McpError>) -> Result<Value, McpError> {
    match reply? {
        Reply::Result(v) => Ok(v),
        Reply::Error(error) => Err(McpError::Rpc {
            method: method.into(),
            error: Box::new(error),
        }),
        Reply::Refused(refusal) => Err(McpError::Refused {
            method: method.into(),
            refusal,
        }),
    }
}

/// List every page, again while a `list_changed` arrived during the list, then publish.
async fn refresh(
    peer: &Arc<Peer>,
    tx: &watch::Sender<Arc<ToolSet>>,
    timeout: Duration,
) -> Result<usize, McpError> {
    let _one_at_a_time = peer.list_changed.refreshing.lock().await;
    let mut tools = Vec::new();
    let mut listed_epoch = 0;
    for _ in 0..MAX_RELISTS {
        listed_epoch = peer.list_changed.epoch.load(Ordering::SeqCst);
        tools = list_all(peer, timeout).await?;
        if peer.list_changed.epoch.load(Ordering::SeqCst) == listed_epoch {
            break;
        }
    }
    let count = tools.len();
    tx.send_modify(|set| {
        *set = Arc::new(ToolSet {
            tools,
            generation: set.generation + 1,
            listed_epoch,
        })
    });
    Ok(count)
}

async fn list_all(peer: &Arc<Peer>, timeout: Duration) -> Result<Vec<Tool>, McpError> {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    let mut seen_cursors = Vec::new();
    for _ in 0..MAX_PAGES {
        let params = cursor.as_ref().map(|c| json!({"cursor": c}));
        let opts = RequestOpts {
            timeout,
            progress: None,
            cancellable: true,
        };
        let page = lifecycle_result("tools/list", peer.request("tools/list", params, opts).await)?;
        let items = page
            .get("tools")
            .and_then(Value::as_array)
            .ok_or_else(|| McpError::Protocol("`tools/list` result has no tools array".into()))?;
        for item in items {
            match parse_tool(item) {
                Some(t) => tools.push(t),
                None => {
                    tracing::warn!(server = %peer.name, "a tool without a string name was skipped")
                }
            }
        }
        match page.get("nextCursor").and_then(Value::as_str) {
            Some(next) if !next.is_empty() => {
                if seen_cursors.iter().any(|c| c == next) {
                    return Err(McpError::Protocol(
                        "`tools/list` pagination repeats a cursor".into(),
                    ));
                }
                seen_cursors.push(next.to_string());
                cursor = Some(next.to_string());
            }
            _ => return Ok(tools),
        }
    }
    Err(McpError::Protocol(format!(
        "`tools/list` has more than {MAX_PAGES} pages"
    )))
}

fn parse_tool(v: &Value) -> Option<Tool> {
    let name = v.get("name")?.as_str()?.to_string();
    let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    Some(Tool {
        name,
        title: text("title"),
        description: text("description"),
        input_schema: v
            .get("inputSchema")
            .filter(|s| s.is_object())
            .cloned()
            .unwrap_or_else(|| json!({"type": "object"})),
        annotations: v.get("annotations").cloned(),
    })
}
