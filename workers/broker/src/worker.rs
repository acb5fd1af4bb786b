//! The broker worker process: the supervisor channel (fd 3) configures it and asks what
//! credentials exist; the direct channel (fd 4) carries the model worker's HTTP requests, the
//! mcp worker's channel (fd 5) the exchanges with remote MCP servers, and the egress control
//! socket (fd 6, only in a run that allows network for commands) the connections of the tools
//! worker's commands, served once the supervisor sends `ConfigureEgress` (with the forwarder's
//! pid, which only it can find); the mcp worker's egress control socket (fd 7, only when a run's
//! MCP stdio servers ask for network) likewise, once `ConfigureMcpEgress` names its forwarder and
//! each server's list. The numbers are the role table's ([`hanzo_ipc::role::CHANNEL_ENDS`]).
//!
//! When the model or mcp worker restarts, the broker is not restarted with it: the supervisor
//! sends it the new pair's end on its adopt socket ([`transport::ADOPT_FD`], 8), tagged `model`,
//! `mcp` or `mcp-egress`, and the broker serves that end in place of the dead one ([`adopt`]).

use crate::credentials::CredentialStore;
use crate::egress::EgressRun;
use crate::fetch::Broker;
use crate::oauth::mcp::McpServerAuth;
use crate::oauth::OAuthError;
use hanzo_ipc::channel::{serve, EventSink, Handler, ItemSink, ServerWriter};
use hanzo_ipc::frame::DEFAULT_MAX_FRAME;
use hanzo_ipc::proto::{Protocol, RemoteError, RemoteErrorKind};
use hanzo_ipc::role::{fd as role_fd, Channel, Role};
use hanzo_ipc::roles::broker::{BrokerProtocol, EgressSettings, Item, Request, Response};
use hanzo_ipc::roles::http::{self, direct_handshake, HttpProtocol};
use hanzo_ipc::roles::mcphttp::{self, McpHttpProtocol};
use hanzo_ipc::roles::{CommonEvent, LogLevel};
use hanzo_ipc::socket::WriteHalf;
use hanzo_ipc::transport;
use hanzo_worker::{handle_common, WorkerContext, WorkerOptions};
use std::future::Future;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// The broker worker's entry point (`hanzo-dev __worker broker …`); returns the exit code.
pub fn worker_main(opts: WorkerOptions) -> i32 {
    // Adopted (close-on-exec, checked to be a socket) before the runtime confines the process;
    // a broker started without the mcp worker has none.
    // The numbers are the role table's (`hanzo_ipc::role::CHANNEL_ENDS`); a channel the table
    // does not give the broker would not compile.
    const MCP_DIRECT_FD: i32 = role_fd(Channel::McpBroker, Role::Broker);
    const EGRESS_CONTROL_FD: i32 = role_fd(Channel::ToolsEgress, Role::Broker);
    const MCP_EGRESS_CONTROL_FD: i32 = role_fd(Channel::McpEgress, Role::Broker);
    let mcp_direct = hanzo_sandbox::confine::adopt_inherited_fd(MCP_DIRECT_FD).ok();
    // Adopted before confinement, like the channels: present only when the run allows network.
    let egress_control = hanzo_sandbox::confine::adopt_inherited_fd(EGRESS_CONTROL_FD).ok();
    // The mcp worker's egress control socket: present only when a run's MCP servers ask for
    // network.
    let mcp_egress_control = hanzo_sandbox::confine::adopt_inherited_fd(MCP_EGRESS_CONTROL_FD).ok();
    // New ends of the direct channels, from the supervisor, while the broker runs.
    let adopt_socket = hanzo_sandbox::confine::adopt_inherited_fd(transport::ADOPT_FD).ok();
    hanzo_worker::run_with::<BrokerProtocol, _, _>(opts, |ctx: WorkerContext<BrokerProtocol>| {
        // Loaded after confinement: the credential directory is the only path it can reach.
        let creds = CredentialStore::load(
            |k| std::env::var(k).ok(),
            ctx.opts.ctx.config_dir.as_deref(),
        );
        let broker = match Broker::new(creds) {
            Ok(b) => Some(Arc::new(b.with_config_dir(ctx.opts.ctx.config_dir.clone()))),
            Err(e) => {
                eprintln!("hanzo-dev broker worker: {e}");
                None
            }
        };
        if let Some(b) = &broker {
            let events = ctx.events.clone();
            let warnings = b.warnings();
            tokio::spawn(async move {
                for message in warnings {
                    let _ = events
                        .send(hanzo_ipc::roles::broker::Event::Common(CommonEvent::Log {
                            level: LogLevel::Warn,
                            message,
                        }))
                        .await;
                }
            });
            if let Some(fd) = ctx.direct {
                let handler = DirectHandler { broker: b.clone() };
                tokio::spawn(serve_direct::<HttpProtocol, _>(fd, handler, "direct"));
            }
            if let Some(fd) = mcp_direct {
                let handler = McpDirectHandler { broker: b.clone() };
                tokio::spawn(serve_direct::<McpHttpProtocol, _>(fd, handler, "mcp"));
            }
        }
        let traces = trace_sender(&ctx.events);
        let jwks = crate::jwks::jwks_client()
            .map_err(|e| eprintln!("hanzo-dev broker worker: {e}"))
            .ok();
        let egress = Arc::new(EgressSlot {
            tools: EgressChannel::new(egress_control),
            mcp: EgressChannel::new(mcp_egress_control),
            events: ctx.events.clone(),
        });
        if let Some(sock) = adopt_socket {
            tokio::spawn(adopt(sock, broker.clone(), egress.clone()));
        }
        BrokerHandler {
            broker,
            traces,
            jwks,
            egress,
        }
    })
}

