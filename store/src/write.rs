//! A run's life on record: begin, steps, tool calls (started before they execute, finished
//! after), audit records, events, the end; and closing the runs a dead process left open.

use crate::error::{Result, StoreError};
use crate::rows::{now_ms, to_i64};
use crate::types::{
    CallEnd, CallId, CallStatus, HookResult, NewRun, RunId, RunStatus, StepEnd, StepId, ToolCall,
};
use crate::RunStore;
use hanzo_policy::{AuditRecord, Scope};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use std::path::Path;

/// Whether the process that began a run is still alive. Linux: `/proc/<pid>` exists. Elsewhere we
/// cannot tell without unsafe code, so every other process counts as dead (the documented
/// behaviour: the caller marks orphans at start).
fn process_alive(pid: i64) -> bool {
    if pid == i64::from(std::process::id()) {
        return true;
    }
    cfg!(target_os = "linux") && pid > 0 && Path::new(&format!("/proc/{pid}")).exists()
}

/// Whether `run` exists and is running, read within whatever transaction `conn` is in.
fn require_running_in(conn: &Connection, run: RunId) -> Result<()> {
    let status: Option<String> = conn
        .query_row("SELECT status FROM runs WHERE id = ?1", [run.0], |r| {
            r.get(0)
        })
        .optional()?;
    match status.as_deref() {
        None => Err(StoreError::RunNotFound(run)),
        Some("running") => Ok(()),
        Some(s) => Err(StoreError::RunNotRunning {
            id: run,
            status: s.parse()?,
        }),
    }
}

fn step_run_in(conn: &Connection, step: StepId) -> Result<RunId> {
    conn.query_row("SELECT run_id FROM steps WHERE id = ?1", [step.0], |r| {
        r.get(0).map(RunId)
    })
    .optional()?
    .ok_or(StoreError::StepNotFound(step.0))
}

fn insert_audit(conn: &Connection, run: Option<RunId>, rec: &AuditRecord) -> Result<i64> {
    let rule = rec.rule_matched.as_ref();
    conn.execute(
        "INSERT INTO permission_audit (run_id, timestamp_ms, session_id, tool_name,
             input_digest, mode, rule_scope, rule_index, rule_pattern, reason)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        params![
            run.map(|r| r.0),
            to_i64(rec.timestamp),
            rec.session_id,
            rec.tool_name,
            rec.input_digest,
            rec.mode.as_str(),
            rule.and_then(|r| r.scope).map(Scope::as_str),
            rule.map(|r| i64::try_from(r.index).unwrap_or(i64::MAX)),
            rule.map(|r| r.pattern.as_str()),
            rec.reason
        ],
    )?;
    Ok(conn.last_insert_rowid())
}

/// A tool call's fields as they go into the row, checked against the known secrets.
struct CallText {
    input: String,
    hooks: String,
    rule: Option<String>,
}

fn insert_call_row(
    conn: &Connection,
    run: RunId,
    step: StepId,
    call: &ToolCall,
    text: &CallText,
    status: CallStatus,
) -> Result<CallId> {
    conn.execute(
        "INSERT INTO tool_calls (run_id, step_id, tool_use_id, name, input, permission, rule,
                 allowed, decision_reason, hook_results, output, error, duration_ms, recorded_ms,
                 decided_by, status)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
        params![
            run.0,
            step.0,
            call.tool_use_id,
            call.name,
            text.input,
            call.permission.as_str(),
            text.rule,
            call.allowed,
            call.decision_reason,
            text.hooks,
            call.output,
            call.error,
            to_i64(call.duration_ms),
            to_i64(now_ms()),
            call.decided_by.as_str(),
            status.as_str()
        ],
    )?;
    Ok(CallId(conn.last_insert_rowid()))
}

impl RunStore {
    fn check_call(&self, call: &ToolCall) -> Result<CallText> {
        let input = self.guard_json("tool_calls", "input", &call.input)?;
        let hooks = serde_json::to_string(&call.hook_results).expect("hook results serialize");
        self.guard("tool_calls", "hook_results", &hooks)?;
        let rule = call
            .rule
            .as_ref()
            .map(|r| serde_json::to_string(r).expect("a RuleRef serializes"));
        self.guard_opt("tool_calls", "tool_use_id", call.tool_use_id.as_deref())?;
        self.guard("tool_calls", "name", &call.name)?;
        self.guard_opt("tool_calls", "rule", rule.as_deref())?;
        self.guard("tool_calls", "decision_reason", &call.decision_reason)?;
        self.guard_opt("tool_calls", "output", call.output.as_deref())?;
        self.guard_opt("tool_calls", "error", call.error.as_deref())?;
        Ok(CallText { input, hooks, rule })
    }

