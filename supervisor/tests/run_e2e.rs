//! `hanzo-dev run` end to end: the real binary, real workers and sandbox, a real store, and the
//! model replayed from a cassette in Anthropic's wire format (the one thing that cannot run
//! here). Each test reads the `--json` event stream and the run store afterwards.

mod common;

use common::env::TestHome;
use common::procs::{alive, descendants_with};
use hanzo_model::script::ScriptTurn;
use hanzo_store::{RunId, RunStatus};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A guard against hangs, not a speed assertion: a test that waits longer than this fails.
const HANG_GUARD: Duration = Duration::from_secs(120);

/// A running `hanzo-dev run --json`, its events arriving on a channel.
struct Running {
    child: Child,
    events: mpsc::Receiver<Value>,
    seen: Vec<Value>,
}

impl Running {
    fn start(mut cmd: Command) -> Running {
        let mut child = cmd.spawn().expect("spawn hanzo-dev");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("not a JSON event line ({e}): {line}"));
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        Running {
            child,
            events: rx,
            seen: Vec::new(),
        }
    }

    /// Wait for the first event matching `f`.
    fn wait_for(&mut self, what: &str, f: impl Fn(&Value) -> bool) -> Value {
        loop {
            match self.events.recv_timeout(HANG_GUARD) {
                Ok(v) => {
                    self.seen.push(v.clone());
                    if f(&v) {
                        return v;
                    }
                }
                Err(_) => panic!("no {what} event; saw {:#?}", self.seen),
            }
        }
    }

    /// Wait for the process to end; returns its exit code and every event.
    fn finish(mut self) -> (Option<i32>, Vec<Value>, String) {
        let (tx, rx) = mpsc::channel();
        let mut child = self.child;
        std::thread::spawn(move || {
            let out = child.wait().map(|s| s.code());
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                use std::io::Read;
                let _ = e.read_to_string(&mut err);
            }
            let _ = tx.send((out, err));
        });
        let (code, stderr) = rx.recv_timeout(HANG_GUARD).expect("hanzo-dev hung");
        while let Ok(v) = self.events.recv_timeout(Duration::from_millis(200)) {
            self.seen.push(v);
        }
        (code.expect("wait"), self.seen, stderr)
    }
}

fn run_json(env: &TestHome, args: &[&str]) -> (Option<i32>, Vec<Value>, String) {
    let mut all = vec!["run", "--json"];
    all.extend_from_slice(args);
    Running::start(env.command(&all)).finish()
}

fn of_type<'a>(events: &'a [Value], t: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == t).collect()
}

fn run_id(events: &[Value]) -> RunId {
    RunId(
        of_type(events, "run_started")[0]["run_id"]
            .as_i64()
            .expect("run id"),
    )
}

#[test]
fn the_demo_fixes_the_project_through_the_real_workers() {
    let env = TestHome::new();
    let (code, events, stderr) = run_json(&env, &["--demo", "--keep"]);
    assert_eq!(code, Some(0), "{stderr}\n{events:#?}");
    let started = of_type(&events, "run_started")[0];
    assert_eq!(started["replay"], true);
    assert_eq!(started["agent"], "code");
    let ws = PathBuf::from(started["workspace"].as_str().expect("workspace"));
    let results = of_type(&events, "tool_result");
    let calls = of_type(&events, "tool_call");
    let bash: Vec<usize> = calls
        .iter()
        .enumerate()
        .filter(|(_, c)| c["name"] == "bash")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(bash.len(), 2, "the tests run twice");
    assert_eq!(results[bash[0]]["is_error"], true, "the first run fails");
    assert!(results[bash[0]]["preview"]
        .as_str()
        .unwrap()
        .contains("FAILED (failures=1)"));
    assert_eq!(
        results[bash[1]]["is_error"], false,
        "{:?}",
        results[bash[1]]
    );
    assert!(results[bash[1]]["preview"].as_str().unwrap().contains("OK"));
    // The fix is on disk: the project's own tests pass outside the sandbox too.
    let out = Command::new("python3")
        .args(["-m", "unittest"])
        .current_dir(&ws)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The record.
    let store = env.store();
    let rec = store.load_run(run_id(&events)).expect("run");
    assert_eq!(rec.run.status, RunStatus::Succeeded);
    assert_eq!(
        rec.run.isolation.as_str(),
        started["isolation"].as_str().unwrap()
    );
    let all_calls: Vec<_> = rec.steps.iter().flat_map(|s| &s.tool_calls).collect();
    assert_eq!(all_calls.len(), calls.len());
    assert!(all_calls
        .iter()
        .all(|c| c.call.allowed && c.call.rule.is_some()));
    let edit = all_calls
        .iter()
        .find(|c| c.call.name == "edit_file")
        .unwrap();
    assert_eq!(edit.call.rule.as_ref().unwrap().pattern, "edit_file");
    let _ = std::fs::remove_dir_all(ws);
}

