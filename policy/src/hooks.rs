//! The hook contract (HIP-0301 §9): configuration, the environment and stdin a hook receives, and
//! what each way a hook can end means. Running hooks is the tools worker's job
//! (`hanzo_tools::hooks`); this module only decides, so the rules are testable without a process.

use crate::glob::{Glob, GlobError};
use crate::permission::{PatternError, ToolPattern};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::fmt;

/// The longest environment value a hook gets. Linux refuses a single variable above
/// `MAX_ARG_STRLEN` (32 pages) at exec; 32 KiB stays well inside it with room for the rest.
pub const MAX_ENV_VALUE_BYTES: usize = 32 * 1024;
/// Appended to an environment value that was cut; the complete JSON is always on stdin.
pub const TRUNCATION_MARKER: &str = "\n[hanzo: truncated; the complete JSON is on stdin]";
/// The longest deny reason taken from a hook's stderr.
pub const MAX_REASON_BYTES: usize = 4 * 1024;
/// How much of each output stream the runner keeps; the rest is read and discarded.
pub const MAX_CAPTURE_BYTES: usize = 64 * 1024;
/// How long a hook may run when its configuration does not say.
pub const DEFAULT_TIMEOUT_MS: u64 = 5000;
/// A hook may not hold a tool call longer than this.
pub const MAX_TIMEOUT_MS: u64 = 10 * 60 * 1000;

/// When a hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HookEvent {
    /// Before the tool runs; may deny it.
    PreToolUse,
    /// After the tool ran; sees the result; never blocks.
    PostToolUse,
}

impl HookEvent {
    /// The name settings use (`pre_tool_use`, `post_tool_use`).
    pub fn as_str(self) -> &'static str {
        match self {
            HookEvent::PreToolUse => "pre_tool_use",
            HookEvent::PostToolUse => "post_tool_use",
        }
    }
}

impl fmt::Display for HookEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn default_timeout_ms() -> u64 {
    DEFAULT_TIMEOUT_MS
}

/// One configured hook.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HookConfig {
    /// When it runs.
    pub event: HookEvent,
    /// Run as `sh -c <command>` in the workspace.
    pub command: String,
    /// Glob over tool names (`*`, `?`, `[…]`, `\`); argument patterns are not supported here.
    pub tool_pattern: String,
    /// Milliseconds before the hook's whole process group is killed (1 to 600000).
    #[serde(default = "default_timeout_ms")]
    #[schemars(range(min = 1, max = 600000))]
    pub timeout_ms: u64,
}

/// Why a hook configuration is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HookConfigError {
    /// `tool_pattern` is not a valid glob.
    #[error("tool_pattern: {0}")]
    Pattern(#[from] GlobError),
    /// `tool_pattern` has an argument pattern, which only permission rules take.
    #[error("tool_pattern {0:?}: hooks match tool names only; argument patterns like `bash(…)` are for permission rules")]
    ArgumentPattern(String),
    /// `command` is blank.
    #[error("command is empty")]
    EmptyCommand,
    /// `timeout_ms` is 0 or above [`MAX_TIMEOUT_MS`].
    #[error("timeout_ms must be between 1 and {MAX_TIMEOUT_MS}, got {0}")]
    Timeout(u64),
}

impl HookConfig {
    /// Checks the pattern, command and timeout, as loading the settings does.
    pub fn validate(&self) -> Result<(), HookConfigError> {
        self.compile().map(|_| ())
    }

    fn compile(&self) -> Result<Glob, HookConfigError> {
        if self.command.trim().is_empty() {
            return Err(HookConfigError::EmptyCommand);
        }
        if self.timeout_ms == 0 || self.timeout_ms > MAX_TIMEOUT_MS {
            return Err(HookConfigError::Timeout(self.timeout_ms));
        }
        // Tool names never contain `(`; a permission-style `name(arg)` pattern here would
        // silently never fire, so it is refused.
        match ToolPattern::parse(&self.tool_pattern) {
            Ok(p) if p.has_argument_pattern() => {
                return Err(HookConfigError::ArgumentPattern(self.tool_pattern.clone()))
            }
            Err(PatternError::Glob(e)) => return Err(HookConfigError::Pattern(e)),
            Err(_) => return Err(HookConfigError::ArgumentPattern(self.tool_pattern.clone())),
            Ok(_) => {}
        }
        Ok(Glob::new(&self.tool_pattern)?)
    }
}

