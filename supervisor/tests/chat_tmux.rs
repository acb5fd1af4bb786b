//! `hanzo-dev chat` driven through a real terminal: the real binary runs in a tmux pane (a
//! pseudo-terminal, 80×24 unless a test resizes it), keys arrive with `send-keys`, and the test
//! reads the screen with `capture-pane`. The model is a cassette (`--replay`), the one thing
//! that cannot run here; the workers, sandbox, policy and store are real, and each test reads
//! the store afterwards. Every wait polls the screen against a deadline; nothing asserts on
//! time.

#[path = "common/tmux.rs"]
mod tmux;

use hanzo_model::script::ScriptTurn;
use hanzo_store::{RunStatus, SessionId};
use serde_json::json;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};
use tmux::{git, init_repo, input_line_of, input_rows_of, Pane, EXE, HANG_GUARD};

#[test]
fn two_turns_in_one_session_then_resumed() {
    let p = Pane::new();
    let cas = p.cassette(
        "two.jsonl",
        &[
            ScriptTurn::text("First answer: **alpha** streamed."),
            ScriptTurn::text("Second answer: *beta*."),
        ],
    );
    p.start(&["--replay", &cas], &[]);
    p.wait_text("/help lists commands");
    p.type_text("hello one");
    p.keys(&["Enter"]);
    p.wait_text("First answer: alpha streamed.");
    p.type_text("hello two");
    p.keys(&["Enter"]);
    let s = p.wait_text("Second answer: beta.");
    assert!(
        s.contains("› hello one") && s.contains("› hello two"),
        "{s}"
    );
    assert!(s.contains("tier "), "status line: {s}");
    p.keys(&["C-d"]);
    p.wait_text("[chat exited 0]");
    let store = p.store();
    let sessions = store.list_sessions(None, 10).expect("sessions");
    assert_eq!(sessions.len(), 1);
    let id = sessions[0].id;
    assert_eq!(sessions[0].title.as_deref(), Some("hello one"));
    let runs = store.list_session_runs(id).expect("runs");
    assert_eq!(
        runs.iter()
            .map(|r| (r.input.as_str(), r.status))
            .collect::<Vec<_>>(),
        [
            ("hello one", RunStatus::Succeeded),
            ("hello two", RunStatus::Succeeded)
        ]
    );
    drop(store);
    // Resumed: the earlier turns are on screen and the next run joins the same session.
    // A fresh tmux server on a socket of its own (the old one may still be exiting).
    let cas3 = p.cassette("three.jsonl", &[ScriptTurn::text("Third answer.")]);
    p.start(&["--resume", "--replay", &cas3], &[]);
    let s = p.wait_text("resumed session 1: 2 earlier turns");
    assert!(s.contains("Second answer: beta."), "{s}");
    p.type_text("hello three");
    p.keys(&["Enter"]);
    p.wait_text("Third answer.");
    p.keys(&["C-d"]);
    p.wait_text("[chat exited 0]");
    let runs = p.store().list_session_runs(SessionId(1)).expect("runs");
    assert_eq!(runs.len(), 3);
    assert_eq!(runs[2].input, "hello three");
}

#[test]
fn a_call_approved_and_another_denied_with_a_reason_at_the_prompt() {
    let p = Pane::new();
    let cas = p.cassette(
        "approve.jsonl",
        &[
            ScriptTurn::tool(
                "toolu_1",
                "bash",
                json!({"command": "echo approved-$((6*7))"}),
            ),
            ScriptTurn::tool("toolu_2", "bash", json!({"command": "echo never-runs"})),
            ScriptTurn::text("All done."),
        ],
    );
    p.start(&["--replay", &cas, "--approval", "prompt"], &[]);
    p.wait_text("/help lists commands");
    p.type_text("run two commands");
    p.keys(&["Enter"]);
    let s = p.wait_text("allow bash?");
    assert!(
        s.contains("│ echo approved-$((6*7))"),
        "the exact command: {s}"
    );
    assert!(s.contains("asked by:"), "the rule that asked: {s}");
    p.keys(&["y"]);
    p.wait_text("approved-42");
    let s = p.wait_text("│ echo never-runs");
    assert!(s.contains("allow bash?"), "{s}");
    p.keys(&["n"]);
    p.type_text("not this one");
    p.keys(&["Enter"]);
    let s = p.wait_text("All done.");
    assert!(s.contains("denied (approval:prompt)"), "{s}");
    p.keys(&["C-d"]);
    p.wait_text("[chat exited 0]");
    let store = p.store();
    let run = store.list_runs(1).expect("runs")[0].id;
    let record = store.load_run(run).expect("load");
    let calls: Vec<_> = record.steps.iter().flat_map(|s| &s.tool_calls).collect();
    assert_eq!(calls.len(), 2);
    assert!(calls[0].call.allowed);
    assert_eq!(calls[0].call.decided_by.as_str(), "approval:prompt");
    assert!(calls[0]
        .call
        .output
        .as_deref()
        .unwrap_or("")
        .contains("approved-42"));
    assert!(!calls[1].call.allowed);
    assert!(
        calls[1].call.decision_reason.contains("not this one"),
        "{}",
        calls[1].call.decision_reason
    );
    assert_eq!(calls[1].call.output, None);
}

