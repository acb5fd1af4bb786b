//! The local agents API (`hanzo-dev serve`) on this machine, over loopback TCP
//! (`--listen 127.0.0.1:0`), with runs replayed from a cassette (real `hanzo-dev run` children,
//! workers, sandbox, store). Each run reads a file with `cat gate` and then answers; the gate is
//! a plain file except while the live latency is measured, when it is a FIFO the bench holds.
//!
//! - `serve/run-start`: `POST /v1/agents/code/run` until the 202 with the run id (the child has
//!   started its workers and recorded the run). Each run is then followed to its end, untimed,
//!   so runs never pile up. Runs started per second = 1 / this.
//! - `serve/run-whole`: the same, plus following the SSE stream to the run's end.
//! - `events/sse-finished-run` vs `events/store-direct`: every event of one finished run over
//!   SSE, against reading the same rows from the store directly (an open connection; and
//!   `store-open-and-read`, opening it first).
//!
//! Printed beside criterion's output, in the same run:
//! - **burst**: 4 runs asked for at once, until the last 202: runs started per second when
//!   requests overlap.
//! - **live latency**: for the events recorded after the gate opens (every one of them reaches
//!   both readers live), recorded → received over SSE, and recorded → seen by a reader polling
//!   the store directly every 0.5 ms (`events_after` on its own connection) — both on the
//!   millisecond clock of `recorded_ms`, so each figure is a floor difference whose mean is
//!   unbiased — and SSE's lag behind the direct reader for the same event, on this process's
//!   monotonic clock (µs).
//!
//! The bench prints `/proc/loadavg` between its parts. Figures, with their load, are in
//! ARCHITECTURE.md (the agents API's "Cost").

use criterion::{criterion_group, criterion_main, Criterion};
use hanzo_model::script::{anthropic_cassette, ScriptTurn};
use hanzo_store::{RunId, RunStore};
use serde_json::json;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const EXE: &str = env!("CARGO_BIN_EXE_hanzo-dev");
/// Runs asked for at once in the burst.
const BURST: usize = 4;
/// Runs whose live events are measured.
const LIVE_RUNS: usize = 20;
/// The direct reader's poll interval.
const POLL: Duration = Duration::from_micros(500);