/// The hooks for one event that match a tool, in configuration order.
#[derive(Debug, Clone, Default)]
pub struct HookSet {
    hooks: Vec<(HookConfig, Glob)>,
}

impl HookSet {
    /// Compiles every hook's pattern; the first bad one is returned with its index.
    pub fn new(hooks: Vec<HookConfig>) -> Result<HookSet, (usize, HookConfigError)> {
        let hooks = hooks
            .into_iter()
            .enumerate()
            .map(|(i, h)| h.compile().map(|g| (h, g)).map_err(|e| (i, e)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(HookSet { hooks })
    }

    /// The hooks for `event` whose pattern matches `tool`, in configuration order.
    pub fn matching<'a>(
        &'a self,
        event: HookEvent,
        tool: &'a str,
    ) -> impl Iterator<Item = &'a HookConfig> + 'a {
        self.hooks
            .iter()
            .filter(move |(h, g)| h.event == event && g.matches(tool))
            .map(|(h, _)| h)
    }

    /// Whether no hook is configured.
    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty()
    }
}

/// Cuts `value` to at most [`MAX_ENV_VALUE_BYTES`] bytes including the marker, at a character
/// boundary. Values that fit are returned unchanged.
pub fn cap_env_value(value: &str) -> String {
    cap_with_marker(value, MAX_ENV_VALUE_BYTES, TRUNCATION_MARKER)
}

fn cap_with_marker(value: &str, max: usize, marker: &str) -> String {
    if value.len() <= max {
        return value.to_string();
    }
    let mut cut = max.saturating_sub(marker.len());
    while !value.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{marker}", &value[..cut])
}

/// A tool's output as a hook sees it in `HANZO_TOOL_OUTPUT`: text as is, anything else as JSON.
fn output_text(output: &Value) -> String {
    match output {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The variables a hook gets on top of the worker's (already allow-listed) environment.
/// `output` is `Some` for post-tool-use hooks only.
pub fn hook_env(
    session_id: &str,
    tool_name: &str,
    input: &Value,
    output: Option<&Value>,
) -> Vec<(String, String)> {
    let mut env = vec![
        ("HANZO_TOOL_NAME".to_string(), tool_name.to_string()),
        (
            "HANZO_TOOL_INPUT".to_string(),
            cap_env_value(&input.to_string()),
        ),
        ("HANZO_SESSION_ID".to_string(), session_id.to_string()),
    ];
    if let Some(out) = output {
        env.push((
            "HANZO_TOOL_OUTPUT".to_string(),
            cap_env_value(&output_text(out)),
        ));
    }
    env
}

/// The complete, uncapped JSON written to a hook's stdin.
pub fn hook_stdin(
    event: HookEvent,
    session_id: &str,
    tool_name: &str,
    input: &Value,
    output: Option<&Value>,
) -> Vec<u8> {
    let mut doc = json!({
        "event": event.as_str(),
        "session_id": session_id,
        "tool_name": tool_name,
        "tool_input": input,
    });
    if let Some(out) = output {
        doc["tool_output"] = out.clone();
    }
    let mut bytes = doc.to_string().into_bytes();
    bytes.push(b'\n');
    bytes
}

/// How a hook process ended, as the runner observed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HookExit {
    /// It exited with this status (0 allows, 2 denies, anything else is a failure).
    Exited(i32),
    /// A signal with this number killed it.
    Signaled(i32),
    /// Its time ran out; its process group was killed.
    TimedOut,
    /// It never ran (no shell, no resources); the text says why.
    SpawnFailed(String),
}

impl fmt::Display for HookExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HookExit::Exited(c) => write!(f, "exited with status {c}"),
            HookExit::Signaled(s) => write!(f, "was killed by signal {s}"),
            HookExit::TimedOut => f.write_str("timed out and was killed"),
            HookExit::SpawnFailed(why) => write!(f, "could not be started: {why}"),
        }
    }
}

