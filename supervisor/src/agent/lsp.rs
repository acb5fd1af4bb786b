//! The lsp worker in the agent loop (issue 15): the `lsp_*` tools offered to the model, and the
//! diagnostics enrichment of file-tool results.
//!
//! After `write_file`, `edit_file` or `apply_patch` succeed in the tools worker, the lsp worker is
//! told which workspace files changed and asked for their fresh diagnostics in one request
//! (`ChangedDiagnostics`: it reads the files itself — it has the workspace read-only — and sends
//! `didChange` and the diagnostics request together); errors and warnings are appended to
//! the tool's result as a `<diagnostics>` block (bounded, errors first), so the model's next turn
//! sees what its edit broke, and the run's record keeps it with the result. A language server
//! that is missing, crashed or slow never fails the edit: the block is then left out.
//!
//! The `lsp_*` tools are read-only (`hanzo_policy::defaults::READ_ONLY_TOOLS`) and go through the
//! same policy, approval, hooks and record as every tool; only their execution differs.

use super::deadline::{within, Deadlines};
use crate::worker::WorkerHandle;
use hanzo_ipc::roles::lsp::{
    self, FileDiagnostics, Location, LspFailure, LspFailureKind, LspProtocol, Position, Response,
};
use hanzo_ipc::roles::model::ToolDef;
use hanzo_ipc::roles::tools::ToolResult;
use hanzo_ipc::Role;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The tool that returns a file's current diagnostics.
pub const LSP_DIAGNOSTICS: &str = "lsp_diagnostics";
/// The tool that finds where the symbol at a position is defined.
pub const LSP_DEFINITION: &str = "lsp_definition";
/// The tool that lists the uses of the symbol at a position.
pub const LSP_REFERENCES: &str = "lsp_references";
/// The tool that returns the type and documentation of the symbol at a position.
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

/// Whether `name` is one of the lsp tools, which the lsp worker answers instead of the tools
/// worker.
pub fn is_lsp_tool(name: &str) -> bool {
    LSP_TOOLS.contains(&name)
}

fn failure_text(f: &LspFailure) -> String {
    f.message.clone()
}

async fn ask(lsp: &WorkerHandle<LspProtocol>, request: lsp::Request) -> Result<Response, String> {
    let (response, _) = ask_answered_by(lsp, request).await?;
    response
}

/// [`ask`], also saying which worker process answered (see [`WorkerHandle::call_answered_by`]).
/// The outer `Err` is a failed exchange; the inner result is the worker's answer.
async fn ask_answered_by(
    lsp: &WorkerHandle<LspProtocol>,
    request: lsp::Request,
) -> Result<(Result<Response, String>, u64), String> {
    match within(
        Role::Lsp,
        "the language server request",
        LSP_DEADLINE,
        lsp.call_answered_by(request, LSP_DEADLINE),
    )
    .await
    {
        Ok(Ok((Response::Failed(f), by))) => Ok((Err(failure_text(&f)), by)),
        Ok(Ok((r, by))) => Ok((Ok(r), by)),
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
        let how = match d.freshness {
            lsp::Freshness::Confirmed => "confirmed by the server",
            lsp::Freshness::Settled => "settled",
            lsp::Freshness::Unconfirmed => "not confirmed for the current content",
        };
        return format!("{}: no errors or warnings ({how})", d.path);
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

/// The lsp request of one `lsp_*` tool call, or the result that refuses its input.
fn tool_request(name: &str, input_json: &str) -> Result<lsp::Request, ToolResult> {
    let input: Value = serde_json::from_str(input_json)
        .map_err(|e| ToolResult::err(format!("{name}: the input is not JSON: {e}")))?;
    let path = input
        .get("path")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| ToolResult::err(format!("{name}: `path` is required")))?;
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
    Ok(match name {
        LSP_DIAGNOSTICS => lsp::Request::Diagnostics { paths: vec![path] },
        LSP_DEFINITION => lsp::Request::Definition {
            path,
            position: position()?,
        },
        LSP_REFERENCES => lsp::Request::References {
            path,
            position: position()?,
            include_declaration: input
                .get("include_declaration")
                .and_then(Value::as_bool)
                .unwrap_or(true),
        },
        LSP_HOVER => lsp::Request::Hover {
            path,
            position: position()?,
        },
        other => return Err(ToolResult::err(format!("{other} is not an lsp tool"))),
    })
}

/// The lsp worker as the agent loop uses it: the handle, the `lsp_servers` table (sent once to
/// each worker process, so a restarted worker gets it back before its first call), and the bound
/// of the diagnostics block.
pub struct LspLink<'a> {
    /// The lsp worker's channel.
    pub handle: &'a WorkerHandle<LspProtocol>,
    /// The settings' `lsp_servers` table, as JSON text.
    pub servers_json: String,
    /// Most bytes of the diagnostics block appended to a file tool's result (0: none).
    pub block_bytes: usize,
    /// The worker process (its generation) that last acknowledged `servers_json`; 0: none yet.
    /// Calls to that process go without the `Configure` exchange; a restarted worker (a new
    /// generation) is configured again before it is asked anything.
    configured: AtomicU64,
}

