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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    Common(CommonRequest),
    /// Replace the configured servers: servers no longer listed are shut down, new ones started.
    /// Answered with [`Response::Servers`] once each server is ready or has failed.
    Configure(McpConfig),
    /// Every configured server and its state.
    ListServers,
    /// The cached tools of one server, or of all ready servers.
    ListTools {
        server: Option<String>,
    },
    /// Call one tool. [`Item::Progress`] items carry the server's progress; cancelling the
    /// request (the channel's cancel, or the caller dropping it) sends `notifications/cancelled`.
    CallTool(McpToolCall),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Response {
    Common(CommonResponse),
    Servers(Vec<McpServerStatus>),
    Tools(Vec<McpToolInfo>),
    /// The classified answer of a [`Request::CallTool`].
    Call(McpCallOutcome),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Item {
    Common(CommonItem),
    /// One `notifications/progress` of the call.
    Progress {
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    Common(CommonEvent),
    /// A server's state changed (started, failed, restarting, stopped).
    ServerState(McpServerStatus),
    /// A server's tool cache was refreshed after `notifications/tools/list_changed`.
    ToolsChanged {
        server: String,
        tool_count: u32,
    },
}

impl_protocol!(McpProtocol, Role::Mcp);

/// What the worker runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpConfig {
    pub servers: Vec<McpServerConfig>,
    /// Absolute workspace roots answered to `roots/list`.
    pub roots: Vec<String>,
    /// Largest `tools/call` result passed on (cut and marked beyond).
    pub max_result_bytes: u64,
    /// Largest single message accepted from a server.
    pub max_message_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerConfig {
    /// Validated by the supervisor (`hanzo_mcp::validate_server_name`) with file:line:col.
    pub name: String,
    pub transport: McpTransport,
    pub initialize_timeout_ms: u64,
    pub call_timeout_ms: u64,
    /// `elicitation/create` answered with the schema's defaults (SEP-1034) instead of refused.
    pub elicitation_defaults: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum McpTransport {
    /// Started through the sandboxed command runner under `profile`.
    Stdio {
        command: String,
        args: Vec<String>,
        /// The server's whole environment (it starts empty).
        env: Vec<(String, EnvValue)>,
        cwd: Option<String>,
        profile: McpServerProfile,
    },
    /// Reached through the broker; `credential` names the per-server token or secret headers the
    /// broker adds (and whose allow-list `url` must be on).
    Http {
        url: String,
        credential: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EnvValue {
    Plain(String),
    /// The name of a secret the broker resolves at spawn; its value never crosses this channel.
    Secret(String),
}

/// The per-server sandbox profile of a stdio server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerProfile {
    pub filesystem: McpFilesystem,
    pub extra_read: Vec<String>,
    /// Whether the entry asks for network (`network_allow` set): the server then gets the
    /// egress proxy at `egress_address`, or fails to start with the reason.
    pub network: bool,
    /// The proxy address (`127.0.0.N`) the supervisor gave this server on the mcp worker's
    /// egress channel; `None` when the run has no egress for it.
    pub egress_address: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum McpFilesystem {
    None,
    WorkspaceRo,
    WorkspaceRw,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerStatus {
    pub name: String,
    /// `stdio` or `http`.
    pub transport: String,
    pub state: McpServerState,
    pub tool_count: u32,
    /// From `initialize`, once ready.
    pub protocol_version: Option<String>,
    pub server_info: Option<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum McpServerState {
    Starting,
    Ready,
    /// The last start or the connection failed; `reason` says why and what to do.
    Failed {
        reason: String,
    },
    Restarting {
        attempt: u32,
        reason: String,
    },
    Stopped,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpToolInfo {
    pub server: String,
    /// The server's own name for the tool.
    pub tool: String,
    /// `mcp__<server>__<tool>` as the model sees it.
    pub qualified_name: String,
    pub description: Option<String>,
    /// The input schema as JSON text.
    pub input_schema_json: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpToolCall {
    pub server: String,
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
        result_json: String,
        is_error: bool,
        truncated: bool,
        bytes: u64,
    },
    /// A policy denial (JSON-RPC −32005…−32000, HTTP 401/403, or no JSON-RPC document).
    Denied { reason: String },
    /// Any other JSON-RPC error: a downstream fault.
    Fault { reason: String },
    /// No answer: unknown server or tool, server down, timeout, connection ended.
    Failed {
        kind: McpFailureKind,
        message: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum McpFailureKind {
    UnknownServer,
    UnknownTool,
    ServerDown,
    Timeout,
    Closed,
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
