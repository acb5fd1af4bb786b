//! The direct channel between the mcp worker and the broker (fd 4 in the mcp worker,
//! [`BROKER_MCP_FD`] in the broker): the mcp worker sends one credential-free HTTP exchange with
//! a configured remote MCP server; the broker checks the URL against the servers the supervisor
//! configured (`broker::Request::AllowMcpServers`), adds that server's OAuth token when it holds
//! one, and streams back the status, the headers without any credential-bearing one, and the body
//! with every secret it holds replaced.
//!
//! Answers reuse the model channel's [`http::Response`] and [`http::Item`]: the two channels are
//! different types (a request here names an MCP *server*, never a provider credential), so the
//! model worker cannot ask for an MCP token and the mcp worker cannot ask for a provider key.

use super::http;
use crate::Role;
use serde::{Deserialize, Serialize};

/// The broker's fd number of its end of the mcp ↔ broker channel (its fd 4 is the model's), from
/// the role table.
pub const BROKER_MCP_FD: i32 = crate::role::fd(crate::role::Channel::McpBroker, Role::Broker);

/// What the mcp worker may ask.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// One exchange with a configured remote MCP server.
    Send(McpHttpRequest),
}

/// A credential-free request to the remote MCP server `server` (its settings name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpHttpRequest {
    /// The server's name in `mcp_servers`; selects the allow-list entry and the token.
    pub server: String,
    /// The HTTP method (`"POST"` for messages, `"GET"` for the event stream, `"DELETE"` to end a
    /// session).
    pub method: String,
    /// Must have the origin (scheme, host, port) of the server's configured URL.
    pub url: String,
    /// Credential and hop-by-hop headers are dropped by the broker.
    pub headers: Vec<(String, String)>,
    /// The request body (a JSON-RPC message for `POST`).
    pub body: Vec<u8>,
}

/// The channel type of the mcp ↔ broker direct channel.
#[derive(Debug)]
pub struct McpHttpProtocol;

impl crate::proto::Protocol for McpHttpProtocol {
    const ROLE: Role = Role::Broker;
    type Request = Request;
    type Response = http::Response;
    type Item = http::Item;
    type Event = http::Event;
}

/// A remote MCP server the broker may reach for the mcp worker (from trusted settings only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpRemote {
    /// Its name in `mcp_servers`; its token is stored as `mcp:<server>`.
    pub server: String,
    /// Its streamable-HTTP endpoint: `https://…`, or `http://` to a loopback address named
    /// literally (`127.0.0.1`, `[::1]`, `localhost`).
    pub url: String,
    /// A pre-registered OAuth client; `None` registers one dynamically when a login is needed.
    pub client_id: Option<String>,
    /// Scopes to ask for when neither the server's challenge nor its metadata names any.
    pub scopes: Vec<String>,
    /// The client's metadata document (`https`), used as its `client_id` where the
    /// authorization server accepts one and no client id is configured.
    #[serde(default)]
    pub client_metadata_url: Option<String>,
    /// The name of a secret environment variable of the broker holding a pre-registered client
    /// (`{"client_id": …, "client_secret": …}`); its value never crosses this channel.
    #[serde(default)]
    pub client_env: Option<String>,
    /// How a 401 with no usable token is answered.
    pub login: McpLogin,
    /// Headers to send with every request to this server, as an editor gave them over ACP
    /// (`mcpServers[].headers`); empty for the servers of the settings. Their values may be
    /// credentials: the broker alone keeps them, and replaces them in what comes back.
    #[serde(default)]
    pub headers: Vec<McpHeader>,
}

/// One header an editor asked to be sent to its remote MCP server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpHeader {
    /// The header's name, as the editor wrote it (checked by the broker before use).
    pub name: String,
    /// Its value: possibly a credential, so never printed.
    pub value: SecretText,
}

/// A secret that has to cross a channel (only ever towards the broker): serialized as the plain
/// string, but zeroized when dropped and printed as `[redacted]` by `Debug`, so a stray `{:?}`
/// of a request cannot leak it.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretText(zeroize::Zeroizing<String>);

impl Serialize for SecretText {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for SecretText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<SecretText, D::Error> {
        String::deserialize(d).map(SecretText::new)
    }
}

impl SecretText {
    /// Wraps `value` (moved, not copied).
    pub fn new(value: String) -> SecretText {
        SecretText(zeroize::Zeroizing::new(value))
    }

    /// The value itself, for the one place that uses it (the request header the broker sets).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SecretText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

/// What the broker does when a remote MCP server asks for authorization and no stored token
/// (or refresh) helps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum McpLogin {
    /// Pass the 401/403 on (a denial); the user logs in separately.
    Never,
    /// Run the authorization-code flow and follow the authorization URL itself, expecting the
    /// authorization server to redirect to the loopback listener without a person (the
    /// conformance suite's servers do). Only `hanzo-dev mcp conformance-client` asks for this.
    Headless,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{decode_payload, encode_payload};

    #[test]
    fn mcp_http_messages_round_trip() {
        let req = Request::Send(McpHttpRequest {
            server: "web".into(),
            method: "POST".into(),
            url: "http://127.0.0.1:9/mcp".into(),
            headers: vec![("accept".into(), "application/json".into())],
            body: b"{}".to_vec(),
        });
        let back: Request = decode_payload("REQUEST", &encode_payload(&req)).unwrap();
        assert_eq!(back, req);
        let remote = McpRemote {
            server: "web".into(),
            url: "https://mcp.example/mcp".into(),
            client_id: None,
            scopes: vec!["read".into()],
            client_metadata_url: Some("https://client.example/meta.json".into()),
            client_env: Some("MCP_CONFORMANCE_CONTEXT".into()),
            login: McpLogin::Headless,
            headers: vec![McpHeader {
                name: "Authorization".into(),
                value: SecretText::new("Bearer editor-secret".into()),
            }],
        };
        let back: McpRemote = decode_payload("REMOTE", &encode_payload(&remote)).unwrap();
        assert_eq!(back, remote);
        assert_eq!(back.headers[0].value.expose(), "Bearer editor-secret");
        // Printed, the value is not there.
        let shown = format!("{remote:?}");
        assert!(
            !shown.contains("editor-secret") && shown.contains("[redacted]"),
            "{shown}"
        );
    }
}
