//! The crash property, for real: a writer process is `kill -9`ed mid-step and the store it leaves
//! behind is consistent, keeps every committed step, and its run becomes `interrupted`.
//!
//! The test re-executes its own test binary; `CHILD_ENV` switches that copy into writer mode.

use hanzo_policy::PermissionMode;
use hanzo_store::{NewRun, RunStatus, RunStore, StepEnd, TokenUsage, ToolCall, DEFAULT_ORG};
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

const CHILD_ENV: &str = "HANZO_STORE_CRASH_CHILD_DIR";
const COMMITTED_STEPS: u32 = 5;
const TEST_NAME: &str = "kill_9_mid_step_loses_only_the_step_in_progress";
/// libtest may print `test NAME ... ` on the same line before the child's output, so the parent
/// looks for this marker anywhere in a line.
const READY: &str = "HANZO-STORE-CHILD-READY";

fn tool_call(i: u32) -> ToolCall {
    ToolCall {
        tool_use_id: Some(format!("toolu_{i}")),
        name: "read".into(),
        input: json!({"path": format!("src/f{i}.rs")}),
        permission: PermissionMode::Allow,
        rule: None,
        allowed: true,
        decision_reason: "allowed".into(),
        decided_by: hanzo_store::DecidedBy::Default,
        hook_results: vec![],
        output: Some(format!("contents {i}")),
        error: None,
        duration_ms: 3,
    }
}

/// Writer mode: N complete steps, then a step begun and an uncommitted write open, then block
/// until killed.
fn child(dir: &Path) -> ! {
    let mut s = RunStore::open(dir, DEFAULT_ORG).expect("child open");
    let run = s
        .begin_run(&NewRun {
            agent: None,
            input: "long task".into(),
            model: "replay".into(),
            isolation: hanzo_policy::Tier::B,
        })
        .expect("begin run");
    for i in 0..COMMITTED_STEPS {
        let step = s.begin_step(run).expect("step");
        s.record_tool_call(step, &tool_call(i)).expect("call");
        s.finish_step(
            step,
            &StepEnd {
                text: Some(format!("step {i}")),
                usage: TokenUsage {
                    input: 10,
                    output: 1,
                },
            },
        )
        .expect("finish step");
    }
    s.begin_step(run).expect("step in progress");
    // A write that is mid-flight when the kill lands: it must vanish, not corrupt the file.
    let raw = rusqlite::Connection::open(s.path()).expect("raw");
    raw.execute_batch(&format!(
        "BEGIN IMMEDIATE; INSERT INTO events (run_id, kind, data, recorded_ms)
         VALUES ({}, 'half-written', '{{}}', 0);",
        run.0
    ))
    .expect("open uncommitted write");
    let mut out = std::io::stdout();
    writeln!(out, "{READY}").expect("stdout");
    out.flush().expect("flush");
    // Block "forever", but not longer than any sane test run: if the parent died without
    // killing us, we must not linger holding the store's write lock.
    std::thread::sleep(std::time::Duration::from_secs(300));
    std::process::exit(3)
}

#[test]
fn kill_9_mid_step_loses_only_the_step_in_progress() {
    if let Some(dir) = std::env::var_os(CHILD_ENV) {
        child(Path::new(&dir));
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("own test binary");
    let mut proc = Command::new(exe)
        .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child");
    let stdout = proc.stdout.take().expect("piped stdout");
    let mut ready = false;
    for line in BufReader::new(stdout).lines() {
        if line.expect("child output").contains(READY) {
            ready = true;
            break;
        }
    }
    // std's Child::kill sends SIGKILL on Unix: the writer gets no chance to clean up.
    proc.kill().expect("kill -9");
    assert!(ready, "the child exited before reporting ready");
    let status = proc.wait().expect("reap");
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "child ended by {status:?}");
    }

    let mut s = RunStore::open(dir.path(), DEFAULT_ORG).expect("reopen after crash");
    let runs = s.list_runs(10).expect("list");
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, RunStatus::Running, "nobody closed it yet");
    assert_eq!(s.mark_interrupted_runs().expect("mark"), 1);
    let rec = s.load_run(runs[0].id).expect("load");
    assert_eq!(rec.run.status, RunStatus::Interrupted);
    let finished: Vec<_> = rec
        .steps
        .iter()
        .filter(|st| st.ended_ms.is_some())
        .collect();
    assert_eq!(finished.len(), COMMITTED_STEPS as usize);
    for (i, st) in finished.iter().enumerate() {
        assert_eq!(st.index as usize, i + 1);
        assert_eq!(st.text.as_deref(), Some(format!("step {i}").as_str()));
        assert_eq!(st.tool_calls.len(), 1);
        assert_eq!(
            st.tool_calls[0].call,
            tool_call(u32::try_from(i).expect("small"))
        );
    }
    // The step in progress is there as begun, with nothing after its start.
    assert_eq!(rec.steps.len(), COMMITTED_STEPS as usize + 1);
    let last = rec.steps.last().expect("in-progress step");
    assert_eq!(last.ended_ms, None);
    assert!(last.tool_calls.is_empty());
    // The uncommitted write was rolled back and its lock released: the store is writable.
    assert!(rec.events.iter().all(|e| e.kind != "half-written"));
    let raw = rusqlite::Connection::open(s.path()).expect("raw");
    let check: String = raw
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("integrity_check");
    assert_eq!(check, "ok");
    let again = s
        .begin_run(&NewRun {
            agent: None,
            input: "next".into(),
            model: "replay".into(),
            isolation: hanzo_policy::Tier::B,
        })
        .expect("store usable after the crash");
    assert_eq!(s.get_run(again).expect("run").status, RunStatus::Running);
}
