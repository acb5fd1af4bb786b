//! The stdio transport: newline-delimited JSON-RPC on the server's stdin and stdout; stderr
//! captured line by line (each line bounded) to a log callback and never parsed.
//!
//! This module never spawns: a [`ServerSpawner`] hands over the three streams and a handle on the
//! process. In the worker that is the sandboxed command runner; tests use a plain tokio spawner.

use crate::error::{CloseReason, McpError};
use crate::framing::{LineError, LineReader};
use crate::jsonrpc::{excerpt, Id};
use crate::peer::{OutKind, Outbound, Peer};
use crate::BoxFuture;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot, watch};

/// How to start a stdio server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StdioSpec {
    /// The program.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// The whole environment of the server (the runner starts from an empty one).
    pub env: Vec<(String, String)>,
    /// Its working directory (`None`: the spawner's default).
    pub cwd: Option<PathBuf>,
}

/// How a server process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerExit {
    /// Its exit status, if it exited.
    pub code: Option<i32>,
    /// The signal that killed it, if one did.
    pub signal: Option<i32>,
}

impl fmt::Display for ServerExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.code, self.signal) {
            (Some(c), _) => write!(f, "exit status {c}"),
            (None, Some(s)) => write!(f, "killed by signal {s}"),
            (None, None) => write!(f, "exit status unknown"),
        }
    }
}

/// The process behind a stdio server.
pub trait ServerProcess: Send {
    /// Wait for the process to end. Must be cancel-safe (it is raced against shutdown).
    fn wait(&mut self) -> BoxFuture<'_, ServerExit>;
    /// Once [`ServerProcess::wait`] has returned: why the program never ran, when the runner
    /// reported that it could not start it (a missing program, a failed `exec`). `None` (the
    /// default) when it ran, however it ended.
    fn start_error(&self) -> Option<String> {
        None
    }
    /// Kill the process (and whatever it started, where the runner can).
    fn kill(&mut self) -> BoxFuture<'_, ()>;
}

/// A started server's streams and process.
pub struct ServerIo {
    /// Where we write messages to the server.
    pub stdin: Box<dyn AsyncWrite + Send + Unpin>,
    /// Where the server writes messages to us.
    pub stdout: Box<dyn AsyncRead + Send + Unpin>,
    /// Its stderr, when it is a pipe.
    pub stderr: Option<Box<dyn AsyncRead + Send + Unpin>>,
    /// The process, to wait for or kill.
    pub process: Box<dyn ServerProcess>,
}

/// Why a server could not be started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SpawnError(pub String);

/// Starts stdio servers.
pub trait ServerSpawner: Send + Sync {
    /// Start the server `spec` describes.
    fn spawn<'a>(&'a self, spec: &'a StdioSpec) -> BoxFuture<'a, Result<ServerIo, SpawnError>>;
}

/// Receives each stderr line of a server (at most `STDERR_LINE_BYTES`, `cut` when longer).
pub type StderrFn = Arc<dyn Fn(&str, &str, bool) + Send + Sync>;

/// Longest stderr line passed on; the rest of a longer line is skipped.
pub const STDERR_LINE_BYTES: usize = 4096;

struct StdioOutbound {
    tx: Mutex<Option<mpsc::Sender<Vec<u8>>>>,
}

impl Outbound for StdioOutbound {
    fn send(&self, _kind: OutKind, body: Vec<u8>) -> BoxFuture<'_, Result<(), McpError>> {
        let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Box::pin(async move {
            let tx = tx.ok_or(McpError::Closed(CloseReason::ShutDown))?;
            tx.send(body)
                .await
                .map_err(|_| McpError::Closed(CloseReason::ShutDown))
        })
    }

    fn forget(&self, _id: &Id) {}
}

/// How a server process ended, as the reason its connection closes: it never ran (the runner
/// could not start it), or it exited.
fn ended(exit: ServerExit, process: &dyn ServerProcess) -> CloseReason {
    match process.start_error() {
        Some(reason) => CloseReason::NotStarted { reason },
        None => CloseReason::Exited(Some(exit)),
    }
}

/// The running transport of one stdio server.
pub(crate) struct StdioConnection {
    outbound: Arc<StdioOutbound>,
    shutdown: Mutex<Option<oneshot::Sender<Duration>>>,
    done: watch::Receiver<bool>,
}

