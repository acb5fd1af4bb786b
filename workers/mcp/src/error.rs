//! Typed failures of an MCP connection or of one request.

use crate::http::HttpError;
use crate::jsonrpc::RpcError;
use crate::stdio::ServerExit;
use std::fmt;
use std::time::Duration;
use thiserror::Error;

/// Why a connection to a server ended. Every request in flight fails with
/// [`McpError::Closed`] carrying this reason, at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloseReason {
    /// The server process exited (or closed its output and then exited).
    Exited(Option<ServerExit>),
    /// The server's program never ran: the runner could not start it (the program is missing
    /// or not executable, or its sandbox could not be entered); holds the runner's reason.
    NotStarted {
        /// What the runner reported (`cannot start PROGRAM: REASON`).
        reason: String,
    },
    /// One message from the server was larger than the configured limit.
    MessageTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The server sent bytes that are not a JSON-RPC 2.0 message.
    Malformed {
        /// What was wrong with it (a short excerpt at most).
        detail: String,
    },
    /// Reading from or writing to the server failed.
    Transport {
        /// The system's or the HTTP layer's error.
        detail: String,
    },
    /// The HTTP server no longer knows our session (404 on a request carrying `Mcp-Session-Id`).
    SessionExpired,
    /// The client shut the connection down.
    ShutDown,
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloseReason::Exited(Some(exit)) => write!(f, "the server exited ({exit})"),
            CloseReason::Exited(None) => write!(f, "the server closed its output"),
            CloseReason::NotStarted { reason } => write!(f, "the server never ran ({reason})"),
            CloseReason::MessageTooLarge { limit } => write!(
                f,
                "the server sent a message larger than the {limit}-byte limit; the connection was ended"
            ),
            CloseReason::Malformed { detail } => write!(
                f,
                "the server sent something that is not a JSON-RPC message ({detail}); the connection was ended"
            ),
            CloseReason::Transport { detail } => write!(f, "{detail}"),
            CloseReason::SessionExpired => write!(
                f,
                "the server no longer knows this session (HTTP 404 with Mcp-Session-Id); reconnect to start a new one"
            ),
            CloseReason::ShutDown => write!(f, "the connection was shut down"),
        }
    }
}

/// Every failure the client reports. Messages say what failed and what to do; none contains a
/// secret (the client never holds one) or more than a bounded excerpt of server output.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum McpError {
    /// The server could not be started.
    #[error("cannot start the MCP server: {0}")]
    Spawn(String),
    /// The connection ended; the request (if any) got no answer.
    #[error("MCP server connection ended: {0}")]
    Closed(CloseReason),
    /// `initialize` got no answer in time.
    #[error("the MCP server did not answer `initialize` within {}s; check that the command (or URL) really serves MCP, or raise the server's `startup_timeout_ms` setting", .after.as_secs_f64())]
    InitializeTimeout {
        /// The time it was given.
        after: Duration,
    },
    /// A request got no answer in time (`notifications/cancelled` was sent).
    #[error("the MCP server did not answer `{method}` within {}s (the request was cancelled)", .after.as_secs_f64())]
    Timeout {
        /// The request's method.
        method: String,
        /// The time it was given.
        after: Duration,
    },
    /// The server answered `initialize` with a protocol version this client does not speak.
    #[error("the MCP server speaks protocol version {offered:?}, which hanzo-dev does not support (supported: {}); upgrade the server or hanzo-dev", crate::SUPPORTED_PROTOCOL_VERSIONS.join(", "))]
    UnsupportedProtocolVersion {
        /// The version the server offered.
        offered: String,
    },
    /// The server answered a lifecycle request (`initialize`, `tools/list`, `ping`) with a
    /// JSON-RPC error.
    #[error("the MCP server refused `{method}`: {error}")]
    Rpc {
        /// The request's method.
        method: String,
        /// The server's error.
        error: Box<RpcError>,
    },
    /// The server's answer to a lifecycle request was refused at the HTTP level or had no
    /// JSON-RPC document in it.
    #[error("the MCP server's answer to `{method}` is unusable: {refusal}")]
    Refused {
        /// The request's method.
        method: String,
        /// How the answer was refused.
        refusal: crate::classify::Refusal,
    },
    /// The server's answer does not have the shape the protocol requires.
    #[error("the MCP server broke the protocol: {0}")]
    Protocol(String),
    /// The HTTP exchange failed before an answer (connection, allow-list, credential).
    #[error("HTTP request to the MCP server failed: {0}")]
    Http(HttpError),
}