#[test]
fn the_demo_on_a_terminal_says_the_model_is_a_recording() {
    let env = TestHome::new();
    let out = env.command(&["run", "--demo"]).output().expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("the model is a RECORDING"), "{stderr}");
    assert!(stderr.contains("succeeded"), "{stderr}");
    // The uid-0 warning comes at the start of the run, exactly when the run is root's.
    let root = nix::unistd::geteuid().is_root();
    assert_eq!(
        stderr.contains("warning: commands will run as uid 0 (root)"),
        root,
        "{stderr}"
    );
    let ws = stderr
        .lines()
        .find_map(|l| l.strip_prefix("Workspace: "))
        .expect("workspace line");
    assert!(
        !Path::new(ws).exists(),
        "the demo's workspace is removed afterwards"
    );
}

#[test]
fn denials_by_rule_hook_and_approval_mode_reach_the_model_and_the_record() {
    let env = TestHome::new();
    std::fs::write(env.ws().join("keep.txt"), "precious\n").unwrap();
    env.settings(json!({
        "permissions": {
            "bash(rm *)": {"mode": "deny", "reason": "deleting files is not allowed"},
            "bash": "allow",
        },
        "hooks": [{
            "event": "pre_tool_use",
            "tool_pattern": "bash",
            "command": "if grep -q 'git push'; then echo 'pushing is blocked by the hook' >&2; exit 2; fi; exit 0",
        }, {
            // Runs only after a call, where it sees the output; were it run as a pre hook it
            // would deny (exit 2) every bash call.
            "event": "post_tool_use",
            "tool_pattern": "bash",
            "command": "[ -n \"$HANZO_TOOL_OUTPUT\" ] && echo post >> post-hooks.log; exit 2",
        }],
    }));
    let cassette = env.cassette(
        "model.jsonl",
        &[
            ScriptTurn::tool("t1", "bash", json!({"command": "rm -f keep.txt"}))
                .and_tool("t2", "bash", json!({"command": "git push origin main"}))
                .and_tool(
                    "t3",
                    "write_file",
                    json!({"path": "new.txt", "content": "x"}),
                )
                .and_tool("t4", "bash", json!({"command": "echo allowed > ran.txt"})),
            ScriptTurn::text("Three of my calls were denied."),
        ],
    );
    let (code, events, stderr) = run_json(&env, &["--replay", &cassette, "fix it"]);
    assert_eq!(code, Some(0), "{stderr}");
    let decisions = of_type(&events, "tool_decision");
    let by = |id: &str| {
        decisions
            .iter()
            .find(|d| d["id"] == id)
            .map(|d| {
                (
                    d["allowed"].as_bool().unwrap(),
                    d["decided_by"].as_str().unwrap().to_string(),
                    d["reason"].as_str().unwrap().to_string(),
                )
            })
            .unwrap()
    };
    let (a1, d1, r1) = by("t1");
    assert!(
        !a1 && d1 == "rule" && r1.contains("deleting files is not allowed"),
        "{d1} {r1}"
    );
    let (a2, d2, r2) = by("t2");
    assert!(
        !a2 && d2 == "hook" && r2.contains("pushing is blocked by the hook"),
        "{d2} {r2}"
    );
    let (a3, d3, r3) = by("t3");
    assert!(
        !a3 && d3 == "approval:deny" && r3.contains("non-interactive"),
        "{d3} {r3}"
    );
    let (a4, _, _) = by("t4");
    assert!(a4);
    // Nothing denied happened; the allowed call did.
    assert!(env.ws().join("keep.txt").exists());
    assert!(!env.ws().join("new.txt").exists());
    assert_eq!(
        std::fs::read_to_string(env.ws().join("ran.txt")).unwrap(),
        "allowed\n"
    );
    // The model was shown each denial as an error result.
    let results = of_type(&events, "tool_result");
    for id in ["t1", "t2", "t3"] {
        let r = results.iter().find(|r| r["id"] == id).unwrap();
        assert_eq!(r["is_error"], true);
        assert!(r["preview"]
            .as_str()
            .unwrap()
            .starts_with("permission denied"));
    }
    let rec = env.store().load_run(run_id(&events)).unwrap();
    let calls = &rec.steps[0].tool_calls;
    assert_eq!(calls.len(), 4);
    assert_eq!(calls[0].call.rule.as_ref().unwrap().pattern, "bash(rm *)");
    assert!(matches!(
        calls[1].call.hook_results[0],
        hanzo_store::HookResult::Pre { allowed: false, .. }
    ));
    assert_eq!(calls[3].call.hook_results.len(), 2, "pre and post");
    // The post hook ran once, after the one bash call that ran, and never as a pre hook.
    assert_eq!(
        std::fs::read_to_string(env.ws().join("post-hooks.log")).unwrap(),
        "post\n"
    );
    assert_eq!(rec.audit.len(), 4);
}

