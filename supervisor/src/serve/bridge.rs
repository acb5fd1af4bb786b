//! `hanzo-dev bridge`: the agents API for browsers, as JSON-RPC 2.0 over a WebSocket
//! (HIP-0301 §15's DevBridge), on the same state, routes, tokens and JWT checks as `serve`.
//!
//! The opening handshake (`GET /v1/bridge`) is refused before any upgrade, in this order:
//! an `Origin` not on the `--allow-origin` list (403 `origin_refused`; a request without
//! `Origin` only with `--allow-no-origin`, for non-browser clients: a browser always sends one);
//! a request that is not a WebSocket upgrade (400, 426 for another version); no valid principal
//! (401). A browser cannot set `Authorization` on a WebSocket, so the bearer value (a JWT, or
//! a `serve token`) also comes as a `Sec-WebSocket-Protocol` entry `bearer.<token>` offered
//! beside [`SUBPROTOCOL`] (the one the server selects; the token is never echoed), or as an
//! `access_token` query parameter (never logged: the log shows paths only).
//!
//! After the upgrade each text message is one JSON-RPC request; the methods mirror the REST
//! routes and go through [`super::routes::dispatch_as`] with the principal of the handshake, so
//! the org is the token's and never a parameter's. `runs.subscribe` streams the run's event rows
//! as `runs.event` notifications, then `runs.end`. The server pings every `ping_interval`; a
//! peer that has sent nothing for two intervals is dropped. Framing rules: [`super::ws`].

use super::http::{ApiError, Body};
use super::routes::{self, Route};
use super::tokens::Principal;
use super::ws::{self, Incoming, ReadError};
use super::State;
use bytes::Bytes;
use hanzo_store::{EventRecord, RunId};
use http::{header, HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

/// The one path the bridge answers.
pub const PATH: &str = "/v1/bridge";
/// The subprotocol the server selects.
pub const SUBPROTOCOL: &str = "hanzo-dev.v1";
/// The prefix of the subprotocol entry that carries the bearer value.
pub const BEARER_PROTOCOL_PREFIX: &str = "bearer.";
/// The default cap on one client message.
pub const DEFAULT_MAX_MESSAGE: usize = 1 << 20;
/// Requests one connection may have in flight, and live subscriptions.
const MAX_IN_FLIGHT: usize = 32;
/// At most this much of what a peer sends after a close is read and dropped (and for at most
/// 2 s); a peer still sending beyond that is cut off.
const DRAIN_LIMIT: usize = 1 << 20;
const MAX_SUBSCRIPTIONS: usize = 16;
/// How often a connection made with one of our own tokens checks that the token is still issued
/// (it is also checked before each request): a `token revoke` closes the connection within this.
const TOKEN_RECHECK: Duration = Duration::from_secs(1);

/// JSON-RPC 2.0 error codes.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
/// An error of the agents API; `data` carries its HTTP status and stable code.
const API_ERROR: i64 = -32000;

/// How the bridge is configured.
#[derive(Debug, Clone)]
pub struct BridgeConfig {
    /// Normalized origins (`scheme://host[:port]`, lowercase, default port omitted).
    pub origins: Vec<String>,
    /// Accept a handshake without `Origin` (a non-browser client).
    pub allow_no_origin: bool,
    /// The largest client message, in bytes (closed with 1009 beyond).
    pub max_message: usize,
    /// Time between the server's pings; a peer silent for two intervals is dropped.
    pub ping_interval: Duration,
}

/// What a connection is served with.
#[derive(Clone)]
pub struct Bridge {
    /// What every request handler shares.
    pub state: Arc<State>,
    /// How the bridge is configured.
    pub cfg: Arc<BridgeConfig>,
}

/// An `--allow-origin` value as a browser sends it in `Origin`: `http(s)://host[:port]`, no
/// path, lowercase, the scheme's default port omitted.
pub fn normalize_origin(s: &str) -> Result<String, String> {
    let bad = || {
        format!(
            "--allow-origin {s:?}: expected an origin such as https://app.example or \
             http://127.0.0.1:8080 (scheme, host and port only)"
        )
    };
    let lower = s.trim().trim_end_matches('/').to_ascii_lowercase();
    let (scheme, rest) = lower.split_once("://").ok_or_else(bad)?;
    if !matches!(scheme, "http" | "https")
        || rest.is_empty()
        || rest.contains(['/', '?', '#', '@', ' '])
    {
        return Err(bad());
    }
    let default = if scheme == "https" { ":443" } else { ":80" };
    let hostport = rest.strip_suffix(default).unwrap_or(rest);
    Ok(format!("{scheme}://{hostport}"))
}

fn refuse(status: StatusCode, code: &'static str, message: &str) -> Response<Body> {
    ApiError::new(status, code, message).into_response()
}

fn header_has_token(h: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    h.get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// The bearer value of a handshake: a `bearer.` subprotocol entry (then [`SUBPROTOCOL`] must be
/// offered too, so there is one the server can select), `Authorization: Bearer`, or the
/// `access_token` query parameter. `Err` for a subprotocol entry without [`SUBPROTOCOL`].
fn bearer_of<B>(req: &Request<B>) -> Result<Option<String>, Box<Response<Body>>> {
    let offered: Vec<String> = req
        .headers()
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_string())
        .collect();
    if let Some(t) = offered
        .iter()
        .find_map(|p| p.strip_prefix(BEARER_PROTOCOL_PREFIX))
    {
        if !offered.iter().any(|p| p == SUBPROTOCOL) {
            return Err(Box::new(refuse(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "offer the subprotocol hanzo-dev.v1 beside the bearer.<token> entry",
            )));
        }
        return Ok(Some(t.to_string()));
    }
    if let Some(v) = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        return Ok(v.strip_prefix("Bearer ").map(|t| t.trim().to_string()));
    }
    let query = req.uri().query().unwrap_or("");
    Ok(query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == "access_token")
        .map(|(_, v)| percent_decode(v)))
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b[i], hex) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl super::Answer for Bridge {
    async fn answer(&self, req: Request<hyper::body::Incoming>) -> Response<Body> {
        self.handshake(req).await
    }
}

