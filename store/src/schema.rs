//! The store's schema as an ordered list of migrations. `PRAGMA user_version` records how many
//! have been applied; each migration and its version bump commit together, so a crash mid-upgrade
//! leaves the previous version intact. Append new migrations; never edit a released one.

use crate::{Result, StoreError};
use rusqlite::{Connection, TransactionBehavior};
use std::path::Path;

/// Migration `i` (0-based) takes the file from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    // 1: the initial schema.
    "
    CREATE TABLE agents (
        name          TEXT PRIMARY KEY NOT NULL,
        model         TEXT NOT NULL,
        system_prompt TEXT NOT NULL,
        tools         TEXT NOT NULL,          -- JSON array of tool names
        created_ms    INTEGER NOT NULL
    );
    CREATE TABLE runs (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        agent       TEXT,                     -- name at the time; no FK, runs outlive agents
        input       TEXT NOT NULL,
        model       TEXT NOT NULL,
        isolation   TEXT NOT NULL,
        status      TEXT NOT NULL CHECK (status IN
                        ('running', 'succeeded', 'failed', 'cancelled', 'interrupted')),
        outcome     TEXT,
        started_ms  INTEGER NOT NULL,
        ended_ms    INTEGER,
        tokens_in   INTEGER NOT NULL DEFAULT 0,
        tokens_out  INTEGER NOT NULL DEFAULT 0,
        owner_pid   INTEGER NOT NULL          -- process that began it, to find orphans
    );
    CREATE INDEX runs_status ON runs(status);
    CREATE TABLE steps (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id      INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        idx         INTEGER NOT NULL,
        started_ms  INTEGER NOT NULL,
        ended_ms    INTEGER,
        text        TEXT,
        tokens_in   INTEGER NOT NULL DEFAULT 0,
        tokens_out  INTEGER NOT NULL DEFAULT 0,
        UNIQUE (run_id, idx)
    );
    CREATE TABLE tool_calls (
        id              INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id          INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        step_id         INTEGER NOT NULL REFERENCES steps(id) ON DELETE CASCADE,
        tool_use_id     TEXT,
        name            TEXT NOT NULL,
        input           TEXT NOT NULL,        -- JSON
        permission      TEXT NOT NULL CHECK (permission IN ('allow', 'deny', 'prompt')),
        rule            TEXT,                 -- JSON RuleRef, NULL = policy default
        allowed         INTEGER NOT NULL,
        decision_reason TEXT NOT NULL,
        hook_results    TEXT NOT NULL,        -- JSON
        output          TEXT,
        error           TEXT,
        duration_ms     INTEGER NOT NULL,
        recorded_ms     INTEGER NOT NULL
    );
    CREATE INDEX tool_calls_run ON tool_calls(run_id);
    CREATE TABLE permission_audit (
        id            INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id        INTEGER REFERENCES runs(id) ON DELETE CASCADE,
        timestamp_ms  INTEGER NOT NULL,
        session_id    TEXT NOT NULL,
        tool_name     TEXT NOT NULL,
        input_digest  TEXT NOT NULL,
        mode          TEXT NOT NULL CHECK (mode IN ('allow', 'deny', 'prompt')),
        rule_tier     TEXT CHECK (rule_tier IN ('user', 'project', 'local')),
        rule_index    INTEGER,
        rule_pattern  TEXT,
        reason        TEXT NOT NULL
    );
    CREATE INDEX permission_audit_run ON permission_audit(run_id);
    CREATE INDEX permission_audit_session ON permission_audit(session_id);
    CREATE TABLE events (
        id           INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id       INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        step_id      INTEGER REFERENCES steps(id) ON DELETE CASCADE,
        kind         TEXT NOT NULL,
        data         TEXT NOT NULL,           -- JSON
        recorded_ms  INTEGER NOT NULL
    );
    CREATE INDEX events_run ON events(run_id);
    ",
    // 2: tool calls are recorded as started before they execute, and say who decided.
    // `decided_by` of older rows is derived from what they hold (a denying pre-hook; a prompt
    // answered by the run's approval mode; a rule; the agent's tool list; else the default).
    "
    ALTER TABLE tool_calls ADD COLUMN status TEXT NOT NULL DEFAULT 'finished'
        CHECK (status IN ('started', 'finished'));
    ALTER TABLE tool_calls ADD COLUMN decided_by TEXT;
    UPDATE tool_calls SET decided_by = CASE
        WHEN json_valid(hook_results)
             AND json_extract(hook_results, '$[0].phase') = 'pre'
             AND json_extract(hook_results, '$[0].allowed') = 0 THEN 'hook'
        WHEN decision_reason = 'the run stopped before this call' THEN 'not_run'
        WHEN permission = 'prompt' THEN 'approval:' || COALESCE(
             (SELECT json_extract(e.data, '$.approval') FROM events e
              WHERE e.run_id = tool_calls.run_id AND e.kind = 'run_config'
                    AND json_valid(e.data) LIMIT 1), 'prompt')
        WHEN rule IS NOT NULL THEN 'rule'
        WHEN decision_reason LIKE 'the % agent has no tool named %'
             OR decision_reason LIKE '% is an MCP tool, %' THEN 'agent'
        ELSE 'default' END;
    ",
    // 3: sessions (HIP-1210): an interactive conversation whose turns are runs. A run outlives
    // its session's deletion (the link is cleared, the run kept).
    "
    CREATE TABLE sessions (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        agent       TEXT NOT NULL,
        workspace   TEXT NOT NULL,
        title       TEXT,
        created_ms  INTEGER NOT NULL,
        updated_ms  INTEGER NOT NULL
    );
    CREATE INDEX sessions_workspace ON sessions(workspace, updated_ms);
    ALTER TABLE runs ADD COLUMN session_id INTEGER REFERENCES sessions(id) ON DELETE SET NULL;
    CREATE INDEX runs_session ON runs(session_id);
    ",
    // 4: a session's conversation compacted on demand (`/compact`): the summary and the last
    // turn it covers; later turns start from the newest summary. `through_run` is an id, not a
    // link: run ids only grow, so "the turns after it" stays right if that run is deleted.
    "
    CREATE TABLE session_summaries (
        id             INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id     INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        through_run    INTEGER NOT NULL,
        summary        TEXT NOT NULL,
        turns          INTEGER NOT NULL,
        tokens_before  INTEGER NOT NULL,
        tokens_after   INTEGER NOT NULL,
        created_ms     INTEGER NOT NULL
    );
    CREATE INDEX session_summaries_session ON session_summaries(session_id, id);
    ",
    // 5: the settings layer a rule came from is its scope (issue 11: "tier" names only the
    // isolation tier). RENAME COLUMN keeps every row and rewrites the column's CHECK with it.
    "
    ALTER TABLE permission_audit RENAME COLUMN rule_tier TO rule_scope;
    ",
    // 6: an `mcp__*` call's server, the server's tool name, the classification of its answer
    // (HAAP README: allowed / policy denial / downstream fault; `failed`: no answer) and the
    // reason, as fields. Older rows have none (their classification is only in `error`).
    "
    ALTER TABLE tool_calls ADD COLUMN mcp_server TEXT;
    ALTER TABLE tool_calls ADD COLUMN mcp_tool TEXT;
    ALTER TABLE tool_calls ADD COLUMN mcp_classification TEXT
        CHECK (mcp_classification IN ('allowed', 'denied', 'fault', 'failed'));
    ALTER TABLE tool_calls ADD COLUMN mcp_reason TEXT;
    ",
];

