//! `hanzo-dev run` against a live provider: a local HTTP server speaking Anthropic's SSE, reached
//! through the real broker (which injects the key) and parsed by the real model worker. Checks
//! what the provider was sent (system prompt, tools, the tool result of the previous turn), that
//! the key is nowhere but in the request header, and that `--record` writes a cassette that
//! replays the same run offline.

#[path = "../../workers/model/tests/fixtures/mod.rs"]
mod fixtures;

use fixtures::server::{Reply, Server};
use hanzo_model::script::{anthropic_events, ScriptTurn};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Output;

const KEY: &str = "sk-ant-CANARY-run-live-41c7";

async fn hanzo(root: &Path, args: &[&str], key: bool) -> Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_hanzo-dev"));
    cmd.args(args)
        .current_dir(root.join("ws"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", root.join("home"))
        .env("XDG_DATA_HOME", root.join("data"))
        .env("XDG_CONFIG_HOME", root.join("config"));
    if key {
        cmd.env("ANTHROPIC_API_KEY", KEY);
    }
    tokio::time::timeout(std::time::Duration::from_secs(120), cmd.output())
        .await
        .expect("hanzo-dev run did not finish within the hang guard")
        .expect("run hanzo-dev")
}

fn events(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON event"))
        .collect()
}

/// The events that do not depend on timing or ids.
fn stable(events: &[Value]) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["type"] != "run_started" && e["type"] != "run_finished")
        .map(|e| {
            let mut e = e.clone();
            if let Some(o) = e.as_object_mut() {
                o.remove("duration_ms");
            }
            e
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_run_sends_tool_results_back_and_records_a_replayable_cassette() {
    let turns = [
        ScriptTurn::tool("toolu_1", "read_file", json!({"path": "notes.txt"}))
            .with_text("Reading the notes."),
        ScriptTurn::text("The notes say: ship on Friday."),
    ];
    let server = Server::start(
        turns
            .iter()
            .enumerate()
            .map(|(i, t)| Reply::sse(&anthropic_events(i, t).concat(), 13))
            .collect(),
    )
    .await;
    let root = tempfile::tempdir().expect("tmp");
    for d in ["ws", "home", "data", "config"] {
        std::fs::create_dir_all(root.path().join(d)).expect("mkdir");
    }
    std::fs::write(root.path().join("ws/notes.txt"), "ship on Friday\n").expect("notes");
    let cassette = root.path().join("run.jsonl");
    let cassette_arg = cassette.display().to_string();
    let live = hanzo(
        root.path(),
        &[
            "run",
            "--json",
            "--provider",
            "anthropic",
            "--base-url",
            &server.base,
            "--approval",
            "allow-listed",
            "--record",
            &cassette_arg,
            "what do the notes say?",
        ],
        true,
    )
    .await;
    let stderr = String::from_utf8_lossy(&live.stderr).to_string();
    assert_eq!(live.status.code(), Some(0), "{stderr}");
    let live_events = events(&live);
    let fin = live_events.last().expect("events");
    assert_eq!(fin["status"], "succeeded");
    assert_eq!(fin["outcome"], "The notes say: ship on Friday.");

    // What the provider was sent.
    let got = server.received();
    assert_eq!(got.len(), 2);
    for r in &got {
        assert_eq!(r.method, "POST");
        assert!(r.path.ends_with("/v1/messages"), "{}", r.path);
        assert_eq!(r.header("x-api-key"), Some(KEY));
    }
    let first: Value = serde_json::from_slice(&got[0].body).expect("JSON body");
    assert!(first["system"]
        .as_str()
        .unwrap_or("")
        .contains("coding agent"));
    let tools: Vec<&str> = first["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        tools.contains(&"read_file") && tools.contains(&"bash"),
        "{tools:?}"
    );
    assert_eq!(first["stream"], true);
    let second: Value = serde_json::from_slice(&got[1].body).expect("JSON body");
    let msgs = second["messages"].as_array().expect("messages");
    assert_eq!(msgs.len(), 3, "task, assistant tool use, tool result");
    assert_eq!(msgs[1]["role"], "assistant");
    let result = &msgs[2]["content"][0];
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["tool_use_id"], "toolu_1");
    assert!(
        result["content"].to_string().contains("ship on Friday"),
        "{result}"
    );

    // The key is nowhere else.
    let recorded = std::fs::read_to_string(&cassette).expect("cassette written");
    assert_eq!(recorded.lines().count(), 2);
    let store = std::fs::read(root.path().join("data/hanzo/orgs/local/agents.db")).expect("db");
    for (what, text) in [
        ("stdout", String::from_utf8_lossy(&live.stdout).to_string()),
        ("stderr", stderr),
        ("cassette", recorded),
        ("store", String::from_utf8_lossy(&store).to_string()),
    ] {
        assert!(!text.contains(KEY), "the key leaked into the {what}");
    }

    // Offline, no key: the recording replays the same run.
    let replay = hanzo(
        root.path(),
        &[
            "run",
            "--json",
            "--approval",
            "allow-listed",
            "--replay",
            &cassette_arg,
            "what do the notes say?",
        ],
        false,
    )
    .await;
    assert_eq!(
        replay.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&replay.stderr)
    );
    assert_eq!(stable(&events(&replay)), stable(&live_events));
    assert_eq!(
        server.received().len(),
        2,
        "the replay did not call the provider"
    );
}
