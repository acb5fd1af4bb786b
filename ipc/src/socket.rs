//! A channel's unix socket, split into halves that each register only the readiness they use.
//!
//! tokio's `UnixStream` registers its socket for reading and writing at once. On a unix stream
//! socket the kernel tells the writer "there is room" every time the peer reads
//! (`unix_write_space`), so with that registration every request and every answer wakes the
//! process that sent it once more, for nothing: a frame is small beside the socket's buffer, and
//! nobody was waiting for room. In the lsp bridge they were a third of the worker's context
//! switches per edit, and leaving them out took a fifth off the bridge's cost (ARCHITECTURE.md has
//! the figures, and the one case that got slower: back-to-back requests on an idle two-vCPU VM,
//! where the extra wake-ups had kept both processes on one vCPU).
//!
//! Here the socket is registered for reading alone (`EPOLLIN`, edge-triggered), which is all the
//! read half waits for. The write half writes at once (`send` with `MSG_NOSIGNAL`; the socket is
//! non-blocking) and only when the socket is full registers a second descriptor of it for room
//! (`EPOLLOUT`), dropping that registration as soon as the write went through. The halves follow
//! tokio's owned halves otherwise: dropping the write half ends the stream for writing (`SHUT_WR`),
//! and the socket closes when both halves are gone.

use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::unix::{AsyncFd, AsyncFdRegisterError};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

/// Splits a connected unix stream socket into its two halves, registered with the current tokio
/// runtime (which must have its I/O driver enabled). The socket is made non-blocking.
pub fn split(fd: OwnedFd) -> io::Result<(ReadHalf, WriteHalf)> {
    let stream = UnixStream::from(fd);
    stream.set_nonblocking(true)?;
    // Made now, not when the socket fills: a process at its descriptor limit could not wait for
    // room otherwise, and its write would fail where tokio's would have waited.
    let spare = stream.try_clone()?;
    let sock = Arc::new(register(stream, Interest::READABLE)?);
    Ok((
        ReadHalf { sock: sock.clone() },
        WriteHalf {
            sock,
            spare: Some(spare),
            room: None,
            shut: false,
        },
    ))
}

/// The reading half of a channel's socket.
#[derive(Debug)]
pub struct ReadHalf {
    sock: Arc<AsyncFd<UnixStream>>,
}

/// The writing half of a channel's socket.
#[derive(Debug)]
pub struct WriteHalf {
    sock: Arc<AsyncFd<UnixStream>>,
    /// A second descriptor of the socket, made with the halves: unregistered (`spare`) while
    /// there is room, registered for room (`room`) only while a write waits for it. Exactly one
    /// of the two is set.
    spare: Option<UnixStream>,
    room: Option<AsyncFd<UnixStream>>,
    /// `SHUT_WR` was done (by `poll_shutdown`), so dropping the half need not do it again.
    shut: bool,
}

impl AsyncRead for ReadHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.sock.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            let room = unfilled.len();
            match self.sock.get_ref().read(unfilled) {
                Ok(n) => {
                    // Less than asked for: the socket is drained, so wait for the next edge now
                    // rather than learn it from one more read that would fail with `EAGAIN`.
                    // (The end of the stream, 0, keeps its readiness: every later read sees it.)
                    if n > 0 && n < room {
                        guard.clear_ready();
                    }
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => guard.clear_ready(),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl WriteHalf {
    /// The second descriptor, registered for room.
    fn arm(&mut self) -> io::Result<&AsyncFd<UnixStream>> {
        if self.room.is_none() {
            let spare = self
                .spare
                .take()
                .expect("the spare descriptor is kept while unarmed");
            match register(spare, Interest::WRITABLE) {
                Ok(registered) => self.room = Some(registered),
                Err(e) => {
                    let (spare, cause) = e.into_parts();
                    self.spare = Some(spare);
                    return Err(cause);
                }
            }
        }
        Ok(self.room.as_ref().expect("just armed"))
    }

    /// Unregisters the second descriptor (keeping it): no more reason to hear of room.
    fn disarm(&mut self) {
        if let Some(registered) = self.room.take() {
            self.spare = Some(registered.into_inner());
        }
    }
}

impl AsyncWrite for WriteHalf {
    // The fast path touches no registration, so it spends none of tokio's cooperative budget;
    // every channel write takes a `tokio::sync::Mutex` first, which does.
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let fd = this.sock.as_raw_fd();
        let result = loop {
            match send(fd, buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                other => break other,
            }
            // Full: wait for room on the second registration, and try again while holding its
            // readiness, so that it is cleared only if the socket is still full.
            let room = match this.arm() {
                Ok(room) => room,
                Err(e) => break Err(e),
            };
            let mut guard = match room.poll_write_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => break Err(e),
                Poll::Ready(Ok(guard)) => guard,
            };
            match send(fd, buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => guard.clear_ready(),
                other => break other,
            }
        };
        // Written or failed: either way nothing waits for room any more.
        this.disarm();
        Poll::Ready(result)
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.shut = true;
        self.disarm();
        Poll::Ready(self.sock.get_ref().shutdown(std::net::Shutdown::Write))
    }
}