/// The schema version this build writes.
#[allow(
    clippy::cast_possible_wrap,
    reason = "a const of a few migrations (`try_from` is not const); far below i64::MAX"
)]
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

fn user_version(conn: &Connection) -> Result<i64> {
    Ok(conn.pragma_query_value(None, "user_version", |r| r.get(0))?)
}

/// Refuse a file from a newer build before changing anything in it (even its journal mode).
pub(crate) fn check_not_newer(conn: &Connection, path: &Path) -> Result<()> {
    let found = user_version(conn)?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew {
            path: path.to_path_buf(),
            found,
            known: SCHEMA_VERSION,
        });
    }
    Ok(())
}

/// Apply every migration the file lacks, each in its own transaction with its version bump.
pub(crate) fn migrate(conn: &mut Connection, path: &Path) -> Result<()> {
    // An up-to-date file (every open but the first) needs no write lock at all.
    if user_version(conn)? == SCHEMA_VERSION {
        return Ok(());
    }
    loop {
        // IMMEDIATE, and the version re-read inside: two processes opening a fresh file at once
        // must not both apply the same migration.
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let current = user_version(&tx)?;
        if current > SCHEMA_VERSION {
            return Err(StoreError::SchemaTooNew {
                path: path.to_path_buf(),
                found: current,
                known: SCHEMA_VERSION,
            });
        }
        let Some(sql) = usize::try_from(current)
            .ok()
            .and_then(|i| MIGRATIONS.get(i))
        else {
            return Ok(());
        };
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", current + 1)?;
        tx.commit()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::params;

    /// `conn` brought to schema `version` as the build of that version left it: its migrations
    /// applied, and its `user_version`.
    fn at_version(conn: &Connection, version: usize) {
        for m in &MIGRATIONS[..version] {
            conn.execute_batch(m).expect("migration");
        }
        conn.pragma_update(None, "user_version", version)
            .expect("version");
    }

    /// A version-2 file with a run, migrated: the run is kept with no session, and a session
    /// can then be created and given runs.
    #[test]
    fn version_3_adds_sessions_and_keeps_older_runs_without_one() {
        let mut conn = Connection::open_in_memory().expect("open");
        conn.pragma_update(None, "foreign_keys", "ON").expect("fk");
        at_version(&conn, 2);
        conn.execute_batch(
            "INSERT INTO runs (id, input, model, isolation, status, started_ms, owner_pid)
                 VALUES (7, 'old task', 'm', 'B', 'succeeded', 0, 1);",
        )
        .expect("rows");
        migrate(&mut conn, Path::new(":memory:")).expect("migrate");
        assert_eq!(user_version(&conn).expect("version"), SCHEMA_VERSION);
        let (input, session): (String, Option<i64>) = conn
            .query_row("SELECT input, session_id FROM runs WHERE id = 7", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .expect("run kept");
        assert_eq!((input.as_str(), session), ("old task", None));
        conn.execute_batch(
            "INSERT INTO sessions (id, agent, workspace, created_ms, updated_ms)
                 VALUES (1, 'code', '/w', 0, 0);
             UPDATE runs SET session_id = 1 WHERE id = 7;",
        )
        .expect("a session and a link");
        // The link is a foreign key: a run cannot name a session that does not exist.
        let bad = conn.execute("UPDATE runs SET session_id = 99 WHERE id = 7", []);
        assert!(bad.is_err(), "dangling session link accepted");
        // Deleting the session keeps its runs, unlinked.
        conn.execute("DELETE FROM sessions WHERE id = 1", [])
            .expect("delete");
        let session: Option<i64> = conn
            .query_row("SELECT session_id FROM runs WHERE id = 7", [], |r| r.get(0))
            .expect("run still there");
        assert_eq!(session, None);
    }

    /// A version-3 file with a session and its turns, migrated: the turns are kept, the session
    /// has no summary, and a summary row is tied to its session.
    #[test]
    fn version_4_adds_session_summaries_to_existing_sessions() {
        let mut conn = Connection::open_in_memory().expect("open");
        conn.pragma_update(None, "foreign_keys", "ON").expect("fk");
        at_version(&conn, 3);
        conn.execute_batch(
            "INSERT INTO sessions (id, agent, workspace, created_ms, updated_ms)
                 VALUES (1, 'code', '/w', 0, 0);
             INSERT INTO runs (id, input, model, isolation, status, started_ms, owner_pid,
                 session_id)
                 VALUES (5, 'turn', 'm', 'B', 'succeeded', 0, 1, 1);",
        )
        .expect("rows");
        migrate(&mut conn, Path::new(":memory:")).expect("migrate");
        assert_eq!(user_version(&conn).expect("version"), SCHEMA_VERSION);
        let none: i64 = conn
            .query_row("SELECT COUNT(*) FROM session_summaries", [], |r| r.get(0))
            .expect("table");
        assert_eq!(none, 0);
        conn.execute_batch(
            "INSERT INTO session_summaries (session_id, through_run, summary, turns,
                 tokens_before, tokens_after, created_ms) VALUES (1, 5, 's', 1, 10, 2, 0);",
        )
        .expect("a summary");
        let bad = conn.execute(
            "INSERT INTO session_summaries (session_id, through_run, summary, turns,
                 tokens_before, tokens_after, created_ms) VALUES (9, 5, 's', 1, 10, 2, 0)",
            [],
        );
        assert!(bad.is_err(), "a summary of a missing session accepted");
        let input: String = conn
            .query_row("SELECT input FROM runs WHERE id = 5", [], |r| r.get(0))
            .expect("the turn kept");
        assert_eq!(input, "turn");
    }

    /// A version-4 file's tool call, migrated (through version 5's rename): kept, with no MCP
    /// fields; the classification column takes only the four classifications.
    #[test]
    fn version_6_adds_mcp_fields_to_tool_calls() {
        let mut conn = Connection::open_in_memory().expect("open");
        at_version(&conn, 4);
        conn.execute_batch(
            "INSERT INTO runs (id, input, model, isolation, status, started_ms, owner_pid)
                 VALUES (1, 'task', 'm', 'B', 'succeeded', 0, 1);
             INSERT INTO steps (id, run_id, idx, started_ms) VALUES (1, 1, 1, 0);
             INSERT INTO tool_calls (id, run_id, step_id, name, input, permission, allowed,
                 decision_reason, hook_results, error, duration_ms, recorded_ms)
                 VALUES (1, 1, 1, 'mcp__s__t', '{}', 'allow', 1, 'r', '[]',
                     'MCP policy denial from server s (tool t): no', 3, 0);",
        )
        .expect("rows");
        migrate(&mut conn, Path::new(":memory:")).expect("migrate");
        assert_eq!(user_version(&conn).expect("version"), SCHEMA_VERSION);
        let (server, class, error): (Option<String>, Option<String>, String) = conn
            .query_row(
                "SELECT mcp_server, mcp_classification, error FROM tool_calls WHERE id = 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .expect("row");
        assert_eq!((server, class), (None, None));
        assert!(error.starts_with("MCP policy denial"));
        for (value, ok) in [("denied", true), ("fault", true), ("maybe", false)] {
            let r = conn.execute(
                "UPDATE tool_calls SET mcp_classification = ?1 WHERE id = 1",
                [value],
            );
            assert_eq!(r.is_ok(), ok, "{value}");
        }
    }

    /// A version-4 file on disk, written as the previous build wrote it (audit rows with
    /// `rule_tier` from each scope, from an unscoped list and from the default; a tool call whose
    /// `rule` JSON says `"tier"`), opened by this build: the rows are kept and read back with
    /// their scopes, and the renamed column still refuses a value that is no scope.
    #[test]
    fn version_5_renames_rule_tier_to_rule_scope_and_old_rows_keep_their_scope() {
        use crate::{RunId, RunStore};
        use hanzo_policy::Scope;
        let dir = tempfile::tempdir().expect("dir");
        let path = crate::store_path(dir.path(), "default").expect("path");
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        {
            let conn = Connection::open(&path).expect("open v4");
            at_version(&conn, 4);
            conn.execute_batch(
                "INSERT INTO runs (id, input, model, isolation, status, started_ms, owner_pid)
                     VALUES (3, 'old run', 'm', 'B', 'succeeded', 0, 1);
                 INSERT INTO steps (id, run_id, idx, started_ms) VALUES (1, 3, 1, 0);
                 INSERT INTO tool_calls (run_id, step_id, name, input, permission, rule,
                     allowed, decision_reason, hook_results, duration_ms, recorded_ms,
                     decided_by)
                     VALUES (3, 1, 'bash', '{}', 'prompt',
                         '{\"tier\":\"local\",\"index\":0,\"pattern\":\"bash\"}',
                         0, 'prompt by rule', '[]', 0, 0, 'rule');
                 INSERT INTO permission_audit (run_id, timestamp_ms, session_id, tool_name,
                     input_digest, mode, rule_tier, rule_index, rule_pattern, reason) VALUES
                     (3, 1, 's', 'bash', 'sha256:0', 'deny', 'project', 2, 'bash(curl *)', 'a'),
                     (3, 2, 's', 'read_file', 'sha256:0', 'allow', 'user', 0, 'read_file', 'b'),
                     (3, 3, 's', 'bash', 'sha256:0', 'prompt', 'local', 0, 'bash', 'c'),
                     (3, 4, 's', 'x', 'sha256:0', 'allow', NULL, 1, 'x', 'd'),
                     (3, 5, 's', 'y', 'sha256:0', 'prompt', NULL, NULL, NULL, 'e');",
            )
            .expect("old rows");
        }
        let store = RunStore::open(dir.path(), "default").expect("this build opens it");
        assert_eq!(store.schema_version().expect("version"), SCHEMA_VERSION);
        let rec = store.load_run(RunId(3)).expect("the old run");
        let scopes: Vec<(Option<Scope>, Option<usize>, String)> = rec
            .audit
            .iter()
            .map(|a| {
                (
                    a.rule_matched.as_ref().and_then(|r| r.scope),
                    a.rule_matched.as_ref().map(|r| r.index),
                    a.reason.clone(),
                )
            })
            .collect();
        assert_eq!(
            scopes,
            vec![
                (Some(Scope::Project), Some(2), "a".to_string()),
                (Some(Scope::User), Some(0), "b".to_string()),
                (Some(Scope::Local), Some(0), "c".to_string()),
                (None, Some(1), "d".to_string()),
                (None, None, "e".to_string()),
            ]
        );
        let call = &rec.steps[0].tool_calls[0].call;
        assert_eq!(call.rule.as_ref().and_then(|r| r.scope), Some(Scope::Local));
        drop(store);
        let conn = Connection::open(&path).expect("reopen");
        let columns: Vec<String> = conn
            .prepare("SELECT name FROM pragma_table_info('permission_audit')")
            .expect("prepare")
            .query_map([], |r| r.get(0))
            .expect("query")
            .collect::<rusqlite::Result<_>>()
            .expect("names");
        assert!(columns.iter().any(|c| c == "rule_scope"), "{columns:?}");
        assert!(!columns.iter().any(|c| c == "rule_tier"), "{columns:?}");
        let bad = conn.execute(
            "INSERT INTO permission_audit (timestamp_ms, session_id, tool_name, input_digest,
                 mode, rule_scope, reason) VALUES (0, 's', 't', 'd', 'deny', 'A', 'r')",
            [],
        );
        assert!(bad.is_err(), "an isolation tier accepted as a scope");
    }

    /// A version-1 file with one tool call of each kind, migrated: each gets the right
    /// `decided_by`, and every call is `finished`.
    #[test]
    fn version_2_derives_who_decided_for_older_calls() {
        let mut conn = Connection::open_in_memory().expect("open");
        at_version(&conn, 1);
        conn.execute_batch(
            "INSERT INTO runs (id, input, model, isolation, status, started_ms, owner_pid)
                 VALUES (1, 'task', 'm', 'B', 'succeeded', 0, 1);
             INSERT INTO steps (id, run_id, idx, started_ms) VALUES (1, 1, 1, 0);
             INSERT INTO events (run_id, kind, data, recorded_ms)
                 VALUES (1, 'run_config', '{\"approval\":\"allow-listed\"}', 0);",
        )
        .expect("rows");
        let calls = [
            (
                "allow",
                Some("{}"),
                r#"[{"phase":"pre","allowed":false,"failed":false}]"#,
                "x",
                "hook",
            ),
            ("prompt", None, "[]", "approved", "approval:allow-listed"),
            ("allow", Some("{}"), "[]", "allowed by rule", "rule"),
            (
                "deny",
                None,
                "[]",
                "the code agent has no tool named \"x\" (its tools: none)",
                "agent",
            ),
            (
                "deny",
                None,
                "[]",
                "the run stopped before this call",
                "not_run",
            ),
            ("allow", None, "not json", "no rule matched", "default"),
        ];
        for (i, (perm, rule, hooks, reason, _)) in calls.iter().enumerate() {
            conn.execute(
                "INSERT INTO tool_calls (id, run_id, step_id, name, input, permission, rule,
                     allowed, decision_reason, hook_results, duration_ms, recorded_ms)
                 VALUES (?1, 1, 1, 'bash', '{}', ?2, ?3, 1, ?4, ?5, 0, 0)",
                params![i64::try_from(i + 1).expect("id"), perm, rule, reason, hooks],
            )
            .expect("call");
        }
        migrate(&mut conn, Path::new(":memory:")).expect("migrate");
        assert_eq!(user_version(&conn).expect("version"), SCHEMA_VERSION);
        for (i, (.., want)) in calls.iter().enumerate() {
            let (got, status): (String, String) = conn
                .query_row(
                    "SELECT decided_by, status FROM tool_calls WHERE id = ?1",
                    [i64::try_from(i + 1).expect("id")],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .expect("row");
            assert_eq!(&got, want, "call {}", i + 1);
            assert_eq!(status, "finished");
        }
    }
}
