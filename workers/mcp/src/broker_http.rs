//! The mcp worker's [`HttpClient`]: the broker, over the mcp ↔ broker direct channel (fd 4,
//! `hanzo_ipc::roles::mcphttp`). The worker has no socket of its own; every exchange names the
//! configured server it is for, and the broker decides whether the URL may be reached and which
//! token (if any) goes with it. Nothing credential-bearing comes back. The same channel carries
//! the one exception, [`BrokerLink::resolve_secrets`]: the secrets a stdio server's environment
//! names, which the broker gives only for what the supervisor granted that server.
//!
//! The channel is opened (handshake) at the first exchange, within [`HANDSHAKE_TIMEOUT`]: a
//! worker started without a broker (a command that runs the mcp worker alone) fails its remote
//! servers with a clear error instead of waiting.

use crate::http::HttpResponse;
use crate::http::{HttpBody, HttpClient, HttpError, HttpErrorKind, HttpHead, HttpRequest};
use crate::BoxFuture;
use hanzo_ipc::channel::{Client, ResponseStream, StreamPart};
use hanzo_ipc::frame::DEFAULT_MAX_FRAME;
use hanzo_ipc::roles::http::{self, direct_handshake, HttpFailure, HttpFailureKind};
use hanzo_ipc::roles::mcphttp::{
    McpHttpProtocol, McpHttpRequest, McpSecretRequest, Request, ResolvedSecret, Response,
};
use hanzo_ipc::socket::WriteHalf;
use hanzo_ipc::transport;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

/// How long the broker may take to answer the channel's handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

type BrokerClient = Client<McpHttpProtocol, WriteHalf>;

enum LinkState {
    /// The end of the channel, not yet opened.
    Fd(OwnedFd),
    Open(Arc<BrokerClient>),
    /// Opening failed (or there is no channel): why.
    Broken(String),
}

/// The worker's link to the broker, shared by every remote server.
pub struct BrokerLink {
    state: tokio::sync::Mutex<LinkState>,
}

impl BrokerLink {
    /// A link over `fd` (the worker's fd 4), or one that fails every exchange when the worker was
    /// started without it.
    pub fn new(fd: Option<OwnedFd>) -> BrokerLink {
        let state = match fd {
            Some(fd) => LinkState::Fd(fd),
            None => LinkState::Broken(
                "the mcp worker has no channel to the broker, so remote MCP servers cannot be \
                 reached"
                    .into(),
            ),
        };
        BrokerLink {
            state: tokio::sync::Mutex::new(state),
        }
    }

    async fn client(&self) -> Result<Arc<BrokerClient>, HttpError> {
        let mut state = self.state.lock().await;
        let current = std::mem::replace(&mut *state, LinkState::Broken(String::new()));
        let next = match current {
            LinkState::Open(c) => LinkState::Open(c),
            LinkState::Broken(why) => LinkState::Broken(why),
            LinkState::Fd(fd) => match tokio::time::timeout(HANDSHAKE_TIMEOUT, open(fd)).await {
                Ok(Ok(c)) => LinkState::Open(Arc::new(c)),
                Ok(Err(why)) => LinkState::Broken(why),
                Err(_) => LinkState::Broken(format!(
                    "the broker did not answer on the mcp channel within {HANDSHAKE_TIMEOUT:?} \
                     (was it started?), so remote MCP servers cannot be reached"
                )),
            },
        };
        *state = next;
        match &*state {
            LinkState::Open(c) => Ok(c.clone()),
            LinkState::Broken(why) => Err(HttpError {
                kind: HttpErrorKind::Connect,
                message: why.clone(),
            }),
            LinkState::Fd(_) => unreachable!("replaced above"),
        }
    }

    /// The values of the secrets `names` that stdio server `server` is to be spawned with, as
    /// the broker holds them (`None`: it holds no such variable). An error says why the broker
    /// gave none (it was not asked for a pair the supervisor granted, or it cannot be reached);
    /// it never holds a value.
    pub async fn resolve_secrets(
        &self,
        server: &str,
        names: Vec<String>,
    ) -> Result<Vec<ResolvedSecret>, String> {
        let client = self.client().await.map_err(|e| e.message)?;
        let asked = names.clone();
        match client
            .call(Request::ResolveSecrets(McpSecretRequest {
                server: server.to_string(),
                names,
            }))
            .await
        {
            Ok(Response::Secrets(values))
                if values.len() == asked.len()
                    && values.iter().zip(&asked).all(|(v, n)| v.name == *n) =>
            {
                Ok(values)
            }
            Ok(_) => Err("the broker answered the request for secrets out of order".into()),
            Err(e) => Err(format!("the broker gave no secret: {e}")),
        }
    }

