//! The base protocol's framing: `Content-Length: N\r\n` (and optionally `Content-Type`), an empty
//! line, then exactly `N` bytes of JSON.
//!
//! Reading is bounded everywhere: a header line is at most [`FrameLimits::max_header_line`] bytes,
//! a message at most [`FrameLimits::max_message`] (checked from the header, before anything is
//! allocated), and the output that is not a message at all — a banner or a stray `print` on
//! stdout, which the specification does not allow but real servers produce — at most
//! [`FrameLimits::max_garbage`] bytes over the whole connection. Garbage *between* messages is
//! skipped (and counted); anything malformed *inside* a header is an error, after which the
//! stream cannot be trusted and the server is stopped.

use std::io;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};

/// Bounds for one connection's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameLimits {
    /// Largest message body accepted, in bytes.
    pub max_message: usize,
    /// Longest header line, in bytes (a longer line is garbage, or an error inside a header).
    pub max_header_line: usize,
    /// Total bytes of non-message output tolerated over the connection's life.
    pub max_garbage: usize,
}

impl Default for FrameLimits {
    fn default() -> Self {
        FrameLimits {
            max_message: 16 << 20,
            max_header_line: 1024,
            max_garbage: 256 << 10,
        }
    }
}

/// Why the input stream is no longer usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// A header block without `Content-Length`.
    #[error("a message header has no Content-Length")]
    MissingLength,
    /// A `Content-Length` that is not a decimal byte count; holds the value.
    #[error("Content-Length {0:?} is not a byte count")]
    BadLength(String),
    /// Two `Content-Length` headers with different values.
    #[error("two different Content-Length headers in one message")]
    ConflictingLength,
    /// A message longer than allowed, refused before it is read.
    #[error("a message of {len} bytes is over the limit of {limit} bytes")]
    TooLarge {
        /// Its `Content-Length`, in bytes.
        len: u64,
        /// The limit, in bytes.
        limit: usize,
    },
    /// A header line longer than the limit.
    #[error("a malformed line inside a message header")]
    MalformedHeader,
    /// Too much output between messages that is not a message.
    #[error("more than {limit} bytes of output that is not a message")]
    Garbage {
        /// The most such output tolerated, in bytes.
        limit: usize,
    },
    /// The output ended inside a message.
    #[error("the output ended inside a message")]
    Truncated,
    /// Reading the output failed; holds the system's error.
    #[error("reading the output failed: {0}")]
    Io(String),
}

impl From<io::Error> for FrameError {
    fn from(e: io::Error) -> Self {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            FrameError::Truncated
        } else {
            FrameError::Io(e.to_string())
        }
    }
}

/// Frames one message body for writing.
pub fn encode(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 32);
    out.extend_from_slice(b"Content-Length: ");
    out.extend_from_slice(body.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(body);
    out
}

/// One line read with a bound.
enum Line {
    /// The line without its terminator (at most `max_header_line` bytes).
    Text(Vec<u8>),
    /// A line longer than the bound, consumed; its length.
    Long(usize),
}

/// Reads message bodies from a server's stdout.
pub struct FrameReader<R> {
    inner: BufReader<R>,
    limits: FrameLimits,
    garbage: usize,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// Read messages from `inner` under `limits`.
    pub fn new(inner: R, limits: FrameLimits) -> Self {
        FrameReader {
            inner: BufReader::with_capacity(64 << 10, inner),
            limits,
            garbage: 0,
        }
    }

    /// Bytes of non-message output skipped so far.
    pub fn garbage(&self) -> usize {
        self.garbage
    }

