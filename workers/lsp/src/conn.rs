//! JSON-RPC 2.0 over one server's pipes: requests matched to answers by id (in any order),
//! notifications both ways, the server's own requests answered by an [`Inbound`] handler, and
//! the end of the server — whatever causes it — failing every request in flight at once.
//!
//! Four tasks per server: a writer (the only owner of stdin), a reader (stdout, framing,
//! dispatch), a stderr drain (keeps a short tail for error reports), and a process watcher (the
//! only owner of the process; kills it on request). Every buffer between them is bounded; output
//! the server sends unasked (notifications, its requests, stderr, garbage) is metered by a token
//! bucket, and a server that exceeds it is killed.

use crate::framing::{encode, FrameError, FrameLimits, FrameReader};
use crate::sanitize;
use crate::spawn::{ServerExit, ServerProcess, SpawnedServer};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, watch};

/// JSON-RPC error codes we send or look at.
pub mod codes {
    /// The method does not exist (the answer to a server request we do not implement).
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// The params are invalid.
    pub const INVALID_PARAMS: i64 = -32602;
    /// The request was cancelled by the client (LSP).
    pub const REQUEST_CANCELLED: i64 = -32800;
    /// The document changed before the server finished; the request may be sent again (LSP).
    pub const CONTENT_MODIFIED: i64 = -32801;
    /// The server cancelled the request (LSP 3.17).
    pub const SERVER_CANCELLED: i64 = -32802;
}

/// How much unasked output a server may produce: a burst, refilled at a steady rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FloodLimits {
    /// Bytes a server may send at once before the rate applies (a full bucket).
    pub burst_bytes: u64,
    /// Bytes per second the bucket refills with.
    pub bytes_per_second: u64,
}

impl Default for FloodLimits {
    fn default() -> Self {
        FloodLimits {
            burst_bytes: 64 << 20,
            bytes_per_second: 4 << 20,
        }
    }
}

struct FloodGuard {
    limits: FloodLimits,
    tokens: f64,
    last: Instant,
}

impl FloodGuard {
    fn new(limits: FloodLimits) -> Self {
        FloodGuard {
            limits,
            tokens: limits.burst_bytes as f64,
            last: Instant::now(),
        }
    }

    /// Takes `bytes` from the bucket; `false` once it is exhausted.
    fn charge(&mut self, bytes: usize) -> bool {
        let now = Instant::now();
        let refill =
            now.duration_since(self.last).as_secs_f64() * self.limits.bytes_per_second as f64;
        self.tokens = (self.tokens + refill).min(self.limits.burst_bytes as f64);
        self.last = now;
        self.tokens -= bytes as f64;
        self.tokens >= 0.0
    }
}

/// Why a connection ended. The first cause wins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Death {
    /// The process ended or closed its output; with its exit and the tail of its stderr.
    Exited(String),
    /// It broke the framing or sent an absurd message.
    Protocol(String),
    /// It exceeded its output bounds.
    Flooded(String),
    /// We stopped it.
    Stopped,
}

/// How a request failed.
#[derive(Debug, Clone, PartialEq)]
pub enum RpcError {
    /// The connection ended before the answer; holds why.
    Died(Death),
    /// No answer within the request's time; it was cancelled.
    Timeout,
    /// The server answered with a JSON-RPC error.
    Response {
        /// The JSON-RPC error code (see [`codes`]).
        code: i64,
        /// The server's message, unfiltered.
        message: String,
        /// The error's `data`, if any.
        data: Option<Value>,
    },
}

/// Answers what the server asks and receives what it tells. Called on the reader task: must not
/// block.
pub trait Inbound: Send + Sync + 'static {
    /// The result of a server request, or an error `(code, message)`.
    fn request(&self, method: &str, params: Value) -> Result<Value, (i64, String)>;
    /// A notification from the server.
    fn notification(&self, method: &str, params: Value);
    /// A line the server wrote to stderr (already one line, bounded).
    fn stderr_line(&self, line: &str);
}

/// Bounds of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConnLimits {
    /// Bounds on one message's size.
    pub frames: FrameLimits,
    /// Bounds on the server's unasked output over time.
    pub flood: FloodLimits,
}

const STDERR_TAIL: usize = 2048;
const STDERR_LINE: usize = 512;

type Pending = HashMap<i64, oneshot::Sender<Result<Value, RpcError>>>;

