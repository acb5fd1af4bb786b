//! Supervisor ↔ worker round trip against raw socketpair round trips measured in the same run (to
//! another process with blocking I/O, to another process with tokio on both ends, to a thread,
//! within one tokio runtime), and the cold start of the whole tree (spawn, confine, handshake,
//! attest all five workers).

use criterion::{criterion_group, Criterion};
use hanzo_dev::secrets::StartEnv;
use hanzo_dev::startup::supervisor_config;
use hanzo_dev::tree::Supervisor;
use hanzo_ipc::roles::tools::{Request, Response};
use hanzo_ipc::roles::{CommonRequest, CommonResponse};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const PAYLOAD: usize = 64;

fn config() -> (
    hanzo_dev::tree::SupervisorConfig,
    hanzo_dev::startup::RunDir,
    tempfile::TempDir,
) {
    let ws = tempfile::tempdir().expect("workspace");
    let env = StartEnv {
        vars: std::env::vars()
            .filter(|(k, _)| k == "PATH" || k == "HOME")
            .collect(),
    };
    let abi = hanzo_sandbox::doctor::probe_kernel().landlock_abi;
    let (mut cfg, run) = supervisor_config(Some(ws.path().to_path_buf()), &env, abi).expect("cfg");
    cfg.exe = PathBuf::from(env!("CARGO_BIN_EXE_hanzo-dev"));
    (cfg, run, ws)
}

/// Set in the environment of the raw echo peer process (`"tokio"`: its tokio flavour).
const ECHO_PEER_ENV: &str = "HANZO_BENCH_ECHO_PEER";

/// The raw peer: echo fixed-size messages on the inherited socket (fd 3) until EOF, with blocking
/// reads and writes, or (`tokio`) on a current-thread tokio runtime as a worker serves its channel.
fn echo_peer(tokio_flavour: bool) {
    if tokio_flavour {
        return echo_peer_tokio();
    }
    use std::os::fd::FromRawFd;
    // SAFETY: the parent passed a socket as fd 3 and nothing else in this process owns it.
    #[allow(unsafe_code)]
    let mut s = unsafe { UnixStream::from_raw_fd(3) };
    let mut buf = [0u8; PAYLOAD + 5];
    while s.read_exact(&mut buf).is_ok() {
        if s.write_all(&buf).is_err() {
            break;
        }
    }
}

fn echo_peer_tokio() {
    use std::os::fd::FromRawFd;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // SAFETY: the parent passed a socket as fd 3 and nothing else in this process owns it.
    #[allow(unsafe_code)]
    let s = unsafe { UnixStream::from_raw_fd(3) };
    s.set_nonblocking(true).expect("non-blocking");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let mut s = tokio::net::UnixStream::from_std(s).expect("tokio socket");
        let mut buf = [0u8; PAYLOAD + 5];
        while s.read_exact(&mut buf).await.is_ok() {
            if s.write_all(&buf).await.is_err() {
                break;
            }
        }
    });
}

/// The echo peer process on the other end of a new socketpair (fd 3 in it); our end.
fn spawn_echo_peer(flavour: &str) -> (UnixStream, std::process::Child) {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let (a, b) = UnixStream::pair().expect("pair");
    let fd = b.as_raw_fd();
    let mut cmd = std::process::Command::new(std::env::current_exe().expect("exe"));
    cmd.env(ECHO_PEER_ENV, flavour);
    // SAFETY: dup2 is async-signal-safe; it only changes this child's fd table.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(fd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().expect("echo peer");
    drop(b);
    (a, child)
}

/// Baseline 0b: the same process boundary with tokio on both ends (this runtime, and a
/// current-thread runtime in the peer process, as a worker has) — the floor for any request path
/// that waits on epoll rather than in a blocking read, without framing, typing or a sandbox.
fn raw_tokio_process_round_trips(rt: &tokio::runtime::Runtime, iters: u64) -> Duration {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (a, mut child) = spawn_echo_peer("tokio");
    a.set_nonblocking(true).expect("non-blocking");
    let d = rt.block_on(async move {
        let mut a = tokio::net::UnixStream::from_std(a).expect("tokio socket");
        let msg = [7u8; PAYLOAD + 5];
        let mut buf = [0u8; PAYLOAD + 5];
        // One round trip before timing, so the peer is up.
        a.write_all(&msg).await.expect("write");
        a.read_exact(&mut buf).await.expect("read");
        let t = Instant::now();
        for _ in 0..iters {
            a.write_all(&msg).await.expect("write");
            a.read_exact(&mut buf).await.expect("read");
        }
        t.elapsed()
    });
    let _ = child.wait();
    d
}

/// Baseline 0: one 64-byte frame each way over a socketpair to another *process* (this bench
/// binary re-executed as a plain echo loop) — the same process boundary a worker has, without
/// framing, typing, a runtime or a sandbox.
fn raw_process_round_trips(iters: u64) -> Duration {
    let (mut a, mut child) = spawn_echo_peer("blocking");
    let msg = [7u8; PAYLOAD + 5];
    let mut buf = [0u8; PAYLOAD + 5];
    // One round trip before timing, so the peer is up.
    a.write_all(&msg).expect("write");
    a.read_exact(&mut buf).expect("read");
    let t = Instant::now();
    for _ in 0..iters {
        a.write_all(&msg).expect("write");
        a.read_exact(&mut buf).expect("read");
    }
    let d = t.elapsed();
    drop(a);
    let _ = child.wait();
    d
}

