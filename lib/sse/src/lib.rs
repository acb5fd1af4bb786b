//! Server-sent events parser: raw response bytes in, dispatched events out, exactly as the WHATWG
//! HTML "event stream interpretation" algorithm defines them. No dependencies.
//!
//! Feed chunks as they arrive (any split works, down to single bytes, including in the middle of a
//! multi-byte character or between the CR and LF of a CRLF); call [`SseFrameBuffer::finish`] at
//! end of stream.
//!
//! ```
//! use hanzo_sse::SseFrameBuffer;
//!
//! let mut sse = SseFrameBuffer::new();
//! let mut events = sse.feed(b"event: ping\r\ndata: {\"a\":").unwrap();
//! events.extend(sse.feed(b"1}\r").unwrap());
//! events.extend(sse.feed(b"\n\r\n").unwrap());
//! sse.finish();
//! assert_eq!(events.len(), 1);
//! assert_eq!(events[0].event_type, "ping");
//! assert_eq!(events[0].data, "{\"a\":1}");
//! ```
//!
//! How it stays fast: lines are found by a block-wise scan for CR/LF that the compiler turns into
//! wide compares, and everything is kept as bytes until an event is dispatched. That is faithful
//! to the spec's "decode, then split lines" order because CR, LF, `:` and space are ASCII, which
//! UTF-8 never uses inside a multi-byte sequence and which always ends an invalid one, so decoding
//! each piece between them gives the same text as decoding the whole stream.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

use std::fmt;

/// The default bound on one event: data buffer plus the line being read (16 MiB).
pub const DEFAULT_MAX_EVENT_SIZE: usize = 16 * 1024 * 1024;

/// The UTF-8 byte order mark, stripped once at the start of a stream.
const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// A pending-line allocation larger than this is released after its line is processed, so one huge
/// event does not pin its memory for the rest of the stream.
const KEEP_PENDING_CAPACITY: usize = 64 * 1024;

/// A dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event` field, or `message` when the event had none.
    pub event_type: String,
    /// The `data` lines joined with `\n`.
    pub data: String,
    /// The last event ID at the time of dispatch (it persists across events until changed).
    pub last_event_id: String,
}

/// Why the parser refused input.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SseError {
    /// One event (its data buffer plus the line being read) grew past `limit` bytes. The buffer is
    /// then failed: its memory is released and every later [`SseFrameBuffer::feed`] returns this
    /// error again, until [`SseFrameBuffer::finish`] starts a new stream.
    EventTooLarge {
        /// The configured maximum event size in bytes.
        limit: usize,
    },
}

impl fmt::Display for SseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SseError::EventTooLarge { limit } => write!(
                f,
                "server-sent event larger than the {limit}-byte limit; the stream was abandoned"
            ),
        }
    }
}

impl std::error::Error for SseError {}

/// Where we are in recognising the optional BOM at the start of the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BomState {
    /// This many leading bytes of the stream matched the BOM so far (0, 1 or 2); they are held
    /// back until we know whether they are a BOM or text.
    Matching(usize),
    /// The BOM was stripped, or the stream does not start with one.
    Done,
}

/// Incremental SSE parser for one stream. See the crate docs.
///
/// Memory is bounded by [`SseFrameBuffer::with_max_event_size`]: a small multiple of the limit in
/// the worst case (data buffer, pending line, event type, id), independent of the stream length.
#[derive(Debug, Clone)]
pub struct SseFrameBuffer {
    max_event_size: usize,
    /// Bytes of a line whose terminator has not arrived yet.
    pending: Vec<u8>,
    /// The spec's data buffer, as raw bytes: each `data` value followed by LF.
    data: Vec<u8>,
    /// The spec's event type buffer, as raw bytes.
    event_type: Vec<u8>,
    /// The spec's last event ID buffer.
    id_buffer: String,
    /// The spec's last event ID string, set from the buffer at each dispatch.
    last_event_id: String,
    /// An `id` line was seen since the last dispatch.
    id_changed: bool,
    /// The last valid `retry` value.
    retry: Option<u64>,
    bom: BomState,
    /// The previous chunk ended with CR, so an LF starting the next one completes that CRLF.
    after_cr: bool,
    failed: bool,
}

impl Default for SseFrameBuffer {
    fn default() -> Self {
        Self::new()
    }
}

