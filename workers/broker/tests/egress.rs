//! The broker's egress proxy through its real control socket: the tools forwarder
//! (`hanzo_tools::egress_forward::serve`, on a thread of this process) accepts on loopback and
//! passes each socket over a `SOCK_SEQPACKET` pair; the proxy reads the request, decides, resolves
//! with a fixed resolver (or the system's), connects to servers these tests start on loopback,
//! relays, and records. Every protocol answer, every refusal reason, the caps and timeouts, the
//! sender check, and memory over 1 GiB.
//!
//! The whole path with real clients (curl, git, pip, Python) inside a real tier-B namespace is
//! `tests/egress_namespace.rs`.

use hanzo_broker::egress::{
    ControlError, Egress, EgressConfig, RelayMode, Resolve, StaticResolver, SystemResolver,
};
use hanzo_ipc::roles::broker::{
    EgressDenial, EgressOutcome, EgressProtocol, EgressRecord, EgressSettings, TunnelEnd,
};
use hanzo_policy::network::AllowList;
use hanzo_sandbox::fdpass;
use hanzo_tools::egress_forward;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Bounds a wait that would otherwise hang a broken test; never a measurement.
const PATIENCE: Duration = Duration::from_secs(30);

fn ip(s: &str) -> IpAddr {
    s.parse().expect("an address")
}

/// The control pair as the supervisor makes it: credentials asked for on the broker's end before
/// the other end is handed out.
fn control_pair() -> (OwnedFd, OwnedFd) {
    let (ours, theirs) = fdpass::seqpacket_pair(false).expect("control pair");
    hanzo_ipc::transport::pass_credentials(ours.as_fd()).expect("SO_PASSCRED");
    (ours, theirs)
}

struct Proxy {
    port: u16,
    records: mpsc::Receiver<EgressRecord>,
    egress: Arc<Egress>,
    control: JoinHandle<Result<(), ControlError>>,
}

fn config(allow: &[String]) -> EgressConfig {
    EgressConfig {
        allow: AllowList::parse(allow).expect("test entries parse"),
        sources: Vec::new(),
        forwarder_pid: std::process::id(),
        max_tunnels: 256,
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(30),
        relay: RelayMode::Splice,
    }
}

/// The proxy with its forwarder on a thread of this process (so the expected sender is us).
fn start(cfg: EgressConfig, resolver: impl Resolve) -> Proxy {
    let (ours, theirs) = control_pair();
    let listener = egress_forward::bind(0).expect("bind the forwarder");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || egress_forward::serve(listener, theirs));
    let (tx, records) = mpsc::channel(1024);
    let egress = Egress::new(cfg, Arc::new(resolver), tx);
    let e = egress.clone();
    let control = tokio::spawn(async move { e.serve_control(ours).await });
    Proxy {
        port,
        records,
        egress,
        control,
    }
}

impl Proxy {
    async fn connect(&self) -> TcpStream {
        TcpStream::connect(("127.0.0.1", self.port))
            .await
            .expect("connect to the forwarder")
    }

    async fn record(&mut self) -> EgressRecord {
        tokio::time::timeout(PATIENCE, self.records.recv())
            .await
            .expect("a record in time")
            .expect("the proxy is alive")
    }
}

/// An echo server on `addr`; returns its port.
async fn echo_server(addr: &str) -> u16 {
    let l = TcpListener::bind((addr, 0)).await.expect("bind echo");
    let port = l.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    port
}

