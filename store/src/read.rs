//! Reading runs back: the list, one header, a whole run (in one read transaction, so a writer
//! cannot show a half-updated run), and the export document.

use crate::error::{Result, StoreError};
use crate::rows::{
    audit_from_row, call_from_row, event_from_row, run_from_row, step_from_row, AUDIT_COLUMNS,
    CALL_COLUMNS, EVENT_COLUMNS, RUN_COLUMNS, STEP_COLUMNS,
};
use crate::types::{EventRecord, RunId, RunRecord, RunSummary, StepRecord};
use crate::RunStore;
use hanzo_policy::AuditRecord;
use rusqlite::{Connection, OptionalExtension};
use serde_json::Value;

fn load_steps(conn: &Connection, run: RunId) -> Result<Vec<StepRecord>> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {STEP_COLUMNS} FROM steps WHERE run_id = ?1 ORDER BY idx"
    ))?;
    let rows = stmt.query_map([run.0], step_from_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Put each of the run's tool calls, in the order they were recorded, under its step.
fn attach_tool_calls(conn: &Connection, run: RunId, steps: &mut [StepRecord]) -> Result<()> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {CALL_COLUMNS} FROM tool_calls WHERE run_id = ?1 ORDER BY id"
    ))?;
    for row in stmt.query_map([run.0], call_from_row)? {
        let (step_id, call) = row??;
        let step = steps
            .iter_mut()
            .find(|s| s.id == step_id)
            .ok_or_else(|| StoreError::Corrupt(format!("tool call {} has no step", call.id)))?;
        step.tool_calls.push(call);
    }
    Ok(())
}

fn load_events(conn: &Connection, run: RunId) -> Result<Vec<EventRecord>> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ?1 ORDER BY id"
    ))?;
    let rows = stmt.query_map([run.0], event_from_row)?;
    rows.map(|r| r?).collect()
}

fn audit_where(
    conn: &Connection,
    cond: &str,
    arg: rusqlite::types::Value,
) -> Result<Vec<AuditRecord>> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {AUDIT_COLUMNS} FROM permission_audit WHERE {cond} ORDER BY id"
    ))?;
    let rows = stmt.query_map([arg], audit_from_row)?;
    rows.map(|r| r?).collect()
}

fn get_run_in(conn: &Connection, id: RunId) -> Result<RunSummary> {
    conn.query_row(
        &format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"),
        [id.0],
        run_from_row,
    )
    .optional()?
    .ok_or(StoreError::RunNotFound(id))?
}

impl RunStore {
    /// The most recent runs, newest first.
    pub fn list_runs(&self, limit: usize) -> Result<Vec<RunSummary>> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {RUN_COLUMNS} FROM runs ORDER BY id DESC LIMIT ?1"
        ))?;
        let rows = stmt.query_map([i64::try_from(limit).unwrap_or(i64::MAX)], run_from_row)?;
        rows.map(|r| r?).collect()
    }

    /// The most recent runs of the agent named `agent`, newest first.
    pub fn list_runs_of_agent(&self, agent: &str, limit: usize) -> Result<Vec<RunSummary>> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE agent = ?1 ORDER BY id DESC LIMIT ?2"
        ))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt.query_map(rusqlite::params![agent, limit], run_from_row)?;
        rows.map(|r| r?).collect()
    }

    /// The run's events recorded after the event row `after` (0: from the first), oldest first,
    /// at most `limit` of them. A run that does not exist is [`StoreError::RunNotFound`].
    pub fn events_after(&self, run: RunId, after: i64, limit: usize) -> Result<Vec<EventRecord>> {
        let tx = self.conn.unchecked_transaction()?;
        get_run_in(&tx, run)?;
        let mut stmt = tx.prepare(&format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3"
        ))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt.query_map(rusqlite::params![run.0, after, limit], event_from_row)?;
        let out = rows.map(|r| r?).collect::<Result<Vec<_>>>()?;
        drop(stmt);
        tx.commit()?;
        Ok(out)
    }

    /// One run's header.
    pub fn get_run(&self, id: RunId) -> Result<RunSummary> {
        get_run_in(&self.conn, id)
    }

    /// Audit records of one session id (the loop uses `run-<id>`), oldest first.
    pub fn audit_for_session(&self, session_id: &str) -> Result<Vec<AuditRecord>> {
        audit_where(
            &self.conn,
            "session_id = ?1",
            rusqlite::types::Value::from(session_id.to_string()),
        )
    }

    /// The whole run: header, steps with their tool calls, audit records and events. Read in one
    /// transaction so a concurrent writer cannot show a half-updated run.
    pub fn load_run(&self, id: RunId) -> Result<RunRecord> {
        let tx = self.conn.unchecked_transaction()?;
        let run = get_run_in(&tx, id)?;
        let mut steps = load_steps(&tx, id)?;
        attach_tool_calls(&tx, id, &mut steps)?;
        let audit = audit_where(&tx, "run_id = ?1", rusqlite::types::Value::from(id.0))?;
        let events = load_events(&tx, id)?;
        tx.commit()?;
        Ok(RunRecord {
            run,
            steps,
            audit,
            events,
        })
    }

    /// The whole run as one JSON document (`hanzo-dev runs export`): `{"format": "hanzo-run",
    /// "version": 1, "run", "steps", "audit", "events"}`.
    pub fn export_run(&self, id: RunId) -> Result<Value> {
        let record = self.load_run(id)?;
        let mut v = serde_json::json!({"format": "hanzo-run", "version": 1});
        let body = serde_json::to_value(&record).expect("a RunRecord serializes");
        if let (Some(obj), Value::Object(fields)) = (v.as_object_mut(), body) {
            obj.extend(fields);
        }
        Ok(v)
    }
}