impl Bridge {
    /// Check the opening handshake and, if it passes, upgrade.
    pub async fn handshake<B>(&self, mut req: Request<B>) -> Response<Body>
    where
        B: Send + 'static,
    {
        if req.uri().path() != PATH {
            return refuse(StatusCode::NOT_FOUND, "not_found", "no such route");
        }
        if req.method() != Method::GET {
            return refuse(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "the bridge answers GET (a WebSocket upgrade)",
            );
        }
        // The origin first: a page that may not use the bridge learns nothing more.
        match req
            .headers()
            .get(header::ORIGIN)
            .map(|v| v.to_str().unwrap_or(""))
        {
            None if self.cfg.allow_no_origin => {}
            None => {
                return refuse(
                    StatusCode::FORBIDDEN,
                    "origin_refused",
                    "a request without Origin is refused (bridge --allow-no-origin admits \
                     non-browser clients)",
                )
            }
            Some(o) => {
                let ok = normalize_origin(o).is_ok_and(|n| self.cfg.origins.contains(&n));
                if !ok {
                    return refuse(
                        StatusCode::FORBIDDEN,
                        "origin_refused",
                        "this origin may not use the bridge (bridge --allow-origin)",
                    );
                }
            }
        }
        let h = req.headers();
        if !header_has_token(h, header::UPGRADE, "websocket")
            || !header_has_token(h, header::CONNECTION, "upgrade")
        {
            return refuse(
                StatusCode::BAD_REQUEST,
                "not_websocket",
                "the bridge speaks WebSocket only (Upgrade: websocket)",
            );
        }
        if h.get(header::SEC_WEBSOCKET_VERSION)
            .and_then(|v| v.to_str().ok())
            != Some("13")
        {
            let mut r = refuse(
                StatusCode::UPGRADE_REQUIRED,
                "not_websocket",
                "WebSocket version 13 only",
            );
            r.headers_mut().insert(
                header::SEC_WEBSOCKET_VERSION,
                header::HeaderValue::from_static("13"),
            );
            return r;
        }
        let Some(key) = h
            .get(header::SEC_WEBSOCKET_KEY)
            .and_then(|v| v.to_str().ok())
            .filter(|k| ws::valid_key(k))
            .map(ws::accept_key)
        else {
            return refuse(
                StatusCode::BAD_REQUEST,
                "not_websocket",
                "Sec-WebSocket-Key must be 16 bytes in base64",
            );
        };
        let selected = header_has_token(h, header::SEC_WEBSOCKET_PROTOCOL, SUBPROTOCOL);
        let token = match bearer_of(&req) {
            Ok(Some(t)) => t,
            Ok(None) => return ApiError::unauthorized().into_response(),
            Err(r) => return *r,
        };
        let who = match routes::authenticate_bearer(&self.state, &token).await {
            Ok(p) => p,
            Err(e) => return e.into_response(),
        };
        let upgrade = hyper::upgrade::on(&mut req);
        let bridge = self.clone();
        tokio::spawn(async move {
            match upgrade.await {
                Ok(upgraded) => bridge.session(who, TokioIo::new(upgraded)).await,
                Err(e) => eprintln!("bridge: the upgrade failed: {e}"),
            }
        });
        let mut r = Response::new(Empty::new().boxed());
        *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        let rh = r.headers_mut();
        rh.insert(
            header::UPGRADE,
            header::HeaderValue::from_static("websocket"),
        );
        rh.insert(
            header::CONNECTION,
            header::HeaderValue::from_static("Upgrade"),
        );
        rh.insert(
            header::SEC_WEBSOCKET_ACCEPT,
            header::HeaderValue::from_str(&key).expect("base64 is a valid header value"),
        );
        if selected {
            rh.insert(
                header::SEC_WEBSOCKET_PROTOCOL,
                header::HeaderValue::from_static(SUBPROTOCOL),
            );
        }
        r
    }