async fn read_head<R: AsyncRead + Unpin>(s: &mut R) -> String {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).await.expect("read head") == 0 {
            break;
        }
        head.push(b[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

async fn http_connect(p: &Proxy, target: &str) -> (TcpStream, u16, String) {
    let mut s = p.connect().await;
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .expect("send CONNECT");
    let head = read_head(&mut s).await;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let mut body = String::new();
    if status != 200 {
        let _ = s.read_to_string(&mut body).await;
    }
    (s, status, body)
}

/// A SOCKS5 CONNECT-style request; `addr` is the ATYP byte and address; returns the reply code.
async fn socks(p: &Proxy, cmd: u8, addr: &[u8], port: u16) -> (TcpStream, Option<u8>) {
    let mut s = p.connect().await;
    s.write_all(&[5, 1, 0]).await.expect("greeting");
    let mut choice = [0u8; 2];
    s.read_exact(&mut choice).await.expect("method choice");
    assert_eq!(choice, [5, 0], "no authentication chosen");
    let mut req = vec![5, cmd, 0];
    req.extend_from_slice(addr);
    req.extend_from_slice(&port.to_be_bytes());
    s.write_all(&req).await.expect("request");
    let mut reply = [0u8; 10];
    match s.read_exact(&mut reply).await {
        Ok(_) => {
            assert_eq!(reply[0], 5);
            assert_eq!(&reply[3..], &[1, 0, 0, 0, 0, 0, 0], "bound address hidden");
            (s, Some(reply[1]))
        }
        Err(_) => (s, None),
    }
}

fn domain(name: &str) -> Vec<u8> {
    let mut v = vec![3, u8::try_from(name.len()).expect("a short name")];
    v.extend_from_slice(name.as_bytes());
    v
}

async fn echo_once(s: &mut TcpStream, data: &[u8]) {
    s.write_all(data).await.expect("send");
    let mut back = vec![0u8; data.len()];
    s.read_exact(&mut back).await.expect("echo");
    assert_eq!(back, data);
}

fn denial(r: &EgressRecord) -> (EgressDenial, Option<&str>, &str) {
    match &r.outcome {
        EgressOutcome::Denied {
            reason,
            rule,
            detail,
        } => (*reason, rule.as_deref(), detail.as_str()),
        other => panic!("expected a refusal, got {other:?} for {r:?}"),
    }
}

fn allowed(r: &EgressRecord) -> (&str, &str, TunnelEnd) {
    match &r.outcome {
        EgressOutcome::Allowed { rule, address, end } => (rule, address, *end),
        other => panic!("expected a tunnel, got {other:?}"),
    }
}

#[tokio::test]
async fn connect_and_socks5_tunnel_to_an_allowed_name_with_bytes_counted() {
    let port = echo_server("127.0.0.1").await;
    let resolver = StaticResolver::new().with("svc.test", &[ip("127.0.0.1")]);
    let mut p = start(
        config(&[format!("svc.test:{port}"), format!("127.0.0.1:{port}")]),
        resolver,
    );

    let (mut s, status, _) = http_connect(&p, &format!("SVC.test.:{port}")).await;
    assert_eq!(status, 200);
    echo_once(&mut s, b"hello through CONNECT").await;
    drop(s);
    let r = p.record().await;
    assert_eq!(r.protocol, EgressProtocol::HttpConnect);
    assert_eq!((r.host.as_str(), r.port), ("SVC.test.", port));
    let (rule, address, end) = allowed(&r);
    assert_eq!(rule, format!("svc.test:{port}"));
    assert_eq!(address, format!("127.0.0.1:{port}"));
    assert_eq!(end, TunnelEnd::Closed);
    assert_eq!((r.bytes_up, r.bytes_down), (21, 21));

    let (mut s, code) = socks(&p, 1, &domain("svc.test"), port).await;
    assert_eq!(code, Some(0));
    echo_once(&mut s, b"socks").await;
    drop(s);
    let r = p.record().await;
    assert_eq!(r.protocol, EgressProtocol::Socks5);
    assert_eq!(allowed(&r).0, format!("svc.test:{port}"));
    assert_eq!((r.bytes_up, r.bytes_down), (5, 5));
}

#[tokio::test]
async fn bytes_sent_before_the_connect_reply_reach_the_destination() {
    let port = echo_server("127.0.0.1").await;
    let mut p = start(
        config(&[format!("127.0.0.1:{port}")]),
        StaticResolver::new(),
    );
    let mut s = p.connect().await;
    s.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\nearly").as_bytes())
        .await
        .expect("send");
    assert!(read_head(&mut s).await.starts_with("HTTP/1.1 200 "));
    let mut back = [0u8; 5];
    s.read_exact(&mut back).await.expect("echo");
    assert_eq!(&back, b"early");
    drop(s);
    let r = p.record().await;
    assert_eq!(allowed(&r).0, format!("127.0.0.1:{port}"));
    assert_eq!(r.bytes_up, 5);
}

#[tokio::test]
async fn plain_http_is_forwarded_in_origin_form_without_proxy_headers() {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = l.local_addr().expect("addr").port();
    let seen = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.expect("accept");
        let head = read_head(&mut s).await;
        let mut body = [0u8; 4];
        s.read_exact(&mut body).await.expect("body");
        s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            .await
            .expect("reply");
        (head, body)
    });
    let resolver = StaticResolver::new().with("web.test", &[ip("127.0.0.1")]);
    let mut p = start(
        config(&[format!("web.test:{port}"), format!("127.0.0.1:{port}")]),
        resolver,
    );
    let mut s = p.connect().await;
    let req = format!(
        "POST http://web.test:{port}/upload?x=1#frag HTTP/1.1\r\nHost: other.example\r\n\
         Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic c2VjcmV0\r\n\
         Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nUser-Agent: test\r\n\
         Content-Length: 4\r\n\r\nbody"
    );
    s.write_all(req.as_bytes()).await.expect("send");
    let mut response = String::new();
    s.read_to_string(&mut response).await.expect("response");
    assert!(response.ends_with("\r\n\r\nok"), "{response}");
    let (head, body) = seen.await.expect("server");
    assert_eq!(&body, b"body");
    let lines: Vec<&str> = head.trim_end().split("\r\n").collect();
    assert_eq!(lines[0], "POST /upload?x=1 HTTP/1.1");
    assert!(
        lines.contains(&format!("Host: web.test:{port}").as_str()),
        "{head}"
    );
    assert!(lines.contains(&"Connection: close"), "{head}");
    assert!(lines.contains(&"User-Agent: test"), "{head}");
    assert!(lines.contains(&"Content-Length: 4"), "{head}");
    for gone in ["Proxy-", "X-Hop", "other.example", "keep-alive"] {
        assert!(!head.contains(gone), "{gone} forwarded: {head}");
    }
    let r = p.record().await;
    assert_eq!(r.protocol, EgressProtocol::HttpForward);
    assert_eq!(allowed(&r).0, format!("web.test:{port}"));
    assert_eq!(r.bytes_up, u64::try_from(head.len() + 4).expect("len"));
    assert_eq!(r.bytes_down, u64::try_from(response.len()).expect("len"));
}