/// Whether a process whose command line is `sleep 297` is alive.
fn long_sleep_alive() -> bool {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == b"sleep\x00297\x00"))
}

#[test]
fn ctrl_c_cancels_a_long_command_and_twice_exits() {
    let p = Pane::new();
    let cas = p.cassette(
        "long.jsonl",
        &[
            ScriptTurn::tool("toolu_1", "bash", json!({"command": "sleep 297"})),
            ScriptTurn::text("unused"),
        ],
    );
    p.start(&["--replay", &cas, "--approval", "allow"], &[]);
    p.wait_text("/help lists commands");
    p.type_text("wait a long time");
    p.keys(&["Enter"]);
    p.wait_text("running");
    let deadline = Instant::now() + HANG_GUARD;
    while !long_sleep_alive() {
        assert!(Instant::now() < deadline, "the command never started");
        // Waiting for another process to appear in /proc: nothing to block on.
        std::thread::sleep(Duration::from_millis(50));
    }
    p.keys(&["C-c"]);
    let s = p.wait_text("turn cancelled");
    assert!(!s.contains("[chat exited"), "one Ctrl-C must not exit: {s}");
    let deadline = Instant::now() + HANG_GUARD;
    while long_sleep_alive() {
        assert!(
            Instant::now() < deadline,
            "the cancelled command is still running"
        );
        // As above: the kill is observed through /proc.
        std::thread::sleep(Duration::from_millis(50));
    }
    let store = p.store();
    let run = &store.list_runs(1).expect("runs")[0];
    assert_eq!(run.status, RunStatus::Cancelled);
    drop(store);
    p.keys(&["C-c", "C-c"]);
    p.wait_text("[chat exited 0]");
}

#[test]
fn resize_rewraps_and_no_color_has_no_colours_and_vim_keys_edit() {
    let p = Pane::new();
    let para = "This reply is a long paragraph of plain words that must be wrapped again \
                when the terminal becomes narrower, and **this part is bold** at the end.";
    let cas = p.cassette("wrap.jsonl", &[ScriptTurn::text(para)]);
    p.start(
        &["--replay", &cas],
        &[("NO_COLOR", "1"), ("HANZO_INPUT_MODE", "vim")],
    );
    p.wait_text("/help lists commands");
    // Vim: the box starts in Insert; back to Normal, delete the first word, send with :w.
    // Each mode change is waited for: an Esc followed at once by a key reads as Alt+key.
    p.wait_text("-- INSERT --");
    p.type_text("hello world");
    p.keys(&["Escape"]);
    p.wait_text("-- NORMAL --");
    p.type_text("0dw");
    p.wait_for("the first word deleted", |s| {
        s.contains("│world") && !s.contains("hello")
    });
    p.type_text(":w");
    p.keys(&["Enter"]);
    let s = p.wait_text("at the end.");
    assert!(s.contains("› world") && !s.contains("› hello world"), "{s}");
    for line in s.lines() {
        assert!(line.chars().count() <= 80, "wider than 80: {line:?}");
    }
    let styled = p.screen_styled();
    assert_no_colour(&styled);
    assert!(
        styled.contains("\u{1b}[1m"),
        "bold stays under NO_COLOR: {styled:?}"
    );
    let out = p.tmux(&["resize-window", "-t", "t", "-x", "50", "-y", "20"]);
    assert!(out.status.success(), "{out:?}");
    let s = p.wait_for("the reply rewrapped at 50 columns", |s| {
        s.lines().all(|l| l.chars().count() <= 50) && s.contains("at the end.")
    });
    let joined: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(joined.contains("this part is bold at the end."), "{s}");
    // After a send the box is back in Insert: Esc, then :q.
    p.keys(&["Escape"]);
    p.wait_text("-- NORMAL --");
    p.type_text(":q");
    p.keys(&["Enter"]);
    p.wait_text("[chat exited 0]");
}

/// No SGR sequence in `styled` sets a foreground or background colour.
fn assert_no_colour(styled: &str) {
    for seq in styled.split("\u{1b}[").skip(1) {
        let Some(end) = seq.find('m') else { continue };
        let params = &seq[..end];
        if !params.chars().all(|c| c.is_ascii_digit() || c == ';') {
            continue;
        }
        for p in params.split(';').filter_map(|p| p.parse::<u32>().ok()) {
            assert!(
                !matches!(p, 30..=38 | 40..=48 | 90..=97 | 100..=107),
                "a colour under NO_COLOR: ESC[{params}m"
            );
        }
    }
}

#[test]
fn escape_sequences_from_the_model_and_a_command_never_reach_the_terminal() {
    let p = Pane::new();
    let hostile_text = "Title next\u{1b}]2;pwned-by-model\u{7} clear\u{1b}[2J csi\u{9b}31m end.";
    let cas = p.cassette(
        "hostile.jsonl",
        &[
            ScriptTurn::tool(
                "toolu_1",
                "bash",
                json!({"command": "printf 'out\\033]2;pwned-by-tool\\007 \\033[2J\\033[31mred\\n'"}),
            ),
            ScriptTurn::text(hostile_text),
        ],
    );
    p.start(&["--replay", &cas, "--approval", "allow"], &[]);
    p.wait_text("/help lists commands");
    p.type_text("show me");
    p.keys(&["Enter"]);
    let s = p.wait_text("end.");
    // Shown as inert, visible escapes…
    assert!(s.contains("␛]2;pwned-by-model␇"), "{s}");
    assert!(s.contains("␛]2;pwned-by-tool␇"), "{s}");
    // …so the screen was not cleared (the user's line is still there)…
    assert!(s.contains("› show me"), "{s}");
    // …and the terminal never obeyed an OSC title.
    let title = p.title();
    assert!(!title.contains("pwned"), "the pane title was set: {title}");
    // The tool's own "red" is not red: colours on its line come from the UI only.
    let styled = p.screen_styled();
    let red_line = styled
        .lines()
        .find(|l| l.contains("red") && l.contains("pwned-by-tool"))
        .expect("the tool's output line");
    assert!(!red_line.contains("\u{1b}[31m"), "{red_line:?}");
    p.keys(&["C-d"]);
    p.wait_text("[chat exited 0]");
}

