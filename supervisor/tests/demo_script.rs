//! The demo's recording is coherent with the bundled project: in a fresh copy the tests fail with
//! exactly the one failure the model talks about, the model's `edit_file` applies (its
//! `old_string` occurs exactly once) and afterwards every test passes. Also: both committed
//! cassettes replay through the real model parser to exactly their scripts' events.
//!
//! Runs `python3` directly (no sandbox): this checks the recording, not the isolation.

use hanzo_dev::demo::{injection_script, script, write_project, CASSETTE};
use hanzo_ipc::roles::model::{
    CompletionRequest, Message, ProviderConfig, RetryPolicy, StreamEvent, WireFormat,
};
use hanzo_model::cassette::{parse_cassette, ReplayTransport};
use hanzo_model::run_turn;
use hanzo_model::script::ScriptTurn;
use std::path::Path;
use std::process::{Command, Output};
use tokio::sync::mpsc;

fn unittest(dir: &Path) -> Output {
    Command::new("python3")
        .args(["-B", "-m", "unittest", "-v"])
        .current_dir(dir)
        .output()
        .expect("python3 runs (the demo needs python3 on PATH)")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The script's edits as (path, old_string, new_string).
fn edits() -> Vec<(String, String, String)> {
    script()
        .iter()
        .flat_map(|t| &t.tool_uses)
        .filter(|c| c.name == "edit_file")
        .map(|c| {
            let s = |k: &str| {
                c.input[k]
                    .as_str()
                    .expect("edit_file string field")
                    .to_string()
            };
            (s("path"), s("old_string"), s("new_string"))
        })
        .collect()
}

#[test]
fn the_scripted_edit_turns_one_failing_test_into_a_passing_suite() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_project(dir.path()).expect("write the project");

    let before = unittest(dir.path());
    let report = stderr(&before);
    assert!(
        !before.status.success(),
        "the bug must make the suite fail:\n{report}"
    );
    assert!(report.contains("Ran 7 tests"), "{report}");
    assert!(report.contains("FAILED (failures=1)"), "{report}");
    assert_eq!(report.matches("... FAIL").count(), 1, "{report}");
    // What the model says about the failure (turn 5) is what the run shows.
    assert!(
        report.contains("test_exact_multiple_of_page_size") && report.contains("3 != 2"),
        "{report}"
    );

    let edits = edits();
    assert_eq!(edits.len(), 1, "the demo fixes the bug in one edit");
    for (path, old, new) in &edits {
        let file = dir.path().join(path);
        let text = std::fs::read_to_string(&file).expect("edited file exists");
        assert_eq!(
            text.matches(old.as_str()).count(),
            1,
            "old_string is unique"
        );
        std::fs::write(&file, text.replacen(old.as_str(), new, 1)).expect("apply the edit");
    }

    let after = unittest(dir.path());
    let report = stderr(&after);
    assert!(
        after.status.success(),
        "the edit must fix the suite:\n{report}"
    );
    assert!(report.contains("Ran 7 tests"), "{report}");
    assert!(report.trim_end().ends_with("OK"), "{report}");
}

