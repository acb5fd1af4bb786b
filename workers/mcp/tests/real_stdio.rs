//! Real servers from the npm registry over stdio (`test-deps/mcp`): server-everything (list, call
//! with arguments, progress, list_changed after initialized, roots, a cancelled long call, a
//! timeout) and server-filesystem (list a directory of the workspace root it is given).

mod support;

use hanzo_mcp::client::Progress;
use hanzo_mcp::{CallOptions, CallOutcome, ClientOptions, CloseReason, McpClient, McpError};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::PlainSpawner;

fn text(outcome: &CallOutcome) -> String {
    match outcome {
        CallOutcome::Allowed(r) => {
            assert!(!r.is_error, "tool error: {}", r.value);
            r.value["content"]
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

async fn everything(options: ClientOptions) -> McpClient {
    McpClient::connect_stdio(
        "everything",
        &support::everything_stdio(),
        &PlainSpawner,
        options,
    )
    .await
    .expect("server-everything over stdio")
}

#[tokio::test]
async fn everything_lists_calls_streams_progress_and_refreshes_on_list_changed() {
    let workspace = tempfile::tempdir().unwrap();
    let client = everything(ClientOptions {
        roots: vec![workspace.path().to_path_buf()],
        ..Default::default()
    })
    .await;
    assert_eq!(client.server_info().name, "mcp-servers/everything");
    assert_eq!(client.server_info().protocol_version, "2025-11-25");
    let names: Vec<String> = client
        .tools()
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    for t in ["echo", "get-sum", "trigger-long-running-operation"] {
        assert!(names.contains(&t.to_string()), "{t} in {names:?}");
    }

    // Call with arguments.
    let sum = client
        .call_tool("get-sum", json!({"a": 19, "b": 23}), CallOptions::default())
        .await
        .unwrap();
    assert!(text(&sum).contains("42"), "{}", text(&sum));
    let echo = client
        .call_tool("echo", json!({"message": "héllo"}), CallOptions::default())
        .await
        .unwrap();
    assert!(text(&echo).contains("héllo"));

    // Progress.
    let seen: Arc<Mutex<Vec<Progress>>> = Arc::default();
    let s = seen.clone();
    let opts = CallOptions {
        timeout: None,
        progress: Some(Arc::new(move |p| s.lock().unwrap().push(p))),
    };
    let done = client
        .call_tool(
            "trigger-long-running-operation",
            json!({"duration": 0.4, "steps": 4}),
            opts,
        )
        .await
        .unwrap();
    assert!(text(&done).contains("Steps: 4"));
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen.iter().map(|p| p.progress).collect::<Vec<_>>(),
        [1.0, 2.0, 3.0, 4.0]
    );
    assert!(seen.iter().all(|p| p.total == Some(4.0)));

    // The conditional tools arrive with list_changed right after `initialized`.
    let mut watch = client.tools_watch();
    tokio::time::timeout(
        Duration::from_secs(30),
        watch.wait_for(|t| t.tools.iter().any(|t| t.name == "get-roots-list")),
    )
    .await
    .expect("list_changed refreshed the cache")
    .unwrap();
    // …and roots/list was answered with the workspace.
    let roots = client
        .call_tool("get-roots-list", json!({}), CallOptions::default())
        .await
        .unwrap();
    let root_name = workspace
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .to_string();
    assert!(text(&roots).contains(&root_name), "{}", text(&roots));
    // Sampling and elicitation were not declared, so their tools are not offered.
    assert!(!client
        .tools()
        .tools
        .iter()
        .any(|t| t.name == "trigger-sampling-request"));
    client.qualified_tools().unwrap();

    client.shutdown().await;
    assert_eq!(client.closed(), Some(CloseReason::ShutDown));
}

#[tokio::test]
async fn everything_sees_a_cancelled_call_and_a_timed_out_one() {
    let client = everything(ClientOptions::default()).await;
    // Drop a long call after its first progress: the server must get `notifications/cancelled`.
    // The TypeScript SDK then suppresses that call's response; had it not seen the cancellation,
    // the response would arrive (before the second, later-started call ends) as a stray answer.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let opts = CallOptions {
        timeout: None,
        progress: Some(Arc::new(move |p: Progress| {
            let _ = tx.send(p);
        })),
    };
    let long = json!({"duration": 1.0, "steps": 4});
    tokio::select! {
        r = client.call_tool("trigger-long-running-operation", long.clone(), opts) => panic!("finished: {r:?}"),
        p = rx.recv() => assert_eq!(p.unwrap().progress, 1.0),
    }
    let second = client
        .call_tool(
            "trigger-long-running-operation",
            long,
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(text(&second).contains("completed"));
    assert_eq!(
        client.stray_responses(),
        0,
        "the cancelled call was answered anyway"
    );

    // A timed-out call is cancelled the same way and the server stays usable.
    let timed = client
        .call_tool(
            "trigger-long-running-operation",
            json!({"duration": 0.6, "steps": 2}),
            CallOptions {
                timeout: Some(Duration::from_millis(150)),
                progress: None,
            },
        )
        .await;
    assert!(matches!(timed, Err(McpError::Timeout { .. })), "{timed:?}");
    let after = client
        .call_tool(
            "trigger-long-running-operation",
            json!({"duration": 0.8, "steps": 2}),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(text(&after).contains("completed"));
    assert_eq!(client.stray_responses(), 0);
    client.ping().await.unwrap();
    client.shutdown().await;
}

#[tokio::test]
async fn filesystem_lists_its_workspace_root() {
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("hello.txt"), "hi").unwrap();
    std::fs::create_dir(workspace.path().join("src")).unwrap();
    let root = workspace.path().canonicalize().unwrap();
    let client = McpClient::connect_stdio(
        "filesystem",
        &support::filesystem_stdio(&root),
        &PlainSpawner,
        ClientOptions {
            roots: vec![root.clone()],
            ..Default::default()
        },
    )
    .await
    .expect("server-filesystem over stdio");
    assert!(client
        .tools()
        .tools
        .iter()
        .any(|t| t.name == "list_directory"));
    let listing = client
        .call_tool(
            "list_directory",
            json!({"path": root.display().to_string()}),
            CallOptions::default(),
        )
        .await
        .unwrap();
    let t = text(&listing);
    assert!(
        t.contains("[FILE] hello.txt") && t.contains("[DIR] src"),
        "{t}"
    );
    client.shutdown().await;
}
