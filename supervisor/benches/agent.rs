//! The agent loop's own cost per step, without model latency (HIP-1210 run store, design §10):
//!
//! - `step/full`: one step (in runs of 10 steps) through the real model worker (replay provider: the cassette turn is
//!   parsed by the real SSE and Anthropic parsers) and the real tools worker (`list_dir` of an
//!   empty workspace, a near no-op), with policy, audit and the store's writes.
//! - `step/in-process`: the same loop and store with in-process seams — the loop and the store's
//!   fsyncs alone.
//! - `parts/model-turn` and `parts/tool-call`: the two worker round trips alone, the baseline the
//!   full step is compared with.
//!
//! Also prints the idle memory of a whole tree (`hanzo-dev workers`: the supervisor and its five
//! workers) as RSS and PSS sums; the design target is ≤ 40 MB.

use criterion::{criterion_group, Criterion};
use hanzo_dev::agent::approval::{ApprovalMode, Unattended};
use hanzo_dev::agent::deadline::Deadlines;
use hanzo_dev::agent::events::NoEvents;
use hanzo_dev::agent::run::{AgentLoop, Limits, LoopConfig, RunSpec};
use hanzo_dev::agent::traits::{
    ApiClient, ToolExecutor, ToolInvocation, TurnEnd, TurnError, TurnRequest,
};
use hanzo_dev::agent::workers::{WorkerApi, WorkerTools};
use hanzo_dev::secrets::StartEnv;
use hanzo_dev::startup::supervisor_config;
use hanzo_dev::tree::Supervisor;
use hanzo_ipc::roles::model::{
    self, Message, ProviderConfig, RetryPolicy, StopReason, StreamEvent, ToolDef, Usage, WireFormat,
};
use hanzo_ipc::roles::tools::{PreHookReply, ToolResult};
use hanzo_model::script::{anthropic_cassette, ScriptTurn};
use hanzo_policy::hooks::HookConfig;
use hanzo_policy::permission::ScopedPolicy;
use hanzo_store::{AgentDef, RunStore};
use serde_json::json;
use std::cell::Cell;
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn agent() -> AgentDef {
    AgentDef {
        name: "bench".into(),
        model: "m".into(),
        system_prompt: "You are a benchmark.".into(),
        tools: vec!["list_dir".into()],
    }
}

fn spec() -> RunSpec {
    RunSpec {
        task: "list the workspace, repeatedly".into(),
        agent_name: "bench".into(),
        stages: vec![agent()],
        model: "m".into(),
        isolation: hanzo_policy::Tier::B,
        workspace: "/ws".into(),
        replay: true,
        dangerous_workspace: Vec::new(),
    }
}

/// Steps per measured run (the last one is the closing text turn): a run of realistic length,
/// since every request carries the whole conversation and a step's cost grows with it.
const RUN_LEN: u64 = 10;

/// Time `iters` steps as whole runs of [`RUN_LEN`] steps, each run timed by `run`; returns the
/// time for `iters` steps at the measured per-step rate.
fn per_step<F, Fut>(iters: u64, run: F, rt: &tokio::runtime::Runtime) -> Duration
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Duration>,
{
    let runs = iters.div_ceil(RUN_LEN).max(1);
    let mut total = Duration::ZERO;
    for _ in 0..runs {
        total += rt.block_on(run());
    }
    total.mul_f64(iters as f64 / (runs * RUN_LEN) as f64)
}

fn config(steps: u64) -> LoopConfig {
    LoopConfig {
        limits: Limits {
            max_steps: u32::try_from(steps).unwrap_or(u32::MAX),
            ..Limits::default()
        },
        ..LoopConfig::default()
    }
}

/// `steps` turns that each call `list_dir`, then a closing text turn.
fn script(steps: u64) -> Vec<ScriptTurn> {
    let mut turns: Vec<ScriptTurn> = (0..steps)
        .map(|i| ScriptTurn::tool(&format!("toolu_{i}"), "list_dir", json!({"path": "."})))
        .collect();
    turns.push(ScriptTurn::text("done"));
    turns
}

/// The in-process model: answers the same script without IPC or parsing.
struct InProcessModel {
    left: Cell<u64>,
}

