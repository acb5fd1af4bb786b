//! Answers to the requests a server sends the client: `ping`, `roots/list` (the workspace roots of
//! the configuration), and `sampling/createMessage` / `elicitation/create`, which are refused with
//! "method not found" unless a handler is configured — and then the capability is declared in
//! `initialize`. Nothing is ever accepted silently.

use crate::jsonrpc::{RpcError, METHOD_NOT_FOUND};
use crate::BoxFuture;
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Answers `sampling/createMessage` (a server asking our model for a completion).
pub trait SamplingHandler: Send + Sync {
    /// The `CreateMessageResult`, or an error (a user's refusal is code −1, as in the spec).
    fn create_message(&self, params: Value) -> BoxFuture<'_, Result<Value, RpcError>>;
}

/// Answers `elicitation/create` (a server asking the user for input).
pub trait ElicitationHandler: Send + Sync {
    /// The `ElicitResult`: `{"action": "accept", "content": {…}}`, `"decline"` or `"cancel"`.
    fn elicit(&self, params: Value) -> BoxFuture<'_, Result<Value, RpcError>>;
}

/// An elicitation handler that accepts every form request with the defaults of its schema
/// (SEP-1034) and declines everything else (URL mode, fields without a default that are
/// required). For unattended runs whose configuration says so explicitly, and for the
/// conformance suite; never a default.
#[derive(Debug, Clone, Copy, Default)]
pub struct AcceptSchemaDefaults;

impl ElicitationHandler for AcceptSchemaDefaults {
    fn elicit(&self, params: Value) -> BoxFuture<'_, Result<Value, RpcError>> {
        Box::pin(async move { Ok(defaults_answer(&params)) })
    }
}

fn defaults_answer(params: &Value) -> Value {
    let decline = json!({"action": "decline"});
    if params.get("mode").and_then(Value::as_str).unwrap_or("form") != "form" {
        return decline;
    }
    let Some(props) = params
        .pointer("/requestedSchema/properties")
        .and_then(Value::as_object)
    else {
        return decline;
    };
    let required: Vec<&str> = params
        .pointer("/requestedSchema/required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut content = Map::new();
    for (name, schema) in props {
        match schema.get("default") {
            Some(d) => {
                content.insert(name.clone(), d.clone());
            }
            None if required.contains(&name.as_str()) => return decline,
            None => {}
        }
    }
    json!({"action": "accept", "content": content})
}

/// What the client answers with, per server.
#[derive(Clone, Default)]
pub struct ServerRequests {
    /// The absolute roots answered to `roots/list` (the workspace).
    pub roots: Vec<PathBuf>,
    /// Answers `sampling/createMessage`; `None`: refused and not declared.
    pub sampling: Option<Arc<dyn SamplingHandler>>,
    /// Answers `elicitation/create`; `None`: refused and not declared.
    pub elicitation: Option<Arc<dyn ElicitationHandler>>,
}

impl ServerRequests {
    /// The `capabilities` object of `initialize`: only what is really answered.
    pub fn capabilities(&self) -> Value {
        let mut caps = Map::new();
        caps.insert("roots".into(), json!({}));
        if self.sampling.is_some() {
            caps.insert("sampling".into(), json!({}));
        }
        if self.elicitation.is_some() {
            caps.insert("elicitation".into(), json!({"form": {}}));
        }
        Value::Object(caps)
    }

    /// The answer to the server's request `method`: `ping`, `roots/list`, and what a handler is
    /// set for; anything else is `METHOD_NOT_FOUND`.
    pub async fn answer(&self, method: &str, params: Option<Value>) -> Result<Value, RpcError> {
        let params = params.unwrap_or(Value::Null);
        match method {
            "ping" => Ok(json!({})),
            "roots/list" => {
                Ok(json!({"roots": self.roots.iter().map(|p| root(p)).collect::<Vec<_>>()}))
            }
            "sampling/createMessage" => match &self.sampling {
                Some(h) => h.create_message(params).await,
                None => Err(RpcError::new(
                    METHOD_NOT_FOUND,
                    "sampling is not enabled for this MCP server in hanzo-dev",
                )),
            },
            "elicitation/create" => match &self.elicitation {
                Some(h) => h.elicit(params).await,
                None => Err(RpcError::new(
                    METHOD_NOT_FOUND,
                    "elicitation is not enabled for this MCP server in hanzo-dev",
                )),
            },
            _ => Err(RpcError::new(METHOD_NOT_FOUND, "method not found")),
        }
    }
}

fn root(path: &Path) -> Value {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "/".into());
    json!({"uri": file_uri(path), "name": name})
}

/// `file://` URI of an absolute path, percent-encoding every byte outside the unreserved set
/// and `/`.
pub fn file_uri(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::from("file://");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn unconfigured_sampling_and_elicitation_are_refused() {
        let r = ServerRequests::default();
        let caps = r.capabilities();
        assert!(caps.get("sampling").is_none() && caps.get("elicitation").is_none());
        for m in ["sampling/createMessage", "elicitation/create", "tools/call"] {
            let err = r.answer(m, Some(json!({}))).await.unwrap_err();
            assert_eq!(err.code, METHOD_NOT_FOUND, "{m}");
        }
        assert_eq!(r.answer("ping", None).await.unwrap(), json!({}));
    }

    #[tokio::test]
    async fn roots_are_the_configured_workspace() {
        let r = ServerRequests {
            roots: vec![PathBuf::from("/work/my project")],
            ..Default::default()
        };
        assert_eq!(
            r.answer("roots/list", None).await.unwrap(),
            json!({"roots": [{"uri": "file:///work/my%20project", "name": "my project"}]})
        );
    }

    #[test]
    fn schema_defaults_fill_optional_fields_and_decline_otherwise() {
        let p = json!({"message": "m", "requestedSchema": {"type": "object", "properties": {
            "name": {"type": "string", "default": "John"}, "n": {"type": "integer"}}}});
        assert_eq!(
            defaults_answer(&p),
            json!({"action": "accept", "content": {"name": "John"}})
        );
        let p = json!({"requestedSchema": {"properties": {"n": {"type": "integer"}}, "required": ["n"]}});
        assert_eq!(defaults_answer(&p), json!({"action": "decline"}));
        assert_eq!(
            defaults_answer(&json!({"mode": "url", "url": "https://x"})),
            json!({"action": "decline"})
        );
    }
}
