//! The egress proxy for sandboxed commands: the one way a command in tier B reaches a network
//! host, and only a host the user allowed.
//!
//! The tools worker's network namespace has nothing but its own loopback. A forwarder there
//! (`hanzo_tools::egress_forward`) accepts each connection on `127.0.0.1:PORT` and passes the
//! accepted socket itself to the broker over a pre-connected `SOCK_SEQPACKET` control socket
//! ([`Egress::serve_control`]), checking nothing. Here, per connection:
//!
//! 1. read the request ([`request`]): HTTP `CONNECT host:port`, an absolute-form plain-HTTP
//!    request, or SOCKS5 `CONNECT` — on one port, told apart by the first byte;
//! 2. decide on **the name the client asked for** (`hanzo_policy::network::decide`): not on the
//!    list, an IP literal the list does not name, or not a valid ASCII host → refused;
//! 3. resolve it here ([`resolve`]) — the client cannot resolve anything — and drop every
//!    address that is loopback, private, link-local, CGNAT, multicast, documentation, reserved,
//!    or an IPv6 form of one, unless the list names it literally
//!    (`hanzo_policy::network::admit_address`), so a name that resolves to the host's own
//!    services (DNS rebinding) reaches nothing;
//! 4. connect to the admitted addresses in turn (connect timeout each), answer the client, and
//!    relay bytes both ways ([`relay`]; TLS is never terminated), with an idle timeout;
//! 5. send one [`EgressRecord`] when the attempt ends: host, port, the rule or the reason, bytes
//!    up and down, duration.
//!
//! The mcp worker's channel has one [`Source`] per MCP stdio server given network: its forwarder
//! listens on every loopback address of its namespace, each server is pointed at its own
//! `127.0.0.N`, and a connection is judged by the list of the source whose address it was made to
//! (read from the accepted socket itself, which the client cannot rewrite), and recorded with the
//! server's name. A connection made to no source's address is refused.
//!
//! Connections are capped per channel (one channel per run): beyond the cap a connection is
//! answered with a refusal, beyond twice the cap it is closed unread; both are recorded.

mod control;
pub mod relay;
pub mod request;
pub mod resolve;

pub use control::ControlError;
pub use relay::RelayMode;
pub use resolve::{Resolve, StaticResolver, SystemResolver};

use hanzo_ipc::channel::EventSink;
use hanzo_ipc::roles::broker::{
    BrokerProtocol, EgressDenial, EgressOutcome, EgressProtocol, EgressRecord, EgressSettings,
    Event, TunnelEnd,
};
use hanzo_policy::network::{
    admit_address, decide, parse_host, AllowList, Decision, DenyReason, EntryError, Host, NonPublic,
};
use relay::Traffic;
use request::{socks_reply, Answer, ClientRequest};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinHandle;

/// Most resolved addresses tried for one name.
const MAX_ADDRESSES: usize = 8;
/// Longest host text kept in a record.
const MAX_RECORDED_HOST: usize = 255;
/// Time allowed for answering a refused client and letting it close.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);
/// Most bytes read and discarded from a refused client before closing anyway.
const MAX_DRAIN: usize = 256 * 1024;

/// The proxy's configuration for one channel.
#[derive(Debug, Clone)]
pub struct EgressConfig {
    /// The allow-list every connection is judged by when there are no `sources`.
    pub allow: AllowList,
    /// Per-address lists (the mcp worker's channel); empty: `allow` for every connection.
    pub sources: Vec<Source>,
    /// The only sender accepted on the control socket (its pid as the broker sees it).
    pub forwarder_pid: u32,
    /// Most connections served at once; more are refused with `tunnel_cap`.
    pub max_tunnels: usize,
    /// Time to connect to one resolved address.
    pub connect_timeout: Duration,
    /// Time a client has to send its whole request (HTTP head or SOCKS5 handshake).
    pub request_timeout: Duration,
    /// A tunnel with no byte in either direction for this long is closed.
    pub idle_timeout: Duration,
    /// How tunnels move bytes.
    pub relay: RelayMode,
}