#[test]
fn without_a_terminal_bare_hanzo_dev_prints_help_and_chat_refuses() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |args: &[&str]| {
        Command::new(EXE)
            .args(args)
            .current_dir(dir.path())
            .env("XDG_DATA_HOME", dir.path().join("data"))
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run hanzo-dev")
    };
    let bare = run(&[]);
    assert_eq!(bare.status.code(), Some(2), "{bare:?}");
    assert!(
        String::from_utf8_lossy(&bare.stdout).contains("Usage:"),
        "{bare:?}"
    );
    let chat = run(&["chat"]);
    assert_eq!(chat.status.code(), Some(2), "{chat:?}");
    assert!(
        String::from_utf8_lossy(&chat.stderr).contains("needs a terminal"),
        "{chat:?}"
    );
}

#[test]
fn slash_commands_complete_on_tab_and_git_ones_say_when_there_is_no_repository() {
    let p = Pane::new();
    let cas = p.cassette("unused.jsonl", &[ScriptTurn::text("unused")]);
    p.start(&["--replay", &cas], &[]);
    p.wait_text("/help lists commands");
    p.type_text("/pl");
    p.keys(&["Tab"]);
    p.wait_text("│/plan ");
    p.keys(&["Enter"]);
    let s = p.wait_text("agent: plan (from the next turn)");
    assert!(s.contains("plan · tier"), "the status line follows: {s}");
    p.type_text("/stash");
    p.keys(&["Enter"]);
    p.wait_text("not inside a git repository");
    // Now a repository: a name git would read as an option is refused, a plain one made.
    let init = Command::new("git")
        .args(["init", "-q", "-b", "main"])
        .current_dir(p.path("ws"))
        .output()
        .expect("git init");
    assert!(init.status.success(), "{init:?}");
    p.type_text("/branch --orphan");
    p.keys(&["Enter"]);
    p.wait_text("starts with '-'");
    p.type_text("/branch feat-x");
    p.keys(&["Enter"]);
    p.wait_text("switched to a new branch feat-x");
    p.keys(&["C-d"]);
    p.wait_text("[chat exited 0]");
    assert!(
        p.store().list_runs(10).expect("runs").is_empty(),
        "a slash command ran a turn"
    );
}

// ---- helpers for the slash-command tests below

/// The test's PATH without any directory that holds a `gh`, so `/commit-push-pr` takes its
/// "gh is not installed" branch wherever the test runs.
fn path_without_gh() -> String {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let kept: Vec<PathBuf> = std::env::split_paths(&path)
        .filter(|d| !d.join("gh").exists())
        .collect();
    std::env::join_paths(kept)
        .expect("PATH entries")
        .to_string_lossy()
        .into_owned()
}

// ---- input modes and history

#[test]
fn emacs_keys_edit_the_box_and_recall_history() {
    let p = Pane::new();
    let cas = p.cassette("emacs.jsonl", &[ScriptTurn::text("Echo one.")]);
    p.start(&["--replay", &cas], &[("HANZO_INPUT_MODE", "emacs")]);
    p.wait_text("/help lists commands");
    p.type_text("alpha beta gamma");
    p.wait_input("alpha beta gamma");
    // C-a, C-e: the ends of the line.
    p.keys(&["C-a"]);
    p.type_text("[");
    p.keys(&["C-e"]);
    p.type_text("]");
    p.wait_input("[alpha beta gamma]");
    // M-b back over a word (and the `]`), C-k kills to the end.
    p.keys(&["M-b", "C-k"]);
    p.type_text("delta");
    p.wait_input("[alpha beta delta");
    // C-w kills the word before the cursor; C-y yanks it back elsewhere (C-a first).
    p.keys(&["C-w", "C-a", "C-y"]);
    p.wait_input("delta[alpha beta");
    // M-f forward over a word: after "alpha" (the `[` is not a word).
    p.keys(&["M-f"]);
    p.type_text("!");
    p.wait_input("delta[alpha! beta");
    // C-u kills back to the start of the line.
    p.keys(&["C-u"]);
    p.type_text("Z");
    p.wait_input("Z beta");
    p.keys(&["C-a", "C-k"]);
    p.wait_input("");
    p.type_text("first message");
    p.keys(&["Enter"]);
    p.wait_text("Echo one.");
    p.wait_input("");
    // History: C-p recalls, C-n comes back to the draft; Up and Down do the same.
    p.type_text("draft");
    p.keys(&["C-p"]);
    p.wait_input("first message");
    p.keys(&["C-n"]);
    p.wait_input("draft");
    p.keys(&["Up"]);
    p.wait_input("first message");
    p.keys(&["Down"]);
    p.wait_input("draft");
    p.keys(&["C-a", "C-k", "C-d"]);
    p.wait_text("[chat exited 0]");
    let runs = p.store().list_runs(10).expect("runs");
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].input, "first message");
}

