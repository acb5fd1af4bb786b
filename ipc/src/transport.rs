//! Transports: a socketpair whose child end is inherited as fd 3 (fd 4 for a second, direct
//! channel), and async frame reading/writing over any byte stream.
//!
//! There is no path and no listener: nothing but the two processes holding the pair can speak on
//! it. Reading uses the same [`FrameDecoder`] as the test vectors, so the length limit is checked
//! from the four length bytes before anything is allocated for the frame.

use crate::frame::{encode_frame, Frame, FrameDecoder, FrameError};
use crate::proto::{self, frame_type, DecodeError, HandshakeError, Hello};
use crate::{attest::Attestation, Role};
use std::io;
use std::os::fd::OwnedFd;
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The fd number of a worker's channel to the supervisor.
pub const SUPERVISOR_FD: i32 = 3;
/// The fd number of a worker's second, direct channel (model ↔ broker).
pub const DIRECT_FD: i32 = 4;
/// The fd number of the egress control socket (`SOCK_SEQPACKET`) that the broker and the tools
/// worker each hold one end of when a run allows network for commands.
pub const EGRESS_FD: i32 = 5;

/// Everything that can end a channel.
#[derive(Debug, Error)]
pub enum IpcError {
    #[error("framing error: {0}")]
    Frame(#[from] FrameError),
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Decode(#[from] DecodeError),
    #[error("handshake failed: {0}")]
    Handshake(#[from] HandshakeError),
    #[error("unexpected frame type 0x{got:02x}")]
    UnexpectedFrame { got: u8 },
}

/// A connected pair; the first end stays in the supervisor, the second goes to the child.
pub fn socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    let (a, b) = std::os::unix::net::UnixStream::pair()?;
    Ok((a.into(), b.into()))
}

/// Wrap an owned unix-socket fd for tokio. Must be called inside a runtime.
pub fn stream_from_fd(fd: OwnedFd) -> io::Result<tokio::net::UnixStream> {
    let std_stream = std::os::unix::net::UnixStream::from(fd);
    std_stream.set_nonblocking(true)?;
    tokio::net::UnixStream::from_std(std_stream)
}

/// Reads frames from a byte stream.
pub struct FrameReader<R> {
    inner: R,
    dec: FrameDecoder,
    buf: Box<[u8]>,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
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
pub struct FrameWriter<W> {
    inner: W,
    max_frame: u32,
    scratch: Vec<u8>,
}

impl<W: AsyncWrite + Unpin> FrameWriter<W> {
    pub fn new(inner: W, max_frame: u32) -> Self {
        FrameWriter {
            inner,
            max_frame,
            scratch: Vec::with_capacity(256),
        }
    }

    /// Write one frame (type + payload) completely.
    pub async fn send(&mut self, frame_type: u8, payload: &[u8]) -> Result<(), IpcError> {
        self.scratch.clear();
        encode_frame(frame_type, payload, self.max_frame, &mut self.scratch)?;
        self.inner.write_all(&self.scratch).await?;
        Ok(())
    }

    /// Write raw bytes (tests use this to play a misbehaving peer).
    pub async fn send_raw(&mut self, bytes: &[u8]) -> Result<(), IpcError> {
        self.inner.write_all(bytes).await?;
        Ok(())
    }
}

pub type UnixFrameReader = FrameReader<tokio::net::unix::OwnedReadHalf>;
pub type UnixFrameWriter = FrameWriter<tokio::net::unix::OwnedWriteHalf>;

/// Split a unix stream into a frame reader and writer with one limit.
pub fn split(stream: tokio::net::UnixStream, max_frame: u32) -> (UnixFrameReader, UnixFrameWriter) {
    let (r, w) = stream.into_split();
    (
        FrameReader::new(r, max_frame),
        FrameWriter::new(w, max_frame),
    )
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
    pub uid: u32,
    pub gid: u32,
}

/// One message received with [`recv_with_credentials`].
#[derive(Debug)]
pub struct ReceivedMessage {
    /// Data bytes (0 with no descriptors: the peer closed its end).
    pub len: usize,
    /// Descriptors that came with it (close-on-exec).
    pub fds: Vec<OwnedFd>,
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
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

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
    // SAFETY: CMSG_SPACE computes a size from an integer.
    let space =
        unsafe { libc::CMSG_SPACE(fd_bytes as u32) + libc::CMSG_SPACE(cred_bytes as u32) } as usize;
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
        if r >= 0 {
            break r as usize;
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
