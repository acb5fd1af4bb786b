//! `tools/call` round trip against server-everything over stdio: through `hanzo_mcp::McpClient`,
//! and the same exchange written by hand on the raw pipes of a second instance, in the same run.
//! (The lead adds the supervisor → worker hop later and compares with the ≤ 0.3 ms target.)
//!
//! `cargo bench -p hanzo-mcp` (needs `./scripts/setup.sh` for the server).

#[path = "../tests/support/mod.rs"]
mod support;

use criterion::{criterion_group, criterion_main, Criterion};
use hanzo_mcp::{CallOptions, CallOutcome, ClientOptions, McpClient};
use serde_json::{json, Value};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

struct RawServer {
    _child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    next_id: i64,
}

impl RawServer {
    async fn start() -> RawServer {
        let spec = support::everything_stdio();
        let mut child = tokio::process::Command::new(&spec.command)
            .args(&spec.args)
            .env_clear()
            .envs(spec.env.iter().cloned())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start server-everything");
        let stdin = child.stdin.take().expect("piped");
        let lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        let mut s = RawServer {
            _child: child,
            stdin,
            lines,
            next_id: 1,
        };
        s.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "bench", "version": "0"}}),
        )
        .await;
        s.write(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        s
    }

    async fn write(&mut self, v: &Value) {
        let mut line = serde_json::to_vec(v).expect("json");
        line.push(b'\n');
        self.stdin.write_all(&line).await.expect("write");
        self.stdin.flush().await.expect("flush");
    }

    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.write(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        loop {
            let line = self.lines.next_line().await.expect("read").expect("open");
            let v: Value = serde_json::from_str(&line).expect("json");
            if v.get("method").is_some() && v.get("id").is_some() {
                // The server's own request (roots/list): answered as the client would.
                let answer = json!({"jsonrpc": "2.0", "id": v["id"], "result": {"roots": []}});
                self.write(&answer).await;
                continue;
            }
            if v["id"] == id && v.get("method").is_none() {
                return v;
            }
        }
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client = rt.block_on(async {
        McpClient::connect_stdio(
            "everything",
            &support::everything_stdio(),
            &support::PlainSpawner,
            ClientOptions::default(),
        )
        .await
        .expect("connect")
    });
    let raw = tokio::sync::Mutex::new(rt.block_on(RawServer::start()));
    let args = json!({"message": "hello"});

    // The machine is shared, so its load drifts: each timed exchange is followed by an untimed
    // one of the other kind, so both series see the same conditions.
    let via_client = |rt: &tokio::runtime::Runtime| {
        rt.block_on(async {
            match client
                .call_tool("echo", args.clone(), CallOptions::default())
                .await
            {
                Ok(CallOutcome::Allowed(r)) => r,
                other => panic!("{other:?}"),
            }
        })
    };
    let via_pipes = |rt: &tokio::runtime::Runtime| {
        rt.block_on(async {
            let mut raw = raw.lock().await;
            let v = raw
                .request("tools/call", json!({"name": "echo", "arguments": args}))
                .await;
            assert!(v.get("result").is_some());
            v
        })
    };
    let mut g = c.benchmark_group("tools_call_stdio");
    g.bench_function("hanzo_mcp_client", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = std::time::Instant::now();
                std::hint::black_box(via_client(&rt));
                total += t.elapsed();
                via_pipes(&rt);
            }
            total
        })
    });
    g.bench_function("raw_pipes", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = std::time::Instant::now();
                std::hint::black_box(via_pipes(&rt));
                total += t.elapsed();
                via_client(&rt);
            }
            total
        })
    });
    g.finish();
    rt.block_on(client.shutdown());
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(60)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    targets = bench
}
criterion_main!(benches);
