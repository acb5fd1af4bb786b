//! Slash commands typed in the input box, their completion on Tab, and the listings some of
//! them show (`/mcp`).

use crate::worker::WorkerHandle;
use hanzo_ipc::roles::mcp::{self, McpProtocol, McpToolInfo};
use hanzo_md_render::sanitize_line_for_terminal;
use std::time::Duration;

/// Every slash command with one line of help, in the order `/help` lists them.
pub const COMMANDS: &[(&str, &str)] = &[
    ("/plan", "switch to the plan agent (reads, proposes a plan)"),
    ("/solve", "switch to the solve agent"),
    ("/code", "switch to the code agent (the default)"),
    (
        "/auto",
        "switch to the auto pipeline (plan → code → review)",
    ),
    ("/clear", "start a new session with an empty transcript"),
    ("/help", "list the slash commands and keys"),
    (
        "/model",
        "show the model, or /model NAME to use another from the next turn",
    ),
    (
        "/permissions",
        "the permission rules in effect, with their scopes",
    ),
    ("/mcp", "the configured MCP servers and their tools"),
    (
        "/compact",
        "summarise the conversation so far; the next turns start from the summary",
    ),
    ("/branch", "/branch NAME: create and switch to a git branch"),
    (
        "/commit",
        "/commit MESSAGE: commit the staged changes (no message: the model proposes one)",
    ),
    (
        "/diff",
        "add the staged and unstaged diff to the next message",
    ),
    ("/stash", "git stash the changes as \"hanzo: <timestamp>\""),
    (
        "/worktree",
        "/worktree NAME: a new git worktree and branch beside this one",
    ),
    (
        "/commit-push-pr",
        "push the branch to origin, then open a pull request (gh, or the URL)",
    ),
];

/// A parsed slash command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slash {
    /// `/plan`, `/solve`, `/code`, `/auto`: switch to this agent (the name without the slash).
    Agent(String),
    /// `/clear`: a new session with an empty transcript.
    Clear,
    /// `/help`: list the commands and keys.
    Help,
    /// `/model [NAME]`: show the model, or use NAME from the next turn.
    Model(Option<String>),
    /// `/permissions`: the permission rules in effect, with their scopes.
    Permissions,
    /// `/mcp`: the configured MCP servers and their tools.
    Mcp,
    /// `/compact`: summarise the conversation; later turns start from the summary.
    Compact,
    /// `/branch NAME`: create and switch to a git branch.
    Branch(String),
    /// `/commit [MESSAGE]`: commit the staged changes (no message: the model proposes one).
    Commit(Option<String>),
    /// `/diff`: add the staged and unstaged diff to the next message.
    Diff,
    /// `/stash`: stash the changes.
    Stash,
    /// `/worktree NAME`: a new worktree and branch beside the repository.
    Worktree(String),
    /// `/commit-push-pr`: push the branch, then open a pull request.
    CommitPushPr,
    /// Not a command, or a command missing its argument: the message says which.
    Invalid(String),
}

/// The command in `text`, if it is one (a first word starting with `/`).
pub fn parse(text: &str) -> Option<Slash> {
    let text = text.trim();
    if !text.starts_with('/') {
        return None;
    }
    let (cmd, arg) = match text.split_once(char::is_whitespace) {
        Some((c, a)) => (c, a.trim()),
        None => (text, ""),
    };
    let arg = (!arg.is_empty()).then(|| arg.to_string());
    let need = |what: &str, f: fn(String) -> Slash| match &arg {
        Some(a) => f(a.clone()),
        None => Slash::Invalid(format!("{cmd} needs {what}")),
    };
    Some(match cmd {
        "/plan" | "/solve" | "/code" | "/auto" => Slash::Agent(cmd[1..].to_string()),
        "/clear" => Slash::Clear,
        "/help" => Slash::Help,
        "/model" => Slash::Model(arg),
        "/permissions" => Slash::Permissions,
        "/mcp" => Slash::Mcp,
        "/compact" => Slash::Compact,
        "/branch" => need("a branch name", Slash::Branch),
        "/commit" => Slash::Commit(arg),
        "/diff" => Slash::Diff,
        "/stash" => Slash::Stash,
        "/worktree" => need("a name", Slash::Worktree),
        "/commit-push-pr" => Slash::CommitPushPr,
        other => Slash::Invalid(format!(
            "unknown command {}: /help lists them",
            hanzo_md_render::sanitize_line_for_terminal(other)
        )),
    })
}

/// What Tab makes of `text`: the one command it starts (with a space after it), or the longest
/// prefix the candidates share; `None` when there is nothing to complete.
pub fn complete(text: &str) -> Option<String> {
    if !text.starts_with('/') || text.contains(char::is_whitespace) {
        return None;
    }
    let matches: Vec<&str> = COMMANDS
        .iter()
        .map(|(c, _)| *c)
        .filter(|c| c.starts_with(text))
        .collect();
    match matches.as_slice() {
        [] => None,
        [one] => Some(format!("{one} ")),
        many => {
            let first = many[0];
            let common = (text.len()..=first.len())
                .rev()
                .find(|&n| many.iter().all(|c| c.get(..n) == first.get(..n)))
                .unwrap_or(text.len());
            (common > text.len()).then(|| first[..common].to_string())
        }
    }
}

/// The candidates for `text`, for the status line when Tab cannot decide.
pub fn candidates(text: &str) -> Vec<&'static str> {
    COMMANDS
        .iter()
        .map(|(c, _)| *c)
        .filter(|c| text.starts_with('/') && c.starts_with(text))
        .collect()
}