#[tokio::test]
async fn names_and_addresses_off_the_list_are_refused_with_the_reason() {
    let port = echo_server("127.0.0.1").await;
    let resolver = StaticResolver::new()
        .with("svc.test", &[ip("127.0.0.1")])
        .with("other.test", &[ip("127.0.0.1")]);
    let mut p = start(
        config(&["svc.test".into(), "192.0.2.7:8080".into()]),
        resolver,
    );
    // Not listed.
    let (_, status, body) = http_connect(&p, &format!("other.test:{port}")).await;
    assert_eq!(status, 403);
    assert!(body.contains("not on the network allow-list"), "{body}");
    let r = p.record().await;
    assert_eq!(denial(&r).0, EgressDenial::NotListed);
    assert_eq!(r.host, "other.test");
    // Listed name, but not on this port.
    let (_, status, _) = http_connect(&p, &format!("svc.test:{port}")).await;
    assert_eq!(status, 403);
    assert_eq!(denial(&p.record().await).0, EgressDenial::NotListed);
    // An IP literal the list does not name (HTTP and SOCKS5 IPv4/IPv6 forms).
    let (_, status, _) = http_connect(&p, &format!("127.0.0.1:{port}")).await;
    assert_eq!(status, 403);
    assert_eq!(denial(&p.record().await).0, EgressDenial::IpLiteral);
    let (_, code) = socks(&p, 1, &[1, 127, 0, 0, 1], port).await;
    assert_eq!(code, Some(0x02), "connection not allowed by ruleset");
    let r = p.record().await;
    assert_eq!(denial(&r).0, EgressDenial::IpLiteral);
    assert_eq!((r.host.as_str(), r.port), ("127.0.0.1", port));
    let mut v6 = vec![4];
    v6.extend_from_slice(&std::net::Ipv6Addr::LOCALHOST.octets());
    let (_, code) = socks(&p, 1, &v6, port).await;
    assert_eq!(code, Some(0x02));
    let r = p.record().await;
    assert_eq!(denial(&r).0, EgressDenial::IpLiteral);
    assert_eq!(r.host, "[::1]");
    // A name spelt so that a resolver would read it as an address.
    let (_, code) = socks(&p, 1, &domain("2130706433"), port).await;
    assert_eq!(code, Some(0x02));
    assert_eq!(denial(&p.record().await).0, EgressDenial::InvalidHost);
    // Not ASCII, and control characters: refused, and recorded printably.
    let (_, code) = socks(&p, 1, &domain("sv\u{e7}.test"), 443).await;
    assert_eq!(code, Some(0x02));
    let r = p.record().await;
    assert_eq!(denial(&r).0, EgressDenial::InvalidHost);
    assert_eq!(r.host, "sv\\u{e7}.test");
    let (_, code) = socks(&p, 1, &domain("svc.test\u{1b}[2J"), 443).await;
    assert_eq!(code, Some(0x02));
    let r = p.record().await;
    assert!(!r.host.contains('\u{1b}'), "{:?}", r.host);
    p.egress.shutdown().await;
}

#[tokio::test]
async fn an_ip_literal_named_by_the_list_is_reachable_through_socks5_too() {
    let port = echo_server("127.0.0.1").await;
    let mut p = start(
        config(&[format!("127.0.0.1:{port}")]),
        StaticResolver::new(),
    );
    let (mut s, code) = socks(&p, 1, &[1, 127, 0, 0, 1], port).await;
    assert_eq!(code, Some(0));
    echo_once(&mut s, b"literal").await;
    drop(s);
    assert_eq!(allowed(&p.record().await).0, format!("127.0.0.1:{port}"));
}

#[tokio::test]
async fn a_listed_name_resolving_to_a_non_public_address_reaches_nothing() {
    // A server on 127.0.0.2 that must never see a connection.
    let l = TcpListener::bind("127.0.0.2:0")
        .await
        .expect("bind 127.0.0.2");
    let port = l.local_addr().expect("addr").port();
    let cases = [
        ("lo.test", "127.0.0.2", "127.0.0.0/8"),
        ("metadata.test", "169.254.169.254", "169.254.0.0/16"),
        ("private.test", "10.0.0.1", "10.0.0.0/8"),
        ("cgnat.test", "100.64.0.1", "100.64.0.0/10"),
        ("v6lo.test", "::1", "::1/128"),
        ("mapped.test", "::ffff:127.0.0.2", "127.0.0.0/8"),
        ("nat64.test", "64:ff9b::7f00:2", "127.0.0.0/8"),
        ("sixtofour.test", "2002:7f00:2::1", "127.0.0.0/8"),
        ("ula.test", "fd00::1", "fc00::/7"),
        ("unspecified.test", "0.0.0.0", "0.0.0.0/8"),
    ];
    let mut resolver = StaticResolver::new();
    for (name, addr, _) in cases {
        resolver = resolver.with(name, &[ip(addr)]);
    }
    let allow: Vec<String> = cases
        .iter()
        .map(|(n, _, _)| format!("{n}:{port}"))
        .collect();
    // A literal entry for 127.0.0.1 does not open 127.0.0.2.
    let mut allow = allow;
    allow.push(format!("127.0.0.1:{port}"));
    let mut p = start(config(&allow), resolver);
    for (name, addr, block) in cases {
        let (_, status, body) = http_connect(&p, &format!("{name}:{port}")).await;
        assert_eq!(status, 403, "{name}");
        assert!(
            !body.contains(addr.trim_start_matches("::ffff:")),
            "the answer leaks {addr}: {body}"
        );
        let r = p.record().await;
        let (reason, rule, detail) = denial(&r);
        assert_eq!(reason, EgressDenial::PrivateAddress, "{name}: {detail}");
        assert_eq!(rule, Some(format!("{name}:{port}").as_str()));
        assert!(detail.contains(block), "{name}: {detail}");
    }
    let nothing = tokio::time::timeout(Duration::from_millis(200), l.accept()).await;
    assert!(
        nothing.is_err(),
        "a rebinding name reached the host's service"
    );
}

