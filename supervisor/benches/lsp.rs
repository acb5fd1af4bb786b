//! Time from a file edit to fresh diagnostics through the whole bridge as a run uses it — the
//! supervisor's request over IPC to the lsp worker (`FileChanged`, then `Diagnostics`), the
//! worker's client, pyright started by the worker's launcher under its sandbox — against pyright
//! driven directly by hand-written framing in this file, both in the same run, each with its own
//! pyright. Every iteration alternates a file with and without a type error and checks the answer.
//! Besides criterion's figures, a paired run (the two sides alternating) prints the medians and
//! their ratio (`HANZO_LSP_BENCH_ROUNDS`, default 60).

// The tests' helper for putting the servers in a workspace (it needs nothing else of theirs).
#[path = "../tests/common/servers.rs"]
mod servers;

use criterion::{criterion_group, criterion_main, Criterion};
use hanzo_dev::secrets::StartEnv;
use hanzo_dev::startup::supervisor_config;
use hanzo_dev::tree::Supervisor;
use hanzo_ipc::roles::lsp::{self, Response, Severity};
use hanzo_ipc::Role;
use hanzo_lsp::client::client_capabilities;
use serde_json::{json, Value};
use servers::link_tree;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

const BAD: &str = "def f(x: int) -> int:\n    return x\n\n\ny: int = f(\"no\")\n";
const GOOD: &str = "def f(x: int) -> int:\n    return x\n\n\ny: int = f(3)\n";

fn node_modules() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../test-deps/lsp/node_modules");
    assert!(
        dir.join(".bin/pyright-langserver").exists(),
        "pyright is missing from test-deps/lsp: run ./scripts/setup.sh"
    );
    dir
}

fn bin_dir() -> PathBuf {
    node_modules().join(".bin")
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

/// Ours: the supervisor and its lsp worker, as in a run.
struct Bridge {
    sup: Supervisor,
    _run: hanzo_dev::startup::RunDir,
    file: PathBuf,
}

impl Bridge {
    async fn start(root: &Path) -> Self {
        link_tree(&node_modules(), &root.join("node_modules")).expect("install pyright");
        let env = StartEnv {
            vars: std::env::vars()
                .filter(|(k, _)| k == "PATH" || k == "HOME")
                .collect(),
        };
        let abi = hanzo_sandbox::doctor::probe_kernel().landlock_abi;
        let (mut cfg, run) =
            supervisor_config(Some(root.to_path_buf()), &env, abi).expect("config");
        cfg.exe = PathBuf::from(env!("CARGO_BIN_EXE_hanzo-dev"));
        cfg.roles = Some(vec![Role::Lsp]);
        let sup = Supervisor::start(cfg).await.expect("start");
        sup.wait_ready().await.expect("ready");
        let servers = json!({"pyright": {"command": "node_modules/.bin/pyright-langserver"}});
        let r = sup
            .lsp
            .call(lsp::Request::Configure {
                servers_json: servers.to_string(),
            })
            .await
            .expect("configure");
        assert_eq!(r, Response::Done);
        let file = root.join("app.py");
        std::fs::write(&file, BAD).expect("write");
        let b = Bridge {
            sup,
            _run: run,
            file,
        };
        b.edit(0).await;
        b
    }

    async fn edit(&self, i: u64) {
        std::fs::write(&self.file, content(i)).expect("write");
        let path = "app.py".to_string();
        let long = Duration::from_secs(120);
        let r = self
            .sup
            .lsp
            .call_within(lsp::Request::FileChanged { path: path.clone() }, long)
            .await
            .expect("file changed");
        assert_eq!(r, Response::Done);
        let r = self
            .sup
            .lsp
            .call_within(lsp::Request::Diagnostics { paths: vec![path] }, long)
            .await
            .expect("diagnostics");
        let Response::Diagnostics(mut files) = r else {
            panic!("unexpected reply {r:?}");
        };
        let d = files.pop().expect("one file").expect("diagnostics");
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

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let ours_ws = tempfile::tempdir().expect("tmp");
    let direct_ws = tempfile::tempdir().expect("tmp");
    let ours_root = ours_ws.path().canonicalize().expect("root");
    let bridge = rt.block_on(Bridge::start(&ours_root));
    let mut direct = rt.block_on(Direct::start(direct_ws.path()));
    rt.block_on(async {
        for i in 1..6 {
            bridge.edit(i).await;
            direct.edit(i).await;
        }
    });
    let mut group = c.benchmark_group("edit_to_fresh_diagnostics_via_worker");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20));
    let mut n = 0u64;
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
    group.bench_function("pyright_through_the_lsp_worker", |b| {
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
        "paired edit→fresh diagnostics over {rounds} rounds: direct median {:.1} ms, through the lsp worker median {:.1} ms, ratio {:.3}",
        t.as_secs_f64() * 1e3,
        o.as_secs_f64() * 1e3,
        o.as_secs_f64() / t.as_secs_f64()
    );
    rt.block_on(bridge.sup.shutdown());
}

criterion_group!(benches, bench);
criterion_main!(benches);
