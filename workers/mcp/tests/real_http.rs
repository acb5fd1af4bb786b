//! server-everything in its streamable-HTTP mode on 127.0.0.1, through the test HTTP/1.1 client:
//! session, list, call with arguments, progress on the POST's event stream, list_changed (on
//! the GET stream), a cancelled call, and DELETE on close.

mod support;

use hanzo_mcp::client::Progress;
use hanzo_mcp::{CallOptions, CallOutcome, ClientOptions, McpClient};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::http1::Http1Client;

fn text(outcome: &CallOutcome) -> String {
    match outcome {
        CallOutcome::Allowed(r) => r.value["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        other => panic!("expected an allowed result, got {other:?}"),
    }
}

#[tokio::test]
async fn everything_over_streamable_http() {
    let server = support::EverythingHttp::start().await;
    let http = Http1Client::default();
    let workspace = tempfile::tempdir().unwrap();
    let options = ClientOptions {
        roots: vec![workspace.path().to_path_buf()],
        ..Default::default()
    };
    let client =
        McpClient::connect_http("everything", &server.url, Arc::new(http.clone()), options)
            .await
            .expect("connected over streamable HTTP");
    let session = client.session_id().expect("the server assigned a session");
    assert!(client.tools().tools.iter().any(|t| t.name == "get-sum"));

    let sum = client
        .call_tool("get-sum", json!({"a": 2, "b": 40}), CallOptions::default())
        .await
        .unwrap();
    assert!(text(&sum).contains("42"), "{}", text(&sum));

    let seen: Arc<Mutex<Vec<Progress>>> = Arc::default();
    let s = seen.clone();
    let opts = CallOptions {
        timeout: None,
        progress: Some(Arc::new(move |p| s.lock().unwrap().push(p))),
    };
    let done = client
        .call_tool(
            "trigger-long-running-operation",
            json!({"duration": 0.3, "steps": 3}),
            opts,
        )
        .await
        .unwrap();
    assert!(text(&done).contains("Steps: 3"));
    assert_eq!(
        seen.lock()
            .unwrap()
            .iter()
            .map(|p| p.progress)
            .collect::<Vec<_>>(),
        [1.0, 2.0, 3.0]
    );

    // Conditional tools registered on `initialized` announce themselves with list_changed.
    let mut watch = client.tools_watch();
    tokio::time::timeout(
        Duration::from_secs(30),
        watch.wait_for(|t| t.tools.iter().any(|t| t.name == "get-roots-list")),
    )
    .await
    .expect("list_changed refreshed the cache")
    .unwrap();
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

    // Cancel a long call after its first progress; the server suppresses its answer.
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
    client.shutdown().await;

    let sent = http.sent.lock().unwrap().clone();
    let cancel = sent
        .iter()
        .find(|r| String::from_utf8_lossy(&r.body).contains("notifications/cancelled"))
        .expect("notifications/cancelled was POSTed");
    assert!(cancel
        .headers
        .iter()
        .any(|(k, v)| k == "Mcp-Session-Id" && *v == session));
    let last = sent.last().unwrap();
    assert_eq!(last.method, "DELETE");
    assert!(last
        .headers
        .iter()
        .any(|(k, v)| k == "Mcp-Session-Id" && *v == session));
    assert!(
        sent.iter().any(|r| r.method == "GET"),
        "the GET stream was opened"
    );
}
