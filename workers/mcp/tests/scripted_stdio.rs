//! The JSON-RPC engine and the stdio transport against scripted servers: ordering, pagination,
//! the list_changed race, server requests, cancellation, progress, caps, and malformed input.

mod support;

use hanzo_mcp::client::Progress;
use hanzo_mcp::{
    CallOptions, CallOutcome, ClientOptions, CloseReason, McpClient, McpError, ServerExit,
};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::scripted::{spec, ScriptIo, ScriptedSpawner};
use tokio::sync::oneshot;

async fn connect(spawner: &ScriptedSpawner, options: ClientOptions) -> Result<McpClient, McpError> {
    McpClient::connect_stdio("scripted", &spec(), spawner, options).await
}

fn text_of(outcome: &CallOutcome) -> String {
    match outcome {
        CallOutcome::Allowed(r) => r.value["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        other => panic!("expected an allowed result, got {other:?}"),
    }
}

fn no_tools() -> Value {
    json!({})
}

#[tokio::test]
async fn responses_are_matched_by_id_when_they_arrive_out_of_order() {
    let spawner = ScriptedSpawner::new(|mut io: ScriptIo| async move {
        io.handshake_with("2025-11-25", no_tools()).await;
        let first = io.expect("tools/call").await;
        let second = io.expect("tools/call").await;
        let answer =
            |r: &Value| json!({"content": [{"type": "text", "text": r["params"]["name"]}]});
        io.reply(&second, answer(&second)).await;
        io.reply(&first, answer(&first)).await;
        io.drain().await;
    });
    let client = connect(&spawner, ClientOptions::default()).await.unwrap();
    let (a, b) = tokio::join!(
        client.call_tool("alpha", json!({}), CallOptions::default()),
        async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            client
                .call_tool("beta", json!({}), CallOptions::default())
                .await
        }
    );
    assert_eq!(text_of(&a.unwrap()), "alpha");
    assert_eq!(text_of(&b.unwrap()), "beta");
    client.shutdown().await;
}

#[tokio::test]
async fn tools_are_listed_page_by_page_and_a_racing_list_changed_is_not_lost() {
    let spawner = ScriptedSpawner::new(|mut io: ScriptIo| async move {
        io.handshake().await;
        let page1 = io.expect("tools/list").await;
        // The server changes its tools while our first list is in flight.
        io.send(json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}))
            .await;
        io.reply(&page1, json!({"tools": [{"name": "a", "inputSchema": {"type": "object"}}], "nextCursor": "c2"})).await;
        let page2 = io.expect("tools/list").await;
        assert_eq!(page2["params"]["cursor"], "c2");
        io.reply(&page2, json!({"tools": [{"name": "b"}]})).await;
        // The second round must happen, and sees the new tool.
        let again = io.expect("tools/list").await;
        assert!(again["params"].get("cursor").is_none());
        io.reply(
            &again,
            json!({"tools": [{"name": "a"}, {"name": "b"}, {"name": "c", "description": "new"}]}),
        )
        .await;
        loop {
            let Some(r) = io.recv().await else { return };
            if r["method"] == "tools/list" {
                io.reply(
                    &r,
                    json!({"tools": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}),
                )
                .await;
            }
        }
    });
    let client = connect(&spawner, ClientOptions::default()).await.unwrap();
    let names: Vec<String> = client
        .tools()
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(
        client.tools().tools[1].input_schema,
        json!({"type": "object"})
    );
    let qualified: Vec<String> = client
        .qualified_tools()
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        qualified,
        ["mcp__scripted__a", "mcp__scripted__b", "mcp__scripted__c"]
    );
    client.shutdown().await;
}

