//! What `chat` gained from the session host (`cli/host.rs`), through a real terminal (a tmux
//! pane): `--record` of a session against a live provider (a local server speaking Anthropic's
//! SSE) that `--replay` plays back offline, and the language servers' diagnostics on an edit,
//! as `run` has them. Every wait polls the screen against a deadline; nothing asserts on time.

#[path = "../../workers/model/tests/fixtures/mod.rs"]
mod fixtures;

#[path = "common/tmux.rs"]
mod tmux;

use fixtures::server::{Reply, Server};
use hanzo_model::script::{anthropic_cassette, anthropic_events, ScriptTurn};
use hanzo_store::{RunStatus, SessionId};
use serde_json::{json, Value};
use std::path::Path;
use tmux::Pane;

/// The pane size of these tests.
const SIZE: (u16, u16) = (100, 30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_recorded_against_a_live_provider_replays_offline() {
    let turn = ScriptTurn::text("Recorded reply: **gamma**.");
    let server = Server::start(vec![Reply::sse(&anthropic_events(0, &turn).concat(), 64)]).await;
    let base = server.base.clone();
    let p = tokio::task::spawn_blocking(move || {
        let p = Pane::new();
        let cassette = p.path("chat.jsonl").display().to_string();
        p.start_in(
            "ws",
            SIZE,
            &[
                "--provider",
                "anthropic",
                "--base-url",
                &base,
                "--record",
                &cassette,
            ],
            &[("ANTHROPIC_API_KEY", "sk-ant-test-key-for-the-fake-server")],
        );
        p.wait_text("/help lists commands");
        p.type_line("say gamma");
        p.wait_text("Recorded reply: gamma.");
        p.keys(&["C-d"]);
        p.wait_text("[chat exited 0]");
        let lines = std::fs::read_to_string(&cassette).expect("the cassette was written");
        assert_eq!(lines.lines().count(), 1, "one model exchange: {lines}");
        // Offline, from the recording: the same reply, and nothing sent to the server.
        p.start_in("ws", SIZE, &["--replay", &cassette], &[]);
        p.wait_text("/help lists commands");
        p.type_line("say gamma");
        p.wait_text("Recorded reply: gamma.");
        p.keys(&["C-d"]);
        p.wait_text("[chat exited 0]");
        p
    })
    .await
    .expect("the chat sessions");
    assert_eq!(server.received().len(), 1, "the replay reached the server");
    let sessions = p.store().list_sessions(None, 10).expect("sessions");
    assert_eq!(sessions.len(), 2);
}

fn link_tree(src: &Path, dst: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dst)?;
    for entry in std::fs::read_dir(src)? {
        let entry = entry?;
        let (from, to) = (entry.path(), dst.join(entry.file_name()));
        let ty = entry.file_type()?;
        if ty.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&from)?, &to)?;
        } else if ty.is_dir() {
            link_tree(&from, &to)?;
        } else if std::fs::hard_link(&from, &to).is_err() {
            std::fs::copy(&from, &to)?;
        }
    }
    Ok(())
}