/// The longest `/mcp` waits for the mcp worker's tool list.
pub const MCP_LIST_TIME: Duration = Duration::from_secs(30);
/// Characters of a tool's description `/mcp` shows (its first line); longer ones end in `…`.
pub const MCP_DESCRIPTION_CHARS: usize = 70;

/// `/mcp`: each configured server and the tools it offers, as the mcp worker lists them now.
/// `configured` are the enabled servers in the settings; `mcp` is the worker when the session
/// started any server.
pub async fn mcp_listing(configured: &[String], mcp: Option<&WorkerHandle<McpProtocol>>) -> String {
    if configured.is_empty() {
        return "no MCP servers are configured (settings `mcp_servers`)".to_string();
    }
    let tools: Result<Vec<McpToolInfo>, String> = match mcp {
        None => Ok(Vec::new()),
        Some(m) => match m
            .call_within(mcp::Request::ListTools { server: None }, MCP_LIST_TIME)
            .await
        {
            Ok(mcp::Response::Tools(t)) => Ok(t),
            Ok(other) => Err(format!("unexpected reply {other:?}")),
            Err(e) => Err(e.to_string()),
        },
    };
    mcp_text(configured, tools)
}

/// The `/mcp` text from the configured names and the worker's answer.
pub fn mcp_text(configured: &[String], tools: Result<Vec<McpToolInfo>, String>) -> String {
    let mut out = String::from("MCP servers (settings `mcp_servers`):\n");
    let tools = match tools {
        Ok(t) => t,
        Err(e) => {
            out.push_str(&format!(
                "  {}\n  the mcp worker did not list their tools: {}\n",
                configured.join(", "),
                sanitize_line_for_terminal(&e)
            ));
            return out;
        }
    };
    for name in configured {
        let own: Vec<&McpToolInfo> = tools.iter().filter(|t| &t.server == name).collect();
        let name = sanitize_line_for_terminal(name);
        if own.is_empty() {
            out.push_str(&format!(
                "  {name}: not ready, no tools (the warnings at start, or `hanzo-dev mcp list`, \
                 say why)\n"
            ));
            continue;
        }
        out.push_str(&format!("  {name}: {} tools\n", own.len()));
        for t in own {
            let first = t
                .description
                .as_deref()
                .and_then(|d| d.lines().map(str::trim).find(|l| !l.is_empty()))
                .unwrap_or("");
            let mut desc: String = first.chars().take(MCP_DESCRIPTION_CHARS).collect();
            if first.chars().count() > MCP_DESCRIPTION_CHARS {
                desc.push('…');
            }
            out.push_str(&format!(
                "    {} — {}\n",
                sanitize_line_for_terminal(&t.qualified_name),
                sanitize_line_for_terminal(&desc)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse_with_their_arguments() {
        assert_eq!(parse("hello"), None);
        assert_eq!(parse("/plan"), Some(Slash::Agent("plan".into())));
        assert_eq!(
            parse(" /branch  feat-x "),
            Some(Slash::Branch("feat-x".into()))
        );
        assert_eq!(parse("/model"), Some(Slash::Model(None)));
        assert_eq!(
            parse("/commit fix: it"),
            Some(Slash::Commit(Some("fix: it".into())))
        );
        assert!(matches!(parse("/branch"), Some(Slash::Invalid(m)) if m.contains("branch name")));
        assert!(
            matches!(parse("/nope\u{1b}[2J"), Some(Slash::Invalid(m)) if !m.contains('\u{1b}'))
        );
    }

    #[test]
    fn tab_completes_one_match_or_the_shared_prefix() {
        assert_eq!(complete("/pl"), Some("/plan ".into()));
        assert_eq!(complete("/commit-"), Some("/commit-push-pr ".into()));
        // /commit and /commit-push-pr share "/commit"; /c matches /code, /clear, /commit…
        assert_eq!(complete("/co"), None);
        assert_eq!(complete("/comm"), Some("/commit".into()));
        assert_eq!(complete("/zzz"), None);
        assert_eq!(complete("plain"), None);
        assert_eq!(complete("/plan x"), None);
        assert_eq!(
            candidates("/co"),
            ["/code", "/compact", "/commit", "/commit-push-pr"]
        );
    }

    #[test]
    fn mcp_text_lists_each_server_with_its_tools_or_why_none() {
        let tool = |server: &str, name: &str, desc: Option<&str>| McpToolInfo {
            server: server.into(),
            tool: name.into(),
            qualified_name: format!("mcp__{server}__{name}"),
            description: desc.map(str::to_string),
            input_schema_json: "{}".into(),
        };
        let long = "x".repeat(100);
        let text = mcp_text(
            &["everything".into(), "down".into()],
            Ok(vec![
                tool("everything", "echo", Some("\n Echoes back\nthe input")),
                tool("everything", "evil", Some("a\u{1b}]2;pwned\u{7}b")),
                tool("everything", "long", Some(&long)),
            ]),
        );
        assert!(text.contains("  everything: 3 tools\n"), "{text}");
        assert!(
            text.contains("    mcp__everything__echo — Echoes back\n"),
            "{text}"
        );
        assert!(
            !text.contains('\u{1b}') && text.contains("␛]2;pwned␇"),
            "{text}"
        );
        assert!(text.contains(&format!("{}…", "x".repeat(70))), "{text}");
        assert!(text.contains("  down: not ready, no tools"), "{text}");
        let failed = mcp_text(&["a".into()], Err("timed out".into()));
        assert!(
            failed.contains("did not list their tools: timed out"),
            "{failed}"
        );
    }
}
