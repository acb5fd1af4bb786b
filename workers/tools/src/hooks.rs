//! Hook execution (HIP-0301 §9). The contract — which hooks match, their environment and stdin,
//! what each ending means — is `hanzo_policy::hooks`; this module only runs processes.
//!
//! A hook is `sh -c <command>` in a new process group, with the full JSON on stdin and stdout and
//! stderr drained concurrently (a hook blocked on a full pipe would otherwise look like a
//! timeout). On timeout the whole group is killed with SIGKILL, so a hook that ignores SIGTERM or
//! left a background child behind cannot outlive its time; after a normal exit the group is
//! killed too, so nothing a hook started keeps running unaccounted for.

use hanzo_policy::hooks::{
    hook_env, hook_stdin, post_hook_log, pre_hook_verdict, HookConfig, HookEvent, HookExit,
    HookOutcome, HookSet, PreHookVerdict, MAX_CAPTURE_BYTES,
};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

/// How long output pipes may stay open after the hook's group is gone. Only a process that
/// escaped the group (`setsid`) can hold them; we stop reading rather than wait for it.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// The result of a pre-tool-use pass: the verdict, and which hook decided if one denied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreHookResult {
    pub verdict: PreHookVerdict,
    pub denied_by: Option<HookConfig>,
}

/// Runs the configured hooks for tool calls.
#[derive(Debug, Clone)]
pub struct HookRunner {
    hooks: HookSet,
    cwd: PathBuf,
    shell: PathBuf,
    base_env: Option<Vec<(String, String)>>,
}

impl HookRunner {
    /// Hooks run in `cwd` (the workspace) and inherit this worker's environment, which the
    /// supervisor already built from an allow-list, plus the `HANZO_*` hook variables.
    pub fn new(hooks: HookSet, cwd: impl Into<PathBuf>) -> Self {
        HookRunner {
            hooks,
            cwd: cwd.into(),
            shell: PathBuf::from("/bin/sh"),
            base_env: None,
        }
    }

    /// Replaces the inherited environment with exactly `base` (plus the hook variables).
    pub fn with_env(mut self, base: Vec<(String, String)>) -> Self {
        self.base_env = Some(base);
        self
    }

    /// The shell that runs `-c <command>`; `/bin/sh` unless changed (tests use a missing one).
    pub fn with_shell(mut self, shell: impl Into<PathBuf>) -> Self {
        self.shell = shell.into();
        self
    }

    /// Runs the matching pre-tool-use hooks in order; the first that does not allow decides and
    /// the rest do not run. Failures are logged.
    pub async fn run_pre(&self, session_id: &str, tool: &str, input: &Value) -> PreHookResult {
        let env = hook_env(session_id, tool, input, None);
        let stdin = hook_stdin(HookEvent::PreToolUse, session_id, tool, input, None);
        for hook in self.hooks.matching(HookEvent::PreToolUse, tool) {
            let outcome = self.run_one(hook, &stdin, &env).await;
            let verdict = pre_hook_verdict(hook, &outcome);
            match &verdict {
                PreHookVerdict::Allow => continue,
                PreHookVerdict::Deny { reason } => {
                    tracing::info!(hook = %hook.command, tool, %reason, "pre-tool-use hook denied the call");
                }
                PreHookVerdict::Failed { log, .. } => {
                    tracing::warn!(tool, "{log}");
                }
            }
            return PreHookResult {
                verdict,
                denied_by: Some(hook.clone()),
            };
        }
        PreHookResult {
            verdict: PreHookVerdict::Allow,
            denied_by: None,
        }
    }

    /// Runs every matching post-tool-use hook. Nothing here can block the call; the returned
    /// lines (also logged) describe the hooks that failed.
    pub async fn run_post(
        &self,
        session_id: &str,
        tool: &str,
        input: &Value,
        output: &Value,
    ) -> Vec<String> {
        let env = hook_env(session_id, tool, input, Some(output));
        let stdin = hook_stdin(
            HookEvent::PostToolUse,
            session_id,
            tool,
            input,
            Some(output),
        );
        let mut failures = Vec::new();
        for hook in self.hooks.matching(HookEvent::PostToolUse, tool) {
            let outcome = self.run_one(hook, &stdin, &env).await;
            if let Some(log) = post_hook_log(hook, &outcome) {
                tracing::warn!(tool, "{log}");
                failures.push(log);
            }
        }
        failures
    }

