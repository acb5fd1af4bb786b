//! What the egress path costs, measured in the same run against a direct loopback connection:
//!
//! - `throughput/*`: 64 MiB sent to a loopback sink and acknowledged — `direct`, then through the
//!   forwarder and the broker's proxy with the `splice` relay (the default) and with the
//!   read/write relay, over HTTP `CONNECT` (target: proxied ≥ 0.8× direct); and `bare-relay`,
//!   the least any user-space relay can do — a blocking `splice(2)` loop on a thread of its own
//!   between two sockets connected in advance, no proxy protocol, no runtime, no forwarder — which
//!   bounds what the broker's relay could reach on this machine;
//! - `connect/*`: a new connection and a one-byte echo — `direct`, then through the proxy with
//!   HTTP `CONNECT` and with SOCKS5 (target: ≤ 0.5 ms added per connection).
//!
//! The forwarder runs on a thread of its own (it is one blocking loop, as in tier B), the proxy on
//! a single-threaded runtime of its own (as in the broker worker), the servers on theirs.

use criterion::{Criterion, Throughput};
use hanzo_broker::egress::{Egress, EgressConfig, RelayMode, StaticResolver};
use hanzo_policy::network::AllowList;
use hanzo_sandbox::fdpass;
use hanzo_tools::egress_forward;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

const TRANSFER: usize = 64 << 20;
const CHUNK: usize = 1 << 20;

/// A sink that reads each connection to its end, then answers one byte.
fn sink() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut s = s;
                let mut buf = vec![0u8; CHUNK];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                }
                let _ = s.write_all(b"k");
            });
        }
    });
    port
}

/// An echo server, one thread per connection.
fn echo() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let _ = s.set_nodelay(true);
                let mut r = s.try_clone().expect("clone");
                let mut w = s;
                let _ = std::io::copy(&mut r, &mut w);
            });
        }
    });
    port
}

/// The bare relay: for each accepted connection, a connection to `target` and a thread moving
/// the bytes one way with blocking `splice(2)` through a pipe, then the one-byte answer back.
fn bare_relay(target: u16) -> u16 {
    use rustix::pipe::{pipe, splice, SpliceFlags};
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for client in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut upstream = TcpStream::connect(("127.0.0.1", target)).expect("connect");
                let (r, w) = pipe().expect("pipe");
                let _ = rustix::pipe::fcntl_setpipe_size(&w, 1 << 20);
                loop {
                    let n = splice(&client, None, &w, None, 1 << 20, SpliceFlags::MOVE)
                        .expect("splice in");
                    if n == 0 {
                        break;
                    }
                    let mut left = n;
                    while left > 0 {
                        left -= splice(&r, None, &upstream, None, left, SpliceFlags::MOVE)
                            .expect("splice out");
                    }
                }
                upstream.shutdown(Shutdown::Write).expect("half-close");
                let mut ack = [0u8; 1];
                upstream.read_exact(&mut ack).expect("ack");
                (&client).write_all(&ack).expect("ack back");
            });
        }
    });
    port
}

/// A forwarder and a proxy allowing `127.0.0.1` on `ports`; the forwarder's port.
fn proxy(ports: &[u16], relay: RelayMode) -> u16 {
    let (ours, theirs) = fdpass::seqpacket_pair(false).expect("pair");
    hanzo_ipc::transport::pass_credentials(ours.as_fd()).expect("SO_PASSCRED");
    let listener = egress_forward::bind(0).expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || egress_forward::serve(listener, theirs));
    let mut allow: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    allow.extend(ports.iter().map(|p| format!("bench.test:{p}")));
    let cfg = EgressConfig {
        allow: AllowList::parse(&allow).expect("entries"),
        sources: Vec::new(),
        forwarder_pid: std::process::id(),
        max_tunnels: 256,
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(60),
        relay,
    };
    let resolver = StaticResolver::new().with("bench.test", &["127.0.0.1".parse().expect("ip")]);
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let (tx, mut rx) = tokio::sync::mpsc::channel(1024);
            tokio::spawn(async move { while rx.recv().await.is_some() {} });
            let egress = Egress::new(cfg, Arc::new(resolver), tx);
            let _ = egress.serve_control(ours).await;
        });
    });
    port
}

fn read_head(s: &mut TcpStream) {
    let mut head = Vec::with_capacity(64);
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).expect("head"), 1, "the proxy closed");
        head.push(b[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200"), "refused");
}

fn tunnel(proxy: u16, target: u16) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", proxy)).expect("connect");
    s.set_nodelay(true).expect("nodelay");
    s.write_all(format!("CONNECT bench.test:{target} HTTP/1.1\r\n\r\n").as_bytes())
        .expect("CONNECT");
    read_head(&mut s);
    s
}

