//! Cassettes: recorded HTTP exchanges in the provider's own wire format, one JSON object per line
//! (format in `CASSETTE.md`). [`ReplayTransport`] plays one through the same parser as a live
//! run; [`Recording`] wraps a live transport and writes what passed through it.

use crate::transport::{BodyStream, HttpTransport, TransportError};
use hanzo_ipc::roles::http::{HttpFailure, HttpFailureKind, HttpHead, HttpRequest};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use thiserror::Error;

/// The cassette format version written by this build.
pub const CASSETTE_VERSION: u32 = 1;

/// One recorded exchange.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exchange {
    /// The cassette format version this exchange was written in.
    pub version: u32,
    /// What was asked.
    pub request: RequestSummary,
    /// 0 when the exchange failed before a response head (then `error` says why).
    pub status: u16,
    /// The response's headers, in order.
    pub headers: Vec<(String, String)>,
    /// The response body as it arrived, chunk by chunk.
    pub chunks: Vec<Chunk>,
    /// How the exchange broke off, if it did (before the head, or in the middle of the body).
    #[serde(default)]
    pub error: Option<RecordedFailure>,
}

/// What identifies a request. Never a credential: the model worker never has one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestSummary {
    /// `POST`, in practice.
    pub method: String,
    /// The endpoint, as the model worker addressed it (the broker adds the credential).
    pub url: String,
    /// Whose credential the broker injected (`anthropic`, `openai`, `hanzo`).
    pub credential: String,
    /// The request body's length.
    pub body_bytes: u64,
}

/// A body chunk exactly as received: text when it is valid UTF-8, else its bytes (a multi-byte
/// character can be split between chunks).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Chunk {
    /// A chunk that is valid UTF-8.
    Text(String),
    /// A chunk that is not valid UTF-8 on its own.
    Bytes {
        /// The chunk's bytes.
        bytes: Vec<u8>,
    },
}

impl Chunk {
    /// Text when `b` is valid UTF-8, else the bytes.
    pub fn from_bytes(b: Vec<u8>) -> Chunk {
        match String::from_utf8(b) {
            Ok(s) => Chunk::Text(s),
            Err(e) => Chunk::Bytes {
                bytes: e.into_bytes(),
            },
        }
    }

    /// The chunk's bytes, as they arrived.
    pub fn into_bytes(self) -> Vec<u8> {
        match self {
            Chunk::Text(s) => s.into_bytes(),
            Chunk::Bytes { bytes } => bytes,
        }
    }
}

/// How a recorded exchange failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedFailure {
    /// `connect` (before the head) or `body` (after it).
    pub kind: String,
    /// What went wrong, as the transport said.
    pub message: String,
}

/// Why a cassette cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CassetteError {
    /// A line that is not an exchange.
    #[error("cassette line {line}: {reason}")]
    BadLine {
        /// Its line number, from 1.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// An exchange written by a newer build.
    #[error("cassette line {line}: version {version} is newer than this build reads ({CASSETTE_VERSION})")]
    Version {
        /// Its line number, from 1.
        line: usize,
        /// The version it declares.
        version: u32,
    },
}

/// Parse a cassette (blank lines ignored).
pub fn parse_cassette(jsonl: &str) -> Result<Vec<Exchange>, CassetteError> {
    let mut out = Vec::new();
    for (i, line) in jsonl.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let ex: Exchange = serde_json::from_str(line).map_err(|e| CassetteError::BadLine {
            line: i + 1,
            reason: e.to_string(),
        })?;
        if ex.version > CASSETTE_VERSION {
            return Err(CassetteError::Version {
                line: i + 1,
                version: ex.version,
            });
        }
        out.push(ex);
    }
    Ok(out)
}

/// One cassette line for `ex`.
pub fn to_line(ex: &Exchange) -> String {
    serde_json::to_string(ex).expect("an exchange is plain data and always serializes")
}

fn path_of(url: &str) -> &str {
    // `scheme://host[:port]/path` → `/path`; the replay placeholder `replay:/path` → `/path`.
    let rest = url.split_once("://").map_or_else(
        || url.split_once(':').map_or(url, |(_, r)| r),
        |(_, r)| r.find('/').map_or("", |i| &r[i..]),
    );
    if rest.is_empty() {
        "/"
    } else {
        rest
    }
}

/// Base URLs differ between a recording and a replay (`https://api.openai.com/v1`,
/// `http://127.0.0.1:11434/v1`, the replay placeholder), so paths match when one ends the other.
fn same_endpoint(recorded: &str, requested: &str) -> bool {
    recorded.ends_with(requested) || requested.ends_with(recorded)
}

/// Plays a cassette's exchanges in order.
#[derive(Clone, Default)]
pub struct ReplayTransport {
    exchanges: Arc<Mutex<VecDeque<Exchange>>>,
}

impl ReplayTransport {
    /// Plays `exchanges` in order, one per request.
    pub fn new(exchanges: Vec<Exchange>) -> Self {
        ReplayTransport {
            exchanges: Arc::new(Mutex::new(exchanges.into())),
        }
    }

