//! Fail-closed classification of every `tools/call` answer (HAAP README, "Calling an MCP server"):
//!
//! - a result → [`CallOutcome::Allowed`] (with `isError: true` it is still allowed, and says the
//!   tool reported an error);
//! - a JSON-RPC error in the policy range −32005…−32000, HTTP 401/403, or a body that yields no
//!   JSON-RPC document at all (empty, truncated, HTML, not UTF-8) → [`CallOutcome::Denied`]:
//!   not being able to tell is not being told yes;
//! - any other JSON-RPC error (e.g. −32601) → [`CallOutcome::Fault`]: a downstream failure,
//!   which must not be reported as a policy decision nobody made.
//!
//! Bodies are searched the way the HAAP SDK's `_json_documents` does: the whole body as JSON, and
//! then every `data:` line, unconditionally — an event stream opens with `event: message`, so
//! sniffing for a leading `data:` would read a denial as an allow.

use crate::jsonrpc::{excerpt, RpcError};
use serde_json::Value;
use std::fmt;
use std::ops::RangeInclusive;

/// JSON-RPC error codes that mean "a policy refused this call".
pub const POLICY_DENIAL_CODES: RangeInclusive<i64> = -32005..=-32000;

/// The three outcomes of a tool call.
#[derive(Debug, Clone, PartialEq)]
pub enum CallOutcome {
    /// The call reached the tool; its result (which may report the tool's own error).
    Allowed(ToolResult),
    /// A policy refused the call (a JSON-RPC policy code, HTTP 401/403, or no JSON-RPC answer).
    Denied {
        /// What refused it, for the record.
        reason: String,
    },
    /// The server failed the call with another JSON-RPC error.
    Fault {
        /// The server's error, for the record.
        reason: String,
    },
}

impl CallOutcome {
    /// `allowed`, `denied` or `fault`, as the run record writes it.
    pub fn kind(&self) -> &'static str {
        match self {
            CallOutcome::Allowed(_) => "allowed",
            CallOutcome::Denied { .. } => "denied",
            CallOutcome::Fault { .. } => "fault",
        }
    }
}

/// An allowed answer, untrusted and size-capped.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// The JSON-RPC `result` as the server sent it; when it was over the cap, a string holding its
    /// first bytes followed by a marker saying how much was cut.
    pub value: Value,
    /// The result has `isError: true`: the call reached the tool and the tool reported an error.
    pub is_error: bool,
    /// The serialized size of the full result, and whether it was cut.
    pub bytes: usize,
    /// Whether `value` was cut to the cap.
    pub truncated: bool,
}

impl ToolResult {
    /// A result, cut to `max_bytes` of its serialized form when larger.
    pub fn capped(result: Value, max_bytes: usize) -> ToolResult {
        let is_error = result.get("isError").and_then(Value::as_bool) == Some(true);
        let text = serde_json::to_string(&result).unwrap_or_default();
        let bytes = text.len();
        if bytes <= max_bytes {
            return ToolResult {
                value: result,
                is_error,
                bytes,
                truncated: false,
            };
        }
        let mut end = max_bytes;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let cut = format!(
            "{}\n[hanzo-dev: result cut at {end} of {bytes} bytes]",
            &text[..end]
        );
        ToolResult {
            value: Value::String(cut),
            is_error,
            bytes,
            truncated: true,
        }
    }
}

/// An answer refused before any JSON-RPC content could be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// HTTP 401 or 403.
    Status {
        /// The HTTP status.
        status: u16,
    },
    /// The body held no JSON-RPC answer to the request.
    NoDocument {
        /// The HTTP status.
        status: u16,
        /// What the body looked like.
        why: NoDocument,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Status { status } => write!(f, "HTTP {status} from the MCP server"),
            Refusal::NoDocument { status, why } => {
                write!(f, "HTTP {status} with {why}, no JSON-RPC answer")
            }
        }
    }
}

/// What a body without a JSON-RPC answer looked like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoDocument {
    /// An empty body.
    Empty,
    /// JSON (or an event stream) cut off before its end.
    Truncated,
    /// An HTML page (a login page, a proxy's error page).
    Html,
    /// Bytes that are not UTF-8.
    NotUtf8,
    /// Something else that is not JSON.
    NotJson,
    /// JSON-RPC documents, but none that answers this request.
    NoAnswer,
    /// Larger than the message limit; not read to its end.
    TooLarge,
}

impl fmt::Display for NoDocument {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NoDocument::Empty => "an empty body",
            NoDocument::Truncated => "a truncated body",
            NoDocument::Html => "an HTML body",
            NoDocument::NotUtf8 => "a body that is not UTF-8",
            NoDocument::NotJson => "a body that is not JSON",
            NoDocument::NoAnswer => "a body that does not answer the request",
            NoDocument::TooLarge => "a body over the message size limit",
        })
    }
}

