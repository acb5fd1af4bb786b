//! The streamable HTTP transport (MCP 2025-11-25 "Transports"): each message is POSTed; the
//! answer to a request is JSON or an event stream in which every `data:` line of every event is
//! read (the `event: message` trap); notifications and responses expect 202; `Mcp-Session-Id` is
//! kept and sent, `MCP-Protocol-Version` after `initialize`; a stream that ends before its answer
//! is resumed with GET and `Last-Event-ID` after the server's `retry`; the optional GET stream is
//! opened and reconnected the same way (404/405 tolerated); DELETE ends the session.
//!
//! The transport makes no connection itself: it hands requests to an [`HttpClient`], which in the
//! worker is the broker's direct channel (credential-free requests out; status, scrubbed headers
//! and raw body chunks back).

use crate::classify::{json_documents, NoDocument, Refusal, Reply};
use crate::error::{CloseReason, McpError};
use crate::jsonrpc::{excerpt, Id};
use crate::peer::{Answer, OutKind, Outbound, Peer};
use crate::BoxFuture;
use hanzo_backoff::Backoff;
use hanzo_sse::SseFrameBuffer;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use thiserror::Error;
use tokio::task::JoinHandle;

/// One credential-free HTTP request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    /// The HTTP method (`POST`, `GET`, `DELETE`).
    pub method: String,
    /// The server's endpoint.
    pub url: String,
    /// Request headers as (name, value); credentials are added by the broker, not here.
    pub headers: Vec<(String, String)>,
    /// The request body.
    pub body: Vec<u8>,
}

/// Status and headers of a response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpHead {
    /// The HTTP status code.
    pub status: u16,
    /// Response headers as (name, value).
    pub headers: Vec<(String, String)>,
}

impl HttpHead {
    /// The first header of that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A response body, chunk by chunk as received.
pub trait HttpBody: Send {
    /// The next chunk; `None` at the normal end; an error when the body broke off.
    fn next_chunk(&mut self) -> BoxFuture<'_, Option<Result<Vec<u8>, HttpError>>>;
}

/// A response: its head now, its body as it arrives.
pub struct HttpResponse {
    /// Status and headers.
    pub head: HttpHead,
    /// The body, chunk by chunk.
    pub body: Box<dyn HttpBody>,
}

/// Sends one request and returns the head and the streamed body.
pub trait HttpClient: Send + Sync {
    /// Send `request`; the answer's head arrives before the body is read.
    fn send(&self, request: HttpRequest) -> BoxFuture<'_, Result<HttpResponse, HttpError>>;
}

/// Why an exchange produced no response (the broker channel's failure kinds).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{message}")]
pub struct HttpError {
    /// What failed, which decides whether a retry may help.
    pub kind: HttpErrorKind,
    /// Says what failed and what to do; never contains a secret.
    pub message: String,
}

/// The class of an [`HttpError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpErrorKind {
    /// The destination is not on the allow-list.
    NotAllowed,
    /// No credential is configured for the destination.
    NoCredential,
    /// The request is malformed (URL, method, header).
    BadRequest,
    /// Connecting or sending failed before a response head.
    Connect,
    /// The body broke off after the head.
    Body,
}

/// Reconnections of one stream before giving up.
const MAX_RECONNECTS: u32 = 8;
/// Longest `retry` honoured, so a server cannot park a call for hours.
const MAX_RETRY: Duration = Duration::from_secs(30);
/// Shortest wait before a reconnection, so `retry: 0` cannot make a busy loop.
const MIN_RETRY: Duration = Duration::from_millis(100);

#[derive(Default)]
struct Session {
    id: Option<String>,
    protocol_version: Option<String>,
}