    /// One upgraded connection, until either side closes it or the peer stops answering.
    async fn session<S>(&self, who: Principal, io: S)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
    {
        eprintln!("bridge: connection of org {} opened", who.org);
        let (rd, mut wr) = tokio::io::split(io);
        let (out_tx, mut out_rx) = mpsc::channel::<Out>(256);
        let writer = tokio::spawn(async move {
            while let Some(o) = out_rx.recv().await {
                let (bytes, last) = match o {
                    Out::Frame(b) => (b, false),
                    Out::Close(b) => (b, true),
                };
                if wr.write_all(&bytes).await.is_err() {
                    return;
                }
                if last {
                    let _ = wr.shutdown().await;
                    return;
                }
            }
        });
        let (in_tx, mut in_rx) = mpsc::channel::<Result<Incoming, ReadError>>(16);
        let max = self.cfg.max_message;
        let reader = tokio::spawn(async move {
            let mut frames = ws::FrameReader::new(rd, max);
            loop {
                let m = frames.next().await;
                let gone = matches!(m, Err(ReadError::Gone));
                let stop = m.is_err() || matches!(m, Ok(Incoming::Close(..)));
                if in_tx.send(m).await.is_err() || stop {
                    // The rest of a refused frame and the peer's answer to our close frame are
                    // read, not left to reset the connection (`FrameReader::drain`).
                    if !gone {
                        frames.drain(DRAIN_LIMIT).await;
                    }
                    return;
                }
            }
        });
        let conn = Arc::new(Conn {
            out: out_tx.clone(),
            subs: Mutex::new(HashMap::new()),
            next_sub: AtomicU64::new(1),
            in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
        });
        let mut ticker = tokio::time::interval(self.cfg.ping_interval);
        ticker.tick().await;
        let mut last_heard = Instant::now();
        // The connection ends when its token does (a JWT's `exp`, with the leeway).
        let expiry = who.expires.map(|at| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            tokio::time::Instant::now() + Duration::from_secs(at.saturating_sub(now))
        });
        let expired = async move {
            match expiry {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(expired);
        // A revocable token (ours) is checked again on this tick and before each request.
        let mut recheck = tokio::time::interval(TOKEN_RECHECK);
        recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        recheck.tick().await;
        let close: Option<Vec<u8>> = loop {
            tokio::select! {
                _ = &mut expired => {
                    eprintln!("bridge: the connection's token expired; closing");
                    break Some(ws::encode_close(ws::CLOSE_POLICY, "the token expired"));
                }
                _ = recheck.tick(), if who.revocable => {
                    if let Some(frame) = self.revoked(&who) {
                        break Some(frame);
                    }
                }
                _ = ticker.tick() => {
                    if last_heard.elapsed() > self.cfg.ping_interval * 2 {
                        eprintln!("bridge: the peer stopped answering pings; dropped");
                        break None;
                    }
                    if out_tx.try_send(Out::Frame(ws::encode(ws::OP_PING, b"hzd"))).is_err() {
                        // A full queue: the peer is not reading; the next tick decides.
                    }
                }
                m = in_rx.recv() => {
                    last_heard = Instant::now();
                    match m {
                        None | Some(Err(ReadError::Gone)) => break None,
                        Some(Err(ReadError::Violation(code, why))) => {
                            eprintln!("bridge: closing with {code}: {why}");
                            break Some(ws::encode_close(code, why));
                        }
                        Some(Ok(Incoming::Close(code, _))) => {
                            let code = code.filter(|c| ws::valid_close_code(*c));
                            break Some(match code {
                                Some(c) => ws::encode_close(c, ""),
                                None => ws::encode(ws::OP_CLOSE, b""),
                            });
                        }
                        Some(Ok(Incoming::Ping(p))) => {
                            let _ = out_tx.send(Out::Frame(ws::encode(ws::OP_PONG, &p))).await;
                        }
                        Some(Ok(Incoming::Pong(_))) => {}
                        Some(Ok(Incoming::Text(t))) => {
                            if let Some(frame) = who.revocable.then(|| self.revoked(&who)).flatten() {
                                break Some(frame);
                            }
                            self.spawn_request(&who, &conn, t)
                        }
                    }
                }
            }
        };
        for (_, sub) in lock(&conn.subs).drain() {
            sub.abort();
        }
        let mut reader = reader;
        if let Some(frame) = close {
            let sent =
                tokio::time::timeout(Duration::from_secs(2), out_tx.send(Out::Close(frame))).await;
            if matches!(sent, Ok(Ok(()))) {
                let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
                // Our close frame and end of stream are sent: the peer answers and closes its
                // side, which ends the reader's drain.
                let _ = tokio::time::timeout(Duration::from_secs(2), &mut reader).await;
            }
        } else {
            writer.abort();
        }
        reader.abort();
        eprintln!("bridge: connection of org {} closed", who.org);
    }

    /// The close frame (1008) for a connection whose token is no longer issued (`serve token
    /// revoke`), or whose token file cannot be read (fail closed); `None` while it is.
    fn revoked(&self, who: &Principal) -> Option<Vec<u8>> {
        match self.state.tokens.still_issued(who) {
            Ok(true) => None,
            Ok(false) => {
                eprintln!(
                    "bridge: token {} of org {} was revoked; closing its connection",
                    who.token_id, who.org
                );
                Some(ws::encode_close(ws::CLOSE_POLICY, "the token was revoked"))
            }
            Err(e) => {
                eprintln!("bridge: the token could not be checked ({e}); closing its connection");
                Some(ws::encode_close(
                    ws::CLOSE_POLICY,
                    "the token could not be checked",
                ))
            }
        }
    }

    fn spawn_request(&self, who: &Principal, conn: &Arc<Conn>, text: String) {
        let Ok(permit) = conn.in_flight.clone().try_acquire_owned() else {
            let id = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v.get("id").cloned())
                .unwrap_or(Value::Null);
            let e = error(id, API_ERROR, "too many requests in flight", None);
            let _ = conn.out.try_send(Out::text(&e));
            return;
        };
        let (bridge, who, conn) = (self.clone(), who.clone(), conn.clone());
        tokio::spawn(async move {
            if let Some(reply) = bridge.call(&who, &conn, &text).await {
                let _ = conn.out.send(Out::text(&reply)).await;
            }
            drop(permit);
        });
    }

