//! Typed request/response over a framed channel.
//!
//! [`Client`] is the supervisor's end: it numbers requests, matches replies by id (they may arrive
//! in any order), delivers streamed items, cancels, pings, and fails every request in flight at
//! once when the channel ends. [`serve`] is the worker's end: one task per request, so a slow
//! request never holds up a fast one, and a cancel aborts exactly its request.

use crate::frame::FrameError;
use crate::proto::{
    decode_payload, encode_payload, frame_type, ItemEnvelope, Protocol, RemoteError,
    RemoteErrorKind, ReplyEnvelope, RequestEnvelope,
};
use crate::transport::{FrameReader, FrameWriter, IpcError};
use crate::Role;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot, Mutex};

/// How many streamed items may wait for a slow consumer before the channel reader waits too.
const STREAM_BUFFER: usize = 64;

/// Why a request did not complete.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CallError {
    /// The channel ended (the worker crashed, was killed or restarted) before the reply.
    #[error("the {role} worker went away before answering ({reason})")]
    WorkerGone {
        /// The worker's role.
        role: Role,
        /// How the channel ended.
        reason: String,
    },
    /// The worker answered with an error for this request; the channel is fine.
    #[error("the {role} worker refused the request: {error}")]
    Remote {
        /// The worker's role.
        role: Role,
        /// The worker's error.
        error: RemoteError,
    },
    /// The request's frame exceeds the channel's limit, so it was never sent.
    #[error("request could not be sent: {0}")]
    TooLarge(FrameError),
    /// No reply came within the caller's limit; the request was cancelled.
    #[error("the {role} worker did not answer within {ms} ms")]
    Timeout {
        /// The worker's role.
        role: Role,
        /// The limit that passed, in milliseconds.
        ms: u64,
    },
    /// No worker of this role is running (not started for this run, or stopped for good).
    #[error("the {role} worker is unavailable: {reason}")]
    Unavailable {
        /// The role asked for.
        role: Role,
        /// Why it is not running.
        reason: String,
    },
}

impl CallError {
    /// True when the failure came from the worker process ending (crash, kill, restart).
    pub fn is_worker_gone(&self) -> bool {
        matches!(self, CallError::WorkerGone { .. })
    }
}

/// One part of a streamed response.
#[derive(Debug)]
pub enum StreamPart<P: Protocol> {
    /// A streamed item; more parts follow.
    Item(P::Item),
    /// The final response; the stream ends after it.
    Done(P::Response),
}

enum Pending<P: Protocol> {
    Unary(oneshot::Sender<Result<P::Response, CallError>>),
    Stream(mpsc::Sender<Result<StreamPart<P>, CallError>>),
}

struct Table<P: Protocol> {
    requests: HashMap<u64, Pending<P>>,
    pings: HashMap<u64, oneshot::Sender<()>>,
    /// Set once the channel has ended; no new request is accepted after it.
    closed: Option<String>,
}

type SharedWriter<W> = Arc<Mutex<FrameWriter<W>>>;

struct Shared<P: Protocol, W> {
    role: Role,
    writer: SharedWriter<W>,
    table: StdMutex<Table<P>>,
    next_id: AtomicU64,
}

/// The supervisor's end of a channel to one worker process.
pub struct Client<P: Protocol, W> {
    shared: Arc<Shared<P, W>>,
}

impl<P: Protocol, W> Clone for Client<P, W> {
    fn clone(&self) -> Self {
        Client {
            shared: self.shared.clone(),
        }
    }
}

/// What the reader does with a worker's event when the events receiver is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventFlow {
    /// Drop it: a worker that floods events faster than they are consumed loses them rather
    /// than growing the supervisor's memory or stalling its replies. For receivers that may be
    /// held without being read.
    DropWhenFull,
    /// Wait for room: nothing the worker sends is lost, and a flood is slowed to the speed of
    /// the consumer (the reader stops reading, the socket fills, the worker's writes wait).
    /// Replies wait behind the event too, so only a receiver that is always drained by a task
    /// of its own, which never waits on this channel's replies, may ask for this. Events that
    /// are records (the broker's egress decisions) need it: a command opening connections in
    /// a burst must not be able to outrun the run record.
    Backpressure,
}

/// How a channel ended, as seen by the reader.
#[derive(Debug)]
pub enum ChannelEnd {
    /// The worker closed its end between frames.
    Eof,
    /// The worker sent something that is not a valid frame or message.
    Error(IpcError),
}

