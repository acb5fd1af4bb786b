//! The supervisor's own defences, attacked through the real binary: the workspaces it refuses,
//! the files it writes for the user (never through a planted link), the text it prints (never an
//! escape sequence a model or tool chose), its exit codes, the deadline of every worker request,
//! and a store that stops accepting writes in the middle of a run.
//!
//! The model is a cassette, or a local server speaking Anthropic's SSE where the path needs a
//! live provider (`--record`); everything else is real.

mod common;
#[path = "../../workers/model/tests/fixtures/mod.rs"]
mod fixtures;

use common::env::{TestHome, EXE};
use common::procs::descendants_with;
use fixtures::server::{Reply, Server};
use hanzo_model::script::{anthropic_events, ScriptTurn};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const KEY: &str = "sk-ant-CANARY-guards-77e1";
/// The shell rc file stand-in outside the workspace that planted links point at.
const RC: &str = "# the user's shell startup file\n";

/// A private user whose `~/.bashrc` is [`RC`].
fn new_env() -> TestHome {
    let env = TestHome::new();
    std::fs::write(env.path("home/.bashrc"), RC).expect("rc");
    env
}

fn rc(env: &TestHome) -> String {
    std::fs::read_to_string(env.path("home/.bashrc")).expect("rc")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn events(o: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not an event ({e}): {l}")))
        .collect()
}

fn of_type<'a>(events: &'a [Value], t: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == t).collect()
}

// ---------- item 5: dangerous workspaces ----------

#[test]
fn a_workspace_holding_the_users_own_files_is_refused_with_the_reason() {
    let env = new_env();
    let c = env.cassette("m.jsonl", &[ScriptTurn::text("nothing to do")]);
    let refused = |cmd: &mut Command, why: &str| {
        let out = cmd.output().expect("run");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("refusing to run in") && err.contains(why),
            "{err}"
        );
        assert!(err.contains("--allow-dangerous-workspace"), "{err}");
    };
    // `cd ~ && hanzo-dev run …`
    refused(
        env.command(&["run", "--replay", &c, "x"])
            .current_dir(env.path("home")),
        "your home directory",
    );
    // A parent of the home directory.
    refused(
        &mut env.command(&[
            "run",
            "--replay",
            &c,
            "--workspace",
            env.root.path().to_str().unwrap(),
            "x",
        ]),
        "your home directory",
    );
    refused(
        &mut env.command(&["run", "--replay", &c, "--workspace", "/", "x"]),
        "whole filesystem",
    );
    // The configuration, the data directory (run store, trust records) inside the workspace.
    refused(
        env.command(&["run", "--replay", &c, "x"])
            .env("XDG_CONFIG_HOME", env.ws().join("cfg")),
        "configuration",
    );
    refused(
        env.command(&["run", "--replay", &c, "x"])
            .env("XDG_DATA_HOME", env.ws().join("share")),
        "the trust store",
    );
    assert!(
        env.store().list_runs(10).unwrap().is_empty(),
        "nothing ran, nothing was recorded"
    );
}

#[test]
fn allow_dangerous_workspace_runs_warns_and_is_on_record() {
    let env = new_env();
    let c = env.cassette("m.jsonl", &[ScriptTurn::text("ran in the home directory")]);
    let out = env
        .command(&[
            "run",
            "--json",
            "--allow-dangerous-workspace",
            "--replay",
            &c,
            "x",
        ])
        .current_dir(env.path("home"))
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("warning: running in a dangerous workspace"),
        "{err}"
    );
    let ev = events(&out);
    let started = of_type(&ev, "run_started")[0];
    assert!(started["dangerous_workspace"][0]
        .as_str()
        .unwrap()
        .contains("home directory"));
    let id = hanzo_store::RunId(started["run_id"].as_i64().unwrap());
    let rec = env.store().load_run(id).unwrap();
    let config = rec.events.iter().find(|e| e.kind == "run_config").unwrap();
    assert!(config.data["dangerous_workspace"][0]
        .as_str()
        .unwrap()
        .contains("home directory"));
}

// ---------- item 6: no write through a planted link ----------