/// One MCP server's share of a channel: connections made to `address` are its.
#[derive(Debug, Clone)]
pub struct Source {
    /// The server's name (`mcp_servers.NAME`), carried into each record.
    pub name: String,
    /// The loopback address its proxy variables point at.
    pub address: IpAddr,
    /// Its allow-list.
    pub allow: AllowList,
}

/// Why the sources of a configuration were refused.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// An allow-list entry does not parse.
    #[error(transparent)]
    Entry(#[from] EntryError),
    /// A source's address is not a loopback address other than `127.0.0.1`.
    #[error("egress source {name:?}: {address:?} is not a loopback address other than 127.0.0.1")]
    Address {
        /// The source's name.
        name: String,
        /// The address as given.
        address: String,
    },
}

impl EgressConfig {
    /// From the supervisor's settings; an entry that does not parse refuses the whole
    /// configuration (the supervisor sends entries that already parsed).
    pub fn from_settings(s: &EgressSettings) -> Result<EgressConfig, SourceError> {
        let mut sources = Vec::new();
        for src in &s.sources {
            let address = match src.address.parse::<IpAddr>() {
                Ok(IpAddr::V4(v4)) if v4.is_loopback() && v4 != std::net::Ipv4Addr::LOCALHOST => {
                    IpAddr::V4(v4)
                }
                _ => {
                    return Err(SourceError::Address {
                        name: src.name.clone(),
                        address: src.address.clone(),
                    })
                }
            };
            sources.push(Source {
                name: src.name.clone(),
                address,
                allow: AllowList::parse(&src.allow)?,
            });
        }
        Ok(EgressConfig {
            allow: AllowList::parse(&s.allow)?,
            sources,
            forwarder_pid: s.forwarder_pid,
            max_tunnels: usize::try_from(s.max_tunnels).unwrap_or(usize::MAX),
            connect_timeout: Duration::from_millis(s.connect_timeout_ms),
            request_timeout: Duration::from_millis(s.request_timeout_ms),
            idle_timeout: Duration::from_millis(s.idle_timeout_ms),
            relay: RelayMode::Splice,
        })
    }
}

/// Start the egress proxy of one run, as the broker does when the supervisor configures it:
/// serve `control` (the broker's end of the pair, `SO_PASSCRED` already set) under `settings`,
/// resolving with the system's resolver, and send every record to the supervisor as
/// [`Event::Egress`] through `events`. The task ends when the forwarder's end closes (`Ok`) or
/// the sender check refuses the channel (`Err`), after every record was sent.
pub fn spawn_for_run<W>(
    settings: &EgressSettings,
    control: OwnedFd,
    events: EventSink<BrokerProtocol, W>,
) -> Result<EgressRun, SourceError>
where
    W: AsyncWrite + Unpin + Send + 'static,
{
    spawn_with_resolver(settings, control, Arc::new(SystemResolver), events)
}

/// [`spawn_for_run`] with another resolver (tests).
pub fn spawn_with_resolver<W>(
    settings: &EgressSettings,
    control: OwnedFd,
    resolver: Arc<dyn Resolve>,
    events: EventSink<BrokerProtocol, W>,
) -> Result<EgressRun, SourceError>
where
    W: AsyncWrite + Unpin + Send + 'static,
{
    let config = EgressConfig::from_settings(settings)?;
    let (tx, mut rx) = mpsc::channel(256);
    let egress = Egress::new(config, resolver, tx);
    let produced = egress.produced.clone();
    let forwarded = Arc::new(AtomicU64::new(0));
    let counted = forwarded.clone();
    let weak = Arc::downgrade(&egress);
    let task = tokio::spawn(async move {
        let forward = async move {
            while let Some(record) = rx.recv().await {
                // Without the supervisor there is no run record left to write to.
                let _ = events.send(Event::Egress(record)).await;
                counted.fetch_add(1, Ordering::SeqCst);
            }
        };
        let serve = async move {
            let ended = egress.serve_control(control).await;
            // The last sender goes with the last connection task: then `forward` ends.
            drop(egress);
            ended
        };
        let (ended, ()) = tokio::join!(serve, forward);
        ended
    });
    Ok(EgressRun {
        task,
        egress: weak,
        produced,
        forwarded,
    })
}