impl<'a> LspLink<'a> {
    /// A link over `handle` with `servers_json` and the default block bound
    /// ([`DEFAULT_BLOCK_BYTES`]).
    pub fn new(handle: &'a WorkerHandle<LspProtocol>, servers_json: String) -> Self {
        LspLink {
            handle,
            servers_json,
            block_bytes: DEFAULT_BLOCK_BYTES,
            configured: AtomicU64::new(0),
        }
    }

    /// Send the `lsp_servers` table (before the run's first call, and again to every process
    /// of the worker that has not acknowledged it).
    pub async fn configure(&self, deadlines: &Deadlines) -> Result<(), String> {
        match within(
            Role::Lsp,
            "configuring the language servers",
            deadlines.request,
            self.handle.call_answered_by(
                lsp::Request::Configure {
                    servers_json: self.servers_json.clone(),
                },
                deadlines.request,
            ),
        )
        .await
        {
            Ok(Ok((Response::Done, by))) => {
                self.configured.store(by, Ordering::Release);
                Ok(())
            }
            Ok(Ok((Response::Failed(f), _))) => Err(f.message),
            Ok(Ok((other, _))) => Err(format!("unexpected reply from the lsp worker: {other:?}")),
            Ok(Err(e)) => Err(e.to_string()),
            Err(m) => Err(m.to_string()),
        }
    }

    /// The worker process (its [`crate::worker::WorkerInfo::generation`]) that last
    /// acknowledged the table; 0 when none has.
    pub fn configured_generation(&self) -> u64 {
        self.configured.load(Ordering::Acquire)
    }

    /// Ask the worker, configuring it first when the running process has not acknowledged the
    /// table (each `Configure` is a round trip more per call). An answer from a process that
    /// started between that check and the call, and so never saw the table, is not used: that
    /// process is configured, and asked again.
    async fn ask(&self, request: lsp::Request) -> Result<Response, String> {
        let running = self.handle.info().map(|i| i.generation);
        if running.is_none() || running != Some(self.configured.load(Ordering::Acquire)) {
            self.configure(&Deadlines::default()).await?;
        }
        let (answer, by) = ask_answered_by(self.handle, request.clone()).await?;
        if by == self.configured.load(Ordering::Acquire) {
            return answer;
        }
        self.configure(&Deadlines::default()).await?;
        ask(self.handle, request).await
    }

