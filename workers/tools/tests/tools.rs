//! The built-in tools through `Tools::run`, unconfined (confinement is `escape.rs`'s job): the
//! `bash` tool's exit codes, signals, timeout, cancellation, output cap, stdin, cwd and
//! environment; every definition's schema accepted by its tool.

use hanzo_ipc::roles::tools::{ToolCall, ToolResult};
use hanzo_policy::profile::CommandLimits;
use hanzo_tools::Tools;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

struct Fixture {
    ws: tempfile::TempDir,
    _run: tempfile::TempDir,
    tools: Tools,
}

fn fixture() -> Fixture {
    let ws = tempfile::tempdir().expect("tempdir");
    let run = tempfile::tempdir().expect("tempdir");
    let tools = Tools::new(ws.path(), run.path(), &[], &CommandLimits::default()).expect("tools");
    Fixture {
        ws,
        _run: run,
        tools,
    }
}

fn call(name: &str, input: serde_json::Value) -> ToolCall {
    ToolCall {
        id: "t1".into(),
        name: name.into(),
        input: input.to_string(),
    }
}

async fn bash(t: &Tools, command: &str) -> ToolResult {
    t.run(&call("bash", json!({ "command": command }))).await
}

fn alive(pid: i32) -> bool {
    // A zombie is dead for our purpose: it runs nothing.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

async fn wait_dead(pid: i32) -> bool {
    for _ in 0..200 {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

#[tokio::test]
async fn bash_reports_exit_code_and_combined_output_in_order() {
    let f = fixture();
    let r = bash(&f.tools, "echo out; echo err >&2; echo out2").await;
    assert_eq!(r, ToolResult::ok("out\nerr\nout2\n[exit code 0]"));
    let r = bash(&f.tools, "echo failing; exit 3").await;
    assert!(r.is_error);
    assert_eq!(r.error.as_deref(), Some("exit code 3"));
    assert_eq!(r.output, "failing\n[exit code 3]");
}

#[tokio::test]
async fn bash_reports_a_signal() {
    let f = fixture();
    let r = bash(&f.tools, "kill -SEGV $$").await;
    assert!(r.is_error);
    assert_eq!(r.error.as_deref(), Some("killed by SIGSEGV"));
}

#[tokio::test]
async fn bash_runs_in_the_workspace_with_stdin_closed_and_allow_listed_env() {
    let f = fixture();
    let r = bash(&f.tools, "pwd; cat; echo \"stdin-eof:$?\"; env | sort").await;
    assert!(!r.is_error, "{r:?}");
    let ws = f.ws.path().canonicalize().expect("canon");
    let mut lines = r.output.lines();
    assert_eq!(lines.next(), Some(ws.to_str().expect("utf-8")));
    assert_eq!(lines.next(), Some("stdin-eof:0"));
    let names: Vec<&str> = r
        .output
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .collect();
    for n in &names {
        assert!(
            [
                "PATH", "LANG", "LC_ALL", "TERM", "TZ", "HOME", "TMPDIR", "PWD", "SHLVL", "_",
                "OLDPWD"
            ]
            .contains(n),
            "unexpected variable {n} in {names:?}"
        );
    }
    assert!(r.output.contains("HOME=") && r.output.contains("TMPDIR="));
}

#[tokio::test]
async fn bash_never_sees_a_secret_even_when_configured_as_an_extra() {
    // (The worker's own environment never reaches commands except PATH/LANG/TERM/TZ: unit-tested
    // in `exec`, and end to end with a canary in the parent's environment in `escape.rs`.)
    let f = fixture();
    let tools = f.tools.clone().with_extra_env(vec![
        ("HANZO_CANARY_API_KEY".into(), "sk-canary-4f9e".into()),
        ("CARGO_TERM_COLOR".into(), "never".into()),
    ]);
    // (`/proc` is out of a command's reach: its Landlock domain grants no part of it.)
    let r = bash(&tools, "env").await;
    assert!(!r.is_error, "{r:?}");
    assert!(!r.output.contains("sk-canary-4f9e"), "{}", r.output);
    assert!(!r.output.contains("HANZO_CANARY_API_KEY"));
    assert!(r.output.contains("CARGO_TERM_COLOR=never"));
}

#[tokio::test]
async fn bash_output_is_capped_keeping_head_and_tail() {
    let f = fixture();
    let r = bash(
        &f.tools,
        "echo HEAD; head -c 300000 /dev/zero | tr '\\0' x; echo; echo TAIL",
    )
    .await;
    assert!(!r.is_error);
    assert!(r.output.starts_with("HEAD\n"));
    assert!(
        r.output.ends_with("TAIL\n[exit code 0]"),
        "{}",
        &r.output[r.output.len() - 100..]
    );
    assert!(r.output.contains("bytes of output omitted"));
    assert!(r.output.len() < hanzo_tools::exec::DEFAULT_OUTPUT_CAP + 200);
}

#[tokio::test]
async fn timeout_kills_the_whole_group_even_when_sigterm_is_ignored() {
    let f = fixture();
    let pidfile = f.ws.path().join("pids");
    let cmd = format!(
        "trap '' TERM; (trap '' TERM; sleep 1000) & echo $! > {p}; sleep 1000 & echo $! >> {p}; \
         wait",
        p = pidfile.display()
    );
    let r = f
        .tools
        .run(&call("bash", json!({ "command": cmd, "timeout_ms": 500 })))
        .await;
    assert!(r.is_error);
    assert!(
        r.error
            .as_deref()
            .is_some_and(|e| e.starts_with("timed out after 500 ms")),
        "{r:?}"
    );
    let pids = std::fs::read_to_string(&pidfile).expect("pid file");
    let pids: Vec<i32> = pids.lines().map(|l| l.parse().expect("pid")).collect();
    assert_eq!(pids.len(), 2);
    for pid in pids {
        assert!(wait_dead(pid).await, "child {pid} survived the timeout");
    }
}

#[tokio::test]
async fn background_children_do_not_outlive_a_finished_command() {
    let f = fixture();
    let r = bash(&f.tools, "sleep 1000 & echo $!").await;
    assert!(!r.is_error, "{r:?}");
    let pid: i32 = r.output.lines().next().expect("pid").parse().expect("pid");
    assert!(wait_dead(pid).await, "background child {pid} survived");
}

#[tokio::test]
async fn cancelling_a_call_kills_its_process_group() {
    let f = fixture();
    let pidfile = f.ws.path().join("pid");
    let cmd = format!("sleep 1000 & echo $! > {p}; wait", p = pidfile.display());
    let tools = f.tools.clone();
    let task = tokio::spawn(async move { bash(&tools, &cmd).await });
    // Wait until the command has started its child, then cancel (the channel aborts the task).
    let mut pid = None;
    for _ in 0..500 {
        if let Ok(s) = std::fs::read_to_string(&pidfile) {
            if let Ok(p) = s.trim().parse::<i32>() {
                pid = Some(p);
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let pid = pid.expect("the command started");
    assert!(alive(pid));
    task.abort();
    assert!(task.await.expect_err("aborted").is_cancelled());
    assert!(wait_dead(pid).await, "child {pid} survived the cancel");
}

#[tokio::test]
async fn file_tools_work_end_to_end_and_refuse_outside_paths() {
    let f = fixture();
    let t = &f.tools;
    let r = t
        .run(&call(
            "write_file",
            json!({"path": "src/x.txt", "content": "alpha\nbeta\n"}),
        ))
        .await;
    assert_eq!(r, ToolResult::ok("wrote 11 bytes to src/x.txt"));
    let r = t
        .run(&call(
            "edit_file",
            json!({"path": "src/x.txt", "old_string": "beta", "new_string": "gamma"}),
        ))
        .await;
    assert!(!r.is_error, "{r:?}");
    let r = t
        .run(&call("read_file", json!({"path": "src/x.txt"})))
        .await;
    assert_eq!(r.output, "     1\talpha\n     2\tgamma\n");
    let r = t.run(&call("grep", json!({"pattern": "gam+a"}))).await;
    assert_eq!(r.output, "src/x.txt:2:gamma\n");
    let r = t.run(&call("glob", json!({"pattern": "**/*.txt"}))).await;
    assert_eq!(r.output, "src/x.txt");
    let r = t.run(&call("list_dir", json!({}))).await;
    assert_eq!(r.output, "src/");
    let r = t
        .run(&call(
            "write_file",
            json!({"path": "/etc/evil", "content": "x"}),
        ))
        .await;
    assert!(r.is_error);
    assert!(r
        .error
        .as_deref()
        .is_some_and(|e| e.contains("\"/etc/evil\"")));
    assert!(!Path::new("/etc/evil").exists());
    let r = t
        .run(&call("read_file", json!({"path": "x", "bogus": 1})))
        .await;
    assert!(r
        .error
        .as_deref()
        .is_some_and(|e| e.starts_with("bad tool input")));
    let r = t.run(&call("nope", json!({}))).await;
    assert!(r
        .error
        .as_deref()
        .is_some_and(|e| e.contains("unknown tool")));
}

#[tokio::test]
async fn every_schema_property_is_accepted_by_its_tool() {
    let f = fixture();
    std::fs::write(f.ws.path().join("f.txt"), "a\n").expect("write");
    // A value of each property's type; a tool that rejected a property the model was told about
    // would say "bad tool input".
    for def in hanzo_tools::definitions() {
        let schema: serde_json::Value = serde_json::from_str(&def.input_schema).expect("json");
        assert_eq!(schema["type"], "object", "{}", def.name);
        let mut input = serde_json::Map::new();
        for (k, v) in schema["properties"].as_object().expect("properties") {
            let value = match (def.name.as_str(), k.as_str(), v["type"].as_str()) {
                ("git", "subcommand", _) => json!("status"),
                (_, _, Some("array")) => json!(["f.txt"]),
                (_, "path", _) => json!("f.txt"),
                ("bash", "command", _) => json!("true"),
                ("apply_patch", "patch", _) => {
                    json!("--- a/f.txt\n+++ b/f.txt\n@@ -1 +1 @@\n-a\n+b\n")
                }
                ("edit_file", "old_string", _) => json!("a"),
                (_, _, Some("integer")) => json!(1),
                (_, _, Some("boolean")) => json!(false),
                _ => json!("x"),
            };
            input.insert(k.clone(), value);
        }
        if def.name == "list_dir" || def.name == "glob" || def.name == "grep" {
            input.insert("path".into(), json!("."));
        }
        let r = f
            .tools
            .run(&ToolCall {
                id: "s".into(),
                name: def.name.clone(),
                input: serde_json::Value::Object(input).to_string(),
            })
            .await;
        assert!(
            !r.error
                .as_deref()
                .unwrap_or("")
                .starts_with("bad tool input"),
            "{}: {r:?}",
            def.name
        );
        std::fs::write(f.ws.path().join("f.txt"), "a\n").expect("reset");
    }
}

/// The keeper's sweep (`kill(-1)` scoped by Landlock to one command's domain) reaches everything
/// that command started and nothing else: not a command running beside it, not this process,
/// not an unrelated process of the same user — even when the command itself runs `kill -9 -1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_kills_only_its_own_command() {
    if hanzo_tools::exec::keeper().is_err() {
        eprintln!("skipped: no Landlock signal scoping on this kernel (no keeper)");
        return;
    }
    let f = fixture();
    let mut bystander = std::process::Command::new("sleep")
        .arg("1000.5")
        .spawn()
        .expect("bystander");
    let neighbour_call = call(
        "bash",
        json!({ "command": "sleep 2; echo neighbour survived", "timeout_ms": 30000 }),
    );
    let neighbour = f.tools.run(&neighbour_call);
    let sweeper = async {
        // Let the neighbour start first.
        tokio::time::sleep(Duration::from_millis(200)).await;
        f.tools
            .run(&call(
                "bash",
                json!({
                    "command": "setsid sleep 1000 & kill -9 -1; sleep 1000",
                    "timeout_ms": 500
                }),
            ))
            .await
    };
    let (n, s) = tokio::join!(neighbour, sweeper);
    assert!(
        s.error
            .as_deref()
            .is_some_and(|e| e.starts_with("timed out")),
        "{s:?}"
    );
    assert_eq!(n.output, "neighbour survived\n[exit code 0]", "{n:?}");
    let still_running = bystander.try_wait().expect("try_wait").is_none();
    let _ = bystander.kill();
    let _ = bystander.wait();
    assert!(
        still_running,
        "the sweep reached a process outside the command"
    );
}