/// What came back for one request, before classification.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A JSON-RPC `result`.
    Result(Value),
    /// A JSON-RPC error.
    Error(RpcError),
    /// No JSON-RPC answer could be read.
    Refused(Refusal),
}

/// Classify one `tools/call` answer. `max_result_bytes` caps an allowed result.
pub fn classify(reply: Reply, max_result_bytes: usize) -> CallOutcome {
    match reply {
        Reply::Result(v) => CallOutcome::Allowed(ToolResult::capped(v, max_result_bytes)),
        Reply::Error(e) if POLICY_DENIAL_CODES.contains(&e.code) => CallOutcome::Denied {
            reason: format!("policy denial: {e}"),
        },
        Reply::Error(e) => CallOutcome::Fault {
            reason: format!("the MCP server failed the call: {e}"),
        },
        Reply::Refused(r @ Refusal::Status { .. }) => CallOutcome::Denied {
            reason: format!("{r}: access refused"),
        },
        Reply::Refused(r @ Refusal::NoDocument { .. }) => CallOutcome::Denied {
            reason: format!("{r}: treated as a denial (fail-closed)"),
        },
    }
}

/// The JSON documents in a non-streamed body: the whole body as JSON, else every `data:` line of
/// it (whatever precedes it, `event: message` included). `Err` says why there are none.
pub fn json_documents(body: &[u8]) -> Result<Vec<Value>, NoDocument> {
    let text = std::str::from_utf8(body).map_err(|_| NoDocument::NotUtf8)?;
    let trimmed = text.trim_start_matches('\u{feff}').trim();
    if trimmed.is_empty() {
        return Err(NoDocument::Empty);
    }
    let whole = match serde_json::from_str::<Value>(trimmed) {
        Ok(v) => return Ok(vec![v]),
        Err(e) => e,
    };
    let docs: Vec<Value> = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .collect();
    if !docs.is_empty() {
        return Ok(docs);
    }
    let lower = excerpt(trimmed, 64).to_ascii_lowercase();
    if lower.starts_with('<') {
        Err(NoDocument::Html)
    } else if whole.is_eof() || text.lines().any(|l| l.starts_with("data:")) {
        Err(NoDocument::Truncated)
    } else {
        Err(NoDocument::NotJson)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn documents_are_found_in_every_shape() {
        assert_eq!(json_documents(br#"{"a":1}"#).unwrap(), vec![json!({"a":1})]);
        let sse = b"event: message\nid: 7\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32001,\"message\":\"no\"}}\n\n";
        assert_eq!(json_documents(sse).unwrap().len(), 1);
        assert_eq!(json_documents(b""), Err(NoDocument::Empty));
        assert_eq!(json_documents(b"  \n"), Err(NoDocument::Empty));
        assert_eq!(
            json_documents(br#"{"jsonrpc":"2.0","id":1,"res"#),
            Err(NoDocument::Truncated)
        );
        assert_eq!(
            json_documents(b"<html><body>Forbidden</body></html>"),
            Err(NoDocument::Html)
        );
        assert_eq!(json_documents(b"\xff\xfe{}"), Err(NoDocument::NotUtf8));
        assert_eq!(
            json_documents(b"Service Unavailable"),
            Err(NoDocument::NotJson)
        );
        assert_eq!(
            json_documents(b"event: message\ndata: {\"jsonrpc\""),
            Err(NoDocument::Truncated)
        );
    }

    #[test]
    fn every_reply_is_classified() {
        let c = |r| classify(r, 1 << 20);
        assert!(
            matches!(c(Reply::Result(json!({"content":[]}))), CallOutcome::Allowed(r) if !r.is_error)
        );
        assert!(
            matches!(c(Reply::Result(json!({"isError":true}))), CallOutcome::Allowed(r) if r.is_error)
        );
        for code in -32005..=-32000 {
            assert_eq!(c(Reply::Error(RpcError::new(code, "x"))).kind(), "denied");
        }
        for code in [-32006, -31999, -32601, -32603, -32700, 1] {
            assert_eq!(c(Reply::Error(RpcError::new(code, "x"))).kind(), "fault");
        }
        assert_eq!(
            c(Reply::Refused(Refusal::Status { status: 401 })).kind(),
            "denied"
        );
        assert_eq!(
            c(Reply::Refused(Refusal::NoDocument {
                status: 200,
                why: NoDocument::Html
            }))
            .kind(),
            "denied"
        );
    }

    #[test]
    fn results_are_cut_at_the_cap_and_marked() {
        let big = json!({"content":[{"type":"text","text":"é".repeat(1000)}]});
        let r = ToolResult::capped(big, 101);
        assert!(r.truncated);
        let Value::String(s) = &r.value else {
            panic!("cut result is a string")
        };
        assert!(s.contains("[hanzo-dev: result cut at"), "{s}");
        assert!(s.len() < 200);
    }
}
