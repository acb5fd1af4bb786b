//! Why a store operation failed.

use crate::types::{RunId, RunStatus};
use std::path::PathBuf;

/// Why a store operation failed. Messages never contain a stored value, so they are safe to show.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("invalid org name {org:?}: {why} (allowed: a lowercase letter or digit, then up to 62 of [a-z0-9_-])")]
    InvalidOrg { org: String, why: &'static str },
    #[error("invalid agent name {name:?}: {why}")]
    InvalidAgentName { name: String, why: &'static str },
    #[error("cannot create the store directory {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: schema version {found} is newer than this build knows ({known}); upgrade hanzo-dev or use another data directory")]
    SchemaTooNew {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error("{path}: could not switch to WAL journaling (got {got:?})")]
    NoWal { path: PathBuf, got: String },
    #[error("an agent named {0:?} already exists")]
    AgentExists(String),
    #[error("no run with id {0}")]
    RunNotFound(RunId),
    #[error("no session with id {0}")]
    SessionNotFound(crate::types::SessionId),
    #[error("run {run} is not a turn of session {session}")]
    RunNotInSession {
        run: RunId,
        session: crate::types::SessionId,
    },
    #[error("no step with id {0}")]
    StepNotFound(i64),
    #[error("no tool call with id {0}")]
    CallNotFound(i64),
    #[error("tool call {0} is already finished")]
    CallFinished(i64),
    #[error("run {id} is already {status}; only a running run can be changed")]
    RunNotRunning { id: RunId, status: RunStatus },
    #[error("cannot finish a run as {0}: choose succeeded, failed, cancelled or interrupted")]
    NotTerminal(RunStatus),
    #[error("refused to store {table}.{field}: it contains a known secret value")]
    SecretInRecord {
        table: &'static str,
        field: &'static str,
    },
    #[error("stored row is malformed: {0}")]
    Corrupt(String),
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
