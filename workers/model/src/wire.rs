//! What both provider protocols share: the parser interface the turn driver runs them through, and
//! the helpers for error bodies.

use hanzo_ipc::roles::model::{StopReason, StreamEvent, Usage};
use hanzo_sse::SseEvent;
use serde_json::Value;

/// A provider request before the base URL is prefixed (and before the broker adds the
/// credential).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderRequest {
    /// Appended to the base URL: `/v1/messages`, `/chat/completions`.
    pub path: String,
    /// Headers the provider needs besides the credential (`anthropic-version`, content type).
    pub headers: Vec<(String, String)>,
    /// The JSON body.
    pub body: Vec<u8>,
}

/// An error the provider reported inside a 2xx stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// The provider's own error event (`overloaded_error`, `rate_limit_error`, …).
    Provider {
        /// The provider's error type.
        kind: String,
        /// The provider's message.
        message: String,
        /// Overload, rate limit or a server-side failure: another attempt may succeed.
        retryable: bool,
    },
    /// Data that is not the provider's protocol.
    Protocol(String),
}

/// A provider's stream parser: SSE events in, HIP-0301 stream events out.
pub trait WireParser: Send {
    /// Handle one SSE event, appending what it produced to `out`.
    fn on_event(&mut self, event: &SseEvent, out: &mut Vec<StreamEvent>) -> Result<(), WireError>;
    /// The body ended. Returns true (after appending the final events) when the message was
    /// complete; false when the stream was cut short.
    fn on_end(&mut self, out: &mut Vec<StreamEvent>) -> bool;
    /// Why the model stopped, once the stream said so.
    fn stop_reason(&self) -> Option<StopReason>;
    /// The token usage reported so far.
    fn usage(&self) -> Usage;
}

pub(crate) fn parse_json(data: &str, what: &str) -> Result<Value, WireError> {
    serde_json::from_str(data)
        .map_err(|e| WireError::Protocol(format!("{what}: invalid JSON ({e})")))
}

pub(crate) fn u64_at(v: &Value, path: &[&str]) -> Option<u64> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p)?;
    }
    cur.as_u64()
}

pub(crate) fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p)?;
    }
    cur.as_str()
}

/// Tool input as assembled from deltas: empty means `{}`; anything else must be a JSON object.
pub(crate) fn tool_input(raw: &str, tool: &str) -> Result<String, WireError> {
    if raw.trim().is_empty() {
        return Ok("{}".into());
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(_)) => Ok(raw.to_string()),
        Ok(_) => Err(WireError::Protocol(format!(
            "input of tool call `{tool}` is not a JSON object"
        ))),
        Err(e) => Err(WireError::Protocol(format!(
            "input of tool call `{tool}` is not valid JSON ({e})"
        ))),
    }
}

/// The provider's error message from an error body (`{"error": {"type", "message"}}` in both
/// protocols), or the start of the body as text. Bounded, so a huge body cannot flood a log.
pub fn error_message(body: &[u8]) -> (Option<String>, String) {
    const MAX: usize = 500;
    let text = String::from_utf8_lossy(body);
    if let Ok(v) = serde_json::from_str::<Value>(&text) {
        let err = v.get("error").unwrap_or(&v);
        let kind = err
            .get("type")
            .or_else(|| err.get("code"))
            .and_then(Value::as_str)
            .map(str::to_string);
        if let Some(m) = err.get("message").and_then(Value::as_str) {
            return (kind, truncate(m, MAX));
        }
        if let Some(m) = err.as_str() {
            return (kind, truncate(m, MAX));
        }
    }
    (None, truncate(text.trim(), MAX))
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// True when an error body says the conversation does not fit the context window (the phrasings
/// of Anthropic, OpenAI and the common compatible servers).
pub fn is_context_overflow(kind: Option<&str>, message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    kind == Some("context_length_exceeded")
        || m.contains("prompt is too long")
        || m.contains("context_length_exceeded")
        || m.contains("maximum context length")
        || m.contains("context window")
        || m.contains("too many tokens")
}
