//! RFC 6455 WebSocket framing, server side, written here on top of hyper's upgrade (no WebSocket
//! crate): the opening handshake's accept key, reading client frames under a message size cap,
//! and encoding server frames.
//!
//! What a client must satisfy, or the connection is closed with the code RFC 6455 §7.4.1 gives:
//! every frame masked, no reserved bit set, known opcodes only, control frames unfragmented and at
//! most 125 bytes, continuation frames only inside a fragmented message (1002); text that is
//! UTF-8 (1007); a message no larger than the cap, checked from the frame headers before the
//! payload is read (1009). Binary messages are not part of the bridge's protocol (1003).

use base64::Engine as _;
use tokio::io::{AsyncRead, AsyncReadExt};

/// RFC 6455 §1.3.
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// Opcode of a continuation frame (RFC 6455 §5.2).
pub const OP_CONT: u8 = 0x0;
/// Opcode of a text frame.
pub const OP_TEXT: u8 = 0x1;
/// Opcode of a binary frame (refused: the bridge speaks JSON text).
pub const OP_BINARY: u8 = 0x2;
/// Opcode of a close frame.
pub const OP_CLOSE: u8 = 0x8;
/// Opcode of a ping.
pub const OP_PING: u8 = 0x9;
/// Opcode of a pong.
pub const OP_PONG: u8 = 0xA;

// Close codes (RFC 6455 §7.4.1).
/// 1000: a normal closure, the connection's purpose fulfilled.
pub const CLOSE_NORMAL: u16 = 1000;
/// 1001: an endpoint is going away (a server stopping, a page left).
pub const CLOSE_GOING_AWAY: u16 = 1001;
/// 1002: the peer broke the protocol (an unmasked frame, reserved bits, an unknown opcode, bad
/// fragmentation or control frames).
pub const CLOSE_PROTOCOL: u16 = 1002;
/// 1003: data of a kind not accepted (a binary message).
pub const CLOSE_UNSUPPORTED: u16 = 1003;
/// 1007: a text message or close reason that is not UTF-8.
pub const CLOSE_INVALID_DATA: u16 = 1007;
/// 1008: a policy violation (the principal's token expired).
pub const CLOSE_POLICY: u16 = 1008;
/// 1009: a message larger than the limit (`--max-message`).
pub const CLOSE_TOO_BIG: u16 = 1009;

/// `Sec-WebSocket-Accept` for a `Sec-WebSocket-Key`.
pub fn accept_key(key: &str) -> String {
    let mut input = key.trim().as_bytes().to_vec();
    input.extend_from_slice(GUID.as_bytes());
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &input);
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

/// Whether a `Sec-WebSocket-Key` is what §4.1 requires: 16 bytes, base64.
pub fn valid_key(key: &str) -> bool {
    base64::engine::general_purpose::STANDARD
        .decode(key.trim())
        .is_ok_and(|k| k.len() == 16)
}

/// A whole message or control frame from the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    /// A whole text message, reassembled from its fragments.
    Text(String),
    /// A ping and its payload (answered with a pong carrying it).
    Ping(Vec<u8>),
    /// A pong and its payload (the answer to the server's ping).
    Pong(Vec<u8>),
    /// The peer's close frame: its code (if any) and reason.
    Close(Option<u16>, String),
}

/// Why reading stopped: a close code to send, or the connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// The peer broke a rule; close with this code and reason.
    Violation(u16, &'static str),
    /// The connection ended or failed (nothing more can be sent usefully).
    Gone,
}

/// Reads client frames and reassembles fragmented messages.
pub struct FrameReader<R> {
    io: R,
    max_message: usize,
    partial: Option<Vec<u8>>,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// Reads from `io`, refusing a message longer than `max_message` bytes.
    pub fn new(io: R, max_message: usize) -> FrameReader<R> {
        FrameReader {
            io,
            max_message,
            partial: None,
        }
    }

