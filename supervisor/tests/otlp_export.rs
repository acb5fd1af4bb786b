//! Trace export end to end: `hanzo-dev run` (real binary, workers and sandbox, a replayed model)
//! with the standard `OTEL_EXPORTER_OTLP_*` variables, against a stand-in collector that decodes
//! each request with the OpenTelemetry project's own classes (`test-deps/otlp/receiver.py`, with
//! `opentelemetry-proto` from PyPI, installed by `scripts/setup.sh`).

mod common;

use common::env::TestHome;
use hanzo_model::script::ScriptTurn;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A guard against hangs, not a speed assertion.
const HANG_GUARD: Duration = Duration::from_secs(60);
/// The collector's key: only the broker may hold it, and it must reach the collector as a
/// header and nowhere else.
const HEADER_CANARY: &str = "otlp-canary-7f3a9c";
/// A provider key in the environment, which no span may carry.
const KEY_CANARY: &str = "sk-ant-canary-55d1e0";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The stand-in collector, stopped when dropped.
struct Collector {
    child: Child,
    port: u16,
    out: PathBuf,
}

impl Collector {
    fn start(dir: &Path) -> Collector {
        let site = repo().join("test-deps/otlp/site");
        assert!(
            site.join("opentelemetry").is_dir(),
            "{} is missing: run ./scripts/setup.sh",
            site.display()
        );
        let port_file = dir.join("collector.port");
        let out = dir.join("spans.jsonl");
        let child = Command::new("python3")
            .arg(repo().join("test-deps/otlp/receiver.py"))
            .arg(&port_file)
            .arg(&out)
            .env("PYTHONPATH", &site)
            .stdin(Stdio::null())
            .spawn()
            .expect("start the collector");
        let deadline = Instant::now() + HANG_GUARD;
        let port = loop {
            if let Ok(p) = std::fs::read_to_string(&port_file) {
                break p.trim().parse().expect("port");
            }
            assert!(Instant::now() < deadline, "the collector did not start");
            std::thread::sleep(Duration::from_millis(20));
        };
        Collector { child, port, out }
    }

    fn spans(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("collector line"))
            .collect()
    }

    fn bodies(&self) -> Vec<u8> {
        std::fs::read(self.out.with_extension("jsonl.bodies")).unwrap_or_default()
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_output(child: Child) -> Output {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    rx.recv_timeout(HANG_GUARD)
        .expect("hanzo-dev hung")
        .expect("wait")
}

fn turns() -> Vec<ScriptTurn> {
    vec![
        // The command prints its whole environment: the collector's key must not be in it.
        ScriptTurn::tool("t1", "bash", json!({"command": "env; echo done-listing"})),
        ScriptTurn::text("All looked at."),
    ]
}

fn by_name<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

/// `hanzo-dev run --json --approval allow --replay CASSETTE TASK` with `otel` added to the
/// private user's environment; waits for it to end.
fn run(env: &TestHome, turns: &[ScriptTurn], otel: &[(&str, String)], extra: &[&str]) -> Output {
    let cassette = env.cassette("model.jsonl", turns);
    let mut c = env.command(&[
        "run",
        "--json",
        "--approval",
        "allow",
        "--replay",
        &cassette,
    ]);
    c.args(extra)
        .arg("look around")
        .env("ANTHROPIC_API_KEY", KEY_CANARY)
        .envs(otel.iter().map(|(k, v)| (*k, v.as_str())));
    wait_output(c.spawn().expect("spawn"))
}

fn everything_the_run_left(env: &TestHome, out: &Output) -> String {
    let mut all = String::from_utf8_lossy(&out.stdout).into_owned();
    all.push_str(&String::from_utf8_lossy(&out.stderr));
    for entry in walk(&env.path("data")) {
        all.push_str(&String::from_utf8_lossy(
            &std::fs::read(entry).unwrap_or_default(),
        ));
    }
    all
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            files.extend(walk(&p));
        } else {
            files.push(p);
        }
    }
    files
}