#[test]
fn the_scripts_reads_point_at_the_lines_they_mean() {
    // Turn 5 reads the failing test and `page_count` by line range; the ranges must show them.
    let dir = tempfile::tempdir().expect("tempdir");
    write_project(dir.path()).expect("write the project");
    let ranged: Vec<_> = script()
        .iter()
        .flat_map(|t| t.tool_uses.clone())
        .filter(|c| c.name == "read_file" && c.input.get("offset").is_some())
        .collect();
    assert_eq!(ranged.len(), 2);
    let shown = |i: usize| -> String {
        let input = &ranged[i].input;
        let text = std::fs::read_to_string(dir.path().join(input["path"].as_str().expect("path")))
            .expect("read");
        let offset = usize::try_from(input["offset"].as_u64().expect("offset")).expect("offset");
        let limit = usize::try_from(input["limit"].as_u64().expect("limit")).expect("limit");
        text.lines()
            .skip(offset - 1)
            .take(limit)
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(shown(0).contains("def test_exact_multiple_of_page_size"));
    assert!(shown(0).contains("page_count(list(range(20)), 10), 2)"));
    assert!(shown(1).starts_with("def page_count(items, per_page):"));
    assert!(shown(1).contains("return len(items) // per_page + 1"));
}

/// A tool input, parsed as strictly as the tools worker parses it (unknown fields refused).
fn parsed<T: serde::de::DeserializeOwned>(id: &str, input: &serde_json::Value) -> T {
    serde_json::from_value(input.clone())
        .unwrap_or_else(|e| panic!("{id}: the input does not parse: {e}"))
}

/// The whole demo without the sandbox: every scripted call in order, the file tools through the
/// tools worker's own functions (which parse the input as strictly as the worker does), `bash`
/// through `sh -c`. Each call must succeed, except the first test run, which must fail.
#[test]
fn the_demo_script_runs_call_by_call_against_the_project() {
    use hanzo_tools::files::{edit_file, list_dir, read_file};
    use hanzo_tools::paths::Roots;

    let dir = tempfile::tempdir().expect("tempdir");
    write_project(dir.path()).expect("write the project");
    let roots = Roots::new(dir.path(), &[]).expect("roots");
    let mut outputs = Vec::new();
    let mut test_runs = Vec::new();
    for call in script().iter().flat_map(|t| t.tool_uses.clone()) {
        let input = call.input.clone();
        let out = match call.name.as_str() {
            "list_dir" => list_dir(&roots, parsed(&call.id, &input)),
            "read_file" => read_file(&roots, parsed(&call.id, &input)),
            "edit_file" => edit_file(&roots, parsed(&call.id, &input)),
            "bash" => {
                let o = Command::new("/bin/sh")
                    .args(["-c", input["command"].as_str().expect("command")])
                    .current_dir(dir.path())
                    .env("PYTHONDONTWRITEBYTECODE", "1")
                    .output()
                    .expect("sh runs");
                test_runs.push(o.status.success());
                Ok(stderr(&o))
            }
            other => panic!("the demo does not use {other}"),
        };
        outputs.push((
            call.id.clone(),
            out.unwrap_or_else(|e| panic!("{}: {e}", call.id)),
        ));
    }
    assert_eq!(test_runs, [false, true], "the tests fail, then pass");
    let out = |id: &str| -> &str { &outputs.iter().find(|(i, _)| i == id).expect("call ran").1 };
    assert_eq!(out("toolu_demo_01"), "README.md\npager/\ntests/");
    assert_eq!(out("toolu_demo_03"), "__init__.py\npages.py");
    assert!(out("toolu_demo_02").contains("Pages are numbered from 1"));
    assert!(out("toolu_demo_02").contains("python3 -m unittest -v"));
    assert!(out("toolu_demo_04").contains("def page_count(items, per_page):"));
    assert!(out("toolu_demo_04").contains("def page(items, number, per_page):"));
    assert!(out("toolu_demo_04").contains("def _check_size(per_page):"));
    assert_eq!(
        out("toolu_demo_08"),
        "replaced 1 occurrence in pager/pages.py"
    );
}

fn request() -> CompletionRequest {
    CompletionRequest {
        provider: ProviderConfig::Replay {
            wire: WireFormat::AnthropicMessages,
        },
        model: hanzo_model::script::SCRIPT_MODEL.into(),
        system: None,
        messages: vec![Message::user_text(hanzo_dev::demo::TASK)],
        tools: Vec::new(),
        max_tokens: 8192,
        retry: RetryPolicy {
            max_attempts: 1,
            base_ms: 1,
            max_ms: 1,
            budget_ms: 0,
        },
        record: false,
    }
}

/// Replays `cassette` turn by turn through the real turn driver and Anthropic parser and checks
/// every turn's events against the script.
async fn replays_to_the_script(cassette: &str, turns: &[ScriptTurn]) {
    let replay = ReplayTransport::new(parse_cassette(cassette).expect("cassette parses"));
    for (i, turn) in turns.iter().enumerate() {
        let (tx, mut rx) = mpsc::channel(4096);
        let completion = run_turn(&replay, &request(), &tx, Some(1))
            .await
            .unwrap_or_else(|e| panic!("turn {i} replays: {e}"));
        drop(tx);
        let mut events: Vec<StreamEvent> = Vec::new();
        while let Some(e) = rx.recv().await {
            events.push(e);
        }
        assert_eq!(completion.stop_reason, turn.stop_reason(), "turn {i}");
        assert_eq!(events, turn.expected_events(), "turn {i}");
    }
    assert_eq!(
        replay.remaining(),
        0,
        "one exchange per turn, none left over"
    );
}

#[tokio::test]
async fn the_demo_cassette_replays_to_the_script() {
    replays_to_the_script(CASSETTE, &script()).await;
}

#[tokio::test]
async fn the_injection_cassette_replays_to_its_script() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/injection/injection.cassette.jsonl");
    let cassette = std::fs::read_to_string(path).expect("injection cassette");
    replays_to_the_script(&cassette, &injection_script()).await;
}