impl StdioConnection {
    /// Wire `io` to `peer`: a writer task owning stdin, a reader task on stdout, a stderr task,
    /// and a monitor owning the process.
    pub fn start(
        peer: &Arc<Peer>,
        io: ServerIo,
        max_message_bytes: usize,
        stderr_fn: Option<StderrFn>,
    ) -> StdioConnection {
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(64);
        let outbound = Arc::new(StdioOutbound {
            tx: Mutex::new(Some(tx)),
        });
        peer.set_outbound(outbound.clone());
        // How the process ended, as the reason the connection closes.
        let (exit_tx, exit_rx) = watch::channel::<Option<CloseReason>>(None);
        let (shutdown_tx, shutdown_rx) = oneshot::channel::<Duration>();
        let (done_tx, done_rx) = watch::channel(false);

        let mut stdin = io.stdin;
        let writer_peer = peer.clone();
        let mut writer_exit = exit_rx.clone();
        tokio::spawn(async move {
            while let Some(mut line) = rx.recv().await {
                line.push(b'\n');
                let r = async {
                    stdin.write_all(&line).await?;
                    stdin.flush().await
                }
                .await;
                if let Err(e) = r {
                    let failed = CloseReason::Transport {
                        detail: format!("cannot write to the server's stdin: {e}"),
                    };
                    // A broken pipe is a server that exited (or closed its stdin) before
                    // reading: how it ended, if that comes soon, is the reason to report, the
                    // same one whichever of the write and the read noticed first.
                    let reason = if e.kind() == std::io::ErrorKind::BrokenPipe {
                        let _ = tokio::time::timeout(
                            Duration::from_secs(2),
                            writer_exit.wait_for(Option::is_some),
                        )
                        .await;
                        let ended = writer_exit.borrow().clone();
                        ended.unwrap_or(failed)
                    } else {
                        failed
                    };
                    writer_peer.close(reason);
                    break;
                }
            }
            // Dropping stdin closes it: the first step of a stdio shutdown.
            let _ = stdin.shutdown().await;
        });

        let reader_peer = peer.clone();
        let mut exit_seen = exit_rx.clone();
        let stdout = io.stdout;
        tokio::spawn(async move {
            let mut lines = LineReader::new(
                BufReader::with_capacity(64 * 1024, stdout),
                max_message_bytes,
            );
            let reason = loop {
                match lines.next_line().await {
                    Ok(Some(line)) => {
                        let doc = match serde_json::from_slice(&line) {
                            Ok(doc) => doc,
                            Err(e) => {
                                break CloseReason::Malformed {
                                    detail: format!(
                                        "invalid JSON: {e}; line starts {:?}",
                                        excerpt(&String::from_utf8_lossy(&line), 80)
                                    ),
                                }
                            }
                        };
                        if let Err(why) = reader_peer.dispatch_document(doc, None) {
                            break CloseReason::Malformed { detail: why };
                        }
                    }
                    Ok(None) | Err(LineError::Truncated) => {
                        // Output closed: the process is ending; report how, if it tells us soon.
                        let _ = tokio::time::timeout(
                            Duration::from_secs(2),
                            exit_seen.wait_for(Option::is_some),
                        )
                        .await;
                        let exit = exit_seen.borrow().clone();
                        break exit.unwrap_or(CloseReason::Exited(None));
                    }
                    Err(LineError::TooLarge { limit }) => {
                        break CloseReason::MessageTooLarge { limit }
                    }
                    Err(LineError::Io(e)) => {
                        break CloseReason::Transport {
                            detail: format!("cannot read the server's stdout: {e}"),
                        }
                    }
                }
            };
            reader_peer.close(reason);
        });

        if let Some(stderr) = io.stderr {
            let name = peer.name.clone();
            tokio::spawn(async move {
                let mut lines = LineReader::new(BufReader::new(stderr), STDERR_LINE_BYTES);
                while let Ok(Some((line, cut))) = lines.next_line_lossy().await {
                    let text = excerpt(&String::from_utf8_lossy(&line), STDERR_LINE_BYTES);
                    match &stderr_fn {
                        Some(f) => f(&name, &text, cut),
                        None => tracing::debug!(server = %name, stderr = %text),
                    }
                }
            });
        }

        let monitor_peer = peer.clone();
        let mut process = io.process;
        tokio::spawn(async move {
            let mut shutdown_rx = shutdown_rx;
            let mut closed = monitor_peer.closed_watch();
            tokio::select! {
                exit = process.wait() => {
                    let reason = ended(exit, process.as_ref());
                    exit_tx.send_replace(Some(reason.clone()));
                    // Output might be held open by a grandchild; the exit is what counts.
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                        _ = until_closed(&mut closed) => {}
                    }
                    monitor_peer.close(reason);
                }
                grace = &mut shutdown_rx => {
                    monitor_peer.close(CloseReason::ShutDown);
                    // stdin is closed by now (its sender was dropped); give the server its grace.
                    let grace = grace.unwrap_or(Duration::ZERO);
                    if tokio::time::timeout(grace, process.wait()).await.is_err() {
                        process.kill().await;
                        process.wait().await;
                    }
                }
                _ = until_closed(&mut closed) => {
                    // The connection ended on our side (oversized or malformed output, or a write
                    // failure): the server is no longer trusted to behave, so it is killed.
                    process.kill().await;
                    let exit = process.wait().await;
                    exit_tx.send_replace(Some(ended(exit, process.as_ref())));
                }
            }
            let _ = done_tx.send(true);
        });

        StdioConnection {
            outbound,
            shutdown: Mutex::new(Some(shutdown_tx)),
            done: done_rx,
        }
    }

    /// Start [`StdioConnection::shutdown`] without waiting for it.
    pub fn begin_shutdown(&self, grace: Duration) {
        self.outbound
            .tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let tx = self
            .shutdown
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(tx) = tx {
            let _ = tx.send(grace);
        }
    }

    /// Close stdin, give the server `grace` to exit, then kill it; returns once it is reaped.
    pub async fn shutdown(&self, grace: Duration) {
        self.begin_shutdown(grace);
        let mut done = self.done.clone();
        let _ = done.wait_for(|d| *d).await;
    }
}

/// Resolves once the connection has a close reason (the watch's guard is not held across await).
async fn until_closed(rx: &mut watch::Receiver<Option<CloseReason>>) {
    let _ = rx.wait_for(Option::is_some).await;
}
