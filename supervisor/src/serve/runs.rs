//! Runs started through the API. Each is a `hanzo-dev run --json` child process — the very
//! machinery of `hanzo-dev run`: its own supervisor and attested workers, the org's settings and
//! policy, an unattended approval mode, the run store — so a run started here is the same
//! recorded, sandboxed run as one started at a terminal, and a run that crashes takes nothing
//! else with it.
//!
//! The child's `--json` events are recorded as event rows of the run (kind = the event's
//! `type`), which is what `GET /v1/runs/:id/events` streams and resumes from. The registry of
//! active runs tells the event streams when a new row is there and when the last one is.

use crate::term::sanitize_line_for_terminal;
use hanzo_store::{ApprovalMode, RunId, RunStore, SecretValues};
use serde_json::Value;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use tokio::sync::{oneshot, watch};

/// How long a run child may take to report its run id (it starts and attests its workers
/// first) before it is killed and the request fails.
const START_GUARD: std::time::Duration = std::time::Duration::from_secs(120);

/// What every run started by this server shares.
#[derive(Debug, Clone)]
pub struct RunTemplate {
    /// The `hanzo-dev` binary.
    pub exe: PathBuf,
    /// The workspace every run works in (the server's `--workspace`).
    pub workspace: PathBuf,
    /// A cassette every run plays instead of a provider (`serve --replay`, offline).
    pub replay: Option<PathBuf>,
    /// The environment `hanzo-dev` started with (secrets included: the child hands them to its
    /// own broker and scrubs itself, as any `hanzo-dev` does).
    pub env: Vec<(String, String)>,
}

/// A run to start.
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// The org the run belongs to (the principal's).
    pub org: String,
    /// The agent to run, built-in or stored in the org's store.
    pub agent: String,
    /// The task.
    pub task: String,
    /// The approval mode, no wider than the server's.
    pub approval: ApprovalMode,
    /// The run's `--max-steps` (`None`: the default).
    pub max_steps: Option<u32>,
}

/// Why a run did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The `hanzo-dev run` child could not be started.
    #[error("cannot start the run process: {0}")]
    Spawn(std::io::Error),
    /// The child ended before it reported a run id; its stderr went to the server's log.
    #[error("the run process exited ({0}) before the run started")]
    Exited(String),
}

/// One active run: a counter bumped for every event row recorded (the streams wait on it), and
/// the child's pid (to cancel it when the server stops).
#[derive(Debug)]
struct Active {
    recorded: watch::Sender<u64>,
    pid: u32,
}