/// What one hook run produced. `stderr` holds at most [`MAX_CAPTURE_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookOutcome {
    /// How it ended.
    pub exit: HookExit,
    /// Its stdout, at most [`MAX_CAPTURE_BYTES`].
    pub stdout: Vec<u8>,
    /// Its stderr, at most [`MAX_CAPTURE_BYTES`].
    pub stderr: Vec<u8>,
    /// True when more output arrived than was kept.
    pub stderr_truncated: bool,
}

/// The pre-tool-use verdict of one hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreHookVerdict {
    /// The hook exited 0: the call may go on.
    Allow,
    /// The hook said no (exit 2); `reason` is its trimmed, capped stderr.
    Deny {
        /// Why, as the hook said.
        reason: String,
    },
    /// The hook failed; the call is denied and `log` says how.
    Failed {
        /// Why, in a sentence for the model and the record.
        reason: String,
        /// What happened, for the log (exit, output).
        log: String,
    },
}

impl PreHookVerdict {
    /// Whether the call may go on.
    pub fn is_allow(&self) -> bool {
        matches!(self, PreHookVerdict::Allow)
    }

    /// The reason the model is told, if denied.
    pub fn deny_reason(&self) -> Option<&str> {
        match self {
            PreHookVerdict::Allow => None,
            PreHookVerdict::Deny { reason } | PreHookVerdict::Failed { reason, .. } => Some(reason),
        }
    }
}

/// Trimmed, lossy-UTF-8, at most [`MAX_REASON_BYTES`] (marker included).
pub fn stderr_reason(stderr: &[u8], truncated: bool) -> String {
    let text = String::from_utf8_lossy(stderr);
    let text = text.trim();
    let capped = cap_with_marker(text, MAX_REASON_BYTES, " …[truncated]");
    if truncated && capped.len() == text.len() {
        // The runner already dropped output beyond what we saw.
        return cap_with_marker(
            &format!("{capped} …[truncated]"),
            MAX_REASON_BYTES,
            " …[truncated]",
        );
    }
    capped
}

/// Exit 0 allows; exit 2 denies with stderr as the reason; every other ending denies and is logged.
pub fn pre_hook_verdict(hook: &HookConfig, outcome: &HookOutcome) -> PreHookVerdict {
    match &outcome.exit {
        HookExit::Exited(0) => PreHookVerdict::Allow,
        HookExit::Exited(2) => {
            let reason = stderr_reason(&outcome.stderr, outcome.stderr_truncated);
            PreHookVerdict::Deny {
                reason: if reason.is_empty() {
                    format!("denied by pre-tool-use hook `{}`", hook.command)
                } else {
                    reason
                },
            }
        }
        other => PreHookVerdict::Failed {
            reason: format!(
                "pre-tool-use hook `{}` {other}; the call is denied because the hook could not approve it",
                hook.command
            ),
            log: failure_log(HookEvent::PreToolUse, hook, outcome),
        },
    }
}

/// A post-tool-use hook never blocks; this is the log line for a failure, `None` on success.
pub fn post_hook_log(hook: &HookConfig, outcome: &HookOutcome) -> Option<String> {
    match outcome.exit {
        HookExit::Exited(0) => None,
        _ => Some(failure_log(HookEvent::PostToolUse, hook, outcome)),
    }
}

