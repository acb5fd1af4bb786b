//! The JSON-RPC engine shared by both transports: id allocation, the table of requests in flight
//! (answers matched by id, in any order), the per-call timeout and `notifications/cancelled`,
//! progress tokens, answers to the server's own requests, and the end of a connection failing
//! every request in flight at once.

use crate::classify::Reply;
use crate::client::{EventFn, Progress, ProgressFn, ServerEvent};
use crate::error::{CloseReason, McpError};
use crate::jsonrpc::{self, excerpt, Id, Incoming};
use crate::requests::ServerRequests;
use crate::BoxFuture;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;
use tokio::sync::{oneshot, watch, Notify};

/// What is being sent, so a transport can treat answers to requests specially.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OutKind {
    Request(Id),
    Notification,
    Response,
}

/// A transport's sending half.
pub(crate) trait Outbound: Send + Sync {
    /// Send one serialized message. For a request, the transport later delivers its answer with
    /// [`Peer::resolve`] or [`Peer::dispatch`].
    fn send(&self, kind: OutKind, body: Vec<u8>) -> BoxFuture<'_, Result<(), McpError>>;
    /// Request `id` is no longer awaited (answered, cancelled or timed out).
    fn forget(&self, _id: &Id) {}
}

/// The end of one request.
#[derive(Debug)]
pub(crate) enum Answer {
    Reply(Reply),
    Failed(McpError),
}

/// `notifications/tools/list_changed` arrivals, counted so a refresh that raced one can tell.
#[derive(Default)]
pub(crate) struct ListChanged {
    pub epoch: AtomicU64,
    pub notify: Notify,
    /// One refresh at a time: a second one waits, then sees the newest list.
    pub refreshing: tokio::sync::Mutex<()>,
}

pub(crate) struct RequestOpts {
    pub timeout: Duration,
    pub progress: Option<ProgressFn>,
    /// `initialize` must never be cancelled (spec, cancellation).
    pub cancellable: bool,
}

#[derive(Default)]
struct State {
    pending: HashMap<Id, oneshot::Sender<Answer>>,
    progress: HashMap<String, ProgressFn>,
    closed: Option<CloseReason>,
}

pub(crate) struct Peer {
    pub name: String,
    next_id: AtomicI64,
    state: Mutex<State>,
    outbound: OnceLock<Arc<dyn Outbound>>,
    requests: ServerRequests,
    events: Option<EventFn>,
    pub list_changed: ListChanged,
    stray: AtomicU64,
    closed_tx: watch::Sender<Option<CloseReason>>,
}

impl Peer {
    pub fn new(name: &str, requests: ServerRequests, events: Option<EventFn>) -> Arc<Peer> {
        Arc::new(Peer {
            name: name.to_string(),
            next_id: AtomicI64::new(1),
            state: Mutex::new(State::default()),
            outbound: OnceLock::new(),
            requests,
            events,
            list_changed: ListChanged::default(),
            stray: AtomicU64::new(0),
            closed_tx: watch::channel(None).0,
        })
    }

    pub fn set_outbound(&self, out: Arc<dyn Outbound>) {
        let _ = self.outbound.set(out);
    }

