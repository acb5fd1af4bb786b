//! Newline-delimited framing with a hard cap: the newline is searched in the reader's buffer as
//! bytes arrive, and a line is refused as soon as it passes the cap, so a 50 MB line costs at most
//! the cap in memory, never 50 MB.

use std::io;
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// Why a line could not be read.
#[derive(Debug)]
pub enum LineError {
    /// The line grew past the limit before its newline arrived.
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The input ended in the middle of a line.
    Truncated,
    /// Reading failed.
    Io(io::Error),
}

/// Reads `\n`-terminated lines (a `\r` before the `\n` is dropped; empty lines are skipped).
pub struct LineReader<R> {
    inner: R,
    max: usize,
    line: Vec<u8>,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    /// Lines of at most `max` bytes (terminator excluded).
    pub fn new(inner: R, max: usize) -> Self {
        LineReader {
            inner,
            max,
            line: Vec::new(),
        }
    }

    /// The next non-empty line; `Ok(None)` at a clean end of input.
    pub async fn next_line(&mut self) -> Result<Option<Vec<u8>>, LineError> {
        loop {
            let available = self.inner.fill_buf().await.map_err(LineError::Io)?;
            if available.is_empty() {
                return if self.line.iter().all(u8::is_ascii_whitespace) {
                    self.line.clear();
                    Ok(None)
                } else {
                    self.line.clear();
                    Err(LineError::Truncated)
                };
            }
            match available.iter().position(|&b| b == b'\n') {
                Some(pos) => {
                    if self.line.len() + pos > self.max {
                        self.line = Vec::new();
                        return Err(LineError::TooLarge { limit: self.max });
                    }
                    self.line.extend_from_slice(&available[..pos]);
                    self.inner.consume(pos + 1);
                    if self.line.last() == Some(&b'\r') {
                        self.line.pop();
                    }
                    if self.line.is_empty() {
                        continue;
                    }
                    return Ok(Some(std::mem::take(&mut self.line)));
                }
                None => {
                    let n = available.len();
                    if self.line.len() + n > self.max {
                        self.line = Vec::new();
                        return Err(LineError::TooLarge { limit: self.max });
                    }
                    self.line.extend_from_slice(available);
                    self.inner.consume(n);
                }
            }
        }
    }

    /// The next line cut to `max` bytes, with whether it was cut; the rest of a long line is
    /// skipped without being kept (for logs, which must never stop a server). `None` at the end.
    pub async fn next_line_lossy(&mut self) -> io::Result<Option<(Vec<u8>, bool)>> {
        let mut cut = false;
        loop {
            let available = self.inner.fill_buf().await?;
            if available.is_empty() {
                if self.line.is_empty() && !cut {
                    return Ok(None);
                }
                return Ok(Some((std::mem::take(&mut self.line), cut)));
            }
            let (chunk, consumed, done) = match available.iter().position(|&b| b == b'\n') {
                Some(pos) => (&available[..pos], pos + 1, true),
                None => (available, available.len(), false),
            };
            let room = self.max.saturating_sub(self.line.len());
            if chunk.len() > room {
                cut = true;
            }
            self.line.extend_from_slice(&chunk[..chunk.len().min(room)]);
            self.inner.consume(consumed);
            if done {
                if self.line.last() == Some(&b'\r') {
                    self.line.pop();
                }
                return Ok(Some((std::mem::take(&mut self.line), cut)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncWriteExt, BufReader};

    #[tokio::test]
    async fn lines_split_anywhere() {
        let (mut w, r) = tokio::io::duplex(7);
        tokio::spawn(async move {
            w.write_all(b"{\"a\":1}\r\n\n{\"b\"").await.unwrap();
            w.write_all(b":2}\n").await.unwrap();
        });
        let mut lines = LineReader::new(BufReader::new(r), 100);
        assert_eq!(lines.next_line().await.unwrap().unwrap(), b"{\"a\":1}");
        assert_eq!(lines.next_line().await.unwrap().unwrap(), b"{\"b\":2}");
        assert!(lines.next_line().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_long_line_is_refused_at_the_cap() {
        let (mut w, r) = tokio::io::duplex(4096);
        tokio::spawn(async move {
            let junk = vec![b'x'; 1 << 20];
            for _ in 0..50 {
                if w.write_all(&junk).await.is_err() {
                    return;
                }
            }
        });
        let mut lines = LineReader::new(BufReader::new(r), 64 * 1024);
        match lines.next_line().await {
            Err(LineError::TooLarge { limit }) => assert_eq!(limit, 64 * 1024),
            other => panic!("expected TooLarge, got {other:?}"),
        }
        assert!(lines.line.capacity() <= 64 * 1024 + 8192);
    }

    #[tokio::test]
    async fn a_line_cut_by_the_end_is_truncated() {
        let mut lines = LineReader::new(BufReader::new(&b"{\"a\":"[..]), 100);
        assert!(matches!(lines.next_line().await, Err(LineError::Truncated)));
    }

    #[tokio::test]
    async fn lossy_lines_are_cut_and_marked() {
        let input = b"short\nthis one is long\nlast".to_vec();
        let mut lines = LineReader::new(BufReader::new(&input[..]), 8);
        assert_eq!(
            lines.next_line_lossy().await.unwrap(),
            Some((b"short".to_vec(), false))
        );
        assert_eq!(
            lines.next_line_lossy().await.unwrap(),
            Some((b"this one".to_vec(), true))
        );
        assert_eq!(
            lines.next_line_lossy().await.unwrap(),
            Some((b"last".to_vec(), false))
        );
        assert_eq!(lines.next_line_lossy().await.unwrap(), None);
    }
}