/// Serve each end the supervisor sends on the adopt socket in place of the dead one it replaces:
/// `model` and `mcp` are direct channels (served at once; the old one ended with its peer),
/// `mcp-egress` the mcp worker's egress control socket (kept until `ConfigureMcpEgress` names
/// the new forwarder). Ends when the supervisor's end closes.
async fn adopt(sock: OwnedFd, broker: Option<Arc<Broker>>, egress: Arc<EgressSlot>) {
    use std::os::fd::AsFd;
    use tokio::io::Interest;
    let sock = std::os::unix::net::UnixDatagram::from(sock);
    let sock = match sock
        .set_nonblocking(true)
        .and_then(|()| tokio::net::UnixDatagram::from_std(sock))
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("hanzo-dev broker worker: adopt socket: {e}");
            return;
        }
    };
    loop {
        if let Err(e) = sock.readable().await {
            eprintln!("hanzo-dev broker worker: adopt socket: {e}");
            return;
        }
        let mut tag = [0u8; 32];
        let got = match sock.try_io(Interest::READABLE, || {
            transport::recv_with_credentials(sock.as_fd(), &mut tag, 1)
        }) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                eprintln!("hanzo-dev broker worker: adopt socket: {e}");
                return;
            }
        };
        if got.len == 0 && got.fds.is_empty() {
            return;
        }
        let mut fds = got.fds.into_iter();
        let (Some(end), None, false) = (fds.next(), fds.next(), got.truncated) else {
            eprintln!("hanzo-dev broker worker: adopt socket: a message without exactly one end");
            continue;
        };
        match (&tag[..got.len], &broker) {
            (b"model", Some(b)) => {
                let handler = DirectHandler { broker: b.clone() };
                tokio::spawn(serve_direct::<HttpProtocol, _>(end, handler, "direct"));
            }
            (b"mcp", Some(b)) => {
                let handler = McpDirectHandler { broker: b.clone() };
                tokio::spawn(serve_direct::<McpHttpProtocol, _>(end, handler, "mcp"));
            }
            (b"mcp-egress", _) => egress.mcp.adopt(end),
            // No broker (its credentials could not load): nothing to serve on a new end either.
            (b"model" | b"mcp", None) => {}
            (other, _) => eprintln!(
                "hanzo-dev broker worker: adopt socket: unknown tag {:?}",
                String::from_utf8_lossy(other)
            ),
        }
    }
}

/// How long `EgressQuiesce` waits for open connections to end.
const QUIESCE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

/// The egress proxy's control sockets (the tools worker's and the mcp worker's, each with its
/// own allow-list) until each is configured, then the proxy serving it.
struct EgressSlot {
    tools: EgressChannel,
    mcp: EgressChannel,
    events: EventSink<BrokerProtocol, WriteHalf>,
}

struct EgressChannel {
    control: Mutex<Option<OwnedFd>>,
    run: Mutex<Option<Arc<EgressRun>>>,
    /// Wakes a `configure` waiting for an adopted control socket.
    adopted: tokio::sync::Notify,
}

/// How long `ConfigureMcpEgress` waits for the control socket of a restarted mcp worker, which
/// the supervisor sent before the worker was even up (so it is normally there already).
const ADOPT_PATIENCE: Duration = Duration::from_secs(5);