#[test]
fn history_is_kept_per_workspace_across_sessions() {
    let p = Pane::new();
    std::fs::create_dir_all(p.path("other")).expect("mkdir");
    let cas = p.cassette("h1.jsonl", &[ScriptTurn::text("Noted.")]);
    p.start(&["--replay", &cas], &[]);
    p.wait_text("/help lists commands");
    p.type_text("remember this line");
    p.keys(&["Enter"]);
    p.wait_text("Noted.");
    p.keys(&["C-d"]);
    p.wait_text("[chat exited 0]");
    // The history lives under the data directory, not in the workspace.
    let dir = p.path("data/hanzo/history");
    let files: Vec<_> = std::fs::read_dir(&dir)
        .expect("history dir")
        .flatten()
        .collect();
    assert_eq!(files.len(), 1, "one history file for one workspace");
    let saved = std::fs::read_to_string(files[0].path()).expect("history file");
    assert!(saved.contains("remember this line"), "{saved}");
    assert_eq!(
        std::fs::read_dir(p.path("ws")).expect("ws").count(),
        0,
        "the session wrote into the workspace"
    );
    // A second session in the same workspace: Up recalls the line.
    let cas2 = p.cassette("h2.jsonl", &[ScriptTurn::text("unused")]);
    p.start(&["--replay", &cas2], &[]);
    p.wait_text("/help lists commands");
    p.keys(&["Up"]);
    p.wait_input("remember this line");
    p.keys(&["C-c", "C-d"]);
    p.wait_text("[chat exited 0]");
    // Another workspace has its own (empty) history.
    p.start_in("other", (80, 24), &["--replay", &cas2], &[]);
    p.wait_text("/help lists commands");
    p.keys(&["Up"]);
    p.type_text("z");
    let line = p.wait_input("z");
    assert_eq!(line, "z", "another workspace recalled a line");
    p.keys(&["C-c", "C-d"]);
    p.wait_text("[chat exited 0]");
    let files = std::fs::read_dir(&dir).expect("history dir").count();
    assert_eq!(files, 1, "nothing was sent in the other workspace");
}

// ---- the demo

#[test]
fn chat_demo_runs_the_recorded_task_offline_and_stores_the_session() {
    let p = Pane::new();
    // No provider credential and no network are needed: the model is the demo's recording.
    p.start(&["--demo"], &[]);
    let s = p.wait_text("Press Enter to send the demo's task.");
    assert!(s.contains("the model is a RECORDING"), "{s}");
    // The task is one long line: it wraps in the box, whole, with nothing cut or scrolled.
    let s = p.wait_for("the demo's task in the box", |s| {
        input_rows_of(s)
            .concat()
            .ends_with("and check that all the tests pass.")
    });
    let rows = input_rows_of(&s);
    assert!(rows.len() > 1, "wrapped: {rows:?}");
    assert!(
        rows.concat().starts_with(&input_line_of(&s)) && rows[0].chars().count() > 60,
        "{rows:?}"
    );
    p.keys(&["Enter"]);
    let s = p.wait_text("All 7 tests pass now.");
    assert!(s.contains("python3 -m unittest -v"), "{s}");
    p.keys(&["C-d"]);
    let s = p.wait_text("[chat exited 0]");
    assert!(s.contains("session 1: continue it with"), "{s}");
    let store = p.store();
    let sessions = store.list_sessions(None, 10).expect("sessions");
    assert_eq!(sessions.len(), 1);
    let workspace = PathBuf::from(&sessions[0].workspace);
    assert!(
        workspace.starts_with(p.path("tmp"))
            && workspace
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("hanzo-demo-")),
        "the demo's workspace: {}",
        workspace.display()
    );
    assert!(!workspace.exists(), "the demo's workspace is removed");
    let runs = store.list_session_runs(sessions[0].id).expect("runs");
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, RunStatus::Succeeded);
    assert_eq!(runs[0].input, hanzo_dev::demo::TASK);
    let record = store.load_run(runs[0].id).expect("record");
    let edits: Vec<_> = record
        .steps
        .iter()
        .flat_map(|s| &s.tool_calls)
        .filter(|c| c.call.name == "edit_file")
        .collect();
    assert_eq!(edits.len(), 1, "the demo's one edit");
    assert!(edits[0].call.allowed);
    drop(store);
    // `runs list --session` shows the session's turn.
    let out = Command::new(EXE)
        .args(["runs", "list", "--session", "1", "--json"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", p.path("home"))
        .env("XDG_DATA_HOME", p.path("data"))
        .env("XDG_CONFIG_HOME", p.path("config"))
        .output()
        .expect("runs list");
    assert!(out.status.success(), "{out:?}");
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let listed = listed.as_array().expect("an array");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["status"], "succeeded", "{listed:?}");
}

// ---- the screen