impl Drop for WriteHalf {
    fn drop(&mut self) {
        if !self.shut {
            // As tokio's owned write half: the peer reads the end of its input. An error (the
            // peer is gone already) changes nothing.
            let _ = self.sock.get_ref().shutdown(std::net::Shutdown::Write);
        }
    }
}

/// Registers `stream` with the current runtime for `interest` alone (on failure, the error gives
/// the stream back).
#[allow(unsafe_code)]
fn register(
    stream: UnixStream,
    interest: Interest,
) -> Result<AsyncFd<UnixStream>, AsyncFdRegisterError<UnixStream>> {
    // SAFETY: a `UnixStream` owns its descriptor and returns that same one from `as_raw_fd` until
    // it is dropped; nothing here replaces the stream inside the `AsyncFd` (no `get_mut`).
    unsafe { AsyncFd::register_with_interest(stream, interest) }
}

/// One non-blocking `send`, without `SIGPIPE` when the peer is gone (`EPIPE` instead), retried
/// when a signal interrupts it.
#[allow(unsafe_code)]
fn send(fd: std::os::fd::RawFd, buf: &[u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is valid for reads of `buf.len()` bytes for the duration of the call;
        // `fd` is the socket the caller's `Arc` keeps open.
        let r = unsafe {
            libc::send(
                fd,
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            )
        };
        if let Ok(n) = usize::try_from(r) {
            return Ok(n);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn pair() -> ((ReadHalf, WriteHalf), (ReadHalf, WriteHalf)) {
        let (a, b) = UnixStream::pair().expect("pair");
        (
            split(a.into()).expect("split a"),
            split(b.into()).expect("split b"),
        )
    }

    /// The events each epoll instance of this process watches on descriptor `fd`, read from
    /// `/proc/self/fdinfo` (`tfd: <fd> events: <hex mask> …`).
    fn epoll_masks_of(fd: i32) -> Vec<u32> {
        let mut masks = Vec::new();
        for entry in std::fs::read_dir("/proc/self/fd")
            .expect("fd dir")
            .flatten()
        {
            let is_epoll = std::fs::read_link(entry.path())
                .is_ok_and(|t| t.to_string_lossy() == "anon_inode:[eventpoll]");
            if !is_epoll {
                continue;
            }
            let info_path = Path::new("/proc/self/fdinfo").join(entry.file_name());
            let Ok(info) = std::fs::read_to_string(info_path) else {
                continue;
            };
            for line in info.lines() {
                let mut words = line.split_whitespace();
                if words.next() != Some("tfd:") || words.next() != Some(&fd.to_string()) {
                    continue;
                }
                if let (Some("events:"), Some(mask)) = (words.next(), words.next()) {
                    masks.push(u32::from_str_radix(mask, 16).expect("hex mask"));
                }
            }
        }
        masks
    }

    /// The point of the module: the runtime's epoll watches the socket for input alone, so the
    /// peer's reads (which signal room) do not wake this process.
    #[tokio::test]
    async fn the_socket_is_watched_for_input_only() {
        let (a, b) = UnixStream::pair().expect("pair");
        let fd = a.as_raw_fd();
        let (_r, _w) = split(a.into()).expect("split");
        // (The test process holds more than one epoll instance; every one that watches the
        // socket must watch it for input alone.)
        let (input, room) = (
            libc::EPOLLIN.cast_unsigned(),
            libc::EPOLLOUT.cast_unsigned(),
        );
        let masks = epoll_masks_of(fd);
        assert!(!masks.is_empty(), "fd {fd} is not watched");
        assert!(
            masks.iter().all(|m| m & input != 0 && m & room == 0),
            "{masks:x?}"
        );
        // What tokio's own stream registers, for contrast.
        b.set_nonblocking(true).expect("non-blocking");
        let theirs = tokio::net::UnixStream::from_std(b).expect("tokio stream");
        let theirs = epoll_masks_of(theirs.as_raw_fd());
        assert!(theirs.iter().any(|m| m & room != 0), "{theirs:x?}");
    }

    #[tokio::test]
    async fn bytes_cross_in_both_directions() {
        let ((mut ar, mut aw), (mut br, mut bw)) = pair();
        aw.write_all(b"ping").await.expect("write");
        let mut got = [0u8; 4];
        br.read_exact(&mut got).await.expect("read");
        assert_eq!(&got, b"ping");
        bw.write_all(b"pong").await.expect("write");
        ar.read_exact(&mut got).await.expect("read");
        assert_eq!(&got, b"pong");
    }

    /// A write larger than the socket's buffer waits for the peer to read, through the second
    /// registration, and arrives whole.
    #[tokio::test]
    async fn a_write_that_fills_the_socket_waits_for_room_and_arrives_whole() {
        let ((_ar, mut aw), (mut br, _bw)) = pair();
        let big: Vec<u8> = (0..8 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
        let expected = big.clone();
        let writer = tokio::spawn(async move {
            aw.write_all(&big).await.expect("write");
            assert!(
                aw.room.is_none(),
                "the room registration outlived the write"
            );
            aw
        });
        let mut got = Vec::with_capacity(expected.len());
        let mut chunk = vec![0u8; 64 * 1024];
        while got.len() < expected.len() {
            let n = br.read(&mut chunk).await.expect("read");
            assert_ne!(n, 0, "end of stream after {} bytes", got.len());
            got.extend_from_slice(&chunk[..n]);
        }
        assert!(got == expected, "the bytes differ");
        writer.await.expect("writer");
    }

    /// A write given up while it waits for room (its future dropped) leaves the room
    /// registration armed only until the next write goes through.
    #[tokio::test]
    async fn a_write_given_up_while_waiting_for_room_is_disarmed_by_the_next() {
        let ((_ar, mut aw), (mut br, _bw)) = pair();
        let big = vec![5u8; 8 * 1024 * 1024];
        let mut written = 0;
        std::future::poll_fn(|cx| loop {
            match Pin::new(&mut aw).poll_write(cx, &big[written..]) {
                Poll::Ready(Ok(n)) => written += n,
                Poll::Ready(Err(e)) => panic!("write: {e}"),
                Poll::Pending => return Poll::Ready(()),
            }
        })
        .await;
        assert!(written < big.len(), "the socket never filled");
        assert!(aw.room.is_some(), "a waiting write has room registered");
        let mut drained = vec![0u8; written];
        br.read_exact(&mut drained).await.expect("drain");
        aw.write_all(b"next").await.expect("next write");
        assert!(aw.room.is_none() && aw.spare.is_some(), "still armed");
        let mut next = [0u8; 4];
        br.read_exact(&mut next).await.expect("read");
        assert_eq!(&next, b"next");
    }

    #[tokio::test]
    async fn dropping_the_write_half_ends_the_peers_input() {
        let ((ar, aw), (mut br, _bw)) = pair();
        drop(aw);
        let mut rest = Vec::new();
        assert_eq!(br.read_to_end(&mut rest).await.expect("read"), 0);
        // The read half still works in the other direction.
        drop(ar);
    }

    #[tokio::test]
    async fn shutdown_ends_the_peers_input_and_the_other_direction_stays_open() {
        let ((mut ar, mut aw), (mut br, mut bw)) = pair();
        aw.write_all(b"last").await.expect("write");
        aw.shutdown().await.expect("shutdown");
        let mut rest = Vec::new();
        br.read_to_end(&mut rest).await.expect("read");
        assert_eq!(rest, b"last");
        bw.write_all(b"answer").await.expect("answer");
        let mut got = [0u8; 6];
        ar.read_exact(&mut got).await.expect("read");
        assert_eq!(&got, b"answer");
    }

    #[tokio::test]
    async fn writing_to_a_closed_peer_is_an_error_not_a_signal() {
        let ((_ar, mut aw), peer) = pair();
        drop(peer);
        let e = aw.write_all(b"anyone?").await.expect_err("peer is gone");
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe, "{e}");
    }
}