/// Baseline 1: one 64-byte frame each way over a socketpair, blocking, peer on another thread.
fn raw_blocking_round_trips(iters: u64) -> Duration {
    let (mut a, mut b) = UnixStream::pair().expect("pair");
    let peer = std::thread::spawn(move || {
        let mut buf = [0u8; PAYLOAD + 5];
        while b.read_exact(&mut buf).is_ok() {
            if b.write_all(&buf).is_err() {
                break;
            }
        }
    });
    let msg = [7u8; PAYLOAD + 5];
    let mut buf = [0u8; PAYLOAD + 5];
    let t = Instant::now();
    for _ in 0..iters {
        a.write_all(&msg).expect("write");
        a.read_exact(&mut buf).expect("read");
    }
    let d = t.elapsed();
    drop(a);
    let _ = peer.join();
    d
}

/// Baseline 2: the same over tokio sockets, the peer a task on the same runtime.
fn raw_tokio_round_trips(rt: &tokio::runtime::Runtime, iters: u64) -> Duration {
    rt.block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut a, mut b) = tokio::net::UnixStream::pair().expect("pair");
        let peer = tokio::spawn(async move {
            let mut buf = [0u8; PAYLOAD + 5];
            while b.read_exact(&mut buf).await.is_ok() {
                if b.write_all(&buf).await.is_err() {
                    break;
                }
            }
        });
        let msg = [7u8; PAYLOAD + 5];
        let mut buf = [0u8; PAYLOAD + 5];
        let t = Instant::now();
        for _ in 0..iters {
            a.write_all(&msg).await.expect("write");
            a.read_exact(&mut buf).await.expect("read");
        }
        let d = t.elapsed();
        drop(a);
        let _ = peer.await;
        d
    })
}

fn round_trip(c: &mut Criterion) {
    round_trip_on(
        c,
        "multi_thread",
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime"),
    );
    round_trip_on(
        c,
        "current_thread",
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime"),
    );
}

/// One echo of `PAYLOAD` bytes, supervisor → tools worker → back, checked.
async fn echo_through_tools(sup: &Supervisor) {
    let r = sup
        .tools
        .call(Request::Common(CommonRequest::Echo {
            data: vec![7; PAYLOAD],
        }))
        .await
        .expect("echo");
    assert!(matches!(r, Response::Common(CommonResponse::Echo { .. })));
}

fn round_trip_on(c: &mut Criterion, flavor: &str, rt: tokio::runtime::Runtime) {
    let (cfg, _run, _ws) = config();
    let sup = rt.block_on(async {
        let sup = Supervisor::start(cfg).await.expect("start");
        sup.wait_ready().await.expect("ready");
        sup
    });
    let mut g = c.benchmark_group(format!("round_trip_64B_{flavor}"));
    g.bench_function("raw_socketpair_process", |b| {
        b.iter_custom(raw_process_round_trips)
    });
    g.bench_function("raw_socketpair_process_tokio", |b| {
        b.iter_custom(|n| raw_tokio_process_round_trips(&rt, n))
    });
    g.bench_function("raw_socketpair_thread", |b| {
        b.iter_custom(raw_blocking_round_trips)
    });
    g.bench_function("raw_socketpair_tokio", |b| {
        b.iter_custom(|n| raw_tokio_round_trips(&rt, n))
    });
    g.bench_function("supervisor_to_tools_worker", |b| {
        b.iter_custom(|n| {
            rt.block_on(async {
                let t = Instant::now();
                for _ in 0..n {
                    echo_through_tools(&sup).await;
                }
                t.elapsed()
            })
        })
    });
    // The same request after a pause (not timed) long enough for both processes to sleep and
    // their vCPUs to halt, as between the requests of a real run: a tight loop measures how the
    // scheduler ends up placing the two processes, this measures one exchange from idle.
    g.bench_function("supervisor_to_tools_worker_after_idle", |b| {
        b.iter_custom(|n| {
            rt.block_on(async {
                let mut spent = Duration::ZERO;
                for _ in 0..n {
                    std::thread::sleep(Duration::from_micros(500));
                    let t = Instant::now();
                    echo_through_tools(&sup).await;
                    spent += t.elapsed();
                }
                spent
            })
        })
    });
    g.finish();
    rt.block_on(sup.shutdown());
}

fn cold_start(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut g = c.benchmark_group("cold_start");
    g.sample_size(20);
    g.bench_function("five_workers_attested", |b| {
        b.iter_custom(|n| {
            let mut total = Duration::ZERO;
            for _ in 0..n {
                let (cfg, _run, _ws) = config();
                total += rt.block_on(async {
                    let t = Instant::now();
                    let sup = Supervisor::start(cfg).await.expect("start");
                    sup.wait_ready().await.expect("ready");
                    let d = t.elapsed();
                    sup.shutdown().await;
                    d
                });
            }
            total
        })
    });
    g.finish();
}

criterion_group!(benches, round_trip, cold_start);

fn main() {
    if let Some(flavour) = std::env::var_os(ECHO_PEER_ENV) {
        echo_peer(flavour == "tokio");
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
