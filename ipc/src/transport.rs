//! Transports: a socketpair whose child end is inherited as fd 3 (further channels at the numbers
//! of the role table, [`crate::role::CHANNEL_ENDS`]), and async frame reading/writing over any
//! byte stream.
//!
//! There is no path and no listener: nothing but the two processes holding the pair can speak on
//! it. Reading uses the same [`FrameDecoder`] as the test vectors, so the length limit is checked
//! from the four length bytes before anything is allocated for the frame.

use crate::frame::{encode_frame, Frame, FrameDecoder, FrameError};
use crate::proto::{self, frame_type, DecodeError, HandshakeError, Hello};
use crate::role::{fd, Channel};
use crate::{attest::Attestation, Role};
use std::io;
use std::os::fd::OwnedFd;
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

// The numbers below are read from the role table ([`crate::role::CHANNEL_ENDS`]), the one place
// that assigns them.

/// The fd number of a worker's channel to the supervisor.
pub const SUPERVISOR_FD: i32 = crate::role::SUPERVISOR_FD;
/// The fd number of a worker's second, direct channel, which the worker runtime adopts (model ↔
/// broker in both, mcp ↔ broker in the mcp worker).
pub const DIRECT_FD: i32 = fd(Channel::ModelBroker, Role::Model);
/// The fd number of the egress control socket (`SOCK_SEQPACKET`) that the broker and the tools
/// worker each hold one end of when a run allows network for commands (also the mcp worker's
/// number for its own egress control socket).
pub const EGRESS_FD: i32 = fd(Channel::ToolsEgress, Role::Tools);
/// The broker's fd number of its end of the **mcp worker's** egress control socket (the mcp
/// worker's own end is [`EGRESS_FD`]): a second channel with its own allow-list, given when a
/// run's MCP stdio servers ask for network.
pub const MCP_EGRESS_FD: i32 = fd(Channel::McpEgress, Role::Broker);

/// The fd number of the broker's **adopt socket** (`SOCK_SEQPACKET`, to the supervisor, not a
/// channel between workers, so not in the role table): each message is a tag (`model`, `mcp`,
/// `mcp-egress`) and a new end of that channel, sent when the peer worker restarted, which the
/// broker serves in place of the dead one instead of being restarted itself.
pub const ADOPT_FD: i32 = 8;

// No end of the role table may take the adopt socket's number.
const _: () = {
    let mut i = 0;
    while i < crate::role::CHANNEL_ENDS.len() {
        assert!(
            crate::role::CHANNEL_ENDS[i].fd != ADOPT_FD,
            "an end on ADOPT_FD"
        );
        i += 1;
    }
};

// The names above stand for more than one end each; the table must agree.
const _: () = {
    assert!(fd(Channel::ModelBroker, Role::Broker) == DIRECT_FD);
    assert!(fd(Channel::McpBroker, Role::Mcp) == DIRECT_FD);
    assert!(fd(Channel::ToolsEgress, Role::Broker) == EGRESS_FD);
    assert!(fd(Channel::McpEgress, Role::Mcp) == EGRESS_FD);
};

