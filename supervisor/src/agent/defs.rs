//! The built-in agent definitions (HIP-0301 §14 agent commands): `plan`, `solve`, `code`, and the
//! `auto` pipeline. Stored definitions (`hanzo-dev agents create`) take the same shape; a stored
//! agent may not take a built-in's name.

use super::lsp::{LSP_DEFINITION, LSP_DIAGNOSTICS, LSP_HOVER, LSP_REFERENCES};
use hanzo_store::AgentDef;
use hanzo_tools::defs::{
    APPLY_PATCH, BASH, EDIT_FILE, GLOB, GREP, LIST_DIR, READ_FILE, WRITE_FILE,
};

/// The model a built-in agent uses unless `--model` or settings say otherwise; empty means "the
/// provider's default".
pub const AGENT_DEFAULT_MODEL: &str = "";

/// Tools that only look.
pub const READ_ONLY_TOOLS: &[&str] = &[
    READ_FILE,
    LIST_DIR,
    GLOB,
    GREP,
    LSP_DIAGNOSTICS,
    LSP_DEFINITION,
    LSP_REFERENCES,
    LSP_HOVER,
];

/// Every built-in tool.
pub const ALL_TOOLS: &[&str] = &[
    READ_FILE,
    WRITE_FILE,
    EDIT_FILE,
    LIST_DIR,
    GLOB,
    GREP,
    BASH,
    APPLY_PATCH,
    LSP_DIAGNOSTICS,
    LSP_DEFINITION,
    LSP_REFERENCES,
    LSP_HOVER,
];

/// The stages of `auto`, in order; each stage's final text is passed to the next.
pub const AUTO_STAGES: &[&str] = &["plan", "code", "review"];

/// Names no stored agent may take.
pub const BUILTIN_NAMES: &[&str] = &["plan", "solve", "code", "review", "auto"];

/// The agent used when `run` is given no `--agent`.
pub const DEFAULT_AGENT: &str = "code";

const PLAN_PROMPT: &str = "You are a planning agent. You have no tools. Read the task and write a \
short, concrete, numbered plan: which files to look at, what to change, how to check the result. \
Do not write the code.";

const SOLVE_PROMPT: &str = "You are an analysis agent with read-only tools (read_file, list_dir, \
glob, grep, and the language server's lsp_diagnostics, lsp_definition, lsp_references, lsp_hover). Investigate the workspace and answer the task precisely, citing files and lines. You \
cannot change anything.";

const CODE_PROMPT: &str = "You are a coding agent working in a sandboxed workspace. Use the tools \
to read files, make changes and run commands (tests, builds). Every command runs in a sandbox: no \
network, nothing outside the workspace. Keep changes minimal, run the tests, and finish with a \
short summary of what you changed and how you checked it.";

const REVIEW_PROMPT: &str = "You are a review agent with read-only tools. Check the change \
described to you against the task: read the changed files, look for mistakes and missing tests, \
and finish with a verdict (looks good / needs work) and the reasons.";

/// A built-in agent by name (`auto` is a pipeline, not an agent: see [`AUTO_STAGES`]).
pub fn builtin(name: &str) -> Option<AgentDef> {
    let (prompt, tools): (&str, &[&str]) = match name {
        "plan" => (PLAN_PROMPT, &[]),
        "solve" => (SOLVE_PROMPT, READ_ONLY_TOOLS),
        "code" => (CODE_PROMPT, ALL_TOOLS),
        "review" => (REVIEW_PROMPT, READ_ONLY_TOOLS),
        _ => return None,
    };
    Some(AgentDef {
        name: name.to_string(),
        model: AGENT_DEFAULT_MODEL.to_string(),
        system_prompt: prompt.to_string(),
        tools: tools.iter().map(|t| t.to_string()).collect(),
    })
}

/// Every built-in agent, `auto` described by its stages.
pub fn builtins() -> Vec<AgentDef> {
    ["plan", "solve", "code", "review"]
        .iter()
        .filter_map(|n| builtin(n))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_has_no_tools_and_solve_only_reads() {
        assert!(builtin("plan").expect("plan").tools.is_empty());
        let solve = builtin("solve").expect("solve");
        assert!(solve
            .tools
            .iter()
            .all(|t| READ_ONLY_TOOLS.contains(&t.as_str())));
        assert!(!solve.tools.iter().any(|t| t == BASH || t == WRITE_FILE));
        assert_eq!(builtin("code").expect("code").tools.len(), ALL_TOOLS.len());
        assert!(builtin("auto").is_none());
        assert!(builtin("nope").is_none());
    }

    #[test]
    fn every_stage_of_auto_is_a_builtin() {
        for stage in AUTO_STAGES {
            assert!(builtin(stage).is_some(), "{stage}");
        }
    }
}
