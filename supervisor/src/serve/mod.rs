//! `hanzo-dev serve`: the local agents API (HIP-1210's surface) over a unix socket (default,
//! mode 0600) or a loopback TCP port, on `hyper` 1.x without a framework.
//!
//! - [`listen`]: where it listens, and creating the socket without trusting its path.
//! - [`tokens`]: bearer tokens, stored hashed; a token is one org.
//! - [`jwt`]: JWT principals (RS256/ES256); the `owner` claim is the org.
//! - [`jwks`]: their keys: a JWKS file, or the issuer's key set fetched through the broker.
//! - [`bridge`], [`ws`]: `hanzo-dev bridge`, the same routes as JSON-RPC over a WebSocket for
//!   browsers (Origin allow-list, JWT in the subprotocol or query), RFC 6455 framing.
//! - [`routes`]: the routes; every one but `/v1/openapi.json` needs a principal, and only the
//!   principal's org store is ever opened.
//! - [`runs`]: a run is a `hanzo-dev run --json` child (the same machinery as the CLI's); its
//!   events are recorded as event rows.
//! - [`events`]: the SSE stream of a run's event rows, resumable with `Last-Event-ID`.
//! - [`http`]: bodies, JSON errors with stable codes, the body size cap.
//!
//! Architecture invariant: the org comes from the token and nothing else; a request without a
//! valid token gets 401 before the route's data is looked at, and a run id of another org is
//! simply absent from this org's file (404).

pub mod bridge;
pub mod events;
pub mod http;
pub mod jwks;
pub mod jwt;
pub mod listen;
pub mod routes;
pub mod runs;
pub mod tokens;
pub mod ws;

use crate::term::sanitize_line_for_terminal;
use hanzo_store::{ApprovalMode, RunStore, SecretValues};
use hyper_util::rt::TokioIo;
use listen::Listener;
use std::path::PathBuf;
use std::sync::Arc;

/// The default cap on a request body.
pub const DEFAULT_MAX_BODY: usize = 1 << 20;

/// What every request handler shares.
#[derive(Debug)]
pub struct State {
    /// The run store's data directory (one file per org under it).
    pub data_dir: PathBuf,
    /// The issued bearer tokens.
    pub tokens: tokens::TokenStore,
    /// JWT principals, when the server was given a JWKS (`--jwks`).
    pub jwt: Option<jwt::JwtConfig>,
    /// Values redacted from what is stored and answered.
    pub secrets: SecretValues,
    /// The widest approval mode a run may ask for, and the default.
    pub approval: ApprovalMode,
    /// The largest request body accepted, in bytes (413 beyond).
    pub max_body: usize,
    /// What every run is started with (binary, workspace, environment).
    pub template: runs::RunTemplate,
    /// The runs this server is driving.
    pub registry: runs::Registry,
}

impl State {
    /// The org's own store (its own file), with the known secrets set.
    pub fn open_store(&self, org: &str) -> Result<RunStore, http::ApiError> {
        let mut s = RunStore::open(&self.data_dir, org).map_err(|e| {
            eprintln!("store of org {org}: {e}");
            http::ApiError::internal()
        })?;
        s.set_secret_values(self.secrets.clone());
        Ok(s)
    }
}

/// One request line for the server's log: decoded for people, then made safe for a terminal
/// (an agent name in a path could carry escape sequences or bidi controls).
fn log_line(method: &::http::Method, path: &str, status: u16) -> String {
    let decoded = percent_lossy(path);
    format!(
        "{} {} {status}",
        method.as_str(),
        sanitize_line_for_terminal(&decoded)
    )
}

fn percent_lossy(path: &str) -> String {
    let b = path.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (b[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What answers one request (the agents API's routes, or the bridge's upgrade).
pub trait Answer: Clone + Send + Sync + 'static {
    /// The response to `req`.
    fn answer(
        &self,
        req: ::http::Request<hyper::body::Incoming>,
    ) -> impl std::future::Future<Output = ::http::Response<http::Body>> + Send;
}

/// The agents API's routes.
#[derive(Clone)]
struct Routes(Arc<State>);

impl Answer for Routes {
    async fn answer(
        &self,
        req: ::http::Request<hyper::body::Incoming>,
    ) -> ::http::Response<http::Body> {
        routes::handle(self.0.clone(), req).await
    }
}

async fn answer<A: Answer>(
    handler: A,
    req: ::http::Request<hyper::body::Incoming>,
) -> Result<::http::Response<http::Body>, std::convert::Infallible> {
    let method = req.method().clone();
    // The path only: a query (the bridge's `access_token`) never reaches the log.
    let path = req.uri().path().to_string();
    let resp = handler.answer(req).await;
    eprintln!("{}", log_line(&method, &path, resp.status().as_u16()));
    Ok(resp)
}

fn serve_connection<A: Answer, S>(handler: A, stream: S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let service = hyper::service::service_fn(move |req| answer(handler.clone(), req));
        let conn = hyper::server::conn::http1::Builder::new()
            .max_buf_size(64 * 1024)
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades();
        let _ = conn.await;
    });
}

/// Accept connections until SIGINT or SIGTERM; then ask the active runs to stop and wait for
/// them (each records itself as cancelled).
pub async fn serve(listener: Listener, state: Arc<State>) -> std::io::Result<()> {
    serve_with(listener, state.clone(), Routes(state)).await
}

/// [`serve`] with another handler (the bridge's) on the same accept loop and shutdown.
pub async fn serve_with<A: Answer>(
    listener: Listener,
    state: Arc<State>,
    handler: A,
) -> std::io::Result<()> {
    let me = nix::unistd::geteuid().as_raw();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            accepted = accept(&listener, me) => match accepted {
                Ok(Some(Conn::Unix(s))) => serve_connection(handler.clone(), s),
                Ok(Some(Conn::Tcp(s))) => serve_connection(handler.clone(), s),
                Ok(None) => {}
                Err(e) => eprintln!("accept: {e}"),
            },
        }
    }
    if let Listener::Unix(_, path) = &listener {
        // Only a socket: whatever else is at the path now is not ours to remove.
        use std::os::unix::fs::FileTypeExt;
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
            let _ = std::fs::remove_file(path);
        }
    }
    state.registry.cancel_all();
    for _ in 0..200 {
        if state.registry.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    Ok(())
}

enum Conn {
    Unix(tokio::net::UnixStream),
    Tcp(tokio::net::TcpStream),
}

/// The next connection; `None` for a unix peer that is not this user (dropped at once).
async fn accept(listener: &Listener, me: u32) -> std::io::Result<Option<Conn>> {
    match listener {
        Listener::Unix(l, _) => {
            let (s, _) = l.accept().await?;
            let uid = s.peer_cred().map(|c| c.uid()).ok();
            if uid != Some(me) {
                eprintln!("refused a connection from uid {uid:?}: only this user may connect");
                return Ok(None);
            }
            Ok(Some(Conn::Unix(s)))
        }
        Listener::Tcp(l) => Ok(Some(Conn::Tcp(l.accept().await?.0))),
    }
}