    /// The next message body, `None` at a clean end of the stream (between messages).
    pub async fn next(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        let mut length: Option<usize> = None;
        let mut in_header = false;
        loop {
            let (line, ended) = match self.read_line(in_header).await? {
                None if in_header => return Err(FrameError::Truncated),
                None => return Ok(None),
                Some(l) => l,
            };
            let text = match line {
                Line::Long(_) if in_header => return Err(FrameError::MalformedHeader),
                Line::Long(n) => {
                    self.add_garbage(n)?;
                    continue;
                }
                Line::Text(t) => t,
            };
            if ended && in_header {
                return Err(FrameError::Truncated);
            }
            if text.is_empty() {
                if in_header {
                    let Some(n) = length else {
                        return Err(FrameError::MissingLength);
                    };
                    let mut body = vec![0u8; n];
                    self.inner.read_exact(&mut body).await?;
                    return Ok(Some(body));
                }
                // A blank line between messages.
                self.add_garbage(1)?;
                continue;
            }
            match parse_header(&text) {
                Some(Header::ContentLength(value)) => {
                    let n = self.check_length(value)?;
                    if length.is_some_and(|l| l != n) {
                        return Err(FrameError::ConflictingLength);
                    }
                    length = Some(n);
                    in_header = true;
                }
                Some(Header::ContentType) => in_header = true,
                // Another well-formed field: tolerated inside a header, garbage outside one.
                Some(Header::Other) if in_header => {}
                Some(Header::Other) | None if !in_header => {
                    // A stray print without a newline can run into the next header:
                    // `junkContent-Length: 5`. Pick the header out of the line's tail.
                    if let Some(at) = find_content_length(&text) {
                        self.add_garbage(at)?;
                        if let Some(Header::ContentLength(value)) = parse_header(&text[at..]) {
                            length = Some(self.check_length(value)?);
                            in_header = true;
                            continue;
                        }
                    }
                    self.add_garbage(text.len() + 1)?;
                }
                _ => return Err(FrameError::MalformedHeader),
            }
        }
    }

    fn check_length(&self, value: &[u8]) -> Result<usize, FrameError> {
        let value = trim(value);
        let shown = || String::from_utf8_lossy(&value[..value.len().min(32)]).into_owned();
        if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
            return Err(FrameError::BadLength(shown()));
        }
        // Saturating, so twenty digits are "too large", not an overflow.
        let len = value.iter().fold(0u64, |acc, d| {
            acc.saturating_mul(10).saturating_add(u64::from(d - b'0'))
        });
        if len > self.limits.max_message as u64 {
            return Err(FrameError::TooLarge {
                len,
                limit: self.limits.max_message,
            });
        }
        usize::try_from(len).map_err(|_| FrameError::TooLarge {
            len,
            limit: self.limits.max_message,
        })
    }

    fn add_garbage(&mut self, n: usize) -> Result<(), FrameError> {
        self.garbage = self.garbage.saturating_add(n);
        if self.garbage > self.limits.max_garbage {
            return Err(FrameError::Garbage {
                limit: self.limits.max_garbage,
            });
        }
        Ok(())
    }

    /// Reads up to and including `\n`, keeping at most `max_header_line` bytes. Returns the line
    /// without `\r\n`/`\n` and whether the stream ended before the terminator; `None` at EOF with
    /// nothing read.
    ///
    /// A line that is already too long fails as soon as the verdict is certain, not at its end:
    /// a server writing bytes without a newline (and never closing) is cut off once the line
    /// would overrun the garbage budget, or at once inside a header, where no long line is valid.
    async fn read_line(&mut self, in_header: bool) -> Result<Option<(Line, bool)>, FrameError> {
        let cap = self.limits.max_header_line;
        let mut kept: Vec<u8> = Vec::new();
        let mut total = 0usize;
        loop {
            let buf = self.inner.fill_buf().await?;
            if buf.is_empty() {
                if total == 0 {
                    return Ok(None);
                }
                return Ok(Some((finish_line(kept, total, cap), true)));
            }
            let (chunk, found) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (&buf[..i], true),
                None => (buf, false),
            };
            let room = (cap + 1).saturating_sub(kept.len());
            kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
            total = total.saturating_add(chunk.len());
            let used = chunk.len() + usize::from(found);
            self.inner.consume(used);
            if found {
                return Ok(Some((finish_line(kept, total, cap), false)));
            }
            if total > cap + 1 {
                if in_header {
                    return Err(FrameError::MalformedHeader);
                }
                if self.garbage.saturating_add(total) > self.limits.max_garbage {
                    return Err(FrameError::Garbage {
                        limit: self.limits.max_garbage,
                    });
                }
            }
        }
    }
}

