//! Built-in defaults that are decisions, not configuration: which tool calls only look.
//!
//! `--approval allow-listed` approves exactly the calls [`is_read_only_call`] accepts (and denies
//! the rest when the policy says prompt); the supervisor asks here rather than keeping its own
//! list, so a new read-only tool or subcommand is decided once.

use crate::git::GIT_READ_ONLY_SUBCOMMANDS;
use serde_json::Value;

/// Tools that only look, whatever their input.
pub const READ_ONLY_TOOLS: &[&str] = &[
    "read_file",
    "list_dir",
    "glob",
    "grep",
    // The language-server queries (issue 15): they ask the sandboxed lsp worker, change nothing.
    "lsp_diagnostics",
    "lsp_definition",
    "lsp_references",
    "lsp_hover",
];

/// Whether this call changes nothing: a read-only tool, or the `git` tool with a read-only
/// subcommand (`status`, `diff`, `log`, `show`; see [`GIT_READ_ONLY_SUBCOMMANDS`]).
pub fn is_read_only_call(tool: &str, input: &Value) -> bool {
    if READ_ONLY_TOOLS.contains(&tool) {
        return true;
    }
    tool == "git"
        && input
            .get("subcommand")
            .and_then(Value::as_str)
            .is_some_and(|s| GIT_READ_ONLY_SUBCOMMANDS.contains(&s))
}

/// How the read-only set is described to a person (`--approval allow-listed` messages).
pub fn read_only_description() -> String {
    format!(
        "{}, and git {}",
        READ_ONLY_TOOLS.join(", "),
        GIT_READ_ONLY_SUBCOMMANDS.join("/")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn read_only_tools_and_git_subcommands() {
        for tool in READ_ONLY_TOOLS {
            assert!(is_read_only_call(tool, &Value::Null), "{tool}");
        }
        for sub in ["status", "diff", "log", "show"] {
            assert!(
                is_read_only_call("git", &json!({ "subcommand": sub })),
                "{sub}"
            );
        }
        for sub in ["add", "commit", "branch", "switch", "push", ""] {
            assert!(
                !is_read_only_call("git", &json!({ "subcommand": sub })),
                "{sub}"
            );
        }
        assert!(!is_read_only_call("git", &json!({})));
        assert!(!is_read_only_call(
            "bash",
            &json!({"command": "git status"})
        ));
        assert!(!is_read_only_call("write_file", &json!({"path": "x"})));
        assert_eq!(
            read_only_description(),
            "read_file, list_dir, glob, grep, lsp_diagnostics, lsp_definition, lsp_references, \
             lsp_hover, and git status/diff/log/show"
        );
    }
}
