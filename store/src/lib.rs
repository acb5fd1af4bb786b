//! `hanzo-store` keeps agent definitions and every run — steps, tool calls, permission decisions,
//! events and outcome — in one SQLite file per org, `{data_dir}/orgs/{org}/agents.db` (HIP-1210).
//!
//! Durability: every write is its own transaction, committed before the call returns, in WAL mode
//! with `synchronous = FULL`. WAL + `NORMAL` would already survive a `kill -9` of the writer (a
//! committed transaction is in the WAL in the OS page cache); `FULL` also fsyncs the WAL at each
//! commit so a power loss cannot drop a recorded permission decision either. The price, one fsync
//! per write and a handful of writes per step, is small next to a model call. So a crash loses at
//! most the step in progress, and [`RunStore::mark_interrupted_runs`] closes the runs it orphaned.
//! A tool call is recorded as `started` (with its decision) before it executes and `finished`
//! after, so a call that was running when the process died is on record as such.
//!
//! Nothing secret is stored: every string written is checked against the caller's list of known
//! secret values ([`RunStore::set_known_secrets`]) and the write is refused if one appears.
//!
//! Layout: [`types`] (what is stored), `rows` (rows to types), `schema` (migrations), and the
//! queries by subject: `agents`, `write` (a run's life), `read` (listing and loading runs),
//! `sessions` (conversations whose turns are runs), `summaries` (their compactions).
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod agents;
mod error;
mod read;
mod rows;
mod schema;
mod sessions;
mod summaries;
pub mod types;
mod write;

pub use error::{Result, StoreError};
pub use hanzo_policy::secret::{SecretValues, REDACTED};
pub use schema::SCHEMA_VERSION;
pub use sessions::{title_from, TITLE_MAX_CHARS};
pub use types::{
    Agent, AgentDef, ApprovalMode, CallEnd, CallId, CallStatus, DecidedBy, EventRecord, HookResult,
    McpCallInfo, McpClassification, NewRun, NewSession, NewSessionSummary, RunId, RunRecord,
    RunStatus, RunSummary, Session, SessionContext, SessionId, SessionSummary, SessionTurn,
    StepEnd, StepId, StepRecord, TokenUsage, ToolCall, ToolCallRecord,
};

use rusqlite::Connection;
use serde_json::Value;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The org used when neither `--org` nor the settings name one.
pub const DEFAULT_ORG: &str = "local";

/// How long a write waits for another connection's write lock before failing. Writes are tiny, so
/// only a stuck process holds the lock this long.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Check an org name: it becomes a directory name, so it must never escape `orgs/`.
pub fn validate_org(org: &str) -> Result<()> {
    let bad = |why| {
        Err(StoreError::InvalidOrg {
            org: org.to_string(),
            why,
        })
    };
    let bytes = org.as_bytes();
    let Some(first) = bytes.first() else {
        return bad("it is empty");
    };
    if bytes.len() > 63 {
        return bad("it is longer than 63 characters");
    }
    if !(first.is_ascii_lowercase() || first.is_ascii_digit()) {
        return bad("it must start with a lowercase letter or a digit");
    }
    if !bytes
        .iter()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_' || *b == b'-')
    {
        return bad("it contains a character outside [a-z0-9_-]");
    }
    Ok(())
}

/// The path of an org's store file under `data_dir`.
pub fn store_path(data_dir: &Path, org: &str) -> Result<PathBuf> {
    validate_org(org)?;
    Ok(data_dir.join("orgs").join(org).join("agents.db"))
}

/// One org's run store. A `RunStore` is one SQLite connection: give each thread its own (WAL lets
/// readers run while one writer writes).
pub struct RunStore {
    conn: Connection,
    path: PathBuf,
    secrets: SecretValues,
}

impl fmt::Debug for RunStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The secret list is deliberately not printed.
        f.debug_struct("RunStore")
            .field("path", &self.path)
            .field("known_secrets", &self.secrets.len())
            .finish()
    }
}

impl RunStore {
    /// Open (creating if needed) `{data_dir}/orgs/{org}/agents.db`, switch it to WAL and bring its
    /// schema up to date. A file written by a newer build is refused, never touched.
    pub fn open(data_dir: &Path, org: &str) -> Result<RunStore> {
        let path = store_path(data_dir, org)?;
        let dir = path.parent().expect("store_path always has a parent");
        create_private_dir(dir)?;
        let mut conn = Connection::open(&path)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        schema::check_not_newer(&conn, &path)?;
        let mode: String =
            conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::NoWal { path, got: mode });
        }
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        schema::migrate(&mut conn, &path)?;
        Ok(RunStore {
            conn,
            path,
            secrets: SecretValues::default(),
        })
    }

    /// The file this store writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema version of the open file.
    pub fn schema_version(&self) -> Result<i64> {
        Ok(self
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))?)
    }

    /// Values that must never be written (e.g. the broker's credentials, or a canary). Values
    /// shorter than [`hanzo_policy::secret::MIN_SECRET_LEN`] are ignored. Replaces any earlier list.
    pub fn set_known_secrets<I, S>(&mut self, secrets: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.secrets = SecretValues::new(secrets);
    }

    /// As [`RunStore::set_known_secrets`], from an already built set.
    pub fn set_secret_values(&mut self, secrets: SecretValues) {
        self.secrets = secrets;
    }

    fn guard(&self, table: &'static str, field: &'static str, text: &str) -> Result<()> {
        if self.secrets.found_in(text) {
            return Err(StoreError::SecretInRecord { table, field });
        }
        Ok(())
    }

    fn guard_opt(
        &self,
        table: &'static str,
        field: &'static str,
        text: Option<&str>,
    ) -> Result<()> {
        text.map_or(Ok(()), |t| self.guard(table, field, t))
    }

    /// Check a JSON value and return its compact text.
    fn guard_json(
        &self,
        table: &'static str,
        field: &'static str,
        value: &Value,
    ) -> Result<String> {
        if self.secrets.found_in_json(value) {
            return Err(StoreError::SecretInRecord { table, field });
        }
        Ok(serde_json::to_string(value).expect("a serde_json::Value always serializes"))
    }
}

/// Create the org directory; on Unix only the owner may enter it, since runs hold task inputs
/// and tool outputs.
fn create_private_dir(dir: &Path) -> Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(dir).map_err(|source| StoreError::Io {
        path: dir.to_path_buf(),
        source,
    })
}