#[test]
fn a_chat_edit_gets_pyright_diagnostics_back() {
    let p = Pane::new();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../test-deps/lsp/node_modules");
    assert!(
        src.join(".bin/pyright-langserver").exists(),
        "pyright is missing from test-deps/lsp: run ./scripts/setup.sh"
    );
    link_tree(&src, &p.path("ws/node_modules")).expect("install pyright into the workspace");
    std::fs::write(
        p.path("ws/lib.py"),
        "def double(x: int) -> int:\n    return x * 2\n",
    )
    .unwrap();
    std::fs::write(
        p.path("ws/app.py"),
        "from lib import double\n\nprint(double(2))\n",
    )
    .unwrap();
    std::fs::write(
        p.path("config/hanzo/settings.json"),
        json!({
            "lsp_servers": {"pyright": {"command": "node_modules/.bin/pyright-langserver"}},
            "permissions": {"edit_file": "allow", "read_file": "allow"},
        })
        .to_string(),
    )
    .unwrap();
    let cassette = p.path("lsp.jsonl");
    std::fs::write(
        &cassette,
        anthropic_cassette(&[
            ScriptTurn::tool("t0", "read_file", json!({"path": "app.py"})),
            ScriptTurn::tool(
                "t1",
                "edit_file",
                json!({"path": "app.py", "old_string": "double(2)", "new_string": "double(\"two\")"}),
            ),
            ScriptTurn::text("I broke the types."),
        ]),
    )
    .unwrap();
    p.start_in(
        "ws",
        SIZE,
        &["--replay", &cassette.display().to_string()],
        &[],
    );
    p.wait_text("/help lists commands");
    p.type_line("change the call");
    p.wait_text("I broke the types.");
    p.keys(&["C-d"]);
    p.wait_text("[chat exited 0]");
    let store = p.store();
    let session = store.list_sessions(None, 1).expect("sessions")[0].id;
    let runs = store.list_session_runs(session).expect("runs");
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, RunStatus::Succeeded);
    let rec = store.load_run(runs[0].id).expect("run");
    let edit = rec
        .steps
        .iter()
        .flat_map(|s| &s.tool_calls)
        .find(|c| c.call.name == "edit_file")
        .expect("the edit");
    let out = edit.call.output.as_deref().unwrap_or("");
    assert!(out.contains("<diagnostics"), "{out}");
    assert!(
        out.contains("app.py:3:14 error [reportArgumentType]"),
        "{out}"
    );
}

/// The text of a message in an Anthropic request body (a string, or its text blocks joined).
fn message_text(m: &Value) -> String {
    match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The messages of the `i`th request the server received, as (role, text).
fn request_messages(server: &Server, i: usize) -> (Value, Vec<(String, String)>) {
    let got = server.received();
    let body: Value = serde_json::from_slice(&got[i].body).expect("a JSON request body");
    let messages = body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default().to_string(),
                message_text(m),
            )
        })
        .collect();
    (body, messages)
}

