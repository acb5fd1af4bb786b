//! Hook execution with real shell scripts: every way a hook can end, output and input far larger
//! than pipes and environment variables hold, and a timed-out hook's whole process group gone.

use hanzo_policy::hooks::{
    cap_env_value, hook_stdin, HookConfig, HookEvent, HookExit, HookSet, PreHookVerdict,
    MAX_CAPTURE_BYTES, MAX_ENV_VALUE_BYTES, MAX_REASON_BYTES, TRUNCATION_MARKER,
};
use hanzo_tools::hooks::HookRunner;
use serde_json::{json, Value};
use std::path::Path;

fn hook(event: HookEvent, command: &str, timeout_ms: u64) -> HookConfig {
    HookConfig {
        event,
        command: command.to_string(),
        tool_pattern: "*".to_string(),
        timeout_ms,
    }
}

fn runner(dir: &Path, hooks: Vec<HookConfig>) -> HookRunner {
    HookRunner::new(HookSet::new(hooks).expect("valid hooks"), dir).with_env(vec![(
        "PATH".to_string(),
        "/usr/local/bin:/usr/bin:/bin".to_string(),
    )])
}

async fn pre(dir: &Path, command: &str) -> PreHookVerdict {
    runner(dir, vec![hook(HookEvent::PreToolUse, command, 5000)])
        .run_pre("s1", "bash", &json!({"command": "ls"}))
        .await
        .verdict
}

fn failed_with(v: &PreHookVerdict, needle: &str) -> bool {
    matches!(v, PreHookVerdict::Failed { reason, log } if reason.contains(needle) && log.contains(needle))
}

#[tokio::test]
async fn exit_0_allows() {
    let dir = tempfile::tempdir().expect("tempdir");
    assert_eq!(pre(dir.path(), "exit 0").await, PreHookVerdict::Allow);
}

#[tokio::test]
async fn exit_2_denies_with_trimmed_stderr() {
    let dir = tempfile::tempdir().expect("tempdir");
    let v = pre(
        dir.path(),
        "echo '  no force-push  ' >&2; echo ignored; exit 2",
    )
    .await;
    assert_eq!(
        v,
        PreHookVerdict::Deny {
            reason: "no force-push".to_string()
        }
    );
}

#[tokio::test]
async fn exit_1_denies_and_is_logged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let v = pre(dir.path(), "echo broken >&2; exit 1").await;
    assert!(failed_with(&v, "exited with status 1"), "{v:?}");
    assert!(matches!(&v, PreHookVerdict::Failed { log, .. } if log.contains("broken")));
}

#[tokio::test]
async fn exit_137_and_a_real_sigkill_deny() {
    let dir = tempfile::tempdir().expect("tempdir");
    let v = pre(dir.path(), "exit 137").await;
    assert!(failed_with(&v, "exited with status 137"), "{v:?}");
    let v = pre(dir.path(), "kill -KILL $$").await;
    assert!(failed_with(&v, "killed by signal 9"), "{v:?}");
}

#[tokio::test]
async fn missing_command_and_missing_shell_deny() {
    let dir = tempfile::tempdir().expect("tempdir");
    let v = pre(dir.path(), "hanzo-no-such-command-xyz").await;
    assert!(failed_with(&v, "exited with status 127"), "{v:?}");
    let r = runner(
        dir.path(),
        vec![hook(HookEvent::PreToolUse, "exit 0", 5000)],
    )
    .with_shell("/nonexistent/sh");
    let v = r.run_pre("s1", "bash", &json!({})).await.verdict;
    assert!(failed_with(&v, "could not be started"), "{v:?}");
}

