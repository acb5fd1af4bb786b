//! The run store's cost per agent step (begin step, one tool call, finish step: three committed,
//! fsynced transactions), of the same step as the loop writes it (the call recorded as started
//! with its audit record before it runs, then finished: four), and of loading a 100-step run.

use criterion::{criterion_group, criterion_main, Criterion};
use hanzo_policy::PermissionMode;
use hanzo_store::{CallEnd, NewRun, RunStore, StepEnd, ToolCall, DEFAULT_ORG};
use serde_json::json;

fn call() -> ToolCall {
    ToolCall {
        tool_use_id: Some("toolu_1".into()),
        name: "bash".into(),
        input: json!({"command": "cargo test"}),
        permission: PermissionMode::Allow,
        rule: None,
        allowed: true,
        decision_reason: "allowed by rule".into(),
        decided_by: hanzo_store::DecidedBy::Default,
        hook_results: vec![],
        output: Some("test result: ok. 12 passed".into()),
        error: None,
        duration_ms: 800,
    }
}

fn new_run() -> NewRun {
    NewRun {
        agent: None,
        input: "bench".into(),
        model: "replay".into(),
        isolation: hanzo_policy::Tier::B,
    }
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = RunStore::open(dir.path(), DEFAULT_ORG).expect("open");
    let run = store.begin_run(&new_run()).expect("run");
    c.bench_function("store_step_with_one_tool_call", |b| {
        b.iter(|| {
            let step = store.begin_step(run).expect("step");
            store.record_tool_call(step, &call()).expect("call");
            store
                .finish_step(step, &StepEnd::default())
                .expect("finish");
        })
    });
    let audit = hanzo_policy::AuditRecord {
        timestamp: 1_700_000_000_000,
        session_id: "run-1".into(),
        tool_name: "bash".into(),
        input_digest: "sha256:00".into(),
        mode: PermissionMode::Allow,
        rule_matched: None,
        reason: "allowed by rule".into(),
    };
    let end = CallEnd {
        output: Some("test result: ok. 12 passed".into()),
        error: None,
        duration_ms: 800,
        more_hook_results: Vec::new(),
        mcp: None,
    };
    c.bench_function("store_step_with_one_started_and_finished_call", |b| {
        b.iter(|| {
            let step = store.begin_step(run).expect("step");
            let id = store
                .start_call(
                    step,
                    Some(&audit),
                    &ToolCall {
                        output: None,
                        ..call()
                    },
                )
                .expect("start");
            store.finish_call(id, &end).expect("finish call");
            store
                .finish_step(step, &StepEnd::default())
                .expect("finish");
        })
    });
    let small = store.begin_run(&new_run()).expect("run");
    for _ in 0..100 {
        let step = store.begin_step(small).expect("step");
        store.record_tool_call(step, &call()).expect("call");
        store
            .finish_step(step, &StepEnd::default())
            .expect("finish");
    }
    c.bench_function("store_load_100_step_run", |b| {
        b.iter(|| store.load_run(small).expect("load"))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