#[tokio::test]
async fn a_name_with_public_and_private_addresses_connects_to_the_admitted_one_only() {
    let port = echo_server("127.0.0.1").await;
    // 10.0.0.1 is refused (private, not named); 127.0.0.1 is named literally.
    let resolver = StaticResolver::new().with("mixed.test", &[ip("10.0.0.1"), ip("127.0.0.1")]);
    let mut p = start(
        config(&[format!("mixed.test:{port}"), format!("127.0.0.1:{port}")]),
        resolver,
    );
    let (mut s, status, _) = http_connect(&p, &format!("mixed.test:{port}")).await;
    assert_eq!(status, 200);
    echo_once(&mut s, b"x").await;
    drop(s);
    assert_eq!(allowed(&p.record().await).1, format!("127.0.0.1:{port}"));
}

#[tokio::test]
async fn the_system_resolver_cannot_be_used_to_reach_localhost() {
    let port = echo_server("127.0.0.1").await;
    let mut p = start(config(&[format!("localhost:{port}")]), SystemResolver);
    let (_, status, _) = http_connect(&p, &format!("localhost:{port}")).await;
    assert_eq!(status, 403);
    let r = p.record().await;
    let (reason, _, detail) = denial(&r);
    assert_eq!(reason, EgressDenial::PrivateAddress);
    assert!(detail.contains("loopback"), "{detail}");

    // Naming the loopback addresses literally opens it.
    let mut p = start(
        config(&[
            format!("localhost:{port}"),
            format!("127.0.0.1:{port}"),
            format!("[::1]:{port}"),
        ]),
        SystemResolver,
    );
    let (mut s, status, _) = http_connect(&p, &format!("localhost:{port}")).await;
    assert_eq!(status, 200);
    echo_once(&mut s, b"ok").await;
    drop(s);
    let r = p.record().await;
    assert_eq!(allowed(&r).1, format!("127.0.0.1:{port}"));
}

#[tokio::test]
async fn socks5_bind_udp_and_bad_requests_are_refused_with_the_right_replies() {
    let mut p = start(config(&["svc.test".into()]), StaticResolver::new());
    for (cmd, what) in [(2u8, "BIND"), (3, "UDP ASSOCIATE")] {
        let (s, code) = socks(&p, cmd, &domain("svc.test"), 443).await;
        drop(s);
        assert_eq!(code, Some(0x07), "{what}: command not supported");
        let r = p.record().await;
        let (reason, _, detail) = denial(&r);
        assert_eq!(reason, EgressDenial::UnsupportedCommand);
        assert!(detail.contains(what), "{detail}");
        assert_eq!((r.host.as_str(), r.port), ("svc.test", 443));
    }
    // An address type that does not exist.
    let (s, code) = socks(&p, 1, &[9, 1, 2, 3, 4], 443).await;
    drop(s);
    assert_eq!(code, Some(0x08));
    assert_eq!(denial(&p.record().await).0, EgressDenial::BadRequest);

    // A bad version in the request closes without a reply.
    let mut s = p.connect().await;
    s.write_all(&[5, 1, 0]).await.expect("greeting");
    let mut choice = [0u8; 2];
    s.read_exact(&mut choice).await.expect("choice");
    s.write_all(&[4, 1, 0, 3, 1, b'x', 0, 80])
        .await
        .expect("request");
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest).await;
    drop(s);
    assert!(rest.is_empty(), "no reply to a bad version");
    assert_eq!(denial(&p.record().await).0, EgressDenial::BadRequest);

    // No acceptable method: 0xff and closed.
    let mut s = p.connect().await;
    s.write_all(&[5, 1, 2]).await.expect("greeting");
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).await.expect("closed");
    drop(s);
    assert_eq!(rest, [5, 0xff]);
    assert_eq!(denial(&p.record().await).0, EgressDenial::BadRequest);

    // SOCKS4: rejected in its own protocol.
    let mut s = p.connect().await;
    s.write_all(&[4, 1, 0, 80, 1, 2, 3, 4, 0])
        .await
        .expect("socks4");
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).await.expect("closed");
    drop(s);
    assert_eq!(rest.get(1), Some(&0x5b));
    assert!(denial(&p.record().await).2.contains("SOCKS4"));
}