impl std::fmt::Display for ChannelEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChannelEnd::Eof => f.write_str("channel closed"),
            ChannelEnd::Error(e) => write!(f, "{e}"),
        }
    }
}

impl<P, W> Client<P, W>
where
    P: Protocol,
    W: AsyncWrite + Unpin + Send + 'static,
{
    /// Start the client over a channel whose handshake is done. Returns the client, the worker's
    /// events, and a receiver that resolves when the channel ends (after every request in flight
    /// has been failed). Events beyond a full receiver are dropped ([`EventFlow::DropWhenFull`]).
    pub fn start<R>(
        reader: FrameReader<R>,
        writer: FrameWriter<W>,
    ) -> (
        Client<P, W>,
        mpsc::Receiver<P::Event>,
        oneshot::Receiver<ChannelEnd>,
    )
    where
        R: AsyncRead + Unpin + Send + 'static,
    {
        Self::start_with(reader, writer, EventFlow::DropWhenFull)
    }

    /// [`Client::start`] with the given treatment of events beyond a full receiver.
    pub fn start_with<R>(
        mut reader: FrameReader<R>,
        writer: FrameWriter<W>,
        flow: EventFlow,
    ) -> (
        Client<P, W>,
        mpsc::Receiver<P::Event>,
        oneshot::Receiver<ChannelEnd>,
    )
    where
        R: AsyncRead + Unpin + Send + 'static,
    {
        let shared = Arc::new(Shared {
            role: P::ROLE,
            writer: Arc::new(Mutex::new(writer)),
            table: StdMutex::new(Table {
                requests: HashMap::new(),
                pings: HashMap::new(),
                closed: None,
            }),
            next_id: AtomicU64::new(1),
        });
        let (event_tx, event_rx) = mpsc::channel(256);
        let (end_tx, end_rx) = oneshot::channel();
        let reader_shared = shared.clone();
        tokio::spawn(async move {
            let end = read_loop(&reader_shared, &mut reader, &event_tx, flow).await;
            reader_shared.fail_all(&end.to_string());
            let _ = end_tx.send(end);
        });
        (Client { shared }, event_rx, end_rx)
    }

    /// The role of the worker at the other end.
    pub fn role(&self) -> Role {
        self.shared.role
    }

    /// Fail every request in flight with `reason` and refuse new ones, as if the channel had
    /// ended. The supervisor calls this when it kills the worker (a missed heartbeat, a stop), so
    /// callers learn at once instead of when the socket reports the end.
    pub fn close(&self, reason: &str) {
        self.shared.fail_all(reason);
    }

    /// [`Client::close`], then end the channel for writing: the worker reads the end of its
    /// requests after the last whole frame, stops its request tasks and its own peers (a
    /// language server's `shutdown`, an MCP call's `notifications/cancelled`), and exits. Its
    /// events still arrive until it does. The orderly half of a stop; the supervisor kills a
    /// worker that has not exited within its grace.
    pub async fn finish(&self, reason: &str) {
        self.shared.fail_all(reason);
        let _ = self.shared.writer.lock().await.finish().await;
    }

    /// True once the channel has ended.
    pub fn is_closed(&self) -> bool {
        self.shared.lock().closed.is_some()
    }

    /// Send a request and wait for its reply. Dropping the future cancels the request.
    pub async fn call(&self, body: P::Request) -> Result<P::Response, CallError> {
        let (tx, rx) = oneshot::channel();
        let id = self.shared.register(Pending::Unary(tx))?;
        let mut guard = CancelGuard {
            client: Some(self.clone()),
            id,
        };
        self.send_request(id, &body).await?;
        let result = rx.await.unwrap_or_else(|_| Err(self.shared.gone()));
        guard.client = None;
        result
    }

    /// Send a request whose response is streamed. Dropping the stream before it ends cancels it.
    pub async fn call_stream(&self, body: P::Request) -> Result<ResponseStream<P, W>, CallError> {
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let id = self.shared.register(Pending::Stream(tx))?;
        let stream = ResponseStream {
            client: self.clone(),
            id,
            rx,
            finished: false,
        };
        self.send_request(id, &body).await?;
        Ok(stream)
    }

    /// Round trip a ping.
    pub async fn ping(&self) -> Result<(), CallError> {
        let (tx, rx) = oneshot::channel();
        let nonce = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut table = self.shared.lock();
            if let Some(reason) = &table.closed {
                return Err(CallError::WorkerGone {
                    role: self.shared.role,
                    reason: reason.clone(),
                });
            }
            table.pings.insert(nonce, tx);
        }
        self.send_frame(frame_type::PING, &encode_payload(&nonce))
            .await?;
        rx.await.map_err(|_| self.shared.gone())
    }

    /// Ask the worker to cancel request `id`. Its reply (`Cancelled`) fails the caller.
    pub async fn cancel(&self, id: u64) -> Result<(), CallError> {
        self.send_frame(frame_type::CANCEL, &encode_payload(&id))
            .await
    }

    async fn send_request(&self, id: u64, body: &P::Request) -> Result<(), CallError> {
        let payload = encode_payload(&RequestEnvelope { id, body });
        let sent = self.send_frame(frame_type::REQUEST, &payload).await;
        if sent.is_err() {
            self.shared.lock().requests.remove(&id);
        }
        sent
    }

    async fn send_frame(&self, ty: u8, payload: &[u8]) -> Result<(), CallError> {
        let mut w = self.shared.writer.lock().await;
        match w.send(ty, payload).await {
            Ok(()) => Ok(()),
            Err(IpcError::Frame(e)) => Err(CallError::TooLarge(e)),
            Err(e) => Err(CallError::WorkerGone {
                role: self.shared.role,
                reason: e.to_string(),
            }),
        }
    }
}