struct Shared {
    out: mpsc::Sender<Vec<u8>>,
    pending: Mutex<Pending>,
    death: watch::Sender<Option<Death>>,
    kill: mpsc::Sender<()>,
    exit: watch::Sender<Option<ServerExit>>,
    stderr_tail: Mutex<VecDeque<u8>>,
    /// Set once stderr reached its end (or there is none), so an exit report has all of it.
    stderr_done: watch::Sender<bool>,
    flood: Mutex<FloodGuard>,
    /// We asked the server to exit: its end is a stop, not a crash.
    stopping: std::sync::atomic::AtomicBool,
}

impl Shared {
    fn die(&self, death: Death) {
        let death = if self.stopping.load(Ordering::SeqCst) {
            Death::Stopped
        } else {
            death
        };
        let mut first = false;
        self.death.send_if_modified(|d| {
            if d.is_none() {
                *d = Some(death.clone());
                first = true;
            }
            first
        });
        let _ = self.kill.try_send(());
        let cause = self.death.borrow().clone().unwrap_or(death);
        let pending = std::mem::take(&mut *lock(&self.pending));
        for (_, tx) in pending {
            let _ = tx.send(Err(RpcError::Died(cause.clone())));
        }
    }

    fn stderr_tail(&self) -> String {
        let tail = lock(&self.stderr_tail);
        let bytes: Vec<u8> = tail.iter().copied().collect();
        sanitize::one_line(&String::from_utf8_lossy(&bytes))
    }

    fn charge(&self, bytes: usize) -> bool {
        lock(&self.flood).charge(bytes)
    }
}

/// Locks a mutex, recovering the data if a panicking thread poisoned it: every structure here
/// stays valid between statements, so a poisoned lock holds nothing half-written.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One server's JSON-RPC connection.
pub struct Connection {
    shared: Arc<Shared>,
    next_id: AtomicI64,
    pid: Option<u32>,
}

#[derive(Deserialize)]
struct Incoming {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<Value>,
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    error: Option<IncomingError>,
}

#[derive(Deserialize)]
struct IncomingError {
    code: i64,
    #[serde(default)]
    message: String,
    #[serde(default)]
    data: Option<Value>,
}

impl Connection {
    /// Starts the four tasks over a spawned server. Must be called inside a tokio runtime.
    pub fn start(server: SpawnedServer, limits: ConnLimits, inbound: Arc<dyn Inbound>) -> Self {
        let SpawnedServer {
            stdin,
            stdout,
            stderr,
            process,
        } = server;
        let pid = process.id();
        let (out_tx, out_rx) = mpsc::channel::<Vec<u8>>(256);
        let (kill_tx, kill_rx) = mpsc::channel::<()>(1);
        let shared = Arc::new(Shared {
            out: out_tx,
            pending: Mutex::new(HashMap::new()),
            death: watch::channel(None).0,
            kill: kill_tx,
            exit: watch::channel(None).0,
            stderr_tail: Mutex::new(VecDeque::with_capacity(STDERR_TAIL)),
            stderr_done: watch::channel(stderr.is_none()).0,
            flood: Mutex::new(FloodGuard::new(limits.flood)),
            stopping: std::sync::atomic::AtomicBool::new(false),
        });
        tokio::spawn(write_loop(stdin, out_rx));
        tokio::spawn(process_loop(process, kill_rx, shared.clone()));
        if let Some(stderr) = stderr {
            tokio::spawn(stderr_loop(stderr, shared.clone(), inbound.clone()));
        }
        tokio::spawn(read_loop(stdout, limits.frames, shared.clone(), inbound));
        Connection {
            shared,
            next_id: AtomicI64::new(1),
            pid,
        }
    }

    /// The server process's pid, if it was known at start.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Why the connection ended, once it has.
    pub fn death(&self) -> Option<Death> {
        self.shared.death.borrow().clone()
    }

    /// A receiver that sees the cause once the connection has ended.
    pub fn death_watch(&self) -> watch::Receiver<Option<Death>> {
        self.shared.death.subscribe()
    }

    /// Resolves when the connection has ended.
    pub async fn ended(&self) -> Death {
        let mut rx = self.shared.death.subscribe();
        loop {
            if let Some(d) = rx.borrow_and_update().clone() {
                return d;
            }
            if rx.changed().await.is_err() {
                return Death::Stopped;
            }
        }
    }

    /// The process's exit, once it has been reaped.
    pub async fn exited(&self, within: Duration) -> Option<ServerExit> {
        let mut rx = self.shared.exit.subscribe();
        let wait = async {
            loop {
                if let Some(e) = *rx.borrow_and_update() {
                    return Some(e);
                }
                if rx.changed().await.is_err() {
                    return None;
                }
            }
        };
        tokio::time::timeout(within, wait).await.ok().flatten()
    }

