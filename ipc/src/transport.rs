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
