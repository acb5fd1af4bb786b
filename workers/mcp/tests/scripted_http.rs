//! Streamable HTTP against a scripted local server: every fail-closed classification case, the
//! `event: message` trap, session and protocol-version headers, out-of-order answers, resumption
//! with `Last-Event-ID`, GET 405 (and 404 without a session) tolerated, DELETE on close, and an
//! expired session.

mod support;

use hanzo_mcp::{CallOptions, CallOutcome, ClientOptions, CloseReason, McpClient, McpError};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use support::http1::Http1Client;
use support::scripted::{json_response, response, response_to_end, ScriptedHttp, SeenRequest};
use tokio::sync::Notify;

const SID: &str = "sess-1";

fn rpc_error(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

fn ok(id: &Value, text: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": text}]}})
}

fn sse(body: &str) -> Vec<u8> {
    response_to_end(
        200,
        &[
            ("Content-Type", "text/event-stream"),
            ("Mcp-Session-Id", SID),
        ],
        body.as_bytes(),
    )
}

#[derive(Default)]
struct State {
    fast_done: Notify,
    resume_id: Mutex<Option<Value>>,
}

async fn answer(state: Arc<State>, req: SeenRequest) -> Vec<u8> {
    let sid = [("Mcp-Session-Id", SID)];
    match req.method.as_str() {
        "GET" => {
            if req.header("last-event-id") == Some("e1") {
                let id = state
                    .resume_id
                    .lock()
                    .unwrap()
                    .clone()
                    .unwrap_or(Value::Null);
                return sse(&format!(
                    "id: e2\nevent: message\ndata: {}\n\n",
                    ok(&id, "resumed")
                ));
            }
            return response(405, &[], b"");
        }
        "DELETE" => return response(200, &[], b""),
        _ => {}
    }
    let msg = req.json();
    let id = msg["id"].clone();
    if msg["method"] == "initialize" {
        return json_response(
            &json!({"jsonrpc": "2.0", "id": id, "result": {"protocolVersion": "2025-11-25",
                "capabilities": {}, "serverInfo": {"name": "scripted-http", "version": "1"}}}),
            &sid,
        );
    }
    if id.is_null() {
        return response(202, &[], b"");
    }
    let name = msg["params"]["name"].as_str().unwrap_or("").to_string();
    let json_ct = [("Content-Type", "application/json")];
    match name.as_str() {
        "haap-json" => json_response(&rpc_error(&id, -32002, "HAAP: scope not granted"), &[]),
        "haap-sse" => sse(&format!(
            "event: message\nid: 1\ndata: {}\n\n",
            rpc_error(&id, -32001, "HAAP: principal not allowed")
        )),
        "sse-as-json" => response(
            200,
            &json_ct,
            format!(
                "event: message\ndata: {}\n\n",
                rpc_error(&id, -32003, "HAAP: denied")
            )
            .as_bytes(),
        ),
        "unauthorized" => response(401, &[("WWW-Authenticate", "Bearer")], b"{}"),
        "forbidden" => response(403, &json_ct, b"{\"error\":\"forbidden\"}"),
        "empty" => response(200, &json_ct, b""),
        "truncated" => response_to_end(
            200,
            &json_ct,
            format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"res").as_bytes(),
        ),
        "html" => response(
            200,
            &[("Content-Type", "text/html")],
            b"<!DOCTYPE html><html><body>Login</body></html>",
        ),
        "not-utf8" => response(200, &json_ct, b"\xff\xfe\x00{"),
        "html-500" => response(500, &[("Content-Type", "text/html")], b"<html>oops</html>"),
        "sse-cut" => sse(&format!(
            "event: message\ndata: {}",
            ok(&id, "never dispatched")
        )),
        "missing" => json_response(&rpc_error(&id, -32601, "Method not found"), &[]),
        "tool-error" => json_response(
            &json!({"jsonrpc": "2.0", "id": id, "result": {"isError": true, "content": [{"type": "text", "text": "bad input"}]}}),
            &[],
        ),
        "sse-ok" => sse(&format!(
            "event: message\ndata: {}\n\nevent: message\ndata: {}\n\n",
            json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "working"}}),
            ok(&id, "streamed")
        )),
        "slow" => {
            state.fast_done.notified().await;
            json_response(&ok(&id, "slow"), &[])
        }
        "fast" => {
            let r = json_response(&ok(&id, "fast"), &[]);
            state.fast_done.notify_one();
            r
        }
        "resume" => {
            *state.resume_id.lock().unwrap() = Some(id.clone());
            sse("id: e1\nretry: 150\ndata: \n\n")
        }
        "expired" => response(404, &[], b"session not found"),
        _ => json_response(&rpc_error(&id, -32602, "unknown"), &[]),
    }
}

