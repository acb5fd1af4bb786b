//! What happens when the policy says `prompt`: ask the person at the terminal, or — in CI and
//! any non-interactive run — apply an approval mode decided in advance.
//!
//! Approval modes never override a `deny` (from a rule or a hook) and never widen the sandbox:
//! an approved command still runs confined.

use super::defs::READ_ONLY_TOOLS;
use super::traits::{PermissionDecision, PermissionPrompter};
use serde_json::Value;
use std::io::{BufRead, Write};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ApprovalMode {
    /// Ask at the terminal (the default when stdin and stderr are terminals).
    Prompt,
    /// Deny every call that would need approval; the model is told why (the default otherwise).
    Deny,
    /// Approve the read-only tools (read_file, list_dir, glob, grep); deny the rest.
    AllowListed,
    /// Approve every call that would need approval. Deny rules and hooks still apply, and every
    /// call still runs in the sandbox.
    Allow,
}

impl ApprovalMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalMode::Prompt => "prompt",
            ApprovalMode::Deny => "deny",
            ApprovalMode::AllowListed => "allow-listed",
            ApprovalMode::Allow => "allow",
        }
    }
}

/// A non-interactive approval mode as a prompter.
#[derive(Debug, Clone, Copy)]
pub struct Unattended(pub ApprovalMode);

impl PermissionPrompter for Unattended {
    async fn request_permission(
        &self,
        tool_name: &str,
        _input: &Value,
        why: &str,
    ) -> PermissionDecision {
        decide_unattended(self.0, tool_name, why)
    }

    fn describe(&self) -> String {
        self.0.as_str().to_string()
    }
}

/// The decision of a non-interactive mode (pure, for tests). `Prompt` here means nobody is
/// there to answer, so it denies like `Deny`.
pub fn decide_unattended(mode: ApprovalMode, tool_name: &str, why: &str) -> PermissionDecision {
    let deny = |what: &str| {
        PermissionDecision::Deny(format!(
            "{tool_name} needs approval ({why}) and this run is non-interactive: {what}. \
             Ask the user to allow it with a permission rule, or use another approach."
        ))
    };
    match mode {
        ApprovalMode::Allow => PermissionDecision::Allow,
        ApprovalMode::AllowListed if READ_ONLY_TOOLS.contains(&tool_name) => {
            PermissionDecision::Allow
        }
        ApprovalMode::AllowListed => {
            deny("--approval allow-listed approves only read_file, list_dir, glob and grep")
        }
        ApprovalMode::Deny | ApprovalMode::Prompt => deny("--approval deny denies it"),
    }
}

/// Asks on the terminal (stderr for the question, stdin for the answer).
#[derive(Debug, Default)]
pub struct TerminalPrompter;

impl PermissionPrompter for TerminalPrompter {
    async fn request_permission(
        &self,
        tool_name: &str,
        input: &Value,
        why: &str,
    ) -> PermissionDecision {
        let shown = summarize_input(tool_name, input);
        let question = format!("\nallow {tool_name}({shown})? ({why}) [y/N] ");
        // stdin is blocking: read it off the runtime's threads.
        let answer = tokio::task::spawn_blocking(move || {
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(question.as_bytes());
            let _ = err.flush();
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line).map(|_| line)
        })
        .await;
        match answer {
            Ok(Ok(line)) if matches!(line.trim(), "y" | "Y" | "yes") => PermissionDecision::Allow,
            Ok(Ok(_)) => PermissionDecision::Deny("the user declined".to_string()),
            _ => PermissionDecision::Deny("no answer could be read from the terminal".to_string()),
        }
    }

    fn describe(&self) -> String {
        "prompt".to_string()
    }
}

/// Either prompter, chosen at run time.
#[derive(Debug)]
pub enum Prompter {
    Terminal(TerminalPrompter),
    Unattended(Unattended),
}

impl Prompter {
    pub fn for_mode(mode: ApprovalMode) -> Prompter {
        match mode {
            ApprovalMode::Prompt => Prompter::Terminal(TerminalPrompter),
            other => Prompter::Unattended(Unattended(other)),
        }
    }
}

impl PermissionPrompter for Prompter {
    async fn request_permission(
        &self,
        tool_name: &str,
        input: &Value,
        why: &str,
    ) -> PermissionDecision {
        match self {
            Prompter::Terminal(p) => p.request_permission(tool_name, input, why).await,
            Prompter::Unattended(p) => p.request_permission(tool_name, input, why).await,
        }
    }

    fn describe(&self) -> String {
        match self {
            Prompter::Terminal(p) => p.describe(),
            Prompter::Unattended(p) => p.describe(),
        }
    }
}

/// A one-line view of a tool input: the command for `bash`, the path for file tools, else the
/// compact JSON, cut at 120 characters.
pub fn summarize_input(tool_name: &str, input: &Value) -> String {
    let main = match tool_name {
        "bash" => input.get("command").and_then(Value::as_str),
        _ => input
            .get("path")
            .or_else(|| input.get("pattern"))
            .and_then(Value::as_str),
    };
    let text = match main {
        Some(s) => s.to_string(),
        None => input.to_string(),
    };
    let one_line = text.replace('\n', "⏎");
    cut(&one_line, 120)
}

/// `s` cut to at most `max` characters, with `…` when cut.
pub fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unattended_modes() {
        assert_eq!(
            decide_unattended(ApprovalMode::Allow, "bash", "no rule"),
            PermissionDecision::Allow
        );
        assert_eq!(
            decide_unattended(ApprovalMode::AllowListed, "grep", "no rule"),
            PermissionDecision::Allow
        );
        let PermissionDecision::Deny(why) =
            decide_unattended(ApprovalMode::AllowListed, "bash", "no rule")
        else {
            panic!("bash must be denied under allow-listed");
        };
        assert!(why.contains("allow-listed"), "{why}");
        let PermissionDecision::Deny(why) =
            decide_unattended(ApprovalMode::Deny, "read_file", "no rule matched")
        else {
            panic!("deny denies");
        };
        assert!(
            why.contains("non-interactive") && why.contains("no rule matched"),
            "{why}"
        );
    }

    #[test]
    fn input_summaries() {
        assert_eq!(
            summarize_input("bash", &json!({"command": "ls\n-la"})),
            "ls⏎-la"
        );
        assert_eq!(
            summarize_input("read_file", &json!({"path": "a.txt"})),
            "a.txt"
        );
        assert_eq!(summarize_input("x", &json!({"k": 1})), "{\"k\":1}");
        let long = "a".repeat(300);
        let s = summarize_input("bash", &json!({ "command": long }));
        assert_eq!(s.chars().count(), 120);
        assert!(s.ends_with('…'));
    }
}