#[tokio::test]
async fn malformed_http_requests_get_a_4xx_and_a_record() {
    let mut p = start(config(&["svc.test".into()]), StaticResolver::new());
    let cases: Vec<(Vec<u8>, u16, EgressDenial)> = vec![
        (
            b"GARBAGE\x01\x02\r\n\r\n".to_vec(),
            400,
            EgressDenial::BadRequest,
        ),
        (
            b"CONNECT svc.test HTTP/1.1\r\n\r\n".to_vec(),
            400,
            EgressDenial::BadRequest,
        ),
        (
            b"CONNECT svc.test:99999 HTTP/1.1\r\n\r\n".to_vec(),
            400,
            EgressDenial::BadRequest,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: svc.test\r\n\r\n".to_vec(),
            405,
            EgressDenial::UnsupportedCommand,
        ),
        (
            b"GET https://svc.test/ HTTP/1.1\r\n\r\n".to_vec(),
            405,
            EgressDenial::UnsupportedCommand,
        ),
        (
            b"GET http://u:p@svc.test/ HTTP/1.1\r\n\r\n".to_vec(),
            400,
            EgressDenial::BadRequest,
        ),
        (
            format!(
                "GET http://svc.test/ HTTP/1.1\r\nX: {}\r\n\r\n",
                "a".repeat(20_000)
            )
            .into_bytes(),
            400,
            EgressDenial::BadRequest,
        ),
    ];
    for (req, want, reason) in cases {
        let mut s = p.connect().await;
        s.write_all(&req).await.expect("send");
        let head = read_head(&mut s).await;
        assert!(
            head.starts_with(&format!("HTTP/1.1 {want} ")),
            "{:?}: {head}",
            String::from_utf8_lossy(&req[..req.len().min(40)])
        );
        drop(s);
        assert_eq!(denial(&p.record().await).0, reason);
    }
}

#[tokio::test]
async fn unresolvable_names_and_refused_or_silent_destinations_are_reported() {
    // A port with nothing listening, and a listener whose backlog is full (connects hang).
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let silent = tokio::net::TcpSocket::new_v4().expect("socket");
    silent
        .bind("127.0.0.1:0".parse().expect("addr"))
        .expect("bind");
    let silent_port = silent.local_addr().expect("addr").port();
    let silent = silent.listen(0).expect("listen");
    let mut fillers = Vec::new();
    for _ in 0..4 {
        if let Ok(Ok(s)) = tokio::time::timeout(
            Duration::from_millis(300),
            TcpStream::connect(("127.0.0.1", silent_port)),
        )
        .await
        {
            fillers.push(s);
        }
    }
    let resolver = StaticResolver::new().with("svc.test", &[ip("127.0.0.1")]);
    let mut cfg = config(&[
        "ghost.test".into(),
        format!("svc.test:{closed}"),
        format!("127.0.0.1:{closed}"),
        format!("svc.test:{silent_port}"),
        format!("127.0.0.1:{silent_port}"),
    ]);
    cfg.connect_timeout = Duration::from_millis(300);
    let mut p = start(cfg, resolver);

    let (_, status, _) = http_connect(&p, "ghost.test:443").await;
    assert_eq!(status, 502);
    let r = p.record().await;
    assert_eq!(denial(&r).0, EgressDenial::Unresolved);
    assert_eq!(denial(&r).1, Some("ghost.test"));

    let (_, status, body) = http_connect(&p, &format!("svc.test:{closed}")).await;
    assert_eq!(status, 502);
    assert!(body.contains("could not connect"), "{body}");
    assert_eq!(denial(&p.record().await).0, EgressDenial::ConnectFailed);
    let (_, code) = socks(&p, 1, &domain("svc.test"), closed).await;
    assert_eq!(code, Some(0x05), "connection refused");
    assert_eq!(denial(&p.record().await).0, EgressDenial::ConnectFailed);

    let (_, status, _) = http_connect(&p, &format!("svc.test:{silent_port}")).await;
    assert_eq!(status, 504);
    assert_eq!(denial(&p.record().await).0, EgressDenial::ConnectTimeout);
    drop((silent, fillers));
}

#[tokio::test]
async fn a_client_that_never_sends_is_closed_at_the_request_timeout() {
    let mut cfg = config(&["svc.test".into()]);
    cfg.request_timeout = Duration::from_millis(200);
    let mut p = start(cfg, StaticResolver::new());
    let mut s = p.connect().await;
    let mut rest = Vec::new();
    let n = tokio::time::timeout(PATIENCE, s.read_to_end(&mut rest))
        .await
        .expect("closed by the proxy")
        .expect("read");
    assert_eq!(n, 0);
    let r = p.record().await;
    assert_eq!(r.protocol, EgressProtocol::Unknown);
    assert_eq!(denial(&r).0, EgressDenial::RequestTimeout);
    // Half a request is no better.
    let mut s = p.connect().await;
    s.write_all(b"CONNECT svc.test:443 HTTP/1.1\r\n")
        .await
        .expect("half");
    let _ = tokio::time::timeout(PATIENCE, s.read_to_end(&mut rest)).await;
    assert_eq!(denial(&p.record().await).0, EgressDenial::RequestTimeout);
}

