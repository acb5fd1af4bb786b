//! JSON-RPC 2.0 messages as MCP uses them: requests and notifications we send, and the parsing of
//! everything a server sends into [`Incoming`] messages.

use serde_json::{json, Map, Value};
use std::fmt;

/// The JSON sent is not valid JSON.
pub const PARSE_ERROR: i64 = -32700;
/// The JSON is not a valid request object.
pub const INVALID_REQUEST: i64 = -32600;
/// The method does not exist.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// The params are invalid.
pub const INVALID_PARAMS: i64 = -32602;
/// An internal error of the answering side.
pub const INTERNAL_ERROR: i64 = -32603;

/// A request id. We send integers; servers echo them, and may use strings for their own.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Id {
    /// An integer id (the ones we send).
    Num(i64),
    /// A string id (servers may use them for their own requests).
    Str(String),
}

impl Id {
    /// An id from a JSON value; `None` for null, fractions, objects, …
    pub fn from_value(v: &Value) -> Option<Id> {
        match v {
            Value::Number(n) => n.as_i64().map(Id::Num),
            Value::String(s) => Some(Id::Str(s.clone())),
            _ => None,
        }
    }

    /// The id as JSON.
    pub fn to_value(&self) -> Value {
        match self {
            Id::Num(n) => Value::from(*n),
            Id::Str(s) => Value::from(s.clone()),
        }
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Id::Num(n) => write!(f, "{n}"),
            Id::Str(s) => write!(f, "{s:?}"),
        }
    }
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    /// The error code (see the constants in this module).
    pub code: i64,
    /// The message, unfiltered.
    pub message: String,
    /// The error's `data`, if any.
    pub data: Option<Value>,
}

impl RpcError {
    /// An error with `code` and `message`, no data.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    fn from_value(v: &Value) -> Option<RpcError> {
        let obj = v.as_object()?;
        let code = obj.get("code")?.as_i64()?;
        let message = obj
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default();
        Some(RpcError {
            code,
            message: excerpt(message, 500),
            data: obj.get("data").cloned(),
        })
    }

    /// The error as a JSON-RPC `error` object.
    pub fn to_value(&self) -> Value {
        let mut obj = Map::new();
        obj.insert("code".into(), self.code.into());
        obj.insert("message".into(), self.message.clone().into());
        if let Some(d) = &self.data {
            obj.insert("data".into(), d.clone());
        }
        Value::Object(obj)
    }
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JSON-RPC error {}: {}", self.code, self.message)
    }
}

/// One message from a server.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A request the client must answer (`id` echoed as sent, whatever its type).
    Request {
        /// The request's id, to echo in the answer.
        id: Value,
        /// The method.
        method: String,
        /// The params, if any.
        params: Option<Value>,
    },
    /// A message that expects no answer.
    Notification {
        /// The method.
        method: String,
        /// The params, if any.
        params: Option<Value>,
    },
    /// An answer; `id` is `None` when the server answered with `id: null` (it could not read our
    /// request).
    Response {
        /// The id of the request answered.
        id: Option<Id>,
        /// The result, or the error.
        outcome: Result<Value, RpcError>,
    },
}

/// Parse one JSON document (an object or a batch array) into messages. `Err` says why it is not
/// JSON-RPC 2.0; it never echoes more than a short excerpt of the input.
pub fn parse_document(doc: Value) -> Result<Vec<Incoming>, String> {
    match doc {
        Value::Array(items) => {
            if items.is_empty() {
                return Err("an empty batch".into());
            }
            items.into_iter().map(parse_message).collect()
        }
        other => Ok(vec![parse_message(other)?]),
    }
}