impl SseFrameBuffer {
    /// A parser at the start of a stream, with [`DEFAULT_MAX_EVENT_SIZE`].
    pub fn new() -> Self {
        Self {
            max_event_size: DEFAULT_MAX_EVENT_SIZE,
            pending: Vec::new(),
            data: Vec::new(),
            event_type: Vec::new(),
            id_buffer: String::new(),
            last_event_id: String::new(),
            id_changed: false,
            retry: None,
            bom: BomState::Matching(0),
            after_cr: false,
            failed: false,
        }
    }

    /// Set the largest event accepted, in bytes: the data buffer plus the line being read
    /// (field name included) may not exceed it.
    pub fn with_max_event_size(mut self, limit: usize) -> Self {
        self.max_event_size = limit;
        self
    }

    /// The last valid reconnection time (`retry` field, milliseconds) seen, if any.
    pub fn retry(&self) -> Option<u64> {
        self.retry
    }

    /// The last event ID as of the last dispatch: what a client sends as `Last-Event-ID`.
    pub fn last_event_id(&self) -> &str {
        &self.last_event_id
    }

    /// Feed text; same as [`SseFrameBuffer::feed`] on its UTF-8 bytes.
    pub fn feed_str(&mut self, chunk: &str) -> Result<Vec<SseEvent>, SseError> {
        self.feed(chunk.as_bytes())
    }

    /// Feed the next chunk of response bytes; returns the events it completed, in order.
    ///
    /// On [`SseError::EventTooLarge`] events completed earlier in the same chunk are dropped too:
    /// the stream is to be abandoned.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, SseError> {
        if self.failed {
            return Err(self.too_large());
        }
        let mut events = Vec::new();
        let mut rest = self.strip_bom(chunk);
        if self.after_cr {
            if let Some((&first, tail)) = rest.split_first() {
                if first == b'\n' {
                    rest = tail;
                }
                self.after_cr = false;
            }
        }
        while let Some(end) = find_line_end(rest) {
            let (line, terminator) = (&rest[..end], rest[end]);
            let fits = if self.pending.is_empty() {
                let fits = self.fits(line.len());
                if fits {
                    self.process_line(line, &mut events);
                }
                fits
            } else {
                self.complete_pending_line(line, &mut events)
            };
            if !fits {
                return Err(self.fail());
            }
            rest = &rest[end + 1..];
            if terminator == b'\r' {
                match rest.split_first() {
                    Some((&b'\n', tail)) => rest = tail,
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
        }
        if !rest.is_empty() {
            if !self.fits(self.pending.len().saturating_add(rest.len())) {
                return Err(self.fail());
            }
            self.pending.extend_from_slice(rest);
        }
        Ok(events)
    }

    /// End of stream: an unterminated line or event is discarded, as the spec requires. Returns
    /// whether anything was discarded. The parser is then ready for a new stream (a reconnection):
    /// its buffers are empty and a BOM is stripped again, while [`SseFrameBuffer::retry`] and
    /// [`SseFrameBuffer::last_event_id`] keep their values.
    pub fn finish(&mut self) -> bool {
        let discarded = !self.pending.is_empty()
            || !self.data.is_empty()
            || !self.event_type.is_empty()
            || matches!(self.bom, BomState::Matching(n) if n > 0);
        self.pending = Vec::new();
        self.data = Vec::new();
        self.event_type.clear();
        // A new stream starts with an empty id buffer, which its first dispatch will copy.
        self.id_buffer.clear();
        self.id_changed = true;
        self.bom = BomState::Matching(0);
        self.after_cr = false;
        self.failed = false;
        discarded
    }

    fn too_large(&self) -> SseError {
        SseError::EventTooLarge {
            limit: self.max_event_size,
        }
    }

    fn fail(&mut self) -> SseError {
        self.failed = true;
        self.pending = Vec::new();
        self.data = Vec::new();
        self.event_type = Vec::new();
        self.too_large()
    }

    /// Whether a line of `line_len` bytes may join the current event.
    fn fits(&self, line_len: usize) -> bool {
        self.data.len().saturating_add(line_len) <= self.max_event_size
    }

    /// Skip a leading BOM even when it arrives split across chunks; bytes that turn out not to be
    /// one are handed back as the start of the first line.
    fn strip_bom<'a>(&mut self, mut chunk: &'a [u8]) -> &'a [u8] {
        while let BomState::Matching(matched) = self.bom {
            let Some((&byte, tail)) = chunk.split_first() else {
                break;
            };
            if byte == BOM[matched] {
                chunk = tail;
                self.bom = if matched + 1 == BOM.len() {
                    BomState::Done
                } else {
                    BomState::Matching(matched + 1)
                };
            } else {
                self.pending.extend_from_slice(&BOM[..matched]);
                self.bom = BomState::Done;
            }
        }
        chunk
    }

    /// Append `tail` to the pending line and process it; `false` if it is too large.
    fn complete_pending_line(&mut self, tail: &[u8], events: &mut Vec<SseEvent>) -> bool {
        if !self.fits(self.pending.len().saturating_add(tail.len())) {
            return false;
        }
        self.pending.extend_from_slice(tail);
        let mut line = std::mem::take(&mut self.pending);
        self.process_line(&line, events);
        if line.capacity() <= KEEP_PENDING_CAPACITY {
            line.clear();
            self.pending = line;
        }
        true
    }

    /// One complete line, without its terminator.
    fn process_line(&mut self, line: &[u8], events: &mut Vec<SseEvent>) {
        let (name, value) = match line.iter().position(|&b| b == b':') {
            None if line.is_empty() => return self.dispatch(events),
            // A comment.
            Some(0) => return,
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        match name {
            b"event" => {
                self.event_type.clear();
                self.event_type.extend_from_slice(value);
            }
            b"data" => {
                // Exact reservation: a large single-line event then costs one allocation.
                self.data.reserve(value.len() + 1);
                self.data.extend_from_slice(value);
                self.data.push(b'\n');
            }
            // An id containing NUL is ignored: it could not be sent back as a header.
            b"id" if !value.contains(&0) => {
                self.id_buffer.clear();
                self.id_changed = true;
                self.id_buffer.push_str(&String::from_utf8_lossy(value));
            }
            b"retry" => {
                if let Some(ms) = parse_digits(value) {
                    self.retry = Some(ms);
                }
            }
            // Unknown fields (and ignored ids) are skipped, as the spec says.
            _ => {}
        }
    }

    fn dispatch(&mut self, events: &mut Vec<SseEvent>) {
        // The spec copies the buffer to the string at every dispatch; copying only after an `id`
        // line is the same and keeps a string compare or copy off the per-event path.
        if self.id_changed {
            self.last_event_id.clone_from(&self.id_buffer);
            self.id_changed = false;
        }
        if self.data.is_empty() {
            self.event_type.clear();
            return;
        }
        // Every data value was followed by LF; the spec removes the last one.
        self.data.pop();
        let data = decode_owned(std::mem::take(&mut self.data));
        let event_type = if self.event_type.is_empty() {
            "message".to_string()
        } else {
            String::from_utf8_lossy(&self.event_type).into_owned()
        };
        self.event_type.clear();
        events.push(SseEvent {
            event_type,
            data,
            last_event_id: self.last_event_id.clone(),
        });
    }
}

