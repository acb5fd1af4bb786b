//! Time from a file edit to fresh diagnostics: through hanzo-lsp (`changed_diagnostics`, what the
//! lsp worker runs for the agent loop after an edit) against pyright driven directly by
//! hand-written framing in this file (`didChange` then a `textDocument/diagnostic` pull, which is
//! what pyright asks for when a client offers pull diagnostics), both on the same machine in the
//! same run, each with its own pyright.
//!
//! Every iteration writes the file alternately with and without a type error and checks that the
//! answer matches, so neither side can win by answering stale. Besides criterion's figures, a
//! paired run (the two sides alternating, one edit each, so load on a shared machine hits both
//! alike) prints the medians and their ratio.

use criterion::{criterion_group, criterion_main, Criterion};
use hanzo_lsp::{
    client::client_capabilities, LanguageServers, LanguageServersConfig, ServerEvent, Severity,
    TokioSpawner,
};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

const BAD: &str = "def f(x: int) -> int:\n    return x\n\n\ny: int = f(\"no\")\n";
const GOOD: &str = "def f(x: int) -> int:\n    return x\n\n\ny: int = f(3)\n";

fn bin_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../test-deps/lsp/node_modules/.bin");
    assert!(
        dir.join("pyright-langserver").exists(),
        "pyright is missing from test-deps/lsp: run ./scripts/setup.sh"
    );
    dir
}

fn errors_expected(i: u64) -> usize {
    usize::from(i.is_multiple_of(2))
}

fn content(i: u64) -> &'static str {
    if errors_expected(i) == 1 {
        BAD
    } else {
        GOOD
    }
}

/// Ours: the client as the lsp worker uses it.
struct Bridge {
    servers: LanguageServers,
    file: PathBuf,
}

impl Bridge {
    async fn start(root: &Path) -> Self {
        let mut config = LanguageServersConfig::new(root);
        config.search_path.insert(0, bin_dir());
        let events: hanzo_lsp::EventSink = Arc::new(|e: ServerEvent| {
            if let ServerEvent::Exited { detail, .. } = e {
                panic!("pyright exited during the benchmark: {detail}");
            }
        });
        let servers =
            LanguageServers::new(config, Arc::new(TokioSpawner::new()), events).expect("servers");
        let file = root.join("app.py");
        std::fs::write(&file, BAD).expect("write");
        let b = Bridge { servers, file };
        b.edit(0).await;
        b
    }

    async fn edit(&self, i: u64) {
        std::fs::write(&self.file, content(i)).expect("write");
        let d = self
            .servers
            .changed_diagnostics(std::slice::from_ref(&self.file))
            .await
            .pop()
            .expect("one answer")
            .1
            .expect("diagnostics");
        let errors = d
            .diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .count();
        assert_eq!(errors, errors_expected(i), "{d:?}");
    }
}

/// The baseline: pyright over its pipes, with nothing but what the exchange needs.
struct Direct {
    _child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    uri: String,
    file: PathBuf,
    version: i64,
    next_id: i64,
    identifier: Option<String>,
}

