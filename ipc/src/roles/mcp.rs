//! The MCP bridge channel (supervisor ↔ mcp worker). The worker hosts one MCP client
//! (`hanzo-mcp`) per configured server; the supervisor configures them, lists servers and tools,
//! and calls tools under its policy. Nothing here can carry a credential: a remote server's token
//! and secret headers are named (`credential`, [`EnvValue::Secret`]) and resolved by the broker.
//!
//! Tool arguments, schemas and results travel as JSON *text* (postcard is not self-describing);
//! the worker parses what the server sent, and the supervisor interprets nothing beyond the
//! classification (HAAP README: allowed / denied / fault).

use super::{impl_protocol, CommonEvent, CommonItem, CommonRequest, CommonResponse};
use crate::Role;
use serde::{Deserialize, Serialize};

/// What the supervisor may ask the mcp worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// A request every worker answers (probes, status).
    Common(CommonRequest),
    /// Replace the configured servers: servers no longer listed are shut down, new ones started.
    /// Answered with [`Response::Servers`] once each server is ready or has failed.
    Configure(McpConfig),
    /// Every configured server and its state.
    ListServers,
    /// The cached tools of one server, or of all ready servers.
    ListTools {
        /// The server's name; `None` lists the tools of every ready server.
        server: Option<String>,
    },
    /// Call one tool. [`Item::Progress`] items carry the server's progress; cancelling the
    /// request (the channel's cancel, or the caller dropping it) sends `notifications/cancelled`.
    CallTool(McpToolCall),
}

/// The mcp worker's answers, one variant per request kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Response {
    /// The answer to a common request.
    Common(CommonResponse),
    /// The answer to [`Request::Configure`] and [`Request::ListServers`]: every server's state.
    Servers(Vec<McpServerStatus>),
    /// The answer to [`Request::ListTools`].
    Tools(Vec<McpToolInfo>),
    /// The classified answer of a [`Request::CallTool`].
    Call(McpCallOutcome),
}

/// Streamed parts of the mcp worker's answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Item {
    /// A part of a common request's answer.
    Common(CommonItem),
    /// One `notifications/progress` of the call.
    Progress {
        /// Work done so far, in the server's own unit.
        progress: f64,
        /// The total in the same unit, when the server knows it.
        total: Option<f64>,
        /// The server's description of the step, unfiltered (sanitise before printing).
        message: Option<String>,
    },
}

/// What the mcp worker reports unasked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// An event every worker may send (a log line).
    Common(CommonEvent),
    /// A server's state changed (started, failed, restarting, stopped).
    ServerState(McpServerStatus),
    /// A server's tool cache was refreshed after `notifications/tools/list_changed`.
    ToolsChanged {
        /// The server's name.
        server: String,
        /// How many tools it lists now.
        tool_count: u32,
    },
}

impl_protocol!(McpProtocol, Role::Mcp);

/// What the worker runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpConfig {
    /// The servers to run, each with its transport and limits.
    pub servers: Vec<McpServerConfig>,
    /// Absolute workspace roots answered to `roots/list`.
    pub roots: Vec<String>,
    /// Largest `tools/call` result passed on (cut and marked beyond).
    pub max_result_bytes: u64,
    /// Largest single message accepted from a server.
    pub max_message_bytes: u64,
}

/// One configured MCP server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerConfig {
    /// Follows the name contract (`hanzo_policy::mcp_name`): the settings loader refuses any
    /// other name with its file, line and column, and an editor's (ACP) is checked as it arrives.
    pub name: String,
    /// How the server is reached.
    pub transport: McpTransport,
    /// Time from start to `initialize`'s answer, in milliseconds (`startup_timeout_ms`).
    pub initialize_timeout_ms: u64,
    /// Time one `tools/call` may take, in milliseconds (`timeout_ms`).
    pub call_timeout_ms: u64,
    /// `elicitation/create` answered with the schema's defaults (SEP-1034) instead of refused.
    pub elicitation_defaults: bool,
    /// This server's cap on a `tools/call` result (`max_result_bytes` in its settings entry);
    /// `None`: [`McpConfig::max_result_bytes`].
    #[serde(default)]
    pub max_result_bytes: Option<u64>,
}

/// How an MCP server is reached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum McpTransport {
    /// Started through the sandboxed command runner under `profile`.
    Stdio {
        /// The program to run (looked up on the server's `PATH`).
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// The server's whole environment (it starts empty).
        env: Vec<(String, EnvValue)>,
        /// Its working directory; `None`: the workspace, or the server's private home when it has
        /// no filesystem.
        cwd: Option<String>,
        /// The sandbox it runs in.
        profile: McpServerProfile,
    },
    /// Reached through the broker; `credential` names the per-server token or secret headers the
    /// broker adds (and whose allow-list `url` must be on).
    Http {
        /// The streamable-HTTP endpoint.
        url: String,
        /// The name of the credential the broker adds for this server, if any.
        credential: Option<String>,
    },
}

/// One environment value of a stdio server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EnvValue {
    /// A value written in the settings, passed as is.
    Plain(String),
    /// The name of a secret the broker resolves at spawn; its value never crosses this channel.
    Secret(String),
}

/// The per-server sandbox profile of a stdio server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerProfile {
    /// How much of the filesystem the server may see.
    pub filesystem: McpFilesystem,
    /// Further paths the server may read (absolute).
    pub extra_read: Vec<String>,
    /// Whether the entry asks for network (`network_allow` set): the server then gets the
    /// egress proxy at `egress_address`, or fails to start with the reason.
    pub network: bool,
    /// The proxy address (`127.0.0.N`) the supervisor gave this server on the mcp worker's
    /// egress channel; `None` when the run has no egress for it.
    pub egress_address: Option<String>,
}