    /// Requests sent and not answered yet.
    pub fn pending(&self) -> usize {
        lock(&self.shared.pending).len()
    }

    /// From now on the end of the server counts as [`Death::Stopped`] (we are shutting it down).
    pub fn expect_exit(&self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
    }

    /// Kills the server (and marks the connection ended with `death`).
    pub fn kill(&self, death: Death) {
        self.shared.die(death);
    }

    /// Sends a request and waits for its answer, at most `timeout` (sending included). On
    /// timeout the request is cancelled with `$/cancelRequest`.
    pub async fn request(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, RpcError> {
        if let Some(d) = self.death() {
            return Err(RpcError::Died(d));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.shared.pending).insert(id, tx);
        // The connection may have died between the check and the insert; its drain ran already.
        if let Some(d) = self.death() {
            lock(&self.shared.pending).remove(&id);
            return Err(RpcError::Died(d));
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let exchange = async {
            self.send(&body).await?;
            match rx.await {
                Ok(answer) => answer,
                Err(_) => Err(RpcError::Died(self.death().unwrap_or(Death::Stopped))),
            }
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(answer) => answer,
            Err(_) => {
                lock(&self.shared.pending).remove(&id);
                let cancel =
                    json!({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": id}});
                // Best effort: a server that is not reading its input cannot be told.
                let _ = self.shared.out.try_send(encode(&to_bytes(&cancel)));
                Err(RpcError::Timeout)
            }
        }
    }

    /// Sends a notification, waiting at most `timeout` for room in the output queue.
    pub async fn notify(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<(), RpcError> {
        let body = json!({"jsonrpc": "2.0", "method": method, "params": params});
        match tokio::time::timeout(timeout, self.send(&body)).await {
            Ok(r) => r,
            Err(_) => Err(RpcError::Timeout),
        }
    }

    async fn send(&self, body: &Value) -> Result<(), RpcError> {
        if let Some(d) = self.death() {
            return Err(RpcError::Died(d));
        }
        self.shared
            .out
            .send(encode(&to_bytes(body)))
            .await
            .map_err(|_| RpcError::Died(self.death().unwrap_or(Death::Stopped)))
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.shared.die(Death::Stopped);
    }
}

fn to_bytes(v: &Value) -> Vec<u8> {
    // Serialising a `Value` cannot fail: its keys are strings and it holds no custom types.
    serde_json::to_vec(v).unwrap_or_default()
}

async fn write_loop(
    mut stdin: Box<dyn AsyncWrite + Send + Unpin>,
    mut rx: mpsc::Receiver<Vec<u8>>,
) {
    while let Some(frame) = rx.recv().await {
        if stdin.write_all(&frame).await.is_err() || stdin.flush().await.is_err() {
            break;
        }
    }
    let _ = stdin.shutdown().await;
}

async fn process_loop(
    mut process: Box<dyn ServerProcess>,
    mut kill: mpsc::Receiver<()>,
    shared: Arc<Shared>,
) {
    let mut killed = false;
    let status = loop {
        tokio::select! {
            status = process.wait() => break status,
            k = kill.recv(), if !killed => {
                killed = true;
                let _ = k;
                let _ = process.start_kill();
            }
        }
    };
    let exit = status.unwrap_or(ServerExit {
        code: None,
        signal: None,
    });
    shared.exit.send_replace(Some(exit));
    // Give the reader a moment to drain what the server wrote before it ended, then make sure
    // the connection is marked ended even if a helper process still holds stdout open.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let tail = shared.stderr_tail();
    shared.die(Death::Exited(describe_exit(Some(exit), &tail)));
}

fn describe_exit(exit: Option<ServerExit>, stderr_tail: &str) -> String {
    let mut s = match exit {
        Some(e) => e.to_string(),
        None => "closed its output".to_string(),
    };
    if !stderr_tail.is_empty() {
        s.push_str("; stderr: ");
        s.push_str(stderr_tail);
    }
    s
}

async fn stderr_loop(
    mut stderr: Box<dyn AsyncRead + Send + Unpin>,
    shared: Arc<Shared>,
    inbound: Arc<dyn Inbound>,
) {
    let mut buf = vec![0u8; 8192];
    let mut line: Vec<u8> = Vec::new();
    loop {
        let n = match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if !shared.charge(n) {
            shared.die(Death::Flooded(format!(
                "more than {} bytes on stderr and unasked messages",
                lock(&shared.flood).limits.burst_bytes
            )));
            break;
        }
        {
            let mut tail = lock(&shared.stderr_tail);
            for &b in &buf[..n] {
                if tail.len() == STDERR_TAIL {
                    tail.pop_front();
                }
                tail.push_back(b);
            }
        }
        for &b in &buf[..n] {
            if b == b'\n' {
                emit_stderr_line(&inbound, &line);
                line.clear();
            } else if line.len() < STDERR_LINE {
                line.push(b);
            }
        }
    }
    if !line.is_empty() {
        emit_stderr_line(&inbound, &line);
    }
    shared.stderr_done.send_replace(true);
}

fn emit_stderr_line(inbound: &Arc<dyn Inbound>, line: &[u8]) {
    let text = sanitize::one_line(&String::from_utf8_lossy(line));
    if !text.is_empty() {
        inbound.stderr_line(&text);
    }
}

async fn read_loop(
    stdout: Box<dyn AsyncRead + Send + Unpin>,
    limits: FrameLimits,
    shared: Arc<Shared>,
    inbound: Arc<dyn Inbound>,
) {
    let mut reader = FrameReader::new(stdout, limits);
    let mut garbage_seen = 0usize;
    loop {
        let body = match reader.next().await {
            Ok(Some(body)) => body,
            Ok(None) => break,
            Err(FrameError::Io(_)) | Err(FrameError::Truncated) => break,
            Err(e) => {
                shared.die(Death::Protocol(e.to_string()));
                return;
            }
        };
        let garbage = reader.garbage() - garbage_seen;
        garbage_seen = reader.garbage();
        let Ok(msg) = serde_json::from_slice::<Incoming>(&body) else {
            // The framing is intact, so the stream is still usable: skip the message, but meter it.
            if !shared.charge(body.len() + garbage) {
                shared.die(flood_death(&shared));
                return;
            }
            inbound.stderr_line("(a message that is not JSON-RPC was skipped)");
            continue;
        };
        let is_response = msg.method.is_none() && msg.id.is_some();
        if !is_response && !shared.charge(body.len() + garbage) {
            shared.die(flood_death(&shared));
            return;
        }
        match (msg.id, msg.method) {
            (Some(id), None) => {
                let Some(id) = id.as_i64() else { continue };
                let Some(tx) = lock(&shared.pending).remove(&id) else {
                    continue; // answered after we gave up on it
                };
                let answer = match msg.error {
                    Some(e) => Err(RpcError::Response {
                        code: e.code,
                        message: e.message,
                        data: e.data,
                    }),
                    None => Ok(msg.result.unwrap_or(Value::Null)),
                };
                let _ = tx.send(answer);
            }
            (Some(id), Some(method)) => {
                let reply = match inbound.request(&method, msg.params.unwrap_or(Value::Null)) {
                    Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
                    Err((code, message)) => {
                        json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
                    }
                };
                if shared.out.send(encode(&to_bytes(&reply))).await.is_err() {
                    break;
                }
            }
            (None, Some(method)) => {
                inbound.notification(&method, msg.params.unwrap_or(Value::Null))
            }
            (None, None) => {}
        }
    }
    // The output ended: wait briefly for the exit status so the reason says how it ended.
    let mut exit_rx = shared.exit.subscribe();
    let exit = tokio::time::timeout(Duration::from_secs(2), async {
        loop {
            if let Some(e) = *exit_rx.borrow_and_update() {
                return Some(e);
            }
            if exit_rx.changed().await.is_err() {
                return None;
            }
        }
    })
    .await
    .ok()
    .flatten();
    let mut stderr_done = shared.stderr_done.subscribe();
    let _ = tokio::time::timeout(Duration::from_secs(1), stderr_done.wait_for(|done| *done)).await;
    let tail = shared.stderr_tail();
    shared.die(Death::Exited(describe_exit(exit, &tail)));
}

fn flood_death(shared: &Shared) -> Death {
    let limits = lock(&shared.flood).limits;
    Death::Flooded(format!(
        "more than {} bytes of unasked output (refilled at {} bytes/s)",
        limits.burst_bytes, limits.bytes_per_second
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_allows_a_burst_then_refuses() {
        let mut g = FloodGuard::new(FloodLimits {
            burst_bytes: 100,
            bytes_per_second: 0,
        });
        assert!(g.charge(60));
        assert!(g.charge(40));
        assert!(!g.charge(1));
    }
}