impl<P: Protocol, W> Shared<P, W> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table<P>> {
        // A panic while holding this lock would be a bug in this module; the table stays usable.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn gone(&self) -> CallError {
        CallError::WorkerGone {
            role: self.role,
            reason: self
                .lock()
                .closed
                .clone()
                .unwrap_or_else(|| "channel closed".into()),
        }
    }

    fn register(&self, pending: Pending<P>) -> Result<u64, CallError> {
        let mut table = self.lock();
        if let Some(reason) = &table.closed {
            return Err(CallError::WorkerGone {
                role: self.role,
                reason: reason.clone(),
            });
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        table.requests.insert(id, pending);
        Ok(id)
    }

    /// Fail every request in flight at once and refuse new ones.
    fn fail_all(&self, reason: &str) {
        let (requests, pings) = {
            let mut table = self.lock();
            if table.closed.is_none() {
                table.closed = Some(reason.to_string());
            }
            (
                std::mem::take(&mut table.requests),
                std::mem::take(&mut table.pings),
            )
        };
        drop(pings);
        for (_, pending) in requests {
            let err = CallError::WorkerGone {
                role: self.role,
                reason: reason.to_string(),
            };
            match pending {
                Pending::Unary(tx) => {
                    let _ = tx.send(Err(err));
                }
                Pending::Stream(tx) => {
                    let _ = tx.try_send(Err(err));
                }
            }
        }
    }
}

async fn read_loop<P, W, R>(
    shared: &Shared<P, W>,
    reader: &mut FrameReader<R>,
    events: &mpsc::Sender<P::Event>,
    flow: EventFlow,
) -> ChannelEnd
where
    P: Protocol,
    R: AsyncRead + Unpin,
{
    loop {
        let frame = match reader.next().await {
            Ok(Some(f)) => f,
            Ok(None) => return ChannelEnd::Eof,
            Err(e) => return ChannelEnd::Error(e),
        };
        let handled: Result<(), IpcError> = async {
            match frame.frame_type {
                frame_type::REPLY => {
                    let env: ReplyEnvelope<P::Response> = decode_payload("REPLY", &frame.payload)?;
                    let pending = shared.lock().requests.remove(&env.id);
                    let result = env.result.map_err(|error| CallError::Remote {
                        role: shared.role,
                        error,
                    });
                    match pending {
                        Some(Pending::Unary(tx)) => {
                            let _ = tx.send(result);
                        }
                        Some(Pending::Stream(tx)) => {
                            let _ = tx.send(result.map(StreamPart::Done)).await;
                        }
                        None => {} // cancelled or abandoned by the caller
                    }
                }
                frame_type::ITEM => {
                    let env: ItemEnvelope<P::Item> = decode_payload("ITEM", &frame.payload)?;
                    let tx = match shared.lock().requests.get(&env.id) {
                        Some(Pending::Stream(tx)) => Some(tx.clone()),
                        _ => None,
                    };
                    if let Some(tx) = tx {
                        let _ = tx.send(Ok(StreamPart::Item(env.item))).await;
                    }
                }
                frame_type::PONG => {
                    let nonce: u64 = decode_payload("PONG", &frame.payload)?;
                    if let Some(tx) = shared.lock().pings.remove(&nonce) {
                        let _ = tx.send(());
                    }
                }
                frame_type::EVENT => {
                    let event: P::Event = decode_payload("EVENT", &frame.payload)?;
                    // Either way a receiver that is gone takes nothing: the event has no reader.
                    match flow {
                        EventFlow::DropWhenFull => {
                            let _ = events.try_send(event);
                        }
                        EventFlow::Backpressure => {
                            let _ = events.send(event).await;
                        }
                    }
                }
                got => return Err(IpcError::UnexpectedFrame { got }),
            }
            Ok(())
        }
        .await;
        if let Err(e) = handled {
            return ChannelEnd::Error(e);
        }
    }
}