async fn server() -> ScriptedHttp {
    let state = Arc::new(State::default());
    ScriptedHttp::start(move |req| answer(state.clone(), req)).await
}

async fn connect(url: &str, http: &Http1Client) -> McpClient {
    McpClient::connect_http(
        "scripted",
        url,
        Arc::new(http.clone()),
        ClientOptions::default(),
    )
    .await
    .expect("connected")
}

#[tokio::test]
async fn every_answer_is_classified_fail_closed() {
    let server = server().await;
    let http = Http1Client::default();
    let client = connect(&server.url, &http).await;
    let call = |n: &'static str| client.call_tool(n, json!({}), CallOptions::default());
    let denied = |o: CallOutcome, needle: &str| match o {
        CallOutcome::Denied { reason } => {
            assert!(reason.contains(needle), "{reason:?} lacks {needle:?}")
        }
        other => panic!("expected a denial containing {needle:?}, got {other:?}"),
    };
    denied(call("haap-json").await.unwrap(), "-32002");
    denied(call("haap-sse").await.unwrap(), "-32001");
    denied(call("sse-as-json").await.unwrap(), "-32003");
    denied(call("unauthorized").await.unwrap(), "HTTP 401");
    denied(call("forbidden").await.unwrap(), "HTTP 403");
    denied(call("empty").await.unwrap(), "an empty body");
    denied(call("truncated").await.unwrap(), "a truncated body");
    denied(call("html").await.unwrap(), "an HTML body");
    denied(call("not-utf8").await.unwrap(), "not UTF-8");
    denied(
        call("html-500").await.unwrap(),
        "HTTP 500 with an HTML body",
    );
    denied(call("sse-cut").await.unwrap(), "HTTP 200");
    match call("missing").await.unwrap() {
        CallOutcome::Fault { reason } => assert!(reason.contains("-32601"), "{reason}"),
        other => panic!("-32601 is a downstream fault, not {other:?}"),
    }
    assert!(matches!(call("tool-error").await.unwrap(), CallOutcome::Allowed(r) if r.is_error));
    match call("sse-ok").await.unwrap() {
        CallOutcome::Allowed(r) => assert_eq!(r.value["content"][0]["text"], "streamed"),
        other => panic!("{other:?}"),
    }
    client.shutdown().await;
}