fn failure_log(event: HookEvent, hook: &HookConfig, outcome: &HookOutcome) -> String {
    let stderr = stderr_reason(&outcome.stderr, outcome.stderr_truncated);
    let mut line = format!("{event} hook `{}` {}", hook.command, outcome.exit);
    if !stderr.is_empty() {
        line.push_str(": ");
        line.push_str(&cap_with_marker(&stderr, 512, " …"));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(cmd: &str) -> HookConfig {
        HookConfig {
            event: HookEvent::PreToolUse,
            command: cmd.into(),
            tool_pattern: "*".into(),
            timeout_ms: DEFAULT_TIMEOUT_MS,
        }
    }

    fn outcome(exit: HookExit, stderr: &str) -> HookOutcome {
        HookOutcome {
            exit,
            stdout: vec![],
            stderr: stderr.as_bytes().to_vec(),
            stderr_truncated: false,
        }
    }

    #[test]
    fn exit_codes_map_to_verdicts() {
        let h = hook("check");
        assert_eq!(
            pre_hook_verdict(&h, &outcome(HookExit::Exited(0), "x")),
            PreHookVerdict::Allow
        );
        assert_eq!(
            pre_hook_verdict(&h, &outcome(HookExit::Exited(2), "  no pushing to main \n")),
            PreHookVerdict::Deny {
                reason: "no pushing to main".into()
            }
        );
        for exit in [
            HookExit::Exited(1),
            HookExit::Exited(137),
            HookExit::Signaled(9),
            HookExit::TimedOut,
            HookExit::SpawnFailed("no shell".into()),
        ] {
            let v = pre_hook_verdict(&h, &outcome(exit.clone(), "boom"));
            assert!(
                matches!(v, PreHookVerdict::Failed { .. }),
                "{exit:?} → {v:?}"
            );
            assert!(v.deny_reason().is_some());
            assert!(post_hook_log(&h, &outcome(exit, "boom")).is_some());
        }
        assert_eq!(post_hook_log(&h, &outcome(HookExit::Exited(0), "")), None);
    }

    #[test]
    fn deny_with_empty_stderr_still_has_a_reason() {
        let v = pre_hook_verdict(&hook("check"), &outcome(HookExit::Exited(2), "  "));
        assert_eq!(v.deny_reason(), Some("denied by pre-tool-use hook `check`"));
    }

    #[test]
    fn reasons_are_capped_at_char_boundaries() {
        let big = "é".repeat(10_000);
        let r = stderr_reason(big.as_bytes(), false);
        assert!(r.len() <= MAX_REASON_BYTES);
        assert!(r.ends_with("…[truncated]"));
        let r = stderr_reason(b"short", true);
        assert_eq!(r, "short …[truncated]");
    }

    #[test]
    fn env_values_capped_with_marker_and_stdin_complete() {
        let input = serde_json::json!({"content": "x".repeat(100_000)});
        let env = hook_env(
            "sess",
            "write_file",
            &input,
            Some(&Value::String("ok".into())),
        );
        let get = |k: &str| {
            env.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .expect("present")
        };
        let v = get("HANZO_TOOL_INPUT");
        assert_eq!(v.len(), MAX_ENV_VALUE_BYTES);
        assert!(v.ends_with(TRUNCATION_MARKER));
        assert_eq!(get("HANZO_TOOL_NAME"), "write_file");
        assert_eq!(get("HANZO_SESSION_ID"), "sess");
        assert_eq!(get("HANZO_TOOL_OUTPUT"), "ok");
        let stdin = hook_stdin(HookEvent::PreToolUse, "sess", "write_file", &input, None);
        let parsed: Value = serde_json::from_slice(&stdin).expect("stdin is JSON");
        assert_eq!(parsed["tool_input"], input);
        assert_eq!(parsed["event"], "pre_tool_use");
        let small = hook_env("s", "t", &serde_json::json!({"a": 1}), None);
        assert_eq!(small.len(), 3);
        assert_eq!(small[1].1, "{\"a\":1}");
    }

    #[test]
    fn hook_config_validation() {
        let mut h = hook("x");
        assert!(h.validate().is_ok());
        h.tool_pattern = "bash(git *)".into();
        assert!(matches!(
            h.validate(),
            Err(HookConfigError::ArgumentPattern(_))
        ));
        h.tool_pattern = "[".into();
        assert!(matches!(h.validate(), Err(HookConfigError::Pattern(_))));
        h.tool_pattern = "*".into();
        h.timeout_ms = 0;
        assert!(matches!(h.validate(), Err(HookConfigError::Timeout(0))));
        h.timeout_ms = 5000;
        h.command = " ".into();
        assert!(matches!(h.validate(), Err(HookConfigError::EmptyCommand)));
        let cfg: HookConfig = serde_json::from_str(
            r#"{"event":"post_tool_use","command":"log","tool_pattern":"mcp__*"}"#,
        )
        .expect("parses");
        assert_eq!(cfg.timeout_ms, 5000);
        let set = HookSet::new(vec![cfg.clone(), hook("pre")]).expect("valid");
        assert_eq!(set.matching(HookEvent::PostToolUse, "mcp__a__b").count(), 1);
        assert_eq!(set.matching(HookEvent::PostToolUse, "bash").count(), 0);
        assert_eq!(set.matching(HookEvent::PreToolUse, "bash").count(), 1);
    }
}
