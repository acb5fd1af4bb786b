//! Turning SQLite rows into typed records, and the column lists the queries select. A row that
//! does not parse is [`StoreError::Corrupt`], never a panic.

use crate::error::{Result, StoreError};
use crate::types::{
    Agent, AgentDef, CallStatus, DecidedBy, EventRecord, HookResult, RunId, RunSummary, StepId,
    StepRecord, TokenUsage, ToolCall, ToolCallRecord,
};
use hanzo_policy::{AuditRecord, PermissionMode, RuleRef, Scope, Tier};
use rusqlite::Row;
use serde_json::Value;

pub(crate) fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

pub(crate) fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

pub(crate) fn now_ms() -> u64 {
    hanzo_policy::audit::now_ms()
}

pub(crate) const RUN_COLUMNS: &str =
    "id, agent, input, model, isolation, status, outcome, started_ms, ended_ms, tokens_in, tokens_out";

pub(crate) const AGENT_COLUMNS: &str = "name, model, system_prompt, tools, created_ms";

pub(crate) const STEP_COLUMNS: &str = "id, idx, started_ms, ended_ms, text, tokens_in, tokens_out";

pub(crate) const CALL_COLUMNS: &str =
    "id, step_id, tool_use_id, name, input, permission, rule, allowed, decision_reason,
     hook_results, output, error, duration_ms, recorded_ms, decided_by, status";

pub(crate) const AUDIT_COLUMNS: &str = "timestamp_ms, session_id, tool_name, input_digest, mode,
     rule_scope, rule_index, rule_pattern, reason";

pub(crate) const EVENT_COLUMNS: &str = "id, step_id, kind, data, recorded_ms";

/// The outer `Result` is SQLite's (a column of the wrong type), the inner ours (a value that does
/// not parse); query helpers flatten the two.
pub(crate) type Parsed<T> = rusqlite::Result<Result<T>>;

pub(crate) fn run_from_row(r: &Row<'_>) -> Parsed<RunSummary> {
    let status: String = r.get(5)?;
    let isolation: String = r.get(4)?;
    let build = |status: &str, isolation: &str| -> Result<RunSummary> {
        Ok(RunSummary {
            id: RunId(r.get(0)?),
            agent: r.get(1)?,
            input: r.get(2)?,
            model: r.get(3)?,
            isolation: parse_isolation(isolation)?,
            status: status.parse()?,
            outcome: r.get(6)?,
            started_ms: to_u64(r.get(7)?),
            ended_ms: r.get::<_, Option<i64>>(8)?.map(to_u64),
            usage: TokenUsage {
                input: to_u64(r.get(9)?),
                output: to_u64(r.get(10)?),
            },
        })
    };
    Ok(build(&status, &isolation))
}

pub(crate) fn agent_from_row(r: &Row<'_>) -> Parsed<Agent> {
    let tools: String = r.get(3)?;
    let tools = match serde_json::from_str(&tools) {
        Ok(t) => t,
        Err(e) => return Ok(Err(StoreError::Corrupt(format!("agents.tools: {e}")))),
    };
    Ok(Ok(Agent {
        def: AgentDef {
            name: r.get(0)?,
            model: r.get(1)?,
            system_prompt: r.get(2)?,
            tools,
        },
        created_ms: to_u64(r.get(4)?),
    }))
}

pub(crate) fn step_from_row(r: &Row<'_>) -> rusqlite::Result<StepRecord> {
    Ok(StepRecord {
        id: StepId(r.get(0)?),
        index: u32::try_from(r.get::<_, i64>(1)?).unwrap_or(u32::MAX),
        started_ms: to_u64(r.get(2)?),
        ended_ms: r.get::<_, Option<i64>>(3)?.map(to_u64),
        text: r.get(4)?,
        usage: TokenUsage {
            input: to_u64(r.get(5)?),
            output: to_u64(r.get(6)?),
        },
        tool_calls: Vec::new(),
    })
}