    /// Read and drop what the peer still sends, at most `limit` bytes, until it closes its side
    /// or the read fails. Closing a socket with unread bytes in it resets the connection, and a
    /// peer that is reset may lose the close frame sent just before (a browser then reports 1006
    /// instead of the code); so after a close the rest is read first (callers bound the time).
    pub async fn drain(mut self, limit: usize) {
        let mut buf = [0u8; 4096];
        let mut left = limit;
        while left > 0 {
            match self.io.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    }

    /// The next message or control frame.
    pub async fn next(&mut self) -> Result<Incoming, ReadError> {
        loop {
            let mut head = [0u8; 2];
            self.read_exact(&mut head).await?;
            let fin = head[0] & 0x80 != 0;
            if head[0] & 0x70 != 0 {
                return Err(ReadError::Violation(
                    CLOSE_PROTOCOL,
                    "reserved bits are set",
                ));
            }
            let opcode = head[0] & 0x0F;
            if head[1] & 0x80 == 0 {
                return Err(ReadError::Violation(
                    CLOSE_PROTOCOL,
                    "client frames must be masked",
                ));
            }
            let len = match head[1] & 0x7F {
                126 => {
                    let mut b = [0u8; 2];
                    self.read_exact(&mut b).await?;
                    u64::from(u16::from_be_bytes(b))
                }
                127 => {
                    let mut b = [0u8; 8];
                    self.read_exact(&mut b).await?;
                    u64::from_be_bytes(b)
                }
                n => u64::from(n),
            };
            let control = opcode & 0x8 != 0;
            match opcode {
                OP_CONT | OP_TEXT | OP_BINARY | OP_CLOSE | OP_PING | OP_PONG => {}
                _ => return Err(ReadError::Violation(CLOSE_PROTOCOL, "unknown opcode")),
            }
            if control && (!fin || len > 125) {
                return Err(ReadError::Violation(
                    CLOSE_PROTOCOL,
                    "control frames must be whole and at most 125 bytes",
                ));
            }
            if opcode == OP_BINARY {
                return Err(ReadError::Violation(
                    CLOSE_UNSUPPORTED,
                    "binary messages are not accepted; send JSON-RPC as text",
                ));
            }
            let so_far = self.partial.as_ref().map_or(0, Vec::len) as u64;
            if !control && so_far.saturating_add(len) > self.max_message as u64 {
                return Err(ReadError::Violation(
                    CLOSE_TOO_BIG,
                    "the message is larger than the bridge accepts",
                ));
            }
            let mut mask = [0u8; 4];
            self.read_exact(&mut mask).await?;
            let len = usize::try_from(len).map_err(|_| ReadError::Gone)?;
            let mut payload = vec![0u8; len];
            self.read_exact(&mut payload).await?;
            for (i, b) in payload.iter_mut().enumerate() {
                *b ^= mask[i % 4];
            }
            match opcode {
                OP_PING => return Ok(Incoming::Ping(payload)),
                OP_PONG => return Ok(Incoming::Pong(payload)),
                OP_CLOSE => return close_frame(&payload),
                OP_TEXT => {
                    if self.partial.is_some() {
                        return Err(ReadError::Violation(
                            CLOSE_PROTOCOL,
                            "a new message began inside a fragmented one",
                        ));
                    }
                    if fin {
                        return text(payload);
                    }
                    self.partial = Some(payload);
                }
                _ => {
                    // OP_CONT
                    let Some(mut buf) = self.partial.take() else {
                        return Err(ReadError::Violation(
                            CLOSE_PROTOCOL,
                            "a continuation frame outside a fragmented message",
                        ));
                    };
                    buf.extend_from_slice(&payload);
                    if fin {
                        return text(buf);
                    }
                    self.partial = Some(buf);
                }
            }
        }
    }

    async fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), ReadError> {
        self.io
            .read_exact(buf)
            .await
            .map(|_| ())
            .map_err(|_| ReadError::Gone)
    }
}

