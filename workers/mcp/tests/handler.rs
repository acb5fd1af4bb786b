//! The mcp worker's handler (`hanzo_mcp::worker::McpHandler`) with real stdio servers, started
//! through a local sandboxed runner (`hanzo_tools::runner::Runner::local`, the profile the
//! worker's launcher applies): one server whose tools cannot be offered must not take the other
//! servers' tools down with it.

use hanzo_ipc::roles::mcp::{
    McpConfig, McpFilesystem, McpServerConfig, McpServerProfile, McpServerState, McpToolCall,
    McpTransport,
};
use hanzo_ipc::Role;
use hanzo_mcp::worker::McpHandler;
use hanzo_policy::profile::ProfileContext;
use hanzo_tools::runner::Runner;
use std::path::PathBuf;
use std::sync::Arc;

/// A stdio MCP server listing the tools named on its command line; calling `fix` drops the
/// second tool and announces `notifications/tools/list_changed`; every other call answers its
/// own name.
const SERVER: &str = r#"
import json, sys
TOOLS = sys.argv[1:]
def send(m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    m = json.loads(line); rid = m.get("id"); method = m.get("method")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": m["params"]["protocolVersion"],
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "names", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [
            {"name": t, "inputSchema": {"type": "object"}} for t in TOOLS]}})
    elif method == "tools/call":
        name = m["params"]["name"]
        if name == "fix":
            del TOOLS[1]
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "content": [{"type": "text", "text": name}]}})
    elif rid is not None and method is not None:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": method}})
"#;

struct Setup {
    _root: tempfile::TempDir,
    ws: PathBuf,
    handler: McpHandler,
}

fn setup() -> Setup {
    let root = tempfile::Builder::new()
        .prefix("hanzo-mcp-handler")
        .tempdir()
        .expect("tempdir");
    let ws = root.path().join("ws");
    let run = root.path().join("run");
    for d in [&ws, &run] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    let (ws, run) = (
        ws.canonicalize().expect("ws"),
        run.canonicalize().expect("run"),
    );
    std::fs::write(ws.join("server.py"), SERVER).expect("server script");
    let ctx = ProfileContext {
        workspace: Some(ws.clone()),
        run_dir: Some(run.clone()),
        ..ProfileContext::default()
    };
    let runner = Arc::new(Runner::local(Role::Mcp, ctx));
    let handler = McpHandler::new(Ok(runner), Some(ws.clone()), Some(run), None);
    Setup {
        _root: root,
        ws,
        handler,
    }
}

fn server(ws: &std::path::Path, name: &str, tools: &[&str]) -> McpServerConfig {
    let mut args = vec![ws.join("server.py").display().to_string()];
    args.extend(tools.iter().map(|t| t.to_string()));
    McpServerConfig {
        name: name.to_string(),
        transport: McpTransport::Stdio {
            command: "/usr/bin/python3".into(),
            args,
            env: Vec::new(),
            cwd: None,
            profile: McpServerProfile {
                filesystem: McpFilesystem::WorkspaceRo,
                extra_read: Vec::new(),
                network: false,
                egress_address: None,
            },
        },
        initialize_timeout_ms: 30_000,
        call_timeout_ms: 30_000,
        elicitation_defaults: false,
        max_result_bytes: None,
    }
}

/// What the handler says of `bad`'s two colliding tools.
const COLLISION: &str = r#"tools "a.b" and "a b" both become "mcp__bad__a_b""#;

#[tokio::test]
async fn a_server_whose_tool_names_collide_contributes_nothing_and_the_others_are_listed() {
    let s = setup();
    let statuses = s
        .handler
        .configure(McpConfig {
            servers: vec![
                server(&s.ws, "good", &["echo", "other"]),
                server(&s.ws, "bad", &["a.b", "a b", "fix"]),
            ],
            roots: vec![s.ws.display().to_string()],
            max_result_bytes: 1 << 20,
            max_message_bytes: 1 << 20,
        })
        .await;
    let status = |name: &str| {
        s.handler
            .statuses()
            .into_iter()
            .find(|st| st.name == name)
            .unwrap_or_else(|| panic!("no {name}: {statuses:?}"))
    };
    // Both started: the collision is in the tool list, not in the server.
    let bad = status("bad");
    assert_eq!(bad.state, McpServerState::Ready, "{statuses:?}");
    let problem = bad.tools_problem.clone().unwrap_or_default();
    assert!(problem.contains(COLLISION), "{bad:?}");
    assert_eq!(status("good").tools_problem, None);

    // The listing of every server has the good server's tools and none of the bad one's.
    let all = s.handler.tools(None).await.expect("the listing");
    let mut names: Vec<&str> = all.iter().map(|t| t.qualified_name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["mcp__good__echo", "mcp__good__other"]);
    // Asked for alone, the bad server says why it has nothing to offer.
    let why = s.handler.tools(Some("bad")).await.unwrap_err();
    assert!(why.message.contains(COLLISION), "{why:?}");

    // Once it lists distinct names (after `list_changed`), its tools are offered again and its
    // status no longer carries the problem.
    let fixed = s
        .handler
        .call(
            McpToolCall {
                server: "bad".into(),
                tool: "fix".into(),
                arguments_json: "{}".into(),
                timeout_ms: None,
            },
            None,
        )
        .await;
    assert!(
        matches!(fixed, hanzo_ipc::roles::mcp::McpCallOutcome::Allowed { .. }),
        "{fixed:?}"
    );
    let all = s.handler.tools(None).await.expect("the listing");
    let mut names: Vec<&str> = all.iter().map(|t| t.qualified_name.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "mcp__bad__a_b",
            "mcp__bad__fix",
            "mcp__good__echo",
            "mcp__good__other"
        ]
    );
    assert_eq!(status("bad").tools_problem, None);
    s.handler.shutdown().await;
}

/// Tool names are the server's: a collision between names holding terminal control sequences
/// is reported with them escaped (the report reaches `mcp list` and the supervisor's stderr).
#[tokio::test]
async fn a_collision_report_escapes_control_characters_in_the_names() {
    let s = setup();
    s.handler
        .configure(McpConfig {
            servers: vec![server(&s.ws, "esc", &["t\u{1b}[2J", "t\u{7}[2J"])],
            roots: Vec::new(),
            max_result_bytes: 1 << 20,
            max_message_bytes: 1 << 20,
        })
        .await;
    let status = s.handler.statuses().remove(0);
    assert_eq!(status.state, McpServerState::Ready, "{status:?}");
    let problem = status.tools_problem.expect("a collision");
    assert!(
        problem.contains(r#"tools "t\u{1b}[2J" and "t\u{7}[2J" both become "mcp__esc__t__2J""#),
        "{problem}"
    );
    assert!(!problem.chars().any(char::is_control), "{problem:?}");
    assert!(s.handler.tools(None).await.expect("the listing").is_empty());
    s.handler.shutdown().await;
}
