//! What the store keeps: ids, statuses, agent definitions, runs, steps, tool calls and events, as
//! typed values. The JSON forms (`runs show --json`, `runs export`, the `--json` event stream) are
//! an API boundary: fields are only ever added.

use crate::error::{Result, StoreError};
use hanzo_policy::{AuditRecord, PermissionMode, RuleRef, Tier};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::str::FromStr;

/// A run's id: the row id in its org's store, so it is unique within one org file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunId(pub i64);

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for RunId {
    type Err = std::num::ParseIntError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(RunId)
    }
}

/// A step's id (a row id, unique within the org file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StepId(pub i64);

/// A tool call's id (a row id, unique within the org file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CallId(pub i64);

/// A session's id: the row id in its org's store (HIP-1210 keeps sessions beside runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SessionId(pub i64);

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for SessionId {
    type Err = std::num::ParseIntError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(SessionId)
    }
}

/// What [`crate::RunStore::create_session`] records about a new session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSession {
    /// The agent the session talks to (a built-in or a stored agent's name).
    pub agent: String,
    /// The workspace directory, as the session was opened in it.
    pub workspace: String,
    /// A short title (the first line of the first message, usually); `None` until known.
    pub title: Option<String>,
}

/// A stored session: an interactive conversation whose turns are runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// Its id (`hanzo-dev chat --resume ID`).
    pub id: SessionId,
    /// The agent it talks to.
    pub agent: String,
    /// The workspace it was opened in.
    pub workspace: String,
    /// A short title, once known.
    pub title: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub created_ms: u64,
    /// When its last turn began (or the session was created).
    pub updated_ms: u64,
}

/// One turn of a session as the store keeps it: the user's text (the run's input) and the
/// assistant's last words (the text of the run's last step), enough to continue the
/// conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionTurn {
    /// The run that is this turn.
    pub run: RunId,
    /// How the turn ended (or `running`).
    pub status: RunStatus,
    /// What the user said (the run's input).
    pub user: String,
    /// `None` when the turn ended before the model said anything (cancelled, failed).
    pub answer: Option<String>,
}

/// What [`crate::RunStore::record_session_summary`] records: a session's conversation up to
/// and including the turn `through_run`, summarised (`/compact`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSessionSummary {
    /// The session summarised.
    pub session: SessionId,
    /// The last turn the summary covers; it must be a run of `session`.
    pub through_run: RunId,
    /// The model's summary (it goes back to the model as it is).
    pub summary: String,
    /// How many turns since the previous summary it covers.
    pub turns: u32,
    /// The estimated size of the conversation before, in tokens.
    pub tokens_before: u64,
    /// The estimated size after (the summary and what follows it), in tokens.
    pub tokens_after: u64,
}

/// A stored session summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSummary {
    /// Its row id.
    pub id: i64,
    /// The session summarised.
    pub session: SessionId,
    /// The last turn it covers.
    pub through_run: RunId,
    /// The model's summary.
    pub summary: String,
    /// How many turns since the previous summary it covers.
    pub turns: u32,
    /// The estimated size of the conversation before, in tokens.
    pub tokens_before: u64,
    /// The estimated size after, in tokens.
    pub tokens_after: u64,
    /// When it was recorded (ms since the epoch).
    pub created_ms: u64,
}

/// Where a session's next turn starts: its newest summary, if any, and the turns after it,
/// oldest first ([`crate::RunStore::session_context`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionContext {
    /// The newest summary.
    pub summary: Option<SessionSummary>,
    /// The turns after it (all of them without a summary).
    pub turns: Vec<SessionTurn>,
}

/// Where a run is in its life. Everything but `Running` is final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Still going (or its process died and the store has not been told yet).
    Running,
    /// The agent finished its task.
    Succeeded,
    /// The run ended on an error, a limit or a refused provider.
    Failed,
    /// The user (or a client) stopped it.
    Cancelled,
    /// Left `running` by a process that died; set by [`crate::RunStore::mark_interrupted_runs`].
    Interrupted,
}

impl RunStatus {
    /// The name stored and printed (`running`, `succeeded`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Interrupted => "interrupted",
        }
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RunStatus {
    type Err = StoreError;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "running" => RunStatus::Running,
            "succeeded" => RunStatus::Succeeded,
            "failed" => RunStatus::Failed,
            "cancelled" => RunStatus::Cancelled,
            "interrupted" => RunStatus::Interrupted,
            other => return Err(StoreError::Corrupt(format!("unknown run status {other:?}"))),
        })
    }
}

/// Tokens sent to and received from the model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    /// Tokens sent, as the provider counted them.
    pub input: u64,
    /// Tokens received.
    pub output: u64,
}