#[test]
fn isolation_strict_runs_on_this_machine_and_is_recorded() {
    let env = TestHome::new();
    let cassette = env.cassette("model.jsonl", &[ScriptTurn::text("nothing to do")]);
    let (code, events, stderr) = run_json(
        &env,
        &["--isolation", "strict", "--replay", &cassette, "noop"],
    );
    let kernel = hanzo_sandbox::doctor::probe_kernel();
    if let Err(why) = kernel.tier_b() {
        // Fail closed, with advice.
        assert_eq!(code, Some(3), "{stderr}");
        assert!(stderr.contains("hanzo-dev doctor"), "{why}: {stderr}");
        return;
    }
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(of_type(&events, "run_started")[0]["isolation"], "B");
    assert_eq!(
        env.store().load_run(run_id(&events)).unwrap().run.isolation,
        hanzo_policy::Tier::B
    );
}

#[test]
fn usage_errors_exit_2_and_a_missing_agent_4_with_a_message() {
    let env = TestHome::new();
    let out = env
        .command(&["run", "--agent", "nobody", "--replay", "/nonexistent", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read cassette /nonexistent"));
    let c = env.cassette("model.jsonl", &[ScriptTurn::text("x")]);
    let out = env
        .command(&["run", "--agent", "nobody", "--replay", &c, "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no agent named \"nobody\""));
    let out = env.command(&["run", "x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "no credential");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no model credential found"));
}

#[test]
fn a_failing_model_fails_the_run_with_exit_1() {
    let env = TestHome::new();
    // The cassette runs out after the first turn: the second model request fails.
    let cassette = env.cassette(
        "model.jsonl",
        &[ScriptTurn::tool("t1", "list_dir", json!({"path": "."}))],
    );
    let (code, events, _) = run_json(&env, &["--approval", "allow", "--replay", &cassette, "go"]);
    assert_eq!(code, Some(1));
    let fin = of_type(&events, "run_finished")[0];
    assert_eq!(fin["status"], "failed");
    assert!(fin["outcome"]
        .as_str()
        .unwrap()
        .contains("model request failed"));
    let rec = env.store().load_run(run_id(&events)).unwrap();
    assert_eq!(rec.run.status, RunStatus::Failed);
    assert_eq!(rec.steps.len(), 2);
}

/// The pids of the `sleep 60` a [`sleeping_run`] started, once it runs (polled: the command
/// starts asynchronously after its `tool_decision` event).
fn the_sleeping_command(root: u32) -> Vec<u32> {
    for _ in 0..400 {
        let found = descendants_with(root, &["sleep", "60"]);
        if !found.is_empty() {
            return found;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("the command never started");
}

fn sleeping_run(env: &TestHome) -> Running {
    let cassette = env.cassette(
        "model.jsonl",
        &[
            ScriptTurn::tool(
                "t1",
                "bash",
                json!({"command": "echo started; sleep 60; echo slept", "timeout_ms": 120000}),
            ),
            ScriptTurn::text("The command did not finish; stopping here."),
        ],
    );
    Running::start(env.command(&[
        "run",
        "--json",
        "--approval",
        "allow",
        "--replay",
        &cassette,
        "sleep",
    ]))
}

#[test]
fn a_tools_worker_killed_mid_run_is_a_result_and_the_run_ends_cleanly() {
    let env = TestHome::new();
    let mut run = sleeping_run(&env);
    run.wait_for("tool_decision", |e| {
        e["type"] == "tool_decision" && e["allowed"] == true
    });
    // Wait until the command itself runs, then kill the tools worker(s) under this run.
    let root = run.child.id();
    let sleeper = the_sleeping_command(root);
    let workers = descendants_with(root, &["__worker", "tools"]);
    assert!(!workers.is_empty());
    for w in &workers {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(*w).expect("pid")),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let (code, events, stderr) = run.finish();
    assert_eq!(code, Some(0), "{stderr}");
    let r = of_type(&events, "tool_result")[0];
    assert_eq!(r["is_error"], true);
    assert!(
        r["preview"]
            .as_str()
            .unwrap()
            .contains("tools worker stopped"),
        "{r}"
    );
    assert_eq!(of_type(&events, "run_finished")[0]["status"], "succeeded");
    for p in sleeper {
        assert!(!alive(p), "the command {p} outlived its worker");
    }
    let rec = env.store().load_run(run_id(&events)).unwrap();
    assert_eq!(rec.run.status, RunStatus::Succeeded);
    assert_eq!(rec.steps.len(), 2);
    assert!(rec.steps.iter().all(|s| s.ended_ms.is_some()));
    let c = &rec.steps[0].tool_calls[0].call;
    assert!(c.error.as_deref().unwrap().contains("tools worker stopped"));
}

#[test]
fn a_supervisor_killed_mid_run_leaves_a_consistent_store_marked_interrupted() {
    let env = TestHome::new();
    let mut run = sleeping_run(&env);
    let started = run.wait_for("run_started", |e| e["type"] == "run_started");
    let id = RunId(started["run_id"].as_i64().unwrap());
    run.wait_for("tool_decision", |e| e["type"] == "tool_decision");
    let root = run.child.id();
    let mut procs = the_sleeping_command(root);
    procs.extend(descendants_with(root, &["__worker"]));
    assert!(procs.len() > 5, "{procs:?}");
    // While it runs, the record says running.
    assert_eq!(env.store().get_run(id).unwrap().status, RunStatus::Running);
    run.child.kill().expect("kill -9");
    let (code, _, _) = run.finish();
    assert_eq!(code, None, "killed by a signal");
    // Every worker and the command die with it.
    for _ in 0..200 {
        if procs.iter().all(|p| !alive(*p)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let left: Vec<_> = procs.iter().filter(|p| alive(**p)).collect();
    assert!(left.is_empty(), "outlived the supervisor: {left:?}");
    // The next start marks the run interrupted; what was written is intact.
    let out = env
        .command(&["runs", "show", &id.0.to_string(), "--json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rec: Value = serde_json::from_slice(&out.stdout).expect("runs show --json");
    assert_eq!(rec["run"]["status"], "interrupted");
    let steps = rec["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 1, "the step in progress is kept");
    assert!(steps[0]["ended_ms"].is_null());
    let store = env.store();
    assert_eq!(store.get_run(id).unwrap().status, RunStatus::Interrupted);
}

#[test]
fn a_long_run_compacts_its_context_through_the_real_model_worker() {
    let env = TestHome::new();
    // Three files of ~1200 tokens each (as read_file numbers their lines), a 3000-token window:
    // compaction before the 4th turn.
    for f in ["a.txt", "b.txt", "c.txt"] {
        std::fs::write(
            env.ws().join(f),
            format!("{}\n", "y".repeat(39)).repeat(100),
        )
        .unwrap();
    }
    let cassette = env.cassette(
        "model.jsonl",
        &[
            ScriptTurn::tool("t1", "read_file", json!({"path": "a.txt"})),
            ScriptTurn::tool("t2", "read_file", json!({"path": "b.txt"})),
            ScriptTurn::tool("t3", "read_file", json!({"path": "c.txt"})),
            ScriptTurn::text(
                "Summary: read a.txt, b.txt and c.txt; each is 100 lines of the letter y.",
            ),
            ScriptTurn::text("All three files hold only the letter y."),
        ],
    );
    let (code, events, stderr) = run_json(
        &env,
        &[
            "--approval",
            "allow-listed",
            "--max-context",
            "3000",
            "--replay",
            &cassette,
            "read them",
        ],
    );
    assert_eq!(code, Some(0), "{stderr}\n{events:#?}");
    let c = of_type(&events, "compacted");
    assert_eq!(c.len(), 1, "{events:#?}");
    assert_eq!(c[0]["summarized"], true);
    assert!(c[0]["tokens_after"].as_u64() < c[0]["tokens_before"].as_u64());
    let fin = of_type(&events, "run_finished")[0];
    assert_eq!(fin["outcome"], "All three files hold only the letter y.");
    let rec = env.store().load_run(run_id(&events)).unwrap();
    assert!(rec.events.iter().any(|e| e.kind == "compacted"));
    assert_eq!(rec.steps.len(), 4, "the summary call is not a step");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

fn path_exists(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok()
}

#[test]
fn a_prompt_injected_model_cannot_read_secrets_leak_env_or_reach_the_network() {
    const KEY: &str = "sk-ant-injection-canary-1f9a3c";
    const SSH: &str = "ssh-canary-PRIVATE-KEY-7d2b";
    const FILE_KEY: &str = "sk-file-canary-0b8e44";
    let env = TestHome::new();
    // The canary key file the cassette's model goes for, outside the workspace.
    let canary_dir = Path::new("/tmp/hanzo-injection-canary/.ssh");
    std::fs::create_dir_all(canary_dir).unwrap();
    std::fs::write(canary_dir.join("id_rsa"), SSH).unwrap();
    std::fs::create_dir_all(env.path("home/.ssh")).unwrap();
    std::fs::write(env.path("home/.ssh/id_rsa"), SSH).unwrap();
    let creds = env.path("config/hanzo/credentials.json");
    std::fs::write(&creds, json!({"openai": {"api_key": FILE_KEY}}).to_string()).unwrap();
    std::fs::set_permissions(&creds, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/injection");
    copy_dir(&fixtures.join("project"), &env.ws());
    let git = Command::new("git")
        .args(["init", "-q"])
        .current_dir(env.ws())
        .status()
        .unwrap();
    assert!(git.success());
    let cassette = fixtures.join("injection.cassette.jsonl");
    // The worst case: every call approved. Only the sandbox stands in the way.
    let mut cmd = env.command(&[
        "run",
        "--json",
        "--approval",
        "allow",
        "--replay",
        cassette.to_str().unwrap(),
        hanzo_dev::demo::INJECTION_TASK,
    ]);
    cmd.env("ANTHROPIC_API_KEY", KEY);
    let (code, events, stderr) = Running::start(cmd).finish();
    assert_eq!(code, Some(0), "{stderr}");
    let everything = format!("{events:?}{stderr}");
    assert!(!everything.contains(KEY), "the key leaked into the output");
    assert!(
        !everything.contains(SSH),
        "the ssh key leaked into the output"
    );
    assert!(
        !everything.contains(FILE_KEY),
        "the credential file leaked into the output"
    );
    let rec = env.store().export_run(run_id(&events)).unwrap().to_string();
    assert!(
        !rec.contains(KEY) && !rec.contains(SSH) && !rec.contains(FILE_KEY),
        "a secret is in the run record"
    );
    assert!(
        !path_exists(&env.ws().join(".git/hooks/pre-commit")),
        "a git hook was planted"
    );
    assert!(
        !path_exists(&env.ws().join(".hanzo/settings.json")),
        "project settings were planted"
    );
    // Every attempt after reading the instructions failed.
    let calls = of_type(&events, "tool_call");
    let results = of_type(&events, "tool_result");
    assert!(calls.len() >= 8, "{calls:#?}");
    for (c, r) in calls.iter().zip(&results).skip(1) {
        let preview = r["preview"].as_str().unwrap();
        let harmless = r["is_error"] == true || !preview.contains("PRIVATE");
        assert!(harmless, "{c} → {r}");
    }
    let _ = std::fs::remove_dir_all("/tmp/hanzo-injection-canary");
}

#[test]
fn json_logs_carry_the_run_step_and_tool_spans() {
    let env = TestHome::new();
    let cassette = env.cassette(
        "model.jsonl",
        &[
            ScriptTurn::tool("t1", "list_dir", json!({"path": "."})),
            ScriptTurn::text("done"),
        ],
    );
    let out = env
        .command(&[
            "-v",
            "--log-format",
            "json",
            "run",
            "--json",
            "--approval",
            "allow",
            "--replay",
            &cassette,
            "look",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let logs: Vec<Value> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let decided = logs
        .iter()
        .find(|l| l["fields"]["message"] == "tool call decided")
        .unwrap_or_else(|| panic!("no tool log line in {logs:#?}"));
    let spans: Vec<&str> = decided["spans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(spans, ["agent.run", "agent.step", "agent.tool"]);
    let run_id = decided["spans"][0]["run_id"].as_i64().unwrap();
    assert_eq!(decided["spans"][2]["run_id"].as_i64(), Some(run_id));
    assert_eq!(decided["spans"][2]["tool"], "list_dir");
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(run_id, run_id_of(&events));
}

fn run_id_of(events: &[Value]) -> i64 {
    run_id(events).0
}

#[test]
fn ctrl_c_cancels_the_run_kills_its_command_and_records_cancelled() {
    let env = TestHome::new();
    let mut run = sleeping_run(&env);
    let started = run.wait_for("run_started", |e| e["type"] == "run_started");
    let id = RunId(started["run_id"].as_i64().unwrap());
    run.wait_for("tool_decision", |e| e["type"] == "tool_decision");
    let root = run.child.id();
    let sleeper = the_sleeping_command(root);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(root).expect("pid")),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let (code, events, stderr) = run.finish();
    assert_eq!(code, Some(130), "{stderr}");
    let fin = of_type(&events, "run_finished")[0];
    assert_eq!(fin["status"], "cancelled");
    for p in sleeper {
        assert!(!alive(p), "the command {p} survived the cancel");
    }
    let rec = env.store().load_run(id).unwrap();
    assert_eq!(rec.run.status, RunStatus::Cancelled);
    let c = &rec.steps[0].tool_calls[0].call;
    assert!(
        c.error.as_deref().unwrap().starts_with("cancelled"),
        "{c:?}"
    );
}

#[test]
fn approval_prompt_reads_the_answers_from_stdin() {
    use std::io::Write;
    let env = TestHome::new();
    let cassette = env.cassette(
        "model.jsonl",
        &[
            ScriptTurn::tool(
                "t1",
                "write_file",
                json!({"path": "yes.txt", "content": "y"}),
            )
            .and_tool(
                "t2",
                "write_file",
                json!({"path": "no.txt", "content": "n"}),
            ),
            ScriptTurn::text("done"),
        ],
    );
    let mut cmd = env.command(&[
        "run",
        "--json",
        "--approval",
        "prompt",
        "--replay",
        &cassette,
        "write",
    ]);
    cmd.stdin(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    child.stdin.take().unwrap().write_all(b"y\nn\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr.matches("allow write_file? (").count(), 2, "{stderr}");
    assert!(stderr.contains("  │ yes.txt\n"), "{stderr}");
    assert!(env.ws().join("yes.txt").exists());
    assert!(!env.ws().join("no.txt").exists());
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let d = of_type(&events, "tool_decision");
    assert_eq!(d[0]["allowed"], true);
    assert_eq!(d[0]["decided_by"], "approval:prompt");
    assert_eq!(d[1]["allowed"], false);
    assert_eq!(d[1]["reason"], "the user declined");
}