/// The runs this server is driving, by (org, run id).
#[derive(Debug, Clone, Default)]
pub struct Registry {
    inner: Arc<Mutex<HashMap<(String, i64), Active>>>,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, i64), Active>> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A receiver that changes whenever the run records an event, or `None` when this server is
    /// not driving it (finished, or driven by another process).
    pub fn watch(&self, org: &str, run: RunId) -> Option<watch::Receiver<u64>> {
        self.lock()
            .get(&(org.to_string(), run.0))
            .map(|a| a.recorded.subscribe())
    }

    /// Whether this server still drives the run (more events may come).
    pub fn is_active(&self, org: &str, run: RunId) -> bool {
        self.lock().contains_key(&(org.to_string(), run.0))
    }

    fn bump(&self, org: &str, run: RunId) {
        if let Some(a) = self.lock().get(&(org.to_string(), run.0)) {
            a.recorded.send_modify(|n| *n += 1);
        }
    }

    /// Ask every active run to stop (SIGINT: the run records itself as cancelled).
    pub fn cancel_all(&self) {
        for a in self.lock().values() {
            if let Ok(pid) = i32::try_from(a.pid) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGINT,
                );
            }
        }
    }

    /// How many runs are active.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no run is active.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn command(t: &RunTemplate, r: &RunRequest) -> Command {
    let mut c = Command::new(&t.exe);
    c.arg("run")
        .arg("--json")
        .arg("--org")
        .arg(&r.org)
        .arg("--agent")
        .arg(&r.agent)
        .arg("--approval")
        .arg(r.approval.as_str())
        .arg("--workspace")
        .arg(&t.workspace);
    if let Some(n) = r.max_steps {
        c.arg("--max-steps").arg(n.to_string());
    }
    if let Some(p) = &t.replay {
        c.arg("--replay").arg(p);
    }
    // `--` so a task that looks like a flag stays the task.
    c.arg("--").arg(&r.task);
    c.env_clear()
        .envs(t.env.iter().filter(|(k, _)| k != "HANZO_ORG").cloned())
        .current_dir(&t.workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Start a run; returns its id once the child has recorded it. The rest proceeds in the
/// background, its events recorded in the org's store.
pub async fn start(
    t: &RunTemplate,
    r: RunRequest,
    data_dir: &Path,
    secrets: SecretValues,
    registry: &Registry,
) -> Result<RunId, StartError> {
    let mut child = command(t, &r).spawn().map_err(StartError::Spawn)?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    let (started_tx, started_rx) = oneshot::channel();
    let pump = Pump {
        org: r.org.clone(),
        data_dir: data_dir.to_path_buf(),
        secrets,
        registry: registry.clone(),
    };
    let pid = child.id();
    std::thread::spawn(move || log_stderr(pid, stderr));
    std::thread::spawn(move || pump.run(child, stdout, started_tx));
    match tokio::time::timeout(START_GUARD, started_rx).await {
        Ok(Ok(Ok(id))) => Ok(id),
        Ok(Ok(Err(e))) => Err(e),
        Ok(Err(_)) => Err(StartError::Exited("no report".into())),
        Err(_) => {
            // A child that neither starts its run nor exits is killed, not left behind.
            if let Ok(pid) = i32::try_from(pid) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            Err(StartError::Exited(format!(
                "killed: no run id within {} s",
                START_GUARD.as_secs()
            )))
        }
    }
}

/// The child's stderr (warnings, errors) goes to the server's log, one sanitised line each.
fn log_stderr(pid: u32, stderr: std::process::ChildStderr) {
    for line in BufReader::new(stderr).lines() {
        let Ok(line) = line else { break };
        eprintln!("run process {pid}: {}", sanitize_line_for_terminal(&line));
    }
}

/// Reads one child's events into the store.
struct Pump {
    org: String,
    data_dir: PathBuf,
    secrets: SecretValues,
    registry: Registry,
}

impl Pump {
    fn run(
        self,
        mut child: Child,
        stdout: std::process::ChildStdout,
        started: oneshot::Sender<Result<RunId, StartError>>,
    ) {
        let mut lines = BufReader::new(stdout).lines();
        let mut started = Some(started);
        let mut run: Option<(RunId, RunStore)> = None;
        for line in lines.by_ref() {
            let Ok(line) = line else { break };
            let Ok(event) = serde_json::from_str::<Value>(&line) else {
                eprintln!(
                    "run process {}: a line of its --json output is not JSON",
                    child.id()
                );
                continue;
            };
            if run.is_none() {
                let Some(id) = event.get("run_id").and_then(Value::as_i64) else {
                    continue;
                };
                match self.open_store() {
                    Ok(store) => {
                        let (tx, _) = watch::channel(0);
                        self.registry.lock().insert(
                            (self.org.clone(), id),
                            Active {
                                recorded: tx,
                                pid: child.id(),
                            },
                        );
                        run = Some((RunId(id), store));
                    }
                    Err(e) => {
                        // Keep reading (a child blocked on a full pipe would never end), but
                        // this server cannot follow the run.
                        eprintln!("run {id}: cannot open the store to record its events: {e}");
                        if let Some(tx) = started.take() {
                            let _ = tx.send(Err(StartError::Exited("store unavailable".into())));
                        }
                        continue;
                    }
                }
            }
            if let Some((id, store)) = run.as_mut() {
                self.record(store, *id, &event);
                if let Some(tx) = started.take() {
                    let _ = tx.send(Ok(*id));
                }
            }
        }
        let status = child.wait();
        if let Some(tx) = started.take() {
            let how = status.map_or_else(|e| e.to_string(), |s| s.to_string());
            let _ = tx.send(Err(StartError::Exited(how)));
        }
        if let Some((id, mut store)) = run {
            // A child that died mid-run left it `running`: close it as interrupted now.
            let _ = store.mark_interrupted_runs();
            self.registry.lock().remove(&(self.org.clone(), id.0));
        }
    }

    fn open_store(&self) -> Result<RunStore, hanzo_store::StoreError> {
        let mut s = RunStore::open(&self.data_dir, &self.org)?;
        s.set_secret_values(self.secrets.clone());
        Ok(s)
    }

    fn record(&self, store: &mut RunStore, run: RunId, event: &Value) {
        let kind = event
            .get("type")
            .and_then(Value::as_str)
            .map(event_kind)
            .unwrap_or_else(|| "event".into());
        match store.record_event(run, None, &kind, event) {
            Ok(_) => self.registry.bump(&self.org, run),
            Err(e) => eprintln!("run {}: an event was not recorded: {e}", run.0),
        }
    }
}

/// An event kind as it goes into the store and onto an SSE `event:` line: only `[a-z0-9_.-]`,
/// anything else `_` (a newline there would forge SSE fields).
pub fn event_kind(s: &str) -> String {
    let k: String = s
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if k.is_empty() {
        "event".into()
    } else {
        k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_kinds_cannot_carry_sse_fields() {
        assert_eq!(event_kind("tool_call"), "tool_call");
        assert_eq!(event_kind("x\ndata: forged"), "x_data__forged");
        assert_eq!(event_kind(""), "event");
    }

    #[test]
    fn a_task_that_looks_like_a_flag_stays_the_task() {
        let t = RunTemplate {
            exe: "/bin/hanzo-dev".into(),
            workspace: "/ws".into(),
            replay: None,
            env: vec![
                ("HANZO_ORG".into(), "other".into()),
                ("PATH".into(), "/bin".into()),
            ],
        };
        let r = RunRequest {
            org: "a".into(),
            agent: "code".into(),
            task: "--allow-dangerous-workspace".into(),
            approval: ApprovalMode::Deny,
            max_steps: None,
        };
        let c = command(&t, &r);
        let args: Vec<_> = c
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let dd = args.iter().position(|a| a == "--").expect("--");
        assert_eq!(args[dd + 1..], ["--allow-dangerous-workspace".to_string()]);
        assert!(!args[..dd].contains(&"--allow-dangerous-workspace".to_string()));
        let envs: Vec<_> = c
            .get_envs()
            .filter_map(|(k, v)| v.map(|_| k.to_string_lossy().into_owned()))
            .collect();
        assert!(!envs.contains(&"HANZO_ORG".to_string()));
    }
}