impl ApiClient for InProcessModel {
    async fn send_message(
        &self,
        _request: TurnRequest<'_>,
        on_event: &mut dyn FnMut(&StreamEvent),
    ) -> Result<TurnEnd, TurnError> {
        let left = self.left.get();
        if left == 0 {
            on_event(&StreamEvent::ContentDelta {
                text: "done".into(),
            });
            return Ok(TurnEnd {
                stop_reason: StopReason::EndTurn,
                usage: Usage::default(),
            });
        }
        self.left.set(left - 1);
        on_event(&StreamEvent::ToolUse {
            id: format!("toolu_{left}"),
            name: "list_dir".into(),
            input_json: r#"{"path":"."}"#.into(),
        });
        Ok(TurnEnd {
            stop_reason: StopReason::ToolUse,
            usage: Usage::default(),
        })
    }
}

/// The in-process tools: a fixed answer.
struct InProcessTools;

impl ToolExecutor for InProcessTools {
    async fn definitions(&self) -> Result<Vec<ToolDef>, String> {
        Ok(vec![ToolDef {
            name: "list_dir".into(),
            description: "list".into(),
            input_schema_json: "{}".into(),
        }])
    }
    async fn execute(&self, _call: &ToolInvocation, _session: &str) -> ToolResult {
        ToolResult::ok("(empty directory)")
    }
    async fn pre_hooks(&self, _h: &[HookConfig], _c: &ToolInvocation, _s: &str) -> PreHookReply {
        unreachable!("no hooks are configured")
    }
    async fn post_hooks(
        &self,
        _h: &[HookConfig],
        _c: &ToolInvocation,
        _s: &str,
        _r: &ToolResult,
    ) -> Vec<String> {
        unreachable!("no hooks are configured")
    }
}

struct Tree {
    sup: Supervisor,
    _run: hanzo_dev::startup::RunDir,
    _ws: tempfile::TempDir,
}

fn start_tree(rt: &tokio::runtime::Runtime) -> Tree {
    let ws = tempfile::tempdir().expect("workspace");
    let env = StartEnv {
        vars: std::env::vars()
            .filter(|(k, _)| k == "PATH" || k == "HOME")
            .collect(),
    };
    let abi = hanzo_sandbox::doctor::probe_kernel().landlock_abi;
    let (mut cfg, run) = supervisor_config(Some(ws.path().to_path_buf()), &env, abi).expect("cfg");
    cfg.exe = PathBuf::from(env!("CARGO_BIN_EXE_hanzo-dev"));
    let sup = rt.block_on(async {
        let sup = Supervisor::start(cfg).await.expect("start");
        sup.wait_ready().await.expect("ready");
        sup
    });
    Tree {
        sup,
        _run: run,
        _ws: ws,
    }
}