/// Decode as the spec's "UTF-8 decode" does: invalid sequences become U+FFFD (one per maximal
/// subpart, which is also what `from_utf8_lossy` does). Valid input is moved, not copied.
fn decode_owned(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes)
        .unwrap_or_else(|err| String::from_utf8_lossy(err.as_bytes()).into_owned())
}

/// A `retry` value: one or more ASCII digits. Empty values and values beyond `u64` are ignored
/// (the spec gives no bound; a reconnection time past 584 million years is not a useful one).
fn parse_digits(value: &[u8]) -> Option<u64> {
    if value.is_empty() {
        return None;
    }
    value.iter().try_fold(0u64, |acc, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

/// The index of the first CR or LF in `hay`.
fn find_line_end(hay: &[u8]) -> Option<usize> {
    const BLOCK: usize = 64;
    let is_end = |b: &u8| *b == b'\n' || *b == b'\r';
    let mut blocks = hay.chunks_exact(BLOCK);
    let mut offset = 0;
    for block in &mut blocks {
        // No early exit inside a block, so this compiles to wide compares and an OR-reduction.
        let hit = block.iter().fold(0u8, |acc, b| {
            acc | u8::from(*b == b'\n') | u8::from(*b == b'\r')
        });
        if hit != 0 {
            return block.iter().position(is_end).map(|i| offset + i);
        }
        offset += BLOCK;
    }
    blocks
        .remainder()
        .iter()
        .position(is_end)
        .map(|i| offset + i)
}

#[cfg(test)]
mod tests;
