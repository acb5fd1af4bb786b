//! The built-in tool definitions: name, description and JSON input schema, written once here and
//! sent to the model exactly as they are. The input structs the tools parse match these schemas
//! (a test checks every property of every schema is accepted by its tool).

use hanzo_ipc::roles::tools::ToolDefinition;
use serde_json::{json, Value};

/// Name of the tool that reads a text file, with numbered lines.
pub const READ_FILE: &str = "read_file";
/// Name of the tool that creates or overwrites a file.
pub const WRITE_FILE: &str = "write_file";
/// Name of the tool that replaces an exact string in a file.
pub const EDIT_FILE: &str = "edit_file";
/// Name of the tool that lists a directory.
pub const LIST_DIR: &str = "list_dir";
/// Name of the tool that finds files by glob pattern.
pub const GLOB: &str = "glob";
/// Name of the tool that searches file contents by regular expression.
pub const GREP: &str = "grep";
/// Name of the tool that runs a shell command in the sandbox.
pub const BASH: &str = "bash";
/// Name of the tool that applies a unified diff.
pub const APPLY_PATCH: &str = "apply_patch";
/// Name of the tool that runs one git subcommand (status, diff, log, show, add, commit, branch,
/// switch) without a shell.
pub const GIT: &str = "git";

/// Every built-in tool's name, description and schema (as a JSON value).
pub fn definitions_json() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        (
            READ_FILE,
            "Read a text file in the workspace. Lines are numbered (`N\\tline`). Use `offset` (first \
             line, 1-based) and `limit` (number of lines) for large files; output beyond the size \
             cap is cut with a marker saying how to read on. Binary files are reported, not shown.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Path relative to the workspace (or absolute inside it)."},
                    "offset": {"type": "integer", "minimum": 1, "description": "First line to show, 1-based."},
                    "limit": {"type": "integer", "minimum": 1, "description": "Number of lines to show."}
                },
                "required": ["path"],
                "additionalProperties": false
            }),
        ),
        (
            WRITE_FILE,
            "Create or overwrite a file in the workspace with the given content. Missing parent \
             directories are created.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "content": {"type": "string"}
                },
                "required": ["path", "content"],
                "additionalProperties": false
            }),
        ),
        (
            EDIT_FILE,
            "Replace an exact string in a file. Fails if `old_string` is absent, or occurs more \
             than once unless `replace_all` is true (then every occurrence is replaced).",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "old_string": {"type": "string", "description": "Exact text to replace, whitespace included."},
                    "new_string": {"type": "string"},
                    "replace_all": {"type": "boolean", "default": false}
                },
                "required": ["path", "old_string", "new_string"],
                "additionalProperties": false
            }),
        ),
        (
            LIST_DIR,
            "List a directory of the workspace: one entry per line, directories end with `/`, \
             symlinks with `@`.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "default": "."}
                },
                "additionalProperties": false
            }),
        ),
        (
            GLOB,
            "Find files whose path (relative to `path`, default the workspace) matches a glob such \
             as `src/**/*.rs`. Files ignored by .gitignore/.ignore are skipped.",
            json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string"},
                    "path": {"type": "string", "default": "."},
                    "max_results": {"type": "integer", "minimum": 1, "default": 1000}
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
        ),
        (
            GREP,
            "Search file contents with a regular expression (Rust regex syntax). Prints \
             `path:line:text` per matching line. Files ignored by .gitignore are skipped; binary \
             files are skipped.",
            json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string"},
                    "path": {"type": "string", "default": "."},
                    "glob": {"type": "string", "description": "Only search files matching this glob."},
                    "case_insensitive": {"type": "boolean", "default": false},
                    "max_matches": {"type": "integer", "minimum": 1, "default": 200}
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
        ),
        (
            BASH,
            "Run a shell command (`/bin/sh -c`) in the workspace, sandboxed: no network, no access \
             outside the workspace and a private temporary directory, stdin closed. Stdout and \
             stderr are combined; long output keeps its head and tail. Reports the exit code or \
             signal. The command and everything it started are killed at the timeout.",
            json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string"},
                    "timeout_ms": {"type": "integer", "minimum": 1, "description": "Default 120000, at most 600000."}
                },
                "required": ["command"],
                "additionalProperties": false
            }),
        ),
        (
            APPLY_PATCH,
            "Apply a unified diff (as produced by `git diff` or `diff -u`) to one or more files. \
             `--- a/path` / `+++ b/path` headers name the file (`/dev/null` to create or delete); \
             every hunk's context and removed lines must match the file exactly (a hunk may be \
             found at another line than its header says). All files change or none does.",
            json!({
                "type": "object",
                "properties": {
                    "patch": {"type": "string"}
                },
                "required": ["patch"],
                "additionalProperties": false
            }),
        ),
        (
            GIT,
            "Run git in the workspace's repository without a shell: one of `status`, `diff`, \
             `log`, `show`, `add`, `commit`, `branch`, `switch`. Hooks, the repository's \
             configured programs (fsmonitor, pagers, filters, diff drivers, signing) and remote \
             operations are disabled. `diff`: unstaged changes, or `staged: true` for the index, \
             or against `revision` (`HEAD~1`, `main..feature`). `log`: `max_count` commits \
             (default 20). `show`: one commit (default HEAD). `add`: `paths`, or `all: true`. \
             `commit`: `message` (required), optionally `all: true` or `paths`. `branch`: list, \
             or create `name` at `start_point`. `switch`: to `name`; `create: true` makes it \
             first (like `checkout -b`). Paths are literal and relative to the workspace.",
            json!({
                "type": "object",
                "properties": {
                    "subcommand": {"type": "string", "enum": ["status", "diff", "log", "show", "add", "commit", "branch", "switch"]},
                    "paths": {"type": "array", "items": {"type": "string"}, "description": "Literal paths in the workspace (status, diff, log, show, add, commit)."},
                    "staged": {"type": "boolean", "default": false, "description": "diff: the staged changes (index against HEAD)."},
                    "revision": {"type": "string", "description": "diff, log, show: a branch, tag, HEAD or commit id, optionally with ~N/^N, or a range A..B / A...B."},
                    "stat": {"type": "boolean", "default": false, "description": "diff, log, show: list changed files instead of the patch."},
                    "max_count": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "log: how many commits (default 20)."},
                    "message": {"type": "string", "description": "commit: the commit message."},
                    "all": {"type": "boolean", "default": false, "description": "add: stage every change; commit: include every tracked change."},
                    "name": {"type": "string", "description": "branch, switch: the branch name."},
                    "create": {"type": "boolean", "default": false, "description": "switch: create the branch first."},
                    "start_point": {"type": "string", "description": "branch, switch with create: where the new branch starts."}
                },
                "required": ["subcommand"],
                "additionalProperties": false
            }),
        ),
    ]
}

/// The definitions as sent over the tools channel and on to the model.
pub fn definitions() -> Vec<ToolDefinition> {
    definitions_json()
        .into_iter()
        .map(|(name, description, schema)| ToolDefinition {
            name: name.to_string(),
            description: description.to_string(),
            input_schema: schema.to_string(),
        })
        .collect()
}
