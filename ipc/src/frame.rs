//! Frames: `[len: u32 big-endian][type: u8][payload: len - 1 bytes]`.
//!
//! `len` counts the type byte, so the smallest legal frame has `len == 1` (a type and an empty
//! payload) and `len == 0` is illegal. A length above the channel's limit is rejected from the four
//! length bytes alone, before any buffer for the frame is allocated. End of input inside a frame is
//! `Truncated`; end of input between frames is a clean close.

use thiserror::Error;

/// Bytes of the length prefix.
pub const LEN_BYTES: usize = 4;

/// The default per-channel limit on `len` (type byte + payload): 16 MiB.
///
/// Large enough for a long conversation sent to the model worker, small enough that a hostile
/// worker cannot make the supervisor reserve more than this for one frame.
pub const DEFAULT_MAX_FRAME: u32 = 16 * 1024 * 1024;

/// One decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The frame type byte (one of [`crate::proto::frame_type`]).
    pub frame_type: u8,
    /// The payload bytes after the type byte (`len - 1` of them).
    pub payload: Vec<u8>,
}

/// Why a byte stream is not a valid sequence of frames.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FrameError {
    /// A length prefix of 0, which cannot even hold the type byte.
    #[error("frame length 0 is illegal (the length counts the type byte)")]
    ZeroLength,
    /// A length prefix above the channel's limit, refused before any allocation.
    #[error("frame length {len} exceeds this channel's limit of {max} bytes")]
    TooLarge {
        /// The length the prefix announced, in bytes (type byte included).
        len: u32,
        /// The channel's limit, in bytes.
        max: u32,
    },
    /// The stream ended part-way through a frame.
    #[error("stream ended inside a frame: {have} of {need} bytes present")]
    Truncated {
        /// Bytes of the frame (prefix included) that arrived.
        have: usize,
        /// Bytes the frame needed (prefix included).
        need: usize,
    },
}

impl FrameError {
    /// The stable name used by the `ipc-frames` test vectors.
    pub fn vector_name(&self) -> &'static str {
        match self {
            FrameError::ZeroLength => "zero_length",
            FrameError::TooLarge { .. } => "too_large",
            FrameError::Truncated { .. } => "truncated",
        }
    }
}

/// Validate a length prefix against a channel limit. This is the only check between reading the
/// four length bytes and allocating the frame.
pub fn check_len(len: u32, max_frame: u32) -> Result<(), FrameError> {
    if len == 0 {
        return Err(FrameError::ZeroLength);
    }
    if len > max_frame {
        return Err(FrameError::TooLarge {
            len,
            max: max_frame,
        });
    }
    Ok(())
}

/// Append one encoded frame to `out`.
///
/// Fails with `TooLarge` if the frame would exceed `max_frame` (a sender never produces a frame its
/// peer must reject).
pub fn encode_frame(
    frame_type: u8,
    payload: &[u8],
    max_frame: u32,
    out: &mut Vec<u8>,
) -> Result<(), FrameError> {
    let len = payload
        .len()
        .checked_add(1)
        .and_then(|l| u32::try_from(l).ok())
        .ok_or(FrameError::TooLarge {
            len: u32::MAX,
            max: max_frame,
        })?;
    check_len(len, max_frame)?;
    out.reserve(LEN_BYTES + len as usize);
    out.extend_from_slice(&len.to_be_bytes());
    out.push(frame_type);
    out.extend_from_slice(payload);
    Ok(())
}

/// Incremental decoder: feed it bytes as they arrive, take frames out as they complete.
///
/// Memory is bounded by `max_frame` plus one read's worth of bytes: a frame's buffer is only grown
/// once its length prefix has passed [`check_len`].
#[derive(Debug)]
pub struct FrameDecoder {
    max_frame: u32,
    buf: Vec<u8>,
    /// Start of unconsumed bytes in `buf` (compacted lazily to avoid a memmove per frame).
    start: usize,
    /// Set once a framing error is seen: the stream cannot be resynchronised after it.
    failed: Option<FrameError>,
}

impl FrameDecoder {
    /// An empty decoder that refuses frames whose length prefix exceeds `max_frame` bytes.
    pub fn new(max_frame: u32) -> Self {
        FrameDecoder {
            max_frame,
            buf: Vec::new(),
            start: 0,
            failed: None,
        }
    }