struct Inner {
    client: Arc<dyn HttpClient>,
    url: String,
    peer: Weak<Peer>,
    max_message_bytes: usize,
    session: Mutex<Session>,
    posts: Mutex<HashMap<Id, JoinHandle<()>>>,
    listener: Mutex<Option<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The running transport of one streamable-HTTP server.
pub(crate) struct HttpConnection {
    inner: Arc<Inner>,
}

struct HttpOutbound(Arc<Inner>);

impl Outbound for HttpOutbound {
    fn send(&self, kind: OutKind, body: Vec<u8>) -> BoxFuture<'_, Result<(), McpError>> {
        let inner = self.0.clone();
        Box::pin(async move {
            match kind {
                OutKind::Request(id) => {
                    let task_inner = inner.clone();
                    let task_id = id.clone();
                    let task =
                        tokio::spawn(async move { task_inner.post_request(task_id, body).await });
                    let mut posts = lock(&inner.posts);
                    posts.retain(|_, t| !t.is_finished());
                    posts.insert(id, task);
                    Ok(())
                }
                OutKind::Notification | OutKind::Response => inner.post_message(body).await,
            }
        })
    }

    fn forget(&self, id: &Id) {
        if let Some(task) = lock(&self.0.posts).remove(id) {
            task.abort();
        }
    }
}

/// How one event stream ended.
struct StreamEnd {
    answered: bool,
    last_event_id: String,
    retry: Option<u64>,
    events: usize,
    failure: Option<NoDocument>,
}

impl HttpConnection {
    pub fn start(
        peer: &Arc<Peer>,
        client: Arc<dyn HttpClient>,
        url: &str,
        max_message_bytes: usize,
    ) -> HttpConnection {
        let inner = Arc::new(Inner {
            client,
            url: url.to_string(),
            peer: Arc::downgrade(peer),
            max_message_bytes,
            session: Mutex::new(Session::default()),
            posts: Mutex::new(HashMap::new()),
            listener: Mutex::new(None),
        });
        peer.set_outbound(Arc::new(HttpOutbound(inner.clone())));
        HttpConnection { inner }
    }

    /// Send `MCP-Protocol-Version: version` from now on.
    pub fn set_protocol_version(&self, version: &str) {
        lock(&self.inner.session).protocol_version = Some(version.to_string());
    }

    pub fn session_id(&self) -> Option<String> {
        lock(&self.inner.session).id.clone()
    }

    /// Open the optional GET stream for server-initiated messages. Returns once the server has
    /// answered the GET (so it is registered before the next request); 404/405 mean the server
    /// offers none, which is fine.
    pub async fn start_listening(&self) {
        let inner = self.inner.clone();
        let Some(first) = inner.open_get(None).await else {
            return;
        };
        let task = tokio::spawn(async move { inner.listen(first).await });
        *lock(&self.inner.listener) = Some(task);
    }

    /// Stop every stream and end the session with DELETE (405 tolerated).
    pub async fn shutdown(&self) {
        if let Some(t) = lock(&self.inner.listener).take() {
            t.abort();
        }
        for (_, t) in lock(&self.inner.posts).drain() {
            t.abort();
        }
        let session = self.session_id();
        if let Some(sid) = session {
            let mut req = self.inner.request("DELETE", Vec::new(), None);
            req.headers.retain(|(k, _)| k != "Mcp-Session-Id");
            req.headers.push(("Mcp-Session-Id".into(), sid));
            match tokio::time::timeout(Duration::from_secs(5), self.inner.client.send(req)).await {
                Ok(Ok(r)) if r.head.status == 405 => {
                    tracing::debug!(url = %self.inner.url, "server does not support DELETE of sessions")
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::debug!(url = %self.inner.url, "DELETE failed: {e}"),
                Err(_) => tracing::debug!(url = %self.inner.url, "DELETE timed out"),
            }
        }
        if let Some(peer) = self.inner.peer.upgrade() {
            peer.close(CloseReason::ShutDown);
        }
    }
}

impl Drop for HttpConnection {
    fn drop(&mut self) {
        // Without `shutdown` there is no DELETE, but no stream may outlive the client either.
        if let Some(t) = lock(&self.inner.listener).take() {
            t.abort();
        }
        for (_, t) in lock(&self.inner.posts).drain() {
            t.abort();
        }
    }
}

impl Inner {
    fn request(&self, method: &str, body: Vec<u8>, accept: Option<&str>) -> HttpRequest {
        let mut headers = Vec::new();
        if let Some(a) = accept {
            headers.push(("Accept".to_string(), a.to_string()));
        }
        if !body.is_empty() {
            headers.push(("Content-Type".into(), "application/json".into()));
        }
        let s = lock(&self.session);
        if let Some(id) = &s.id {
            headers.push(("Mcp-Session-Id".into(), id.clone()));
        }
        if let Some(v) = &s.protocol_version {
            headers.push(("MCP-Protocol-Version".into(), v.clone()));
        }
        HttpRequest {
            method: method.into(),
            url: self.url.clone(),
            headers,
            body,
        }
    }

