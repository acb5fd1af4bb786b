//! A tool call's life on record: started (with its decision and the policy's audit record, in
//! one transaction) before it executes, finished after; refused calls in one write.

use hanzo_policy::{AuditRecord, PermissionMode};
use hanzo_store::{
    CallEnd, CallStatus, DecidedBy, HookResult, McpCallInfo, McpClassification, NewRun, RunStatus,
    RunStore, StepEnd, StoreError, TokenUsage, ToolCall, DEFAULT_ORG,
};
use serde_json::json;

fn audit(tool: &str) -> AuditRecord {
    AuditRecord {
        timestamp: 1_700_000_000_000,
        session_id: "run-1".into(),
        tool_name: tool.into(),
        input_digest: "sha256:00".into(),
        mode: PermissionMode::Allow,
        rule_matched: None,
        reason: "no rule matched".into(),
    }
}

fn call(name: &str, allowed: bool) -> ToolCall {
    ToolCall {
        tool_use_id: Some(format!("toolu_{name}")),
        name: name.into(),
        input: json!({"command": "cargo test"}),
        permission: PermissionMode::Allow,
        rule: None,
        decided_by: if allowed {
            DecidedBy::Default
        } else {
            DecidedBy::Hook
        },
        allowed,
        decision_reason: "no rule matched".into(),
        hook_results: vec![HookResult::Pre {
            allowed,
            failed: false,
            reason: None,
            decided_by: None,
        }],
        output: None,
        error: None,
        duration_ms: 0,
    }
}

fn new_run() -> NewRun {
    NewRun {
        agent: None,
        input: "task".into(),
        model: "m".into(),
        isolation: hanzo_policy::Tier::A,
    }
}

#[test]
fn a_call_is_on_record_as_started_before_it_finishes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = RunStore::open(dir.path(), DEFAULT_ORG).expect("open");
    let run = s.begin_run(&new_run()).expect("run");
    let step = s.begin_step(run).expect("step");
    let id = s
        .start_call(step, Some(&audit("bash")), &call("bash", true))
        .expect("start");
    // A reader sees the call, started, and the audit record, before it has run.
    let reader = RunStore::open(dir.path(), DEFAULT_ORG).expect("reader");
    let rec = reader.load_run(run).expect("load");
    let c = &rec.steps[0].tool_calls[0];
    assert_eq!(c.status, CallStatus::Started);
    assert_eq!(c.call.output, None);
    assert_eq!(rec.audit.len(), 1);
    s.finish_call(
        id,
        &CallEnd {
            output: Some("ok".into()),
            error: None,
            duration_ms: 42,
            more_hook_results: vec![HookResult::Post { failures: vec![] }],
            mcp: None,
        },
    )
    .expect("finish");
    let rec = reader.load_run(run).expect("load");
    let c = &rec.steps[0].tool_calls[0];
    assert_eq!(c.status, CallStatus::Finished);
    assert_eq!(c.call.output.as_deref(), Some("ok"));
    assert_eq!(c.call.duration_ms, 42);
    assert_eq!(c.call.hook_results.len(), 2, "pre, then post");
    assert_eq!(c.call.decided_by, DecidedBy::Default);
    assert_eq!(c.mcp, None, "not an MCP call");
    // Finishing twice is refused; so is an unknown call.
    assert!(matches!(
        s.finish_call(id, &CallEnd::default()),
        Err(StoreError::CallFinished(_))
    ));
    assert!(matches!(
        s.finish_call(hanzo_store::CallId(9999), &CallEnd::default()),
        Err(StoreError::CallNotFound(9999))
    ));
}

#[test]
fn refused_calls_and_their_audit_are_one_write_and_a_closed_run_takes_neither() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = RunStore::open(dir.path(), DEFAULT_ORG).expect("open");
    let run = s.begin_run(&new_run()).expect("run");
    let step = s.begin_step(run).expect("step");
    s.record_refused_call(step, Some(&audit("bash")), &call("bash", false))
        .expect("refused");
    let rec = s.load_run(run).expect("load");
    assert_eq!(rec.audit.len(), 1);
    assert_eq!(rec.steps[0].tool_calls[0].status, CallStatus::Finished);
    assert_eq!(rec.steps[0].tool_calls[0].call.decided_by, DecidedBy::Hook);
    s.finish_step(step, &StepEnd::default()).expect("step end");
    s.finish_run(run, RunStatus::Failed, Some("x"), TokenUsage::default())
        .expect("finish");
    // Neither the audit record nor the call of a refused write is left half-written.
    let err = s
        .start_call(step, Some(&audit("grep")), &call("grep", true))
        .expect_err("closed run");
    assert!(matches!(err, StoreError::RunNotRunning { .. }), "{err}");
    let rec = s.load_run(run).expect("load");
    assert_eq!(rec.audit.len(), 1);
    assert_eq!(rec.steps[0].tool_calls.len(), 1);
}