/// State of a process from /proc: None when it no longer exists.
fn proc_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The state follows the parenthesised command name, which may itself contain spaces.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Waits (by polling, a bounded number of times) until `pid` is gone or a zombie: SIGKILL is
/// delivered asynchronously, so the state, not the clock, is what the test checks.
fn dead(pid: i32) -> bool {
    for _ in 0..500 {
        match proc_state(pid) {
            None | Some('Z') | Some('X') => return true,
            _ => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    }
    false
}

#[tokio::test]
async fn timeout_kills_the_whole_group_including_a_grandchild_that_ignores_term() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pids = dir.path().join("pids");
    let script = format!(
        "trap '' TERM; sleep 1000 & echo $! > {p}.child; echo $$ > {p}.shell; wait",
        p = pids.display()
    );
    let r = runner(dir.path(), vec![hook(HookEvent::PreToolUse, &script, 1000)]);
    let result = r.run_pre("s1", "bash", &json!({"command": "x"})).await;
    assert!(
        failed_with(&result.verdict, "timed out"),
        "{:?}",
        result.verdict
    );
    let read = |suffix: &str| -> i32 {
        std::fs::read_to_string(format!("{}.{suffix}", pids.display()))
            .expect("the script wrote its pids before the timeout")
            .trim()
            .parse()
            .expect("a pid")
    };
    let (shell, grandchild) = (read("shell"), read("child"));
    assert!(dead(shell), "hook shell {shell} survived");
    assert!(
        dead(grandchild),
        "grandchild {grandchild} survived the group kill"
    );
}

#[tokio::test]
async fn background_children_do_not_outlive_a_clean_exit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("bg.pid");
    let script = format!(
        "sleep 1000 > /dev/null 2>&1 & echo $! > {}; exit 0",
        p.display()
    );
    assert_eq!(pre(dir.path(), &script).await, PreHookVerdict::Allow);
    let pid: i32 = std::fs::read_to_string(&p)
        .expect("pid file")
        .trim()
        .parse()
        .expect("pid");
    assert!(dead(pid), "background child {pid} survived");
}

#[tokio::test]
async fn huge_stderr_and_stdout_are_drained_and_capped() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 1 MiB on each stream: far beyond a pipe buffer, so an undrained pipe would hang the hook.
    let script = "head -c 1048576 /dev/zero | tr '\\0' o; head -c 1048576 /dev/zero | tr '\\0' e >&2; exit 2";
    let r = runner(
        dir.path(),
        vec![hook(HookEvent::PreToolUse, script, 60_000)],
    );
    let outcome = r
        .run_one(&hook(HookEvent::PreToolUse, script, 60_000), b"{}", &[])
        .await;
    assert_eq!(outcome.exit, HookExit::Exited(2));
    assert_eq!(outcome.stdout.len(), MAX_CAPTURE_BYTES);
    assert_eq!(outcome.stderr.len(), MAX_CAPTURE_BYTES);
    assert!(outcome.stderr_truncated);
    let v = r.run_pre("s1", "bash", &json!({})).await.verdict;
    match v {
        PreHookVerdict::Deny { reason } => {
            assert!(reason.len() <= MAX_REASON_BYTES, "{}", reason.len());
            assert!(reason.starts_with("eeee"));
            assert!(reason.ends_with("…[truncated]"));
        }
        other => panic!("expected deny, got {other:?}"),
    }
}

#[tokio::test]
async fn huge_input_env_is_capped_with_marker_and_stdin_is_complete() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = json!({"path": "big.txt", "content": "é".repeat(150_000)});
    let d = dir.path().display();
    let script = format!(
        "printf %s \"$HANZO_TOOL_INPUT\" > {d}/env_input; cat > {d}/stdin; printf %s \"$HANZO_TOOL_NAME|$HANZO_SESSION_ID|${{HOME:-no-home}}\" > {d}/vars"
    );
    let r = runner(
        dir.path(),
        vec![hook(HookEvent::PreToolUse, &script, 30_000)],
    );
    let v = r.run_pre("sess-9", "write_file", &input).await.verdict;
    assert_eq!(v, PreHookVerdict::Allow);
    let env_input = std::fs::read_to_string(dir.path().join("env_input")).expect("env file");
    assert!(env_input.len() <= MAX_ENV_VALUE_BYTES);
    assert!(env_input.ends_with(TRUNCATION_MARKER));
    assert_eq!(env_input, cap_env_value(&input.to_string()));
    let stdin = std::fs::read(dir.path().join("stdin")).expect("stdin file");
    assert_eq!(
        stdin,
        hook_stdin(HookEvent::PreToolUse, "sess-9", "write_file", &input, None)
    );
    let parsed: Value = serde_json::from_slice(&stdin).expect("stdin is complete JSON");
    assert_eq!(parsed["tool_input"], input);
    // The base environment replaced the inherited one: no HOME leaks in.
    assert_eq!(
        std::fs::read_to_string(dir.path().join("vars")).expect("vars"),
        "write_file|sess-9|no-home"
    );
}