    fn has_session(&self) -> bool {
        lock(&self.session).id.is_some()
    }

    fn capture_session(&self, head: &HttpHead) {
        let Some(sid) = head.header("mcp-session-id") else {
            return;
        };
        // The spec allows only visible ASCII; anything else is not echoed back.
        if sid.is_empty() || sid.len() > 1024 || !sid.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
            tracing::warn!(url = %self.url, "ignored an Mcp-Session-Id that is not visible ASCII");
            return;
        }
        let mut s = lock(&self.session);
        if s.id.is_none() {
            s.id = Some(sid.to_string());
        }
    }

    fn session_expired(&self, peer: &Peer, status: u16, had_session: bool) -> bool {
        if status == 404 && had_session {
            peer.close(CloseReason::SessionExpired);
            return true;
        }
        false
    }

    /// POST a notification or a response; the server should answer 202.
    async fn post_message(&self, body: Vec<u8>) -> Result<(), McpError> {
        let had_session = self.has_session();
        let req = self.request("POST", body, Some("application/json, text/event-stream"));
        let mut resp = self.client.send(req).await.map_err(McpError::Http)?;
        self.capture_session(&resp.head);
        let status = resp.head.status;
        if let Some(peer) = self.peer.upgrade() {
            if self.session_expired(&peer, status, had_session) {
                return Err(McpError::Closed(CloseReason::SessionExpired));
            }
        }
        if !(200..300).contains(&status) {
            tracing::debug!(url = %self.url, status, "the server refused a notification or response");
        }
        // Drain (bounded) so the exchange completes; nothing in it is expected.
        let mut seen = 0usize;
        while let Some(Ok(chunk)) = resp.body.next_chunk().await {
            seen += chunk.len();
            if seen > self.max_message_bytes {
                break;
            }
        }
        Ok(())
    }

    /// POST request `id` and deliver its answer, however it comes.
    async fn post_request(self: Arc<Self>, id: Id, body: Vec<u8>) {
        let Some(peer) = self.peer.upgrade() else {
            return;
        };
        let had_session = self.has_session();
        let req = self.request("POST", body, Some("application/json, text/event-stream"));
        let resp = match self.client.send(req).await {
            Ok(r) => r,
            Err(e) => {
                peer.resolve(&id, Answer::Failed(McpError::Http(e)));
                return;
            }
        };
        self.capture_session(&resp.head);
        let status = resp.head.status;
        if self.session_expired(&peer, status, had_session) {
            return;
        }
        if status == 401 || status == 403 {
            peer.resolve(
                &id,
                Answer::Reply(Reply::Refused(Refusal::Status { status })),
            );
            return;
        }
        let is_stream = resp.head.header("content-type").is_some_and(|ct| {
            ct.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        });
        if !is_stream {
            self.read_whole(&peer, &id, status, resp.body).await;
            return;
        }
        let end = self.read_stream(&peer, Some(&id), resp.body).await;
        if end.answered || !peer.is_pending(&id) {
            return;
        }
        if let Some(why) = end.failure {
            peer.resolve(
                &id,
                Answer::Reply(Reply::Refused(Refusal::NoDocument { status, why })),
            );
            return;
        }
        if end.last_event_id.is_empty() {
            let why = if end.events == 0 {
                NoDocument::Empty
            } else {
                NoDocument::Truncated
            };
            peer.resolve(
                &id,
                Answer::Reply(Reply::Refused(Refusal::NoDocument { status, why })),
            );
            return;
        }
        self.resume(&peer, &id, end).await;
    }