    /// How many exchanges are left to play.
    pub fn remaining(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Exchange>> {
        self.exchanges.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The body of a replayed exchange.
pub struct ReplayBody {
    chunks: VecDeque<Chunk>,
    error: Option<RecordedFailure>,
}

fn failure(rec: RecordedFailure) -> TransportError {
    let kind = if rec.kind == "body" {
        HttpFailureKind::Body
    } else {
        HttpFailureKind::Connect
    };
    TransportError::Http(HttpFailure {
        kind,
        message: rec.message,
    })
}

impl HttpTransport for ReplayTransport {
    type Body = ReplayBody;

    async fn send(&self, request: &HttpRequest) -> Result<(HttpHead, ReplayBody), TransportError> {
        let ex = self.lock().pop_front().ok_or_else(|| {
            TransportError::Cassette(format!(
                "no exchange left for {} {}",
                request.method,
                path_of(&request.url)
            ))
        })?;
        if ex.request.method != request.method
            || !same_endpoint(path_of(&ex.request.url), path_of(&request.url))
        {
            return Err(TransportError::Cassette(format!(
                "next exchange is {} {}, the request is {} {}",
                ex.request.method,
                path_of(&ex.request.url),
                request.method,
                path_of(&request.url)
            )));
        }
        if ex.status == 0 {
            return Err(failure(ex.error.unwrap_or(RecordedFailure {
                kind: "connect".into(),
                message: "recorded connection failure".into(),
            })));
        }
        Ok((
            HttpHead {
                status: ex.status,
                headers: ex.headers,
            },
            ReplayBody {
                chunks: ex.chunks.into(),
                error: ex.error,
            },
        ))
    }
}

impl BodyStream for ReplayBody {
    async fn next_chunk(&mut self) -> Option<Result<Vec<u8>, TransportError>> {
        match self.chunks.pop_front() {
            Some(c) => Some(Ok(c.into_bytes())),
            None => self.error.take().map(|e| Err(failure(e))),
        }
    }
}

/// Wraps a transport and records every exchange that passes through it, as cassette lines.
pub struct Recording<T> {
    inner: T,
    lines: Arc<Mutex<Vec<String>>>,
}

impl<T> Recording<T> {
    /// Records what passes through `inner`.
    pub fn new(inner: T) -> Self {
        Recording {
            inner,
            lines: Arc::default(),
        }
    }

    /// The lines recorded so far, removed from the recorder (one per finished exchange, in order).
    pub fn take_lines(&self) -> Vec<String> {
        std::mem::take(&mut *self.lines.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

fn summary(request: &HttpRequest) -> RequestSummary {
    RequestSummary {
        method: request.method.clone(),
        url: request.url.clone(),
        credential: request.credential.as_str().into(),
        body_bytes: request.body.len() as u64,
    }
}

fn recorded(e: &TransportError) -> RecordedFailure {
    match e {
        TransportError::Http(f) => RecordedFailure {
            kind: if f.kind == HttpFailureKind::Body {
                "body".into()
            } else {
                "connect".into()
            },
            message: f.message.clone(),
        },
        TransportError::Cassette(m) => RecordedFailure {
            kind: "connect".into(),
            message: m.clone(),
        },
    }
}

/// The body of a recorded exchange; its line is written when the body is dropped, so an exchange
/// the parser abandoned early is recorded as far as it was read.
pub struct RecordingBody<B> {
    inner: B,
    exchange: Option<Exchange>,
    lines: Arc<Mutex<Vec<String>>>,
}

impl<T: HttpTransport> HttpTransport for Recording<T> {
    type Body = RecordingBody<T::Body>;

    async fn send(
        &self,
        request: &HttpRequest,
    ) -> Result<(HttpHead, RecordingBody<T::Body>), TransportError> {
        match self.inner.send(request).await {
            Ok((head, body)) => {
                let exchange = Exchange {
                    version: CASSETTE_VERSION,
                    request: summary(request),
                    status: head.status,
                    headers: head.headers.clone(),
                    chunks: Vec::new(),
                    error: None,
                };
                Ok((
                    head,
                    RecordingBody {
                        inner: body,
                        exchange: Some(exchange),
                        lines: self.lines.clone(),
                    },
                ))
            }
            Err(e) => {
                let ex = Exchange {
                    version: CASSETTE_VERSION,
                    request: summary(request),
                    status: 0,
                    headers: Vec::new(),
                    chunks: Vec::new(),
                    error: Some(recorded(&e)),
                };
                self.lines
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(to_line(&ex));
                Err(e)
            }
        }
    }
}

impl<B: BodyStream> BodyStream for RecordingBody<B> {
    async fn next_chunk(&mut self) -> Option<Result<Vec<u8>, TransportError>> {
        let next = self.inner.next_chunk().await;
        if let Some(ex) = &mut self.exchange {
            match &next {
                Some(Ok(c)) => ex.chunks.push(Chunk::from_bytes(c.clone())),
                Some(Err(e)) => ex.error = Some(recorded(e)),
                None => {}
            }
        }
        next
    }
}

impl<B> Drop for RecordingBody<B> {
    fn drop(&mut self) {
        if let Some(ex) = self.exchange.take() {
            self.lines
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(to_line(&ex));
        }
    }
}