#[tokio::test]
async fn a_list_changed_later_refreshes_the_cache() {
    let spawner = ScriptedSpawner::new(|mut io: ScriptIo| async move {
        io.handshake().await;
        let l = io.expect("tools/list").await;
        io.reply(&l, json!({"tools": [{"name": "a"}]})).await;
        let call = io.expect("tools/call").await;
        io.send(json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}))
            .await;
        let l = io.expect("tools/list").await;
        io.reply(&l, json!({"tools": [{"name": "a"}, {"name": "z"}]}))
            .await;
        io.reply(&call, json!({"content": []})).await;
        io.drain().await;
    });
    let events = Arc::new(Mutex::new(Vec::new()));
    let ev = events.clone();
    let options = ClientOptions {
        on_event: Some(Arc::new(move |server: &str, e| {
            ev.lock().unwrap().push((server.to_string(), e))
        })),
        ..Default::default()
    };
    let client = connect(&spawner, options).await.unwrap();
    assert_eq!(client.tools().tools.len(), 1);
    let mut watch = client.tools_watch();
    client
        .call_tool("a", json!({}), CallOptions::default())
        .await
        .unwrap();
    tokio::time::timeout(
        Duration::from_secs(10),
        watch.wait_for(|t| t.tools.len() == 2),
    )
    .await
    .expect("refreshed")
    .unwrap();
    assert_eq!(client.tools().tools[1].name, "z");
    assert!(client.tools().generation >= 2);
    support::eventually("a ToolsChanged event", || {
        events.lock().unwrap().iter().any(|(s, e)| {
            s == "scripted" && matches!(e, hanzo_mcp::ServerEvent::ToolsChanged { count: 2 })
        })
    })
    .await;
    client.shutdown().await;
}

#[tokio::test]
async fn server_requests_get_correct_answers_and_nothing_is_silently_accepted() {
    let (tx, rx) = oneshot::channel::<(Value, Vec<Value>)>();
    let tx = Arc::new(Mutex::new(Some(tx)));
    let spawner = ScriptedSpawner::new(move |mut io: ScriptIo| {
        let tx = tx.clone();
        async move {
            let init = io.handshake_with("2025-11-25", no_tools()).await;
            for (id, method, params) in [
                ("s1", "ping", json!({})),
                ("s2", "roots/list", json!({})),
                (
                    "s3",
                    "sampling/createMessage",
                    json!({"messages": [], "maxTokens": 10}),
                ),
                (
                    "s4",
                    "elicitation/create",
                    json!({"message": "name?", "requestedSchema": {"type": "object", "properties": {}}}),
                ),
                ("s5", "resources/list", json!({})),
            ] {
                io.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
                    .await;
            }
            let mut answers = Vec::new();
            while answers.len() < 5 {
                answers.push(io.recv().await.expect("an answer"));
            }
            answers.sort_by_key(|a| a["id"].as_str().unwrap_or("").to_string());
            let _ = tx.lock().unwrap().take().unwrap().send((init, answers));
            io.drain().await;
        }
    });
    let root = std::env::temp_dir().join("ws root");
    let client = connect(
        &spawner,
        ClientOptions {
            roots: vec![root.clone()],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let (init, answers) = tokio::time::timeout(Duration::from_secs(10), rx)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(init["params"]["clientInfo"]["name"], "hanzo-dev");
    assert_eq!(
        init["params"]["clientInfo"]["version"],
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(init["params"]["protocolVersion"], "2025-11-25");
    assert_eq!(init["params"]["capabilities"], json!({"roots": {}}));
    assert_eq!(
        answers[0],
        json!({"jsonrpc": "2.0", "id": "s1", "result": {}})
    );
    let uri = format!("file://{}", root.display()).replace(' ', "%20");
    assert_eq!(answers[1]["result"]["roots"][0]["uri"], uri);
    for a in &answers[2..] {
        assert_eq!(a["error"]["code"], -32601, "{a}");
        assert!(a.get("result").is_none());
    }
    client.shutdown().await;
}

#[tokio::test]
async fn a_response_to_an_unknown_id_is_ignored() {
    let spawner = ScriptedSpawner::new(|mut io: ScriptIo| async move {
        io.handshake_with("2025-11-25", no_tools()).await;
        let call = io.expect("tools/call").await;
        io.send(json!({"jsonrpc": "2.0", "id": 999_999, "result": {"content": []}}))
            .await;
        io.send(
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "parse"}}),
        )
        .await;
        io.reply(
            &call,
            json!({"content": [{"type": "text", "text": "mine"}]}),
        )
        .await;
        io.drain().await;
    });
    let client = connect(&spawner, ClientOptions::default()).await.unwrap();
    let out = client
        .call_tool("t", json!({}), CallOptions::default())
        .await
        .unwrap();
    assert_eq!(text_of(&out), "mine");
    assert_eq!(client.stray_responses(), 2);
    assert_eq!(client.closed(), None);
    client.shutdown().await;
}