#[test]
fn the_80x24_layout_shows_the_status_line_and_ctrl_o_unfolds_tool_output() {
    let p = Pane::new();
    let cas = p.cassette(
        "layout.jsonl",
        &[
            ScriptTurn::tool(
                "toolu_1",
                "bash",
                json!({"command": "printf 'l1\\nl2\\nl3\\nl4\\nl5\\n'"}),
            )
            .with_usage(250, 40),
            ScriptTurn::text("Printed five lines.").with_usage(300, 10),
        ],
    );
    p.start(
        &[
            "--replay",
            &cas,
            "--approval",
            "allow",
            "--max-context",
            "1000",
        ],
        &[],
    );
    p.wait_text("/help lists commands");
    p.type_text("print lines");
    p.keys(&["Enter"]);
    let s = p.wait_text("Printed five lines.");
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(lines.len(), 24, "{s}");
    for l in &lines {
        assert!(l.chars().count() <= 80, "wider than 80: {l:?}");
    }
    // Bottom up: the status line, the input box (3 rows), the transcript above.
    let status = lines[23];
    // The short form (the long one would not fit 80 columns): every field, the model last.
    assert!(
        status.starts_with("code · tier ")
            && status.contains(" · allow · 550/50 tok · ctx 30% · #1 · "),
        "status line: {status:?}"
    );
    assert!(
        lines[20].starts_with('┌') && lines[22].starts_with('└'),
        "{s}"
    );
    assert!(lines[21].starts_with('│'), "{s}");
    assert!(
        s.contains("✓ bash printf") && s.contains("— allowed"),
        "the call's line: {s}"
    );
    // Folded: the first line of output and a count, with the key that unfolds it.
    assert!(s.contains("│ l1") && !s.contains("│ l3"), "{s}");
    assert!(s.contains("more lines, Ctrl-O shows them"), "{s}");
    p.keys(&["C-o"]);
    let s = p.wait_text("│ l5");
    assert!(
        s.contains("│ l3") && s.contains("Printed five lines."),
        "{s}"
    );
    p.keys(&["C-o"]);
    p.wait_for("folded again", |s| !s.contains("│ l5"));
    p.keys(&["C-d"]);
    p.wait_text("[chat exited 0]");
}

#[test]
fn allow_for_this_session_at_the_prompt_is_not_asked_again() {
    let p = Pane::new();
    let cas = p.cassette(
        "session-allow.jsonl",
        &[
            ScriptTurn::tool("toolu_1", "bash", json!({"command": "echo first-$((1+1))"})),
            ScriptTurn::tool("toolu_2", "bash", json!({"command": "echo first-$((1+1))"})),
            ScriptTurn::text("Both ran."),
        ],
    );
    p.start(&["--replay", &cas, "--approval", "prompt"], &[]);
    p.wait_text("/help lists commands");
    p.type_text("twice");
    p.keys(&["Enter"]);
    p.wait_text("[a] allow for this session");
    p.keys(&["a"]);
    let s = p.wait_text("Both ran.");
    assert!(!s.contains("allow bash?"), "asked again: {s}");
    p.keys(&["C-d"]);
    p.wait_text("[chat exited 0]");
    let store = p.store();
    let run = store.list_runs(1).expect("runs")[0].id;
    let record = store.load_run(run).expect("load");
    let calls: Vec<_> = record.steps.iter().flat_map(|s| &s.tool_calls).collect();
    assert_eq!(calls.len(), 2);
    assert!(calls.iter().all(|c| c.call.allowed), "both allowed");
    assert!(calls
        .iter()
        .all(|c| c.call.output.as_deref().unwrap_or("").contains("first-2")));
}

// ---- slash commands

#[test]
fn agent_model_and_utility_slash_commands_do_what_they_say() {
    let p = Pane::new();
    p.write(
        "config/hanzo/settings.json",
        &json!({"permissions": {"bash(git status)": "allow", "read_file": "allow"}}).to_string(),
    );
    p.write(
        "ws/.hanzo/settings.json",
        &json!({"permissions": {"bash(rm *)": "deny"}}).to_string(),
    );
    let cas = p.cassette(
        "slash.jsonl",
        &[
            ScriptTurn::text("Solved it."),
            ScriptTurn::text("Model answer."),
        ],
    );
    p.start(&["--replay", &cas], &[]);
    p.wait_text("/help lists commands");
    p.type_text("/help");
    p.keys(&["Enter"]);
    let s = p.wait_text("keys: Enter sends");
    for c in ["/compact", "/commit-push-pr", "/worktree", "/permissions"] {
        assert!(s.contains(c), "/help lists {c}: {s}");
    }
    p.type_line("/compact");
    p.wait_text("nothing to compact: 0 turns since the session began; /compact needs at least 2");
    p.type_text("/solve");
    p.keys(&["Enter"]);
    p.wait_text("agent: solve (from the next turn)");
    p.wait_for("the status line shows solve", |s| {
        s.lines()
            .last()
            .is_some_and(|l| l.starts_with("solve · tier"))
    });
    p.type_text("fix it");
    p.keys(&["Enter"]);
    p.wait_text("Solved it.");
    p.type_text("/model claude-test-model");
    p.keys(&["Enter"]);
    p.wait_text("model: claude-test-model (from the next turn");
    p.type_text("again");
    p.keys(&["Enter"]);
    p.wait_text("Model answer.");
    for (cmd, agent) in [("/auto", "auto"), ("/plan", "plan"), ("/code", "code")] {
        p.type_text(cmd);
        p.keys(&["Enter"]);
        p.wait_for(&format!("the status line shows {agent}"), |s| {
            s.lines()
                .last()
                .is_some_and(|l| l.starts_with(&format!("{agent} · tier")))
        });
    }
    p.type_text("/permissions");
    p.keys(&["Enter"]);
    let s = p.wait_text("[user] bash(git status) → allow");
    assert!(s.contains("[user] read_file → allow"), "{s}");
    assert!(s.contains("[project] bash(rm *) → deny"), "{s}");
    assert!(s.contains("permission rules (workspace "), "{s}");
    p.type_text("/clear");
    p.keys(&["Enter"]);
    let s = p.wait_text("new session 2: the transcript is empty");
    assert!(
        !s.contains("Solved it.") && !s.contains("› fix it"),
        "the transcript was not cleared: {s}"
    );
    p.wait_for("the status line shows session 2", |s| {
        s.lines().last().is_some_and(|l| l.contains(" · #2 · "))
    });
    p.keys(&["C-d"]);
    p.wait_text("[chat exited 0]");
    let store = p.store();
    let runs = store.list_session_runs(SessionId(1)).expect("runs");
    assert_eq!(runs.len(), 2, "slash commands ran no turn");
    assert_eq!(runs[0].agent.as_deref(), Some("solve"));
    assert_ne!(runs[0].model, "claude-test-model");
    assert_eq!(runs[1].model, "claude-test-model");
    assert!(store
        .list_session_runs(SessionId(2))
        .expect("runs")
        .is_empty());
}