/// The filesystem a stdio server's sandbox grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum McpFilesystem {
    /// No filesystem beyond what a program needs to start.
    None,
    /// The workspace, read-only.
    WorkspaceRo,
    /// The workspace, read-write (refused in this build: the mcp worker itself only reads it).
    WorkspaceRw,
}

/// One server as `hanzo-dev mcp list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerStatus {
    /// Its name in `mcp_servers`.
    pub name: String,
    /// `stdio` or `http`.
    pub transport: String,
    /// Where it is in its life.
    pub state: McpServerState,
    /// How many tools it lists (0 until ready).
    pub tool_count: u32,
    /// From `initialize`, once ready.
    pub protocol_version: Option<String>,
    /// The server's own (name, version), from `initialize`, unfiltered.
    pub server_info: Option<(String, String)>,
    /// Why none of its tools is offered although it is ready (two of them normalise to the
    /// same `mcp__<server>__<tool>` name, both named); `None` when its tools are offered.
    pub tools_problem: Option<String>,
}

/// Where an MCP server is in its life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum McpServerState {
    /// Started; `initialize` has not answered yet.
    Starting,
    /// Initialized; its tools are listed and callable.
    Ready,
    /// The last start or the connection failed; `reason` says why and what to do.
    Failed {
        /// Why, and what to do.
        reason: String,
    },
    /// It ended and is being started again after a backoff.
    Restarting {
        /// Which restart this is (1-based).
        attempt: u32,
        /// Why it ended.
        reason: String,
    },
    /// Shut down (no longer configured, or the worker is stopping).
    Stopped,
}

/// One tool of an MCP server, as offered to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpToolInfo {
    /// The server that lists it.
    pub server: String,
    /// The server's own name for the tool.
    pub tool: String,
    /// `mcp__<server>__<tool>` as the model sees it.
    pub qualified_name: String,
    /// The server's description of the tool, unfiltered.
    pub description: Option<String>,
    /// The input schema as JSON text.
    pub input_schema_json: String,
}

/// One tool call to forward to an MCP server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpToolCall {
    /// The server's name in `mcp_servers`.
    pub server: String,
    /// The server's own name for the tool.
    pub tool: String,
    /// The arguments, a JSON object as text.
    pub arguments_json: String,
    /// Overrides the server's `call_timeout_ms`.
    pub timeout_ms: Option<u64>,
}

/// The end of one call: the fail-closed classification, or no answer at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum McpCallOutcome {
    /// A result (`is_error`: the tool ran and reported an error).
    Allowed {
        /// The `tools/call` result as JSON text (cut to `max_result_bytes`).
        result_json: String,
        /// The tool ran and reported an error (`isError`).
        is_error: bool,
        /// The result exceeded `max_result_bytes` and was cut.
        truncated: bool,
        /// The serialized size of the full result, in bytes.
        bytes: u64,
    },
    /// A policy denial (JSON-RPC −32005…−32000, HTTP 401/403, or no JSON-RPC document).
    Denied {
        /// The server's denial, for the record.
        reason: String,
    },
    /// Any other JSON-RPC error: a downstream fault.
    Fault {
        /// The server's error, for the record.
        reason: String,
    },
    /// No answer: unknown server or tool, server down, timeout, connection ended.
    Failed {
        /// Why there was no answer.
        kind: McpFailureKind,
        /// What happened, naming the server.
        message: String,
    },
}

/// Why a call got no answer ([`McpCallOutcome::Failed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum McpFailureKind {
    /// No server of that name is configured.
    UnknownServer,
    /// The server lists no tool of that name.
    UnknownTool,
    /// The server is not ready (starting, failed, restarting).
    ServerDown,
    /// The server did not answer within the call's limit.
    Timeout,
    /// The connection to the server ended during the call.
    Closed,
    /// Anything else: bad arguments, a transport or protocol failure.
    Transport,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{decode_payload, encode_payload};

    #[test]
    fn mcp_messages_round_trip() {
        let req = Request::Configure(McpConfig {
            servers: vec![McpServerConfig {
                name: "github".into(),
                transport: McpTransport::Stdio {
                    command: "npx".into(),
                    args: vec!["server".into()],
                    env: vec![("TOKEN".into(), EnvValue::Secret("GITHUB_TOKEN".into()))],
                    cwd: None,
                    profile: McpServerProfile {
                        filesystem: McpFilesystem::WorkspaceRo,
                        extra_read: vec![],
                        network: false,
                        egress_address: None,
                    },
                },
                initialize_timeout_ms: 30_000,
                call_timeout_ms: 60_000,
                elicitation_defaults: false,
                max_result_bytes: None,
            }],
            roots: vec!["/work".into()],
            max_result_bytes: 1 << 20,
            max_message_bytes: 8 << 20,
        });
        let back: Request = decode_payload("REQUEST", &encode_payload(&req)).unwrap();
        assert_eq!(back, req);
        let item = Item::Progress {
            progress: 1.5,
            total: Some(3.0),
            message: None,
        };
        let back: Item = decode_payload("ITEM", &encode_payload(&item)).unwrap();
        assert_eq!(back, item);
        let resp = Response::Call(McpCallOutcome::Denied {
            reason: "HTTP 403".into(),
        });
        let back: Response = decode_payload("RESPONSE", &encode_payload(&resp)).unwrap();
        assert_eq!(back, resp);
    }
}
