//! The direct channel between the mcp worker and the broker (fd 4 in the mcp worker,
//! [`BROKER_MCP_FD`] in the broker), for two things:
//! - one credential-free HTTP exchange with a configured remote MCP server ([`Request::Send`]):
//!   the broker checks the URL against the servers the supervisor configured
//!   (`broker::Request::AllowMcpServers`), adds that server's OAuth token when it holds one, and
//!   streams back the status, the headers without any credential-bearing one, and the body with
//!   every secret it holds replaced;
//! - the secrets a stdio server's environment names ([`Request::ResolveSecrets`]), asked for as
//!   the server is spawned: the broker answers only for a (server, name) pair the supervisor
//!   granted (`broker::Request::AllowMcpSecrets`, from the user's settings), from its own
//!   environment, as zeroizing [`SecretText`]s. The only channel on which a secret's value goes
//!   *from* the broker to another process.
//!
//! HTTP answers reuse the model channel's [`http::Item`], wrapped in this channel's [`Response`]:
//! the two channels are different types (a request here names an MCP *server*, never a provider
//! credential), so the model worker cannot ask for an MCP token or a server's secret, and the mcp
//! worker cannot ask for a provider key.

use super::http;
use super::mcp::EnvValue;
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
    /// The values of secrets a stdio server's environment names, for spawning it. Answered with
    /// [`Response::Secrets`], or a `Refused` error naming the first (server, secret) pair the
    /// supervisor did not grant (then no value is sent).
    ResolveSecrets(McpSecretRequest),
}

/// The broker's answers on this channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// The end of a [`Request::Send`] exchange (its parts streamed as [`http::Item`]s).
    Http(http::Response),
    /// The answer to [`Request::ResolveSecrets`]: one entry per name asked, in the same order.
    Secrets(Vec<ResolvedSecret>),
}

/// The secrets stdio server `server` is to be started with, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpSecretRequest {
    /// The server's name in `mcp_servers`.
    pub server: String,
    /// The secrets' names (environment variables of the broker).
    pub names: Vec<String>,
}

/// One secret of a [`Response::Secrets`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedSecret {
    /// The secret's name, as asked.
    pub name: String,
    /// Its value; `None` when the broker holds no (non-empty) variable of that name.
    pub value: Option<SecretText>,
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
    type Response = Response;
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
    /// Headers from the server's settings entry (`mcp_servers.*.headers`): a plain value is sent
    /// as written; a [`EnvValue::Secret`] names the broker's environment variable whose value
    /// the broker sends (the value never crosses a channel). Checked by the broker.
    #[serde(default)]
    pub settings_headers: Vec<(String, EnvValue)>,
}

/// One header an editor asked to be sent to its remote MCP server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpHeader {
    /// The header's name, as the editor wrote it (checked by the broker before use).
    pub name: String,
    /// Its value: possibly a credential, so never printed.
    pub value: SecretText,
}

/// A secret that has to cross a channel (towards the broker, or from it to the mcp worker for a
/// stdio server's environment): the one [`crate::secret::Secret`], made `Serialize` as the plain
/// string for exactly the message fields declared with this type. Zeroized when dropped and
/// printed as `[redacted]` by `Debug`, so a stray `{:?}` of a message cannot leak it.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretText(crate::secret::Secret);

impl Serialize for SecretText {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.expose())
    }
}

impl<'de> Deserialize<'de> for SecretText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<SecretText, D::Error> {
        crate::secret::Secret::deserialize(d).map(SecretText)
    }
}

impl SecretText {
    /// Wraps `value` (moved, not copied).
    pub fn new(value: String) -> SecretText {
        SecretText(crate::secret::Secret::new(value))
    }

    /// The value itself, for the one place that uses it (the request header the broker sets,
    /// the environment of the server it was resolved for).
    pub fn expose(&self) -> &str {
        self.0.expose()
    }
}

impl From<crate::secret::Secret> for SecretText {
    fn from(secret: crate::secret::Secret) -> SecretText {
        SecretText(secret)
    }
}

impl std::fmt::Debug for SecretText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
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
            settings_headers: vec![
                ("X-Api-Key".into(), EnvValue::Secret("WEB_TOKEN".into())),
                ("X-Team".into(), EnvValue::Plain("core".into())),
            ],
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
        let ask = Request::ResolveSecrets(McpSecretRequest {
            server: "gh".into(),
            names: vec!["GITHUB_TOKEN".into(), "UNSET".into()],
        });
        let back: Request = decode_payload("REQUEST", &encode_payload(&ask)).unwrap();
        assert_eq!(back, ask);
        let answer = Response::Secrets(vec![
            ResolvedSecret {
                name: "GITHUB_TOKEN".into(),
                value: Some(SecretText::new("ghp_server-secret".into())),
            },
            ResolvedSecret {
                name: "UNSET".into(),
                value: None,
            },
        ]);
        let back: Response = decode_payload("RESPONSE", &encode_payload(&answer)).unwrap();
        assert_eq!(back, answer);
        let shown = format!("{answer:?}");
        assert!(!shown.contains("server-secret"), "{shown}");
    }
}