#[test]
fn a_run_s_spans_reach_the_collector_nested_with_their_attributes_and_no_secret() {
    let env = TestHome::new();
    let collector = Collector::start(&env.path("tmp"));
    let out = run(
        &env,
        &turns(),
        &[
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://127.0.0.1:{}", collector.port),
            ),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                format!("authorization=Bearer%20{HEADER_CANARY}"),
            ),
            ("OTEL_SERVICE_NAME", "ci-agents".to_string()),
        ],
        &["-vv"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let spans = collector.spans();
    assert!(
        spans.iter().all(|s| s.get("error").is_none()),
        "the reference decoder refused a body: {spans:#?}"
    );
    let (runs, steps, tools) = (
        by_name(&spans, "agent.run"),
        by_name(&spans, "agent.step"),
        by_name(&spans, "agent.tool"),
    );
    assert_eq!(
        (runs.len(), steps.len(), tools.len()),
        (1, 2, 1),
        "{spans:#?}"
    );
    let run = runs[0];
    // One trace; the run is its root, the steps its children, the command the first step's.
    assert_eq!(run["parent_span_id"], "");
    assert!(spans.iter().all(|s| s["trace_id"] == run["trace_id"]));
    assert_eq!(run["trace_id"].as_str().map(str::len), Some(32));
    for step in &steps {
        assert_eq!(step["parent_span_id"], run["span_id"]);
    }
    let first = steps
        .iter()
        .find(|s| s["attributes"]["hanzo.step"] == 1)
        .expect("step 1");
    assert_eq!(tools[0]["parent_span_id"], first["span_id"]);
    // Attributes, in the GenAI conventions where they fit.
    let stored = env.store().list_runs(10).expect("runs");
    assert_eq!(stored.len(), 1);
    let a = &run["attributes"];
    assert_eq!(a["hanzo.run.id"], json!(stored[0].id.0));
    assert_eq!(a["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(a["gen_ai.agent.name"], "code");
    assert!(!stored[0].model.is_empty());
    assert_eq!(a["gen_ai.request.model"], json!(stored[0].model));
    assert_eq!(a["hanzo.run.status"], "succeeded");
    assert!(a["gen_ai.usage.input_tokens"].as_i64().is_some(), "{a}");
    assert_eq!(first["attributes"]["gen_ai.operation.name"], "chat");
    assert!(first["attributes"]["gen_ai.usage.output_tokens"].is_i64());
    assert_eq!(tools[0]["attributes"]["gen_ai.tool.name"], "bash");
    assert_eq!(
        tools[0]["attributes"]["gen_ai.operation.name"],
        "execute_tool"
    );
    assert_eq!(run["status"], json!([0, ""]));
    assert!(run["end"].as_u64() >= run["start"].as_u64());
    assert_eq!(run["resource"]["service.name"], "ci-agents");
    assert_eq!(run["content_type"], "application/x-protobuf");
    // The broker sent the collector's header; nothing else anywhere carries it.
    assert_eq!(
        run["headers"]["authorization"],
        format!("Bearer {HEADER_CANARY}")
    );
    let bodies = String::from_utf8_lossy(&collector.bodies()).into_owned();
    assert!(!bodies.contains(HEADER_CANARY) && !bodies.contains(KEY_CANARY));
    let left = everything_the_run_left(&env, &out);
    assert!(
        left.contains("done-listing"),
        "the command's output is recorded"
    );
    assert!(!left.contains(HEADER_CANARY), "the collector key leaked");
    assert!(!left.contains(KEY_CANARY));
}

#[test]
fn http_json_is_read_by_the_reference_mapping_and_a_failed_run_is_an_error_span() {
    let env = TestHome::new();
    let collector = Collector::start(&env.path("tmp"));
    // The cassette ends after the tool call: the second model request fails, and so the run.
    let out = run(
        &env,
        &turns()[..1],
        &[
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                format!("http://127.0.0.1:{}/v1/traces", collector.port),
            ),
            (
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                "http/json".to_string(),
            ),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    let spans = collector.spans();
    assert!(spans.iter().all(|s| s.get("error").is_none()), "{spans:#?}");
    let runs = by_name(&spans, "agent.run");
    assert_eq!(runs.len(), 1, "{spans:#?}");
    assert_eq!(runs[0]["content_type"], "application/json");
    assert_eq!(runs[0]["attributes"]["hanzo.run.status"], "failed");
    // STATUS_CODE_ERROR.
    assert_eq!(runs[0]["status"][0], 2);
    assert_eq!(by_name(&spans, "agent.tool").len(), 1);
    assert!(runs[0]["resource"]["service.name"] == "hanzo-dev");
}

#[test]
fn a_collector_that_fails_or_settings_it_cannot_use_never_fail_the_run() {
    let env = TestHome::new();
    let collector = Collector::start(&env.path("tmp"));
    // The collector answers 503 to every export.
    let out = run(
        &env,
        &turns(),
        &[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            format!("http://127.0.0.1:{}/fail", collector.port),
        )],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        stderr.matches("trace export to").count(),
        1,
        "one warning: {stderr}"
    );
    assert!(stderr.contains("503"), "{stderr}");
    // The collector saw the attempts.
    assert!(!collector.bodies().is_empty());
    // gRPC is refused by name, with the fix; the run goes on without export.
    let out = run(
        &env,
        &turns(),
        &[
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://127.0.0.1:{}", collector.port),
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc".to_string()),
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("trace export is off") && stderr.contains("http/protobuf"),
        "{stderr}"
    );
    assert!(collector.spans().is_empty());
    // An endpoint carrying a password is refused without printing it.
    let out = run(
        &env,
        &turns(),
        &[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://user:{HEADER_CANARY}@127.0.0.1:{}", collector.port),
        )],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("OTEL_EXPORTER_OTLP_HEADERS"), "{stderr}");
    assert!(!stderr.contains(HEADER_CANARY), "{stderr}");
}
