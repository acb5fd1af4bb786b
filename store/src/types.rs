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
    pub id: SessionId,
    pub agent: String,
    pub workspace: String,
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
    pub run: RunId,
    pub status: RunStatus,
    pub user: String,
    /// `None` when the turn ended before the model said anything (cancelled, failed).
    pub answer: Option<String>,
}

/// What [`crate::RunStore::record_session_summary`] records: a session's conversation up to
/// and including the turn `through_run`, summarised (`/compact`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSessionSummary {
    pub session: SessionId,
    /// The last turn the summary covers; it must be a run of `session`.
    pub through_run: RunId,
    /// The model's summary (it goes back to the model as it is).
    pub summary: String,
    /// How many turns since the previous summary it covers.
    pub turns: u32,
    /// The estimated size of the conversation before and after, in tokens.
    pub tokens_before: u64,
    pub tokens_after: u64,
}

/// A stored session summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSummary {
    pub id: i64,
    pub session: SessionId,
    pub through_run: RunId,
    pub summary: String,
    pub turns: u32,
    pub tokens_before: u64,
    pub tokens_after: u64,
    pub created_ms: u64,
}

/// Where a session's next turn starts: its newest summary, if any, and the turns after it,
/// oldest first ([`crate::RunStore::session_context`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionContext {
    pub summary: Option<SessionSummary>,
    pub turns: Vec<SessionTurn>,
}

/// Where a run is in its life. Everything but `Running` is final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Running,
    Succeeded,
    Failed,
    Cancelled,
    /// Left `running` by a process that died; set by [`crate::RunStore::mark_interrupted_runs`].
    Interrupted,
}

impl RunStatus {
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
    pub input: u64,
    pub output: u64,
}

/// An agent definition: a model, a system prompt and the tools it may use (HIP-1210).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentDef {
    pub name: String,
    pub model: String,
    pub system_prompt: String,
    pub tools: Vec<String>,
}

/// A stored agent definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agent {
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
    pub input: String,
    pub model: String,
    /// The isolation tier the run's tools worker got, as its attestation reports it.
    pub isolation: Tier,
}

/// One run's header row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSummary {
    pub id: RunId,
    pub agent: Option<String>,
    pub input: String,
    pub model: String,
    pub isolation: Tier,
    pub status: RunStatus,
    pub outcome: Option<String>,
    pub started_ms: u64,
    pub ended_ms: Option<u64>,
    pub usage: TokenUsage,
}

/// What [`crate::RunStore::finish_step`] records when a step completes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepEnd {
    /// The model's text for this step, if any.
    pub text: Option<String>,
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
    pub const ALL: [ApprovalMode; 4] = [
        ApprovalMode::Prompt,
        ApprovalMode::Deny,
        ApprovalMode::AllowListed,
        ApprovalMode::Allow,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalMode::Prompt => "prompt",
            ApprovalMode::Deny => "deny",
            ApprovalMode::AllowListed => "allow-listed",
            ApprovalMode::Allow => "allow",
        }
    }

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
        allowed: bool,
        /// A hook failed (crashed, timed out, printed nonsense), which blocks the call.
        failed: bool,
        reason: Option<String>,
        /// The hook command that decided, when one did.
        decided_by: Option<String>,
    },
    /// The post-tool-use hooks (they never block); each failure described.
    Post { failures: Vec<String> },
}

/// Whether a recorded call has finished. A call is recorded as `started` before it executes;
/// one left `started` was running when the process died or the store stopped accepting writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CallStatus {
    Started,
    Finished,
}

impl CallStatus {
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
    pub name: String,
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
    pub output: Option<String>,
    pub error: Option<String>,
    pub duration_ms: u64,
}

/// What [`crate::RunStore::finish_call`] adds to a started call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallEnd {
    pub output: Option<String>,
    pub error: Option<String>,
    pub duration_ms: u64,
    /// Appended to the call's hook results (the post-hooks).
    pub more_hook_results: Vec<HookResult>,
}

/// A stored tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRecord {
    pub id: i64,
    #[serde(flatten)]
    pub call: ToolCall,
    pub status: CallStatus,
    pub recorded_ms: u64,
}

/// A stored step with its tool calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub id: StepId,
    /// 1-based position in the run.
    pub index: u32,
    pub started_ms: u64,
    /// `None` while the step is in progress (or if the process died during it).
    pub ended_ms: Option<u64>,
    pub text: Option<String>,
    pub usage: TokenUsage,
    pub tool_calls: Vec<ToolCallRecord>,
}

/// A stored event (anything the loop wants on the record that is not a step or tool call).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    pub id: i64,
    pub step: Option<StepId>,
    pub kind: String,
    pub data: Value,
    pub recorded_ms: u64,
}

/// A whole run: what `hanzo-dev runs show` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub run: RunSummary,
    pub steps: Vec<StepRecord>,
    pub audit: Vec<AuditRecord>,
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
