//! What the run record says of an MCP call, for each classification of its answer (issue 12):
//! a real `hanzo-dev run --replay` whose model calls three tools of a sandboxed stdio server
//! (`fixtures/mcp/classify_server.py`) answering with a result, a JSON-RPC error in the policy
//! range (a denial) and `-32601` (a downstream fault). The record names the server, the tool and
//! the classification with the server's reason — in the error text the model saw, and as typed
//! fields (`ToolCallRecord.mcp`) read through the store's API, `runs show --json`, `runs show`
//! and `runs export`; the event stream agrees.

mod common;

use common::env::TestHome;
use hanzo_model::script::ScriptTurn;
use serde_json::{json, Value};
use std::path::Path;

#[test]
fn each_classification_of_an_mcp_answer_is_on_the_record_with_its_server_tool_and_reason() {
    let home = TestHome::new();
    let script = home.ws().join("classify_server.py");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp/classify_server.py"),
        &script,
    )
    .unwrap();
    home.settings(json!({
        "mcp_servers": {"cls": {"command": "/usr/bin/python3", "args": [script]}},
        "permissions": {"mcp__cls__*": "allow"},
    }));
    let cassette = home.cassette(
        "model.jsonl",
        &[
            ScriptTurn::tool("t1", "mcp__cls__fine", json!({}))
                .and_tool("t2", "mcp__cls__refuse", json!({}))
                .and_tool("t3", "mcp__cls__missing", json!({})),
            ScriptTurn::text("done"),
        ],
    );
    let (code, stdout, stderr) = home.run(&[
        "run",
        "--json",
        "--replay",
        &cassette,
        "call the three tools",
    ]);
    assert_eq!(code, 0, "{stderr}\n{stdout}");
    let events: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("event line"))
        .collect();
    let result = |id: &str| {
        events
            .iter()
            .find(|e| e["type"] == "tool_result" && e["id"] == id)
            .unwrap_or_else(|| panic!("no result for {id}: {events:#?}"))
            .clone()
    };
    assert_eq!(result("t1")["is_error"], false);
    assert_eq!(result("t2")["is_error"], true);
    assert_eq!(result("t3")["is_error"], true);

    let store = home.store();
    let started = events.iter().find(|e| e["type"] == "run_started").unwrap();
    let rec = store
        .load_run(hanzo_store::RunId(started["run_id"].as_i64().unwrap()))
        .expect("run record");
    let calls: Vec<_> = rec.steps.iter().flat_map(|s| &s.tool_calls).collect();
    let call = |name: &str| {
        calls
            .iter()
            .find(|c| c.call.name == name)
            .unwrap_or_else(|| panic!("no record of {name}: {calls:#?}"))
            .call
            .clone()
    };
    // Allowed, with its result.
    let fine = call("mcp__cls__fine");
    assert!(fine.allowed);
    assert_eq!(fine.error, None);
    assert!(fine
        .output
        .as_deref()
        .unwrap_or_default()
        .contains("all fine"));
    // A policy-range error is a denial, named as such with the server's reason.
    let refuse = call("mcp__cls__refuse");
    assert!(refuse.allowed, "the policy let it run; the server refused");
    let why = refuse.error.unwrap_or_default();
    assert!(
        why.starts_with("MCP policy denial from server cls (tool refuse)"),
        "{why}"
    );
    assert!(why.contains("blocked by the server's policy"), "{why}");
    // -32601 is a downstream fault, not a denial.
    let missing = call("mcp__cls__missing");
    let why = missing.error.unwrap_or_default();
    assert!(
        why.starts_with("MCP downstream fault from server cls (tool missing)"),
        "{why}"
    );
    assert!(!why.contains("denial"), "{why}");

    // The same as typed fields, through the store's API…
    let mcp = |name: &str| {
        calls
            .iter()
            .find(|c| c.call.name == name)
            .and_then(|c| c.mcp.clone())
            .unwrap_or_else(|| panic!("no MCP fields on {name}: {calls:#?}"))
    };
    use hanzo_store::McpClassification as C;
    let fields = |name: &str| {
        let m = mcp(name);
        (m.server, m.tool, m.classification)
    };
    assert_eq!(
        fields("mcp__cls__fine"),
        ("cls".into(), "fine".into(), C::Allowed)
    );
    assert_eq!(mcp("mcp__cls__fine").reason, None);
    assert_eq!(
        fields("mcp__cls__refuse"),
        ("cls".into(), "refuse".into(), C::Denied)
    );
    let reason = mcp("mcp__cls__refuse").reason.unwrap_or_default();
    assert!(
        reason.contains("-32001") && reason.contains("blocked by the server's policy"),
        "{reason}"
    );
    assert_eq!(
        fields("mcp__cls__missing"),
        ("cls".into(), "missing".into(), C::Fault)
    );
    let reason = mcp("mcp__cls__missing").reason.unwrap_or_default();
    assert!(reason.contains("-32601"), "{reason}");
    // …with the call's timing beside them.
    for c in &calls {
        assert_eq!(c.status, hanzo_store::CallStatus::Finished);
    }

    // …`runs show --json`, whose shape `runs export` shares…
    let id = started["run_id"].as_i64().unwrap().to_string();
    for args in [
        vec!["runs", "show", id.as_str(), "--json"],
        vec!["runs", "export", id.as_str()],
    ] {
        let (code, stdout, stderr) = home.run(&args);
        assert_eq!(code, 0, "{args:?}: {stderr}");
        let doc: Value = serde_json::from_str(&stdout).expect("json");
        let shown: Vec<&Value> = doc["steps"]
            .as_array()
            .expect("steps")
            .iter()
            .flat_map(|s| s["tool_calls"].as_array().expect("calls"))
            .collect();
        let of = |name: &str| {
            shown
                .iter()
                .find(|c| c["name"] == name)
                .unwrap_or_else(|| panic!("{args:?}: no {name}"))
        };
        for (name, tool, classification) in [
            ("mcp__cls__fine", "fine", "allowed"),
            ("mcp__cls__refuse", "refuse", "denied"),
            ("mcp__cls__missing", "missing", "fault"),
        ] {
            let c = of(name);
            assert_eq!(c["mcp"]["server"], "cls", "{args:?}: {c}");
            assert_eq!(c["mcp"]["tool"], tool, "{args:?}: {c}");
            assert_eq!(c["mcp"]["classification"], classification, "{args:?}: {c}");
            assert!(c["duration_ms"].is_u64(), "{c}");
        }
        assert!(of("mcp__cls__fine")["mcp"]
            .get("reason")
            .is_none_or(Value::is_null));
        assert!(of("mcp__cls__refuse")["mcp"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("blocked by the server's policy")));
    }
    // …and the text view.
    let (code, stdout, stderr) = home.run(&["runs", "show", id.as_str()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("    mcp:       server cls, tool fine: allowed\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("    mcp:       server cls, tool refuse: denied ("),
        "{stdout}"
    );
    assert!(
        stdout.contains("    mcp:       server cls, tool missing: fault ("),
        "{stdout}"
    );
}