    /// A non-streamed answer: the whole body (capped), then its JSON documents.
    async fn read_whole(
        &self,
        peer: &Arc<Peer>,
        id: &Id,
        status: u16,
        mut body: Box<dyn HttpBody>,
    ) {
        let mut buf = Vec::new();
        let mut why = None;
        loop {
            match body.next_chunk().await {
                None => break,
                Some(Ok(chunk)) => {
                    if buf.len() + chunk.len() > self.max_message_bytes {
                        why = Some(NoDocument::TooLarge);
                        break;
                    }
                    buf.extend_from_slice(&chunk);
                }
                Some(Err(_)) => {
                    why = Some(NoDocument::Truncated);
                    break;
                }
            }
        }
        let docs = match why {
            Some(w) => Err(w),
            None => json_documents(&buf),
        };
        match docs {
            Ok(docs) => {
                for doc in docs {
                    if let Err(e) = peer.dispatch_document(doc, Some(id)) {
                        tracing::debug!(server = %peer.name, "not a JSON-RPC message: {e}");
                    }
                }
                if peer.is_pending(id) {
                    let refusal = Refusal::NoDocument {
                        status,
                        why: NoDocument::NoAnswer,
                    };
                    peer.resolve(id, Answer::Reply(Reply::Refused(refusal)));
                }
            }
            Err(why) => {
                peer.resolve(
                    id,
                    Answer::Reply(Reply::Refused(Refusal::NoDocument { status, why })),
                );
            }
        }
    }

    /// Read an event stream, dispatching every JSON document in every event's data; stops early
    /// once `awaited` is answered.
    async fn read_stream(
        &self,
        peer: &Arc<Peer>,
        awaited: Option<&Id>,
        mut body: Box<dyn HttpBody>,
    ) -> StreamEnd {
        let mut sse = SseFrameBuffer::new().with_max_event_size(self.max_message_bytes);
        let mut end = StreamEnd {
            answered: false,
            last_event_id: String::new(),
            retry: None,
            events: 0,
            failure: None,
        };
        loop {
            let events = match body.next_chunk().await {
                None | Some(Err(_)) => {
                    sse.finish();
                    break;
                }
                Some(Ok(chunk)) => match sse.feed(&chunk) {
                    Ok(events) => events,
                    Err(_) => {
                        end.failure = Some(NoDocument::TooLarge);
                        break;
                    }
                },
            };
            end.retry = sse.retry().or(end.retry);
            for ev in events {
                end.events += 1;
                end.last_event_id = ev.last_event_id.clone();
                let data = ev.data.trim();
                if data.is_empty() {
                    continue; // a priming event: an id (and maybe a retry) and no message
                }
                match serde_json::from_str(data) {
                    Ok(doc) => {
                        if let Err(e) = peer.dispatch_document(doc, awaited) {
                            tracing::debug!(server = %peer.name, "event is not a JSON-RPC message: {e}");
                        }
                    }
                    Err(_) => tracing::debug!(
                        server = %peer.name,
                        data = %excerpt(data, 80),
                        "event data is not JSON"
                    ),
                }
            }
            if let Some(id) = awaited {
                if !peer.is_pending(id) {
                    end.answered = true;
                    break;
                }
            }
        }
        end.retry = sse.retry().or(end.retry);
        if end.last_event_id.is_empty() {
            end.last_event_id = sse.last_event_id().to_string();
        }
        end
    }

    /// The delay before reconnecting: the server's `retry` when it gave one (capped), else the
    /// backoff's next delay; later attempts never wait less than `retry`.
    fn reconnect_delay(backoff: &mut Backoff, retry: Option<u64>, first: bool) -> Duration {
        let delay = match retry {
            Some(ms) if first => Duration::from_millis(ms).min(MAX_RETRY),
            Some(ms) => backoff.next_delay_at_least(Duration::from_millis(ms).min(MAX_RETRY)),
            None => backoff.next_delay(),
        };
        delay.max(MIN_RETRY)
    }