#[tokio::test]
async fn an_idle_tunnel_is_closed_and_recorded() {
    let port = echo_server("127.0.0.1").await;
    let mut cfg = config(&[format!("127.0.0.1:{port}")]);
    cfg.idle_timeout = Duration::from_millis(300);
    let mut p = start(cfg, StaticResolver::new());
    let (mut s, status, _) = http_connect(&p, &format!("127.0.0.1:{port}")).await;
    assert_eq!(status, 200);
    echo_once(&mut s, b"once").await;
    let mut rest = Vec::new();
    tokio::time::timeout(PATIENCE, s.read_to_end(&mut rest))
        .await
        .expect("the proxy closes the idle tunnel")
        .expect("read");
    let r = p.record().await;
    assert_eq!(allowed(&r).2, TunnelEnd::IdleTimeout);
    assert_eq!((r.bytes_up, r.bytes_down), (4, 4));
}

#[tokio::test]
async fn the_tunnel_cap_refuses_then_closes_and_frees_up() {
    let port = echo_server("127.0.0.1").await;
    let mut cfg = config(&[format!("127.0.0.1:{port}")]);
    cfg.max_tunnels = 2;
    let mut p = start(cfg, StaticResolver::new());
    let target = format!("127.0.0.1:{port}");
    let (mut a, sa, _) = http_connect(&p, &target).await;
    let (b, sb, _) = http_connect(&p, &target).await;
    assert_eq!((sa, sb), (200, 200));
    let (_, status, body) = http_connect(&p, &target).await;
    assert_eq!(status, 503, "{body}");
    let r = p.record().await;
    assert_eq!(denial(&r).0, EgressDenial::TunnelCap);
    assert_eq!(r.host, "127.0.0.1");
    // Hold two waiting refusals (they have not sent a request): the next is closed unread.
    let w1 = p.connect().await;
    let w2 = p.connect().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut c = p.connect().await;
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(PATIENCE, c.read_to_end(&mut rest)).await;
    assert!(rest.is_empty());
    let r = p.record().await;
    assert_eq!(denial(&r).0, EgressDenial::TunnelCap);
    assert!(denial(&r).2.contains("closed unread"), "{r:?}");
    drop((w1, w2));
    // Two refusal records for the waiting ones (they closed without a request).
    for _ in 0..2 {
        let _ = p.record().await;
    }
    echo_once(&mut a, b"still up").await;
    drop((a, b));
    for _ in 0..2 {
        assert_eq!(allowed(&p.record().await).2, TunnelEnd::Closed);
    }
    let (_, status, _) = http_connect(&p, &target).await;
    assert_eq!(status, 200, "a freed slot is usable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_tunnels() {
    const N: usize = 200;
    let port = echo_server("127.0.0.1").await;
    let resolver = StaticResolver::new().with("svc.test", &[ip("127.0.0.1")]);
    let mut p = start(
        config(&[format!("svc.test:{port}"), format!("127.0.0.1:{port}")]),
        resolver,
    );
    let p_port = p.port;
    let barrier = Arc::new(tokio::sync::Barrier::new(N));
    let mut clients = Vec::new();
    for i in 0..N {
        let barrier = barrier.clone();
        clients.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(("127.0.0.1", p_port))
                .await
                .expect("connect");
            s.write_all(format!("CONNECT svc.test:{port} HTTP/1.1\r\n\r\n").as_bytes())
                .await
                .expect("send");
            let head = read_head(&mut s).await;
            assert!(head.starts_with("HTTP/1.1 200 "), "{i}: {head}");
            // Every tunnel is open at once before any is used.
            barrier.wait().await;
            let msg = format!("tunnel {i:03}");
            echo_once(&mut s, msg.as_bytes()).await;
        }));
    }
    for c in clients {
        tokio::time::timeout(PATIENCE, c)
            .await
            .expect("in time")
            .expect("client ok");
    }
    let mut up = 0;
    for _ in 0..N {
        let r = p.record().await;
        assert_eq!(allowed(&r).2, TunnelEnd::Closed);
        assert_eq!((r.bytes_up, r.bytes_down), (10, 10));
        up += r.bytes_up;
    }
    assert_eq!(up, 10 * N as u64);
}

fn vm_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_gibibyte_through_one_tunnel_keeps_memory_bounded() {
    const TOTAL: u64 = 1 << 30;
    // A sink that counts what arrives and answers the count.
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = l.local_addr().expect("addr").port();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.expect("accept");
        let mut buf = vec![0u8; 256 * 1024];
        let mut n = 0u64;
        loop {
            match s.read(&mut buf).await.expect("read") {
                0 => break,
                k => n += k as u64,
            }
        }
        s.write_all(&n.to_be_bytes()).await.expect("count");
    });
    let mut p = start(
        config(&[format!("127.0.0.1:{port}")]),
        StaticResolver::new(),
    );
    let (mut s, status, _) = http_connect(&p, &format!("127.0.0.1:{port}")).await;
    assert_eq!(status, 200);
    let chunk = vec![0x5au8; 256 * 1024];
    // Warm up (runtime, buffers) before the baseline.
    s.write_all(&chunk).await.expect("warm-up");
    let before = vm_rss_kib();
    let mut sent = chunk.len() as u64;
    let mut peak = before;
    while sent < TOTAL {
        s.write_all(&chunk).await.expect("send");
        sent += chunk.len() as u64;
        if sent.is_multiple_of(64 << 20) {
            peak = peak.max(vm_rss_kib());
        }
    }
    s.shutdown().await.expect("half-close");
    let mut count = [0u8; 8];
    s.read_exact(&mut count).await.expect("count");
    assert_eq!(u64::from_be_bytes(count), TOTAL);
    let grew = peak.saturating_sub(before);
    assert!(
        grew < 32 * 1024,
        "the process grew by {grew} KiB while 1 GiB passed (before {before} KiB, peak {peak} KiB)"
    );
    drop(s);
    let r = p.record().await;
    assert_eq!(r.bytes_up, TOTAL);
    assert_eq!(r.bytes_down, 8);
    assert_eq!(allowed(&r).2, TunnelEnd::Closed);
}