/// Everything that can end a channel.
#[derive(Debug, Error)]
pub enum IpcError {
    /// The byte stream is not a valid sequence of frames (the stream cannot be resynchronised).
    #[error("framing error: {0}")]
    Frame(#[from] FrameError),
    /// The socket failed.
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
    /// A payload does not decode as its frame type's message.
    #[error("{0}")]
    Decode(#[from] DecodeError),
    /// The hello/ready exchange failed.
    #[error("handshake failed: {0}")]
    Handshake(#[from] HandshakeError),
    /// A frame type that has no meaning in this direction of the channel.
    #[error("unexpected frame type 0x{got:02x}")]
    UnexpectedFrame {
        /// The frame type byte.
        got: u8,
    },
}

/// A connected pair; the first end stays in the supervisor, the second goes to the child.
pub fn socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    let (a, b) = std::os::unix::net::UnixStream::pair()?;
    Ok((a.into(), b.into()))
}

/// Reads frames from a byte stream.
pub struct FrameReader<R> {
    inner: R,
    dec: FrameDecoder,
    buf: Box<[u8]>,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// Read frames from `inner`, refusing any whose length prefix exceeds `max_frame` bytes.
    pub fn new(inner: R, max_frame: u32) -> Self {
        FrameReader {
            inner,
            dec: FrameDecoder::new(max_frame),
            buf: vec![0; 64 * 1024].into_boxed_slice(),
        }
    }

    /// The next frame; `Ok(None)` on a clean end of stream (between frames).
    pub async fn next(&mut self) -> Result<Option<Frame>, IpcError> {
        loop {
            if let Some(frame) = self.dec.next_frame()? {
                return Ok(Some(frame));
            }
            let n = self.inner.read(&mut self.buf).await?;
            if n == 0 {
                self.dec.finish()?;
                return Ok(None);
            }
            self.dec.feed(&self.buf[..n]);
        }
    }

    /// The next frame, which must exist.
    async fn expect(&mut self) -> Result<Frame, IpcError> {
        self.next()
            .await?
            .ok_or(IpcError::Handshake(HandshakeError::Closed))
    }
}

/// Writes frames to a byte stream.
///
/// Cancel-safe: a [`FrameWriter::send`] dropped part-way (its request was cancelled while the
/// socket was full) leaves the rest of its frame in `scratch`, and the next send writes that
/// first, so the peer never sees half a frame followed by another.
pub struct FrameWriter<W> {
    inner: W,
    max_frame: u32,
    scratch: Vec<u8>,
    /// How much of `scratch` is already on the wire.
    written: usize,
}

impl<W: AsyncWrite + Unpin> FrameWriter<W> {
    /// Write frames to `inner`, refusing to send any longer than `max_frame` bytes.
    pub fn new(inner: W, max_frame: u32) -> Self {
        FrameWriter {
            inner,
            max_frame,
            scratch: Vec::with_capacity(256),
            written: 0,
        }
    }

    /// Write what is left of the frame in `scratch`, recording progress after every write.
    async fn finish_pending(&mut self) -> Result<(), IpcError> {
        while self.written < self.scratch.len() {
            let n = self.inner.write(&self.scratch[self.written..]).await?;
            if n == 0 {
                return Err(io::Error::from(io::ErrorKind::WriteZero).into());
            }
            self.written += n;
        }
        Ok(())
    }

    /// Write one frame (type + payload) completely.
    pub async fn send(&mut self, frame_type: u8, payload: &[u8]) -> Result<(), IpcError> {
        self.finish_pending().await?;
        self.scratch.clear();
        self.written = 0;
        encode_frame(frame_type, payload, self.max_frame, &mut self.scratch)?;
        self.finish_pending().await
    }

    /// Finish the frame in progress, then end the stream for writing (`shutdown(SHUT_WR)` on a
    /// socket): the peer reads the end of its input after the last whole frame, and can still
    /// answer on the other direction.
    pub async fn finish(&mut self) -> Result<(), IpcError> {
        self.finish_pending().await?;
        self.inner.shutdown().await?;
        Ok(())
    }

    /// Write raw bytes (tests use this to play a misbehaving peer).
    pub async fn send_raw(&mut self, bytes: &[u8]) -> Result<(), IpcError> {
        self.finish_pending().await?;
        self.inner.write_all(bytes).await?;
        Ok(())
    }
}

/// A frame reader over the read half of a channel's socket.
pub type UnixFrameReader = FrameReader<crate::socket::ReadHalf>;
/// A frame writer over the write half of a channel's socket.
pub type UnixFrameWriter = FrameWriter<crate::socket::WriteHalf>;

/// Split a connected unix stream socket into a frame reader and writer with one limit (see
/// [`crate::socket`] for how the halves wait). Must be called inside a runtime.
pub fn split(fd: OwnedFd, max_frame: u32) -> io::Result<(UnixFrameReader, UnixFrameWriter)> {
    let (r, w) = crate::socket::split(fd)?;
    Ok((
        FrameReader::new(r, max_frame),
        FrameWriter::new(w, max_frame),
    ))
}

/// Supervisor side: send our hello, check the worker's, receive its attestation.
pub async fn supervisor_handshake<R, W>(
    reader: &mut FrameReader<R>,
    writer: &mut FrameWriter<W>,
    role: Role,
) -> Result<(Hello, Attestation), IpcError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    writer
        .send(frame_type::HELLO, &proto::encode_payload(&Hello::new(role)))
        .await?;
    let hello = read_hello(reader, role).await?;
    let frame = reader.expect().await?;
    if frame.frame_type != frame_type::READY {
        return Err(HandshakeError::UnexpectedFrame {
            expected: "READY",
            got: frame.frame_type,
        }
        .into());
    }
    let attestation: Attestation = proto::decode_payload("READY", &frame.payload)?;
    if attestation.role != role {
        return Err(HandshakeError::WrongRole {
            expected: role,
            got: attestation.role,
        }
        .into());
    }
    Ok((hello, attestation))
}

/// Worker side: send our hello, check the supervisor's, then report the attestation.
pub async fn worker_handshake<R, W>(
    reader: &mut FrameReader<R>,
    writer: &mut FrameWriter<W>,
    role: Role,
    attestation: &Attestation,
) -> Result<Hello, IpcError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    writer
        .send(frame_type::HELLO, &proto::encode_payload(&Hello::new(role)))
        .await?;
    let hello = read_hello(reader, role).await?;
    writer
        .send(frame_type::READY, &proto::encode_payload(attestation))
        .await?;
    Ok(hello)
}