    /// The limit on a frame's length prefix, in bytes (type byte included).
    pub fn max_frame(&self) -> u32 {
        self.max_frame
    }

    /// Bytes received but not yet returned as frames.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Add received bytes.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        } else if self.start > 64 * 1024 && self.start * 2 > self.buf.len() {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete frame, `Ok(None)` if more bytes are needed, or the framing error.
    ///
    /// A length prefix is judged as soon as its four bytes are present, even if the rest of the
    /// frame has not arrived.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        let avail = &self.buf[self.start..];
        if avail.len() < LEN_BYTES {
            return Ok(None);
        }
        let len = u32::from_be_bytes([avail[0], avail[1], avail[2], avail[3]]);
        if let Err(err) = check_len(len, self.max_frame) {
            self.failed = Some(err.clone());
            return Err(err);
        }
        let total = LEN_BYTES + len as usize;
        if avail.len() < total {
            return Ok(None);
        }
        let frame = Frame {
            frame_type: avail[LEN_BYTES],
            payload: avail[LEN_BYTES + 1..total].to_vec(),
        };
        self.start += total;
        Ok(Some(frame))
    }

    /// Declare end of input: `Ok(())` if it fell between frames, `Truncated` otherwise.
    pub fn finish(&self) -> Result<(), FrameError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        let have = self.buffered();
        if have == 0 {
            return Ok(());
        }
        let need = if have < LEN_BYTES {
            LEN_BYTES
        } else {
            let a = &self.buf[self.start..];
            LEN_BYTES + u32::from_be_bytes([a[0], a[1], a[2], a[3]]) as usize
        };
        Err(FrameError::Truncated { have, need })
    }
}

/// Decode a complete byte string: every frame in order, then the error that ended it (if any).
///
/// This is the function the `ipc-frames` vectors exercise; the async transport uses the same
/// [`check_len`] and layout.
pub fn decode_all(bytes: &[u8], max_frame: u32) -> (Vec<Frame>, Option<FrameError>) {
    let mut dec = FrameDecoder::new(max_frame);
    dec.feed(bytes);
    let mut frames = Vec::new();
    loop {
        match dec.next_frame() {
            Ok(Some(f)) => frames.push(f),
            Ok(None) => return (frames, dec.finish().err()),
            Err(e) => return (frames, Some(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_large_is_detected_from_the_prefix_alone() {
        let mut dec = FrameDecoder::new(16);
        dec.feed(&[0, 0, 0, 17]);
        assert_eq!(
            dec.next_frame(),
            Err(FrameError::TooLarge { len: 17, max: 16 })
        );
        // The decoder stays failed: a stream cannot be resynchronised.
        dec.feed(&[0, 0, 0, 1, 7]);
        assert!(dec.next_frame().is_err());
    }

    #[test]
    fn huge_claimed_length_allocates_nothing() {
        let mut dec = FrameDecoder::new(DEFAULT_MAX_FRAME);
        dec.feed(&[0xff, 0xff, 0xff, 0xff]);
        assert!(matches!(
            dec.next_frame(),
            Err(FrameError::TooLarge { len: u32::MAX, .. })
        ));
        assert!(dec.buf.capacity() < 1024);
    }

    #[test]
    fn finish_reports_truncation_sizes() {
        let mut dec = FrameDecoder::new(100);
        dec.feed(&[0, 0]);
        assert_eq!(
            dec.finish(),
            Err(FrameError::Truncated { have: 2, need: 4 })
        );
        dec.feed(&[0, 3, 9]);
        assert_eq!(dec.next_frame(), Ok(None));
        assert_eq!(
            dec.finish(),
            Err(FrameError::Truncated { have: 5, need: 7 })
        );
    }

    #[test]
    fn encode_refuses_what_the_peer_would_reject() {
        let mut out = Vec::new();
        assert_eq!(
            encode_frame(1, &[0; 16], 16, &mut out),
            Err(FrameError::TooLarge { len: 17, max: 16 })
        );
        assert!(out.is_empty());
        encode_frame(1, &[0; 15], 16, &mut out).expect("fits");
        assert_eq!(&out[..5], &[0, 0, 0, 16, 1]);
    }
}