fn socks_tunnel(proxy: u16, target: u16) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", proxy)).expect("connect");
    s.set_nodelay(true).expect("nodelay");
    let name = b"bench.test";
    let mut req = vec![
        5,
        1,
        0,
        5,
        1,
        0,
        3,
        u8::try_from(name.len()).expect("a short name"),
    ];
    req.extend_from_slice(name);
    req.extend_from_slice(&target.to_be_bytes());
    // Greeting and request in one write, as clients that pipeline them do.
    s.write_all(&req).expect("socks");
    let mut reply = [0u8; 12];
    s.read_exact(&mut reply).expect("reply");
    assert_eq!(reply[3], 0, "refused");
    s
}

fn send_all(mut s: TcpStream) {
    let chunk = vec![0x5au8; CHUNK];
    for _ in 0..TRANSFER / CHUNK {
        s.write_all(&chunk).expect("send");
    }
    s.shutdown(Shutdown::Write).expect("half-close");
    let mut ack = [0u8; 1];
    s.read_exact(&mut ack).expect("ack");
}

fn round_trip(mut s: TcpStream) {
    s.write_all(b"x").expect("send");
    let mut b = [0u8; 1];
    s.read_exact(&mut b).expect("echo");
}

fn benches(c: &mut Criterion) -> Ports {
    let sink_port = sink();
    let echo_port = echo();
    let spliced = proxy(&[sink_port, echo_port], RelayMode::Splice);
    let copied = proxy(&[sink_port], RelayMode::Copy);
    let bare = bare_relay(sink_port);

    let mut g = c.benchmark_group("throughput");
    g.throughput(Throughput::Bytes(TRANSFER as u64));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(8));
    g.bench_function("direct", |b| {
        b.iter(|| send_all(TcpStream::connect(("127.0.0.1", sink_port)).expect("connect")))
    });
    g.bench_function("proxy-splice", |b| {
        b.iter(|| send_all(tunnel(spliced, sink_port)))
    });
    g.bench_function("proxy-copy", |b| {
        b.iter(|| send_all(tunnel(copied, sink_port)))
    });
    g.bench_function("bare-relay", |b| {
        b.iter(|| send_all(TcpStream::connect(("127.0.0.1", bare)).expect("connect")))
    });
    g.finish();

    let mut g = c.benchmark_group("connect");
    g.sample_size(50);
    g.bench_function("direct", |b| {
        b.iter(|| {
            let s = TcpStream::connect(("127.0.0.1", echo_port)).expect("connect");
            s.set_nodelay(true).expect("nodelay");
            round_trip(s)
        })
    });
    g.bench_function("proxy-connect", |b| {
        b.iter(|| round_trip(tunnel(spliced, echo_port)))
    });
    g.bench_function("proxy-socks5", |b| {
        b.iter(|| round_trip(socks_tunnel(spliced, echo_port)))
    });
    g.finish();
    Ports {
        sink: sink_port,
        spliced,
        copied,
        bare,
    }
}

/// The servers `benches` started, for the CPU report.
struct Ports {
    sink: u16,
    spliced: u16,
    copied: u16,
    bare: u16,
}

/// User plus system CPU time of this whole process (every thread: client, forwarder, proxy,
/// servers), in milliseconds.
fn process_cpu_ms() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("stat");
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // utime and stime are fields 14 and 15 of stat(5); `fields` starts at field 3.
    let ticks: u64 =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    // USER_HZ is 100 on Linux.
    ticks * 10
}

/// CPU spent per 64 MiB by each path: what decides throughput when the machine's cores are the
/// limit, and a figure that other load on the machine disturbs far less than elapsed time.
fn cpu_report(ports: &Ports) {
    const ROUNDS: u32 = 16;
    let mut line = Vec::new();
    let mut direct_ms = 0;
    for (name, path) in [
        ("direct", Path::Direct),
        ("proxy-splice", Path::Proxy(ports.spliced)),
        ("proxy-copy", Path::Proxy(ports.copied)),
        ("bare-relay", Path::Bare),
    ] {
        let before = process_cpu_ms();
        for _ in 0..ROUNDS {
            match path {
                Path::Direct => {
                    send_all(TcpStream::connect(("127.0.0.1", ports.sink)).expect("connect"))
                }
                Path::Proxy(p) => send_all(tunnel(p, ports.sink)),
                Path::Bare => {
                    send_all(TcpStream::connect(("127.0.0.1", ports.bare)).expect("connect"))
                }
            }
        }
        let ms = (process_cpu_ms() - before) / u64::from(ROUNDS);
        if path == Path::Direct {
            direct_ms = ms.max(1);
        }
        line.push(format!(
            "{name} {ms} ms ({:.2}x direct)",
            ms as f64 / direct_ms as f64
        ));
    }
    println!("cpu per 64 MiB (all threads): {}", line.join(", "));
}

/// One way to the sink, for the CPU report.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Path {
    Direct,
    Proxy(u16),
    Bare,
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let ports = benches(&mut c);
    cpu_report(&ports);
    c.final_summary();
}