#[tokio::test]
async fn timeout_and_dropping_a_call_send_notifications_cancelled() {
    let (tx, rx) = oneshot::channel::<Vec<Value>>();
    let tx = Arc::new(Mutex::new(Some(tx)));
    let spawner = ScriptedSpawner::new(move |mut io: ScriptIo| {
        let tx = tx.clone();
        async move {
            io.handshake_with("2025-11-25", no_tools()).await;
            // The two calls and their two cancellations, in whatever order they were sent.
            let mut calls = Vec::new();
            let mut cancels = Vec::new();
            while calls.len() + cancels.len() < 4 {
                let m = io.recv().await.expect("message");
                match m["method"].as_str() {
                    Some("tools/call") => calls.push(m),
                    Some("notifications/cancelled") => cancels.push(m),
                    _ => {}
                }
            }
            cancels.sort_by_key(|c| c["params"]["requestId"].as_i64());
            let got = vec![
                calls[0].clone(),
                cancels[0].clone(),
                calls[1].clone(),
                cancels[1].clone(),
            ];
            let _ = tx.lock().unwrap().take().unwrap().send(got);
            io.drain().await;
        }
    });
    let client = connect(&spawner, ClientOptions::default()).await.unwrap();
    let timed = client
        .call_tool(
            "slow",
            json!({}),
            CallOptions {
                timeout: Some(Duration::from_millis(100)),
                progress: None,
            },
        )
        .await;
    assert!(
        matches!(timed, Err(McpError::Timeout { ref method, .. }) if method == "tools/call"),
        "{timed:?}"
    );
    tokio::select! {
        _ = client.call_tool("slow2", json!({}), CallOptions::default()) => panic!("never answered"),
        _ = tokio::time::sleep(Duration::from_millis(100)) => {}
    }
    let got = tokio::time::timeout(Duration::from_secs(10), rx)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got[1]["params"]["requestId"], got[0]["id"]);
    assert_eq!(got[1]["params"]["reason"], "timed out");
    assert_eq!(got[3]["params"]["requestId"], got[2]["id"]);
    assert_eq!(got[3]["params"]["reason"], "cancelled by the client");
    client.shutdown().await;
}

#[tokio::test]
async fn progress_reaches_the_callback_with_our_token() {
    let spawner = ScriptedSpawner::new(|mut io: ScriptIo| async move {
        io.handshake_with("2025-11-25", no_tools()).await;
        let call = io.expect("tools/call").await;
        let token = call["params"]["_meta"]["progressToken"].clone();
        assert!(token.is_string());
        for i in 1..=3 {
            io.send(json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": token, "progress": i, "total": 3, "message": format!("step {i}")}})).await;
        }
        io.send(json!({"jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": "someone-else", "progress": 1}}))
            .await;
        io.reply(&call, json!({"content": []})).await;
        io.drain().await;
    });
    let client = connect(&spawner, ClientOptions::default()).await.unwrap();
    let seen: Arc<Mutex<Vec<Progress>>> = Arc::default();
    let s = seen.clone();
    let opts = CallOptions {
        timeout: None,
        progress: Some(Arc::new(move |p| s.lock().unwrap().push(p))),
    };
    client.call_tool("t", json!({}), opts).await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3);
    assert_eq!(
        seen[2],
        Progress {
            progress: 3.0,
            total: Some(3.0),
            message: Some("step 3".into())
        }
    );
    client.shutdown().await;
}