#[test]
fn mcp_lists_a_real_stdio_server_and_its_tools() {
    let p = Pane::new();
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../test-deps/mcp/node_modules");
    assert!(
        src.join("@modelcontextprotocol/server-everything/dist/index.js")
            .is_file()
            && src.join("node/bin/node").is_file(),
        "the MCP test peers are missing under {}: run ./scripts/setup.sh",
        src.display()
    );
    // A server's sandbox reads the workspace, so the peers are hard-linked into it.
    std::fs::create_dir_all(p.path("ws/.peers")).expect("mkdir");
    let linked = Command::new("cp")
        .arg("-al")
        .arg(&src)
        .arg(p.path("ws/.peers/node_modules"))
        .status()
        .expect("cp -al");
    assert!(linked.success(), "hard-linking the peers");
    let peers = p.path("ws/.peers/node_modules");
    p.write(
        "config/hanzo/settings.json",
        &json!({"mcp_servers": {"everything": {
            "command": peers.join("node/bin/node"),
            "args": [peers.join("@modelcontextprotocol/server-everything/dist/index.js"), "stdio"],
        }}})
        .to_string(),
    );
    let cas = p.cassette("mcp.jsonl", &[ScriptTurn::text("unused")]);
    p.start_in("ws", (120, 50), &["--replay", &cas], &[]);
    p.wait_text("/help lists commands");
    p.type_text("/mcp");
    p.keys(&["Enter"]);
    let s = p.wait_text("MCP servers (settings `mcp_servers`):");
    let s = if s.contains("everything: ") {
        s
    } else {
        p.wait_text("everything: ")
    };
    assert!(
        s.contains("mcp__everything__echo — "),
        "the echo tool with its description: {s}"
    );
    let count: usize = s
        .lines()
        .find_map(|l| {
            l.split("everything: ")
                .nth(1)?
                .strip_suffix(" tools")?
                .trim()
                .parse()
                .ok()
        })
        .expect("a tool count");
    assert!(count >= 5, "server-everything has several tools: {s}");
    p.keys(&["C-d"]);
    p.wait_text("[chat exited 0]");
    assert!(p.store().list_runs(10).expect("runs").is_empty());
}

#[test]
fn diff_goes_with_the_next_message_to_the_model() {
    let p = Pane::new();
    init_repo(&p.path("ws"));
    std::fs::write(p.path("ws/a.txt"), "two\n").expect("write");
    std::fs::write(p.path("ws/b.txt"), "staged\n").expect("write");
    git(&p.path("ws"), &["add", "b.txt"]);
    let cas = p.cassette("diff.jsonl", &[ScriptTurn::text("Looks fine.")]);
    p.start(&["--replay", &cas], &[]);
    p.wait_text("/help lists commands");
    p.type_text("/diff");
    p.keys(&["Enter"]);
    p.wait_text("goes with your next message");
    assert!(p.store().list_runs(10).expect("runs").is_empty());
    p.type_text("review this");
    p.keys(&["Enter"]);
    p.wait_text("Looks fine.");
    p.keys(&["C-d"]);
    p.wait_text("[chat exited 0]");
    let store = p.store();
    let runs = store.list_runs(10).expect("runs");
    assert_eq!(runs.len(), 1);
    // The turn's task, the first user message the model got: the text, then both diffs.
    let task = &runs[0].input;
    assert!(task.starts_with("review this\n\n"), "{task}");
    assert!(
        task.contains("--- staged changes ---") && task.contains("+staged"),
        "{task}"
    );
    assert!(
        task.contains("--- unstaged changes ---") && task.contains("+two"),
        "{task}"
    );
    assert_eq!(
        store.list_sessions(None, 1).expect("sessions")[0]
            .title
            .as_deref(),
        Some("review this")
    );
}