    /// Answer one JSON-RPC message; `None` for a notification (no `id`) or a reply already sent.
    async fn call(&self, who: &Principal, conn: &Arc<Conn>, text: &str) -> Option<Value> {
        let msg: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => {
                return Some(error(
                    Value::Null,
                    PARSE_ERROR,
                    "parse error",
                    Some(json!({"detail": e.to_string()})),
                ))
            }
        };
        let Some(obj) = msg.as_object() else {
            let why = if msg.is_array() {
                "batches are not supported; send one request per message"
            } else {
                "a request is a JSON object"
            };
            return Some(error(Value::Null, INVALID_REQUEST, why, None));
        };
        let id = obj.get("id").cloned();
        let reply_id = id.clone().unwrap_or(Value::Null);
        if !matches!(
            id,
            None | Some(Value::Null) | Some(Value::String(_)) | Some(Value::Number(_))
        ) {
            return Some(error(
                Value::Null,
                INVALID_REQUEST,
                "id must be a string or a number",
                None,
            ));
        }
        let (Some("2.0"), Some(method)) = (
            obj.get("jsonrpc").and_then(Value::as_str),
            obj.get("method").and_then(Value::as_str),
        ) else {
            return Some(error(
                reply_id,
                INVALID_REQUEST,
                "expected {\"jsonrpc\": \"2.0\", \"method\": …}",
                None,
            ));
        };
        let params = match obj.get("params") {
            None | Some(Value::Null) => serde_json::Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => {
                return Some(error(
                    reply_id,
                    INVALID_PARAMS,
                    "params must be an object",
                    None,
                ))
            }
        };
        let outcome = self.method(who, conn, method, params, &reply_id).await;
        let reply = match outcome {
            Ok(Some(result)) => json!({"jsonrpc": "2.0", "id": reply_id, "result": result}),
            Ok(None) => return None,
            Err(e) => error(reply_id, e.0, &e.1, e.2),
        };
        id.map(|_| reply)
    }

    async fn method(
        &self,
        who: &Principal,
        conn: &Arc<Conn>,
        method: &str,
        mut params: serde_json::Map<String, Value>,
        reply_id: &Value,
    ) -> Result<Option<Value>, RpcError> {
        let (route, http_method, body) = match method {
            "agents.list" => (Route::Agents, Method::GET, None),
            "agents.create" => (Route::Agents, Method::POST, Some(params)),
            "agents.get" => (Route::Agent(take_ref(&mut params)?), Method::GET, None),
            "agents.update" => (
                Route::Agent(take_ref(&mut params)?),
                Method::PATCH,
                Some(params),
            ),
            "agents.delete" => (Route::Agent(take_ref(&mut params)?), Method::DELETE, None),
            "agents.runs" => (Route::AgentRuns(take_ref(&mut params)?), Method::GET, None),
            "agents.run" => (
                Route::AgentRun(take_ref(&mut params)?),
                Method::POST,
                Some(params),
            ),
            "runs.get" => (Route::Run(run_id(&params)?), Method::GET, None),
            "runs.subscribe" => return self.subscribe(who, conn, &params, reply_id).await,
            "runs.unsubscribe" => {
                let sub = params
                    .get("subscription")
                    .and_then(Value::as_u64)
                    .ok_or_else(|| invalid_params("subscription must be a subscription id"))?;
                let gone = lock(&conn.subs).remove(&sub);
                if let Some(g) = &gone {
                    g.abort();
                }
                return Ok(Some(json!({"unsubscribed": gone.is_some()})));
            }
            _ => {
                return Err(RpcError(
                    METHOD_NOT_FOUND,
                    "method not found".into(),
                    Some(json!({"methods": METHODS})),
                ))
            }
        };
        let body = match body {
            Some(b) => Bytes::from(serde_json::to_vec(&b).expect("a JSON map serializes")),
            None => Bytes::new(),
        };
        let req = Request::builder()
            .method(http_method)
            .uri("/")
            .body(Full::new(body))
            .expect("a fixed method and URI make a request");
        match routes::dispatch_as(&self.state, who, route, req).await {
            Ok(resp) => {
                let bytes = resp
                    .into_body()
                    .collect()
                    .await
                    .map(|c| c.to_bytes())
                    .unwrap_or_default();
                let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                Ok(Some(v))
            }
            Err(e) => Err(RpcError(
                API_ERROR,
                e.message,
                Some(json!({"status": e.status.as_u16(), "code": e.code})),
            )),
        }
    }

    /// `runs.subscribe {id, after?}`: the reply, then `runs.event` for each row after `after`
    /// (0: all) as it is recorded, then `runs.end`.
    async fn subscribe(
        &self,
        who: &Principal,
        conn: &Arc<Conn>,
        params: &serde_json::Map<String, Value>,
        reply_id: &Value,
    ) -> Result<Option<Value>, RpcError> {
        let run = run_id(params)?;
        let after = match params.get("after") {
            None | Some(Value::Null) => 0,
            Some(v) => v
                .as_i64()
                .filter(|n| *n >= 0)
                .ok_or_else(|| invalid_params("after must be an event id"))?,
        };
        routes::check_run(&self.state, who, run)
            .await
            .map_err(|e| {
                RpcError(
                    API_ERROR,
                    e.message,
                    Some(json!({"status": e.status.as_u16(), "code": e.code})),
                )
            })?;
        if lock(&conn.subs).len() >= MAX_SUBSCRIPTIONS {
            return Err(RpcError(
                API_ERROR,
                format!("at most {MAX_SUBSCRIPTIONS} subscriptions per connection"),
                None,
            ));
        }
        let sub = conn.next_sub.fetch_add(1, Ordering::Relaxed);
        // The reply goes out before the first event.
        let reply = json!({"jsonrpc": "2.0", "id": reply_id,
                           "result": {"subscription": sub, "run_id": run.0}});
        conn.out
            .send(Out::text(&reply))
            .await
            .map_err(|_| RpcError(API_ERROR, "the connection is closing".into(), None))?;
        let follow = super::events::Follow {
            data_dir: self.state.data_dir.clone(),
            org: who.org.clone(),
            run,
            after,
            registry: self.state.registry.clone(),
        };
        let out = conn.out.clone();
        let conn2 = conn.clone();
        let task = tokio::spawn(async move {
            let (tx, mut rx) = mpsc::channel::<Bytes>(64);
            let pump =
                super::events::pump(follow, tx, move |e| event_notification(sub, run, e), None);
            let forward = async {
                while let Some(b) = rx.recv().await {
                    if out
                        .send(Out::Frame(ws::encode(ws::OP_TEXT, &b)))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            };
            tokio::join!(pump, forward);
            let end = json!({"jsonrpc": "2.0", "method": "runs.end",
                             "params": {"subscription": sub, "run_id": run.0}});
            let _ = out.send(Out::text(&end)).await;
            lock(&conn2.subs).remove(&sub);
        });
        lock(&conn.subs).insert(sub, task.abort_handle());
        Ok(None)
    }
}