async fn live(env: &TestHome, args: &[&str], replies: usize) -> (Output, Server) {
    let turn = ScriptTurn::text("recorded answer");
    let server = Server::start(
        (0..replies)
            .map(|_| Reply::sse(&anthropic_events(0, &turn).concat(), 64))
            .collect(),
    )
    .await;
    let mut all: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    all.extend(["--provider", "anthropic", "--base-url", &server.base].map(String::from));
    let mut cmd = tokio::process::Command::from(env.command(&[]));
    cmd.args(&all).env("ANTHROPIC_API_KEY", KEY);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .expect("hang guard")
        .expect("run");
    (out, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_record_refuses_a_planted_link_and_the_rc_file_is_untouched() {
    let env = new_env();
    // What a tool call earlier could have left in the workspace.
    symlink(env.path("home/.bashrc"), env.ws().join("session.jsonl")).unwrap();
    symlink(env.path("home"), env.ws().join("out")).unwrap();
    for target in ["session.jsonl", "out/.bashrc"] {
        let (out, _s) = live(&env, &["run", "--json", "--record", target, "hello"], 1).await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("cannot write the cassette: refusing to write"),
            "{err}"
        );
        assert!(err.contains("symbolic link inside the workspace"), "{err}");
        assert_eq!(rc(&env), RC, "the link's target was written");
    }
    // A plain file is written, owner-only.
    let (out, _s) = live(
        &env,
        &["run", "--json", "--record", "plain.jsonl", "hello"],
        1,
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let md = std::fs::metadata(env.ws().join("plain.jsonl")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&md.permissions()) & 0o777,
        0o600
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_record_refuses_a_planted_link() {
    let env = new_env();
    symlink(env.path("home/.bashrc"), env.ws().join("turn.jsonl")).unwrap();
    let (out, _s) = live(&env, &["ask", "--record", "turn.jsonl", "hello"], 1).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("refusing to write"), "{err}");
    assert_eq!(rc(&env), RC);
}

#[test]
fn runs_export_refuses_a_planted_link() {
    let env = new_env();
    let c = env.cassette("m.jsonl", &[ScriptTurn::text("done")]);
    let out = env.output(&["run", "--json", "--replay", &c, "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let id = of_type(&events(&out), "run_started")[0]["run_id"].to_string();
    symlink(env.path("home/.bashrc"), env.ws().join("run.json")).unwrap();
    let out = env.output(&["runs", "export", &id, "--output", "run.json"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("refusing to write"), "{err}");
    assert_eq!(rc(&env), RC);
    let out = env.output(&["runs", "export", &id, "--output", "export.json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(env.ws().join("export.json")).unwrap())
            .unwrap();
    assert_eq!(doc["format"], "hanzo-run");
}

#[test]
fn the_demo_project_is_never_written_through_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("pages.py"), RC).unwrap();
    std::fs::create_dir(dir.path().join("pager")).unwrap();
    symlink(
        outside.path().join("pages.py"),
        dir.path().join("pager/pages.py"),
    )
    .unwrap();
    let err = hanzo_dev::demo::write_project(dir.path()).expect_err("refused");
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert_eq!(
        std::fs::read_to_string(outside.path().join("pages.py")).unwrap(),
        RC
    );
}

// ---------- items 8 and 10: nothing a model or tool chose reaches the terminal raw ----------

/// What an attacker would print: the clipboard (OSC 52), the window title, clear screen and
/// cursor movement, a NUL, 8-bit CSI, a bidi override, a zero-width space.
const NASTY: &str =
    "\x1b]52;c;cm0gLXJmIH4=\x07\x1b]0;pwned\x07\x1b[2J\x1b[1A\0\u{9b}31m\u{202e}\u{200b}";

fn assert_inert(what: &str, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    for (c, name) in [
        ('\x1b', "ESC"),
        ('\x07', "BEL"),
        ('\0', "NUL"),
        ('\u{9b}', "CSI"),
        ('\u{202e}', "RLO"),
        ('\u{200b}', "ZWSP"),
    ] {
        assert!(!text.contains(c), "{what} carries a raw {name}: {text:?}");
    }
}

#[test]
fn model_and_tool_text_reach_the_terminal_inert() {
    let env = new_env();
    let c = env.cassette(
        "m.jsonl",
        &[
            ScriptTurn::tool(
                "t1",
                "bash",
                json!({"command": "printf '\\033]52;c;cm0gLXJm\\007\\033]0;pwned\\007\\033[2J\\302\\233\\n'; exit 3"}),
            )
            .with_text(&format!("Let me look.{NASTY}")),
            ScriptTurn::text(&format!("Done.{NASTY}")),
        ],
    );
    // The live view, off a terminal.
    let out = env.output(&["run", "--approval", "allow", "--replay", &c, "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_inert("stdout", &out.stdout);
    assert_inert("stderr", &out.stderr);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("␛]52;c;cm0gLXJmIH4=␇"), "{shown}");
    // The record, shown.
    let show = env.output(&["runs", "show", "1"]);
    assert_eq!(show.status.code(), Some(0), "{}", stderr(&show));
    assert_inert("runs show", &show.stdout);
    let record = String::from_utf8_lossy(&show.stdout);
    assert!(record.contains("<U+202E>"), "{record}");
    assert!(
        record.contains("␛]52;c;cm0gLXJm␇"),
        "the tool's output, escaped: {record}"
    );
    // `ask`, replayed.
    let a = env.cassette("a.jsonl", &[ScriptTurn::text(&format!("Hello{NASTY}"))]);
    let ask = env.output(&["ask", "--replay", &a, "hi"]);
    assert_eq!(ask.status.code(), Some(0), "{}", stderr(&ask));
    assert_inert("ask", &ask.stdout);
}

#[test]
fn the_approval_prompt_shows_spoofing_characters_and_the_whole_command() {
    use std::io::Write;
    let env = new_env();
    let c = env.cassette(
        "m.jsonl",
        &[
            ScriptTurn::tool(
                "t1",
                "bash",
                json!({"command": "rm -rf ~ \r ls -la\x1b[1A\x1b[2K"}),
            )
            .and_tool(
                "t2",
                "bash",
                json!({"command": format!("echo {} ; rm -rf ~", "a".repeat(3000))}),
            ),
            ScriptTurn::text("done"),
        ],
    );
    let mut cmd = env.command(&["run", "--json", "--approval", "prompt", "--replay", &c, "x"]);
    cmd.stdin(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    // Decline the first; ask to view the second in full, then decline it.
    child.stdin.take().unwrap().write_all(b"n\nv\nn\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "every call was declined: {err}");
    assert_inert("the prompt", &out.stderr);
    assert!(err.contains("  │ rm -rf ~ ␍ ls -la␛[1A␛[2K\n"), "{err}");
    assert!(
        err.contains("more characters hidden: answer v to see the whole input"),
        "{err}"
    );
    assert!(
        err.contains("; rm -rf ~\n"),
        "v showed the end of the long command: {err}"
    );
}

// ---------- issue 11: exit codes ----------

#[test]
fn every_exit_code_is_the_documented_one() {
    let env = new_env();
    let code = |args: &[&str]| {
        let out = env.output(args);
        (out.status.code(), stderr(&out))
    };
    assert_eq!(code(&["agents", "list"]).0, Some(0));
    let c = env.cassette("m.jsonl", &[ScriptTurn::text("x")]);
    // 2: bad usage, nothing run.
    for args in [
        &["run", "--max-steps", "0", "x"][..],
        &["run", "--timeout", "0", "x"],
        &["run", "--max-tool-calls", "0", "x"],
        &["run", "--provider", "nobody", "x"],
        &["run", "--replay", "/nonexistent", "x"],
    ] {
        let (c, err) = code(args);
        assert_eq!(c, Some(2), "{args:?}: {err}");
    }
    let (c2, err) = code(&["run", "--timeout", "-1", "x"]);
    assert_eq!(c2, Some(2), "{err}");
    assert!(
        err.contains("--timeout") && err.contains("at least 1, got -1"),
        "{err}"
    );
    // No credential for the provider named: usage, whether or not --provider is given, and no
    // failed run on record.
    let (c2, err) = code(&["run", "--provider", "anthropic", "x"]);
    assert_eq!(c2, Some(2), "{err}");
    assert!(
        err.contains("no credential for anthropic: set ANTHROPIC_API_KEY"),
        "{err}"
    );
    assert_eq!(code(&["run", "x"]).0, Some(2));
    assert!(env.store().list_runs(10).unwrap().is_empty());
    // 4: what the command line names does not exist.
    for args in [
        &["agents", "show", "nosuch"][..],
        &["agents", "delete", "nosuch"],
        &["runs", "show", "99"],
        &["runs", "export", "99"],
        &["run", "--agent", "nosuch", "--replay", &c, "x"],
    ] {
        let (c, err) = code(args);
        assert_eq!(c, Some(4), "{args:?}: {err}");
    }
    // 1: the job ran and failed (the cassette runs out after one turn).
    let short = env.cassette(
        "short.jsonl",
        &[ScriptTurn::tool("t1", "list_dir", json!({"path": "."}))],
    );
    assert_eq!(
        code(&["run", "--approval", "allow", "--replay", &short, "x"]).0,
        Some(1)
    );
}

#[test]
fn the_readme_documents_every_exit_code() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    for e in hanzo_dev::cli::exit::Exit::ALL {
        let row = format!("| {} |", e.code());
        assert!(readme.contains(&row), "README has no exit-code row {row}");
    }
}

// ---------- issue 11: first-use frictions ----------

#[test]
fn a_replay_whose_every_call_is_denied_is_a_failed_run_that_says_so() {
    let env = new_env();
    hanzo_dev::demo::write_project(&env.ws()).unwrap();
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("demo/demo.cassette.jsonl");
    // No rules: every call needs approval, and off a terminal the answer is deny.
    let out = env.output(&[
        "run",
        "--json",
        "--replay",
        demo.to_str().unwrap(),
        "fix it",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let ev = events(&out);
    let fin = of_type(&ev, "run_finished")[0];
    assert_eq!(fin["status"], "failed");
    let calls = of_type(&ev, "tool_call").len();
    assert!(calls > 0);
    assert_eq!(fin["tool_calls"], calls);
    assert_eq!(fin["denied_calls"], calls);
    assert!(
        fin["outcome"]
            .as_str()
            .unwrap()
            .starts_with(&format!("every tool call was denied ({calls} of {calls})")),
        "{fin}"
    );
    // The live view says so too.
    let out = env.output(&["run", "--replay", demo.to_str().unwrap(), "fix it"]);
    let err = stderr(&out);
    assert!(
        err.contains(&format!("{calls} of {calls} tool calls denied")),
        "{err}"
    );
    assert!(err.contains("failed: every tool call was denied"), "{err}");
}

#[test]
fn the_demo_cleans_up_its_workspace_unless_asked_to_keep_it() {
    let env = new_env();
    let left = |env: &TestHome| -> Vec<PathBuf> {
        std::fs::read_dir(env.path("tmp"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("hanzo-")
            })
            .collect()
    };
    let out = env.output(&["run", "--demo"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(left(&env).is_empty(), "{:?}", left(&env));
    let out = env.output(&["run", "--demo", "--keep"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let kept = left(&env);
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(
        err.contains(&format!("kept at {}", kept[0].display())),
        "{err}"
    );
    assert!(kept[0].join("pager/pages.py").is_file());
}

#[test]
fn config_show_sources_labels_the_computed_trust_status() {
    let env = new_env();
    let out = env.output(&["config", "show", "--sources"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let trust = text.lines().find(|l| l.starts_with("trust = ")).unwrap();
    assert!(
        trust.ends_with("[computed from the trust store]"),
        "{trust}"
    );
}

#[test]
fn retries_of_an_unreachable_provider_are_shown_and_logged() {
    let env = new_env();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let base = format!("http://127.0.0.1:{port}");
    let out = env
        .command(&[
            "-v",
            "run",
            "--json",
            "--provider",
            "anthropic",
            "--base-url",
            &base,
            "x",
        ])
        .env("ANTHROPIC_API_KEY", KEY)
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let ev = events(&out);
    let retries = of_type(&ev, "model_retry");
    assert_eq!(retries.len(), 4, "5 attempts, 4 waits: {ev:#?}");
    for (i, r) in retries.iter().enumerate() {
        assert_eq!(r["attempt"], i + 1);
        assert_eq!(r["max_attempts"], 5);
        assert!(
            r["reason"]
                .as_str()
                .unwrap()
                .to_lowercase()
                .contains("connect"),
            "{r}"
        );
    }
    assert!(err.contains("the model request failed; retrying"), "{err}");
    assert!(!err.contains(KEY) && !String::from_utf8_lossy(&out.stdout).contains(KEY));
    // The failure says what happened, not which layers it passed through.
    let fin = of_type(&ev, "run_finished")[0];
    let outcome = fin["outcome"].as_str().unwrap();
    assert!(
        !outcome.contains("refused the request: Refused"),
        "{outcome}"
    );
}

// ---------- deadlines: a stopped worker does not stall the run ----------

/// Start `args`, wait for the first event `until` matches, send `SIGSTOP` to the processes
/// `stop` names, and collect the rest.
fn run_and_stop(
    env: &TestHome,
    args: &[&str],
    until: &str,
    stop: &[&str],
) -> (Option<i32>, Vec<Value>) {
    let mut child = env.command(args).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let v: Value = serde_json::from_str(&line.unwrap()).unwrap();
        let hit = v["type"] == until;
        seen.push(v);
        if hit {
            break;
        }
    }
    let pids = descendants_with(child.id(), stop);
    assert!(!pids.is_empty(), "nothing to stop: {stop:?}");
    for p in &pids {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(*p).expect("pid")),
            nix::sys::signal::Signal::SIGSTOP,
        )
        .unwrap();
    }
    for line in lines {
        seen.push(serde_json::from_str(&line.unwrap()).unwrap());
    }
    let status = child.wait().unwrap();
    (status.code(), seen)
}

#[test]
fn a_stopped_tools_worker_times_the_call_out_and_the_run_goes_on() {
    let env = new_env();
    let c = env.cassette(
        "m.jsonl",
        &[
            ScriptTurn::tool(
                "t1",
                "bash",
                json!({"command": "sleep 30", "timeout_ms": 1000}),
            ),
            ScriptTurn::text("the tools worker did not answer"),
        ],
    );
    let (code, ev) = run_and_stop(
        &env,
        &["run", "--json", "--approval", "allow", "--replay", &c, "x"],
        "tool_decision",
        &["__worker", "tools"],
    );
    assert_eq!(code, Some(0), "{ev:#?}");
    let r = of_type(&ev, "tool_result")[0];
    assert_eq!(r["is_error"], true);
    assert!(
        r["preview"]
            .as_str()
            .unwrap()
            .contains("the tools worker did not answer the tool call within 6 s"),
        "{r}"
    );
    assert_eq!(of_type(&ev, "run_finished")[0]["status"], "succeeded");
}

#[test]
fn a_stopped_model_worker_fails_the_run_at_its_deadline() {
    let env = new_env();
    let c = env.cassette(
        "m.jsonl",
        &[
            ScriptTurn::tool("t1", "bash", json!({"command": "sleep 2"})),
            ScriptTurn::text("never seen"),
        ],
    );
    let (code, ev) = run_and_stop(
        &env,
        &[
            "run",
            "--json",
            "--approval",
            "allow",
            "--model-timeout",
            "2",
            "--replay",
            &c,
            "x",
        ],
        "tool_decision",
        &["__worker", "model"],
    );
    assert_eq!(code, Some(1), "{ev:#?}");
    let fin = of_type(&ev, "run_finished")[0];
    assert!(
        fin["outcome"]
            .as_str()
            .unwrap()
            .contains("the model worker did not answer the model turn within 2 s"),
        "{fin}"
    );
}

// ---------- a store that stops accepting writes mid-run ----------

/// The disk fills up under the run store in the middle of a run: the data directory is a tmpfs
/// (in a private mount namespace) that a helper outside the sandbox fills to the last block while
/// the first call runs, so the record of that call's output is the write that fails. The run
/// stops there: the second call never runs. (Earlier this test sized the tmpfs so that the first
/// call's record would not fit, a window of a few KiB that every schema migration moved.)
#[test]
fn when_the_store_cannot_be_written_nothing_runs_after() {
    let env = new_env();
    // The first call marks that it ran, then waits (bounded) until the disk under the store has
    // been filled to the last block; the record of its result is then the write that fails.
    let wait_for_full =
        "i=0; while [ ! -e filled ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done";
    let c = env.cassette(
        "m.jsonl",
        &[
            ScriptTurn::tool(
                "t1",
                "bash",
                json!({"command": format!("touch before; {wait_for_full}; head -c 45000 /dev/urandom | base64 -w0")}),
            )
            .and_tool("t2", "bash", json!({"command": "touch after"})),
            ScriptTurn::text("done"),
        ],
    );
    let data = env.path("data");
    // The store is created first (schema and all); a helper outside the sandbox fills the
    // filesystem once the first call has started, so the failure falls mid-run whatever the
    // size of the schema or of the run's first writes.
    let script = format!(
        "set -e; mount -t tmpfs -o size=8m hanzo-test {d}; {EXE} runs list >/dev/null; \
         ( i=0; while [ ! -e {ws}/before ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; \
           dd if=/dev/zero of={d}/filler bs=4k 2>/dev/null || true; touch {ws}/filled ) & \
         exec {EXE} run --json --approval allow --replay {c} x",
        d = data.display(),
        ws = env.ws().display()
    );
    let root = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()) == 0;
    let ns = if root { "-m" } else { "-rm" };
    let out = Command::new("unshare")
        .args([ns, "sh", "-c", &script])
        .current_dir(env.ws())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", env.path("home"))
        .env("XDG_DATA_HOME", &data)
        .env("XDG_CONFIG_HOME", env.path("config"))
        .env("TMPDIR", env.path("tmp"))
        .stdin(Stdio::null())
        .output()
        .expect("unshare (util-linux)");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the run store could not be written, so the run stopped before its next call"),
        "{err}"
    );
    assert!(err.contains("disk is full"), "{err}");
    assert!(
        env.ws().join("before").exists(),
        "the first call ran, so the failure was mid-run: {err}"
    );
    assert!(
        !env.ws().join("after").exists(),
        "a call ran after the store failed: {err}"
    );
    // The run's events stop before its end: the record could not be closed.
    let ev = events(&out);
    assert_eq!(of_type(&ev, "tool_call").len(), 1, "{ev:#?}");
    assert!(of_type(&ev, "run_finished").is_empty());
}
