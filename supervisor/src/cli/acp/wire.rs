//! ACP's transport: JSON-RPC 2.0 messages, one per line, on stdin and stdout. Lines are capped
//! ([`MAX_LINE`]) before they are buffered whole, every message is classified without trusting
//! its shape, and what goes out is plain JSON with every control character escaped — stdout is a
//! protocol stream, so nothing a tool printed may reach it raw.

use serde_json::{json, Value};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};
use tokio::sync::mpsc;

/// The longest line (message) accepted: longer ones are refused while being read, never held.
pub const MAX_LINE: usize = 16 << 20;

/// JSON-RPC: the line is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC: JSON, but not a request, notification or response.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC: no such method.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC: the method's parameters are missing or of the wrong shape.
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC: the request was valid but failed on our side (the message says why).
pub const INTERNAL_ERROR: i64 = -32603;
/// ACP: authentication required (no credential for the method or provider; `hanzo-dev login`).
pub const AUTH_REQUIRED: i64 = -32000;
/// ACP: the session named does not exist.
pub const NOT_FOUND: i64 = -32002;

/// What the reader saw on stdin.
#[derive(Debug, PartialEq, Eq)]
pub enum Incoming {
    /// One line, without its line feed.
    Line(Vec<u8>),
    /// A line longer than the cap; its bytes were dropped up to the next line feed.
    TooLong,
    /// stdin ended (or failed); the client is gone.
    Eof,
}

/// Read `r` line by line into `tx`, holding at most `cap` bytes of a line: past that the line is
/// reported once as [`Incoming::TooLong`] and the rest of it skipped.
pub async fn read_lines<R: AsyncBufRead + Unpin>(mut r: R, cap: usize, tx: mpsc::Sender<Incoming>) {
    let mut line = Vec::new();
    let mut skipping = false;
    loop {
        let chunk = match r.fill_buf().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("acp: stdin failed: {e}");
                break;
            }
        };
        if chunk.is_empty() {
            if !line.is_empty() && !skipping && tx.send(Incoming::Line(line)).await.is_err() {
                return;
            }
            break;
        }
        let (part, end) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (&chunk[..i], Some(i + 1)),
            None => (chunk, None),
        };
        let taken = end.unwrap_or(part.len());
        if !skipping {
            if line.len() + part.len() > cap {
                skipping = true;
                line = Vec::new();
                if tx.send(Incoming::TooLong).await.is_err() {
                    return;
                }
            } else {
                line.extend_from_slice(part);
            }
        }
        r.consume(taken);
        if end.is_some() {
            if !skipping {
                let l = std::mem::take(&mut line);
                // Blank lines between messages are tolerated.
                if !l.iter().all(u8::is_ascii_whitespace)
                    && tx.send(Incoming::Line(l)).await.is_err()
                {
                    return;
                }
            }
            skipping = false;
        }
    }
    let _ = tx.send(Incoming::Eof).await;
}

/// One message from the client, classified.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A request of the client's, to be answered.
    Request {
        /// Its id, echoed in the answer.
        id: Value,
        /// The method (`initialize`, `session/new`, `session/prompt`, …).
        method: String,
        /// Its parameters (`null` when absent).
        params: Value,
    },
    /// A notification of the client's (`session/cancel`): no answer.
    Notification {
        /// The method.
        method: String,
        /// Its parameters (`null` when absent).
        params: Value,
    },
    /// An answer to a request of ours: `Ok(result)` or `Err(error object)`.
    Response {
        /// The id of our request it answers.
        id: Value,
        /// The result, or the error object.
        outcome: Result<Value, Value>,
    },
    /// Not a message we can act on; answered with this error (`id` null when unknown).
    Invalid {
        /// The message's id, when it had one.
        id: Value,
        /// The JSON-RPC error code to answer with.
        code: i64,
        /// What is wrong with the message.
        message: String,
    },
}

/// [`parse`], then zero the line's bytes: a line may carry the values of an editor's MCP
/// headers (credentials), which are moved where they belong and must not stay behind in freed
/// memory.
pub fn parse_owned(mut line: Vec<u8>) -> Message {
    let m = parse(&line);
    zeroize::Zeroize::zeroize(&mut line);
    m
}