impl EgressChannel {
    fn new(control: Option<OwnedFd>) -> EgressChannel {
        EgressChannel {
            control: Mutex::new(control),
            run: Mutex::new(None),
            adopted: tokio::sync::Notify::new(),
        }
    }

    /// The control socket of a restarted peer: it waits for the next configuration. The proxy
    /// of the dead one ends on its own (its forwarder's end closed).
    fn adopt(&self, control: OwnedFd) {
        *lock(&self.control) = Some(control);
        self.adopted.notify_one();
    }
}

impl EgressSlot {
    async fn configure(
        &self,
        mcp: bool,
        settings: &EgressSettings,
    ) -> Result<Response, RemoteError> {
        let refused = |m: String| RemoteError::new(RemoteErrorKind::Refused, m);
        let (channel, whose) = if mcp {
            (&self.mcp, "the mcp worker's")
        } else {
            (&self.tools, "the tools worker's")
        };
        // A restarted mcp worker's socket may still be on its way (the adopt socket): only
        // when one was served before.
        if mcp && lock(&channel.control).is_none() && lock(&channel.run).is_some() {
            let _ = tokio::time::timeout(ADOPT_PATIENCE, async {
                while lock(&channel.control).is_none() {
                    channel.adopted.notified().await;
                }
            })
            .await;
        }
        let control = lock(&channel.control).take().ok_or_else(|| {
            refused(format!(
                "the broker holds no egress control socket for {whose} servers (it was started \
                 without one, or it is served already)"
            ))
        })?;
        let run = crate::egress::spawn_for_run(settings, control, self.events.clone())
            .map_err(|e| refused(format!("egress settings: {e}")))?;
        *lock(&channel.run) = Some(Arc::new(run));
        Ok(Response::EgressConfigured)
    }

