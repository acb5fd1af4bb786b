//! `hanzo-dev chat` driven through a real terminal: the real binary runs in a tmux pane (a
//! pseudo-terminal, 80×24 unless a test resizes it), keys arrive with `send-keys`, and the test
//! reads the screen with `capture-pane`. The model is a cassette (`--replay`), the one thing
//! that cannot run here; the workers, sandbox, policy and store are real, and each test reads
//! the store afterwards. Every wait polls the screen against a deadline; nothing asserts on
//! time.

use hanzo_model::script::{anthropic_cassette, ScriptTurn};
use hanzo_store::{RunStatus, RunStore, SessionId};
use serde_json::json;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const EXE: &str = env!("CARGO_BIN_EXE_hanzo-dev");
/// A guard against hangs, not a speed assertion.
const HANG_GUARD: Duration = Duration::from_secs(90);

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A private tmux server (its own socket) with one session running `hanzo-dev chat`.
struct Pane {
    socket: String,
    root: tempfile::TempDir,
}

fn tmux_ok() -> bool {
    Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

impl Pane {
    fn new() -> Pane {
        assert!(tmux_ok(), "tmux is missing: scripts/setup.sh installs it");
        let root = tempfile::tempdir().expect("tempdir");
        for d in ["home", "data", "config/hanzo", "ws", "tmp"] {
            std::fs::create_dir_all(root.path().join(d)).expect("mkdir");
        }
        let socket = format!(
            "hanzo-chat-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        Pane { socket, root }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.root.path().join(p)
    }

    fn cassette(&self, name: &str, turns: &[ScriptTurn]) -> String {
        let p = self.path(name);
        std::fs::write(&p, anthropic_cassette(turns)).expect("cassette");
        p.display().to_string()
    }

    fn tmux(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .arg("-f")
            .arg("/dev/null")
            .args(args)
            .output()
            .expect("run tmux")
    }

    /// Start `hanzo-dev chat ARGS` in a fresh 80×24 pane, with `extra` in its environment. The
    /// pane keeps showing the screen after the program exits (`cat` holds it open), with the
    /// exit status on the last line.
    fn start(&self, args: &[&str], extra: &[(&str, &str)]) {
        let mut env = vec![
            format!("PATH={}", std::env::var("PATH").unwrap_or_default()),
            format!("HOME={}", self.path("home").display()),
            format!("XDG_DATA_HOME={}", self.path("data").display()),
            format!("XDG_CONFIG_HOME={}", self.path("config").display()),
            format!("TMPDIR={}", self.path("tmp").display()),
            "TERM=xterm-256color".to_string(),
        ];
        env.extend(extra.iter().map(|(k, v)| format!("{k}={v}")));
        let quoted: Vec<String> = std::iter::once(EXE.to_string())
            .chain(std::iter::once("chat".to_string()))
            .chain(args.iter().map(|a| a.to_string()))
            .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
            .collect();
        let script = format!(
            "cd '{}' && env -i {} {}; echo \"[chat exited $?]\"; exec cat",
            self.path("ws").display(),
            env.iter()
                .map(|e| format!("'{e}'"))
                .collect::<Vec<_>>()
                .join(" "),
            quoted.join(" ")
        );
        let out = self.tmux(&[
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            "80",
            "-y",
            "24",
            "sh",
            "-c",
            &script,
        ]);
        assert!(out.status.success(), "tmux new-session: {out:?}");
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "t"];
        args.extend_from_slice(keys);
        let out = self.tmux(&args);
        assert!(out.status.success(), "send-keys {keys:?}: {out:?}");
    }

    /// Type text literally (no key names).
    fn type_text(&self, text: &str) {
        let out = self.tmux(&["send-keys", "-t", "t", "-l", text]);
        assert!(out.status.success(), "send-keys -l: {out:?}");
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.tmux(&["capture-pane", "-p", "-t", "t"]).stdout).into_owned()
    }

    /// The screen with its attributes as escape sequences (`capture-pane -e`).
    fn screen_styled(&self) -> String {
        String::from_utf8_lossy(&self.tmux(&["capture-pane", "-p", "-e", "-t", "t"]).stdout)
            .into_owned()
    }

    /// Poll the screen until `pred` holds; fail with the last screen after the hang guard.
    fn wait_for(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + HANG_GUARD;
        loop {
            let s = self.screen();
            if pred(&s) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "waited for {what}; the screen:\n{s}"
            );
            // Polling a terminal we do not control: there is no event to wait on, so look
            // again shortly. Only the hang guard above bounds the wait.
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn wait_text(&self, text: &str) -> String {
        self.wait_for(text, |s| s.contains(text))
    }

    fn store(&self) -> RunStore {
        RunStore::open(&self.path("data/hanzo"), "local").expect("store")
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        // Our own tmux server, on our own socket: ending it ends the chat if still running.
        let _ = self.tmux(&["kill-server"]);
    }
}

#[test]
fn two_turns_in_one_session_then_resumed() {
    let mut p = Pane::new();
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
    p.tmux(&["kill-server"]);
    p.socket.push_str("-again");
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
    let title = p.tmux(&["display-message", "-p", "-t", "t", "#{pane_title}"]);
    let title = String::from_utf8_lossy(&title.stdout);
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