#[tokio::test]
async fn a_message_from_another_process_refuses_the_channel() {
    let (ours, theirs) = control_pair();
    // The socket the impostor passes: a real accepted connection, so we can see it closed.
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let mut client = std::net::TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
    let (accepted, _) = l.accept().expect("accept");
    let accepted: OwnedFd = accepted.into();
    // SO_PEERCRED cannot tell who holds the other end: it names whoever made the pair (us).
    let peer = rustix::net::sockopt::socket_peercred(&ours).expect("SO_PEERCRED");
    assert_eq!(
        u32::try_from(peer.pid.as_raw_nonzero().get()).expect("pid"),
        std::process::id()
    );

    // Another process sends on our pair: Python, with both fds inherited.
    for fd in [theirs.as_fd(), accepted.as_fd()] {
        rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty()).expect("inheritable");
    }
    let script = format!(
        "import socket, array, os\n\
         s = socket.socket(fileno={})\n\
         s.sendmsg([b'C'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', [{}]))])\n\
         print(os.getpid())\n",
        theirs.as_raw_fd(),
        accepted.as_raw_fd()
    );
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(&script)
        .output()
        .expect("python3 runs (./scripts/setup.sh installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let impostor: u32 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("pid");
    drop((theirs, accepted));

    let (tx, mut records) = mpsc::channel(16);
    let egress = Egress::new(
        config(&["svc.test".into()]),
        Arc::new(StaticResolver::new()),
        tx,
    );
    let result = tokio::time::timeout(PATIENCE, egress.serve_control(ours))
        .await
        .expect("refused in time");
    match result {
        Err(ControlError::PeerMismatch { expected, got }) => {
            assert_eq!(expected, std::process::id());
            assert_eq!(got, Some(impostor));
        }
        other => panic!("expected a peer mismatch, got {other:?}"),
    }
    let r = records.recv().await.expect("record");
    let (reason, _, detail) = denial(&r);
    assert_eq!(reason, EgressDenial::PeerMismatch);
    assert!(detail.contains(&impostor.to_string()), "{detail}");
    // The smuggled connection was closed, not served.
    use std::io::Read;
    client.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let mut buf = [0u8; 1];
    assert_eq!(client.read(&mut buf).expect("eof"), 0);
}

#[tokio::test]
async fn descriptors_that_are_not_tcp_connections_are_closed_and_the_channel_goes_on() {
    let port = echo_server("127.0.0.1").await;
    let (ours, theirs) = control_pair();
    let (tx, mut records) = mpsc::channel(16);
    let egress = Egress::new(
        config(&[format!("127.0.0.1:{port}")]),
        Arc::new(StaticResolver::new()),
        tx,
    );
    let e = egress.clone();
    let serving = tokio::spawn(async move { e.serve_control(ours).await });
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let (pipe_r, _pipe_w) = rustix::pipe::pipe().expect("pipe");
    for (fd, what) in [
        (udp.as_fd(), "datagram"),
        (listener.as_fd(), "listening"),
        (pipe_r.as_fd(), "not a socket"),
    ] {
        fdpass::send(theirs.as_fd(), b"C", &[fd]).expect("send");
        let r = tokio::time::timeout(PATIENCE, records.recv())
            .await
            .expect("in time")
            .expect("record");
        let (reason, _, detail) = denial(&r);
        assert_eq!(reason, EgressDenial::BadRequest);
        assert!(detail.contains(what), "{what}: {detail}");
    }
    // A real connection on the same channel is still served.
    let fwd = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let client = TcpStream::connect(fwd.local_addr().expect("addr"))
        .await
        .expect("connect");
    let (accepted, _) = fwd.accept().expect("accept");
    fdpass::send(theirs.as_fd(), b"C", &[accepted.as_fd()]).expect("send");
    drop(accepted);
    let mut client = client;
    client
        .write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .expect("send");
    assert!(read_head(&mut client).await.starts_with("HTTP/1.1 200 "));
    echo_once(&mut client, b"alive").await;
    // The forwarder closing its end ends the channel: open tunnels are shut down and recorded.
    drop(theirs);
    let done = tokio::time::timeout(PATIENCE, serving)
        .await
        .expect("ends")
        .expect("task");
    assert!(done.is_ok(), "{done:?}");
    let r = records.recv().await.expect("record");
    assert_eq!(allowed(&r).2, TunnelEnd::Shutdown);
    let mut rest = Vec::new();
    let _ = client.read_to_end(&mut rest).await;
}

