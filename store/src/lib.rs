//! `hanzo-store` keeps agent definitions and every run — steps, tool calls, permission decisions,
//! events and outcome — in one SQLite file per org, `{data_dir}/orgs/{org}/agents.db` (HIP-1210).
//!
//! Durability: every write is its own transaction, committed before the call returns, in WAL mode
//! with `synchronous = FULL`. WAL + `NORMAL` would already survive a `kill -9` of the writer (a
//! committed transaction is in the WAL in the OS page cache); `FULL` also fsyncs the WAL at each
//! commit so a power loss cannot drop a recorded permission decision either. The price, one fsync
//! per write and a handful of writes per step, is small next to a model call. So a crash loses at
//! most the step in progress, and [`RunStore::mark_interrupted_runs`] closes the runs it orphaned.
//!
//! Nothing secret is stored: every string written is checked against the caller's list of known
//! secret values ([`RunStore::set_known_secrets`]) and the write is refused if one appears.
#![forbid(unsafe_code)]

mod schema;

use hanzo_policy::{AuditRecord, PermissionMode, RuleRef, Scope, Tier};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

pub use schema::SCHEMA_VERSION;

/// The org used when neither `--org` nor the settings name one.
pub const DEFAULT_ORG: &str = "local";

/// How long a write waits for another connection's write lock before failing. Writes are tiny, so
/// only a stuck process holds the lock this long.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

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
    #[error("no step with id {0}")]
    StepNotFound(i64),
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

/// Where a run is in its life. Everything but `Running` is final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Running,
    Succeeded,
    Failed,
    Cancelled,
    /// Left `running` by a process that died; set by [`RunStore::mark_interrupted_runs`].
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

/// What [`RunStore::begin_run`] records about a run's start.
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

/// What [`RunStore::finish_step`] records when a step completes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepEnd {
    /// The model's text for this step, if any.
    pub text: Option<String>,
    pub usage: TokenUsage,
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
    /// Whether the call finally ran (after prompting, the approval mode and pre-hooks).
    pub allowed: bool,
    /// Why it ran or not, as the model was told.
    pub decision_reason: String,
    /// Pre- and post-hook results, as the hook runner reports them (a JSON array).
    pub hook_results: Value,
    pub output: Option<String>,
    pub error: Option<String>,
    pub duration_ms: u64,
}

/// A stored tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRecord {
    pub id: i64,
    #[serde(flatten)]
    pub call: ToolCall,
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

fn validate_agent_name(name: &str) -> Result<()> {
    let bad = |why| {
        Err(StoreError::InvalidAgentName {
            name: name.to_string(),
            why,
        })
    };
    if name.trim().is_empty() {
        return bad("it is empty");
    }
    if name.chars().count() > 128 {
        return bad("it is longer than 128 characters");
    }
    if name.chars().any(char::is_control) {
        return bad("it contains a control character");
    }
    Ok(())
}

