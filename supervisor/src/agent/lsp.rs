//! The lsp worker in the agent loop (issue 15): the `lsp_*` tools offered to the model, and the
//! diagnostics enrichment of file-tool results.
//!
//! After `write_file`, `edit_file` or `apply_patch` succeed in the tools worker, the lsp worker is
//! told which workspace files changed (it reads them itself: it has the workspace read-only and
//! sends `didChange`), then asked for their fresh diagnostics; errors and warnings are appended to
//! the tool's result as a `<diagnostics>` block (bounded, errors first), so the model's next turn
//! sees what its edit broke, and the run's record keeps it with the result. A language server
//! that is missing, crashed or slow never fails the edit: the block is then left out.
//!
//! The `lsp_*` tools are read-only (`hanzo_policy::defaults::READ_ONLY_TOOLS`) and go through the
//! same policy, approval, hooks and record as every tool; only their execution differs.

use super::deadline::{within, Deadlines};
use crate::worker::WorkerHandle;
use hanzo_ipc::roles::lsp::{
    self, FileDiagnostics, Location, LspFailure, LspProtocol, Position, Response,
};
use hanzo_ipc::roles::model::ToolDef;
use hanzo_ipc::roles::tools::ToolResult;
use hanzo_ipc::Role;
use serde_json::{json, Value};
use std::time::Duration;

pub const LSP_DIAGNOSTICS: &str = "lsp_diagnostics";
pub const LSP_DEFINITION: &str = "lsp_definition";
pub const LSP_REFERENCES: &str = "lsp_references";
pub const LSP_HOVER: &str = "lsp_hover";

/// Every lsp tool.
pub const LSP_TOOLS: &[&str] = &[LSP_DIAGNOSTICS, LSP_DEFINITION, LSP_REFERENCES, LSP_HOVER];

/// The file tools whose success is followed by a sync and the diagnostics block.
const EDITING_TOOLS: &[&str] = &["write_file", "edit_file", "apply_patch"];

/// Default bound of the diagnostics block appended to a file tool's result.
pub const DEFAULT_BLOCK_BYTES: usize = 4096;

/// The longest an lsp request may take (a cold pyright analyses a project first).
pub const LSP_DEADLINE: Duration = Duration::from_secs(90);

fn position_schema(extra: Value) -> String {
    let mut props = json!({
        "path": {"type": "string", "description": "File path, relative to the workspace."},
        "line": {"type": "integer", "minimum": 1, "description": "1-based line, as read_file numbers them."},
        "column": {"type": "integer", "minimum": 1, "description": "1-based column, in characters."},
    });
    if let (Some(p), Some(e)) = (props.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    json!({
        "type": "object",
        "properties": props,
        "required": ["path", "line", "column"],
        "additionalProperties": false,
    })
    .to_string()
}

/// The lsp tools as the model sees them.
pub fn tool_defs() -> Vec<ToolDef> {
    vec![
        ToolDef {
            name: LSP_DIAGNOSTICS.to_string(),
            description: "The language server's current errors and warnings for a file (type \
                          errors, undefined names, unused imports), as an IDE shows them."
                .to_string(),
            input_schema_json: json!({
                "type": "object",
                "properties": {"path": {"type": "string", "description": "File path, relative to the workspace."}},
                "required": ["path"],
                "additionalProperties": false,
            })
            .to_string(),
        },
        ToolDef {
            name: LSP_DEFINITION.to_string(),
            description: "Where the symbol at a position is defined (path:line:column), from \
                          the language server."
                .to_string(),
            input_schema_json: position_schema(json!({})),
        },
        ToolDef {
            name: LSP_REFERENCES.to_string(),
            description: "Every use of the symbol at a position in the workspace, from the \
                          language server."
                .to_string(),
            input_schema_json: position_schema(json!({
                "include_declaration": {"type": "boolean", "description": "Also list the declaration (default true)."}
            })),
        },
        ToolDef {
            name: LSP_HOVER.to_string(),
            description: "The type and documentation of the symbol at a position, from the \
                          language server."
                .to_string(),
            input_schema_json: position_schema(json!({})),
        },
    ]
}

pub fn is_lsp_tool(name: &str) -> bool {
    LSP_TOOLS.contains(&name)
}

fn failure_text(f: &LspFailure) -> String {
    f.message.clone()
}

async fn ask(lsp: &WorkerHandle<LspProtocol>, request: lsp::Request) -> Result<Response, String> {
    match within(
        Role::Lsp,
        "the language server request",
        LSP_DEADLINE,
        lsp.call_within(request, LSP_DEADLINE),
    )
    .await
    {
        Ok(Ok(Response::Failed(f))) => Err(failure_text(&f)),
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) => Err(format!("the lsp worker could not answer: {e}")),
        Err(m) => Err(m.to_string()),
    }
}