async fn read_hello<R: AsyncRead + Unpin>(
    reader: &mut FrameReader<R>,
    role: Role,
) -> Result<Hello, IpcError> {
    let frame = reader.expect().await?;
    if frame.frame_type != frame_type::HELLO {
        return Err(HandshakeError::UnexpectedFrame {
            expected: "HELLO",
            got: frame.frame_type,
        }
        .into());
    }
    let hello: Hello = proto::decode_payload("HELLO", &frame.payload)?;
    hello.check(role)?;
    Ok(hello)
}

/// The sender of a message on a unix socket, as the kernel attached it (`SCM_CREDENTIALS`), in
/// the receiver's pid and user namespaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderCredentials {
    /// 0 when the kernel could not name the sender (it is outside our pid namespace, or
    /// `SO_PASSCRED` was not yet set on the receiving end when the message was sent).
    pub pid: u32,
    /// The sender's user id.
    pub uid: u32,
    /// The sender's group id.
    pub gid: u32,
}

/// One message received with [`recv_with_credentials`].
#[derive(Debug)]
pub struct ReceivedMessage {
    /// Data bytes (0 with no descriptors: the peer closed its end).
    pub len: usize,
    /// Descriptors that came with it (close-on-exec).
    pub fds: Vec<OwnedFd>,
    /// The sender's credentials; `None` when the message carried none (`SO_PASSCRED` unset).
    pub sender: Option<SenderCredentials>,
    /// Data or descriptors did not fit and were dropped (extra descriptors are closed by the
    /// kernel).
    pub truncated: bool,
}