#[test]
fn commit_takes_the_models_message_sanitised_and_commits_it() {
    let p = Pane::new();
    init_repo(&p.path("ws"));
    std::fs::write(p.path("ws/a.txt"), "two\n").expect("write");
    let cas = p.cassette(
        "commit.jsonl",
        &[ScriptTurn::text(
            "feat: count \u{1b}]2;pwned-commit\u{7}pages right\n\nThe body.",
        )],
    );
    p.start(&["--replay", &cas], &[]);
    p.wait_text("/help lists commands");
    p.type_text("/commit");
    p.keys(&["Enter"]);
    // The proposal is shown inert, and offered in the box without its control characters.
    let s = p.wait_text("Enter commits with this message");
    assert!(s.contains("␛]2;pwned-commit␇"), "{s}");
    p.wait_input("/commit feat: count ]2;pwned-commitpages right");
    p.keys(&["Enter"]);
    p.wait_text("feat: count ]2;pwned-commitpages right");
    p.wait_for("the commit's line", |s| s.contains("· [main "));
    assert!(!p.title().contains("pwned"), "the title was set");
    let subject = git(&p.path("ws"), &["log", "-1", "--format=%s"]);
    assert_eq!(subject.trim(), "feat: count ]2;pwned-commitpages right");
    assert!(git(&p.path("ws"), &["status", "--porcelain"])
        .trim()
        .is_empty());
    p.keys(&["C-d"]);
    p.wait_text("[chat exited 0]");
}

#[test]
fn commit_push_pr_pushes_to_a_bare_remote_and_shows_a_hostile_url_inert() {
    let p = Pane::new();
    init_repo(&p.path("ws"));
    // A remote whose path carries an OSC title sequence: git takes it, the screen must not.
    let remote = p.path("remote\u{1b}]2;pwned-url\u{7}.git");
    git(
        p.root.path(),
        &["init", "-q", "--bare", remote.to_str().expect("utf-8")],
    );
    git(
        &p.path("ws"),
        &["remote", "add", "origin", remote.to_str().expect("utf-8")],
    );
    git(&p.path("ws"), &["switch", "-q", "-c", "feat-push"]);
    std::fs::write(p.path("ws/b.txt"), "b\n").expect("write");
    git(&p.path("ws"), &["add", "b.txt"]);
    git(&p.path("ws"), &["commit", "-q", "-m", "feat: add b"]);
    let cas = p.cassette("push.jsonl", &[ScriptTurn::text("unused")]);
    p.start_in(
        "ws",
        (200, 40),
        &["--replay", &cas],
        &[("PATH", &path_without_gh())],
    );
    p.wait_text("/help lists commands");
    p.type_text("/commit-push-pr");
    p.keys(&["Enter"]);
    let s = p.wait_text("gh is not installed");
    assert!(s.contains("pushed feat-push to origin"), "{s}");
    assert!(
        s.contains("remote␛]2;pwned-url␇.git (branch feat-push)"),
        "the URL, inert: {s}"
    );
    assert!(!p.title().contains("pwned"), "the title was set");
    assert_eq!(
        git(&remote, &["log", "-1", "--format=%s", "feat-push"]).trim(),
        "feat: add b"
    );
    p.keys(&["C-d"]);
    p.wait_text("[chat exited 0]");
}

#[test]
fn branch_and_worktree_names_never_become_options_or_leave_the_parent() {
    let p = Pane::new();
    init_repo(&p.path("ws"));
    let cas = p.cassette("names.jsonl", &[ScriptTurn::text("unused")]);
    p.start_in("ws", (120, 40), &["--replay", &cas], &[]);
    p.wait_text("/help lists commands");
    for (cmd, why) in [
        ("/branch \"--upload-pack=evil\"", "contains a quote"),
        ("/branch --upload-pack=evil", "starts with '-'"),
        (
            "/worktree ../../x",
            "git does not allow it as a branch name",
        ),
        ("/worktree -f", "starts with '-'"),
        ("/branch a@{b", "git check-ref-format refuses it"),
    ] {
        p.type_text(cmd);
        p.keys(&["Enter"]);
        p.wait_for(why, |s| {
            s.matches(why).count() >= 1 && input_line_of(s).is_empty()
        });
    }
    let s = p.screen();
    assert_eq!(s.matches("starts with '-'").count(), 2, "{s}");
    p.type_text("/worktree side/one");
    p.keys(&["Enter"]);
    p.wait_text("on a new branch side/one");
    p.keys(&["C-d"]);
    p.wait_text("[chat exited 0]");
    // Only the plain name made anything: a branch, and a worktree beside the repository.
    let branches = git(&p.path("ws"), &["branch", "--format=%(refname:short)"]);
    let mut branches: Vec<&str> = branches.lines().collect();
    branches.sort_unstable();
    assert_eq!(branches, ["main", "side/one"]);
    assert_eq!(
        git(&p.path("ws-side-one"), &["branch", "--show-current"]).trim(),
        "side/one"
    );
    let mut entries: Vec<String> = std::fs::read_dir(p.root.path())
        .expect("root")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".jsonl"))
        .collect();
    entries.sort_unstable();
    assert_eq!(
        entries,
        ["config", "data", "home", "tmp", "ws", "ws-side-one"],
        "nothing else was created beside the workspace"
    );
}