/// An agent definition: a model, a system prompt and the tools it may use (HIP-1210).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentDef {
    /// What `--agent` names it by.
    pub name: String,
    /// The model it asks for (empty: the settings' or provider's default).
    pub model: String,
    /// Its instructions, sent as the system prompt.
    pub system_prompt: String,
    /// The tools it may call, by name; the others are refused as `agent`.
    pub tools: Vec<String>,
}

/// A stored agent definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agent {
    /// The definition.
    #[serde(flatten)]
    pub def: AgentDef,
    /// Milliseconds since the Unix epoch.
    pub created_ms: u64,
}

/// What [`crate::RunStore::begin_run`] records about a run's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRun {
    /// The agent definition used, if any (runs keep the name even if the agent is deleted later).
    pub agent: Option<String>,
    /// The task, as given.
    pub input: String,
    /// The model that will be asked.
    pub model: String,
    /// The isolation tier the run's tools worker got, as its attestation reports it.
    pub isolation: Tier,
}

/// One run's header row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSummary {
    /// Its id (`hanzo-dev runs show ID`).
    pub id: RunId,
    /// The agent definition used, if any.
    pub agent: Option<String>,
    /// The task, as given.
    pub input: String,
    /// The model asked.
    pub model: String,
    /// The isolation tier its tools worker got.
    pub isolation: Tier,
    /// Where it is in its life.
    pub status: RunStatus,
    /// How it ended, in a sentence, as the loop recorded it.
    pub outcome: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub started_ms: u64,
    /// Milliseconds since the Unix epoch; `None` while running.
    pub ended_ms: Option<u64>,
    /// Tokens used over all its steps.
    pub usage: TokenUsage,
}

/// What [`crate::RunStore::finish_step`] records when a step completes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepEnd {
    /// The model's text for this step, if any.
    pub text: Option<String>,
    /// The step's tokens, as the provider reported them.
    pub usage: TokenUsage,
}

/// How a run answers a call the policy says to ask about (`run --approval`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalMode {
    /// Ask at the terminal.
    Prompt,
    /// Deny every call that would need approval; the model is told why.
    Deny,
    /// Approve the read-only tools (read_file, list_dir, glob, grep); deny the rest.
    AllowListed,
    /// Approve every call that would need approval. Deny rules and hooks still apply, and every
    /// call still runs in the sandbox.
    Allow,
}

impl ApprovalMode {
    /// Every mode, in the order help lists them.
    pub const ALL: [ApprovalMode; 4] = [
        ApprovalMode::Prompt,
        ApprovalMode::Deny,
        ApprovalMode::AllowListed,
        ApprovalMode::Allow,
    ];

    /// The `--approval` value and stored form.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalMode::Prompt => "prompt",
            ApprovalMode::Deny => "deny",
            ApprovalMode::AllowListed => "allow-listed",
            ApprovalMode::Allow => "allow",
        }
    }

    /// The mode named `s` ([`ApprovalMode::as_str`]'s form), if any.
    pub fn parse(s: &str) -> Option<ApprovalMode> {
        Self::ALL.into_iter().find(|m| m.as_str() == s)
    }

    /// One line of help for the command line.
    pub fn describe(self) -> &'static str {
        match self {
            ApprovalMode::Prompt => {
                "ask at the terminal (the default when stdin and stderr are terminals)"
            }
            ApprovalMode::Deny => {
                "deny every call that would need approval; the model is told why (the default \
                 otherwise)"
            }
            ApprovalMode::AllowListed => {
                "approve the read-only tools (read_file, list_dir, glob, grep); deny the rest"
            }
            ApprovalMode::Allow => {
                "approve every call that would need approval; deny rules and hooks still apply, \
                 and every call still runs in the sandbox"
            }
        }
    }
}

impl fmt::Display for ApprovalMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who made the final decision about a tool call. Serialized as one string: `rule`, `default`,
/// `approval:<mode>`, `hook`, `agent`, `limit` or `not_run` (`docs/run-events.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DecidedBy {
    /// A permission rule matched.
    Rule,
    /// No rule matched and the policy's default applied.
    Default,
    /// The policy said prompt, and the approval mode (or the person at the terminal) answered.
    Approval(ApprovalMode),
    /// A pre-tool-use hook denied it (or failed, which denies).
    Hook,
    /// The agent has no such tool.
    Agent,
    /// A cap (tool calls per turn or per run) refused it.
    Limit,
    /// The run stopped before this call was attempted.
    NotRun,
}