#[tokio::test]
async fn first_denying_pre_hook_stops_the_rest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("second-ran");
    let r = runner(
        dir.path(),
        vec![
            hook(HookEvent::PreToolUse, "echo stop >&2; exit 2", 5000),
            hook(
                HookEvent::PreToolUse,
                &format!("touch {}", marker.display()),
                5000,
            ),
        ],
    );
    let res = r.run_pre("s", "bash", &json!({})).await;
    assert_eq!(res.verdict.deny_reason(), Some("stop"));
    assert_eq!(
        res.denied_by.map(|h| h.command),
        Some("echo stop >&2; exit 2".to_string())
    );
    assert!(!marker.exists());
}

#[tokio::test]
async fn post_hooks_see_output_and_never_block() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    let r = runner(
        dir.path(),
        vec![
            hook(
                HookEvent::PostToolUse,
                &format!("printf %s \"$HANZO_TOOL_OUTPUT\" > {}", out.display()),
                5000,
            ),
            hook(HookEvent::PostToolUse, "exit 3", 5000),
            hook(HookEvent::PostToolUse, "sleep 1000", 200),
        ],
    );
    let failures = r
        .run_post(
            "s",
            "bash",
            &json!({"command": "ls"}),
            &json!("file-a\nfile-b"),
        )
        .await;
    assert_eq!(
        std::fs::read_to_string(&out).expect("output file"),
        "file-a\nfile-b"
    );
    assert_eq!(failures.len(), 2, "{failures:?}");
    assert!(failures[0].contains("exited with status 3"));
    assert!(failures[1].contains("timed out"));
    // A pre-hook is unaffected by post hooks.
    assert_eq!(
        r.run_pre("s", "bash", &json!({})).await.verdict,
        PreHookVerdict::Allow
    );
}

#[tokio::test]
async fn a_hook_that_leaves_its_group_is_killed_at_the_timeout_and_after_a_clean_exit() {
    // Under the keeper (Landlock ABI 6+) `setsid` and a double fork do not escape; without one
    // the group kill is all there is, and this test has nothing to prove.
    if hanzo_tools::exec::keeper().is_err() {
        eprintln!("skipped: no Landlock signal scoping on this kernel");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("pids");
    let script = format!(
        "setsid sh -c 'echo $$ >> {p}; exec sleep 1000' & \
         sh -c 'setsid sh -c \"trap \\\"\\\" TERM; echo \\$\\$ >> {p}; exec sleep 1001\" & exit 0'; \
         while [ \"$(wc -l < {p})\" -lt 2 ]; do sleep 0.05; done; trap '' TERM; sleep 1002",
        p = p.display()
    );
    let r = runner(dir.path(), vec![hook(HookEvent::PreToolUse, &script, 3000)]);
    let result = r.run_pre("s1", "bash", &json!({"command": "x"})).await;
    assert!(
        failed_with(&result.verdict, "timed out"),
        "{:?}",
        result.verdict
    );
    let pids: Vec<i32> = std::fs::read_to_string(&p)
        .expect("pids")
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert_eq!(pids.len(), 2, "{pids:?}");
    for pid in &pids {
        assert!(dead(*pid), "{pid} left its group and survived the timeout");
    }
    // A clean exit leaves nothing running either.
    let q = dir.path().join("bg");
    let script = format!(
        "setsid sh -c 'echo $$ > {q}; exec sleep 1003' & while [ ! -s {q} ]; do sleep 0.05; done; exit 0",
        q = q.display()
    );
    assert_eq!(pre(dir.path(), &script).await, PreHookVerdict::Allow);
    let pid: i32 = std::fs::read_to_string(&q)
        .expect("pid")
        .trim()
        .parse()
        .expect("pid");
    assert!(dead(pid), "setsid child {pid} outlived its hook");
}