/// Ask the kernel to attach the sender's credentials to every message that arrives on `sock`
/// from now on (`SO_PASSCRED`). Set it on the receiving end before the peer can send: a message
/// sent earlier carries no sender.
#[allow(unsafe_code)]
pub fn pass_credentials(sock: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let on: libc::c_int = 1;
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a local that outlives the call.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PASSCRED,
            (&on as *const libc::c_int).cast(),
            SOCKLEN_INT,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The size of a `c_int` option value, as `setsockopt` takes it.
#[allow(clippy::cast_possible_truncation, reason = "4 bytes")]
const SOCKLEN_INT: libc::socklen_t = std::mem::size_of::<libc::c_int>() as libc::socklen_t;

/// Receive one message from a unix socket without blocking (`EWOULDBLOCK` when none is
/// queued): its data into `buf`, up to `max_fds` descriptors (`SCM_RIGHTS`), and the sender's
/// credentials (`SCM_CREDENTIALS`, present once [`pass_credentials`] was set on `sock`).
#[allow(unsafe_code)]
pub fn recv_with_credentials(
    sock: std::os::fd::BorrowedFd<'_>,
    buf: &mut [u8],
    max_fds: usize,
) -> io::Result<ReceivedMessage> {
    use std::os::fd::{AsRawFd, FromRawFd, RawFd};
    let fd_bytes = max_fds.max(1) * std::mem::size_of::<RawFd>();
    let cred_bytes = std::mem::size_of::<libc::ucred>();
    let too_many = |_| io::Error::other("too many descriptors asked for");
    let (fd_len, cred_len) = (
        u32::try_from(fd_bytes).map_err(too_many)?,
        u32::try_from(cred_bytes).map_err(too_many)?,
    );
    // SAFETY: CMSG_SPACE computes a size from an integer.
    let space = unsafe { libc::CMSG_SPACE(fd_len) + libc::CMSG_SPACE(cred_len) };
    let space = usize::try_from(space).map_err(too_many)?;
    // u64 elements keep the control buffer aligned for `cmsghdr`.
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is a valid empty header; the fields are filled in below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = (control.len() * 8) as _;
    let n = loop {
        // SAFETY: msg points at our iovec (into `buf`) and control buffer, both alive for the
        // call and of the lengths given.
        let r = unsafe {
            libc::recvmsg(
                sock.as_raw_fd(),
                &mut msg,
                libc::MSG_CMSG_CLOEXEC | libc::MSG_DONTWAIT,
            )
        };
        if let Ok(n) = usize::try_from(r) {
            break n;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut fds = Vec::new();
    let mut sender = None;
    // SAFETY: the kernel filled `msg`'s control buffer; CMSG_FIRSTHDR/CMSG_NXTHDR walk it within
    // `msg_controllen`. Each SCM_RIGHTS payload holds whole descriptors that are now ours alone;
    // an SCM_CREDENTIALS payload is one `ucred` (plain integers: any bit pattern is valid),
    // read unaligned.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            let data = libc::CMSG_DATA(cmsg);
            let len = ((*cmsg).cmsg_len as usize).saturating_sub(data as usize - cmsg as usize);
            match ((*cmsg).cmsg_level, (*cmsg).cmsg_type) {
                (libc::SOL_SOCKET, libc::SCM_RIGHTS) => {
                    for i in 0..len / std::mem::size_of::<RawFd>() {
                        let fd = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                        fds.push(OwnedFd::from_raw_fd(fd));
                    }
                }
                (libc::SOL_SOCKET, libc::SCM_CREDENTIALS) if len >= cred_bytes => {
                    let c = std::ptr::read_unaligned(data.cast::<libc::ucred>());
                    sender = Some(SenderCredentials {
                        pid: u32::try_from(c.pid).unwrap_or(0),
                        uid: c.uid,
                        gid: c.gid,
                    });
                }
                _ => {}
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok(ReceivedMessage {
        len: n,
        fds,
        sender,
        truncated: msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A send cancelled while the socket is full must not leave half a frame for the next one to
    /// follow: the peer reads both frames whole.
    #[tokio::test]
    async fn a_cancelled_send_is_finished_before_the_next_frame() {
        let (a, b) = tokio::io::duplex(64);
        let mut writer = FrameWriter::new(a, 1 << 20);
        let mut reader = FrameReader::new(b, 1 << 20);
        let big = vec![7u8; 4096];
        // Poll the send once: it writes what fits (64 bytes) and waits; then it is dropped.
        tokio::select! {
            biased;
            _ = writer.send(0x10, &big) => panic!("the pipe cannot hold the whole frame"),
            () = std::future::ready(()) => {}
        }
        let read = tokio::spawn(async move {
            let first = reader.next().await.expect("frame").expect("some");
            let second = reader.next().await.expect("frame").expect("some");
            (first, second)
        });
        writer.send(0x11, b"small").await.expect("send");
        let (first, second) = read.await.expect("reader");
        assert_eq!((first.frame_type, first.payload.len()), (0x10, 4096));
        assert_eq!(
            (second.frame_type, second.payload.as_slice()),
            (0x11, &b"small"[..])
        );
    }
}