impl DecidedBy {
    /// The stored and serialized form (see the type's doc).
    pub fn as_str(self) -> &'static str {
        match self {
            DecidedBy::Rule => "rule",
            DecidedBy::Default => "default",
            DecidedBy::Approval(ApprovalMode::Prompt) => "approval:prompt",
            DecidedBy::Approval(ApprovalMode::Deny) => "approval:deny",
            DecidedBy::Approval(ApprovalMode::AllowListed) => "approval:allow-listed",
            DecidedBy::Approval(ApprovalMode::Allow) => "approval:allow",
            DecidedBy::Hook => "hook",
            DecidedBy::Agent => "agent",
            DecidedBy::Limit => "limit",
            DecidedBy::NotRun => "not_run",
        }
    }

    /// The value [`DecidedBy::as_str`] wrote, if `s` is one.
    pub fn parse(s: &str) -> Option<DecidedBy> {
        Some(match s {
            "rule" => DecidedBy::Rule,
            "default" => DecidedBy::Default,
            "hook" => DecidedBy::Hook,
            "agent" => DecidedBy::Agent,
            "limit" => DecidedBy::Limit,
            "not_run" => DecidedBy::NotRun,
            other => DecidedBy::Approval(ApprovalMode::parse(other.strip_prefix("approval:")?)?),
        })
    }
}

impl fmt::Display for DecidedBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for DecidedBy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for DecidedBy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        DecidedBy::parse(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown decided_by {s:?}")))
    }
}

/// What the hooks said about one call, in the order they ran. Serialized with a `phase` tag:
/// `{"phase": "pre", "allowed", "failed", "reason", "decided_by"}` and
/// `{"phase": "post", "failures"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "lowercase")]
pub enum HookResult {
    /// The pre-tool-use hooks' verdict.
    Pre {
        /// Whether the hooks let the call run.
        allowed: bool,
        /// A hook failed (crashed, timed out, printed nonsense), which blocks the call.
        failed: bool,
        /// Why, as the deciding hook said.
        reason: Option<String>,
        /// The hook command that decided, when one did.
        decided_by: Option<String>,
    },
    /// The post-tool-use hooks (they never block); each failure described.
    Post {
        /// One line per hook that failed.
        failures: Vec<String>,
    },
}

/// Whether a recorded call has finished. A call is recorded as `started` before it executes;
/// one left `started` was running when the process died or the store stopped accepting writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CallStatus {
    /// Recorded before it executed; no outcome yet.
    Started,
    /// Its outcome is recorded.
    Finished,
}

impl CallStatus {
    /// The stored form.
    pub fn as_str(self) -> &'static str {
        match self {
            CallStatus::Started => "started",
            CallStatus::Finished => "finished",
        }
    }
}

/// One tool call as the loop handled it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id for this tool use, which pairs it with its result.
    pub tool_use_id: Option<String>,
    /// The tool's name.
    pub name: String,
    /// Its arguments, as the model sent them.
    pub input: Value,
    /// What the permission policy said.
    pub permission: PermissionMode,
    /// The rule that decided; `None` = the policy's default.
    pub rule: Option<RuleRef>,
    /// Who made the final decision.
    pub decided_by: DecidedBy,
    /// Whether the call finally ran (after prompting, the approval mode and pre-hooks).
    pub allowed: bool,
    /// Why it ran or not, as the model was told.
    pub decision_reason: String,
    /// Pre- and post-hook results, in order.
    pub hook_results: Vec<HookResult>,
    /// What the tool returned (what the model saw), if it ran and succeeded.
    pub output: Option<String>,
    /// Why it failed or was refused.
    pub error: Option<String>,
    /// How long it ran.
    pub duration_ms: u64,
}

/// How the mcp worker classified the answer to an `mcp__*` call (HAAP README: allowed / policy
/// denial / downstream fault), or that there was no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum McpClassification {
    /// The server answered with a result (possibly one whose `isError` is set).
    Allowed,
    /// A policy denial: a JSON-RPC error in −32005…−32000, HTTP 401/403, or a body that is no
    /// JSON-RPC document (empty, truncated, HTML, not UTF-8).
    Denied,
    /// Any other JSON-RPC error (e.g. −32601): a downstream fault.
    Fault,
    /// No answer: the server was unknown, down or timed out, or the connection ended.
    Failed,
}

impl McpClassification {
    /// The stored form (`allowed`, `denied`, `fault`, `failed`).
    pub fn as_str(self) -> &'static str {
        match self {
            McpClassification::Allowed => "allowed",
            McpClassification::Denied => "denied",
            McpClassification::Fault => "fault",
            McpClassification::Failed => "failed",
        }
    }

    /// The classification stored as `s`, if any.
    pub fn parse(s: &str) -> Option<McpClassification> {
        [
            McpClassification::Allowed,
            McpClassification::Denied,
            McpClassification::Fault,
            McpClassification::Failed,
        ]
        .into_iter()
        .find(|c| c.as_str() == s)
    }
}