#[test]
fn a_started_call_of_a_dead_process_stays_started_in_an_interrupted_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path;
    let run;
    {
        let mut s = RunStore::open(dir.path(), DEFAULT_ORG).expect("open");
        run = s.begin_run(&new_run()).expect("run");
        let step = s.begin_step(run).expect("step");
        s.start_call(step, None, &call("bash", true))
            .expect("start");
        path = s.path().to_path_buf();
    }
    // Pretend the run belongs to a process that died.
    let conn = rusqlite::Connection::open(&path).expect("raw");
    conn.execute("UPDATE runs SET owner_pid = 0", [])
        .expect("owner");
    drop(conn);
    let mut s = RunStore::open(dir.path(), DEFAULT_ORG).expect("reopen");
    assert_eq!(s.mark_interrupted_runs().expect("mark"), 1);
    let rec = s.load_run(run).expect("load");
    assert_eq!(rec.run.status, RunStatus::Interrupted);
    assert_eq!(rec.steps[0].tool_calls[0].status, CallStatus::Started);
}

#[test]
fn secrets_in_a_finished_calls_output_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = RunStore::open(dir.path(), DEFAULT_ORG).expect("open");
    s.set_known_secrets(["sk-live-canary-91"]);
    let run = s.begin_run(&new_run()).expect("run");
    let step = s.begin_step(run).expect("step");
    let id = s
        .start_call(step, None, &call("bash", true))
        .expect("start");
    let err = s
        .finish_call(
            id,
            &CallEnd {
                output: Some("key sk-live-canary-91".into()),
                ..CallEnd::default()
            },
        )
        .expect_err("secret");
    assert!(matches!(
        err,
        StoreError::SecretInRecord {
            field: "output",
            ..
        }
    ));
}

/// An `mcp__*` call's server, tool, classification and reason are fields of its record, read
/// back as written, in `runs show --json`'s shape (`"mcp": {…}`, lowercase classification); a
/// reason holding a known secret is refused like any other field.
#[test]
fn an_mcp_call_s_classification_is_a_field_of_its_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = RunStore::open(dir.path(), DEFAULT_ORG).expect("open");
    s.set_known_secrets(["sk-live-canary-91"]);
    let run = s.begin_run(&new_run()).expect("run");
    let step = s.begin_step(run).expect("step");
    let cases = [
        ("refuse", McpClassification::Denied, Some("HAAP: no")),
        (
            "missing",
            McpClassification::Fault,
            Some("-32601 Method not found"),
        ),
        ("ok", McpClassification::Allowed, None),
        ("slow", McpClassification::Failed, Some("timed out")),
    ];
    for (tool, classification, reason) in cases {
        let id = s
            .start_call(step, None, &call(&format!("mcp__cls__{tool}"), true))
            .expect("start");
        s.finish_call(
            id,
            &CallEnd {
                duration_ms: 7,
                mcp: Some(McpCallInfo {
                    server: "cls".into(),
                    tool: tool.into(),
                    classification,
                    reason: reason.map(str::to_string),
                }),
                ..CallEnd::default()
            },
        )
        .expect("finish");
    }
    let rec = s.load_run(run).expect("load");
    let got: Vec<_> = rec.steps[0]
        .tool_calls
        .iter()
        .map(|c| {
            let m = c.mcp.clone().expect("mcp fields");
            (m.tool, m.classification, m.reason, c.call.duration_ms)
        })
        .collect();
    let want: Vec<_> = cases
        .iter()
        .map(|(t, c, r)| (t.to_string(), *c, r.map(str::to_string), 7))
        .collect();
    assert_eq!(got, want);
    let shown = serde_json::to_value(&rec.steps[0].tool_calls[0]).expect("json");
    assert_eq!(
        shown["mcp"],
        json!({"server": "cls", "tool": "refuse", "classification": "denied", "reason": "HAAP: no"})
    );
    let id = s
        .start_call(step, None, &call("mcp__cls__leak", true))
        .expect("start");
    let err = s
        .finish_call(
            id,
            &CallEnd {
                mcp: Some(McpCallInfo {
                    server: "cls".into(),
                    tool: "leak".into(),
                    classification: McpClassification::Denied,
                    reason: Some("token sk-live-canary-91 refused".into()),
                }),
                ..CallEnd::default()
            },
        )
        .expect_err("secret");
    assert!(matches!(
        err,
        StoreError::SecretInRecord {
            field: "mcp_reason",
            ..
        }
    ));
}
