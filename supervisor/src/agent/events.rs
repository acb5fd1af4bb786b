//! What a run reports as it goes: one [`RunEvent`] per happening, shown live on a terminal or
//! written one JSON object per line with `run --json` (schema in `docs/run-events.md`).

use serde::Serialize;

/// A run's progress. Serialized with a `type` tag in snake_case; fields are stable (additions
/// only).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunEvent {
    /// The run began (once, first).
    RunStarted {
        /// The store's id for the run (`hanzo-dev runs show ID`).
        run_id: i64,
        /// The agent's name.
        agent: String,
        /// The model's name.
        model: String,
        /// `A` or `B`, as the tools worker attested it.
        isolation: hanzo_policy::isolation::Tier,
        /// The approval mode (`prompt`, `deny`, `allow-listed`, `allow`).
        approval: String,
        /// The workspace's absolute path.
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
        /// The stage's agent (`plan`, `code`, `review`).
        stage: String,
    },
    /// A model turn begins.
    StepStarted {
        /// The turn's number, 1-based over the whole run.
        step: u32,
    },
    /// Streamed assistant text.
    Text {
        /// A piece of the text; the pieces concatenate to the reply.
        text: String,
    },
    /// The model called a tool (one event per call, in order).
    ToolCall {
        /// The provider's tool-use id, which the call's later events carry too.
        id: String,
        /// The tool's name.
        name: String,
        /// The input, secrets redacted (`null` when the model sent invalid JSON).
        input: serde_json::Value,
    },
    /// Whether the call may run, and who decided (`rule`, `default`, `approval:<mode>`, `hook`,
    /// `agent`, `limit`).
    ToolDecision {
        /// The call's id.
        id: String,
        /// Whether the call may run.
        allowed: bool,
        /// Who made the final decision.
        decided_by: hanzo_store::DecidedBy,
        /// Why, in a sentence (the rule, the mode, the hook's message, …).
        reason: String,
    },
    /// A running MCP call's `notifications/progress`, as the server sent it: `progress` and
    /// `total` in the server's units, `message` cut to [`MAX_PROGRESS_MESSAGE`] characters. At
    /// most [`MAX_PROGRESS_EVENTS`] per call; not stored in the run.
    ToolProgress {
        /// The call's id.
        id: String,
        /// How far the call is, in the server's units.
        progress: f64,
        /// The amount `progress` goes up to, when the server gave one.
        #[serde(skip_serializing_if = "Option::is_none")]
        total: Option<f64>,
        /// The server's text, unsanitised: a consumer printing it must sanitise it.
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// The call ran, or was refused (then `is_error`, with the reason the model was given).
    ToolResult {
        /// The call's id.
        id: String,
        /// Whether the model was given an error.
        is_error: bool,
        /// The first 2000 characters of the output (or error) the model was given.
        preview: String,
        /// Milliseconds from the call reaching the gate to its result (approval, hooks and the run
        /// included; 0 for a call a cap refused).
        duration_ms: u64,
    },
    /// A model request failed in a way worth retrying; the model worker waits `delay_ms`, then
    /// tries again.
    ModelRetry {
        /// The attempt that failed, 1-based.
        attempt: u32,
        /// Attempts in total, the first included.
        max_attempts: u32,
        /// Milliseconds before the next attempt.
        delay_ms: u64,
        /// Why the attempt failed (connection refused, 429, 5xx, overloaded).
        reason: String,
    },
    /// The context passed 90 % of the model's window and was compacted.
    Compacted {
        /// Messages replaced by the summary (or cut).
        dropped_messages: usize,
        /// Whether the model summarised them; `false`: the summary request failed and the middle
        /// was cut, with a notice in its place.
        summarized: bool,
        /// The context's estimated size before, in tokens.
        tokens_before: u64,
        /// The context's estimated size after, in tokens.
        tokens_after: u64,
    },
    /// A model turn and its tool calls are done.
    StepFinished {
        /// The turn's number, 1-based over the whole run.
        step: u32,
        /// Input tokens of this turn, as the provider reported them.
        input_tokens: u64,
        /// Output tokens of this turn, as the provider reported them.
        output_tokens: u64,
    },
    /// The run ended (once, last; absent when the store could not be written).
    RunFinished {
        /// The store's id for the run.
        run_id: i64,
        /// `succeeded`, `failed` or `cancelled`.
        status: String,
        /// The first line of the final answer, or why the run stopped.
        outcome: String,
        /// Model turns taken.
        steps: u32,
        /// Input tokens over the whole run.
        input_tokens: u64,
        /// Output tokens over the whole run.
        output_tokens: u64,
        /// Milliseconds from the start of the run to its end.
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
    /// Takes one event; the sink decides where it goes (a screen, stdout, nowhere).
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
