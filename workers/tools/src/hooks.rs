//! Hook execution (HIP-0301 §9). The contract — which hooks match, their environment and stdin,
//! what each ending means — is `hanzo_policy::hooks`; this module only runs processes.
//!
//! A hook is `sh -c <command>` started through the runner ([`crate::runner`]: a new session, fds
//! closed, a keeper, its own confinement — the workspace read-write and no network in either
//! tier), with the full JSON on stdin and stdout and stderr drained concurrently (a hook blocked
//! on a full pipe would otherwise look like a timeout). At the timeout its keeper kills
//! everything it started, so a hook that ignores SIGTERM or left a background child behind —
//! also one that left its group — cannot outlive its time; after a normal exit the keeper sweeps
//! too, so nothing a hook started keeps running unaccounted for.

use crate::runner::{Pipes, Runner, Spawn};
use hanzo_ipc::Role;
use hanzo_policy::hooks::{
    hook_env, hook_stdin, post_hook_log, pre_hook_verdict, HookConfig, HookEvent, HookExit,
    HookOutcome, HookSet, PreHookVerdict, MAX_CAPTURE_BYTES,
};
use hanzo_policy::profile::{CommandProfile, ProfileContext};
use serde_json::Value;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// How long output pipes may stay open after the hook's group is gone. Only a process that
/// escaped the group (`setsid`) can hold them; we stop reading rather than wait for it.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// The result of a pre-tool-use pass: the verdict, and which hook decided if one denied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreHookResult {
    /// Whether the call may proceed, and why not.
    pub verdict: PreHookVerdict,
    /// The hook that denied it (or failed), if one did.
    pub denied_by: Option<HookConfig>,
}

/// Runs the configured hooks for tool calls.
#[derive(Debug, Clone)]
pub struct HookRunner {
    hooks: HookSet,
    cwd: PathBuf,
    shell: PathBuf,
    base_env: Option<Vec<(String, String)>>,
    runner: Arc<Runner>,
}

impl HookRunner {
    /// Hooks run in `cwd` (the workspace) and inherit this worker's environment, which the
    /// supervisor already built from an allow-list, plus the `HANZO_*` hook variables.
    pub fn new(hooks: HookSet, cwd: impl Into<PathBuf>) -> Self {
        let cwd = cwd.into();
        let runner = Runner::shared(
            Role::Tools,
            ProfileContext {
                workspace: Some(cwd.clone()),
                ..ProfileContext::default()
            },
        );
        HookRunner {
            hooks,
            cwd,
            shell: PathBuf::from("/bin/sh"),
            base_env: None,
            runner,
        }
    }

    /// Start hooks through `runner` (the tools worker's).
    pub fn with_runner(mut self, runner: Arc<Runner>) -> Self {
        self.runner = runner;
        self
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
        let spawn_failed = |why: String| HookOutcome {
            exit: HookExit::SpawnFailed(why),
            stdout: Vec::new(),
            stderr: Vec::new(),
            stderr_truncated: false,
        };
        let mut full_env: Vec<(String, String)> = match &self.base_env {
            Some(base) => base.clone(),
            None => std::env::vars().collect(),
        };
        for (k, v) in env {
            full_env.retain(|(name, _)| name != k);
            full_env.push((k.clone(), v.clone()));
        }
        let spawn = Spawn::shell(
            &self.shell,
            &hook.command,
            full_env,
            &self.cwd,
            hanzo_policy::profile::CommandLimits::default().command_rlimits(),
            CommandProfile::hook(),
        );
        // Under a keeper (see `crate::runner`), a hook that leaves its group (`setsid`) is still
        // killed with everything else at the timeout and when it exits.
        let mut running = match self.runner.start(spawn, Pipes::ALL) {
            Ok(r) => r,
            Err(e) => return spawn_failed(e.to_string()),
        };
        let writer = running.stdin.take().map(|mut pipe| {
            let bytes = stdin_bytes.to_vec();
            // A hook that exits without reading makes this fail with EPIPE; that is its choice.
            tokio::spawn(async move {
                let _ = pipe.write_all(&bytes).await;
                drop(pipe);
            })
        });
        let stdout = Capture::start(running.stdout.take());
        let stderr = Capture::start(running.stderr.take());

        let limit = Duration::from_millis(hook.timeout_ms);
        let exit = match tokio::time::timeout(limit, running.wait()).await {
            Ok(Ok(status)) => match (status.code(), status.signal()) {
                (Some(code), _) => HookExit::Exited(code),
                (None, Some(sig)) => HookExit::Signaled(sig),
                (None, None) => HookExit::SpawnFailed("ended with an unknown status".into()),
            },
            Ok(Err(e)) => HookExit::SpawnFailed(e.to_string()),
            Err(_) => {
                // The keeper sweeps everything the hook started and then reports.
                running.kill();
                let _ = running.wait().await;
                HookExit::TimedOut
            }
        };
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