    fn outbound(&self) -> Result<Arc<dyn Outbound>, McpError> {
        self.outbound
            .get()
            .cloned()
            .ok_or(McpError::Closed(CloseReason::ShutDown))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock would be a bug in this module; the state stays usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn emit(&self, event: ServerEvent) {
        if let Some(f) = &self.events {
            f(&self.name, event);
        }
    }

    /// Answers that matched no request in flight (unknown, cancelled or timed-out ids).
    pub fn stray_responses(&self) -> u64 {
        self.stray.load(Ordering::Relaxed)
    }

    pub fn close_reason(&self) -> Option<CloseReason> {
        self.lock().closed.clone()
    }

    pub fn closed_watch(&self) -> watch::Receiver<Option<CloseReason>> {
        self.closed_tx.subscribe()
    }

    pub fn is_pending(&self, id: &Id) -> bool {
        self.lock().pending.contains_key(id)
    }

    /// Send a request and wait for its answer. Dropping the returned future cancels it.
    pub async fn request(
        self: &Arc<Self>,
        method: &str,
        params: Option<Value>,
        opts: RequestOpts,
    ) -> Result<Reply, McpError> {
        let out = self.outbound()?;
        let id = Id::Num(self.next_id.fetch_add(1, Ordering::Relaxed));
        let mut params = params;
        let (tx, rx) = oneshot::channel();
        let token = {
            let mut st = self.lock();
            if let Some(r) = &st.closed {
                return Err(McpError::Closed(r.clone()));
            }
            st.pending.insert(id.clone(), tx);
            opts.progress.map(|p| {
                let token = format!("hanzo-{id}");
                set_progress_token(&mut params, &token);
                st.progress.insert(token.clone(), p);
                token
            })
        };
        let mut guard = InFlight {
            peer: self.clone(),
            id: id.clone(),
            token,
            cancel: None,
        };
        out.send(
            OutKind::Request(id.clone()),
            jsonrpc::request(&id, method, params),
        )
        .await?;
        if opts.cancellable {
            guard.cancel = Some("cancelled by the client");
        }
        match tokio::time::timeout(opts.timeout, rx).await {
            Ok(answer) => {
                guard.cancel = None;
                match answer {
                    Ok(Answer::Reply(r)) => Ok(r),
                    Ok(Answer::Failed(e)) => Err(e),
                    Err(_) => Err(McpError::Closed(
                        self.close_reason().unwrap_or(CloseReason::ShutDown),
                    )),
                }
            }
            Err(_) => {
                if opts.cancellable {
                    guard.cancel = Some("timed out");
                }
                Err(McpError::Timeout {
                    method: method.to_string(),
                    after: opts.timeout,
                })
            }
        }
    }

    /// Send a notification.
    pub async fn notify(&self, method: &str, params: Option<Value>) -> Result<(), McpError> {
        if let Some(r) = self.close_reason() {
            return Err(McpError::Closed(r));
        }
        self.outbound()?
            .send(OutKind::Notification, jsonrpc::notification(method, params))
            .await
    }

    /// Deliver the end of request `id`. `false` when nobody waits for it any more.
    pub fn resolve(&self, id: &Id, answer: Answer) -> bool {
        let tx = self.lock().pending.remove(id);
        match tx {
            Some(tx) => tx.send(answer).is_ok(),
            None => {
                self.stray.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(server = %self.name, %id, "answer to a request not in flight ignored");
                false
            }
        }
    }

    /// Handle one parsed JSON document from the server. `posted` is the request whose HTTP answer
    /// carried it: a response with `id: null` there answers that request.
    pub fn dispatch_document(
        self: &Arc<Self>,
        doc: Value,
        posted: Option<&Id>,
    ) -> Result<(), String> {
        for msg in jsonrpc::parse_document(doc)? {
            self.dispatch(msg, posted);
        }
        Ok(())
    }

    fn dispatch(self: &Arc<Self>, msg: Incoming, posted: Option<&Id>) {
        match msg {
            Incoming::Response { id, outcome } => {
                let answer = Answer::Reply(match outcome {
                    Ok(v) => Reply::Result(v),
                    Err(e) => Reply::Error(e),
                });
                match id.as_ref().or(posted) {
                    Some(id) => {
                        self.resolve(id, answer);
                    }
                    None => {
                        self.stray.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(server = %self.name, ?answer, "answer with a null id ignored");
                    }
                }
            }
            Incoming::Request { id, method, params } => {
                let peer = self.clone();
                tokio::spawn(async move {
                    let outcome = peer.requests.answer(&method, params).await;
                    let body = jsonrpc::response(&id, &outcome);
                    if let Ok(out) = peer.outbound() {
                        if let Err(e) = out.send(OutKind::Response, body).await {
                            tracing::debug!(server = %peer.name, %method, "answer not sent: {e}");
                        }
                    }
                });
            }
            Incoming::Notification { method, params } => self.notification(&method, params),
        }
    }

    fn notification(&self, method: &str, params: Option<Value>) {
        let params = params.unwrap_or(Value::Null);
        match method {
            "notifications/progress" => {
                let token = match params.get("progressToken") {
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                    None => return,
                };
                let f = self.lock().progress.get(&token).cloned();
                if let (Some(f), Some(progress)) =
                    (f, params.get("progress").and_then(Value::as_f64))
                {
                    f(Progress {
                        progress,
                        total: params.get("total").and_then(Value::as_f64),
                        message: params
                            .get("message")
                            .and_then(Value::as_str)
                            .map(|m| excerpt(m, 1000)),
                    });
                }
            }
            "notifications/tools/list_changed" => {
                self.list_changed.epoch.fetch_add(1, Ordering::SeqCst);
                self.list_changed.notify.notify_one();
            }
            "notifications/message" => {
                let level = params
                    .get("level")
                    .and_then(Value::as_str)
                    .unwrap_or("info");
                let text = match params.get("data") {
                    Some(Value::String(s)) => s.clone(),
                    Some(v) => v.to_string(),
                    None => String::new(),
                };
                self.emit(ServerEvent::Log {
                    level: excerpt(level, 16),
                    message: excerpt(&text, 2000),
                });
            }
            _ => {
                tracing::trace!(server = %self.name, method = %excerpt(method, 100), "notification ignored")
            }
        }
    }

    /// End the connection: every request in flight fails with `reason` at once, later ones
    /// fail immediately. Only the first reason counts.
    pub fn close(&self, reason: CloseReason) {
        let pending = {
            let mut st = self.lock();
            if st.closed.is_some() {
                return;
            }
            st.closed = Some(reason.clone());
            st.progress.clear();
            std::mem::take(&mut st.pending)
        };
        for (_, tx) in pending {
            let _ = tx.send(Answer::Failed(McpError::Closed(reason.clone())));
        }
        self.closed_tx.send_replace(Some(reason.clone()));
        self.emit(ServerEvent::Closed(reason));
    }
}

fn set_progress_token(params: &mut Option<Value>, token: &str) {
    let p = params.get_or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(obj) = p {
        let meta = obj
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(meta) = meta {
            meta.insert("progressToken".into(), Value::String(token.to_string()));
        }
    }
}

/// A request in flight; dropping it (the call future dropped, or timed out) forgets it and, when
/// `cancel` is set, tells the server with `notifications/cancelled`.
struct InFlight {
    peer: Arc<Peer>,
    id: Id,
    token: Option<String>,
    cancel: Option<&'static str>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let closed = {
            let mut st = self.peer.lock();
            st.pending.remove(&self.id);
            if let Some(t) = &self.token {
                st.progress.remove(t);
            }
            st.closed.is_some()
        };
        let Ok(out) = self.peer.outbound() else {
            return;
        };
        out.forget(&self.id);
        let Some(reason) = self.cancel.filter(|_| !closed) else {
            return;
        };
        let body = jsonrpc::notification(
            "notifications/cancelled",
            Some(json!({"requestId": self.id.to_value(), "reason": reason})),
        );
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = out.send(OutKind::Notification, body).await;
            });
        }
    }
}