/// The egress proxy of one run as [`spawn_for_run`] started it: its task, and how far its records
/// have got (for [`EgressRun::quiesce`]).
pub struct EgressRun {
    /// Ends when the forwarder's end closes (`Ok`) or the sender check refused the channel.
    pub task: JoinHandle<Result<(), ControlError>>,
    egress: std::sync::Weak<Egress>,
    produced: Arc<AtomicU64>,
    forwarded: Arc<AtomicU64>,
}

/// What [`EgressRun::quiesce`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quiet {
    /// Records sent as events so far.
    pub records: u64,
    /// Connections still open when the wait ended (0 unless it ran out).
    pub open: usize,
}

impl EgressRun {
    /// Records sent as [`Event::Egress`] so far.
    pub fn records_sent(&self) -> u64 {
        self.forwarded.load(Ordering::SeqCst)
    }

    /// Wait until no connection is open and every record made has been sent as an event, or
    /// `patience` has passed; say where things stand. Polls (every 5 ms): connections end on
    /// their own, when their clients close, and nothing signals "none left".
    pub async fn quiesce(&self, patience: Duration) -> Quiet {
        let deadline = Instant::now() + patience;
        loop {
            let open = self
                .egress
                .upgrade()
                .map(|e| e.open_connections())
                .unwrap_or(0);
            let records = self.records_sent();
            let settled = open == 0 && records == self.produced.load(Ordering::SeqCst);
            if settled || Instant::now() >= deadline {
                return Quiet { records, open };
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// The egress proxy of one run.
pub struct Egress {
    config: EgressConfig,
    resolver: Arc<dyn Resolve>,
    records: mpsc::Sender<EgressRecord>,
    live: Arc<Semaphore>,
    refusals: Arc<Semaphore>,
    next_id: AtomicU64,
    stop: watch::Sender<bool>,
    /// Records handed to `records` so far.
    produced: Arc<AtomicU64>,
}

/// What one connection amounted to.
struct Handled {
    protocol: EgressProtocol,
    host: String,
    port: u16,
    outcome: EgressOutcome,
}

impl Egress {
    /// A proxy that resolves with `resolver` and sends a record per connection to `records`.
    pub fn new(
        config: EgressConfig,
        resolver: Arc<dyn Resolve>,
        records: mpsc::Sender<EgressRecord>,
    ) -> Arc<Egress> {
        let cap = config.max_tunnels.min(Semaphore::MAX_PERMITS);
        Arc::new(Egress {
            config,
            resolver,
            records,
            live: Arc::new(Semaphore::new(cap)),
            refusals: Arc::new(Semaphore::new(cap)),
            next_id: AtomicU64::new(0),
            stop: watch::channel(false).0,
            produced: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The configuration being served.
    pub fn config(&self) -> &EgressConfig {
        &self.config
    }

    /// Connections being served or answered with a refusal right now.
    pub fn open_connections(&self) -> usize {
        let cap = self.config.max_tunnels.min(Semaphore::MAX_PERMITS);
        (cap - self.live.available_permits().min(cap))
            + (cap - self.refusals.available_permits().min(cap))
    }

    /// Serve one client connection in a task of its own.
    pub fn accept(self: &Arc<Self>, stream: TcpStream) {
        let (permit, permitted) = match self.live.clone().try_acquire_owned() {
            Ok(p) => (p, true),
            Err(_) => match self.refusals.clone().try_acquire_owned() {
                Ok(p) => (p, false),
                Err(_) => {
                    drop(stream);
                    let this = self.clone();
                    let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                    tokio::spawn(async move {
                        let detail = format!(
                            "closed unread: twice the cap of {} connections is in use",
                            this.config.max_tunnels
                        );
                        this.send_record(id, Instant::now(), Handled::denied_unread(detail))
                            .await;
                    });
                    return;
                }
            },
        };
        let this = self.clone();
        tokio::spawn(async move {
            this.serve(stream, permitted).await;
            drop(permit);
        });
    }

    /// End every connection of this proxy (each still sends its record) and wait until all have.
    pub async fn shutdown(&self) {
        self.stop.send_replace(true);
        let n =
            u32::try_from(self.config.max_tunnels.min(Semaphore::MAX_PERMITS)).unwrap_or(u32::MAX);
        let _live = self.live.acquire_many(n).await;
        let _refusing = self.refusals.acquire_many(n).await;
    }

    async fn send_record(&self, id: u64, started: Instant, h: Handled) {
        self.send(EgressRecord {
            server: None,
            id,
            protocol: h.protocol,
            host: printable(&h.host),
            port: h.port,
            outcome: h.outcome,
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: millis(started.elapsed()),
        })
        .await;
    }

    async fn send(&self, record: EgressRecord) {
        // Without a receiver the run is over; nothing is left to record into.
        if self.records.send(record).await.is_ok() {
            self.produced.fetch_add(1, Ordering::SeqCst);
        }
    }

    async fn serve(&self, mut client: TcpStream, permitted: bool) {
        let started = Instant::now();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let traffic = Traffic::new();
        let _ = client.set_nodelay(true);
        let source = self.source_of(&client);
        let server = source.as_ref().ok().and_then(|s| s.map(|s| s.name.clone()));
        let h = self.handle(&mut client, permitted, &traffic, source).await;
        self.send(EgressRecord {
            server,
            id,
            protocol: h.protocol,
            host: printable(&h.host),
            port: h.port,
            outcome: h.outcome,
            bytes_up: traffic.up.load(Ordering::Relaxed),
            bytes_down: traffic.down.load(Ordering::Relaxed),
            duration_ms: millis(started.elapsed()),
        })
        .await;
    }

    fn stopped(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.stop.subscribe();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    }

    /// The source a connection belongs to, by the address it was made to: `Ok(None)` on a
    /// channel without sources (every connection is judged by the channel's list).
    fn source_of(&self, client: &TcpStream) -> Result<Option<&Source>, String> {
        if self.config.sources.is_empty() {
            return Ok(None);
        }
        let local = client
            .local_addr()
            .map_err(|e| format!("the connection's own address is unknown ({e}); closed"))?;
        let ip = local.ip().to_canonical();
        self.config
            .sources
            .iter()
            .find(|s| s.address == ip)
            .map(Some)
            .ok_or_else(|| {
                format!(
                    "the connection was made to {ip}, which is no MCP server's proxy address \
                     (each server given network has its own; see its HTTPS_PROXY)"
                )
            })
    }

    async fn handle(
        &self,
        client: &mut TcpStream,
        permitted: bool,
        traffic: &Traffic,
        source: Result<Option<&Source>, String>,
    ) -> Handled {
        let mut h = Handled {
            protocol: EgressProtocol::Unknown,
            host: String::new(),
            port: 0,
            outcome: EgressOutcome::Denied {
                reason: EgressDenial::Shutdown,
                rule: None,
                detail: "the egress channel closed before the connection was made".into(),
            },
        };
        let cfg = &self.config;
        let read = tokio::time::timeout(cfg.request_timeout, request::read_request(client));
        let req = tokio::select! {
            r = read => r,
            () = self.stopped() => return h,
        };
        let req: ClientRequest = match req {
            Err(_) => {
                return h.deny(
                    EgressDenial::RequestTimeout,
                    None,
                    format!(
                        "no complete request within {} ms; the connection was closed",
                        cfg.request_timeout.as_millis()
                    ),
                )
            }
            Ok(Err(refusal)) => {
                h.protocol = refusal.protocol;
                h.host = refusal.host;
                h.port = refusal.port;
                answer_in(
                    client,
                    refusal.answer,
                    refusal.reason,
                    &refusal.detail,
                    None,
                )
                .await;
                return h.deny(refusal.reason, None, refusal.detail);
            }
            Ok(Ok(r)) => r,
        };
        h.protocol = req.protocol;
        h.host = req.host.clone();
        h.port = req.port;
        let target = format!("{}:{}", req.host, req.port);
        let allow = match &source {
            Ok(s) => s.map_or(&cfg.allow, |s| &s.allow),
            Err(detail) => {
                answer(client, h.protocol, EgressDenial::NotListed, detail, None).await;
                return h.deny(EgressDenial::NotListed, None, detail.clone());
            }
        };

        if !permitted {
            let detail = format!(
                "the run already has {} connections open, its cap",
                cfg.max_tunnels
            );
            answer(client, h.protocol, EgressDenial::TunnelCap, &detail, None).await;
            return h.deny(EgressDenial::TunnelCap, None, detail);
        }

        let rule = match decide(allow, &req.host, req.port) {
            Decision::Allowed { rule } => rule,
            Decision::Denied { reason } => {
                let kind = match &reason {
                    DenyReason::NotListed { .. } => EgressDenial::NotListed,
                    DenyReason::IpLiteral { .. } => EgressDenial::IpLiteral,
                    DenyReason::InvalidHost(_) => EgressDenial::InvalidHost,
                };
                let mut detail = reason.to_string();
                if kind == EgressDenial::NotListed {
                    match source {
                        Ok(Some(s)) => detail.push_str(&format!(
                            " (mcp_servers.{}.network_allow, within sandbox.network_allow)",
                            s.name
                        )),
                        _ => detail.push_str(" (sandbox.network_allow)"),
                    }
                }
                answer(client, h.protocol, kind, &detail, None).await;
                return h.deny(kind, None, detail);
            }
        };

        // The name passed the list; only now is it resolved, by us.
        let candidates: Vec<IpAddr> = match parse_host(&req.host) {
            Ok(Host::Address(ip)) => vec![ip],
            Ok(Host::Name(name)) => {
                let lookup = tokio::time::timeout(
                    cfg.connect_timeout,
                    self.resolver.resolve(&name, req.port),
                );
                let found = tokio::select! {
                    r = lookup => r,
                    () = self.stopped() => return h,
                };
                match found {
                    Ok(Ok(addrs)) if !addrs.is_empty() => addrs,
                    Ok(Ok(_)) | Ok(Err(_)) | Err(_) => {
                        let why = match found {
                            Ok(Err(e)) => e.to_string(),
                            Err(_) => "the lookup timed out".to_string(),
                            _ => "no addresses".to_string(),
                        };
                        let detail = format!("{name} does not resolve: {why}");
                        answer(client, h.protocol, EgressDenial::Unresolved, &detail, None).await;
                        return h.deny(EgressDenial::Unresolved, Some(rule), detail);
                    }
                }
            }
            // `decide` allowed it, so it parses; refuse rather than trust that.
            Err(e) => return h.deny(EgressDenial::InvalidHost, None, e.to_string()),
        };
        let mut admitted = Vec::new();
        let mut refused: Vec<(IpAddr, NonPublic)> = Vec::new();
        for ip in candidates {
            let ip = ip.to_canonical();
            if admitted.contains(&ip) || refused.iter().any(|(r, _)| *r == ip) {
                continue;
            }
            match admit_address(allow, ip, req.port) {
                Ok(_) => admitted.push(ip),
                Err(why) => refused.push((ip, why)),
            }
        }
        admitted.truncate(MAX_ADDRESSES);
        if admitted.is_empty() {
            let shown: Vec<String> = refused
                .iter()
                .take(4)
                .map(|(ip, why)| format!("{ip} is {why}"))
                .collect();
            let detail = format!(
                "{} resolves only to addresses that are not public ({}); the allow-list does \
                 not name them literally",
                req.host,
                shown.join("; ")
            );
            let public = format!(
                "{} resolves only to addresses that are not public (loopback, private, \
                 link-local, …); an address is reachable only when sandbox.network_allow names \
                 it literally",
                req.host
            );
            answer(
                client,
                h.protocol,
                EgressDenial::PrivateAddress,
                &public,
                None,
            )
            .await;
            return h.deny(EgressDenial::PrivateAddress, Some(rule), detail);
        }

        let mut last_err: Option<(SocketAddr, io::Error)> = None;
        let mut timed_out = 0usize;
        let mut upstream = None;
        for ip in &admitted {
            let addr = SocketAddr::new(*ip, req.port);
            let attempt = tokio::time::timeout(cfg.connect_timeout, TcpStream::connect(addr));
            let r = tokio::select! {
                r = attempt => r,
                () = self.stopped() => return h,
            };
            match r {
                Ok(Ok(s)) => {
                    upstream = Some((addr, s));
                    break;
                }
                Ok(Err(e)) => last_err = Some((addr, e)),
                Err(_) => {
                    timed_out += 1;
                    last_err = Some((
                        addr,
                        io::Error::new(io::ErrorKind::TimedOut, "connect timed out"),
                    ));
                }
            }
        }
        let Some((addr, upstream)) = upstream else {
            let (reason, kind) = if timed_out == admitted.len() {
                (EgressDenial::ConnectTimeout, Some(io::ErrorKind::TimedOut))
            } else {
                (
                    EgressDenial::ConnectFailed,
                    last_err.as_ref().map(|(_, e)| e.kind()),
                )
            };
            let why = last_err
                .as_ref()
                .map(|(_, e)| e.to_string())
                .unwrap_or_default();
            let tried: Vec<String> = admitted.iter().map(ToString::to_string).collect();
            let detail = format!(
                "could not connect to {target} (tried {}): {why}",
                tried.join(", ")
            );
            let public = format!("could not connect to {target}: {why}");
            answer(client, h.protocol, reason, &public, kind).await;
            return h.deny(reason, Some(rule), detail);
        };
        let _ = upstream.set_nodelay(true);

        let mut upstream = upstream;
        let opened = async {
            match h.protocol {
                EgressProtocol::HttpConnect => client.write_all(request::HTTP_ESTABLISHED).await?,
                EgressProtocol::Socks5 => {
                    client
                        .write_all(&socks_reply(request::socks_reply::SUCCEEDED))
                        .await?
                }
                EgressProtocol::HttpForward | EgressProtocol::Unknown => {}
            }
            for part in [
                req.forward_head.as_deref().unwrap_or_default(),
                &req.leftover,
            ] {
                if !part.is_empty() {
                    upstream.write_all(part).await?;
                    traffic.up.fetch_add(part.len() as u64, Ordering::Relaxed);
                }
            }
            Ok::<(), io::Error>(())
        }
        .await;
        let end = match opened {
            Err(_) => TunnelEnd::Error,
            Ok(()) => {
                relay::relay(
                    client,
                    &upstream,
                    cfg.relay,
                    cfg.idle_timeout,
                    traffic,
                    h.protocol == EgressProtocol::HttpForward,
                    self.stopped(),
                )
                .await
            }
        };
        h.outcome = EgressOutcome::Allowed {
            rule,
            address: addr.to_string(),
            end,
        };
        h
    }
}

impl Handled {
    fn deny(mut self, reason: EgressDenial, rule: Option<String>, detail: String) -> Handled {
        self.outcome = EgressOutcome::Denied {
            reason,
            rule,
            detail,
        };
        self
    }

    fn denied_unread(detail: String) -> Handled {
        Handled {
            protocol: EgressProtocol::Unknown,
            host: String::new(),
            port: 0,
            outcome: EgressOutcome::Denied {
                reason: EgressDenial::TunnelCap,
                rule: None,
                detail,
            },
        }
    }
}

/// Tell the client why, in its protocol (nothing for an unrecognised one).
async fn answer(
    client: &mut TcpStream,
    protocol: EgressProtocol,
    reason: EgressDenial,
    text: &str,
    io_kind: Option<io::ErrorKind>,
) {
    answer_in(
        client,
        Answer::for_protocol(protocol),
        reason,
        text,
        io_kind,
    )
    .await
}

async fn answer_in(
    client: &mut TcpStream,
    dialect: Answer,
    reason: EgressDenial,
    text: &str,
    io_kind: Option<io::ErrorKind>,
) {
    let bytes = match dialect {
        Answer::Http => {
            let (status, phrase) = http_status(reason);
            request::http_error(status, phrase, text)
        }
        Answer::Socks => socks_reply(socks_code(reason, io_kind)).to_vec(),
        Answer::None => Vec::new(),
    };
    // Answer, then read what the client is still sending until it closes: closing with unread
    // bytes would reset the connection and could destroy the answer before the client reads it.
    let _ = tokio::time::timeout(ANSWER_TIMEOUT, async {
        client.write_all(&bytes).await?;
        client.shutdown().await?;
        let mut sink = [0u8; 4096];
        let mut drained = 0usize;
        while drained < MAX_DRAIN {
            match client.read(&mut sink).await? {
                0 => break,
                n => drained += n,
            }
        }
        Ok::<(), io::Error>(())
    })
    .await;
}

/// A duration in whole milliseconds, saturating at `u64::MAX` (about 585 million years).
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn http_status(reason: EgressDenial) -> (u16, &'static str) {
    match reason {
        EgressDenial::NotListed | EgressDenial::PrivateAddress | EgressDenial::IpLiteral => {
            (403, "Forbidden")
        }
        EgressDenial::InvalidHost | EgressDenial::BadRequest => (400, "Bad Request"),
        EgressDenial::UnsupportedCommand => (405, "Method Not Allowed"),
        EgressDenial::TunnelCap | EgressDenial::PeerMismatch | EgressDenial::Shutdown => {
            (503, "Service Unavailable")
        }
        EgressDenial::Unresolved | EgressDenial::ConnectFailed => (502, "Bad Gateway"),
        EgressDenial::ConnectTimeout => (504, "Gateway Timeout"),
        EgressDenial::RequestTimeout => (408, "Request Timeout"),
    }
}

fn socks_code(reason: EgressDenial, io_kind: Option<io::ErrorKind>) -> u8 {
    use request::socks_reply as r;
    match reason {
        EgressDenial::NotListed
        | EgressDenial::PrivateAddress
        | EgressDenial::IpLiteral
        | EgressDenial::InvalidHost => r::NOT_ALLOWED,
        EgressDenial::UnsupportedCommand => r::COMMAND_NOT_SUPPORTED,
        EgressDenial::BadRequest => r::ADDRESS_TYPE_NOT_SUPPORTED,
        EgressDenial::Unresolved => r::HOST_UNREACHABLE,
        EgressDenial::ConnectTimeout => r::TTL_EXPIRED,
        EgressDenial::ConnectFailed => match io_kind {
            Some(io::ErrorKind::ConnectionRefused) => r::CONNECTION_REFUSED,
            Some(io::ErrorKind::NetworkUnreachable) => r::NETWORK_UNREACHABLE,
            _ => r::HOST_UNREACHABLE,
        },
        EgressDenial::TunnelCap
        | EgressDenial::RequestTimeout
        | EgressDenial::PeerMismatch
        | EgressDenial::Shutdown => r::GENERAL_FAILURE,
    }
}

/// A host as the client sent it, safe to store and to print: visible ASCII kept, everything else
/// escaped, at most 255 characters.
fn printable(host: &str) -> String {
    let mut out = String::new();
    for (i, c) in host.chars().enumerate() {
        if i == MAX_RECORDED_HOST {
            out.push('…');
            break;
        }
        if c.is_ascii_graphic() {
            out.push(c);
        } else {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_hosts_are_printable_and_bounded() {
        assert_eq!(printable("example.com"), "example.com");
        assert_eq!(printable("a\u{1b}[31mb"), "a\\u{1b}[31mb");
        assert_eq!(printable("a b\nc"), "a\\u{20}b\\u{a}c");
        assert_eq!(printable("bücher"), "b\\u{fc}cher");
        let long = "x".repeat(300);
        assert_eq!(printable(&long).chars().count(), 256);
    }
}