fn finish_line(mut kept: Vec<u8>, total: usize, cap: usize) -> Line {
    if kept.last() == Some(&b'\r') && total <= cap + 1 {
        kept.pop();
    }
    if kept.len() > cap {
        Line::Long(total)
    } else {
        Line::Text(kept)
    }
}

enum Header<'a> {
    ContentLength(&'a [u8]),
    ContentType,
    Other,
}

/// A `Name: value` line whose name is an HTTP token.
fn parse_header(line: &[u8]) -> Option<Header<'_>> {
    let colon = line.iter().position(|&b| b == b':')?;
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    let token = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
    if name.is_empty() || !name.iter().all(token) {
        return None;
    }
    if name.eq_ignore_ascii_case(b"content-length") {
        Some(Header::ContentLength(value))
    } else if name.eq_ignore_ascii_case(b"content-type") {
        Some(Header::ContentType)
    } else {
        Some(Header::Other)
    }
}

fn find_content_length(line: &[u8]) -> Option<usize> {
    const NEEDLE: &[u8] = b"content-length:";
    line.windows(NEEDLE.len())
        .position(|w| w.eq_ignore_ascii_case(NEEDLE))
        .filter(|&at| at > 0)
}

fn trim(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|b| !matches!(b, b' ' | b'\t'));
    let end = s.iter().rposition(|b| !matches!(b, b' ' | b'\t'));
    match (start, end) {
        (Some(a), Some(b)) => &s[a..=b],
        _ => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn read_all(input: &[u8], limits: FrameLimits) -> (Vec<Vec<u8>>, Option<FrameError>) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let mut r = FrameReader::new(input, limits);
            let mut out = Vec::new();
            loop {
                match r.next().await {
                    Ok(Some(m)) => out.push(m),
                    Ok(None) => return (out, None),
                    Err(e) => return (out, Some(e)),
                }
            }
        })
    }

    fn small() -> FrameLimits {
        FrameLimits {
            max_message: 100,
            max_header_line: 64,
            max_garbage: 200,
        }
    }

    #[test]
    fn reads_consecutive_messages_with_and_without_content_type() {
        let mut input = encode(b"{\"a\":1}");
        input.extend_from_slice(
            b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\nContent-Length: 2\r\n\r\n{}",
        );
        input.extend_from_slice(b"content-length:3\n\n[1]");
        let (msgs, err) = read_all(&input, small());
        assert_eq!(err, None);
        assert_eq!(
            msgs,
            vec![b"{\"a\":1}".to_vec(), b"{}".to_vec(), b"[1]".to_vec()]
        );
    }

    #[test]
    fn skips_garbage_between_messages_and_counts_it() {
        let mut input = b"Starting the server...\nwarning: something\r\n\r\n".to_vec();
        input.extend_from_slice(&encode(b"{}"));
        input.extend_from_slice(b"junkContent-Length: 2\r\n\r\n[]");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let mut r = FrameReader::new(&input[..], small());
            assert_eq!(r.next().await, Ok(Some(b"{}".to_vec())));
            assert_eq!(r.next().await, Ok(Some(b"[]".to_vec())));
            assert_eq!(r.next().await, Ok(None));
            assert_eq!(r.garbage(), 23 + 19 + 1 + 4);
        });
    }

    #[test]
    fn rejects_missing_bad_conflicting_and_absurd_lengths() {
        let cases: &[(&[u8], FrameError)] = &[
            (
                b"Content-Type: application/json\r\n\r\n{}",
                FrameError::MissingLength,
            ),
            (
                b"Content-Length: abc\r\n\r\n{}",
                FrameError::BadLength("abc".into()),
            ),
            (
                b"Content-Length: -2\r\n\r\n{}",
                FrameError::BadLength("-2".into()),
            ),
            (
                b"Content-Length: \r\n\r\n",
                FrameError::BadLength(String::new()),
            ),
            (
                b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
                FrameError::ConflictingLength,
            ),
            (
                b"Content-Length: 99999999999999999999999999\r\n\r\n",
                FrameError::TooLarge {
                    len: u64::MAX,
                    limit: 100,
                },
            ),
            (
                b"Content-Length: 101\r\n\r\n",
                FrameError::TooLarge {
                    len: 101,
                    limit: 100,
                },
            ),
            (
                b"Content-Length: 2\r\nnot a header\r\n\r\n{}",
                FrameError::MalformedHeader,
            ),
            (b"Content-Length: 10\r\n\r\n{}", FrameError::Truncated),
            (b"Content-Length: 10\r\n", FrameError::Truncated),
        ];
        for (input, want) in cases {
            let (msgs, err) = read_all(input, small());
            assert!(msgs.is_empty(), "{:?}", String::from_utf8_lossy(input));
            assert_eq!(
                err.as_ref(),
                Some(want),
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn garbage_beyond_the_budget_fails_the_stream() {
        let mut input = Vec::new();
        for _ in 0..50 {
            input.extend_from_slice(b"log line on stdout\n");
        }
        input.extend_from_slice(&encode(b"{}"));
        let (msgs, err) = read_all(&input, small());
        assert!(msgs.is_empty());
        assert_eq!(err, Some(FrameError::Garbage { limit: 200 }));
    }

    #[test]
    fn an_endless_line_is_bounded() {
        // A megabyte without a newline must not be buffered whole: it is garbage, counted.
        let input = vec![b'x'; 1 << 20];
        let (_, err) = read_all(
            &input,
            FrameLimits {
                max_garbage: 1 << 21,
                ..small()
            },
        );
        assert_eq!(err, None);
        let (_, err) = read_all(&input, small());
        assert_eq!(err, Some(FrameError::Garbage { limit: 200 }));
    }

    /// A server that writes without a newline and never closes its output is cut off by the
    /// garbage budget while it is still writing (before, the line's bytes were counted only when
    /// it ended, which an endless line never does).
    #[test]
    fn an_endless_line_on_an_open_stream_is_cut_off() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            use tokio::io::AsyncWriteExt;
            let (mut tx, rx) = tokio::io::duplex(4096);
            let writer = tokio::spawn(async move {
                let chunk = [b'x'; 1024];
                let mut sent = 0usize;
                while tx.write_all(&chunk).await.is_ok() {
                    sent += chunk.len();
                }
                sent
            });
            let mut r = FrameReader::new(rx, small());
            assert_eq!(r.next().await, Err(FrameError::Garbage { limit: 200 }));
            drop(r);
            // The writer stops once the reader is gone; it got at most a few buffers out.
            let sent = writer.await.expect("writer");
            assert!(sent < 1 << 20, "{sent} bytes were read before the cut-off");
        });
    }

    #[test]
    fn an_endless_line_inside_a_header_is_malformed_at_once() {
        let mut input = b"Content-Length: 2\r\n".to_vec();
        input.extend(std::iter::repeat_n(b'y', 4096));
        let (msgs, err) = read_all(&input, small());
        assert!(msgs.is_empty());
        assert_eq!(err, Some(FrameError::MalformedHeader));
    }

    proptest! {
        #[test]
        fn any_bodies_round_trip(bodies in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..80), 0..8)) {
            let mut input = Vec::new();
            for b in &bodies {
                input.extend_from_slice(&encode(b));
            }
            let (msgs, err) = read_all(&input, small());
            prop_assert_eq!(err, None);
            prop_assert_eq!(msgs, bodies);
        }

        #[test]
        fn arbitrary_input_never_panics_and_stays_bounded(input in proptest::collection::vec(any::<u8>(), 0..600)) {
            let (msgs, _) = read_all(&input, small());
            prop_assert!(msgs.iter().all(|m| m.len() <= 100));
        }
    }
}