/// `conversation compacted: N → M tokens` on `screen`: (N, M).
fn compacted_figures(screen: &str) -> (u64, u64) {
    let line = screen
        .lines()
        .find_map(|l| l.split("conversation compacted: ").nth(1))
        .expect("the compaction line");
    let (before, rest) = line.split_once(" → ").expect("N → M");
    let after = rest.split_whitespace().next().expect("M");
    (before.trim().parse().expect("N"), after.parse().expect("M"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_summarises_the_session_and_later_turns_and_resume_start_from_it() {
    let filler = "with enough words to make the turn worth compacting ".repeat(12);
    let reply = |t: &str| Reply::sse(&anthropic_events(0, &ScriptTurn::text(t)).concat(), 64);
    let server = Server::start(vec![
        reply(&format!("Alpha answer, {filler}")),
        reply(&format!("Beta answer, {filler}")),
        // The first /compact: the provider refuses the request.
        Reply::json(
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"no summary today"}}"#,
        ),
        // The second: the summary, with an escape sequence the screen must not obey.
        reply("SUMMARY-XYZ: the user said one \u{1b}]2;pwned-summary\u{7} and two."),
        reply("Gamma answer."),
        // After `--resume`.
        reply("Delta answer."),
    ])
    .await;
    let base = server.base.clone();
    let (p, screen_figures) = tokio::task::spawn_blocking(move || {
        let p = Pane::new();
        let live = [
            "--provider",
            "anthropic",
            "--base-url",
            base.as_str(),
            "--approval",
            "deny",
        ];
        let key = [("ANTHROPIC_API_KEY", "sk-ant-test-key-for-the-fake-server")];
        p.start_in("ws", SIZE, &live, &key);
        p.wait_text("/help lists commands");
        p.type_line("/compact");
        p.wait_text("nothing to compact: 0 turns since the session began");
        p.type_line("hello one");
        p.wait_text("Alpha answer");
        p.type_line("hello two");
        p.wait_text("Beta answer");
        // A failed summary: said so, and nothing stored.
        p.type_line("/compact");
        p.wait_text("compaction failed:");
        let store = p.store();
        assert!(store
            .session_summaries(SessionId(1))
            .expect("summaries")
            .is_empty());
        assert_eq!(
            store
                .session_context(SessionId(1))
                .expect("ctx")
                .turns
                .len(),
            2,
            "the session is as it was"
        );
        drop(store);
        p.type_line("/compact");
        let s = p.wait_text("conversation compacted: ");
        let figures = compacted_figures(&s);
        let s = p.wait_text("SUMMARY-XYZ");
        assert!(s.contains("␛]2;pwned-summary␇"), "shown inert: {s}");
        assert!(!p.title().contains("pwned"), "the title was set");
        p.type_line("hello three");
        p.wait_text("Gamma answer.");
        p.keys(&["C-d"]);
        p.wait_text("[chat exited 0]");
        // Resumed: the turns are shown with the compaction between them, and the next turn
        // starts from the summary too.
        p.start_in("ws", SIZE, &[&["--resume"], &live[..]].concat(), &key);
        // (The "resumed session" line itself has scrolled out of a 30-row pane by now.)
        let s = p.wait_text("conversation compacted here");
        assert!(
            s.contains("› hello three") && s.contains("SUMMARY-XYZ"),
            "{s}"
        );
        p.type_line("hello four");
        p.wait_text("Delta answer.");
        p.keys(&["C-d"]);
        p.wait_text("[chat exited 0]");
        (p, figures)
    })
    .await
    .expect("the chat sessions");
    assert_eq!(server.received().len(), 6);

    // The summary request: the summarise prompt, no tools, the two turns in it.
    let (body, ask) = request_messages(&server, 3);
    assert!(
        body["system"]
            .as_str()
            .unwrap_or_default()
            .contains("You compress conversation history"),
        "{body}"
    );
    assert!(
        body.get("tools")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty),
        "{body}"
    );
    assert_eq!(ask.len(), 1);
    for part in ["hello one", "Alpha answer", "hello two", "Beta answer"] {
        assert!(ask[0].1.contains(part), "{part}: {}", ask[0].1);
    }

    // The third turn: the summary first, then the new message; none of the old turns.
    let (_, third) = request_messages(&server, 4);
    let roles: Vec<&str> = third.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "user"], "{third:?}");
    assert!(
        third[0]
            .1
            .starts_with("[Summary of the earlier conversation]\nSUMMARY-XYZ: the user said one"),
        "{third:?}"
    );
    assert_eq!(third[2].1, "hello three");
    for (_, text) in &third {
        for old in ["hello one", "Alpha answer", "hello two", "Beta answer"] {
            assert!(
                !text.contains(old),
                "an old turn went to the model: {third:?}"
            );
        }
    }

    // The resumed turn: the summary, the turn after it, then the new message.
    let (_, fourth) = request_messages(&server, 5);
    let texts: Vec<&str> = fourth.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(texts.len(), 5, "{fourth:?}");
    assert!(texts[0].contains("SUMMARY-XYZ"), "{fourth:?}");
    assert_eq!(&texts[2..], ["hello three", "Gamma answer.", "hello four"]);
    assert!(
        !texts.iter().any(|t| t.contains("Alpha answer")),
        "{fourth:?}"
    );

    // The record: one summary through the second turn, with the figures the screen showed;
    // every turn kept.
    let store = p.store();
    let runs = store.list_session_runs(SessionId(1)).expect("runs");
    assert_eq!(runs.len(), 4);
    assert!(runs.iter().all(|r| r.status == RunStatus::Succeeded));
    let summaries = store.session_summaries(SessionId(1)).expect("summaries");
    assert_eq!(summaries.len(), 1);
    let s = &summaries[0];
    assert_eq!((s.through_run, s.turns), (runs[1].id, 2));
    assert_eq!((s.tokens_before, s.tokens_after), screen_figures);
    assert!(s.tokens_after < s.tokens_before, "{s:?}");
    assert!(s.summary.starts_with("SUMMARY-XYZ"), "{s:?}");
}