    /// Runs one hook to completion or timeout.
    pub async fn run_one(
        &self,
        hook: &HookConfig,
        stdin_bytes: &[u8],
        env: &[(String, String)],
    ) -> HookOutcome {
        let mut cmd = Command::new(&self.shell);
        cmd.arg("-c")
            .arg(&hook.command)
            .current_dir(&self.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if let Some(base) = &self.base_env {
            cmd.env_clear();
            cmd.envs(base.iter().map(|(k, v)| (k, v)));
        }
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        // Under a keeper (see `crate::exec`), a hook that leaves its group (`setsid`) is still
        // killed with everything else at the timeout and when it exits; the spawned process is
        // then the keeper, which must not be killed from here before its sweep.
        let mut switch = match crate::exec::keeper() {
            Ok(k) => match k.attach(cmd.as_std_mut()) {
                Ok(s) => Some(s),
                Err(e) => {
                    return HookOutcome {
                        exit: HookExit::SpawnFailed(format!("cannot set up its keeper: {e}")),
                        stdout: Vec::new(),
                        stderr: Vec::new(),
                        stderr_truncated: false,
                    }
                }
            },
            Err(_) => None,
        };
        cmd.kill_on_drop(switch.is_none());
        let spawned = cmd.spawn();
        // The command holds the keeper's end of the kill pipe: close ours now.
        drop(cmd);
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                return HookOutcome {
                    exit: HookExit::SpawnFailed(format!("{}: {e}", self.shell.display())),
                    stdout: Vec::new(),
                    stderr: Vec::new(),
                    stderr_truncated: false,
                }
            }
        };
        // With process_group(0) the child's pid is its process group id.
        let pgid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw);

        let writer = child.stdin.take().map(|mut pipe| {
            let bytes = stdin_bytes.to_vec();
            // A hook that exits without reading makes this fail with EPIPE; that is its choice.
            tokio::spawn(async move {
                let _ = pipe.write_all(&bytes).await;
                let _ = pipe.shutdown().await;
            })
        });
        let stdout = Capture::start(child.stdout.take());
        let stderr = Capture::start(child.stderr.take());

        let limit = Duration::from_millis(hook.timeout_ms);
        let exit = match tokio::time::timeout(limit, child.wait()).await {
            Ok(Ok(status)) => match (status.code(), status.signal()) {
                (Some(code), _) => HookExit::Exited(code),
                (None, Some(sig)) => HookExit::Signaled(sig),
                (None, None) => HookExit::SpawnFailed("ended with an unknown status".into()),
            },
            Ok(Err(e)) => HookExit::SpawnFailed(format!("waiting for it failed: {e}")),
            Err(_) => {
                // Kill the group while the leader is still unreaped, so its pgid cannot have
                // been reused by an unrelated process; the keeper (if any) sweeps the rest and
                // exits once nothing is left.
                match switch.as_mut() {
                    Some(s) => s.fire(),
                    None => kill_group(pgid),
                }
                let _ = child.wait().await;
                HookExit::TimedOut
            }
        };
        // Without a keeper, whatever is left in the group goes now (the keeper, when there is
        // one, has already swept before exiting: killing its old pgid could only hit a reuse).
        if switch.is_none() {
            kill_group(pgid);
        }
        if let Some(w) = writer {
            w.abort();
        }
        let (stdout, _) = stdout.finish().await;
        let (stderr, stderr_truncated) = stderr.finish().await;
        HookOutcome {
            exit,
            stdout,
            stderr,
            stderr_truncated,
        }
    }
}

fn kill_group(pgid: Option<Pid>) {
    if let Some(pgid) = pgid {
        // ESRCH (group already empty) is the normal case after a clean exit.
        let _ = killpg(pgid, Signal::SIGKILL);
    }
}

/// Reads a pipe to the end, keeping the first [`MAX_CAPTURE_BYTES`].
struct Capture {
    buf: Arc<Mutex<(Vec<u8>, bool)>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Capture {
    fn start<R: AsyncRead + Unpin + Send + 'static>(pipe: Option<R>) -> Capture {
        let buf = Arc::new(Mutex::new((Vec::new(), false)));
        let task = pipe.map(|mut pipe| {
            let buf = Arc::clone(&buf);
            tokio::spawn(async move {
                let mut chunk = vec![0u8; 16 * 1024];
                loop {
                    match pipe.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            let mut guard = buf.lock().unwrap_or_else(|p| p.into_inner());
                            let (data, truncated) = &mut *guard;
                            let room = MAX_CAPTURE_BYTES.saturating_sub(data.len());
                            data.extend_from_slice(&chunk[..n.min(room)]);
                            if n > room {
                                *truncated = true;
                            }
                        }
                    }
                }
            })
        });
        Capture { buf, task }
    }

    async fn finish(mut self) -> (Vec<u8>, bool) {
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(DRAIN_GRACE, task).await.is_err() {
                abort.abort();
            }
        }
        let mut guard = self.buf.lock().unwrap_or_else(|p| p.into_inner());
        (std::mem::take(&mut guard.0), guard.1)
    }
}