/// The path of an org's store file under `data_dir`.
pub fn store_path(data_dir: &Path, org: &str) -> Result<PathBuf> {
    validate_org(org)?;
    Ok(data_dir.join("orgs").join(org).join("agents.db"))
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn now_ms() -> u64 {
    hanzo_policy::audit::now_ms()
}

/// Whether the process that began a run is still alive. Linux: `/proc/<pid>` exists. Elsewhere we
/// cannot tell without unsafe code, so every other process counts as dead (the documented
/// behaviour: the caller marks orphans at start).
fn process_alive(pid: i64) -> bool {
    if pid == i64::from(std::process::id()) {
        return true;
    }
    cfg!(target_os = "linux") && pid > 0 && Path::new(&format!("/proc/{pid}")).exists()
}

/// One org's run store. A `RunStore` is one SQLite connection: give each thread its own (WAL lets
/// readers run while one writer writes).
pub struct RunStore {
    conn: Connection,
    path: PathBuf,
    secrets: Vec<String>,
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
            secrets: Vec::new(),
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

    /// Values that must never be written (e.g. the broker's credentials, or a canary). Empty
    /// strings are ignored. Replaces any earlier list.
    pub fn set_known_secrets<I, S>(&mut self, secrets: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.secrets = secrets
            .into_iter()
            .map(Into::into)
            .filter(|s| !s.is_empty())
            .collect();
    }

    fn guard(&self, table: &'static str, field: &'static str, text: &str) -> Result<()> {
        if self.secrets.iter().any(|s| text.contains(s.as_str())) {
            return Err(StoreError::SecretInRecord { table, field });
        }
        Ok(())
    }

    /// JSON is checked as serialized and string by string, since serialization escapes a secret
    /// holding `"` or `\\` and the escaped form would not match.
    fn guard_json(
        &self,
        table: &'static str,
        field: &'static str,
        value: &Value,
    ) -> Result<String> {
        let text = serde_json::to_string(value).expect("a serde_json::Value always serializes");
        self.guard(table, field, &text)?;
        fn walk(v: &Value, f: &mut dyn FnMut(&str) -> bool) -> bool {
            match v {
                Value::String(s) => f(s),
                Value::Array(items) => items.iter().any(|i| walk(i, f)),
                Value::Object(map) => map.iter().any(|(k, i)| f(k) || walk(i, f)),
                _ => false,
            }
        }
        if !self.secrets.is_empty()
            && walk(value, &mut |s| {
                self.secrets.iter().any(|x| s.contains(x.as_str()))
            })
        {
            return Err(StoreError::SecretInRecord { table, field });
        }
        Ok(text)
    }

    fn guard_opt(
        &self,
        table: &'static str,
        field: &'static str,
        text: Option<&str>,
    ) -> Result<()> {
        text.map_or(Ok(()), |t| self.guard(table, field, t))
    }

    // ---- agents ----

    pub fn create_agent(&mut self, def: &AgentDef) -> Result<Agent> {
        validate_agent_name(&def.name)?;
        let tools = serde_json::to_string(&def.tools).expect("a list of strings serializes");
        for (field, text) in [
            ("name", def.name.as_str()),
            ("model", def.model.as_str()),
            ("system_prompt", def.system_prompt.as_str()),
            ("tools", tools.as_str()),
        ] {
            self.guard("agents", field, text)?;
        }
        let created_ms = now_ms();
        let inserted = self.conn.execute(
            "INSERT INTO agents (name, model, system_prompt, tools, created_ms)
             VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT(name) DO NOTHING",
            params![
                def.name,
                def.model,
                def.system_prompt,
                tools,
                to_i64(created_ms)
            ],
        )?;
        if inserted == 0 {
            return Err(StoreError::AgentExists(def.name.clone()));
        }
        Ok(Agent {
            def: def.clone(),
            created_ms,
        })
    }

    pub fn get_agent(&self, name: &str) -> Result<Option<Agent>> {
        self.conn
            .query_row(
                "SELECT name, model, system_prompt, tools, created_ms FROM agents WHERE name = ?1",
                [name],
                agent_from_row,
            )
            .optional()?
            .transpose()
    }

    /// All agents, by name.
    pub fn list_agents(&self) -> Result<Vec<Agent>> {
        let mut stmt = self.conn.prepare(
            "SELECT name, model, system_prompt, tools, created_ms FROM agents ORDER BY name",
        )?;
        let rows = stmt.query_map([], agent_from_row)?;
        rows.map(|r| r?).collect()
    }

    /// Delete an agent definition; its past runs stay. Returns whether it existed.
    pub fn delete_agent(&mut self, name: &str) -> Result<bool> {
        Ok(self
            .conn
            .execute("DELETE FROM agents WHERE name = ?1", [name])?
            > 0)
    }

    // ---- runs ----

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

    fn require_running(&self, id: RunId) -> Result<()> {
        let status: Option<String> = self
            .conn
            .query_row("SELECT status FROM runs WHERE id = ?1", [id.0], |r| {
                r.get(0)
            })
            .optional()?;
        match status {
            None => Err(StoreError::RunNotFound(id)),
            Some(s) if s == "running" => Ok(()),
            Some(s) => Err(StoreError::RunNotRunning {
                id,
                status: s.parse()?,
            }),
        }
    }

    /// Record a step's start; its index is the next in the run (1-based).
    pub fn begin_step(&mut self, run: RunId) -> Result<StepId> {
        // IMMEDIATE: the index read and the insert must see no other writer in between.
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let status: Option<String> = tx
            .query_row("SELECT status FROM runs WHERE id = ?1", [run.0], |r| {
                r.get(0)
            })
            .optional()?;
        match status.as_deref() {
            None => return Err(StoreError::RunNotFound(run)),
            Some("running") => {}
            Some(s) => {
                return Err(StoreError::RunNotRunning {
                    id: run,
                    status: s.parse()?,
                })
            }
        }
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

    fn step_run(&self, step: StepId) -> Result<RunId> {
        self.conn
            .query_row("SELECT run_id FROM steps WHERE id = ?1", [step.0], |r| {
                r.get(0).map(RunId)
            })
            .optional()?
            .ok_or(StoreError::StepNotFound(step.0))
    }

    /// Record a step's completion.
    pub fn finish_step(&mut self, step: StepId, end: &StepEnd) -> Result<()> {
        self.guard_opt("steps", "text", end.text.as_deref())?;
        let run = self.step_run(step)?;
        self.require_running(run)?;
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

    /// Record one tool call of `step` (after it ran, or was refused).
    pub fn record_tool_call(&mut self, step: StepId, call: &ToolCall) -> Result<i64> {
        let input = self.guard_json("tool_calls", "input", &call.input)?;
        let hooks = self.guard_json("tool_calls", "hook_results", &call.hook_results)?;
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
        let run = self.step_run(step)?;
        self.require_running(run)?;
        self.conn.execute(
            "INSERT INTO tool_calls (run_id, step_id, tool_use_id, name, input, permission, rule,
                 allowed, decision_reason, hook_results, output, error, duration_ms, recorded_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
            params![
                run.0,
                step.0,
                call.tool_use_id,
                call.name,
                input,
                call.permission.as_str(),
                rule,
                call.allowed,
                call.decision_reason,
                hooks,
                call.output,
                call.error,
                to_i64(call.duration_ms),
                to_i64(now_ms())
            ],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Persist a policy audit record, exactly its fields, linked to `run` when there is one.
    pub fn record_audit(&mut self, run: Option<RunId>, rec: &AuditRecord) -> Result<i64> {
        self.guard("permission_audit", "session_id", &rec.session_id)?;
        self.guard("permission_audit", "tool_name", &rec.tool_name)?;
        self.guard("permission_audit", "input_digest", &rec.input_digest)?;
        self.guard("permission_audit", "reason", &rec.reason)?;
        if let Some(r) = &rec.rule_matched {
            self.guard("permission_audit", "rule_pattern", &r.pattern)?;
        }
        if let Some(id) = run {
            self.run_exists(id)?;
        }
        let rule = rec.rule_matched.as_ref();
        self.conn.execute(
            "INSERT INTO permission_audit (run_id, timestamp_ms, session_id, tool_name,
                 input_digest, mode, rule_tier, rule_index, rule_pattern, reason)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![
                run.map(|r| r.0),
                to_i64(rec.timestamp),
                rec.session_id,
                rec.tool_name,
                rec.input_digest,
                rec.mode.as_str(),
                rule.and_then(|r| r.tier).map(Scope::as_str),
                rule.map(|r| i64::try_from(r.index).unwrap_or(i64::MAX)),
                rule.map(|r| r.pattern.as_str()),
                rec.reason
            ],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Audit records of one session id (the loop uses the run id), oldest first.
    pub fn audit_for_session(&self, session_id: &str) -> Result<Vec<AuditRecord>> {
        self.audit_where(
            "session_id = ?1",
            rusqlite::types::Value::from(session_id.to_string()),
        )
    }

    fn audit_where(&self, cond: &str, arg: rusqlite::types::Value) -> Result<Vec<AuditRecord>> {
        let sql = format!(
            "SELECT timestamp_ms, session_id, tool_name, input_digest, mode, rule_tier,
                    rule_index, rule_pattern, reason
             FROM permission_audit WHERE {cond} ORDER BY id"
        );
        let mut stmt = self.conn.prepare(&sql)?;
        let rows = stmt.query_map([arg], audit_from_row)?;
        rows.map(|r| r?).collect()
    }

    fn run_exists(&self, id: RunId) -> Result<()> {
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
        data: &Value,
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
        usage: TokenUsage,
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
            self.require_running(run)?;
        }
        Ok(())
    }

    /// Mark every run left `running` by a process that is no longer alive as `interrupted`;
    /// returns how many. Runs of live processes (another `hanzo-dev` on the same org, or this
    /// one) are left alone.
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

    /// The most recent runs, newest first.
    pub fn list_runs(&self, limit: usize) -> Result<Vec<RunSummary>> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {RUN_COLUMNS} FROM runs ORDER BY id DESC LIMIT ?1"
        ))?;
        let rows = stmt.query_map([i64::try_from(limit).unwrap_or(i64::MAX)], run_from_row)?;
        rows.map(|r| r?).collect()
    }

    /// One run's header.
    pub fn get_run(&self, id: RunId) -> Result<RunSummary> {
        self.conn
            .query_row(
                &format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"),
                [id.0],
                run_from_row,
            )
            .optional()?
            .ok_or(StoreError::RunNotFound(id))?
    }

    /// The whole run: header, steps with their tool calls, audit records and events. Read in one
    /// transaction so a concurrent writer cannot show a half-updated run.
    pub fn load_run(&self, id: RunId) -> Result<RunRecord> {
        let tx = self.conn.unchecked_transaction()?;
        let run = self.get_run(id)?;
        let mut steps: Vec<StepRecord> = {
            let mut stmt = tx.prepare(
                "SELECT id, idx, started_ms, ended_ms, text, tokens_in, tokens_out
                 FROM steps WHERE run_id = ?1 ORDER BY idx",
            )?;
            let rows = stmt.query_map([id.0], |r| {
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
            })?;
            rows.collect::<rusqlite::Result<_>>()?
        };
        {
            let mut stmt = tx.prepare(
                "SELECT id, step_id, tool_use_id, name, input, permission, rule, allowed,
                        decision_reason, hook_results, output, error, duration_ms, recorded_ms
                 FROM tool_calls WHERE run_id = ?1 ORDER BY id",
            )?;
            let rows = stmt.query_map([id.0], |r| {
                Ok((
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(0)?,
                    r.get::<_, Option<String>>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, String>(5)?,
                    r.get::<_, Option<String>>(6)?,
                    r.get::<_, bool>(7)?,
                    r.get::<_, String>(8)?,
                    r.get::<_, String>(9)?,
                    r.get::<_, Option<String>>(10)?,
                    r.get::<_, Option<String>>(11)?,
                    r.get::<_, i64>(12)?,
                    r.get::<_, i64>(13)?,
                ))
            })?;
            for row in rows {
                let (
                    step_id,
                    cid,
                    tuid,
                    name,
                    input,
                    perm,
                    rule,
                    allowed,
                    reason,
                    hooks,
                    out,
                    err,
                    dur,
                    rec,
                ) = row?;
                let call = ToolCall {
                    tool_use_id: tuid,
                    name,
                    input: parse_json("tool_calls.input", &input)?,
                    permission: parse_mode(&perm)?,
                    rule: rule
                        .map(|r| {
                            serde_json::from_str(&r)
                                .map_err(|e| StoreError::Corrupt(format!("tool_calls.rule: {e}")))
                        })
                        .transpose()?,
                    allowed,
                    decision_reason: reason,
                    hook_results: parse_json("tool_calls.hook_results", &hooks)?,
                    output: out,
                    error: err,
                    duration_ms: to_u64(dur),
                };
                let step = steps
                    .iter_mut()
                    .find(|s| s.id.0 == step_id)
                    .ok_or_else(|| StoreError::Corrupt(format!("tool call {cid} has no step")))?;
                step.tool_calls.push(ToolCallRecord {
                    id: cid,
                    call,
                    recorded_ms: to_u64(rec),
                });
            }
        }
        let audit = self.audit_where("run_id = ?1", rusqlite::types::Value::from(id.0))?;
        let events = {
            let mut stmt = tx.prepare(
                "SELECT id, step_id, kind, data, recorded_ms FROM events
                 WHERE run_id = ?1 ORDER BY id",
            )?;
            let rows = stmt.query_map([id.0], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, Option<i64>>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, i64>(4)?,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (eid, step, kind, data, rec) = row?;
                out.push(EventRecord {
                    id: eid,
                    step: step.map(StepId),
                    kind,
                    data: parse_json("events.data", &data)?,
                    recorded_ms: to_u64(rec),
                });
            }
            out
        };
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

const RUN_COLUMNS: &str =
    "id, agent, input, model, isolation, status, outcome, started_ms, ended_ms, tokens_in, tokens_out";

fn run_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<RunSummary>> {
    let status: String = r.get(5)?;
    let status = match status.parse() {
        Ok(s) => s,
        Err(e) => return Ok(Err(e)),
    };
    let isolation = match parse_isolation(&r.get::<_, String>(4)?) {
        Ok(t) => t,
        Err(e) => return Ok(Err(e)),
    };
    Ok(Ok(RunSummary {
        id: RunId(r.get(0)?),
        agent: r.get(1)?,
        input: r.get(2)?,
        model: r.get(3)?,
        isolation,
        status,
        outcome: r.get(6)?,
        started_ms: to_u64(r.get(7)?),
        ended_ms: r.get::<_, Option<i64>>(8)?.map(to_u64),
        usage: TokenUsage {
            input: to_u64(r.get(9)?),
            output: to_u64(r.get(10)?),
        },
    }))
}

fn agent_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<Agent>> {
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

fn audit_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<AuditRecord>> {
    let mode: String = r.get(4)?;
    let tier: Option<String> = r.get(5)?;
    let index: Option<i64> = r.get(6)?;
    let pattern: Option<String> = r.get(7)?;
    let build = || -> Result<AuditRecord> {
        let rule_matched = match (index, pattern) {
            (Some(index), Some(pattern)) => Some(RuleRef {
                tier: tier.as_deref().map(parse_scope).transpose()?,
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

fn parse_mode(s: &str) -> Result<PermissionMode> {
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

fn parse_json(what: &str, s: &str) -> Result<Value> {
    serde_json::from_str(s).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
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