fn text(bytes: Vec<u8>) -> Result<Incoming, ReadError> {
    String::from_utf8(bytes)
        .map(Incoming::Text)
        .map_err(|_| ReadError::Violation(CLOSE_INVALID_DATA, "text messages must be UTF-8"))
}

fn close_frame(payload: &[u8]) -> Result<Incoming, ReadError> {
    match payload.len() {
        0 => Ok(Incoming::Close(None, String::new())),
        1 => Err(ReadError::Violation(
            CLOSE_PROTOCOL,
            "a close frame with a one-byte body",
        )),
        _ => {
            let code = u16::from_be_bytes([payload[0], payload[1]]);
            let reason = std::str::from_utf8(&payload[2..]).map_err(|_| {
                ReadError::Violation(CLOSE_INVALID_DATA, "the close reason is not UTF-8")
            })?;
            Ok(Incoming::Close(Some(code), reason.to_string()))
        }
    }
}

/// Whether a peer may send `code` in a close frame (§7.4.2: 1000-1003, 1007-1011, 3000-4999).
pub fn valid_close_code(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1011 | 3000..=4999)
}

/// One unmasked server frame with FIN set.
pub fn encode(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 10);
    out.push(0x80 | opcode);
    let n = payload.len();
    match (u8::try_from(n), u16::try_from(n)) {
        (Ok(small), _) if small < 126 => out.push(small),
        (_, Ok(mid)) => {
            out.push(126);
            out.extend_from_slice(&mid.to_be_bytes());
        }
        _ => {
            out.push(127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(payload);
    out
}

/// A close frame with `code` and `reason` (cut to fit the 125-byte control frame limit).
pub fn encode_close(code: u16, reason: &str) -> Vec<u8> {
    let mut body = code.to_be_bytes().to_vec();
    let mut r = reason;
    while r.len() > 123 {
        let mut cut = 123;
        while !r.is_char_boundary(cut) {
            cut -= 1;
        }
        r = &r[..cut];
    }
    body.extend_from_slice(r.as_bytes());
    encode(OP_CLOSE, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    // The match arms bound each length to its field's width.
    #[allow(clippy::cast_possible_truncation)]
    fn masked(first: u8, payload: &[u8], mask: [u8; 4]) -> Vec<u8> {
        let mut out = vec![first];
        match payload.len() {
            n if n < 126 => out.push(0x80 | n as u8),
            n if n <= 65535 => {
                out.push(0x80 | 126);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                out.push(0x80 | 127);
                out.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        out.extend_from_slice(&mask);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        out
    }

    async fn read_all(bytes: Vec<u8>, cap: usize) -> Vec<Result<Incoming, ReadError>> {
        let mut r = FrameReader::new(&bytes[..], cap);
        let mut out = Vec::new();
        loop {
            let m = r.next().await;
            let stop = m.is_err();
            out.push(m);
            if stop {
                return out;
            }
        }
    }

    #[test]
    fn the_accept_key_is_the_rfcs_example() {
        // RFC 6455 §1.3.
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        assert!(valid_key("dGhlIHNhbXBsZSBub25jZQ=="));
        assert!(!valid_key("c2hvcnQ="));
        assert!(!valid_key("not base64!"));
    }

    #[tokio::test]
    async fn masked_single_and_fragmented_text_and_control_frames_are_read() {
        // RFC 6455 §5.7: a masked "Hello", and the fragmented unmasked example re-masked.
        let mut bytes = vec![
            0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
        ];
        bytes.extend(masked(0x01, b"Hel", [1, 2, 3, 4]));
        // A ping between fragments is allowed.
        bytes.extend(masked(0x89, b"p", [9, 9, 9, 9]));
        bytes.extend(masked(0x80, b"lo", [5, 6, 7, 8]));
        bytes.extend(masked(0x8A, b"", [0, 0, 0, 0]));
        let long = "x".repeat(70_000);
        bytes.extend(masked(0x81, long.as_bytes(), [1, 1, 1, 1]));
        bytes.extend(masked(0x88, &[0x03, 0xE8, b'o', b'k'], [3, 3, 3, 3]));
        let got = read_all(bytes, 1 << 20).await;
        assert_eq!(
            got,
            vec![
                Ok(Incoming::Text("Hello".into())),
                Ok(Incoming::Ping(b"p".to_vec())),
                Ok(Incoming::Text("Hello".into())),
                Ok(Incoming::Pong(Vec::new())),
                Ok(Incoming::Text(long)),
                Ok(Incoming::Close(Some(1000), "ok".into())),
                Err(ReadError::Gone),
            ]
        );
    }

    #[tokio::test]
    async fn every_protocol_violation_gets_its_close_code() {
        let cases: Vec<(Vec<u8>, u16)> = vec![
            // Unmasked.
            (vec![0x81, 0x02, b'h', b'i'], CLOSE_PROTOCOL),
            // Binary.
            (masked(0x82, b"\x00\x01", [1, 2, 3, 4]), CLOSE_UNSUPPORTED),
            // Reserved bit.
            (masked(0xC1, b"hi", [1, 2, 3, 4]), CLOSE_PROTOCOL),
            // Unknown opcode.
            (masked(0x83, b"hi", [1, 2, 3, 4]), CLOSE_PROTOCOL),
            // Fragmented ping.
            (masked(0x09, b"hi", [1, 2, 3, 4]), CLOSE_PROTOCOL),
            // Continuation with nothing to continue.
            (masked(0x80, b"hi", [1, 2, 3, 4]), CLOSE_PROTOCOL),
            // Invalid UTF-8.
            (masked(0x81, b"\xff\xfe", [1, 2, 3, 4]), CLOSE_INVALID_DATA),
            // Over the cap in one frame, refused from the header alone (no payload follows).
            (vec![0x81, 0xFF, 0, 0, 0, 0, 0, 1, 0, 0], CLOSE_TOO_BIG),
        ];
        for (bytes, code) in cases {
            let got = read_all(bytes.clone(), 1024).await;
            assert!(
                matches!(got.last(), Some(Err(ReadError::Violation(c, _))) if *c == code),
                "{bytes:x?}: {got:?}"
            );
        }
        // Over the cap across fragments.
        let mut bytes = masked(0x01, &[b'a'; 600], [1, 2, 3, 4]);
        bytes.extend(masked(0x80, &[b'a'; 600], [1, 2, 3, 4]));
        let got = read_all(bytes, 1024).await;
        assert!(matches!(
            got.last(),
            Some(Err(ReadError::Violation(CLOSE_TOO_BIG, _)))
        ));
        // A new text message inside a fragmented one.
        let mut bytes = masked(0x01, b"a", [1, 2, 3, 4]);
        bytes.extend(masked(0x81, b"b", [1, 2, 3, 4]));
        let got = read_all(bytes, 1024).await;
        assert!(matches!(
            got.last(),
            Some(Err(ReadError::Violation(CLOSE_PROTOCOL, _)))
        ));
    }

    #[test]
    fn server_frames_use_the_shortest_length_form_and_close_reasons_fit() {
        assert_eq!(encode(OP_TEXT, b"hi"), vec![0x81, 2, b'h', b'i']);
        let mid = encode(OP_TEXT, &[0u8; 300]);
        assert_eq!(&mid[..4], &[0x81, 126, 1, 44]);
        let big = encode(OP_TEXT, &[0u8; 70_000]);
        assert_eq!(&big[..2], &[0x81, 127]);
        assert_eq!(big.len(), 70_000 + 10);
        let close = encode_close(1009, &"é".repeat(100));
        assert!(close.len() - 2 <= 125);
        assert!(std::str::from_utf8(&close[4..]).is_ok());
        assert!(valid_close_code(1000) && valid_close_code(4000));
        assert!(!valid_close_code(1005) && !valid_close_code(999) && !valid_close_code(1006));
    }
}
