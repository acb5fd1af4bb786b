//! The MCP bridge end to end: the supervisor's tree starts the real mcp worker (confined, with
//! its command launcher), which starts real MCP servers from the npm registry
//! (`test-deps/mcp`) under their sandbox profiles. Each test attacks or exercises one way in or
//! out of a server.

mod common;

use hanzo_dev::tree::Supervisor;
use hanzo_ipc::channel::StreamPart;
use hanzo_ipc::roles::mcp::{
    EnvValue, Item, McpCallOutcome, McpConfig, McpFailureKind, McpFilesystem, McpServerConfig,
    McpServerProfile, McpServerState, McpServerStatus, McpToolCall, McpTransport, Request,
    Response,
};
use hanzo_ipc::Role;
use std::path::{Path, PathBuf};
use std::time::Duration;

const CANARY: &str = "hanzo-mcp-canary-6f1d2c";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the supervisor crate lives at the repository root")
        .to_path_buf()
}

/// `test-deps/mcp/node_modules`; fails (never skips) when the peers are not installed.
fn node_modules() -> PathBuf {
    let dir = repo_root().join("test-deps/mcp/node_modules");
    assert!(
        dir.join("@modelcontextprotocol/server-everything/dist/index.js")
            .is_file()
            && dir.join("node/bin/node").is_file(),
        "the MCP test peers are missing under {}: run ./scripts/setup.sh",
        dir.display()
    );
    dir
}

/// A workspace holding a hard-linked copy of the peers (`.peers/`): a server's sandbox reads
/// the system, the workspace and its run directory only, and a command's extra read paths
/// cannot reach beyond its launcher's (see SECURITY.md), so the peers must be inside.
struct Bench {
    workspace: tempfile::TempDir,
    outside: tempfile::TempDir,
    sup: Supervisor,
    _run: hanzo_dev::startup::RunDir,
}

impl Bench {
    async fn start() -> Bench {
        // The workers' stderr arrives as log lines: shown when a test fails.
        let _ = tracing_subscriber::fmt()
            .with_env_filter("warn")
            .with_test_writer()
            .try_init();
        let src = node_modules();
        let workspace = tempfile::tempdir().expect("workspace");
        let peers = workspace.path().join(".peers/node_modules");
        std::fs::create_dir(workspace.path().join(".peers")).expect("peers dir");
        let linked = std::process::Command::new("cp")
            .arg("-al")
            .arg(&src)
            .arg(&peers)
            .status()
            .expect("cp -al");
        assert!(
            linked.success(),
            "hard-linking the peers into the workspace"
        );
        let outside = tempfile::tempdir().expect("outside");
        std::fs::write(outside.path().join("secret.txt"), CANARY).expect("canary");
        std::fs::write(workspace.path().join("inside.txt"), "inside the workspace").unwrap();
        let (mut cfg, run) = common::tree_config(workspace.path(), common::path_only());
        cfg.roles = Some(vec![Role::Mcp]);
        let sup = Supervisor::start(cfg).await.expect("supervisor starts");
        tokio::time::timeout(Duration::from_secs(60), sup.wait_ready())
            .await
            .expect("mcp worker ready in time")
            .expect("mcp worker attested");
        Bench {
            workspace,
            outside,
            sup,
            _run: run,
        }
    }

    fn peers(&self) -> PathBuf {
        self.workspace.path().join(".peers/node_modules")
    }

    fn stdio(
        &self,
        name: &str,
        script: &str,
        args: &[String],
        fs: McpFilesystem,
    ) -> McpServerConfig {
        let peers = self.peers();
        let mut all = vec![peers.join(script).display().to_string()];
        all.extend(args.iter().cloned());
        McpServerConfig {
            name: name.into(),
            transport: McpTransport::Stdio {
                command: peers.join("node/bin/node").display().to_string(),
                args: all,
                env: vec![("LANG".into(), EnvValue::Plain("C.UTF-8".into()))],
                cwd: None,
                profile: McpServerProfile {
                    filesystem: fs,
                    extra_read: Vec::new(),
                    network: false,
                },
            },
            initialize_timeout_ms: 30_000,
            call_timeout_ms: 30_000,
            elicitation_defaults: false,
        }
    }

    fn everything(&self) -> McpServerConfig {
        self.stdio(
            "everything",
            "@modelcontextprotocol/server-everything/dist/index.js",
            &["stdio".into()],
            McpFilesystem::WorkspaceRo,
        )
    }

    fn filesystem(&self, dirs: &[&Path]) -> McpServerConfig {
        self.stdio(
            "fs",
            "@modelcontextprotocol/server-filesystem/dist/index.js",
            &dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>(),
            McpFilesystem::WorkspaceRo,
        )
    }

    async fn configure(&self, servers: Vec<McpServerConfig>) -> Vec<McpServerStatus> {
        let req = Request::Configure(McpConfig {
            servers,
            roots: vec![self.workspace.path().display().to_string()],
            max_result_bytes: 64 * 1024,
            max_message_bytes: 8 << 20,
        });
        match self.sup.mcp.call_within(req, Duration::from_secs(90)).await {
            Ok(Response::Servers(s)) => s,
            other => panic!("configure: {other:?}"),
        }
    }