    async fn quiesce(&self) -> Response {
        let mut records = 0;
        let mut open = 0;
        for channel in [&self.tools, &self.mcp] {
            let run = lock(&channel.run).clone();
            if let Some(run) = run {
                let quiet = run.quiesce(QUIESCE_PATIENCE).await;
                records += quiet.records;
                open += quiet.open;
            }
        }
        Response::EgressQuiet {
            records,
            open: u32::try_from(open).unwrap_or(u32::MAX),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // An option, replaced whole: consistent between statements.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Serves one direct channel (fd `fd`, after the handshake) with `handler` until it ends;
/// `name` labels the message when it ends with an error.
async fn serve_direct<P, H>(fd: OwnedFd, handler: H, name: &str)
where
    P: Protocol,
    H: Handler<P, WriteHalf>,
{
    let result = async {
        let (mut reader, mut writer) = transport::split(fd, DEFAULT_MAX_FRAME)?;
        direct_handshake(&mut reader, &mut writer).await?;
        serve::<P, _, _, _>(reader, ServerWriter::new(writer), Arc::new(handler)).await
    }
    .await;
    if let Err(e) = result {
        eprintln!("hanzo-dev broker worker: {name} channel ended: {e}");
    }
}

struct BrokerHandler {
    broker: Option<Arc<Broker>>,
    /// The OTLP/HTTP sender (`None`: it could not be built; exports are refused).
    traces: Option<crate::traces::TraceSender>,
    /// The client for JWT key sets (`None`: it could not be built; fetches are refused).
    jwks: Option<reqwest::Client>,
    egress: Arc<EgressSlot>,
}

/// The trace sender with the collector headers of this process's environment; a malformed
/// header entry is named (by key) in a warning to the supervisor.
fn trace_sender(
    events: &EventSink<BrokerProtocol, WriteHalf>,
) -> Option<crate::traces::TraceSender> {
    let (headers, warnings) = crate::traces::headers_from_env(|k| std::env::var(k).ok());
    let sender = crate::traces::TraceSender::new(headers);
    let mut messages = warnings;
    if let Err(e) = &sender {
        messages.push(e.clone());
    }
    if !messages.is_empty() {
        let events = events.clone();
        tokio::spawn(async move {
            for message in messages {
                let _ = events
                    .send(hanzo_ipc::roles::broker::Event::Common(CommonEvent::Log {
                        level: LogLevel::Warn,
                        message,
                    }))
                    .await;
            }
        });
    }
    sender.ok()
}

impl Handler<BrokerProtocol, WriteHalf> for BrokerHandler {
    async fn handle(
        &self,
        request: Request,
        items: ItemSink<BrokerProtocol, WriteHalf>,
    ) -> Result<Response, RemoteError> {
        match request {
            Request::Common(c) => handle_common::<BrokerProtocol, _>(c, items)
                .await
                .map(Response::Common),
            Request::AllowEndpoints(endpoints) => {
                let broker = self.broker()?;
                for e in &endpoints {
                    broker.allow(e.provider, &e.base_url).map_err(|err| {
                        RemoteError::new(RemoteErrorKind::Refused, err.to_string())
                    })?;
                }
                Ok(Response::Configured {
                    endpoints: u32::try_from(endpoints.len()).unwrap_or(u32::MAX),
                })
            }
            Request::AllowMcpServers(remotes) => {
                let broker = self.broker()?;
                let n = broker
                    .allow_mcp_servers(remotes)
                    .map_err(|e| RemoteError::new(RemoteErrorKind::Refused, e.to_string()))?;
                Ok(Response::Configured {
                    endpoints: u32::try_from(n).unwrap_or(u32::MAX),
                })
            }
            Request::AllowMcpSecrets(grants) => {
                let n = self
                    .broker()?
                    .allow_mcp_secrets(grants)
                    .map_err(|e| RemoteError::new(RemoteErrorKind::Refused, e.to_string()))?;
                Ok(Response::Configured {
                    endpoints: u32::try_from(n).unwrap_or(u32::MAX),
                })
            }
            Request::DescribeCredentials => Ok(Response::Credentials(self.broker()?.report())),
            Request::AuthStatus => Ok(Response::AuthStatus(self.broker()?.status())),
            Request::ConfigureEgress(settings) => self.egress.configure(false, &settings).await,
            Request::ConfigureMcpEgress(settings) => self.egress.configure(true, &settings).await,
            Request::EgressQuiesce => Ok(self.egress.quiesce().await),
            Request::ExportTraces(export) => {
                let sender = self.traces.as_ref().ok_or_else(|| {
                    RemoteError::new(
                        RemoteErrorKind::Internal,
                        "the broker has no trace export client",
                    )
                })?;
                match sender.send(export).await {
                    Ok(status) => Ok(Response::TracesExported { status }),
                    Err(e @ crate::traces::ExportError::BadEndpoint(_))
                    | Err(e @ crate::traces::ExportError::BadContentType(_)) => {
                        Err(RemoteError::new(RemoteErrorKind::Refused, e.to_string()))
                    }
                    Err(e) => Err(RemoteError::new(RemoteErrorKind::Internal, e.to_string())),
                }
            }
            Request::FetchJwks(req) => {
                let client = self.jwks.as_ref().ok_or_else(|| {
                    RemoteError::new(RemoteErrorKind::Internal, "the broker has no JWKS client")
                })?;
                match crate::jwks::fetch(client, &req).await {
                    Ok(doc) => Ok(Response::Jwks(doc)),
                    Err(e) if e.is_refusal() => {
                        Err(RemoteError::new(RemoteErrorKind::Refused, e.to_string()))
                    }
                    Err(e) => Err(RemoteError::new(RemoteErrorKind::Internal, e.to_string())),
                }
            }
            Request::Logout { provider } => {
                let broker = self.broker()?;
                let removed = broker
                    .remove_entry(&provider)
                    .map_err(|e| refused(broker, &e))?;
                Ok(Response::LoggedOut { provider, removed })
            }
            Request::McpLogin(req) => {
                let broker = self.broker()?;
                // The same checks as for the servers a run may reach (scheme, loopback, userinfo).
                crate::mcp_http::McpServers::new(vec![req.remote.clone()])
                    .map_err(|e| RemoteError::new(RemoteErrorKind::Refused, e.to_string()))?;
                let auth = McpServerAuth {
                    server: req.remote.server.clone(),
                    url: req.remote.url.clone(),
                    client_id: req.remote.client_id.clone(),
                    scopes: req.remote.scopes.clone(),
                    client_metadata_url: req.remote.client_metadata_url.clone(),
                    client_env: req.remote.client_env.clone(),
                };
                let timeout = Duration::from_secs(u64::from(req.timeout_secs.max(1)));
                let (tx, mut rx) = mpsc::channel(8);
                let login = async move {
                    let r = broker.mcp_user_login(&auth, req.device, timeout, &tx).await;
                    drop(tx);
                    r
                };
                let pump = async {
                    while let Some(p) = rx.recv().await {
                        let _ = items.send(Item::Login(p)).await;
                    }
                };
                let (outcome, ()) = tokio::join!(login, pump);
                outcome
                    .map(Response::LoggedIn)
                    .map_err(|e| refused(broker, &e))
            }
            Request::Login(req) => {
                let broker = self.broker()?;
                let (tx, mut rx) = mpsc::channel(8);
                let login = async move {
                    let r = broker.login(&req, &tx).await;
                    drop(tx);
                    r
                };
                let pump = async {
                    while let Some(p) = rx.recv().await {
                        // The CLI went away: the login ends when this request is cancelled.
                        let _ = items.send(Item::Login(p)).await;
                    }
                };
                let (outcome, ()) = tokio::join!(login, pump);
                outcome
                    .map(Response::LoggedIn)
                    .map_err(|e| refused(broker, &e))
            }
        }
    }
}

/// An OAuth failure as the CLI sees it: the message, scrubbed of every secret the broker holds.
fn refused(broker: &Broker, e: &OAuthError) -> RemoteError {
    RemoteError::new(RemoteErrorKind::Refused, broker.scrub_text(&e.to_string()))
}

impl BrokerHandler {
    fn broker(&self) -> Result<&Broker, RemoteError> {
        self.broker.as_deref().ok_or_else(|| {
            RemoteError::new(
                RemoteErrorKind::Internal,
                "the broker's HTTP client failed to start",
            )
        })
    }
}

/// The model worker's channel: a request names a provider credential, checked against the
/// provider allow-list ([`Broker::fetch`]).
struct DirectHandler {
    broker: Arc<Broker>,
}

impl<W: tokio::io::AsyncWrite + Unpin + Send + 'static> Handler<HttpProtocol, W> for DirectHandler {
    async fn handle(
        &self,
        request: http::Request,
        items: ItemSink<HttpProtocol, W>,
    ) -> Result<http::Response, RemoteError> {
        let http::Request::Send(req) = request;
        relay(
            &items,
            |tx| async move { self.broker.fetch(req, &tx).await },
        )
        .await
    }
}

/// The mcp worker's channel: an exchange names a configured MCP server, checked against the
/// servers the supervisor allowed, and carries only that server's token ([`Broker::fetch_mcp`]);
/// a stdio server's secrets are given only when the supervisor granted each to that server
/// ([`Broker::resolve_mcp_secrets`]).
struct McpDirectHandler {
    broker: Arc<Broker>,
}

impl<W: tokio::io::AsyncWrite + Unpin + Send + 'static> Handler<McpHttpProtocol, W>
    for McpDirectHandler
{
    async fn handle(
        &self,
        request: mcphttp::Request,
        items: ItemSink<McpHttpProtocol, W>,
    ) -> Result<mcphttp::Response, RemoteError> {
        match request {
            mcphttp::Request::Send(req) => {
                relay(
                    &items,
                    |tx| async move { self.broker.fetch_mcp(req, &tx).await },
                )
                .await
                .map(mcphttp::Response::Http)
            }
            mcphttp::Request::ResolveSecrets(req) => match self.broker.resolve_mcp_secrets(&req) {
                Ok(values) => Ok(mcphttp::Response::Secrets(values)),
                Err(e) => {
                    // Names only: which server asked for what it was not granted.
                    eprintln!("hanzo-dev broker worker: refused: {e}");
                    Err(RemoteError::new(RemoteErrorKind::Refused, e.to_string()))
                }
            },
        }
    }
}

/// Runs one exchange of a direct channel: `fetch` streams its items into the sender it is given
/// (and drops it when done) while they are relayed to the requester; the answer is `fetch`'s,
/// unless relaying an item failed.
async fn relay<P, W, F, Fut>(
    items: &ItemSink<P, W>,
    fetch: F,
) -> Result<http::Response, RemoteError>
where
    P: Protocol<Item = http::Item>,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
    F: FnOnce(mpsc::Sender<http::Item>) -> Fut,
    Fut: Future<Output = http::Response>,
{
    let (tx, mut rx) = mpsc::channel(16);
    let fetch = fetch(tx);
    let pump = async {
        while let Some(item) = rx.recv().await {
            items
                .send(item)
                .await
                .map_err(|e| RemoteError::new(RemoteErrorKind::Internal, e.to_string()))?;
        }
        Ok::<(), RemoteError>(())
    };
    let (response, pumped) = tokio::join!(fetch, pump);
    pumped?;
    Ok(response)
}
