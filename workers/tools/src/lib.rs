//! The tools worker: every built-in tool, command execution and hook execution happen here,
//! inside the tools sandbox, never in the supervisor.
//!
//! [`definitions`] is the one place tool definitions come from; [`Tools::run`] executes a call;
//! [`worker_main`] is the worker process; [`oneshot`] runs a single command under the same
//! confinement (`hanzo-dev sandbox`). Every command, hook and (later) server starts through the
//! one [`runner`] — in the worker, through its [`launcher`], forked before the worker confines
//! itself — under a keeper that kills all it started and a confinement of its own; the
//! [`egress_forward`]er hands tier B commands' proxy connections to the broker.
// The cast lints (issue 11), enforced crate by crate until every member passes them.
#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss,
    clippy::cast_lossless
)]
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod defs;
pub mod egress_forward;
pub mod exec;
pub mod files;
pub mod git;
pub mod hooks;
pub mod launcher;
pub mod oneshot;
pub mod patch;
pub mod paths;
pub mod runner;
pub mod search;
pub mod worker;

pub use defs::definitions;
pub use worker::worker_main;

use exec::{ExecConfig, Exit};
use hanzo_ipc::roles::tools::{ToolCall, ToolResult};
use hanzo_ipc::Role;
use hanzo_policy::isolation::Tier;
use hanzo_policy::profile::ProfileContext;
use paths::Roots;
use runner::Outcome as ExecOutcome;
use runner::Runner;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Why the tools cannot be set up at all (as opposed to one call failing).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The worker was started without a workspace directory.
    #[error("the tools worker has no workspace")]
    NoWorkspace,
    /// The worker was started without its private run directory (commands' `HOME`).
    #[error("the tools worker has no private run directory")]
    NoRunDir,
    /// The workspace cannot be opened or resolved.
    #[error("workspace {path}: {source}")]
    Workspace {
        /// The workspace path as given.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The private run directory cannot be opened or resolved.
    #[error("run directory {path}: {source}")]
    RunDir {
        /// The run directory's path as given.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
}

/// The built-in tools over one workspace.
#[derive(Debug, Clone)]
pub struct Tools {
    roots: Arc<Roots>,
    exec: Arc<ExecConfig>,
    /// How long a file tool call may take (see [`files::Deadline`]).
    file_deadline: Duration,
    git_identity: git::GitIdentity,
    runner: Arc<Runner>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BashInput {
    command: String,
    timeout_ms: Option<u64>,
}

impl Tools {
    /// Tools over `workspace` (plus `extra_write` roots), with commands' `HOME` and `TMPDIR` in
    /// `run_dir` (created here), in tier A, their commands started by the worker's launcher or,
    /// outside a worker, from this process ([`Runner::shared`]).
    pub fn new(
        workspace: &Path,
        run_dir: &Path,
        extra_write: &[PathBuf],
        limits: &hanzo_policy::profile::CommandLimits,
    ) -> Result<Tools, SetupError> {
        Tools::in_tier(workspace, run_dir, extra_write, limits, Tier::A)
    }

    /// [`Tools::new`] for commands in `tier`.
    pub fn in_tier(
        workspace: &Path,
        run_dir: &Path,
        extra_write: &[PathBuf],
        limits: &hanzo_policy::profile::CommandLimits,
        tier: Tier,
    ) -> Result<Tools, SetupError> {
        let roots = Roots::new(workspace, extra_write).map_err(|source| SetupError::Workspace {
            path: workspace.to_path_buf(),
            source,
        })?;
        let mut exec = ExecConfig::new(
            roots.workspace().to_path_buf(),
            run_dir.to_path_buf(),
            limits.command_rlimits(),
        );
        exec.tier = tier;
        exec.prepare_dirs().map_err(|source| SetupError::RunDir {
            path: run_dir.to_path_buf(),
            source,
        })?;
        let runner = Runner::shared(
            Role::Tools,
            ProfileContext {
                workspace: Some(roots.workspace().to_path_buf()),
                run_dir: Some(run_dir.to_path_buf()),
                ..ProfileContext::default()
            },
        );
        Ok(Tools {
            roots: Arc::new(roots),
            exec: Arc::new(exec),
            runner,
            file_deadline: files::DEFAULT_DEADLINE,
            git_identity: git::GitIdentity::default(),
        })
    }

    /// The runner that starts this worker's commands and hooks.
    pub fn runner(&self) -> &Arc<Runner> {
        &self.runner
    }

    /// How long each file tool call may take before it is abandoned with an error naming the
    /// deadline (default [`files::DEFAULT_DEADLINE`]).
    pub fn with_file_deadline(mut self, deadline: Duration) -> Tools {
        self.file_deadline = deadline;
        self
    }

    /// Who the `git` tool commits as when the repository's own configuration names nobody (the
    /// supervisor can read the user's identity from their global configuration, which the git
    /// tool itself never reads). Default: [`git::FALLBACK_NAME`] <[`git::FALLBACK_EMAIL`]>.
    pub fn with_git_identity(mut self, name: impl Into<String>, email: impl Into<String>) -> Tools {
        self.git_identity = git::GitIdentity {
            name: name.into(),
            email: email.into(),
        };
        self
    }

    /// The workspace and run directory every path is resolved against.
    pub fn roots(&self) -> &Roots {
        &self.roots
    }

    /// How commands run (tier, limits, profile context, egress).
    pub fn exec_config(&self) -> &ExecConfig {
        &self.exec
    }

    /// Give `bash` commands network through the egress forwarder on `port` (tier B only; see
    /// [`ExecConfig::egress_port`]).
    pub fn with_egress_port(mut self, port: Option<u16>) -> Tools {
        let mut exec = (*self.exec).clone();
        exec.egress_port = port;
        self.exec = Arc::new(exec);
        self
    }

    /// Add configured variables to every command's environment (secrets are dropped).
    pub fn with_extra_env(mut self, extra: Vec<(String, String)>) -> Tools {
        let mut exec = (*self.exec).clone();
        exec.extra_env = extra;
        self.exec = Arc::new(exec);
        self
    }

    /// Run one tool call. Never fails: every problem is a result with `is_error` set.
    pub async fn run(&self, call: &ToolCall) -> ToolResult {
        self.run_streaming(call, |_| {}).await
    }

    /// As [`Tools::run`]; `on_chunk` sees a command's output as it arrives.
    pub async fn run_streaming(&self, call: &ToolCall, on_chunk: impl FnMut(&[u8])) -> ToolResult {
        let result = match call.name.as_str() {
            defs::BASH => match parse::<BashInput>(&call.input) {
                Ok(input) => return self.bash(input, on_chunk).await,
                Err(e) => Err(e),
            },
            defs::READ_FILE => self.blocking(&call.input, files::read_file_within).await,
            defs::WRITE_FILE => self.blocking(&call.input, files::write_file_within).await,
            defs::EDIT_FILE => self.blocking(&call.input, files::edit_file_within).await,
            defs::LIST_DIR => self.blocking(&call.input, files::list_dir_within).await,
            defs::GLOB => self.blocking(&call.input, search::glob_within).await,
            defs::GREP => self.blocking(&call.input, search::grep_within).await,
            defs::APPLY_PATCH => self.blocking(&call.input, patch::apply_patch_within).await,
            defs::GIT => match parse::<git::GitInput>(&call.input) {
                Ok(input) => {
                    return git::run(
                        &self.runner,
                        &self.roots,
                        &self.exec,
                        &self.git_identity,
                        input,
                    )
                    .await
                }
                Err(e) => Err(e),
            },
            other => Err(format!(
                "unknown tool {other:?}; the tools are: {}",
                defs::definitions_json()
                    .iter()
                    .map(|(n, _, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        };
        match result {
            Ok(output) => ToolResult::ok(output),
            Err(e) => ToolResult::err(e),
        }
    }

    /// File tools do blocking i/o: off the runtime thread, so a slow one does not stall the
    /// channel (pings, cancels, other calls). Each has a deadline: the tool checks it as it goes,
    /// and a call stuck in the kernel past it (a hung network file system) is abandoned here
    /// with an error naming the deadline (its thread finishes, or not, on its own).
    async fn blocking<I, F>(&self, input: &str, f: F) -> files::Outcome
    where
        I: DeserializeOwned + Send + 'static,
        F: FnOnce(&Roots, I, &files::Deadline) -> files::Outcome + Send + 'static,
    {
        let input: I = parse(input)?;
        let roots = self.roots.clone();
        let limit = self.file_deadline;
        let deadline = files::Deadline::after(limit);
        let task = tokio::task::spawn_blocking(move || f(&roots, input, &deadline));
        // The tool's own checks fire at the deadline; this one catches a call stuck in a
        // syscall, a little later so that a tool's own answer wins when it can give one.
        match tokio::time::timeout(limit + Duration::from_millis(250), task).await {
            Ok(joined) => joined.map_err(|e| format!("the tool failed: {e}"))?,
            Err(_) => Err(files::Deadline::message(limit)),
        }
    }

    async fn bash(&self, input: BashInput, on_chunk: impl FnMut(&[u8])) -> ToolResult {
        let timeout = input
            .timeout_ms
            .map(Duration::from_millis)
            .unwrap_or(exec::DEFAULT_TIMEOUT)
            .min(exec::MAX_TIMEOUT);
        let outcome =
            match exec::run(&self.runner, &self.exec, &input.command, timeout, on_chunk).await {
                Ok(o) => o,
                Err(e) => return ToolResult::err(format!("cannot run the command: {e}")),
            };
        command_result(outcome, timeout)
    }
}

/// A command's outcome as a tool result: its output, then a trailer with the exit code, the
/// signal or the timeout; non-zero, a signal and a timeout are errors.
pub(crate) fn command_result(outcome: ExecOutcome, timeout: Duration) -> ToolResult {
    let (trailer, error) = match outcome.exit {
        Exit::Code(0) => ("[exit code 0]".to_string(), None),
        Exit::Code(c) => (format!("[exit code {c}]"), Some(format!("exit code {c}"))),
        Exit::Signal(s) => {
            let name = nix::sys::signal::Signal::try_from(s)
                .map(|s| s.as_str().to_string())
                .unwrap_or_else(|_| format!("signal {s}"));
            (
                format!("[killed by {name}]"),
                Some(format!("killed by {name}")),
            )
        }
        Exit::TimedOut => {
            let msg = format!(
                "timed out after {} ms; the command and every process it started were killed",
                timeout.as_millis()
            );
            (format!("[{msg}]"), Some(msg))
        }
    };
    let mut output = outcome.output;
    if !output.is_empty() && !output.ends_with('\n') {
        output.push('\n');
    }
    output.push_str(&trailer);
    ToolResult {
        output,
        is_error: error.is_some(),
        error,
    }
}

fn parse<I: DeserializeOwned>(input: &str) -> Result<I, String> {
    serde_json::from_str(input).map_err(|e| format!("bad tool input: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call stuck in a syscall (a hung network file system, say) cannot check its deadline:
    /// the worker abandons it, with an error naming the deadline, while its thread finishes on
    /// its own.
    #[tokio::test]
    async fn a_call_stuck_past_its_deadline_is_abandoned_naming_it() {
        let ws = tempfile::tempdir().expect("tempdir");
        let run = tempfile::tempdir().expect("tempdir");
        let tools = Tools::new(
            ws.path(),
            run.path(),
            &[],
            &hanzo_policy::profile::CommandLimits::default(),
        )
        .expect("tools")
        .with_file_deadline(Duration::from_millis(50));
        let r = tools
            .blocking::<serde_json::Value, _>("{}", |_, _, _| {
                // Ignores its deadline, as a blocked read would.
                std::thread::sleep(Duration::from_millis(800));
                Ok("finished".to_string())
            })
            .await;
        assert_eq!(r, Err(files::Deadline::message(Duration::from_millis(50))));
        assert!(r.expect_err("abandoned").contains("deadline of 50 ms"));
    }
}