#[tokio::test]
async fn a_message_sent_before_credentials_were_asked_for_refuses_the_channel() {
    let (ours, theirs) = fdpass::seqpacket_pair(false).expect("pair");
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
    fdpass::send(theirs.as_fd(), b"C", &[udp.as_fd()]).expect("send");
    let (tx, mut records) = mpsc::channel(4);
    let egress = Egress::new(config(&[]), Arc::new(StaticResolver::new()), tx);
    match egress.serve_control(ours).await {
        Err(ControlError::PeerMismatch { got: None, .. }) => {}
        other => panic!("expected an unknown sender to be refused, got {other:?}"),
    }
    assert_eq!(
        denial(&records.recv().await.expect("record")).0,
        EgressDenial::PeerMismatch
    );
}

#[tokio::test]
async fn the_control_socket_must_be_seqpacket() {
    let (a, _b) = std::os::unix::net::UnixStream::pair().expect("pair");
    let (tx, _records) = mpsc::channel(1);
    let egress = Egress::new(config(&[]), Arc::new(StaticResolver::new()), tx);
    assert!(matches!(
        egress.serve_control(a.into()).await,
        Err(ControlError::NotSeqpacket(_))
    ));
}

#[tokio::test]
async fn an_empty_list_allows_nothing_at_all() {
    let port = echo_server("127.0.0.1").await;
    let resolver = StaticResolver::new().with("svc.test", &[ip("127.0.0.1")]);
    let mut p = start(config(&[]), resolver);
    for target in [format!("svc.test:{port}"), format!("127.0.0.1:{port}")] {
        let (_, status, _) = http_connect(&p, &target).await;
        assert_eq!(status, 403, "{target}");
        let _ = p.record().await;
    }
    p.control.abort();
}

#[test]
fn settings_convert_to_a_config_and_bad_entries_refuse_it() {
    let s = EgressSettings {
        allow: vec!["pypi.org".into(), "*.crates.io:443".into()],
        forwarder_pid: 42,
        ..EgressSettings::default()
    };
    let c = EgressConfig::from_settings(&s).expect("valid");
    assert_eq!(c.allow.entries(), ["pypi.org", "*.crates.io:443"]);
    assert_eq!(c.forwarder_pid, 42);
    assert_eq!(c.max_tunnels, 256);
    assert_eq!(c.idle_timeout, Duration::from_secs(300));
    assert_eq!(c.relay, RelayMode::Splice);
    let bad = EgressSettings {
        allow: vec!["https://pypi.org".into()],
        ..EgressSettings::default()
    };
    assert!(EgressConfig::from_settings(&bad).is_err());
    let _: SocketAddr = "127.0.0.1:1".parse().expect("addr");
}

#[tokio::test]
async fn records_reach_the_supervisor_as_events_on_the_broker_channel() {
    use hanzo_ipc::channel::{Client, ServerWriter};
    use hanzo_ipc::roles::broker::{BrokerProtocol, Event};
    use hanzo_ipc::transport;
    // The broker channel: the supervisor's client on one end, the broker's event sink on the other.
    let (sup, brk) = tokio::net::UnixStream::pair().expect("pair");
    let (sr, sw) = transport::split(
        sup.into_std().expect("std").into(),
        hanzo_ipc::frame::DEFAULT_MAX_FRAME,
    )
    .expect("split");
    let (_client, mut events, _end) = Client::<BrokerProtocol, _>::start(sr, sw);
    let (_br, bw) = transport::split(
        brk.into_std().expect("std").into(),
        hanzo_ipc::frame::DEFAULT_MAX_FRAME,
    )
    .expect("split");
    let sink = ServerWriter::new(bw).events::<BrokerProtocol>();

    let port = echo_server("127.0.0.1").await;
    let (ours, theirs) = control_pair();
    let settings = EgressSettings {
        allow: vec![format!("127.0.0.1:{port}")],
        forwarder_pid: std::process::id(),
        ..EgressSettings::default()
    };
    let run = hanzo_broker::egress::spawn_with_resolver(
        &settings,
        ours,
        Arc::new(StaticResolver::new()),
        sink,
    )
    .expect("valid settings");
    let listener = egress_forward::bind(0).expect("bind");
    let proxy = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || egress_forward::serve(listener, theirs));

    let mut s = TcpStream::connect(("127.0.0.1", proxy))
        .await
        .expect("connect");
    s.write_all(b"CONNECT nowhere.test:443 HTTP/1.1\r\n\r\n")
        .await
        .expect("send");
    assert!(read_head(&mut s).await.starts_with("HTTP/1.1 403 "));
    drop(s);
    let mut s = TcpStream::connect(("127.0.0.1", proxy))
        .await
        .expect("connect");
    s.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .expect("send");
    assert!(read_head(&mut s).await.starts_with("HTTP/1.1 200 "));
    echo_once(&mut s, b"event").await;
    drop(s);
    let mut got = Vec::new();
    while got.len() < 2 {
        match tokio::time::timeout(PATIENCE, events.recv()).await {
            Ok(Some(Event::Egress(r))) => got.push(r),
            Ok(Some(_)) => {}
            other => panic!("no egress event: {other:?}"),
        }
    }
    got.sort_by_key(|r| r.id);
    assert_eq!(denial(&got[0]).0, EgressDenial::NotListed);
    assert_eq!(got[0].host, "nowhere.test");
    assert_eq!(allowed(&got[1]).0, format!("127.0.0.1:{port}"));
    assert_eq!((got[1].bytes_up, got[1].bytes_down), (5, 5));
    run.task.abort();
}