#[test]
fn a_long_input_line_wraps_in_the_box_with_the_cursor_on_its_row() {
    let p = Pane::new();
    let cas = p.cassette("wrapin.jsonl", &[ScriptTurn::text("Got the long line.")]);
    p.start(&["--replay", &cas], &[("HANZO_INPUT_MODE", "vim")]);
    p.wait_text("-- INSERT --");
    // 200 characters in an 80-column pane: 78 inside the box, so three rows.
    let long: String = (0..40).map(|i| format!("w{i:03} ")).collect();
    assert_eq!(long.len(), 200);
    p.type_text(&long);
    let s = p.wait_for("the line wrapped in three rows", |s| {
        input_rows_of(s).concat() == long.trim_end()
    });
    let rows = input_rows_of(&s);
    assert_eq!(rows.len(), 3, "{s}");
    assert_eq!(rows[0], long[..78]);
    assert_eq!(rows[1], long[78..156]);
    for line in s.lines() {
        assert!(line.chars().count() <= 80, "wider than 80: {line:?}");
    }
    // The box grew to five rows above the status line; the cursor after the last character.
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(lines.len(), 24);
    assert!(
        lines[18].starts_with('┌') && lines[22].starts_with('└'),
        "{s}"
    );
    let want = (1 + u16::try_from(200 - 156).expect("small"), 21);
    let deadline = Instant::now() + HANG_GUARD;
    while p.cursor() != want {
        assert!(
            Instant::now() < deadline,
            "cursor at {:?}, not {want:?}",
            p.cursor()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Normal mode, 0: the cursor goes to the first row's start; $ back to the last row.
    p.keys(&["Escape"]);
    p.wait_text("-- NORMAL --");
    p.type_text("0");
    let deadline = Instant::now() + HANG_GUARD;
    while p.cursor() != (1, 19) {
        assert!(Instant::now() < deadline, "cursor at {:?}", p.cursor());
        std::thread::sleep(Duration::from_millis(50));
    }
    p.type_text("$");
    let deadline = Instant::now() + HANG_GUARD;
    // On the last character (the space after "w039" is the last one).
    while p.cursor() != (1 + 43, 21) {
        assert!(Instant::now() < deadline, "cursor at {:?}", p.cursor());
        std::thread::sleep(Duration::from_millis(50));
    }
    p.type_line(":w");
    p.wait_text("Got the long line.");
    p.keys(&["Escape"]);
    p.wait_text("-- NORMAL --");
    p.type_line(":q");
    p.wait_text("[chat exited 0]");
    let runs = p.store().list_runs(1).expect("runs");
    assert_eq!(
        runs[0].input.trim_end(),
        long.trim_end(),
        "the whole line was sent"
    );
}

/// `-v` logs are coloured on a terminal, and `NO_COLOR` turns that off (off a terminal they never
/// are: `cli_output.rs`).
#[test]
fn verbose_logs_on_a_terminal_are_coloured_unless_no_color_is_set() {
    let p = Pane::new();
    // The log lines of the pane's whole history, as the terminal drew them.
    let log_lines = |extra: &[(&str, &str)]| -> Vec<String> {
        p.start_command(&["-vv", "doctor"], extra);
        p.wait_for("doctor to end", |s| s.contains("[chat exited"));
        p.history_styled()
            .lines()
            .filter(|l| l.contains("INFO") || l.contains("DEBUG"))
            .map(str::to_string)
            .collect()
    };
    let coloured = log_lines(&[]);
    assert!(!coloured.is_empty(), "no log lines at -vv");
    assert!(
        coloured.iter().any(|l| l.contains("\x1b[")),
        "no colour on a terminal: {coloured:?}"
    );
    let plain = log_lines(&[("NO_COLOR", "1")]);
    assert!(!plain.is_empty(), "no log lines at -vv with NO_COLOR");
    assert!(
        plain.iter().all(|l| !l.contains('\x1b')),
        "colour despite NO_COLOR: {plain:?}"
    );
}

/// Retries of an unreachable provider are shown on a terminal as they happen (attempt, delay,
/// reason), and the key is not.
#[test]
fn retries_of_an_unreachable_provider_are_shown_on_a_terminal() {
    let p = Pane::new();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let base = format!("http://127.0.0.1:{port}");
    let key = "sk-ant-tty-retry-canary-0123456789";
    p.start_command(
        &["run", "--provider", "anthropic", "--base-url", &base, "x"],
        &[("ANTHROPIC_API_KEY", key)],
    );
    p.wait_for("the run to end", |s| s.contains("[chat exited"));
    let history = String::from_utf8_lossy(
        &p.tmux(&["capture-pane", "-p", "-J", "-S", "-", "-t", "t"])
            .stdout,
    )
    .into_owned();
    for attempt in 1..=4 {
        let line = history
            .lines()
            .find(|l| l.contains(&format!("model request attempt {attempt} of 5 failed")))
            .unwrap_or_else(|| panic!("no retry line for attempt {attempt}:\n{history}"));
        assert!(line.contains("retrying in"), "{line}");
        assert!(line.to_lowercase().contains("connect"), "{line}");
    }
    assert!(history.contains("[chat exited 1]"), "{history}");
    assert!(!history.contains(key), "{history}");
}