/// Sends a cancel when a call is abandoned before its reply.
struct CancelGuard<P: Protocol, W>
where
    W: AsyncWrite + Unpin + Send + 'static,
{
    client: Option<Client<P, W>>,
    id: u64,
}

impl<P: Protocol, W> Drop for CancelGuard<P, W>
where
    W: AsyncWrite + Unpin + Send + 'static,
{
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            let id = self.id;
            let was_pending = client.shared.lock().requests.remove(&id).is_some();
            if was_pending && !client.is_closed() {
                if let Ok(rt) = tokio::runtime::Handle::try_current() {
                    rt.spawn(async move {
                        let _ = client.cancel(id).await;
                    });
                }
            }
        }
    }
}

/// The parts of one streamed response, in order, ending with `Done` or an error.
pub struct ResponseStream<P: Protocol, W>
where
    W: AsyncWrite + Unpin + Send + 'static,
{
    client: Client<P, W>,
    id: u64,
    rx: mpsc::Receiver<Result<StreamPart<P>, CallError>>,
    finished: bool,
}

impl<P: Protocol, W> ResponseStream<P, W>
where
    W: AsyncWrite + Unpin + Send + 'static,
{
    /// The request's id on the channel (what a cancel names).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The next part; `None` after `Done` or an error.
    pub async fn next(&mut self) -> Option<Result<StreamPart<P>, CallError>> {
        if self.finished {
            return None;
        }
        let part = match self.rx.recv().await {
            Some(p) => p,
            None => Err(self.client.shared.gone()),
        };
        if !matches!(part, Ok(StreamPart::Item(_))) {
            self.finished = true;
        }
        Some(part)
    }

    /// Cancel the request; the stream then ends with a `Cancelled` error.
    pub async fn cancel(&self) -> Result<(), CallError> {
        self.client.cancel(self.id).await
    }
}