impl Direct {
    async fn start(root: &Path) -> Self {
        let mut child = tokio::process::Command::new(bin_dir().join("pyright-langserver"))
            .arg("--stdio")
            .current_dir(root)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn pyright");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let root_uri = format!("file://{}", root.display());
        let file = root.join("app.py");
        std::fs::write(&file, BAD).expect("write");
        let mut d = Direct {
            _child: child,
            stdin,
            stdout,
            uri: format!("{root_uri}/app.py"),
            file,
            version: 1,
            next_id: 1,
            identifier: None,
        };
        let init = json!({"processId": null, "rootUri": root_uri, "workspaceFolders": [{"uri": root_uri, "name": "ws"}],
                          "capabilities": client_capabilities()});
        d.call("initialize", init).await;
        d.send(&json!({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
            .await;
        let open = json!({"textDocument": {"uri": d.uri, "languageId": "python", "version": 1, "text": BAD}});
        d.send(&json!({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": open}))
            .await;
        while d.identifier.is_none() {
            d.read_one(None).await;
        }
        d
    }

    async fn send(&mut self, v: &Value) {
        let body = serde_json::to_vec(v).expect("json");
        let mut frame = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
        frame.extend_from_slice(&body);
        self.stdin
            .write_all(&frame)
            .await
            .expect("write to pyright");
        self.stdin.flush().await.expect("flush");
    }

    /// Reads one message; answers a server request; returns the result if it is the answer to `id`.
    async fn read_one(&mut self, id: Option<i64>) -> Option<Value> {
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            self.stdout.read_line(&mut line).await.expect("read header");
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some(v) = line.strip_prefix("Content-Length: ") {
                length = v.parse().expect("length");
            }
        }
        let mut body = vec![0u8; length];
        self.stdout.read_exact(&mut body).await.expect("read body");
        let msg: Value = serde_json::from_slice(&body).expect("json");
        match (msg.get("id"), msg.get("method").and_then(Value::as_str)) {
            (Some(req), Some(method)) => {
                let result = match method {
                    "workspace/configuration" => {
                        let n = msg["params"]["items"].as_array().map_or(0, Vec::len);
                        Value::Array(vec![Value::Null; n])
                    }
                    "client/registerCapability" => {
                        for r in msg["params"]["registrations"]
                            .as_array()
                            .into_iter()
                            .flatten()
                        {
                            if r["method"] == "textDocument/diagnostic" {
                                self.identifier = r["registerOptions"]["identifier"]
                                    .as_str()
                                    .map(str::to_string);
                            }
                        }
                        Value::Null
                    }
                    _ => Value::Null,
                };
                let reply = json!({"jsonrpc": "2.0", "id": req, "result": result});
                self.send(&reply).await;
                None
            }
            (Some(got), None) if id.is_some_and(|id| got.as_i64() == Some(id)) => {
                Some(msg["result"].clone())
            }
            _ => None,
        }
    }

    async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        loop {
            if let Some(result) = self.read_one(Some(id)).await {
                return result;
            }
        }
    }

    async fn edit(&mut self, i: u64) {
        let text = content(i);
        std::fs::write(&self.file, text).expect("write");
        self.version += 1;
        let change = json!({"textDocument": {"uri": self.uri, "version": self.version}, "contentChanges": [{"text": text}]});
        self.send(&json!({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": change}))
            .await;
        let params = json!({"textDocument": {"uri": self.uri}, "identifier": self.identifier});
        let report = self.call("textDocument/diagnostic", params).await;
        let errors = report["items"]
            .as_array()
            .expect("a full report")
            .iter()
            .filter(|d| d["severity"] == 1)
            .count();
        assert_eq!(errors, errors_expected(i), "{report}");
    }
}

fn runtime() -> tokio::runtime::Runtime {
    // The lsp worker runs a current-thread runtime.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn bench(c: &mut Criterion) {
    let rt = runtime();
    let ours_ws = tempfile::tempdir().expect("tmp");
    let direct_ws = tempfile::tempdir().expect("tmp");
    let bridge = rt.block_on(Bridge::start(ours_ws.path()));
    let mut direct = rt.block_on(Direct::start(direct_ws.path()));
    // Warm both servers past their first analyses.
    rt.block_on(async {
        for i in 1..6 {
            bridge.edit(i).await;
            direct.edit(i).await;
        }
    });

    let mut group = c.benchmark_group("edit_to_fresh_diagnostics");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20));
    // Past the warm-up's last edit, so the first measured one changes the file.
    let mut n = 5u64;
    group.bench_function("pyright_direct", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    n += 1;
                    direct.edit(n).await;
                }
                start.elapsed()
            })
        })
    });
    group.bench_function("pyright_through_hanzo_lsp", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    n += 1;
                    bridge.edit(n).await;
                }
                start.elapsed()
            })
        })
    });
    group.finish();

    // Paired: one edit each per round, the order swapped every round (so neither side always
    // runs on the other's heels), so the machine's load falls on both alike.
    let rounds: u64 = std::env::var("HANZO_LSP_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    rt.block_on(async {
        for round in 0..rounds {
            n += 1;
            for side in [round % 2, 1 - round % 2] {
                let t = Instant::now();
                if side == 0 {
                    direct.edit(n).await;
                    theirs.push(t.elapsed());
                } else {
                    bridge.edit(n).await;
                    ours.push(t.elapsed());
                }
            }
        }
    });
    let (o, t) = (median(ours), median(theirs));
    println!(
        "paired edit→fresh diagnostics over {rounds} rounds: direct median {:.1} ms, through hanzo-lsp median {:.1} ms, ratio {:.3}",
        t.as_secs_f64() * 1e3,
        o.as_secs_f64() * 1e3,
        o.as_secs_f64() / t.as_secs_f64()
    );
    rt.block_on(bridge.servers.shutdown());
}

criterion_group!(benches, bench);
criterion_main!(benches);