fn steps(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let tree = start_tree(&rt);
    let store_dir = tempfile::tempdir().expect("store dir");
    let policy = ScopedPolicy::default();
    let prompter = Unattended(ApprovalMode::Allow);

    let mut g = c.benchmark_group("step");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(20));
    g.bench_function("full", |b| {
        b.iter_custom(|iters| {
            per_step(
                iters,
                || async {
                    let jsonl = anthropic_cassette(&script(RUN_LEN - 1));
                    match tree
                        .sup
                        .model
                        .call(model::Request::LoadCassette { jsonl })
                        .await
                        .expect("cassette")
                    {
                        model::Response::CassetteLoaded { .. } => {}
                        other => panic!("{other:?}"),
                    }
                    let api = WorkerApi {
                        model: &tree.sup.model,
                        provider: ProviderConfig::Replay {
                            wire: WireFormat::AnthropicMessages,
                        },
                        model_name: "m".into(),
                        max_output_tokens: 1024,
                        retry: RetryPolicy::default(),
                        recorded: None,
                        deadlines: Deadlines::default(),
                        notices: None,
                    };
                    let tools = WorkerTools {
                        tools: &tree.sup.tools,
                        deadlines: Deadlines::default(),
                        hooks_time: Duration::ZERO,
                        mcp: None,
                        lsp: None,
                        builtin: Default::default(),
                    };
                    let mut store = RunStore::open(store_dir.path(), "local").expect("store");
                    let mut lp = AgentLoop {
                        api: &api,
                        tools: &tools,
                        prompter: &prompter,
                        policy: &policy,
                        store: &mut store,
                        events: &NoEvents,
                        config: config(RUN_LEN),
                        cancel: tokio::sync::watch::channel(false).1,
                    };
                    let t = Instant::now();
                    let r = lp.run(&spec()).await.expect("run");
                    let d = t.elapsed();
                    assert_eq!(u64::from(r.steps), RUN_LEN, "{}", r.outcome);
                    d
                },
                &rt,
            )
        })
    });
    g.bench_function("in-process", |b| {
        b.iter_custom(|iters| {
            per_step(
                iters,
                || async {
                    let api = InProcessModel {
                        left: Cell::new(RUN_LEN - 1),
                    };
                    let mut store = RunStore::open(store_dir.path(), "local").expect("store");
                    let mut lp = AgentLoop {
                        api: &api,
                        tools: &InProcessTools,
                        prompter: &prompter,
                        policy: &policy,
                        store: &mut store,
                        events: &NoEvents,
                        config: config(RUN_LEN),
                        cancel: tokio::sync::watch::channel(false).1,
                    };
                    let t = Instant::now();
                    let r = lp.run(&spec()).await.expect("run");
                    let d = t.elapsed();
                    assert_eq!(u64::from(r.steps), RUN_LEN);
                    d
                },
                &rt,
            )
        })
    });
    g.finish();

    let mut g = c.benchmark_group("parts");
    g.sample_size(20);
    g.bench_function("model-turn", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let api = WorkerApi {
                    model: &tree.sup.model,
                    provider: ProviderConfig::Replay {
                        wire: WireFormat::AnthropicMessages,
                    },
                    model_name: "m".into(),
                    max_output_tokens: 1024,
                    retry: RetryPolicy::default(),
                    recorded: None,
                    deadlines: Deadlines::default(),
                    notices: None,
                };
                let messages = vec![Message::user_text("list")];
                let mut total = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    // A cassette must fit one frame: load it in batches, outside the timing.
                    let batch = left.min(1000);
                    left -= batch;
                    let jsonl = anthropic_cassette(&script(batch));
                    tree.sup
                        .model
                        .call(model::Request::LoadCassette { jsonl })
                        .await
                        .expect("cassette");
                    let t = Instant::now();
                    for _ in 0..batch {
                        api.send_message(
                            TurnRequest {
                                system: "s",
                                messages: &messages,
                                tools: &[],
                            },
                            &mut |_| {},
                        )
                        .await
                        .expect("turn");
                    }
                    total += t.elapsed();
                }
                total
            })
        })
    });
    g.bench_function("tool-call", |b| {
        let tools = WorkerTools {
            tools: &tree.sup.tools,
            deadlines: Deadlines::default(),
            hooks_time: Duration::ZERO,
            mcp: None,
            lsp: None,
            builtin: Default::default(),
        };
        let call = ToolInvocation {
            id: "t".into(),
            name: "list_dir".into(),
            input_json: r#"{"path":"."}"#.into(),
        };
        b.iter(|| rt.block_on(tools.execute(&call, "s")))
    });
    g.finish();
    rt.block_on(tree.sup.shutdown());
}

/// VmRSS and PSS (kB) of `pid`.
fn memory_kb(pid: u32) -> (u64, u64) {
    let field = |text: &str, name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    (field(&status, "VmRSS:"), field(&rollup, "Pss:"))
}

fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            let p = t.path().join("children");
            if let Ok(s) = std::fs::read_to_string(p) {
                out.extend(s.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
            }
        }
    }
    out
}

/// Start `hanzo-dev workers` (the whole tree, idle), sum the memory of every process in it.
fn idle_memory() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let ws = tempfile::tempdir().expect("ws");
    let mut child = Command::new(env!("CARGO_BIN_EXE_hanzo-dev"))
        .arg("workers")
        .current_dir(ws.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("hanzo-dev workers");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = std::io::BufReader::new(stdout).lines();
    // `workers` prints one line per worker once all are up.
    for _ in 0..5 {
        lines.next();
    }
    std::thread::sleep(Duration::from_millis(500));
    let mut all = vec![child.id()];
    let mut i = 0;
    while i < all.len() {
        let c = children(all[i]);
        all.extend(c);
        i += 1;
    }
    let (mut rss, mut pss) = (0, 0);
    for p in &all {
        let (r, s) = memory_kb(*p);
        rss += r;
        pss += s;
    }
    println!(
        "idle tree: {} processes, RSS sum {:.1} MB, PSS sum {:.1} MB (target ≤ 40 MB)",
        all.len(),
        rss as f64 / 1024.0,
        pss as f64 / 1024.0
    );
    drop(child.stdin.take());
    let _ = child.wait();
}

criterion_group!(benches, steps);

fn main() {
    idle_memory();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