#[tokio::test]
async fn headers_sessions_streams_and_out_of_order_answers() {
    let server = server().await;
    let http = Http1Client::default();
    let client = connect(&server.url, &http).await;
    assert_eq!(client.session_id().as_deref(), Some(SID));

    // The slow call is answered only after the fast one, on its own POST.
    let (slow, fast) = tokio::join!(
        client.call_tool("slow", json!({}), CallOptions::default()),
        async {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            client
                .call_tool("fast", json!({}), CallOptions::default())
                .await
        }
    );
    let text = |o: CallOutcome| match o {
        CallOutcome::Allowed(r) => r.value["content"][0]["text"].as_str().unwrap().to_string(),
        other => panic!("{other:?}"),
    };
    assert_eq!(text(slow.unwrap()), "slow");
    assert_eq!(text(fast.unwrap()), "fast");

    // A stream that ends before its answer is resumed with GET and Last-Event-ID.
    let resumed = client
        .call_tool("resume", json!({}), CallOptions::default())
        .await
        .unwrap();
    assert_eq!(text(resumed), "resumed");
    client.shutdown().await;

    let seen = server.requests();
    let init = &seen[0];
    assert_eq!(init.json()["method"], "initialize");
    assert_eq!(init.header("mcp-session-id"), None);
    assert_eq!(init.header("mcp-protocol-version"), None);
    for r in &seen[1..] {
        assert_eq!(
            r.header("mcp-session-id"),
            Some(SID),
            "{} {:?}",
            r.method,
            r.json()
        );
        assert_eq!(r.header("mcp-protocol-version"), Some("2025-11-25"));
    }
    for r in seen.iter().filter(|r| r.method == "POST") {
        assert_eq!(
            r.header("accept"),
            Some("application/json, text/event-stream")
        );
        assert_eq!(r.header("content-type"), Some("application/json"));
    }
    assert_eq!(seen[1].json()["method"], "notifications/initialized");
    // The optional GET stream was tried once (405: tolerated), the resumption carried the id.
    let gets: Vec<&SeenRequest> = seen.iter().filter(|r| r.method == "GET").collect();
    assert_eq!(gets[0].header("last-event-id"), None);
    assert_eq!(gets[0].header("accept"), Some("text/event-stream"));
    assert!(gets.iter().any(|g| g.header("last-event-id") == Some("e1")));
    assert_eq!(seen.last().unwrap().method, "DELETE");
}

#[tokio::test]
async fn a_404_on_a_request_with_a_session_means_it_expired() {
    let server = server().await;
    let http = Http1Client::default();
    let client = connect(&server.url, &http).await;
    let err = client
        .call_tool("expired", json!({}), CallOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err, McpError::Closed(CloseReason::SessionExpired));
    assert!(err.to_string().contains("reconnect"));
    assert_eq!(client.closed(), Some(CloseReason::SessionExpired));
    client.shutdown().await;
}

#[tokio::test]
async fn an_unreachable_server_is_a_typed_error() {
    let port = support::free_port();
    let err = McpClient::connect_http(
        "gone",
        &format!("http://127.0.0.1:{port}/mcp"),
        Arc::new(Http1Client::default()),
        ClientOptions::default(),
    )
    .await
    .err()
    .expect("no server there");
    assert!(
        matches!(err, McpError::Http(ref e) if e.kind == hanzo_mcp::HttpErrorKind::Connect),
        "{err}"
    );
}

/// A server without sessions that answers the optional GET stream with 404: the client takes it
/// as "no stream offered" (a 404 ends a session only when the request carried one), stays
/// connected, calls, and tries the GET no more than once.
#[tokio::test]
async fn a_404_on_the_get_stream_of_a_sessionless_server_is_tolerated() {
    let server = ScriptedHttp::start(|req: SeenRequest| async move {
        match req.method.as_str() {
            "GET" => return response(404, &[], b"no stream here"),
            "DELETE" => return response(405, &[], b""),
            _ => {}
        }
        let msg = req.json();
        let id = msg["id"].clone();
        if msg["method"] == "initialize" {
            return json_response(
                &json!({"jsonrpc": "2.0", "id": id, "result": {"protocolVersion": "2025-11-25",
                    "capabilities": {}, "serverInfo": {"name": "no-sessions", "version": "1"}}}),
                &[],
            );
        }
        if id.is_null() {
            return response(202, &[], b"");
        }
        json_response(&ok(&id, "still here"), &[])
    })
    .await;
    let http = Http1Client::default();
    let client = connect(&server.url, &http).await;
    assert_eq!(client.session_id(), None);
    match client
        .call_tool("any", json!({}), CallOptions::default())
        .await
        .unwrap()
    {
        CallOutcome::Allowed(r) => assert_eq!(r.value["content"][0]["text"], "still here"),
        other => panic!("{other:?}"),
    }
    assert_eq!(client.closed(), None);
    client.shutdown().await;
    let seen = server.requests();
    let gets = seen.iter().filter(|r| r.method == "GET").count();
    assert_eq!(
        gets,
        1,
        "{:?}",
        seen.iter().map(|r| &r.method).collect::<Vec<_>>()
    );
    assert!(seen
        .iter()
        .any(|r| r.method == "POST" && r.json()["method"] == "tools/call"));
}