    /// The [`HttpClient`] of remote server `server`.
    pub fn for_server(self: &Arc<Self>, server: &str) -> Arc<dyn HttpClient> {
        Arc::new(ServerHttp {
            link: self.clone(),
            server: server.to_string(),
        })
    }
}

async fn open(fd: OwnedFd) -> Result<BrokerClient, String> {
    let (mut reader, mut writer) =
        transport::split(fd, DEFAULT_MAX_FRAME).map_err(|e| format!("mcp channel: {e}"))?;
    direct_handshake(&mut reader, &mut writer)
        .await
        .map_err(|e| format!("mcp channel to the broker: {e}"))?;
    let (client, _events, _end) = Client::<McpHttpProtocol, _>::start(reader, writer);
    Ok(client)
}

/// One remote server's exchanges through the broker.
struct ServerHttp {
    link: Arc<BrokerLink>,
    server: String,
}

fn from_failure(f: HttpFailure) -> HttpError {
    HttpError {
        kind: match f.kind {
            HttpFailureKind::NotAllowed => HttpErrorKind::NotAllowed,
            HttpFailureKind::NoCredential => HttpErrorKind::NoCredential,
            HttpFailureKind::BadRequest => HttpErrorKind::BadRequest,
            HttpFailureKind::Connect => HttpErrorKind::Connect,
            HttpFailureKind::Body => HttpErrorKind::Body,
        },
        message: f.message,
    }
}

fn connect_error(message: String) -> HttpError {
    HttpError {
        kind: HttpErrorKind::Connect,
        message,
    }
}

impl HttpClient for ServerHttp {
    fn send(&self, request: HttpRequest) -> BoxFuture<'_, Result<HttpResponse, HttpError>> {
        Box::pin(async move {
            let client = self.link.client().await?;
            let mut stream = client
                .call_stream(Request::Send(McpHttpRequest {
                    server: self.server.clone(),
                    method: request.method,
                    url: request.url,
                    headers: request.headers,
                    body: request.body,
                }))
                .await
                .map_err(|e| connect_error(format!("cannot reach the broker: {e}")))?;
            match stream.next().await {
                Some(Ok(StreamPart::Item(http::Item::Head(head)))) => Ok(HttpResponse {
                    head: HttpHead {
                        status: head.status,
                        headers: head.headers,
                    },
                    body: Box::new(BrokerBody {
                        stream,
                        ended: false,
                    }),
                }),
                Some(Ok(StreamPart::Done(Response::Http(http::Response::Failed(f))))) => {
                    Err(from_failure(f))
                }
                Some(Ok(_)) => Err(connect_error(
                    "the broker answered out of order (no response head first)".into(),
                )),
                Some(Err(e)) => Err(connect_error(format!("the broker failed: {e}"))),
                None => Err(connect_error("the broker closed the request".into())),
            }
        })
    }
}

struct BrokerBody {
    stream: ResponseStream<McpHttpProtocol, WriteHalf>,
    ended: bool,
}

impl HttpBody for BrokerBody {
    fn next_chunk(&mut self) -> BoxFuture<'_, Option<Result<Vec<u8>, HttpError>>> {
        Box::pin(async move {
            if self.ended {
                return None;
            }
            let out = match self.stream.next().await {
                Some(Ok(StreamPart::Item(http::Item::Body(b)))) => return Some(Ok(b)),
                Some(Ok(StreamPart::Item(http::Item::Head(_)))) => Some(Err(HttpError {
                    kind: HttpErrorKind::Body,
                    message: "the broker sent a second response head".into(),
                })),
                Some(Ok(StreamPart::Done(Response::Http(http::Response::Done { .. })))) | None => {
                    None
                }
                Some(Ok(StreamPart::Done(Response::Http(http::Response::Failed(f))))) => {
                    Some(Err(from_failure(f)))
                }
                Some(Ok(StreamPart::Done(Response::Secrets(_)))) => Some(Err(HttpError {
                    kind: HttpErrorKind::Body,
                    message: "the broker answered an exchange with secrets".into(),
                })),
                Some(Err(e)) => Some(Err(HttpError {
                    kind: HttpErrorKind::Body,
                    message: format!("the broker failed mid-body: {e}"),
                })),
            };
            self.ended = true;
            out
        })
    }
}
