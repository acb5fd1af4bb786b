//! What a run reports as it goes: one [`RunEvent`] per happening, shown live on a terminal or
//! written one JSON object per line with `run --json` (schema in `docs/run-events.md`).

use serde::Serialize;

/// A run's progress. Serialized with a `type` tag in snake_case; fields are stable (additions
/// only).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunEvent {
    RunStarted {
        run_id: i64,
        agent: String,
        model: String,
        /// `A` or `B`, as the tools worker attested it.
        isolation: hanzo_policy::isolation::Tier,
        approval: String,
        workspace: String,
        /// True when the model is a recording (replay provider).
        replay: bool,
        /// Why the workspace is dangerous, present only when the run was started anyway with
        /// `--allow-dangerous-workspace`.
        #[serde(skip_serializing_if = "Option::is_none")]
        dangerous_workspace: Option<Vec<String>>,
    },
    /// An `auto` pipeline moved to its next stage.
    StageStarted {
        stage: String,
    },
    StepStarted {
        step: u32,
    },
    /// Streamed assistant text.
    Text {
        text: String,
    },
    ToolCall {
        id: String,
        name: String,
        input: serde_json::Value,
    },
    /// Whether the call may run, and who decided (`rule`, `default`, `approval:<mode>`, `hook`,
    /// `agent`, `limit`).
    ToolDecision {
        id: String,
        allowed: bool,
        decided_by: hanzo_store::DecidedBy,
        reason: String,
    },
    /// A running MCP call's `notifications/progress`, as the server sent it: `progress` and
    /// `total` in the server's units, `message` cut to [`MAX_PROGRESS_MESSAGE`] characters. At
    /// most [`MAX_PROGRESS_EVENTS`] per call; not stored in the run.
    ToolProgress {
        id: String,
        progress: f64,
        #[serde(skip_serializing_if = "Option::is_none")]
        total: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    ToolResult {
        id: String,
        is_error: bool,
        /// The first 2000 characters of the output (or error) the model was given.
        preview: String,
        duration_ms: u64,
    },
    /// A model request failed in a way worth retrying; the model worker waits `delay_ms`, then
    /// tries again.
    ModelRetry {
        attempt: u32,
        max_attempts: u32,
        delay_ms: u64,
        reason: String,
    },
    Compacted {
        dropped_messages: usize,
        summarized: bool,
        tokens_before: u64,
        tokens_after: u64,
    },
    StepFinished {
        step: u32,
        input_tokens: u64,
        output_tokens: u64,
    },
    RunFinished {
        run_id: i64,
        /// `succeeded`, `failed` or `cancelled`.
        status: String,
        outcome: String,
        steps: u32,
        input_tokens: u64,
        output_tokens: u64,
        duration_ms: u64,
        /// Tool calls answered, run or refused.
        tool_calls: u32,
        /// Of those, the ones refused (a rule, the default, the approval mode, a hook, the
        /// agent's tool list, a cap).
        denied_calls: u32,
    },
    /// A command's connection attempt through the egress proxy (allowed or denied), when it
    /// ended; also stored in the run as an `egress` event.
    Egress(crate::egress::EgressEvent),
}

/// Progress events passed on per MCP call; a server sending more is not heard beyond these.
pub const MAX_PROGRESS_EVENTS: usize = 256;
/// Characters of a progress message passed on.
pub const MAX_PROGRESS_MESSAGE: usize = 200;

/// Where events go. Called on the loop's task; must not block for long.
pub trait EventSink: Sync {
    fn emit(&self, event: &RunEvent);
}

/// Drops every event (benchmarks, tests that read the store instead).
#[derive(Debug, Default)]
pub struct NoEvents;

impl EventSink for NoEvents {
    fn emit(&self, _event: &RunEvent) {}
}

/// Collects events (tests).
#[derive(Debug, Default)]
pub struct CollectEvents(pub std::sync::Mutex<Vec<RunEvent>>);

impl EventSink for CollectEvents {
    fn emit(&self, event: &RunEvent) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(event.clone());
    }
}