#[tokio::test]
async fn answers_are_classified_and_results_capped() {
    let spawner = ScriptedSpawner::new(|mut io: ScriptIo| async move {
        io.handshake_with("2025-11-25", no_tools()).await;
        for _ in 0..4 {
            let call = io.expect("tools/call").await;
            let answer = match call["params"]["name"].as_str().unwrap() {
                "denied" => {
                    json!({"jsonrpc": "2.0", "id": call["id"], "error": {"code": -32003, "message": "policy says no"}})
                }
                "missing" => {
                    json!({"jsonrpc": "2.0", "id": call["id"], "error": {"code": -32601, "message": "no such tool"}})
                }
                "big" => {
                    json!({"jsonrpc": "2.0", "id": call["id"], "result": {"content": [{"type": "text", "text": "x".repeat(5000)}]}})
                }
                _ => {
                    json!({"jsonrpc": "2.0", "id": call["id"], "result": {"isError": true, "content": [{"type": "text", "text": "boom"}]}})
                }
            };
            io.send(answer).await;
        }
        io.drain().await;
    });
    let client = connect(
        &spawner,
        ClientOptions {
            max_result_bytes: 1000,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let call = |n: &'static str| client.call_tool(n, json!({}), CallOptions::default());
    assert!(
        matches!(call("denied").await.unwrap(), CallOutcome::Denied { reason } if reason.contains("-32003") && reason.contains("policy says no"))
    );
    assert!(
        matches!(call("missing").await.unwrap(), CallOutcome::Fault { reason } if reason.contains("-32601"))
    );
    match call("big").await.unwrap() {
        CallOutcome::Allowed(r) => {
            assert!(r.truncated);
            assert!(r.bytes > 5000);
            assert!(r.value.as_str().unwrap().ends_with(&format!(
                "[hanzo-dev: result cut at 1000 of {} bytes]",
                r.bytes
            )));
        }
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(call("tool-error").await.unwrap(), CallOutcome::Allowed(r) if r.is_error && !r.truncated)
    );
    client.shutdown().await;
}

#[tokio::test]
async fn invalid_json_ends_the_server_with_a_typed_error_and_it_is_killed() {
    let spawner = ScriptedSpawner::new(|mut io: ScriptIo| async move {
        io.handshake_with("2025-11-25", no_tools()).await;
        io.expect("tools/call").await;
        let _ = io.send_raw(b"{\"jsonrpc\": \"2.0\", oops\n").await;
        io.drain().await;
    });
    let client = connect(&spawner, ClientOptions::default()).await.unwrap();
    let err = client
        .call_tool("t", json!({}), CallOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, McpError::Closed(CloseReason::Malformed { detail }) if detail.contains("invalid JSON")),
        "{err}"
    );
    support::eventually("the server killed", || *spawner.killed.lock().unwrap()).await;
    // Later calls fail at once with the same reason.
    let again = client
        .call_tool("t", json!({}), CallOptions::default())
        .await
        .unwrap_err();
    assert_eq!(again, err);
    client.shutdown().await;
}

#[tokio::test]
async fn a_50_mb_line_ends_the_server_at_the_cap() {
    let spawner = ScriptedSpawner::new(|mut io: ScriptIo| async move {
        io.handshake_with("2025-11-25", no_tools()).await;
        io.expect("tools/call").await;
        let mb = vec![b'x'; 1 << 20];
        let _ = io
            .send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"t\":\"")
            .await;
        for _ in 0..50 {
            if io.send_raw(&mb).await.is_err() {
                return; // the client stopped reading and closed our stdout
            }
        }
        io.drain().await;
    });
    let options = ClientOptions {
        max_message_bytes: 4 << 20,
        ..Default::default()
    };
    let client = connect(&spawner, options).await.unwrap();
    let err = client
        .call_tool("t", json!({}), CallOptions::default())
        .await
        .unwrap_err();
    assert_eq!(
        err,
        McpError::Closed(CloseReason::MessageTooLarge { limit: 4 << 20 })
    );
    assert!(err.to_string().contains("4194304-byte limit"));
    client.shutdown().await;
}

