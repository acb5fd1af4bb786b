//! Moving a tunnel's bytes both ways, uninspected, with byte counters and an idle timeout.
//!
//! Each direction is a loop of `splice(2)` through a pipe (socket → pipe → socket): the bytes stay
//! in the kernel, so the broker's memory does not grow with what passes, and no user-space copy is
//! made. Where a pipe cannot be made (descriptor limit), that direction copies through a fixed
//! buffer instead. A direction that reads end-of-file shuts the other socket's sending side down
//! (half-close), and the tunnel ends when both directions have, when either fails, when nothing
//! moved for the idle timeout, or when the channel is shut down.

use hanzo_ipc::roles::broker::TunnelEnd;
use rustix::pipe::{PipeFlags, SpliceFlags};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// How a tunnel moves bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayMode {
    /// `splice(2)` through a pipe per direction (the default).
    Splice,
    /// `read`/`write` through a buffer per direction (for comparison in benchmarks).
    Copy,
}

/// Bytes moved per `splice` or `read`.
const CHUNK: usize = 256 * 1024;
/// Pipe capacity asked for (the kernel's default, 64 KiB, is kept when this is refused).
const PIPE_SIZE: usize = 1024 * 1024;

/// Live counters of one tunnel.
#[derive(Debug)]
pub struct Traffic {
    start: Instant,
    /// Bytes moved from the client to the destination.
    pub up: AtomicU64,
    /// Bytes moved from the destination to the client.
    pub down: AtomicU64,
    /// Milliseconds after `start` of the last byte moved.
    last: AtomicU64,
}

impl Traffic {
    /// Counters at zero, starting now.
    pub fn new() -> Traffic {
        Traffic {
            start: Instant::now(),
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
            last: AtomicU64::new(0),
        }
    }

    fn moved(&self, counter: &AtomicU64, n: usize) {
        counter.fetch_add(n as u64, Ordering::Relaxed);
        let now = super::millis(self.start.elapsed());
        self.last.store(now, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let last = Duration::from_millis(self.last.load(Ordering::Relaxed));
        self.start.elapsed().saturating_sub(last)
    }
}

impl Default for Traffic {
    fn default() -> Self {
        Traffic::new()
    }
}

/// Relay between `client` and `upstream` until the tunnel ends; `stop` ends it early. With
/// `one_response`, the tunnel ends as soon as the destination has finished sending (a forwarded
/// plain-HTTP request: the destination closes after its one response).
pub async fn relay(
    client: &TcpStream,
    upstream: &TcpStream,
    mode: RelayMode,
    idle: Duration,
    traffic: &Traffic,
    one_response: bool,
    stop: impl std::future::Future<Output = ()>,
) -> TunnelEnd {
    let up = pump(client, upstream, mode, traffic, &traffic.up);
    let down = pump(upstream, client, mode, traffic, &traffic.down);
    let both = async {
        let (a, b) = tokio::join!(
            async {
                let r = up.await;
                if r.is_err() {
                    // Unblock the other direction: a reset on one side ends the tunnel.
                    let _ = rustix::net::shutdown(upstream, rustix::net::Shutdown::Both);
                    let _ = rustix::net::shutdown(client, rustix::net::Shutdown::Both);
                }
                r
            },
            async {
                let r = down.await;
                if r.is_err() || one_response {
                    let _ = rustix::net::shutdown(upstream, rustix::net::Shutdown::Both);
                    let _ = rustix::net::shutdown(client, rustix::net::Shutdown::Both);
                }
                r
            }
        );
        match (a, b) {
            (Ok(()), Ok(())) => TunnelEnd::Closed,
            _ => TunnelEnd::Error,
        }
    };
    let watchdog = async {
        loop {
            let idle_for = traffic.idle_for();
            if idle_for >= idle {
                return TunnelEnd::IdleTimeout;
            }
            tokio::time::sleep(idle - idle_for).await;
        }
    };
    tokio::select! {
        end = both => end,
        end = watchdog => end,
        () = stop => TunnelEnd::Shutdown,
    }
}

async fn pump(
    src: &TcpStream,
    dst: &TcpStream,
    mode: RelayMode,
    traffic: &Traffic,
    counter: &AtomicU64,
) -> io::Result<()> {
    if mode == RelayMode::Splice {
        if let Ok(pipe) = make_pipe() {
            return pump_splice(src, dst, pipe, traffic, counter).await;
        }
    }
    pump_copy(src, dst, traffic, counter).await
}

fn make_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
    // Best effort: over the per-user pipe budget the kernel refuses, and 64 KiB still works.
    let _ = rustix::pipe::fcntl_setpipe_size(&w, PIPE_SIZE);
    Ok((r, w))
}

fn end_of_input(dst: &TcpStream) {
    // The peer may already be gone; then the other direction ends on its own.
    let _ = rustix::net::shutdown(dst, rustix::net::Shutdown::Write);
}

async fn pump_splice(
    src: &TcpStream,
    dst: &TcpStream,
    (pipe_r, pipe_w): (OwnedFd, OwnedFd),
    traffic: &Traffic,
    counter: &AtomicU64,
) -> io::Result<()> {
    let flags = SpliceFlags::NONBLOCK | SpliceFlags::MOVE;
    loop {
        // The pipe is empty here, so EAGAIN can only mean that `src` has nothing to read.
        src.readable().await?;
        let filled = match src.try_io(Interest::READABLE, || {
            rustix::pipe::splice(src.as_fd(), None, &pipe_w, None, CHUNK, flags)
                .map_err(io::Error::from)
        }) {
            Ok(0) => {
                end_of_input(dst);
                return Ok(());
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        let mut in_pipe = filled;
        while in_pipe > 0 {
            // The pipe holds data here, so EAGAIN can only mean that `dst` is full.
            dst.writable().await?;
            match dst.try_io(Interest::WRITABLE, || {
                rustix::pipe::splice(&pipe_r, None, dst.as_fd(), None, in_pipe, flags)
                    .map_err(io::Error::from)
            }) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => {
                    in_pipe -= n;
                    traffic.moved(counter, n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

async fn pump_copy(
    src: &TcpStream,
    dst: &TcpStream,
    traffic: &Traffic,
    counter: &AtomicU64,
) -> io::Result<()> {
    let mut buf = vec![0u8; CHUNK];
    loop {
        src.readable().await?;
        let n = match src.try_read(&mut buf) {
            Ok(0) => {
                end_of_input(dst);
                return Ok(());
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        let mut off = 0;
        while off < n {
            dst.writable().await?;
            match dst.try_write(&buf[off..n]) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(m) => {
                    off += m;
                    traffic.moved(counter, m);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
    }
}