/// A tool call row with the id of its step.
pub(crate) fn call_from_row(r: &Row<'_>) -> Parsed<(StepId, ToolCallRecord)> {
    let id: i64 = r.get(0)?;
    let step = StepId(r.get(1)?);
    let input: String = r.get(4)?;
    let permission: String = r.get(5)?;
    let rule: Option<String> = r.get(6)?;
    let hooks: String = r.get(9)?;
    let decided_by: Option<String> = r.get(14)?;
    let status: String = r.get(15)?;
    let build = || -> Result<(StepId, ToolCallRecord)> {
        let call = ToolCall {
            tool_use_id: r.get(2)?,
            name: r.get(3)?,
            input: parse_json("tool_calls.input", &input)?,
            permission: parse_mode(&permission)?,
            rule: rule
                .as_deref()
                .map(|text| {
                    serde_json::from_str::<RuleRef>(text)
                        .map_err(|e| StoreError::Corrupt(format!("tool_calls.rule: {e}")))
                })
                .transpose()?,
            decided_by: parse_decided_by(decided_by.as_deref(), id)?,
            allowed: r.get(7)?,
            decision_reason: r.get(8)?,
            hook_results: serde_json::from_str::<Vec<HookResult>>(&hooks)
                .map_err(|e| StoreError::Corrupt(format!("tool_calls.hook_results: {e}")))?,
            output: r.get(10)?,
            error: r.get(11)?,
            duration_ms: to_u64(r.get(12)?),
        };
        Ok((
            step,
            ToolCallRecord {
                id,
                call,
                status: parse_call_status(&status)?,
                recorded_ms: to_u64(r.get(13)?),
            },
        ))
    };
    Ok(build())
}

pub(crate) fn audit_from_row(r: &Row<'_>) -> Parsed<AuditRecord> {
    let mode: String = r.get(4)?;
    let scope: Option<String> = r.get(5)?;
    let index: Option<i64> = r.get(6)?;
    let pattern: Option<String> = r.get(7)?;
    let build = || -> Result<AuditRecord> {
        let rule_matched = match (index, pattern) {
            (Some(index), Some(pattern)) => Some(RuleRef {
                scope: scope.as_deref().map(parse_scope).transpose()?,
                index: usize::try_from(index)
                    .map_err(|_| StoreError::Corrupt(format!("rule index {index}")))?,
                pattern,
            }),
            (None, None) => None,
            _ => return Err(StoreError::Corrupt("half a rule reference".into())),
        };
        Ok(AuditRecord {
            timestamp: to_u64(r.get(0)?),
            session_id: r.get(1)?,
            tool_name: r.get(2)?,
            input_digest: r.get(3)?,
            mode: parse_mode(&mode)?,
            rule_matched,
            reason: r.get(8)?,
        })
    };
    Ok(build())
}

pub(crate) fn event_from_row(r: &Row<'_>) -> Parsed<EventRecord> {
    let data: String = r.get(3)?;
    let build = || -> Result<EventRecord> {
        Ok(EventRecord {
            id: r.get(0)?,
            step: r.get::<_, Option<i64>>(1)?.map(StepId),
            kind: r.get(2)?,
            data: parse_json("events.data", &data)?,
            recorded_ms: to_u64(r.get(4)?),
        })
    };
    Ok(build())
}

pub(crate) fn parse_mode(s: &str) -> Result<PermissionMode> {
    s.parse()
        .map_err(|_| StoreError::Corrupt(format!("unknown permission mode {s:?}")))
}

fn parse_scope(s: &str) -> Result<Scope> {
    match s {
        "user" => Ok(Scope::User),
        "project" => Ok(Scope::Project),
        "local" => Ok(Scope::Local),
        other => Err(StoreError::Corrupt(format!("unknown scope {other:?}"))),
    }
}

fn parse_isolation(s: &str) -> Result<Tier> {
    Tier::parse(s).ok_or_else(|| StoreError::Corrupt(format!("unknown isolation tier {s:?}")))
}

fn parse_decided_by(s: Option<&str>, call: i64) -> Result<DecidedBy> {
    let s = s.ok_or_else(|| StoreError::Corrupt(format!("tool call {call} has no decided_by")))?;
    DecidedBy::parse(s).ok_or_else(|| StoreError::Corrupt(format!("unknown decided_by {s:?}")))
}

fn parse_call_status(s: &str) -> Result<CallStatus> {
    match s {
        "started" => Ok(CallStatus::Started),
        "finished" => Ok(CallStatus::Finished),
        other => Err(StoreError::Corrupt(format!(
            "unknown tool call status {other:?}"
        ))),
    }
}

pub(crate) fn parse_json(what: &str, s: &str) -> Result<Value> {
    serde_json::from_str(s).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}