    /// Run one `lsp_*` tool call on the lsp worker.
    pub async fn call_tool(&self, name: &str, input_json: &str) -> ToolResult {
        let request = match tool_request(name, input_json) {
            Ok(r) => r,
            Err(e) => return e,
        };
        match self.ask(request).await {
            Ok(Response::Diagnostics(mut files)) => match files.pop() {
                Some(Ok(d)) => ToolResult::ok(diagnostics_text(&d)),
                Some(Err(f)) => ToolResult::err(failure_text(&f)),
                None => ToolResult::err("the lsp worker returned no diagnostics"),
            },
            Ok(Response::Locations(l)) => ToolResult::ok(location_lines(&l)),
            Ok(Response::Hover(Some(h))) => ToolResult::ok(h.text),
            Ok(Response::Hover(None)) => ToolResult::ok("nothing to show at this position"),
            Ok(other) => {
                ToolResult::err(format!("unexpected reply from the lsp worker: {other:?}"))
            }
            Err(e) => ToolResult::err(e),
        }
    }

    /// After a successful file-tool call: sync the changed files, and append their diagnostics
    /// block (at most `block_bytes`) to `result`. Nothing is appended when the call failed or
    /// changed no file a server handles; a server that is not installed is named once (the
    /// worker reports it missing once, unavailable after); any other failure of the language
    /// servers leaves the result as it is.
    pub async fn enrich(&self, tool: &str, input_json: &str, result: &mut ToolResult) {
        if result.is_error {
            return;
        }
        if let Some(path) = read_path(tool, input_json) {
            // The first read of a file starts its server, so its answers are ready by the time
            // the model asks (the worker answers at once and starts it in the background).
            if let Err(e) = self.ask(lsp::Request::Touch { path }).await {
                tracing::debug!("the lsp worker could not warm up a server: {e}");
            }
            return;
        }
        if self.block_bytes == 0 {
            return;
        }
        let paths = changed_paths(tool, input_json);
        if paths.is_empty() {
            return;
        }
        // One exchange: the worker syncs every path and answers their diagnostics, and each
        // server gets the change and the diagnostics request together.
        let files = match self.ask(lsp::Request::ChangedDiagnostics { paths }).await {
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
        let mut notes = Vec::new();
        let mut ok = Vec::new();
        for f in files {
            match f {
                Ok(d) => ok.push(d),
                Err(f) if f.kind == LspFailureKind::ServerMissing => {
                    notes.push(format!("[no diagnostics: {}]", f.message))
                }
                Err(f) => tracing::debug!("no diagnostics: {}", f.message),
            }
        }
        let mut block = hanzo_lsp::format_diagnostics_block(&ok, self.block_bytes);
        for n in notes {
            if !block.is_empty() {
                block.push('\n');
            }
            block.push_str(&hanzo_lsp::sanitize::one_line(&n));
        }
        if block.is_empty() {
            return;
        }
        if !result.output.is_empty() && !result.output.ends_with('\n') {
            result.output.push('\n');
        }
        result.output.push_str(&block);
    }
}

/// The file a successful `read_file` call read, whose server the read warms up.
pub fn read_path(tool: &str, input_json: &str) -> Option<String> {
    if tool != "read_file" {
        return None;
    }
    let input = serde_json::from_str::<Value>(input_json).ok()?;
    input.get("path")?.as_str().map(str::to_string)
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

/// Prepares the `lsp_servers` table (`servers_json`) for the lsp worker and opens the lsp role
/// to what its servers need; returns the table to send the worker (`lsp::Request::Configure`).
///
/// - A server found on `PATH` as a version manager's stand-in (a rustup proxy, a pyenv or asdf
///   shim, `hanzo_lsp::shims`) is resolved to the program the manager would run, with the
///   start environment's variables, and the table sent names that program: a stand-in cannot
///   run in the sandbox. One that cannot be resolved is not started (a warning says why).
/// - The installation prefixes of the servers installed outside the system directories, such as
///   under `$HOME`, are granted read-only (`ProfileContext::toolchains`; `hanzo_lsp::prefix`).
///   The lsp worker's sandbox is fixed at its start, so this runs before the supervisor starts
///   it. A server whose prefix would be `$HOME`, a directory of secrets or the workspace's
///   parent is not opened; a warning names the path (and the worker refuses it, naming the
///   path, when a file of its language is used).
pub fn prepare_servers(
    ctx: &mut hanzo_policy::profile::ProfileContext,
    servers_json: &str,
    env: &crate::secrets::StartEnv,
) -> String {
    let var = |name: &str| {
        env.vars
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .filter(|v| !v.is_empty())
    };
    let Some(workspace) = ctx.workspace.clone() else {
        return servers_json.to_string();
    };
    let mut entries: hanzo_lsp::LspServers = if servers_json.trim().is_empty() {
        hanzo_lsp::LspServers::new()
    } else {
        match serde_json::from_str(servers_json) {
            Ok(e) => e,
            // The worker reports a bad table on Configure.
            Err(_) => return servers_json.to_string(),
        }
    };
    let Ok(registry) = hanzo_lsp::Registry::with_settings(&entries) else {
        return servers_json.to_string();
    };
    let shim_env = hanzo_lsp::shims::ShimEnv::from_vars(var);
    let warn = |server: &str, why: &str| {
        // Paths come from the filesystem (link targets included) and names from settings: no
        // control character of theirs reaches the terminal.
        eprintln!(
            "warning: language server {} is not started: {}",
            crate::term::sanitize_line_for_terminal(server),
            crate::term::sanitize_line_for_terminal(why)
        );
    };
    let mut unresolved = Vec::new();
    for spec in registry.servers() {
        let Some(program) =
            hanzo_lsp::registry::resolve_program(&spec.command, &shim_env.search_path, &workspace)
        else {
            continue;
        };
        match hanzo_lsp::shims::resolve(&program, &workspace, &shim_env) {
            Ok(None) => {}
            Ok(Some(r)) => {
                tracing::info!(
                    server = %spec.name,
                    manager = %r.manager,
                    version = %r.version,
                    from = %r.source,
                    program = %r.program.display(),
                    "language server resolved through its version manager"
                );
                entries.entry(spec.name.clone()).or_default().command =
                    Some(r.program.display().to_string());
            }
            // Not installed for the chosen version (rustup's proxies exist for components
            // never installed): like a missing server, reported when a file of its language is
            // used, not at every start. A refused name is a warning now.
            Err(e @ hanzo_lsp::shims::ShimError::Refused { .. }) => {
                warn(&spec.name, &e.to_string());
                unresolved.push(spec.name.clone());
            }
            Err(e) => {
                tracing::info!(server = %spec.name, "language server not started: {e}");
                unresolved.push(spec.name.clone());
            }
        }
    }
    // Grants for what will run: the resolved programs; nothing for a stand-in left unresolved
    // (the worker refuses it, as its prefix was not opened).
    let mut for_grants = entries.clone();
    for name in &unresolved {
        for_grants.entry(name.clone()).or_default().disabled = Some(true);
    }
    let rules = hanzo_lsp::prefix::PrefixRules {
        home: var("HOME").map(|h| {
            let h = std::path::PathBuf::from(h);
            h.canonicalize().unwrap_or(h)
        }),
        workspace,
        hidden: ctx.hidden.clone(),
        search_path: shim_env.search_path.clone(),
    };
    if let Ok(registry) = hanzo_lsp::Registry::with_settings(&for_grants) {
        let (granted, refused) = hanzo_lsp::prefix::grants_for(&registry, &rules);
        for (server, why) in refused {
            warn(&server, &why.to_string());
        }
        ctx.toolchains = granted;
    }
    serde_json::to_string(&entries).unwrap_or_else(|_| servers_json.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_read_file_call_warms_up_its_server() {
        assert_eq!(
            read_path("read_file", r#"{"path":"src/app.py"}"#).as_deref(),
            Some("src/app.py")
        );
        assert_eq!(read_path("write_file", r#"{"path":"a.py"}"#), None);
        assert_eq!(read_path("read_file", r#"{"path":7}"#), None);
        assert_eq!(read_path("read_file", "not json"), None);
    }

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
    fn tool_inputs_are_checked_before_the_worker_sees_them() {
        let bad = |name: &str, input: &str| match tool_request(name, input) {
            Err(r) => r.error.unwrap_or_default(),
            Ok(r) => panic!("accepted {r:?}"),
        };
        assert!(bad(LSP_HOVER, "{").contains("not JSON"));
        assert!(bad(LSP_HOVER, r#"{"line": 1, "column": 1}"#).contains("`path` is required"));
        assert!(bad(
            LSP_DEFINITION,
            r#"{"path": "a.py", "line": 0, "column": 1}"#
        )
        .contains("1-based"));
        assert!(bad(LSP_REFERENCES, r#"{"path": "a.py", "line": 1}"#).contains("1-based"));
        assert!(bad("lsp_rename", r#"{"path": "a.py"}"#).contains("not an lsp tool"));
        assert_eq!(
            tool_request(
                LSP_REFERENCES,
                r#"{"path": "a.py", "line": 3, "column": 7, "include_declaration": false}"#
            )
            .expect("valid"),
            lsp::Request::References {
                path: "a.py".into(),
                position: Position::new(3, 7),
                include_declaration: false
            }
        );
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

    #[test]
    fn stand_ins_are_resolved_before_the_worker_starts_and_unresolved_ones_open_nothing() {
        use std::os::unix::fs::{symlink, PermissionsExt as _};
        let dir = tempfile::tempdir().expect("tmp");
        let home = dir.path().canonicalize().expect("home");
        let ws = home.join("src/project");
        std::fs::create_dir_all(&ws).expect("ws");
        let exe = |p: &std::path::Path| {
            std::fs::create_dir_all(p.parent().expect("dir")).expect("mkdir");
            std::fs::write(p, "#!/bin/sh\n").expect("write");
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        };
        // rust-analyzer through a rustup proxy; pyright-langserver through a pyenv shim whose
        // chosen version does not have it.
        exe(&home.join(".cargo/bin/rustup"));
        symlink("rustup", home.join(".cargo/bin/rust-analyzer")).expect("proxy");
        let toolchain = home.join(".rustup/toolchains/1.95.0-x86_64-unknown-linux-gnu");
        exe(&toolchain.join("bin/rust-analyzer"));
        std::fs::write(
            home.join(".rustup/settings.toml"),
            "default_toolchain = \"1.95.0-x86_64-unknown-linux-gnu\"\n",
        )
        .expect("settings");
        let shim = home.join(".pyenv/shims/pyright-langserver");
        std::fs::create_dir_all(shim.parent().expect("dir")).expect("mkdir");
        std::fs::write(
            &shim,
            "#!/usr/bin/env bash\nexec \"/x/libexec/pyenv\" exec \"$p\"\n",
        )
        .expect("shim");
        std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::create_dir_all(home.join(".pyenv/versions/3.12.1/bin")).expect("mkdir");
        std::fs::write(home.join(".pyenv/version"), "3.12.1\n").expect("version");
        std::fs::write(ws.join("Cargo.toml"), "[package]\nname = \"x\"\n").expect("cargo");
        let env = crate::secrets::StartEnv {
            vars: vec![
                ("HOME".into(), home.display().to_string()),
                (
                    "PATH".into(),
                    format!(
                        "{}:{}:/usr/bin:/bin",
                        home.join(".cargo/bin").display(),
                        home.join(".pyenv/shims").display()
                    ),
                ),
            ],
        };
        let mut ctx = hanzo_policy::profile::ProfileContext {
            workspace: Some(ws.clone()),
            ..Default::default()
        };
        let table = prepare_servers(&mut ctx, "{}", &env);
        let table: hanzo_lsp::LspServers = serde_json::from_str(&table).expect("json");
        assert_eq!(
            table
                .get("rust-analyzer")
                .and_then(|e| e.command.clone())
                .as_deref(),
            Some(toolchain.join("bin/rust-analyzer").to_str().expect("utf-8"))
        );
        // The unresolved shim keeps its name (the worker refuses it) and opens nothing: not
        // `~/.pyenv/shims`, not `~/.cargo/bin`.
        assert!(!table.contains_key("pyright"), "{table:?}");
        assert_eq!(ctx.toolchains, vec![toolchain]);
    }
}
