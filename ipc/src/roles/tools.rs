//! The tools channel (supervisor ↔ tools worker). It has no request that could carry a credential.
//!
//! Tool input and tool schemas travel as JSON *text*: postcard is not self-describing, so it
//! cannot carry a `serde_json::Value`; the worker parses the text itself (it is untrusted model
//! output, and parsing it belongs in the sandbox anyway). Hooks are configuration the supervisor
//! already validated, so they travel as typed [`Hook`]s.

use super::{impl_protocol, CommonEvent, CommonItem, CommonRequest, CommonResponse};
use crate::Role;
use serde::{Deserialize, Serialize};

/// What the supervisor may ask the tools worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// A request every worker answers (probes, status).
    Common(CommonRequest),
    /// The built-in tool definitions, exactly as the model will see them.
    Definitions,
    /// Run one tool call. Cancel it with the channel's cancel: the worker aborts the request and
    /// kills any command it started together with its process group.
    Run(ToolCall),
    /// Run the matching pre-tool-use hooks (HIP-0301 §9) here, under this worker's sandbox.
    RunPreHooks(HookCall),
    /// Run the matching post-tool-use hooks; they never block.
    RunPostHooks(HookCall),
}

/// One configured hook (`hanzo_policy::hooks::HookConfig` without its event, which the request
/// names: [`Request::RunPreHooks`] or [`Request::RunPostHooks`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hook {
    /// The shell command, run as `sh -c <command>` in the workspace.
    pub command: String,
    /// Glob over tool names (`*`, `?`, `[…]`, `\`); the hook runs for the tools it matches.
    pub tool_pattern: String,
    /// Milliseconds before the hook's process group is killed (1 to 600 000).
    pub timeout_ms: u64,
}

/// Hooks to run for one tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookCall {
    /// The hooks configured for the request's event, in configuration order. The worker checks
    /// them as loading the settings does; an unusable one makes the request a `BadRequest`.
    pub hooks: Vec<Hook>,
    /// The session's id, handed to each hook in its input.
    pub session_id: String,
    /// The tool's name, matched against each hook's `matcher`.
    pub tool: String,
    /// The tool input, a JSON object as text.
    pub input_json: String,
    /// The tool's result as JSON text (post hooks only).
    pub output_json: Option<String>,
}

/// The verdict of the pre-tool-use hooks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreHookReply {
    /// Whether every matching hook let the call proceed.
    pub allowed: bool,
    /// Why not: a denying hook's stderr, or how a hook failed.
    pub reason: Option<String>,
    /// The command of the hook that decided.
    pub decided_by: Option<String>,
    /// The hook failed (non-0/2 exit, signal, timeout, could not start) rather than denied.
    pub failed: bool,
}

/// The tools worker's answers, one variant per request kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// The answer to a common request.
    Common(CommonResponse),
    /// The answer to [`Request::Definitions`].
    Definitions(Vec<ToolDefinition>),
    /// The result of a [`Request::Run`]. A tool that fails (bad input, a refused path, a command
    /// that exits non-zero) still answers with a result whose `is_error` is set; channel-level
    /// failures are `RemoteError`s.
    Result(ToolResult),
    /// The answer to [`Request::RunPreHooks`].
    PreHooks(PreHookReply),
    /// Post hooks that failed, described (they never block the call).
    PostHooks {
        /// One description per failed hook (its command and how it failed).
        failures: Vec<String>,
    },
}

/// Streamed parts of the tools worker's answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Item {
    /// A part of a common request's answer.
    Common(CommonItem),
    /// A chunk of a running command's combined output, as it arrives (`bash` only). The final
    /// [`ToolResult`] carries the (capped) output again, so items may be ignored.
    Output {
        /// Output bytes as read from the command (a chunk may end inside a UTF-8 sequence).
        chunk: Vec<u8>,
    },
}

/// What the tools worker reports unasked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// An event every worker may send (a log line).
    Common(CommonEvent),
}

/// One tool call of the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The model's id for the call, echoed in logs.
    pub id: String,
    /// The tool's name (`read`, `bash`, …).
    pub name: String,
    /// The tool input, a JSON object as text.
    pub input: String,
}

/// A tool's answer (HIP-0301 §2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResult {
    /// What the tool produced, for the model.
    pub output: String,
    /// Why the tool failed, for the model; `None` on success.
    pub error: Option<String>,
    /// Whether the call failed (set together with `error`).
    pub is_error: bool,
}

impl ToolResult {
    /// A successful result with `output`.
    pub fn ok(output: impl Into<String>) -> ToolResult {
        ToolResult {
            output: output.into(),
            error: None,
            is_error: false,
        }
    }

    /// A failed result with `error` and no output.
    pub fn err(error: impl Into<String>) -> ToolResult {
        ToolResult {
            output: String::new(),
            error: Some(error.into()),
            is_error: true,
        }
    }
}

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// The tool's name, as the model calls it.
    pub name: String,
    /// What the tool does and when to use it, for the model.
    pub description: String,
    /// JSON Schema of the input, as text.
    pub input_schema: String,
}

impl_protocol!(ToolsProtocol, Role::Tools);
