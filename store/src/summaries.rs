//! Session summaries: a conversation compacted on demand (`/compact` in `hanzo-dev chat`). A
//! summary covers a session's turns up to a run; the next turn starts from the newest summary
//! and the turns after it ([`RunStore::session_context`]), and the turns themselves stay on
//! record untouched.

use crate::error::{Result, StoreError};
use crate::rows::{now_ms, to_i64, to_u64};
use crate::sessions::turns_after;
use crate::types::{NewSessionSummary, RunId, SessionContext, SessionId, SessionSummary};
use crate::RunStore;
use rusqlite::{params, OptionalExtension, Row, TransactionBehavior};

const SUMMARY_COLUMNS: &str =
    "id, session_id, through_run, summary, turns, tokens_before, tokens_after, created_ms";

fn summary_from_row(r: &Row<'_>) -> rusqlite::Result<SessionSummary> {
    Ok(SessionSummary {
        id: r.get(0)?,
        session: SessionId(r.get(1)?),
        through_run: RunId(r.get(2)?),
        summary: r.get(3)?,
        turns: u32::try_from(r.get::<_, i64>(4)?).unwrap_or(0),
        tokens_before: to_u64(r.get(5)?),
        tokens_after: to_u64(r.get(6)?),
        created_ms: to_u64(r.get(7)?),
    })
}

fn latest(tx: &rusqlite::Transaction<'_>, session: SessionId) -> Result<Option<SessionSummary>> {
    Ok(tx
        .query_row(
            &format!(
                "SELECT {SUMMARY_COLUMNS} FROM session_summaries WHERE session_id = ?1
                 ORDER BY id DESC LIMIT 1"
            ),
            [session.0],
            summary_from_row,
        )
        .optional()?)
}

impl RunStore {
    /// Record a summary of `new.session` up to `new.through_run`, which must be one of its
    /// turns and not older than the newest summary's. Refused when the summary holds a known
    /// secret value.
    pub fn record_session_summary(&mut self, new: &NewSessionSummary) -> Result<SessionSummary> {
        self.guard("session_summaries", "summary", &new.summary)?;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let owner: Option<Option<i64>> = tx
            .query_row(
                "SELECT session_id FROM runs WHERE id = ?1",
                [new.through_run.0],
                |r| r.get(0),
            )
            .optional()?;
        match owner {
            None => return Err(StoreError::RunNotFound(new.through_run)),
            Some(s) if s != Some(new.session.0) => {
                return Err(StoreError::RunNotInSession {
                    run: new.through_run,
                    session: new.session,
                })
            }
            Some(_) => {}
        }
        if let Some(prev) = latest(&tx, new.session)? {
            if prev.through_run.0 > new.through_run.0 {
                return Err(StoreError::Corrupt(format!(
                    "a summary through run {} is older than the newest one (through run {})",
                    new.through_run, prev.through_run
                )));
            }
        }
        let now = now_ms();
        tx.execute(
            "INSERT INTO session_summaries (session_id, through_run, summary, turns,
                 tokens_before, tokens_after, created_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                new.session.0,
                new.through_run.0,
                new.summary,
                i64::from(new.turns),
                to_i64(new.tokens_before),
                to_i64(new.tokens_after),
                to_i64(now)
            ],
        )?;
        let id = tx.last_insert_rowid();
        tx.commit()?;
        Ok(SessionSummary {
            id,
            session: new.session,
            through_run: new.through_run,
            summary: new.summary.clone(),
            turns: new.turns,
            tokens_before: new.tokens_before,
            tokens_after: new.tokens_after,
            created_ms: now,
        })
    }

    /// A session's summaries, oldest first.
    pub fn session_summaries(&self, session: SessionId) -> Result<Vec<SessionSummary>> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {SUMMARY_COLUMNS} FROM session_summaries WHERE session_id = ?1 ORDER BY id"
        ))?;
        let rows = stmt.query_map([session.0], summary_from_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Where the session's next turn starts: its newest summary and the turns after it (every
    /// turn when it has none), read in one transaction.
    pub fn session_context(&self, session: SessionId) -> Result<SessionContext> {
        let tx = self.conn.unchecked_transaction()?;
        let summary = latest(&tx, session)?;
        let turns = turns_after(&tx, session, summary.as_ref().map(|s| s.through_run))?;
        tx.commit()?;
        Ok(SessionContext { summary, turns })
    }
}