    /// The stream of request `id` ended before its answer: resume it with GET and
    /// `Last-Event-ID` (SEP-1699), waiting the server's `retry` first.
    async fn resume(&self, peer: &Arc<Peer>, id: &Id, mut end: StreamEnd) {
        let mut backoff = Backoff::from_millis(250, 5_000).with_retry_after_cap(MAX_RETRY);
        for attempt in 0..MAX_RECONNECTS {
            tokio::time::sleep(Self::reconnect_delay(&mut backoff, end.retry, attempt == 0)).await;
            if !peer.is_pending(id) {
                return;
            }
            let resp = match self.open_get(Some(&end.last_event_id)).await {
                Some(r) => r,
                None => break,
            };
            let next = self.read_stream(peer, Some(id), resp.body).await;
            if next.answered || !peer.is_pending(id) {
                return;
            }
            if next.failure.is_some() {
                end.failure = next.failure;
                break;
            }
            if !next.last_event_id.is_empty() {
                end.last_event_id = next.last_event_id;
            }
            end.retry = next.retry.or(end.retry);
        }
        let why = end.failure.unwrap_or(NoDocument::Truncated);
        peer.resolve(
            id,
            Answer::Reply(Reply::Refused(Refusal::NoDocument { status: 200, why })),
        );
    }

    /// GET an event stream (optionally resuming after `last_event_id`); `None` when the server
    /// offers none or the exchange failed (logged).
    async fn open_get(&self, last_event_id: Option<&str>) -> Option<HttpResponse> {
        let had_session = self.has_session();
        let mut req = self.request("GET", Vec::new(), Some("text/event-stream"));
        if let Some(l) = last_event_id.filter(|l| !l.is_empty()) {
            req.headers.push(("Last-Event-ID".into(), l.to_string()));
        }
        let resp = match self.client.send(req).await {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(url = %self.url, "GET stream failed: {e}");
                return None;
            }
        };
        self.capture_session(&resp.head);
        let status = resp.head.status;
        if let Some(peer) = self.peer.upgrade() {
            if self.session_expired(&peer, status, had_session) {
                return None;
            }
        }
        let is_stream = resp
            .head
            .header("content-type")
            .is_some_and(|ct| ct.to_ascii_lowercase().starts_with("text/event-stream"));
        if status == 404 || status == 405 {
            tracing::debug!(url = %self.url, status, "the server offers no GET stream");
            return None;
        }
        if status != 200 || !is_stream {
            tracing::debug!(url = %self.url, status, "GET did not open an event stream");
            return None;
        }
        Some(resp)
    }

    /// Keep the GET stream open: read it, and reconnect with `Last-Event-ID` after `retry` (or
    /// the backoff) when it ends, until the server stops offering it or the connection closes.
    async fn listen(self: Arc<Self>, first: HttpResponse) {
        let mut backoff = Backoff::from_millis(500, 30_000).with_retry_after_cap(MAX_RETRY);
        let mut body = first.body;
        let mut last_event_id = String::new();
        let mut retry = None;
        let mut failures = 0u32;
        loop {
            let Some(peer) = self.peer.upgrade() else {
                return;
            };
            let end = self.read_stream(&peer, None, body).await;
            if end.events > 0 {
                backoff.reset();
                failures = 0;
            }
            if !end.last_event_id.is_empty() {
                last_event_id = end.last_event_id;
            }
            retry = end.retry.or(retry);
            if peer.close_reason().is_some() {
                return;
            }
            drop(peer);
            loop {
                let delay = Self::reconnect_delay(&mut backoff, retry, failures == 0);
                tokio::time::sleep(delay).await;
                match self.open_get(Some(&last_event_id)).await {
                    Some(r) => {
                        body = r.body;
                        break;
                    }
                    None => {
                        failures += 1;
                        if failures >= MAX_RECONNECTS {
                            tracing::debug!(url = %self.url, "GET stream given up");
                            return;
                        }
                    }
                }
            }
        }
    }
}
