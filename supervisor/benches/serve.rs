//! The local agents API (`hanzo-dev serve`) on this machine, over its unix socket, with runs
//! replayed from a one-turn cassette (real `hanzo-dev run` children, workers, sandbox, store):
//!
//! - `serve/run-start`: `POST /v1/agents/code/run` until the 202 with the run id (the child has
//!   started its workers and recorded the run). Each run is then followed to its end, untimed,
//!   so runs never pile up.
//! - `serve/run-whole`: the same, plus following the SSE stream to the run's end.
//! - `events/sse-finished-run` vs `events/store-direct`: every event of one finished run over
//!   SSE, against reading the same rows from the store directly.
//!
//! Also prints the live event-stream latency: for events received while a run is live, the
//! client's receive time minus the row's `recorded_ms` (millisecond clock, so a floor of 0–1 ms).

use criterion::{criterion_group, criterion_main, Criterion};
use hanzo_model::script::{anthropic_cassette, ScriptTurn};
use hanzo_store::{RunId, RunStore};
use serde_json::json;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const EXE: &str = env!("CARGO_BIN_EXE_hanzo-dev");

struct Server {
    child: Child,
    sock: PathBuf,
    token: String,
    root: tempfile::TempDir,
}

fn command(root: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(EXE);
    c.args(args)
        .current_dir(root.join("ws"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", root.join("home"))
        .env("XDG_DATA_HOME", root.join("data"))
        .env("XDG_CONFIG_HOME", root.join("config"))
        .env("TMPDIR", root.join("tmp"))
        .stdin(Stdio::null());
    c
}

impl Server {
    fn start() -> Server {
        let root = tempfile::tempdir().expect("tempdir");
        for d in ["home", "data", "config", "ws", "tmp"] {
            std::fs::create_dir_all(root.path().join(d)).expect("mkdir");
        }
        let cassette = root.path().join("model.jsonl");
        std::fs::write(&cassette, anthropic_cassette(&[ScriptTurn::text("ok")])).expect("cassette");
        let out = command(root.path(), &["serve", "token", "create", "--org", "bench"])
            .output()
            .expect("token");
        let token = String::from_utf8(out.stdout)
            .expect("utf8")
            .trim()
            .to_string();
        let sock = root.path().join("tmp/api.sock");
        let listen = format!("unix:{}", sock.display());
        let mut child = command(
            root.path(),
            &[
                "serve",
                "--listen",
                &listen,
                "--replay",
                &cassette.display().to_string(),
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("serve");
        let mut err = BufReader::new(child.stderr.take().expect("stderr"));
        let mut first = String::new();
        err.read_line(&mut first).expect("listening line");
        assert!(first.contains("listening on"), "{first}");
        // Drain the log so the server never blocks on it.
        std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
        Server {
            child,
            sock,
            token,
            root,
        }
    }

    fn send(&self, req: &str) -> UnixStream {
        let mut s = UnixStream::connect(&self.sock).expect("connect");
        s.write_all(req.as_bytes()).expect("write");
        s
    }

    fn start_run(&self) -> i64 {
        let body = json!({"task": "bench"}).to_string();
        let req = format!(
            "POST /v1/agents/code/run HTTP/1.1\r\nHost: l\r\nConnection: close\r\n\
             Authorization: Bearer {}\r\nContent-Length: {}\r\n\r\n{body}",
            self.token,
            body.len()
        );
        let mut out = String::new();
        self.send(&req).read_to_string(&mut out).expect("read");
        assert!(out.starts_with("HTTP/1.1 202"), "{out}");
        let json = &out[out.find('{').expect("body")..];
        let v: serde_json::Value = serde_json::from_str(json).expect("json");
        v["run_id"].as_i64().expect("run id")
    }

    /// Follow a run's events to the end; returns (receive time, event row id) for each.
    fn follow(&self, run: i64) -> Vec<(std::time::SystemTime, i64)> {
        let req = format!(
            "GET /v1/runs/{run}/events HTTP/1.1\r\nHost: l\r\nConnection: close\r\n\
             Authorization: Bearer {}\r\n\r\n",
            self.token
        );
        let mut got = Vec::new();
        for line in BufReader::new(self.send(&req)).lines() {
            let line = line.expect("line");
            if let Some(id) = line.strip_prefix("id: ") {
                got.push((std::time::SystemTime::now(), id.parse().expect("id")));
            }
        }
        got
    }

    fn store(&self) -> RunStore {
        RunStore::open(&self.root.path().join("data/hanzo"), "bench").expect("store")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let _ = self.child.wait();
    }
}

fn live_latency(s: &Server) {
    let mut lat = Vec::new();
    for _ in 0..20 {
        let run = s.start_run();
        let got = s.follow(run);
        let rows = s.store().load_run(RunId(run)).expect("run").events;
        for (at, id) in got {
            let row = rows.iter().find(|r| r.id == id).expect("row");
            let at_ms = at
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_millis();
            lat.push(
                i64::try_from(at_ms).expect("ms") - i64::try_from(row.recorded_ms).expect("ms"),
            );
        }
    }
    lat.sort_unstable();
    let mean = lat.iter().sum::<i64>() as f64 / lat.len() as f64;
    eprintln!(
        "live event latency (recorded → received, ms clock) over {} events: mean {mean:.2} ms, \
         median {} ms, p95 {} ms, max {} ms",
        lat.len(),
        lat[lat.len() / 2],
        lat[lat.len() * 95 / 100],
        lat[lat.len() - 1]
    );
}

fn bench(c: &mut Criterion) {
    let s = Server::start();
    let mut g = c.benchmark_group("serve");
    g.sample_size(20).measurement_time(Duration::from_secs(20));
    g.bench_function("run-start", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                let run = s.start_run();
                total += t.elapsed();
                s.follow(run);
            }
            total
        })
    });
    g.bench_function("run-whole", |b| {
        b.iter(|| {
            let run = s.start_run();
            s.follow(run)
        })
    });
    g.finish();
    live_latency(&s);

    let run = s.start_run();
    let n = s.follow(run).len();
    eprintln!("one finished run has {n} event rows");
    let mut g = c.benchmark_group("events");
    g.bench_function("sse-finished-run", |b| b.iter(|| s.follow(run)));
    let store = s.store();
    g.bench_function("store-direct", |b| {
        b.iter(|| store.events_after(RunId(run), 0, 256).expect("events"))
    });
    g.bench_function("store-open-and-read", |b| {
        b.iter(|| s.store().events_after(RunId(run), 0, 256).expect("events"))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
