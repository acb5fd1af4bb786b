//! The MCP client core of the `mcp` worker: a JSON-RPC 2.0 engine over the two transports of the
//! current MCP specification (stdio and streamable HTTP), the lifecycle, a tool cache per server,
//! fail-closed classification of every `tools/call` answer, and the `mcp__<server>__<tool>` names.
//!
//! It spawns no process and opens no socket: a stdio server arrives as streams from a
//! [`ServerSpawner`] (in the worker, the sandboxed command runner) and HTTP goes through an
//! [`HttpClient`] (in the worker, the broker's direct channel). Everything a server sends is
//! untrusted: messages are size-capped before they are buffered, results are cut at a configured
//! size, and nothing is interpreted beyond the JSON-RPC envelope.
// The cast lints (issue 11), enforced crate by crate until every member passes them.
#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss,
    clippy::cast_lossless
)]
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod broker_http;
pub mod classify;
pub mod client;
pub mod conformance;
pub mod error;
pub mod framing;
pub mod http;
pub mod jsonrpc;
pub mod names;
mod peer;
pub mod redact;
pub mod requests;
pub mod stdio;
pub mod worker;

pub use classify::{CallOutcome, NoDocument, Refusal, ToolResult};
pub use client::{CallOptions, ClientOptions, McpClient, ServerEvent, ServerInfo, Tool, ToolSet};
pub use error::{CloseReason, McpError};
pub use http::{
    HttpBody, HttpClient, HttpError, HttpErrorKind, HttpHead, HttpRequest, HttpResponse,
};
pub use names::{qualified_tool_name, validate_server_name, NameError};
pub use requests::{AcceptSchemaDefaults, ElicitationHandler, SamplingHandler};
pub use stdio::{ServerExit, ServerIo, ServerProcess, ServerSpawner, SpawnError, StdioSpec};
pub use worker::{worker_main, McpHandler, SandboxSpawner};

use std::future::Future;
use std::pin::Pin;

/// A boxed, sendable future: the seams (spawner, HTTP client, handlers) are trait objects so one
/// client type serves both transports and the worker can plug its own implementations in.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The protocol version this client asks for (MCP 2025-11-25).
pub const LATEST_PROTOCOL_VERSION: &str = "2025-11-25";

/// Versions accepted when a server answers `initialize` with one of them instead of ours: the
/// current one, the previous one, and 2025-03-26 (the first with streamable HTTP, which servers in
/// the field and the official conformance suite's `sse-retry` scenario still answer with). Their
/// differences do not touch what this client uses (tools, progress, cancellation, roots).
pub const SUPPORTED_PROTOCOL_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];

/// The `clientInfo.name` sent in `initialize`.
pub const CLIENT_NAME: &str = "hanzo-dev";
