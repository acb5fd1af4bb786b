//! Why a store operation failed.

use crate::types::{RunId, RunStatus};
use std::path::PathBuf;

/// Why a store operation failed. Messages never contain a stored value, so they are safe to show.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The org name cannot name a directory safely.
    #[error("invalid org name {org:?}: {why} (allowed: a lowercase letter or digit, then up to 62 of [a-z0-9_-])")]
    InvalidOrg {
        /// The name given.
        org: String,
        /// Which rule it breaks.
        why: &'static str,
    },
    /// The agent name is empty, too long or holds a character names may not.
    #[error("invalid agent name {name:?}: {why}")]
    InvalidAgentName {
        /// The name given.
        name: String,
        /// Which rule it breaks.
        why: &'static str,
    },
    /// The org's directory could not be made.
    #[error("cannot create the store directory {path}: {source}")]
    Io {
        /// The directory.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// The database was written by a newer build; this one will not guess at its schema.
    #[error("{path}: schema version {found} is newer than this build knows ({known}); upgrade hanzo-dev or use another data directory")]
    SchemaTooNew {
        /// The database file.
        path: PathBuf,
        /// Its schema version.
        found: i64,
        /// The newest version this build knows.
        known: i64,
    },
    /// SQLite refused WAL mode, without which durability is not what the crate promises.
    #[error("{path}: could not switch to WAL journaling (got {got:?})")]
    NoWal {
        /// The database file.
        path: PathBuf,
        /// The journal mode SQLite reported instead.
        got: String,
    },
    /// `create_agent` with a name already taken.
    #[error("an agent named {0:?} already exists")]
    AgentExists(String),
    /// No run has this id in this org.
    #[error("no run with id {0}")]
    RunNotFound(RunId),
    /// No session has this id in this org.
    #[error("no session with id {0}")]
    SessionNotFound(crate::types::SessionId),
    /// A summary was asked to cover a run that is not one of the session's turns.
    #[error("run {run} is not a turn of session {session}")]
    RunNotInSession {
        /// The run.
        run: RunId,
        /// The session.
        session: crate::types::SessionId,
    },
    /// No step has this id.
    #[error("no step with id {0}")]
    StepNotFound(i64),
    /// No tool call has this id.
    #[error("no tool call with id {0}")]
    CallNotFound(i64),
    /// A tool call's outcome is written once.
    #[error("tool call {0} is already finished")]
    CallFinished(i64),
    /// A finished run is immutable.
    #[error("run {id} is already {status}; only a running run can be changed")]
    RunNotRunning {
        /// The run.
        id: RunId,
        /// Its status.
        status: RunStatus,
    },
    /// `finish_run` with `running`, which is not an outcome.
    #[error("cannot finish a run as {0}: choose succeeded, failed, cancelled or interrupted")]
    NotTerminal(RunStatus),
    /// A value to be written contains a secret the caller registered; nothing was written.
    #[error("refused to store {table}.{field}: it contains a known secret value")]
    SecretInRecord {
        /// The table.
        table: &'static str,
        /// The column.
        field: &'static str,
    },
    /// A stored row does not decode (a hand-edited or damaged database).
    #[error("stored row is malformed: {0}")]
    Corrupt(String),
    /// Any other SQLite failure.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
}

/// A store operation's result.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