fn parse_message(v: Value) -> Result<Incoming, String> {
    let Value::Object(mut obj) = v else {
        return Err("a JSON value that is not an object".into());
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err("an object without \"jsonrpc\": \"2.0\"".into());
    }
    if let Some(method) = obj.get("method") {
        let method = method
            .as_str()
            .ok_or("a message whose \"method\" is not a string")?
            .to_string();
        let params = obj.remove("params");
        return Ok(match obj.remove("id") {
            Some(id) if !id.is_null() => Incoming::Request { id, method, params },
            _ => Incoming::Notification { method, params },
        });
    }
    let id = obj.get("id").and_then(Id::from_value);
    if let Some(result) = obj.remove("result") {
        return Ok(Incoming::Response {
            id,
            outcome: Ok(result),
        });
    }
    if let Some(err) = obj.get("error") {
        let err = RpcError::from_value(err).ok_or("an error response without a numeric code")?;
        return Ok(Incoming::Response {
            id,
            outcome: Err(err),
        });
    }
    Err("an object that is neither a request, a notification nor a response".into())
}

/// Serialize a request.
pub fn request(id: &Id, method: &str, params: Option<Value>) -> Vec<u8> {
    let mut obj = Map::new();
    obj.insert("jsonrpc".into(), "2.0".into());
    obj.insert("id".into(), id.to_value());
    obj.insert("method".into(), method.into());
    if let Some(p) = params {
        obj.insert("params".into(), p);
    }
    to_bytes(&Value::Object(obj))
}

/// Serialize a notification.
pub fn notification(method: &str, params: Option<Value>) -> Vec<u8> {
    let mut obj = Map::new();
    obj.insert("jsonrpc".into(), "2.0".into());
    obj.insert("method".into(), method.into());
    if let Some(p) = params {
        obj.insert("params".into(), p);
    }
    to_bytes(&Value::Object(obj))
}

/// Serialize the answer to a server's request.
pub fn response(id: &Value, outcome: &Result<Value, RpcError>) -> Vec<u8> {
    let v = match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(e) => json!({"jsonrpc": "2.0", "id": id, "error": e.to_value()}),
    };
    to_bytes(&v)
}

fn to_bytes(v: &Value) -> Vec<u8> {
    // Serializing a `Value` cannot fail: its map keys are strings and it holds no non-finite float.
    serde_json::to_vec(v).unwrap_or_default()
}

/// At most `max` bytes of `s` (cut at a character boundary), with control characters replaced,
/// so server text can go into a log or an error without flooding or steering a terminal.
pub fn excerpt(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let mut out: String = s[..end]
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if end < s.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_kind() {
        let r = parse_document(json!({"jsonrpc":"2.0","id":3,"result":{"x":1}})).unwrap();
        assert_eq!(
            r,
            vec![Incoming::Response {
                id: Some(Id::Num(3)),
                outcome: Ok(json!({"x":1}))
            }]
        );
        let r = parse_document(json!({"jsonrpc":"2.0","id":"a","method":"ping"})).unwrap();
        assert!(matches!(&r[0], Incoming::Request { method, .. } if method == "ping"));
        let r = parse_document(json!({"jsonrpc":"2.0","method":"notifications/x"})).unwrap();
        assert!(matches!(&r[0], Incoming::Notification { .. }));
        let r = parse_document(
            json!({"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"no"}}),
        )
        .unwrap();
        assert_eq!(
            r,
            vec![Incoming::Response {
                id: None,
                outcome: Err(RpcError::new(-32000, "no"))
            }]
        );
        let batch = parse_document(json!([
            {"jsonrpc":"2.0","id":1,"result":{}},
            {"jsonrpc":"2.0","method":"n"}
        ]))
        .unwrap();
        assert_eq!(batch.len(), 2);
    }

    #[test]
    fn refuses_what_is_not_json_rpc() {
        assert!(parse_document(json!({"id":1,"result":{}})).is_err());
        assert!(parse_document(json!({"jsonrpc":"1.0","id":1,"result":{}})).is_err());
        assert!(parse_document(json!("hello")).is_err());
        assert!(parse_document(json!([])).is_err());
        assert!(parse_document(json!({"jsonrpc":"2.0","id":1})).is_err());
        assert!(parse_document(json!({"jsonrpc":"2.0","id":1,"error":{"message":"x"}})).is_err());
    }

    #[test]
    fn excerpt_is_bounded_and_clean() {
        assert_eq!(excerpt("ab\x1b[2Jc", 100), "ab [2Jc");
        assert_eq!(excerpt("héllo", 2), "h…");
    }
}