/// Classify one line.
pub fn parse(line: &[u8]) -> Message {
    let invalid = |id: Value, code, message: &str| Message::Invalid {
        id,
        code,
        message: message.to_string(),
    };
    let v: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => {
            return invalid(
                Value::Null,
                PARSE_ERROR,
                &format!("parse error: not JSON ({e})"),
            )
        }
    };
    let Value::Object(mut o) = v else {
        return invalid(
            Value::Null,
            INVALID_REQUEST,
            "invalid request: a message is a JSON object (batches are not supported)",
        );
    };
    let id = o.remove("id");
    let id_ok = matches!(
        id,
        None | Some(Value::Number(_) | Value::String(_) | Value::Null)
    );
    let reply_id = if id_ok {
        id.clone().unwrap_or(Value::Null)
    } else {
        Value::Null
    };
    if o.get("jsonrpc") != Some(&json!("2.0")) {
        return invalid(
            reply_id,
            INVALID_REQUEST,
            "invalid request: jsonrpc must be \"2.0\"",
        );
    }
    if !id_ok {
        return invalid(
            Value::Null,
            INVALID_REQUEST,
            "invalid request: an id is a string or a number",
        );
    }
    let params = o.remove("params").unwrap_or(Value::Null);
    match (o.remove("method"), id) {
        (Some(Value::String(method)), Some(id)) => Message::Request { id, method, params },
        (Some(Value::String(method)), None) => Message::Notification { method, params },
        (Some(_), _) => invalid(
            reply_id,
            INVALID_REQUEST,
            "invalid request: method is a string",
        ),
        (None, Some(id)) => match (o.remove("result"), o.remove("error")) {
            (Some(r), None) => Message::Response { id, outcome: Ok(r) },
            (None, Some(e)) => Message::Response {
                id,
                outcome: Err(e),
            },
            _ => invalid(
                reply_id,
                INVALID_REQUEST,
                "invalid request: a response has exactly one of result and error",
            ),
        },
        (None, None) => invalid(Value::Null, INVALID_REQUEST, "invalid request: no method"),
    }
}

/// `v` as one line of JSON. serde_json escapes C0 controls; DEL, the C1 controls (an 8-bit CSI
/// is U+009B) and the line and paragraph separators are escaped too, so no byte sequence a
/// terminal or a line-oriented reader acts on survives inside a string.
pub fn encode(v: &Value) -> String {
    let s = v.to_string();
    if !s.chars().any(needs_escape) {
        return s;
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if needs_escape(c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

fn needs_escape(c: char) -> bool {
    matches!(c, '\u{7f}'..='\u{9f}' | '\u{2028}' | '\u{2029}')
}

/// A successful response to request `id`.
pub fn response(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// An error response to request `id` (null when the request's id is unknown).
pub fn error(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// A notification of ours (`session/update`).
pub fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

/// A request of ours (`session/request_permission`), with our own numeric id.
pub fn request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_classified_without_trusting_their_shape() {
        let code = |l: &str| match parse(l.as_bytes()) {
            Message::Invalid { code, .. } => code,
            other => panic!("{l}: {other:?}"),
        };
        assert_eq!(code("{not json"), PARSE_ERROR);
        assert_eq!(code("[1,2]"), INVALID_REQUEST);
        assert_eq!(code("42"), INVALID_REQUEST);
        assert_eq!(code(r#"{"id":1,"method":"x"}"#), INVALID_REQUEST);
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":{"a":1},"method":"x"}"#),
            INVALID_REQUEST
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":7}"#),
            INVALID_REQUEST
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"result":1,"error":{}}"#),
            INVALID_REQUEST
        );
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","id":"a","method":"m","params":{"k":1}}"#),
            Message::Request {
                id: json!("a"),
                method: "m".into(),
                params: json!({"k": 1})
            }
        );
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","method":"session/cancel"}"#),
            Message::Notification {
                method: "session/cancel".into(),
                params: Value::Null
            }
        );
        assert!(matches!(
            parse(br#"{"jsonrpc":"2.0","id":3,"error":{"code":1}}"#),
            Message::Response {
                outcome: Err(_),
                ..
            }
        ));
    }

    #[test]
    fn encoded_lines_carry_no_raw_control_characters() {
        let v = json!({"t": "a\x1b[2J\x07b\u{9b}31m\u{7f}\u{2028}\nc"});
        let line = encode(&v);
        assert!(
            line.chars().all(|c| !c.is_control() && c != '\u{2028}'),
            "{line:?}"
        );
        let back: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back, v, "escaping changes nothing a JSON reader sees");
    }

    #[tokio::test]
    async fn an_over_long_line_is_refused_once_and_the_next_one_read() {
        let mut input = vec![b'x'; 100];
        input.extend_from_slice(b"\nshort\n\n");
        input.extend(std::iter::repeat_n(b'y', 50));
        let (tx, mut rx) = mpsc::channel(8);
        // A small buffer, so the long line arrives in many chunks.
        let reader = tokio::io::BufReader::with_capacity(7, &input[..]);
        read_lines(reader, 40, tx).await;
        assert_eq!(rx.recv().await, Some(Incoming::TooLong));
        assert_eq!(rx.recv().await, Some(Incoming::Line(b"short".to_vec())));
        assert_eq!(rx.recv().await, Some(Incoming::TooLong));
        assert_eq!(rx.recv().await, Some(Incoming::Eof));
    }
}