fn location_lines(locs: &[Location]) -> String {
    if locs.is_empty() {
        return "no locations".to_string();
    }
    locs.iter()
        .map(|l| format!("{}:{}:{}", l.path, l.range.start.line, l.range.start.column))
        .collect::<Vec<_>>()
        .join("\n")
}

fn diagnostics_text(d: &FileDiagnostics) -> String {
    if d.diagnostics.is_empty() {
        return format!("{}: no diagnostics ({:?})", d.path, d.freshness).to_lowercase();
    }
    d.diagnostics
        .iter()
        .map(|x| {
            format!(
                "{}:{}:{} {}{} {}",
                x.path,
                x.range.start.line,
                x.range.start.column,
                x.severity.as_str(),
                x.code
                    .as_ref()
                    .map(|c| format!(" [{c}]"))
                    .unwrap_or_default(),
                x.message
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Run one `lsp_*` tool call on the lsp worker.
pub async fn call_tool(
    lsp: &WorkerHandle<LspProtocol>,
    name: &str,
    input_json: &str,
) -> ToolResult {
    let input: Value = match serde_json::from_str(input_json) {
        Ok(v) => v,
        Err(e) => return ToolResult::err(format!("{name}: the input is not JSON: {e}")),
    };
    let Some(path) = input
        .get("path")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return ToolResult::err(format!("{name}: `path` is required"));
    };
    let num = |k: &str| {
        input
            .get(k)
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
    };
    let position = || match (num("line"), num("column")) {
        (Some(line), Some(column)) if line >= 1 && column >= 1 => Ok(Position::new(line, column)),
        _ => Err(ToolResult::err(format!(
            "{name}: `line` and `column` are required, 1-based"
        ))),
    };
    let request = match name {
        LSP_DIAGNOSTICS => lsp::Request::Diagnostics { paths: vec![path] },
        LSP_DEFINITION => match position() {
            Ok(position) => lsp::Request::Definition { path, position },
            Err(e) => return e,
        },
        LSP_REFERENCES => match position() {
            Ok(position) => lsp::Request::References {
                path,
                position,
                include_declaration: input
                    .get("include_declaration")
                    .and_then(Value::as_bool)
                    .unwrap_or(true),
            },
            Err(e) => return e,
        },
        LSP_HOVER => match position() {
            Ok(position) => lsp::Request::Hover { path, position },
            Err(e) => return e,
        },
        other => return ToolResult::err(format!("{other} is not an lsp tool")),
    };
    match ask(lsp, request).await {
        Ok(Response::Diagnostics(mut files)) => match files.pop() {
            Some(Ok(d)) => ToolResult::ok(diagnostics_text(&d)),
            Some(Err(f)) => ToolResult::err(failure_text(&f)),
            None => ToolResult::err("the lsp worker returned no diagnostics"),
        },
        Ok(Response::Locations(l)) => ToolResult::ok(location_lines(&l)),
        Ok(Response::Hover(Some(h))) => ToolResult::ok(h.text),
        Ok(Response::Hover(None)) => ToolResult::ok("nothing to show at this position"),
        Ok(other) => ToolResult::err(format!("unexpected reply from the lsp worker: {other:?}")),
        Err(e) => ToolResult::err(e),
    }
}

/// The workspace paths a successful file-tool call changed (`write_file`/`edit_file`: `path`;
/// `apply_patch`: the `---`/`+++` headers of the patch).
pub fn changed_paths(tool: &str, input_json: &str) -> Vec<String> {
    if !EDITING_TOOLS.contains(&tool) {
        return Vec::new();
    }
    let Ok(input) = serde_json::from_str::<Value>(input_json) else {
        return Vec::new();
    };
    if tool != "apply_patch" {
        return input
            .get("path")
            .and_then(Value::as_str)
            .map(|p| vec![p.to_string()])
            .unwrap_or_default();
    }
    let Some(patch) = input.get("patch").and_then(Value::as_str) else {
        return Vec::new();
    };
    let mut out: Vec<String> = Vec::new();
    for line in patch.lines() {
        let Some(rest) = line
            .strip_prefix("+++ ")
            .or_else(|| line.strip_prefix("--- "))
        else {
            continue;
        };
        let name = rest.split('\t').next().unwrap_or("").trim();
        if name.is_empty() || name == "/dev/null" {
            continue;
        }
        let name = name
            .strip_prefix("a/")
            .or_else(|| name.strip_prefix("b/"))
            .unwrap_or(name);
        if !out.iter().any(|p| p == name) {
            out.push(name.to_string());
        }
    }
    out
}

/// After a successful file-tool call: sync the changed files, and append their diagnostics
/// block (at most `limit_bytes`) to `result`. Nothing is appended when the call failed, changed
/// no file a server handles, or the language servers could not answer.
pub async fn enrich(
    lsp: &WorkerHandle<LspProtocol>,
    tool: &str,
    input_json: &str,
    result: &mut ToolResult,
    limit_bytes: usize,
) {
    if result.is_error || limit_bytes == 0 {
        return;
    }
    let paths = changed_paths(tool, input_json);
    if paths.is_empty() {
        return;
    }
    for p in &paths {
        if let Err(e) = ask(lsp, lsp::Request::FileChanged { path: p.clone() }).await {
            tracing::debug!(path = %p, "the lsp worker could not sync the file: {e}");
        }
    }
    let files = match ask(lsp, lsp::Request::Diagnostics { paths }).await {
        Ok(Response::Diagnostics(files)) => files,
        Ok(other) => {
            tracing::debug!("unexpected reply from the lsp worker: {other:?}");
            return;
        }
        Err(e) => {
            tracing::debug!("no diagnostics after the edit: {e}");
            return;
        }
    };
    let files: Vec<FileDiagnostics> = files.into_iter().filter_map(Result::ok).collect();
    let block = hanzo_lsp::format_diagnostics_block(&files, limit_bytes);
    if block.is_empty() {
        return;
    }
    if !result.output.is_empty() && !result.output.ends_with('\n') {
        result.output.push('\n');
    }
    result.output.push_str(&block);
}

/// Send the `lsp_servers` settings to the lsp worker (before the run's first call).
pub async fn configure(
    lsp: &WorkerHandle<LspProtocol>,
    servers_json: String,
    deadlines: &Deadlines,
) -> Result<(), String> {
    match within(
        Role::Lsp,
        "configuring the language servers",
        deadlines.request,
        lsp.call(lsp::Request::Configure { servers_json }),
    )
    .await
    {
        Ok(Ok(Response::Done)) => Ok(()),
        Ok(Ok(other)) => Err(format!("unexpected reply from the lsp worker: {other:?}")),
        Ok(Err(e)) => Err(e.to_string()),
        Err(m) => Err(m.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_paths_of_each_editing_tool() {
        assert_eq!(
            changed_paths("write_file", r#"{"path":"a.py","content":"x"}"#),
            vec!["a.py"]
        );
        assert_eq!(
            changed_paths("edit_file", r#"{"path":"src/b.ts","old":"x","new":"y"}"#),
            vec!["src/b.ts"]
        );
        let patch = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n--- /dev/null\n+++ b/new.py\t2024\n@@ -0,0 +1 @@\n+c\n";
        assert_eq!(
            changed_paths("apply_patch", &json!({ "patch": patch }).to_string()),
            vec!["x.py", "new.py"]
        );
        assert!(changed_paths("read_file", r#"{"path":"a.py"}"#).is_empty());
        assert!(changed_paths("write_file", "not json").is_empty());
    }

    #[test]
    fn lsp_tools_are_read_only_for_the_policy() {
        for t in LSP_TOOLS {
            assert!(
                hanzo_policy::defaults::is_read_only_call(t, &Value::Null),
                "{t}"
            );
        }
        let defs = tool_defs();
        assert_eq!(
            defs.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
            LSP_TOOLS
        );
        for d in defs {
            let schema: Value = serde_json::from_str(&d.input_schema_json).expect("schema");
            assert_eq!(schema["required"][0], "path", "{}", d.name);
        }
    }
}