impl<P: Protocol, W> Drop for ResponseStream<P, W>
where
    W: AsyncWrite + Unpin + Send + 'static,
{
    fn drop(&mut self) {
        if !self.finished {
            drop(CancelGuard {
                client: Some(self.client.clone()),
                id: self.id,
            });
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Worker side

/// Sends the streamed items of one request.
pub struct ItemSink<P: Protocol, W> {
    id: u64,
    writer: SharedWriter<W>,
    _p: std::marker::PhantomData<fn() -> P>,
}

impl<P: Protocol, W: AsyncWrite + Unpin + Send> ItemSink<P, W> {
    /// Send one streamed item for this request; fails only if the channel is gone.
    pub async fn send(&self, item: P::Item) -> Result<(), IpcError> {
        let payload = encode_payload(&ItemEnvelope { id: self.id, item });
        self.writer
            .lock()
            .await
            .send(frame_type::ITEM, &payload)
            .await
    }
}

/// Sends unsolicited events to the supervisor.
pub struct EventSink<P: Protocol, W> {
    writer: SharedWriter<W>,
    _p: std::marker::PhantomData<fn() -> P>,
}

impl<P: Protocol, W> Clone for EventSink<P, W> {
    fn clone(&self) -> Self {
        EventSink {
            writer: self.writer.clone(),
            _p: std::marker::PhantomData,
        }
    }
}

impl<P: Protocol, W: AsyncWrite + Unpin + Send> EventSink<P, W> {
    /// Send one event; fails only if the channel is gone.
    pub async fn send(&self, event: P::Event) -> Result<(), IpcError> {
        let payload = encode_payload(&event);
        self.writer
            .lock()
            .await
            .send(frame_type::EVENT, &payload)
            .await
    }
}

/// A worker's request handler.
pub trait Handler<P: Protocol, W>: Send + Sync + 'static {
    /// Answer one request, sending any streamed parts through `items` first. Each call runs in its
    /// own task and is aborted if the supervisor cancels its request.
    fn handle(
        &self,
        request: P::Request,
        items: ItemSink<P, W>,
    ) -> impl Future<Output = Result<P::Response, RemoteError>> + Send;

    /// The supervisor ended the channel (an orderly stop): every request task has been aborted
    /// and has ended. Stop what the worker runs for others — language servers get `shutdown`
    /// and `exit`, MCP servers their end of session — before the process exits. The supervisor
    /// kills a worker still running after its grace, so this must not wait unbounded.
    fn stop(&self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// A worker's writer half, shared by its request tasks.
pub struct ServerWriter<W>(SharedWriter<W>);

impl<W> ServerWriter<W> {
    /// Share `writer` between the request tasks and event senders of one worker.
    pub fn new(writer: FrameWriter<W>) -> Self {
        ServerWriter(Arc::new(Mutex::new(writer)))
    }

    /// A sender of `P`'s events over this writer.
    pub fn events<P: Protocol>(&self) -> EventSink<P, W> {
        EventSink {
            writer: self.0.clone(),
            _p: std::marker::PhantomData,
        }
    }
}

type InFlight = StdMutex<HashMap<u64, tokio::task::JoinHandle<()>>>;

fn lock(m: &InFlight) -> std::sync::MutexGuard<'_, HashMap<u64, tokio::task::JoinHandle<()>>> {
    // Poisoning needs a panic while the lock is held; the map is still consistent then.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Serve requests until the supervisor closes the channel (`Ok`) or breaks the protocol (`Err`).
/// When the channel ends cleanly (the supervisor's [`Client::finish`]), the requests still in
/// flight are aborted and awaited — their drop guards run, so an MCP call tells its server it
/// was cancelled — and then the handler's [`Handler::stop`] runs.
pub async fn serve<P, H, R, W>(
    mut reader: FrameReader<R>,
    writer: ServerWriter<W>,
    handler: Arc<H>,
) -> Result<(), IpcError>
where
    P: Protocol,
    H: Handler<P, W>,
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let writer = writer.0;
    let in_flight: Arc<InFlight> = Arc::default();
    // Request tasks never outlive the loop that serves them, however it ends (including being
    // dropped): they hold the writer, and the channel must close when serving stops.
    let _abort_on_exit = AbortAll(in_flight.clone());
    while let Some(frame) = reader.next().await? {
        match frame.frame_type {
            frame_type::REQUEST => {
                let env: RequestEnvelope<P::Request> = decode_payload("REQUEST", &frame.payload)?;
                let id = env.id;
                let sink = ItemSink {
                    id,
                    writer: writer.clone(),
                    _p: std::marker::PhantomData,
                };
                let handler = handler.clone();
                let task_writer = writer.clone();
                let task_in_flight = in_flight.clone();
                // Hold the map lock while spawning so the task cannot finish (and look itself
                // up) before its abort handle is recorded.
                let mut map = lock(&in_flight);
                let task = tokio::spawn(async move {
                    let result = handler.handle(env.body, sink).await;
                    // Whoever removes the id owns the reply: this task, or a cancel.
                    if lock(&task_in_flight).remove(&id).is_some() {
                        let payload = encode_payload(&ReplyEnvelope { id, result });
                        let _ = task_writer
                            .lock()
                            .await
                            .send(frame_type::REPLY, &payload)
                            .await;
                    }
                });
                map.insert(id, task);
            }
            frame_type::CANCEL => {
                let id: u64 = decode_payload("CANCEL", &frame.payload)?;
                let handle = lock(&in_flight).remove(&id);
                if let Some(handle) = handle {
                    handle.abort();
                    let result: Result<P::Response, RemoteError> = Err(RemoteError::new(
                        RemoteErrorKind::Cancelled,
                        "cancelled by the supervisor",
                    ));
                    let payload = encode_payload(&ReplyEnvelope { id, result });
                    writer
                        .lock()
                        .await
                        .send(frame_type::REPLY, &payload)
                        .await?;
                }
            }
            frame_type::PING => {
                let nonce: u64 = decode_payload("PING", &frame.payload)?;
                writer
                    .lock()
                    .await
                    .send(frame_type::PONG, &encode_payload(&nonce))
                    .await?;
            }
            got => return Err(IpcError::UnexpectedFrame { got }),
        }
    }
    let tasks: Vec<_> = lock(&in_flight).drain().map(|(_, task)| task).collect();
    for task in tasks {
        task.abort();
        // Ends once the task's future is dropped (or it finished first).
        let _ = task.await;
    }
    handler.stop().await;
    Ok(())
}

struct AbortAll(Arc<InFlight>);

impl Drop for AbortAll {
    fn drop(&mut self) {
        for (_, handle) in lock(&self.0).drain() {
            handle.abort();
        }
    }
}