#[tokio::test]
async fn a_server_that_exits_mid_call_fails_its_calls_at_once() {
    let spawner = ScriptedSpawner::new(|mut io: ScriptIo| async move {
        io.handshake_with("2025-11-25", no_tools()).await;
        io.expect("tools/call").await;
        io.expect("tools/call").await;
        // returning ends the "process" with status 0 and closes its output
    });
    let client = connect(&spawner, ClientOptions::default()).await.unwrap();
    let (a, b) = tokio::join!(
        client.call_tool("a", json!({}), CallOptions::default()),
        client.call_tool("b", json!({}), CallOptions::default())
    );
    let exited = McpError::Closed(CloseReason::Exited(Some(ServerExit {
        code: Some(0),
        signal: None,
    })));
    assert_eq!(a.unwrap_err(), exited);
    assert_eq!(b.unwrap_err(), exited);
    assert!(exited.to_string().contains("exit status 0"));
    client.shutdown().await;
}

#[tokio::test]
async fn initialize_that_never_answers_times_out_clearly() {
    let spawner = ScriptedSpawner::new(|mut io: ScriptIo| async move {
        io.expect("initialize").await;
        // Hangs: ignores even the end of its stdin, so only a kill stops it.
        std::future::pending::<()>().await;
    });
    let options = ClientOptions {
        initialize_timeout: Duration::from_millis(200),
        ..Default::default()
    };
    let err = connect(&spawner, options).await.err().expect("no client");
    assert_eq!(
        err,
        McpError::InitializeTimeout {
            after: Duration::from_millis(200)
        }
    );
    assert!(
        err.to_string()
            .contains("did not answer `initialize` within 0.2s"),
        "{err}"
    );
    support::eventually("the server killed", || *spawner.killed.lock().unwrap()).await;
}

#[tokio::test]
async fn protocol_versions_are_negotiated() {
    for (offered, ok) in [
        ("2025-06-18", true),
        ("2025-03-26", true),
        ("2024-11-05", false),
        ("1999-01-01", false),
    ] {
        let spawner = ScriptedSpawner::new(move |mut io: ScriptIo| async move {
            io.handshake_with(offered, no_tools()).await;
            io.drain().await;
        });
        let r = connect(
            &spawner,
            ClientOptions {
                initialize_timeout: Duration::from_secs(10),
                ..Default::default()
            },
        )
        .await;
        match (r, ok) {
            (Ok(c), true) => {
                assert_eq!(c.server_info().protocol_version, offered);
                assert_eq!(c.server_info().name, "scripted");
                c.shutdown().await;
            }
            (Err(McpError::UnsupportedProtocolVersion { offered: o }), false) => {
                assert_eq!(o, offered);
            }
            (other, _) => panic!("{offered}: {:?}", other.err()),
        }
    }
}

#[tokio::test]
async fn stderr_is_passed_on_line_by_line_and_bounded() {
    use tokio::io::AsyncWriteExt;
    let spawner = ScriptedSpawner::new(|mut io: ScriptIo| async move {
        let _ = io.err.write_all(b"starting\n").await;
        let _ = io.err.write_all(&vec![b'e'; 10_000]).await;
        let _ = io
            .err
            .write_all(b"\n{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n")
            .await;
        io.handshake_with("2025-11-25", no_tools()).await;
        io.drain().await;
    });
    let lines: Arc<Mutex<Vec<(String, bool)>>> = Arc::default();
    let l = lines.clone();
    let options = ClientOptions {
        on_stderr: Some(Arc::new(move |_server: &str, line: &str, cut| {
            l.lock().unwrap().push((line.to_string(), cut))
        })),
        ..Default::default()
    };
    let client = connect(&spawner, options).await.unwrap();
    support::eventually("three stderr lines", || lines.lock().unwrap().len() == 3).await;
    let lines = lines.lock().unwrap().clone();
    assert_eq!(lines[0], ("starting".to_string(), false));
    assert_eq!(lines[1].0.len(), hanzo_mcp::stdio::STDERR_LINE_BYTES);
    assert!(lines[1].1);
    // A JSON-RPC message on stderr is only a log line, never parsed.
    assert_eq!(client.stray_responses(), 0);
    client.shutdown().await;
}
