//! MCP servers in whole runs of the real binary (`hanzo-dev run`): what the server is sent when
//! the run drops a call (its timeout, Ctrl-C), what the model is offered after a server changed
//! its tools, and a run that outlives a crash of the mcp worker. The server is
//! `tests/fixtures/mcp/probe_server.py`, which writes down every message it receives (it is a
//! `workspace-rw` server, so that it can write its log in the workspace).

mod common;
#[path = "../../workers/model/tests/fixtures/mod.rs"]
mod fixtures;

use common::env::TestHome;
use hanzo_model::script::ScriptTurn;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

/// A user whose settings run `probe_server.py` as the MCP server `probe` (every call allowed),
/// its log at `ws/probe.log`.
fn probe_home() -> TestHome {
    let home = TestHome::new();
    let script = home.path("ws/probe_server.py");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp/probe_server.py"),
        &script,
    )
    .expect("copy the probe server");
    home.settings(json!({
        "mcp_servers": {"probe": {
            "command": "/usr/bin/python3",
            "args": [script, home.path("ws/probe.log")],
            "filesystem": "workspace-rw",
        }},
        "permissions": {"mcp__probe__*": "allow"},
    }));
    home
}

/// Every message the probe server received so far, with the pid of the server process.
fn received(home: &TestHome) -> Vec<(u64, Value)> {
    std::fs::read_to_string(home.path("ws/probe.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| (v["pid"].as_u64().unwrap_or(0), v["message"].clone()))
        .collect()
}

/// Poll `what` until it yields, for at most 60 s.
fn wait_for<T>(why: &str, mut what: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = what() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {why}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The id of the `tools/call` of `tool` the server received.
fn call_id(home: &TestHome, tool: &str) -> Option<Value> {
    received(home)
        .into_iter()
        .find(|(_, m)| m["method"] == "tools/call" && m["params"]["name"] == tool)
        .map(|(_, m)| m["id"].clone())
}

/// The `requestId`s of the `notifications/cancelled` the server received.
fn cancelled(home: &TestHome) -> Vec<Value> {
    received(home)
        .into_iter()
        .filter(|(_, m)| m["method"] == "notifications/cancelled")
        .map(|(_, m)| m["params"]["requestId"].clone())
        .collect()
}

fn events(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn event<'a>(events: &'a [Value], kind: &str, id: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["type"] == kind && (id.is_empty() || e["id"] == id))
        .unwrap_or_else(|| panic!("no {kind} {id}: {events:#?}"))
}

fn finish(child: Child) -> (i32, String, String) {
    let out = child.wait_with_output().expect("hanzo-dev run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The run's wall-clock limit ends a call the server never answers: the server is sent
/// `notifications/cancelled` for that very request, and the call's result and the run say why.
#[test]
fn the_run_s_timeout_cancels_a_hanging_mcp_call_and_the_server_is_told() {
    let home = probe_home();
    let cassette = home.cassette(
        "model.jsonl",
        &[
            ScriptTurn::tool("t1", "mcp__probe__slow", json!({})),
            ScriptTurn::text("never reached"),
        ],
    );
    let (code, stdout, stderr) = home.run(&[
        "run",
        "--json",
        "--timeout",
        "2",
        "--replay",
        &cassette,
        "call the slow tool",
    ]);
    assert_eq!(code, 1, "{stderr}\n{stdout}");
    let events = events(&stdout);
    let result = event(&events, "tool_result", "t1");
    assert_eq!(result["is_error"], true, "{result}");
    assert!(
        result["preview"]
            .as_str()
            .unwrap_or_default()
            .contains("wall-clock limit"),
        "{result}"
    );
    let finished = event(&events, "run_finished", "");
    assert_eq!(finished["status"], "failed", "{finished}");
    let id = call_id(&home, "slow").expect("the server received the call");
    assert_eq!(cancelled(&home), [id], "{:#?}", received(&home));
    // The run's record says so too.
    let run_id = event(&events, "run_started", "")["run_id"]
        .as_i64()
        .unwrap();
    let rec = home
        .store()
        .load_run(hanzo_store::RunId(run_id))
        .expect("the run record");
    let call = rec
        .steps
        .iter()
        .flat_map(|s| &s.tool_calls)
        .find(|c| c.call.name == "mcp__probe__slow")
        .expect("the call is recorded");
    assert!(call.call.allowed);
    assert!(
        call.call
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("wall-clock limit"),
        "{:?}",
        call.call
    );
}

/// Ctrl-C during an MCP call: the server is sent `notifications/cancelled` for it, and the run
/// ends cancelled (exit 130).
#[test]
fn ctrl_c_cancels_a_running_mcp_call_and_the_server_is_told() {
    let home = probe_home();
    let cassette = home.cassette(
        "model.jsonl",
        &[
            ScriptTurn::tool("t1", "mcp__probe__slow", json!({})),
            ScriptTurn::text("never reached"),
        ],
    );
    let child = home
        .command(&["run", "--json", "--replay", &cassette, "call the slow tool"])
        .spawn()
        .expect("hanzo-dev run");
    let id = wait_for("the call to reach the server", || call_id(&home, "slow"));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid")),
        nix::sys::signal::SIGINT,
    )
    .expect("SIGINT");
    let (code, stdout, stderr) = finish(child);
    assert_eq!(code, 130, "{stderr}\n{stdout}");
    let events = events(&stdout);
    assert_eq!(event(&events, "tool_result", "t1")["is_error"], true);
    assert_eq!(event(&events, "run_finished", "")["status"], "cancelled");
    assert_eq!(cancelled(&home), [id], "{:#?}", received(&home));
}

/// A server that announces `notifications/tools/list_changed` while it answers a call: the next
/// request the model worker sends the provider (a local server speaking Anthropic's wire
/// format) offers the new tool, and the model's call of it runs.
#[test]
fn after_list_changed_the_next_model_request_offers_the_refreshed_tools() {
    let home = probe_home();
    let turns = [
        ScriptTurn::tool("t1", "mcp__probe__grow", json!({})),
        ScriptTurn::tool("t2", "mcp__probe__added", json!({})),
        ScriptTurn::text("done"),
    ];
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let provider = provider_for(&rt, &turns);
    let mut command = home.command(&[
        "run",
        "--json",
        "--provider",
        "anthropic",
        "--base-url",
        &provider.base,
        "grow your tools",
    ]);
    let out = command
        .env("ANTHROPIC_API_KEY", "sk-ant-test-mcp-run")
        .output()
        .expect("hanzo-dev run");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{stdout}");
    let offered: Vec<Vec<String>> = provider
        .received()
        .iter()
        .map(|r| {
            let body: Value = serde_json::from_slice(&r.body).expect("a JSON request");
            body["tools"]
                .as_array()
                .map(|ts| {
                    ts.iter()
                        .filter_map(|t| t["name"].as_str())
                        .filter(|n| n.starts_with("mcp__probe__"))
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(offered.len(), 3, "{offered:?}");
    assert!(
        !offered[0].iter().any(|n| n == "mcp__probe__added"),
        "{offered:?}"
    );
    assert!(offered[0].iter().any(|n| n == "mcp__probe__grow"));
    for later in &offered[1..] {
        assert!(
            later.iter().any(|n| n == "mcp__probe__added"),
            "{offered:?}"
        );
    }
    let events = events(&stdout);
    let added = event(&events, "tool_result", "t2");
    assert_eq!(added["is_error"], false, "{added}");
    assert!(added["preview"]
        .as_str()
        .unwrap_or_default()
        .contains("the added tool ran"));
    // The bridge re-listed after the notification.
    let lists = received(&home)
        .iter()
        .filter(|(_, m)| m["method"] == "tools/list")
        .count();
    assert!(lists >= 2, "{:#?}", received(&home));
}

/// The direct child of `run` that is the `role` worker.
fn worker_of(run: u32, role: &str) -> Option<u32> {
    common::procs::descendants_with(run, &[&format!("__worker {role} ")])
        .into_iter()
        .find(|p| common::procs::parent(*p) == Some(run))
}

/// `kill -9` of the mcp worker in the middle of a run: the call in flight fails, the mcp worker
/// alone is restarted (the broker and the model worker keep their pids), its server is started
/// again, and the run goes on to call it and finish.
#[test]
fn a_killed_mcp_worker_restarts_alone_and_the_run_goes_on() {
    let home = probe_home();
    let cassette = home.cassette(
        "model.jsonl",
        &[
            ScriptTurn::tool("t1", "mcp__probe__slow", json!({})),
            ScriptTurn::tool("t2", "mcp__probe__wait", json!({})),
            ScriptTurn::tool("t3", "mcp__probe__echo", json!({"text": "still here"})),
            ScriptTurn::text("done"),
        ],
    );
    let child = home
        .command(&["run", "--json", "--replay", &cassette, "survive a crash"])
        .spawn()
        .expect("hanzo-dev run");
    let run = child.id();
    wait_for("the first call to reach the server", || {
        call_id(&home, "slow")
    });
    let pids = |role: &str| wait_for(role, || worker_of(run, role));
    let (broker, model, mcp) = (pids("broker"), pids("model"), pids("mcp"));
    std::process::Command::new("kill")
        .args(["-9", &mcp.to_string()])
        .status()
        .expect("kill");
    // The second call reaches a new server process, started by a new mcp worker.
    let deadline = Instant::now() + Duration::from_secs(60);
    // (In tier B each server has the same pid in its own namespace: count `initialize`s.)
    let restarted_and_called = |log: &[(u64, Value)]| {
        log.iter()
            .skip_while(|(_, m)| m["params"]["name"] != "slow")
            .skip_while(|(_, m)| m["method"] != "initialize")
            .any(|(_, m)| m["params"]["name"] == "wait")
    };
    while !restarted_and_called(&received(&home)) {
        if Instant::now() > deadline {
            let mut child = child;
            let _ = child.kill();
            let (_, stdout, stderr) = finish(child);
            panic!(
                "no second call at a restarted server: {:#?}\n{stderr}\n{stdout}",
                received(&home)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let again = worker_of(run, "mcp").expect("an mcp worker");
    assert_ne!(again, mcp);
    assert_eq!(
        worker_of(run, "broker"),
        Some(broker),
        "the broker was restarted"
    );
    assert_eq!(
        worker_of(run, "model"),
        Some(model),
        "the model worker was restarted"
    );
    std::fs::write(home.path("ws/go"), "").expect("go");
    let (code, stdout, stderr) = finish(child);
    assert_eq!(code, 0, "{stderr}\n{stdout}");
    let events = events(&stdout);
    assert_eq!(event(&events, "tool_result", "t1")["is_error"], true);
    assert_eq!(event(&events, "tool_result", "t2")["is_error"], false);
    let echo = event(&events, "tool_result", "t3");
    assert_eq!(echo["is_error"], false, "{echo}");
    assert!(echo["preview"]
        .as_str()
        .unwrap_or_default()
        .contains("still here"));
    assert_eq!(event(&events, "run_finished", "")["status"], "succeeded");
}

/// A local provider (Anthropic's wire format) answering `turns` in order.
fn provider_for(rt: &tokio::runtime::Runtime, turns: &[ScriptTurn]) -> fixtures::server::Server {
    rt.block_on(fixtures::server::Server::start(
        turns
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let body: Vec<u8> = hanzo_model::script::anthropic_exchange(i, t)
                    .chunks
                    .into_iter()
                    .flat_map(|c| c.into_bytes())
                    .collect();
                fixtures::server::Reply::sse(&String::from_utf8(body).expect("UTF-8"), 1 << 16)
            })
            .collect(),
    ))
}

/// The names of the tools each request the provider received offered.
fn offered_names(provider: &fixtures::server::Server) -> Vec<Vec<String>> {
    provider
        .received()
        .iter()
        .map(|r| {
            let body: Value = serde_json::from_slice(&r.body).expect("a JSON request");
            body["tools"]
                .as_array()
                .map(|ts| {
                    ts.iter()
                        .filter_map(|t| t["name"].as_str())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default()
        })
        .collect()
}

/// The probe server as `probe` and, beside it, a server `bad` listing two tools whose names
/// both normalise to `mcp__bad__a_b` (`a.b` and `a b`).
fn colliding_home() -> TestHome {
    let home = probe_home();
    let script = home.path("ws/probe_server.py");
    home.settings(json!({
        "mcp_servers": {
            "probe": {
                "command": "/usr/bin/python3",
                "args": [script, home.path("ws/probe.log")],
                "filesystem": "workspace-rw",
            },
            "bad": {
                "command": "/usr/bin/python3",
                "args": [script, home.path("ws/bad.log"), "a.b", "a b"],
                "filesystem": "workspace-rw",
            },
        },
        "permissions": {"mcp__probe__*": "allow", "mcp__bad__*": "allow"},
    }));
    home
}

/// What the worker says of `bad` (its two tools named, and the name both become).
const COLLISION: &str = r#"tools "a.b" and "a b" both become "mcp__bad__a_b""#;

/// A server whose tools cannot be offered (two of them normalise to the same name) is left out
/// of what the model is offered, with a warning naming both tools; the other server's tools
/// and the built-in tools are offered at every step, and the run calls one and succeeds.
#[test]
fn a_server_whose_tool_names_collide_is_left_out_and_the_run_goes_on() {
    let home = colliding_home();
    let turns = [
        ScriptTurn::tool("t1", "mcp__probe__echo", json!({"text": "still offered"})),
        ScriptTurn::text("done"),
    ];
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let provider = provider_for(&rt, &turns);
    let out = home
        .command(&[
            "run",
            "--json",
            "--provider",
            "anthropic",
            "--base-url",
            &provider.base,
            "echo something",
        ])
        .env("ANTHROPIC_API_KEY", "sk-ant-test-mcp-run")
        .output()
        .expect("hanzo-dev run");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{stdout}");
    let offered = offered_names(&provider);
    assert_eq!(offered.len(), 2, "{offered:?}");
    for names in &offered {
        for want in ["mcp__probe__echo", "mcp__probe__slow", "read_file", "bash"] {
            assert!(names.iter().any(|n| n == want), "{want}: {names:?}");
        }
        assert!(
            !names.iter().any(|n| n.starts_with("mcp__bad__")),
            "{names:?}"
        );
    }
    let events = events(&stdout);
    let echo = event(&events, "tool_result", "t1");
    assert_eq!(echo["is_error"], false, "{echo}");
    assert!(echo["preview"]
        .as_str()
        .unwrap_or_default()
        .contains("still offered"));
    assert_eq!(event(&events, "run_finished", "")["status"], "succeeded");
    // The warning names both tools, once (not at every step).
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains(COLLISION)).collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains("none of its tools is offered"),
        "{stderr}"
    );
    // The bad server did start, and was asked for its tools.
    let listed = std::fs::read_to_string(home.path("ws/bad.log")).unwrap_or_default();
    assert!(listed.contains("tools/list"), "{listed}");
}

/// `hanzo-dev mcp list` shows the colliding server ready, its tools not offered and why;
/// `mcp tools` lists the other server's tools; `mcp tools bad` fails, naming both tools.
#[test]
fn mcp_list_says_why_a_server_s_tools_are_not_offered() {
    let home = colliding_home();
    let (code, stdout, stderr) = home.run(&["mcp", "list", "--json"]);
    assert_eq!(code, 0, "{stderr}\n{stdout}");
    let doc: Value = serde_json::from_str(&stdout).expect("JSON");
    let server = |name: &str| {
        doc["servers"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["name"] == name))
            .cloned()
            .unwrap_or_else(|| panic!("no {name}: {doc}"))
    };
    let bad = server("bad");
    assert_eq!(bad["state"], "ready", "{bad}");
    assert_eq!(bad["tools_offered"], false, "{bad}");
    let reason = bad["reason"].as_str().unwrap_or_default();
    assert!(reason.contains(COLLISION), "{bad}");
    let probe = server("probe");
    assert_eq!(probe["tools_offered"], true, "{probe}");
    assert_eq!(probe["reason"], Value::Null, "{probe}");
    // The table says it too.
    let (code, table, stderr) = home.run(&["mcp", "list"]);
    assert_eq!(code, 0, "{stderr}");
    let row = table
        .lines()
        .find(|l| l.starts_with("bad "))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(row.contains(COLLISION), "{row}");

    let (code, stdout, stderr) = home.run(&["mcp", "tools", "--json"]);
    assert_eq!(code, 0, "{stderr}\n{stdout}");
    let doc: Value = serde_json::from_str(&stdout).expect("JSON");
    let tools = doc["tools"].as_array().expect("tools");
    assert!(tools.iter().all(|t| t["server"] == "probe"), "{doc}");
    assert!(
        tools.iter().any(|t| t["name"] == "mcp__probe__echo"),
        "{doc}"
    );

    let (code, stdout, stderr) = home.run(&["mcp", "tools", "bad"]);
    assert_ne!(code, 0, "{stdout}");
    assert!(stderr.contains(COLLISION), "{stderr}");
}