/// What the record keeps of an `mcp__*` call beyond any tool call's fields: which server and
/// tool answered, and how the answer was classified, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpCallInfo {
    /// The server's name in `mcp_servers`.
    pub server: String,
    /// The server's own name for the tool.
    pub tool: String,
    /// Allowed, denied, fault, or failed (no answer).
    pub classification: McpClassification,
    /// The server's denial or error, or why there was no answer; `None` for an allowed call.
    pub reason: Option<String>,
}

/// What [`crate::RunStore::finish_call`] adds to a started call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallEnd {
    /// What the tool returned.
    pub output: Option<String>,
    /// Why it failed.
    pub error: Option<String>,
    /// How long it ran.
    pub duration_ms: u64,
    /// Appended to the call's hook results (the post-hooks).
    pub more_hook_results: Vec<HookResult>,
    /// For an `mcp__*` call that reached the mcp worker: its server, tool and classification.
    pub mcp: Option<McpCallInfo>,
}

/// A stored tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRecord {
    /// Its row id.
    pub id: i64,
    /// The call.
    #[serde(flatten)]
    pub call: ToolCall,
    /// Whether it finished.
    pub status: CallStatus,
    /// When it was recorded (milliseconds since the Unix epoch).
    pub recorded_ms: u64,
    /// For an `mcp__*` call the mcp worker handled: server, tool, classification and reason
    /// (absent otherwise, and for calls recorded before schema version 6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<McpCallInfo>,
}

/// A stored step with its tool calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// Its id.
    pub id: StepId,
    /// 1-based position in the run.
    pub index: u32,
    /// Milliseconds since the Unix epoch.
    pub started_ms: u64,
    /// `None` while the step is in progress (or if the process died during it).
    pub ended_ms: Option<u64>,
    /// The model's text for the step.
    pub text: Option<String>,
    /// The step's tokens.
    pub usage: TokenUsage,
    /// Its tool calls, in the order the model made them.
    pub tool_calls: Vec<ToolCallRecord>,
}

/// A stored event (anything the loop wants on the record that is not a step or tool call).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    /// Its row id; events are read in this order.
    pub id: i64,
    /// The step it belongs to, if any.
    pub step: Option<StepId>,
    /// Its type (`run_started`, `tool_decision`, …: `docs/run-events.md`).
    pub kind: String,
    /// Its payload.
    pub data: Value,
    /// Milliseconds since the Unix epoch.
    pub recorded_ms: u64,
}

/// A whole run: what `hanzo-dev runs show` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The header.
    pub run: RunSummary,
    /// Its steps, in order.
    pub steps: Vec<StepRecord>,
    /// Its permission decisions, in order.
    pub audit: Vec<AuditRecord>,
    /// Its events, in order.
    pub events: Vec<EventRecord>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decided_by_round_trips_in_its_documented_form() {
        let all = [
            (DecidedBy::Rule, "rule"),
            (DecidedBy::Default, "default"),
            (DecidedBy::Approval(ApprovalMode::Prompt), "approval:prompt"),
            (DecidedBy::Approval(ApprovalMode::Deny), "approval:deny"),
            (
                DecidedBy::Approval(ApprovalMode::AllowListed),
                "approval:allow-listed",
            ),
            (DecidedBy::Approval(ApprovalMode::Allow), "approval:allow"),
            (DecidedBy::Hook, "hook"),
            (DecidedBy::Agent, "agent"),
            (DecidedBy::Limit, "limit"),
            (DecidedBy::NotRun, "not_run"),
        ];
        for (d, s) in all {
            assert_eq!(d.as_str(), s);
            assert_eq!(DecidedBy::parse(s), Some(d));
            let json = serde_json::to_string(&d).expect("serializes");
            assert_eq!(json, format!("\"{s}\""));
            assert_eq!(serde_json::from_str::<DecidedBy>(&json).expect("parses"), d);
        }
        for bad in ["", "approval:", "approval:maybe", "Rule", "approval"] {
            assert_eq!(DecidedBy::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn hook_results_keep_the_phase_tagged_form() {
        let pre = HookResult::Pre {
            allowed: false,
            failed: false,
            reason: Some("no".into()),
            decided_by: Some("./check.sh".into()),
        };
        assert_eq!(
            serde_json::to_value(&pre).expect("json"),
            serde_json::json!({"phase": "pre", "allowed": false, "failed": false,
                               "reason": "no", "decided_by": "./check.sh"})
        );
        let post = HookResult::Post {
            failures: vec!["x".into()],
        };
        assert_eq!(
            serde_json::to_value(&post).expect("json"),
            serde_json::json!({"phase": "post", "failures": ["x"]})
        );
    }
}