    fn check_audit(&self, rec: &AuditRecord) -> Result<()> {
        self.guard("permission_audit", "session_id", &rec.session_id)?;
        self.guard("permission_audit", "tool_name", &rec.tool_name)?;
        self.guard("permission_audit", "input_digest", &rec.input_digest)?;
        self.guard("permission_audit", "reason", &rec.reason)?;
        if let Some(r) = &rec.rule_matched {
            self.guard("permission_audit", "rule_pattern", &r.pattern)?;
        }
        Ok(())
    }

    /// Record a run's start (status `running`, owned by this process).
    pub fn begin_run(&mut self, run: &NewRun) -> Result<RunId> {
        self.guard_opt("runs", "agent", run.agent.as_deref())?;
        self.guard("runs", "input", &run.input)?;
        self.guard("runs", "model", &run.model)?;
        self.conn.execute(
            "INSERT INTO runs (agent, input, model, isolation, status, started_ms, owner_pid)
             VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?6)",
            params![
                run.agent,
                run.input,
                run.model,
                run.isolation.as_str(),
                to_i64(now_ms()),
                i64::from(std::process::id())
            ],
        )?;
        Ok(RunId(self.conn.last_insert_rowid()))
    }

    /// Record a step's start; its index is the next in the run (1-based).
    pub fn begin_step(&mut self, run: RunId) -> Result<StepId> {
        // IMMEDIATE: the index read and the insert must see no other writer in between.
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        require_running_in(&tx, run)?;
        let next: i64 = tx.query_row(
            "SELECT COALESCE(MAX(idx), 0) + 1 FROM steps WHERE run_id = ?1",
            [run.0],
            |r| r.get(0),
        )?;
        tx.execute(
            "INSERT INTO steps (run_id, idx, started_ms) VALUES (?1, ?2, ?3)",
            params![run.0, next, to_i64(now_ms())],
        )?;
        let id = StepId(tx.last_insert_rowid());
        tx.commit()?;
        Ok(id)
    }

    /// Record a step's completion.
    pub fn finish_step(&mut self, step: StepId, end: &StepEnd) -> Result<()> {
        self.guard_opt("steps", "text", end.text.as_deref())?;
        let run = step_run_in(&self.conn, step)?;
        require_running_in(&self.conn, run)?;
        self.conn.execute(
            "UPDATE steps SET ended_ms = ?2, text = ?3, tokens_in = ?4, tokens_out = ?5
             WHERE id = ?1",
            params![
                step.0,
                to_i64(now_ms()),
                end.text,
                to_i64(end.usage.input),
                to_i64(end.usage.output)
            ],
        )?;
        Ok(())
    }

    /// Record one finished (or refused) tool call of `step`.
    pub fn record_tool_call(&mut self, step: StepId, call: &ToolCall) -> Result<i64> {
        self.insert_call(step, None, call, CallStatus::Finished)
            .map(|id| id.0)
    }

    /// Record a call that will not run (refused, or never attempted) together with the policy's
    /// audit record when there is one, in one transaction.
    pub fn record_refused_call(
        &mut self,
        step: StepId,
        audit: Option<&AuditRecord>,
        call: &ToolCall,
    ) -> Result<CallId> {
        self.insert_call(step, audit, call, CallStatus::Finished)
    }

    /// Record several refused calls of `step` in one transaction (a turn past its cap may have
    /// asked for thousands; one fsync, not one each).
    pub fn record_refused_calls(&mut self, step: StepId, calls: &[ToolCall]) -> Result<()> {
        let texts = calls
            .iter()
            .map(|c| self.check_call(c))
            .collect::<Result<Vec<_>>>()?;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let run = step_run_in(&tx, step)?;
        require_running_in(&tx, run)?;
        for (call, text) in calls.iter().zip(&texts) {
            insert_call_row(&tx, run, step, call, text, CallStatus::Finished)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Record a call as `started` — its input, decision and pre-hook results, with the policy's
    /// audit record — before it executes; [`RunStore::finish_call`] adds what it produced. When
    /// this fails the call must not run.
    pub fn start_call(
        &mut self,
        step: StepId,
        audit: Option<&AuditRecord>,
        call: &ToolCall,
    ) -> Result<CallId> {
        self.insert_call(step, audit, call, CallStatus::Started)
    }

    fn insert_call(
        &mut self,
        step: StepId,
        audit: Option<&AuditRecord>,
        call: &ToolCall,
        status: CallStatus,
    ) -> Result<CallId> {
        let text = self.check_call(call)?;
        if let Some(a) = audit {
            self.check_audit(a)?;
        }
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let run = step_run_in(&tx, step)?;
        require_running_in(&tx, run)?;
        if let Some(a) = audit {
            insert_audit(&tx, Some(run), a)?;
        }
        let id = insert_call_row(&tx, run, step, call, &text, status)?;
        tx.commit()?;
        Ok(id)
    }

    /// Record what a started call produced and mark it finished.
    pub fn finish_call(&mut self, id: CallId, end: &CallEnd) -> Result<()> {
        self.guard_opt("tool_calls", "output", end.output.as_deref())?;
        self.guard_opt("tool_calls", "error", end.error.as_deref())?;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let found: Option<(i64, String, String)> = tx
            .query_row(
                "SELECT run_id, status, hook_results FROM tool_calls WHERE id = ?1",
                [id.0],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?;
        let (run, status, hooks) = found.ok_or(StoreError::CallNotFound(id.0))?;
        require_running_in(&tx, RunId(run))?;
        if status != CallStatus::Started.as_str() {
            return Err(StoreError::CallFinished(id.0));
        }
        let mut all: Vec<HookResult> = serde_json::from_str(&hooks)
            .map_err(|e| StoreError::Corrupt(format!("tool_calls.hook_results: {e}")))?;
        all.extend(end.more_hook_results.iter().cloned());
        let hooks = serde_json::to_string(&all).expect("hook results serialize");
        if self.secrets.found_in(&hooks) {
            return Err(StoreError::SecretInRecord {
                table: "tool_calls",
                field: "hook_results",
            });
        }
        tx.execute(
            "UPDATE tool_calls SET output = ?2, error = ?3, duration_ms = ?4, hook_results = ?5,
                 status = 'finished'
             WHERE id = ?1",
            params![id.0, end.output, end.error, to_i64(end.duration_ms), hooks],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Persist a policy audit record, exactly its fields, linked to `run` when there is one.
    pub fn record_audit(&mut self, run: Option<RunId>, rec: &AuditRecord) -> Result<i64> {
        self.check_audit(rec)?;
        if let Some(id) = run {
            self.run_exists(id)?;
        }
        insert_audit(&self.conn, run, rec)
    }

    pub(crate) fn run_exists(&self, id: RunId) -> Result<()> {
        let found: Option<i64> = self
            .conn
            .query_row("SELECT id FROM runs WHERE id = ?1", [id.0], |r| r.get(0))
            .optional()?;
        found.map(|_| ()).ok_or(StoreError::RunNotFound(id))
    }

    /// Record an event of `run` (optionally within `step`).
    pub fn record_event(
        &mut self,
        run: RunId,
        step: Option<StepId>,
        kind: &str,
        data: &serde_json::Value,
    ) -> Result<i64> {
        self.guard("events", "kind", kind)?;
        let text = self.guard_json("events", "data", data)?;
        self.run_exists(run)?;
        self.conn.execute(
            "INSERT INTO events (run_id, step_id, kind, data, recorded_ms)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![run.0, step.map(|s| s.0), kind, text, to_i64(now_ms())],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Close a running run with a final status, its outcome and its total token usage.
    pub fn finish_run(
        &mut self,
        run: RunId,
        status: RunStatus,
        outcome: Option<&str>,
        usage: crate::TokenUsage,
    ) -> Result<()> {
        if status == RunStatus::Running {
            return Err(StoreError::NotTerminal(status));
        }
        self.guard_opt("runs", "outcome", outcome)?;
        let changed = self.conn.execute(
            "UPDATE runs SET status = ?2, outcome = ?3, ended_ms = ?4, tokens_in = ?5,
                 tokens_out = ?6
             WHERE id = ?1 AND status = 'running'",
            params![
                run.0,
                status.as_str(),
                outcome,
                to_i64(now_ms()),
                to_i64(usage.input),
                to_i64(usage.output)
            ],
        )?;
        if changed == 0 {
            // Not running: say whether it is missing or already final.
            require_running_in(&self.conn, run)?;
        }
        Ok(())
    }

    /// Mark every run left `running` by a process that is no longer alive as `interrupted`;
    /// returns how many. Runs of live processes (another `hanzo-dev` on the same org, or this
    /// one) are left alone. Their calls left `started` stay so: they were running.
    pub fn mark_interrupted_runs(&mut self) -> Result<usize> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let orphans: Vec<i64> = {
            let mut stmt = tx.prepare("SELECT id, owner_pid FROM runs WHERE status = 'running'")?;
            let rows = stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))?;
            let mut out = Vec::new();
            for row in rows {
                let (id, pid) = row?;
                if !process_alive(pid) {
                    out.push(id);
                }
            }
            out
        };
        let now = to_i64(now_ms());
        for id in &orphans {
            tx.execute(
                "UPDATE runs SET status = 'interrupted', ended_ms = ?2,
                     outcome = COALESCE(outcome, 'the process running it stopped before the run finished')
                 WHERE id = ?1 AND status = 'running'",
                params![id, now],
            )?;
        }
        tx.commit()?;
        Ok(orphans.len())
    }
}