/// The methods, for a `method not found` error's data.
pub const METHODS: &[&str] = &[
    "agents.list",
    "agents.create",
    "agents.get",
    "agents.update",
    "agents.delete",
    "agents.runs",
    "agents.run",
    "runs.get",
    "runs.subscribe",
    "runs.unsubscribe",
];

fn event_notification(sub: u64, run: RunId, e: &EventRecord) -> Bytes {
    let v = json!({"jsonrpc": "2.0", "method": "runs.event", "params": {
        "subscription": sub, "run_id": run.0, "id": e.id,
        "event": super::runs::event_kind(&e.kind), "data": e.data,
        "recorded_ms": e.recorded_ms,
    }});
    Bytes::from(serde_json::to_vec(&v).expect("a JSON value serializes"))
}

/// One frame for the writer; `Close` is written last, then the connection is shut.
enum Out {
    Frame(Vec<u8>),
    Close(Vec<u8>),
}

impl Out {
    fn text(v: &Value) -> Out {
        Out::Frame(ws::encode(
            ws::OP_TEXT,
            &serde_json::to_vec(v).expect("a JSON value serializes"),
        ))
    }
}

struct Conn {
    out: mpsc::Sender<Out>,
    subs: Mutex<HashMap<u64, tokio::task::AbortHandle>>,
    next_sub: AtomicU64,
    in_flight: Arc<tokio::sync::Semaphore>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A map edited whole per statement: consistent even after a panic elsewhere.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

struct RpcError(i64, String, Option<Value>);

fn invalid_params(m: &str) -> RpcError {
    RpcError(INVALID_PARAMS, m.to_string(), None)
}

fn error(id: Value, code: i64, message: &str, data: Option<Value>) -> Value {
    let mut e = json!({"code": code, "message": message});
    if let Some(d) = data {
        e["data"] = d;
    }
    json!({"jsonrpc": "2.0", "id": id, "error": e})
}

/// The agent reference (`ref`) of a method's params, removed from them.
fn take_ref(params: &mut serde_json::Map<String, Value>) -> Result<String, RpcError> {
    match params.remove("ref") {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        _ => Err(invalid_params("ref must be an agent name")),
    }
}

fn run_id(params: &serde_json::Map<String, Value>) -> Result<RunId, RpcError> {
    params
        .get("id")
        .and_then(Value::as_i64)
        .filter(|n| *n > 0)
        .map(RunId)
        .ok_or_else(|| invalid_params("id must be a run id"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_normalize_as_browsers_send_them_and_junk_is_refused() {
        assert_eq!(
            normalize_origin("HTTPS://App.Example:443/").expect("ok"),
            "https://app.example"
        );
        assert_eq!(
            normalize_origin("http://127.0.0.1:8080").expect("ok"),
            "http://127.0.0.1:8080"
        );
        assert_eq!(
            normalize_origin("http://localhost:80").expect("ok"),
            "http://localhost"
        );
        for bad in [
            "app.example",
            "ftp://app.example",
            "https://app.example/path",
            "https://user@app.example",
            "null",
            "https://",
            "https://a.example?x",
        ] {
            assert!(normalize_origin(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_bearer_comes_from_the_subprotocol_the_header_or_the_query() {
        let req = |h: &[(&str, &str)], uri: &str| {
            let mut b = Request::builder().uri(uri);
            for (k, v) in h {
                b = b.header(*k, *v);
            }
            b.body(()).expect("request")
        };
        let r = req(
            &[("sec-websocket-protocol", "hanzo-dev.v1, bearer.a.b.c")],
            "/v1/bridge",
        );
        assert_eq!(bearer_of(&r).ok().flatten().as_deref(), Some("a.b.c"));
        let r = req(&[("sec-websocket-protocol", "bearer.a.b.c")], "/v1/bridge");
        assert!(bearer_of(&r).is_err());
        let r = req(&[("authorization", "Bearer hzd_x")], "/v1/bridge");
        assert_eq!(bearer_of(&r).ok().flatten().as_deref(), Some("hzd_x"));
        let r = req(&[], "/v1/bridge?x=1&access_token=a%2Eb.c");
        assert_eq!(bearer_of(&r).ok().flatten().as_deref(), Some("a.b.c"));
        let r = req(&[], "/v1/bridge");
        assert_eq!(bearer_of(&r).ok().flatten(), None);
    }
}
