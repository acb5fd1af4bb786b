//! The loop's three seams (HIP-0301 §2): the model ([`ApiClient`]), tool execution
//! ([`ToolExecutor`]) and the permission question ([`PermissionPrompter`]). Production
//! implementations talk to the workers (`agent::workers`) or the terminal (`agent::approval`);
//! tests pass their own.

use hanzo_ipc::roles::model::{Message, StopReason, StreamErrorKind, StreamEvent, ToolDef, Usage};
use hanzo_ipc::roles::tools::{PreHookReply, ToolResult};
use hanzo_policy::hooks::HookConfig;
use serde_json::Value;
use std::future::Future;

/// One model request: the conversation so far and the tools on offer.
#[derive(Debug, Clone)]
pub struct TurnRequest<'a> {
    /// The system prompt.
    pub system: &'a str,
    /// The conversation so far, oldest first (compacted when it grew too long).
    pub messages: &'a [Message],
    /// The tools the model may call in this turn.
    pub tools: &'a [ToolDef],
}

/// How a model turn ended without completing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TurnError {
    /// `None` when the failure was below the provider protocol (the model worker went away).
    pub kind: Option<StreamErrorKind>,
    /// What went wrong, in a sentence, for the run's record and the person.
    pub message: String,
}

/// A completed model turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnEnd {
    /// Why the model stopped (end of turn, a tool call, the token limit, …).
    pub stop_reason: StopReason,
    /// The tokens the turn took, as the provider counted them.
    pub usage: Usage,
}

/// Sends the conversation to the model and delivers its stream events as they arrive
/// (HIP-0301's `send_message`, with the async iterator as a callback so the loop can show text
/// while it streams).
pub trait ApiClient {
    /// Sends `request`, calling `on_event` for each stream event as it arrives; returns how the
    /// turn ended.
    fn send_message(
        &self,
        request: TurnRequest<'_>,
        on_event: &mut dyn FnMut(&StreamEvent),
    ) -> impl Future<Output = Result<TurnEnd, TurnError>>;
}

/// One tool call, as the loop hands it to an executor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolInvocation {
    /// The model's id for the call, which its result must carry back.
    pub id: String,
    /// The tool's name as the model called it.
    pub name: String,
    /// The input object as JSON text, exactly as the model produced it.
    pub input_json: String,
}

/// Runs tools and their hooks. Every failure of the tool itself is a [`ToolResult`] with
/// `is_error` (the model sees it); an executor never makes the loop fail.
pub trait ToolExecutor {
    /// The tools the model may be offered.
    fn definitions(&self) -> impl Future<Output = Result<Vec<ToolDef>, String>>;
    /// Runs one call the gate allowed, in `session_id`'s session; failures are error results.
    fn execute(&self, call: &ToolInvocation, session_id: &str) -> impl Future<Output = ToolResult>;
    /// The pre-tool-use hooks' verdict. `hooks` is the configured hook list (both events; the
    /// executor runs the pre-tool-use ones).
    fn pre_hooks(
        &self,
        hooks: &[HookConfig],
        call: &ToolInvocation,
        session_id: &str,
    ) -> impl Future<Output = PreHookReply>;
    /// The server, tool and classification of call `call_id` when it was an `mcp__*` call that
    /// reached the mcp worker, once, for its record (`None` for any other call).
    fn mcp_call_info(&self, call_id: &str) -> Option<hanzo_store::McpCallInfo> {
        let _ = call_id;
        None
    }
    /// Post-tool-use hooks; returns the failures, described (they never block).
    fn post_hooks(
        &self,
        hooks: &[HookConfig],
        call: &ToolInvocation,
        session_id: &str,
        result: &ToolResult,
    ) -> impl Future<Output = Vec<String>>;
}

/// HIP-0301 §2 `PermissionDecision`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PermissionDecision {
    /// The call may run.
    Allow,
    /// The call is refused; the text is the reason the model and the record get.
    Deny(String),
    /// Nobody here can decide; the loop treats it as a denial and says so.
    Escalate,
}

/// Asked when the policy says `prompt`: a person at a terminal, or a non-interactive approval
/// mode standing in for one.
pub trait PermissionPrompter {
    /// `why` is the policy's reason for asking.
    fn request_permission(
        &self,
        tool_name: &str,
        input: &Value,
        why: &str,
    ) -> impl Future<Output = PermissionDecision>;
    /// The approval mode this prompter stands for, as the record names it.
    fn mode(&self) -> hanzo_store::ApprovalMode;
}
