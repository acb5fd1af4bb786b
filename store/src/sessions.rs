//! Sessions: interactive conversations whose turns are runs (`hanzo-dev chat`). A session row
//! holds who and where; its turns are the runs that name it (`runs.session_id`), so everything a
//! run records — steps, calls, decisions — is the session's record too, and
//! [`RunStore::session_turns`] reads back what a resumed session needs to continue.

use crate::error::{Result, StoreError};
use crate::rows::{now_ms, run_from_row, to_i64, to_u64, RUN_COLUMNS};
use crate::types::{NewRun, NewSession, RunId, RunSummary, Session, SessionId, SessionTurn};
use crate::RunStore;
use rusqlite::{params, OptionalExtension, Row, TransactionBehavior};

const SESSION_COLUMNS: &str = "id, agent, workspace, title, created_ms, updated_ms";

/// Titles are for a list on one line: the first line, at most this many characters.
pub const TITLE_MAX_CHARS: usize = 80;

fn session_from_row(r: &Row<'_>) -> rusqlite::Result<Session> {
    Ok(Session {
        id: SessionId(r.get(0)?),
        agent: r.get(1)?,
        workspace: r.get(2)?,
        title: r.get(3)?,
        created_ms: to_u64(r.get(4)?),
        updated_ms: to_u64(r.get(5)?),
    })
}

/// A title from a message: its first non-blank line, trimmed and cut to [`TITLE_MAX_CHARS`].
pub fn title_from(text: &str) -> Option<String> {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    Some(line.chars().take(TITLE_MAX_CHARS).collect())
}

impl RunStore {
    /// Record a new session.
    pub fn create_session(&mut self, new: &NewSession) -> Result<Session> {
        self.guard("sessions", "agent", &new.agent)?;
        self.guard("sessions", "workspace", &new.workspace)?;
        self.guard_opt("sessions", "title", new.title.as_deref())?;
        let now = now_ms();
        self.conn.execute(
            "INSERT INTO sessions (agent, workspace, title, created_ms, updated_ms)
             VALUES (?1, ?2, ?3, ?4, ?4)",
            params![new.agent, new.workspace, new.title, to_i64(now)],
        )?;
        Ok(Session {
            id: SessionId(self.conn.last_insert_rowid()),
            agent: new.agent.clone(),
            workspace: new.workspace.clone(),
            title: new.title.clone(),
            created_ms: now,
            updated_ms: now,
        })
    }

    /// One session.
    pub fn get_session(&self, id: SessionId) -> Result<Session> {
        self.conn
            .query_row(
                &format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?1"),
                [id.0],
                session_from_row,
            )
            .optional()?
            .ok_or(StoreError::SessionNotFound(id))
    }

    /// The most recently used sessions, newest first; only those of `workspace` when given.
    pub fn list_sessions(&self, workspace: Option<&str>, limit: usize) -> Result<Vec<Session>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {SESSION_COLUMNS} FROM sessions
             WHERE ?1 IS NULL OR workspace = ?1
             ORDER BY updated_ms DESC, id DESC LIMIT ?2"
        ))?;
        let rows = stmt.query_map(params![workspace, limit], session_from_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Set a session's title (the first message, usually).
    pub fn set_session_title(&mut self, id: SessionId, title: &str) -> Result<()> {
        self.guard("sessions", "title", title)?;
        let changed = self.conn.execute(
            "UPDATE sessions SET title = ?2 WHERE id = ?1",
            params![id.0, title],
        )?;
        if changed == 0 {
            return Err(StoreError::SessionNotFound(id));
        }
        Ok(())
    }

    /// Record a run's start as the next turn of `session` (as [`RunStore::begin_run`], with the
    /// link, and the session's `updated_ms` moved on, in one transaction).
    pub fn begin_session_run(&mut self, session: SessionId, run: &NewRun) -> Result<RunId> {
        self.guard_opt("runs", "agent", run.agent.as_deref())?;
        self.guard("runs", "input", &run.input)?;
        self.guard("runs", "model", &run.model)?;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = to_i64(now_ms());
        let changed = tx.execute(
            "UPDATE sessions SET updated_ms = MAX(updated_ms, ?2) WHERE id = ?1",
            params![session.0, now],
        )?;
        if changed == 0 {
            return Err(StoreError::SessionNotFound(session));
        }
        tx.execute(
            "INSERT INTO runs (agent, input, model, isolation, status, started_ms, owner_pid,
                 session_id)
             VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?6, ?7)",
            params![
                run.agent,
                run.input,
                run.model,
                run.isolation.as_str(),
                now,
                i64::from(std::process::id()),
                session.0
            ],
        )?;
        let id = RunId(tx.last_insert_rowid());
        tx.commit()?;
        Ok(id)
    }

    /// The session a run belongs to, if any.
    pub fn run_session(&self, run: RunId) -> Result<Option<SessionId>> {
        let found: Option<Option<i64>> = self
            .conn
            .query_row("SELECT session_id FROM runs WHERE id = ?1", [run.0], |r| {
                r.get(0)
            })
            .optional()?;
        found
            .map(|s| s.map(SessionId))
            .ok_or(StoreError::RunNotFound(run))
    }

    /// A session's runs (its turns), oldest first.
    pub fn list_session_runs(&self, session: SessionId) -> Result<Vec<RunSummary>> {
        self.get_session(session)?;
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE session_id = ?1 ORDER BY id"
        ))?;
        let rows = stmt.query_map([session.0], run_from_row)?;
        rows.map(|r| r?).collect()
    }

    /// A session's conversation so far, oldest turn first: each run's input and the text of
    /// its last step. Read in one transaction, so a turn being written is seen whole or not at
    /// all.
    pub fn session_turns(&self, session: SessionId) -> Result<Vec<SessionTurn>> {
        let tx = self.conn.unchecked_transaction()?;
        let turns = turns_after(&tx, session, None)?;
        tx.commit()?;
        Ok(turns)
    }
}

/// The turns of `session` after the run `after` (all of them when `None`), oldest first.
pub(crate) fn turns_after(
    tx: &rusqlite::Transaction<'_>,
    session: SessionId,
    after: Option<RunId>,
) -> Result<Vec<SessionTurn>> {
    let runs = {
        let mut stmt = tx.prepare(&format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE session_id = ?1 AND id > ?2 ORDER BY id"
        ))?;
        let rows = stmt.query_map(params![session.0, after.map_or(0, |r| r.0)], run_from_row)?;
        rows.map(|r| r?).collect::<Result<Vec<RunSummary>>>()?
    };
    let mut turns = Vec::with_capacity(runs.len());
    for run in runs {
        let answer: Option<String> = tx
            .query_row(
                "SELECT text FROM steps WHERE run_id = ?1 ORDER BY idx DESC LIMIT 1",
                [run.id.0],
                |r| r.get(0),
            )
            .optional()?
            .flatten()
            .filter(|t: &String| !t.trim().is_empty());
        turns.push(SessionTurn {
            run: run.id,
            status: run.status,
            user: run.input,
            answer,
        });
    }
    Ok(turns)
}