    /// A call, with the progress items it streamed.
    async fn call(
        &self,
        server: &str,
        tool: &str,
        args: serde_json::Value,
    ) -> (McpCallOutcome, Vec<f64>) {
        let mut stream = self
            .sup
            .mcp
            .call_stream(Request::CallTool(McpToolCall {
                server: server.into(),
                tool: tool.into(),
                arguments_json: args.to_string(),
                timeout_ms: None,
            }))
            .await
            .expect("call sent");
        let mut progress = Vec::new();
        loop {
            match tokio::time::timeout(Duration::from_secs(60), stream.next())
                .await
                .expect("the call ends in time")
            {
                Some(Ok(StreamPart::Item(Item::Progress { progress: p, .. }))) => progress.push(p),
                Some(Ok(StreamPart::Item(other))) => panic!("unexpected item {other:?}"),
                Some(Ok(StreamPart::Done(Response::Call(o)))) => return (o, progress),
                other => panic!("call {tool}: {other:?}"),
            }
        }
    }
}

fn text(outcome: &McpCallOutcome) -> String {
    match outcome {
        McpCallOutcome::Allowed { result_json, .. } => {
            let v: serde_json::Value = serde_json::from_str(result_json).expect("result JSON");
            v["content"]
                .as_array()
                .map(|c| {
                    c.iter()
                        .filter_map(|b| b["text"].as_str())
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .unwrap_or_default()
        }
        other => panic!("expected an allowed result, got {other:?}"),
    }
}

fn is_tool_error(outcome: &McpCallOutcome) -> bool {
    matches!(outcome, McpCallOutcome::Allowed { is_error: true, .. })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_over_stdio_through_the_sandboxed_worker_lists_calls_and_streams_progress() {
    let b = Bench::start().await;
    let statuses = b.configure(vec![b.everything()]).await;
    assert_eq!(statuses.len(), 1);
    assert_eq!(statuses[0].state, McpServerState::Ready, "{statuses:?}");
    assert_eq!(statuses[0].transport, "stdio");
    assert!(statuses[0].tool_count > 3, "{statuses:?}");

    let tools = match b
        .sup
        .mcp
        .call(Request::ListTools { server: None })
        .await
        .expect("list tools")
    {
        Response::Tools(t) => t,
        other => panic!("{other:?}"),
    };
    let echo = tools
        .iter()
        .find(|t| t.tool == "echo")
        .expect("server-everything has echo");
    assert_eq!(echo.qualified_name, "mcp__everything__echo");
    let schema: serde_json::Value = serde_json::from_str(&echo.input_schema_json).unwrap();
    assert_eq!(schema["type"], "object");

    let (sum, _) = b
        .call(
            "everything",
            "get-sum",
            serde_json::json!({"a": 19, "b": 23}),
        )
        .await;
    assert!(text(&sum).contains("42"), "{sum:?}");

    let (long, progress) = b
        .call(
            "everything",
            "trigger-long-running-operation",
            serde_json::json!({"duration": 0.4, "steps": 4}),
        )
        .await;
    assert!(!is_tool_error(&long), "{long:?}");
    assert_eq!(progress, vec![1.0, 2.0, 3.0, 4.0]);

    let (unknown, _) = b
        .call("everything", "no-such-tool", serde_json::json!({}))
        .await;
    assert!(
        matches!(
            unknown,
            McpCallOutcome::Failed {
                kind: McpFailureKind::UnknownTool,
                ..
            }
        ),
        "{unknown:?}"
    );
    let (nobody, _) = b.call("nobody", "echo", serde_json::json!({})).await;
    assert!(
        matches!(
            nobody,
            McpCallOutcome::Failed {
                kind: McpFailureKind::UnknownServer,
                ..
            }
        ),
        "{nobody:?}"
    );
    b.sup.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_ro_filesystem_server_lists_the_workspace_but_cannot_read_outside_or_write() {
    let b = Bench::start().await;
    // The server itself is told both directories are allowed: only the sandbox stands between
    // it and the canary.
    let statuses = b
        .configure(vec![b.filesystem(&[b.workspace.path(), b.outside.path()])])
        .await;
    assert_eq!(statuses[0].state, McpServerState::Ready, "{statuses:?}");

    let (listing, _) = b
        .call(
            "fs",
            "list_directory",
            serde_json::json!({"path": b.workspace.path()}),
        )
        .await;
    assert!(text(&listing).contains("inside.txt"), "{listing:?}");

    let (inside, _) = b
        .call(
            "fs",
            "read_text_file",
            serde_json::json!({"path": b.workspace.path().join("inside.txt")}),
        )
        .await;
    assert!(text(&inside).contains("inside the workspace"));

    let (outside, _) = b
        .call(
            "fs",
            "read_text_file",
            serde_json::json!({"path": b.outside.path().join("secret.txt")}),
        )
        .await;
    assert!(is_tool_error(&outside), "{outside:?}");
    let McpCallOutcome::Allowed { result_json, .. } = &outside else {
        unreachable!()
    };
    assert!(
        !result_json.contains(CANARY),
        "the canary leaked: {result_json}"
    );

    let target = b.workspace.path().join("written.txt");
    let (write, _) = b
        .call(
            "fs",
            "write_file",
            serde_json::json!({"path": target, "content": "pwned"}),
        )
        .await;
    assert!(is_tool_error(&write), "{write:?}");
    assert!(
        !target.exists(),
        "a workspace-ro server wrote into the workspace"
    );
    b.sup.shutdown().await;
}