struct Server {
    child: Child,
    addr: String,
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

fn now_ms() -> i64 {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis();
    i64::try_from(ms).expect("ms")
}

impl Server {
    fn start() -> Server {
        let root = tempfile::tempdir().expect("tempdir");
        for d in ["home", "data", "config", "ws", "tmp"] {
            std::fs::create_dir_all(root.path().join(d)).expect("mkdir");
        }
        std::fs::write(root.path().join("ws/gate"), "open\n").expect("gate");
        let cassette = root.path().join("model.jsonl");
        let turns = [
            ScriptTurn::tool("t1", "bash", json!({"command": "cat gate"})),
            ScriptTurn::text("ok"),
        ];
        std::fs::write(&cassette, anthropic_cassette(&turns)).expect("cassette");
        let out = command(root.path(), &["serve", "token", "create", "--org", "bench"])
            .output()
            .expect("token");
        let token = String::from_utf8(out.stdout)
            .expect("utf8")
            .trim()
            .to_string();
        let mut child = command(
            root.path(),
            &[
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--approval",
                "allow",
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
        let addr = first
            .trim()
            .strip_prefix("hanzo-dev serve: listening on http://")
            .unwrap_or_else(|| panic!("{first}"))
            .to_string();
        // Drain the log so the server never blocks on it.
        std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
        Server {
            child,
            addr,
            token,
            root,
        }
    }

    fn send(&self, req: &str) -> TcpStream {
        let mut s = TcpStream::connect(&self.addr).expect("connect");
        s.set_nodelay(true).expect("nodelay");
        s.write_all(req.as_bytes()).expect("write");
        s
    }

    fn start_run(&self) -> i64 {
        let body = json!({"task": "bench", "approval": "allow"}).to_string();
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

    fn events_request(&self, run: i64) -> String {
        format!(
            "GET /v1/runs/{run}/events HTTP/1.1\r\nHost: l\r\nConnection: close\r\n\
             Authorization: Bearer {}\r\n\r\n",
            self.token
        )
    }

    /// Follow a run's events to the end; returns the event row ids.
    fn follow(&self, run: i64) -> Vec<i64> {
        let mut got = Vec::new();
        for line in BufReader::new(self.send(&self.events_request(run))).lines() {
            let line = line.expect("line");
            if let Some(id) = line.strip_prefix("id: ") {
                got.push(id.parse().expect("id"));
            }
        }
        got
    }

    fn store(&self) -> RunStore {
        RunStore::open(&self.root.path().join("data/hanzo"), "bench").expect("store")
    }

    fn gate(&self) -> PathBuf {
        self.root.path().join("ws/gate")
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

/// When one reader got one event: wall clock (ms, to compare with `recorded_ms`) and monotonic.
#[derive(Clone, Copy)]
struct Seen {
    id: i64,
    ms: i64,
    at: Instant,
}

fn seen(id: i64) -> Seen {
    Seen {
        id,
        ms: now_ms(),
        at: Instant::now(),
    }
}

/// An SSE reader of `run`: sends each event as it arrives.
fn sse_reader(s: &Server, run: i64, tx: mpsc::Sender<Seen>) -> std::thread::JoinHandle<()> {
    let stream = s.send(&s.events_request(run));
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { return };
            if let Some(id) = line.strip_prefix("id: ") {
                let _ = tx.send(seen(id.parse().expect("id")));
            }
        }
    })
}

/// A reader polling the store directly until `stop`.
fn store_reader(
    s: &Server,
    run: i64,
    tx: mpsc::Sender<Seen>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let store = s.store();
    std::thread::spawn(move || {
        let mut after = 0;
        loop {
            let done = stop.load(std::sync::atomic::Ordering::SeqCst);
            for e in store.events_after(RunId(run), after, 256).expect("read") {
                let _ = tx.send(seen(e.id));
                after = e.id;
            }
            if done {
                return;
            }
            std::thread::sleep(POLL);
        }
    })
}

fn stats(mut v: Vec<f64>) -> String {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let mean = v.iter().sum::<f64>() / n as f64;
    format!(
        "n {n}, mean {mean:.2}, median {:.2}, p95 {:.2}, max {:.2}",
        v[n / 2],
        v[n * 95 / 100],
        v[n - 1]
    )
}

/// Live latency: each run blocks on the gate (a FIFO) after its tool call; both readers attach
/// and read the backlog; then the gate opens and every later event is live for both.
fn live_latency(s: &Server) {
    let gate = s.gate();
    let (mut sse_ms, mut store_ms, mut lag_us) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..LIVE_RUNS {
        std::fs::remove_file(&gate).expect("rm gate");
        nix::unistd::mkfifo(&gate, nix::sys::stat::Mode::from_bits_truncate(0o600))
            .expect("mkfifo");
        let run = s.start_run();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (sse_tx, sse_rx) = mpsc::channel();
        let (db_tx, db_rx) = mpsc::channel();
        let sse = sse_reader(s, run, sse_tx);
        let db = store_reader(s, run, db_tx, stop.clone());
        // Both have the tool call (the run now waits on the gate).
        let tool_call = |rx: &mpsc::Receiver<Seen>, seen: &mut Vec<Seen>| loop {
            let e = rx.recv().expect("an event before the gate");
            seen.push(e);
            let store = s.store();
            let rows = store.events_after(RunId(run), e.id - 1, 1).expect("row");
            if rows.first().is_some_and(|r| r.kind == "tool_call") {
                return e.id;
            }
        };
        let (mut sse_seen, mut db_seen) = (Vec::new(), Vec::new());
        let before = tool_call(&sse_rx, &mut sse_seen);
        assert_eq!(tool_call(&db_rx, &mut db_seen), before);
        let mut w = std::fs::OpenOptions::new()
            .write(true)
            .open(&gate)
            .expect("open gate");
        w.write_all(b"open\n").expect("gate");
        drop(w);
        sse.join().expect("sse reader");
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        db.join().expect("store reader");
        let rows = s.store().load_run(RunId(run)).expect("run").events;
        let live = |rx: mpsc::Receiver<Seen>| -> Vec<Seen> {
            rx.try_iter().filter(|e| e.id > before).collect()
        };
        let (sse_live, db_live) = (live(sse_rx), live(db_rx));
        assert_eq!(sse_live.len(), db_live.len());
        assert!(!sse_live.is_empty());
        for (a, b) in sse_live.iter().zip(&db_live) {
            assert_eq!(a.id, b.id);
            let row = rows.iter().find(|r| r.id == a.id).expect("row");
            let recorded = i64::try_from(row.recorded_ms).expect("ms");
            sse_ms.push((a.ms - recorded) as f64);
            store_ms.push((b.ms - recorded) as f64);
            let lag = if a.at >= b.at {
                a.at.duration_since(b.at).as_secs_f64()
            } else {
                -b.at.duration_since(a.at).as_secs_f64()
            };
            lag_us.push(lag * 1e6);
        }
    }
    std::fs::remove_file(&gate).expect("rm gate");
    std::fs::write(&gate, "open\n").expect("gate");
    eprintln!("live, recorded → received over SSE (ms): {}", stats(sse_ms));
    eprintln!(
        "live, recorded → seen polling the store every {} µs (ms): {}",
        POLL.as_micros(),
        stats(store_ms)
    );
    eprintln!(
        "live, SSE behind the direct reader, same event (µs): {}",
        stats(lag_us)
    );
}

/// `BURST` runs asked for at once: how long until the last 202.
fn burst(s: &Server) {
    for round in 0..3 {
        let t = Instant::now();
        let runs: Vec<i64> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..BURST).map(|_| sc.spawn(|| s.start_run())).collect();
            hs.into_iter().map(|h| h.join().expect("start")).collect()
        });
        let took = t.elapsed();
        for r in runs {
            s.follow(r);
        }
        eprintln!(
            "burst {round}: {BURST} runs started in {:.1} ms: {:.1} runs/s",
            took.as_secs_f64() * 1e3,
            BURST as f64 / took.as_secs_f64()
        );
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn bench(c: &mut Criterion) {
    let s = Server::start();
    eprintln!("load at the start: {}", loadavg());
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
    eprintln!("load: {}", loadavg());
    burst(&s);
    eprintln!("load: {}", loadavg());
    live_latency(&s);
    eprintln!("load: {}", loadavg());

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
    eprintln!("load at the end: {}", loadavg());
}

criterion_group!(benches, bench);
criterion_main!(benches);
