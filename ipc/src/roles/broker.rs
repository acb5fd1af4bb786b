//! The broker channel (supervisor ↔ broker). Credential-free HTTP requests from the model worker
//! travel on the separate direct channel ([`super::http`]), not here. Nothing the broker sends on
//! this channel carries a secret value: the supervisor learns which credentials exist, never what
//! they are, and names the secrets an MCP stdio server may have without ever holding their
//! values ([`Request::AllowMcpSecrets`]). One secret goes the other way: the headers an editor gives its remote MCP servers over
//! ACP, handed to the broker in [`Request::AllowMcpServers`] as
//! [`super::mcphttp::SecretText`] (zeroized, redacted in `Debug`) and kept by the broker alone.

use super::model::ProviderId;
use super::{impl_protocol, CommonEvent, CommonItem, CommonRequest, CommonResponse};
use crate::Role;
use serde::{Deserialize, Serialize};

/// What the supervisor may ask the broker. Nothing here carries a secret value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// A request every worker answers (probes, status).
    Common(CommonRequest),
    /// Add endpoints to the allow-list (from trusted configuration: settings or CLI flags, never
    /// from a model). Replies [`Response::Configured`] or a `Refused` error naming the bad URL.
    AllowEndpoints(Vec<Endpoint>),
    /// Which providers have a credential, from where, and which one auto-detection picks.
    DescribeCredentials,
    /// Run an OAuth login in the broker (authorization code with PKCE, or the device grant),
    /// streaming [`Item::Login`] progress; replies [`Response::LoggedIn`]. The tokens stay in the
    /// broker and its credential file.
    Login(LoginRequest),
    /// Log in to a remote MCP server (`hanzo-dev mcp login`): the broker probes the server, runs
    /// the MCP authorization flow (RFC 9728, RFC 8414, RFC 7591, RFC 8707, PKCE) with a person
    /// at the browser (or the device grant), streaming [`Item::Login`] progress, and stores the
    /// tokens as `mcp:<server>`, bound to the server's URL. Replies [`Response::LoggedIn`].
    McpLogin(McpLoginRequest),
    /// Forget a provider's stored credential (`credentials.json`; `mcp:<server>` for a remote
    /// MCP server's); replies [`Response::LoggedOut`].
    Logout {
        /// The provider name (`hanzo`, `anthropic`, `openai`, a custom entry) or `mcp:<server>`.
        provider: String,
    },
    /// Every credential the broker holds, described without any secret; replies
    /// [`Response::AuthStatus`].
    AuthStatus,
    /// Replace the remote MCP servers the mcp worker may reach through the broker (from trusted
    /// settings: the configured `url` servers; and the `http` servers an editor passes over ACP,
    /// with the headers to send them). Replies [`Response::Configured`] or a `Refused` error
    /// naming the bad URL or header (never a header's value).
    AllowMcpServers(Vec<super::mcphttp::McpRemote>),
    /// Serve the egress proxy for sandboxed commands on the control socket the broker inherited
    /// (fd [`crate::transport::EGRESS_FD`]) under these settings (trusted configuration only).
    /// Replies [`Response::EgressConfigured`]; `Refused` when the broker holds no control socket
    /// (or already serves it) or an entry does not parse.
    ConfigureEgress(EgressSettings),
    /// Wait (briefly, bounded by the broker) until no egress connection is open and every
    /// record has been sent as [`Event::Egress`]; replies [`Response::EgressQuiet`].
    EgressQuiesce,
    /// Send one batch of finished spans to the OTLP/HTTP collector the user configured (the
    /// supervisor encodes them; the broker adds the `OTEL_EXPORTER_OTLP_*HEADERS` it alone holds).
    /// Replies [`Response::TracesExported`]; `Refused` for an endpoint that is not `http(s)://`,
    /// `Internal` when the collector cannot be reached or answers with an error.
    ExportTraces(TraceExport),
    /// Fetch the JSON Web Key Set of a JWT issuer the user configured (`serve`/`bridge`
    /// `--jwt-issuer`, `--jwks-url`): OpenID discovery (`/.well-known/openid-configuration` →
    /// `jwks_uri`) unless `jwks_uri` is given. `https://` only (or `http://` to a loopback
    /// address), no redirects, a size cap and a timeout. Replies [`Response::Jwks`]; `Refused`
    /// for a URL or document that breaks those rules, `Internal` when the issuer cannot be reached.
    FetchJwks(JwksFetch),
    /// Replace which secrets each stdio MCP server may be given (names only, never values; from
    /// the user's settings: `mcp_servers.NAME.env` values `${secret:SECRET}`). The mcp worker
    /// asks for them as it spawns the server (`mcphttp::Request::ResolveSecrets`); the broker
    /// answers only for a pair listed here. Replies [`Response::Configured`] (how many pairs), or
    /// `Refused` naming a server or secret name that is not valid.
    AllowMcpSecrets(Vec<McpSecretGrant>),
    /// [`Request::ConfigureEgress`] for the mcp worker's control socket (fd
    /// [`crate::transport::MCP_EGRESS_FD`]): its forwarder's pid, and one
    /// [`EgressSource`] per stdio server given network (its proxy address and its own list).
    /// A later one replaces the earlier (the mcp worker restarted with a new socket).
    ConfigureMcpEgress(EgressSettings),
}

/// The secrets one stdio MCP server may be given, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpSecretGrant {
    /// The server's name in `mcp_servers`.
    pub server: String,
    /// The names of the secrets (environment variables handed to the broker) it may have.
    pub names: Vec<String>,
}

/// The broker's answers, one variant per request kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// The answer to a common request.
    Common(CommonResponse),
    /// The answer to [`Request::AllowEndpoints`], [`Request::AllowMcpServers`] and
    /// [`Request::AllowMcpSecrets`].
    Configured {
        /// How many endpoints (MCP servers, or (server, secret) pairs) were accepted.
        endpoints: u32,
    },
    /// The answer to [`Request::DescribeCredentials`].
    Credentials(CredentialReport),
    /// The answer to [`Request::Login`] and [`Request::McpLogin`]: what was stored.
    LoggedIn(LoginOutcome),
    /// The answer to [`Request::Logout`].
    LoggedOut {
        /// The provider named in the request.
        provider: String,
        /// Whether a stored credential existed and was removed.
        removed: bool,
    },
    /// The answer to [`Request::AuthStatus`].
    AuthStatus(AuthStatusReport),
    /// The answer to [`Request::ConfigureEgress`] and [`Request::ConfigureMcpEgress`].
    EgressConfigured,
    /// `records`: how many [`Event::Egress`] the broker has sent so far on this channel;
    /// `open`: connections still open (0 unless the broker's wait ran out).
    EgressQuiet {
        /// How many egress records the broker has sent so far on this channel.
        records: u64,
        /// Connections still open (0 unless the broker's wait ran out).
        open: u32,
    },
    /// The collector's answer to an [`Request::ExportTraces`] (a 2xx status).
    TracesExported {
        /// The collector's HTTP status.
        status: u16,
    },
    /// The key set of a [`Request::FetchJwks`]: public keys only, as the issuer published them.
    Jwks(JwksDocument),
}

/// Streamed parts of the broker's answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Item {
    /// A part of a common request's answer.
    Common(CommonItem),
    /// A step of a running login, for the CLI to show.
    Login(LoginProgress),
}

/// What the broker reports unasked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// An event every worker may send (a log line).
    Common(CommonEvent),
    /// One connection attempt through the egress proxy for sandboxed commands, sent when it
    /// ended (refused, or its tunnel closed); the supervisor stores it in the run record.
    Egress(EgressRecord),
}

impl_protocol!(BrokerProtocol, Role::Broker);

/// A base URL the broker may send `provider`'s credential to: `https://host[:port][/path]`, or
/// `http://` to a loopback address (a local server such as Ollama).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// The provider whose credential may go to this endpoint.
    pub provider: ProviderId,
    /// The base URL; requests must start with it.
    pub base_url: String,
}

/// Where the broker found a credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CredentialSource {
    /// A secret environment variable handed to the broker at start.
    Env,
    /// `api_key` in the user settings file.
    UserSettings,
    /// `$XDG_CONFIG_HOME/hanzo/credentials.json`.
    CredentialFile,
}

/// Which credentials the broker holds, without their values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialReport {
    /// Each provider that has a credential, with where it came from.
    pub available: Vec<(ProviderId, CredentialSource)>,
    /// The first provider with a credential in the order Hanzo, Anthropic, OpenAI.
    pub detected: Option<ProviderId>,
    /// Problems met while loading (a refused credential file, …); never contains a secret.
    pub warnings: Vec<String>,
}

/// The egress proxy's configuration for one run (supervisor → broker), from trusted settings only:
/// the allow-list after the settings scopes were combined (`hanzo_policy::network::effective_allow_list`),
/// never anything a model produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressSettings {
    /// `sandbox.network_allow` entries (`host`, `*.host`, `host:port`, IP literals).
    pub allow: Vec<String>,
    /// The pid, as the broker sees it, of the one process allowed to send connections on the
    /// control socket (the forwarder in the tools worker's network namespace). Every message's
    /// `SCM_CREDENTIALS` must carry it, or the channel is refused.
    pub forwarder_pid: u32,
    /// Most connections served at once (tunnels and requests being read).
    pub max_tunnels: u32,
    /// Time to connect to one resolved address.
    pub connect_timeout_ms: u64,
    /// Time a client has to send its whole request (HTTP head or SOCKS5 handshake).
    pub request_timeout_ms: u64,
    /// A tunnel with no byte in either direction for this long is closed.
    pub idle_timeout_ms: u64,
    /// Empty: every connection is judged by `allow`. Otherwise (the mcp worker's channel) a
    /// connection is judged by the list of the source whose address it was made to (the
    /// forwarder listens on every loopback address of the namespace; each stdio server is
    /// pointed at its own), and one made to no source's address is refused.
    pub sources: Vec<EgressSource>,
}

/// One MCP stdio server's share of the mcp worker's egress channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressSource {
    /// The server's name (`mcp_servers.NAME`), carried into each record.
    pub name: String,
    /// The loopback address (`127.0.0.N`) its proxy variables point at.
    pub address: String,
    /// Its allow-list: the entry's `network_allow` within what the user's settings allow.
    pub allow: Vec<String>,
}

impl Default for EgressSettings {
    fn default() -> Self {
        EgressSettings {
            allow: Vec::new(),
            forwarder_pid: 0,
            max_tunnels: 256,
            connect_timeout_ms: 10_000,
            request_timeout_ms: 10_000,
            idle_timeout_ms: 300_000,
            sources: Vec::new(),
        }
    }
}

/// One OTLP/HTTP export: where to, in which encoding, and the encoded
/// `ExportTraceServiceRequest`. Built by the supervisor from its own spans and the standard
/// `OTEL_EXPORTER_OTLP_*` variables (trusted configuration), never from anything a model produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceExport {
    /// The traces URL (`…/v1/traces`), `http://` or `https://`.
    pub endpoint: String,
    /// `application/x-protobuf` or `application/json`.
    pub content_type: String,
    /// The encoded `ExportTraceServiceRequest`, sent as the request body.
    pub body: Vec<u8>,
    /// How long the broker waits for the collector.
    pub timeout_ms: u64,
}

/// Where a JWT issuer's keys are (trusted configuration: the `serve`/`bridge` flags).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JwksFetch {
    /// The `iss` the tokens carry; discovery must name the same issuer.
    pub issuer: String,
    /// The key set's URL; `None`: found by OpenID discovery from `issuer`.
    pub jwks_uri: Option<String>,
    /// How long the broker waits for each document.
    pub timeout_ms: u64,
}

/// A fetched key set: where it came from and its JSON text (checked to be an object with a
/// `keys` array, at most [`MAX_JWKS_BYTES`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JwksDocument {
    /// The URL the key set was fetched from (given, or found by discovery).
    pub jwks_uri: String,
    /// The key set's JSON text, as the issuer served it.
    pub json: String,
}

/// The largest discovery document or key set the broker reads.
pub const MAX_JWKS_BYTES: usize = 64 * 1024;

/// The record of one connection attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressRecord {
    /// Sequence number on this control channel (0, 1, …).
    pub id: u64,
    /// How the client spoke to the proxy.
    pub protocol: EgressProtocol,
    /// The host as the client asked for it (empty when no request was read).
    pub host: String,
    /// The port the client asked for (0 when no request was read).
    pub port: u16,
    /// Whether the connection was made, and how it ended or why it was refused.
    pub outcome: EgressOutcome,
    /// Bytes sent to the destination for the client (a `CONNECT` or SOCKS5 request to the proxy
    /// not counted; a forwarded plain-HTTP request counted as rewritten).
    pub bytes_up: u64,
    /// Bytes from the destination to the client (the proxy's own replies not counted).
    pub bytes_down: u64,
    /// From the connection's arrival at the broker to its end.
    pub duration_ms: u64,
    /// The MCP stdio server the connection was made for (by the proxy address it was made
    /// to); `None` for a command's.
    pub server: Option<String>,
}

/// How the client spoke to the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EgressProtocol {
    /// HTTP `CONNECT host:port` (RFC 9110 §9.3.6): a tunnel, usually for TLS.
    HttpConnect,
    /// A plain-HTTP request in absolute form (`GET http://host/…`), forwarded as one request.
    HttpForward,
    /// SOCKS5 (RFC 1928), no authentication.
    Socks5,
    /// Nothing recognisable arrived.
    Unknown,
}

impl EgressProtocol {
    /// The stable name written in the run record and the log (`http_connect`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            EgressProtocol::HttpConnect => "http_connect",
            EgressProtocol::HttpForward => "http_forward",
            EgressProtocol::Socks5 => "socks5",
            EgressProtocol::Unknown => "unknown",
        }
    }
}

/// What became of one connection attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EgressOutcome {
    /// A tunnel to `address` (`ip:port`) was opened under `rule` (the allow-list entry, in
    /// canonical form) and has ended.
    Allowed {
        /// The allow-list entry that admitted the host, in canonical form.
        rule: String,
        /// The address connected to, as `ip:port`.
        address: String,
        /// How the tunnel ended.
        end: TunnelEnd,
    },
    /// Refused before any byte reached a destination. `rule` is the entry that allowed the name
    /// when the refusal came later (a private address, a failed connect); `detail` says what
    /// happened in a sentence.
    Denied {
        /// Why it was refused.
        reason: EgressDenial,
        /// The entry that allowed the name, when the refusal came after that check.
        rule: Option<String>,
        /// What happened, in a sentence.
        detail: String,
    },
}

/// How an opened tunnel ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TunnelEnd {
    /// Both sides finished (or one closed and the other followed).
    Closed,
    /// No byte in either direction for the idle timeout.
    IdleTimeout,
    /// A side reset the connection or an I/O error ended it.
    Error,
    /// The egress channel closed (the forwarder ended, the run finished, or a peer check failed).
    Shutdown,
}

impl TunnelEnd {
    /// The stable name written in the run record and the log (`closed`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            TunnelEnd::Closed => "closed",
            TunnelEnd::IdleTimeout => "idle_timeout",
            TunnelEnd::Error => "error",
            TunnelEnd::Shutdown => "shutdown",
        }
    }
}

/// A login to run in the broker. `provider` is `hanzo`, `anthropic`, `openai`, or the name of a
/// provider entry in the user settings (`oauth_providers`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoginRequest {
    /// Which provider to log in to.
    pub provider: String,
    /// Use the device authorization grant (RFC 8628) instead of the browser and loopback redirect.
    pub device: bool,
    /// The user settings' entry for this provider, if any; it overrides the built-in defaults
    /// field by field. Only the user scope may supply it (a project must not redirect a login).
    pub config: Option<OAuthProviderConfig>,
    /// How long to wait for the user, in seconds.
    pub timeout_secs: u32,
}

/// A login to a remote MCP server, from the user's settings (trusted configuration only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpLoginRequest {
    /// The server (its `login` field is ignored: this is the login).
    pub remote: super::mcphttp::McpRemote,
    /// Use the device authorization grant (RFC 8628), when the authorization server offers it.
    pub device: bool,
    /// How long to wait for the user, in seconds.
    pub timeout_secs: u32,
}

/// Where and as whom to log in. Endpoints are `https://`, or `http://` to a loopback address.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct OAuthProviderConfig {
    /// Authorization-server issuer: its metadata (RFC 8414, then OpenID discovery) supplies
    /// every endpoint not given explicitly.
    pub issuer: Option<String>,
    /// Where the user authorizes the client (the browser flow).
    pub authorization_endpoint: Option<String>,
    /// Where codes and refresh tokens are exchanged for tokens.
    pub token_endpoint: Option<String>,
    /// Where a device-grant login starts (RFC 8628).
    pub device_authorization_endpoint: Option<String>,
    /// Dynamic client registration (RFC 7591), used when no `client_id` is configured.
    pub registration_endpoint: Option<String>,
    /// A pre-registered client id; `None` registers one dynamically.
    pub client_id: Option<String>,
    /// Scopes to ask for.
    pub scopes: Vec<String>,
    /// RFC 8707 resource indicator sent with the authorization and token requests.
    pub resource: Option<String>,
    /// Seconds between device-grant polls when the server names no `interval` (default 5).
    pub device_poll_interval_secs: Option<u32>,
}

/// Progress of a login, streamed to the CLI.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LoginProgress {
    /// The supervisor prints this URL and opens it in a browser when there is one.
    OpenBrowser {
        /// The authorization URL.
        url: String,
    },
    /// Device grant: the user enters `user_code` at `verification_uri`.
    DeviceCode {
        /// The code the user types in.
        user_code: String,
        /// Where the user types it.
        verification_uri: String,
        /// A URL with the code filled in, when the server offers one.
        verification_uri_complete: Option<String>,
        /// Seconds until the code expires.
        expires_in: u64,
    },
    /// Still waiting for the user (what for, in a sentence).
    Waiting {
        /// What the login is waiting for.
        message: String,
    },
}

/// What kind of credential an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AuthKind {
    /// A static API key.
    ApiKey,
    /// OAuth tokens from a login.
    OAuth,
}

impl AuthKind {
    /// The stable name shown by `auth status` (`api_key`, `oauth`).
    pub fn as_str(self) -> &'static str {
        match self {
            AuthKind::ApiKey => "api_key",
            AuthKind::OAuth => "oauth",
        }
    }
}

/// Why a connection attempt was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EgressDenial {
    /// The host (with that port) is not on the allow-list.
    NotListed,
    /// Every address the name resolved to is loopback, private, link-local, … and not named
    /// literally by the allow-list (a rebinding name cannot reach the host's own services).
    PrivateAddress,
    /// The client asked for an IP address the allow-list does not name.
    IpLiteral,
    /// The requested host is not a valid ASCII host name or address.
    InvalidHost,
    /// SOCKS5 `BIND` or `UDP ASSOCIATE`, or an HTTP method other than `CONNECT` with a
    /// non-absolute target.
    UnsupportedCommand,
    /// The run's cap on concurrent connections was reached.
    TunnelCap,
    /// The name did not resolve.
    Unresolved,
    /// No permitted address accepted the connection.
    ConnectFailed,
    /// Connecting timed out.
    ConnectTimeout,
    /// The request was malformed (bad SOCKS version, unparsable HTTP, oversized head, …), or the
    /// control socket carried a descriptor that is not an accepted TCP connection.
    BadRequest,
    /// The client did not send a whole request in time (it may never have sent a byte).
    RequestTimeout,
    /// A message on the control socket came from a process other than the expected forwarder;
    /// the channel was closed.
    PeerMismatch,
    /// The egress channel closed before the connection was made.
    Shutdown,
}

impl EgressDenial {
    /// The stable name written in the run record and the log (`not_listed`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            EgressDenial::NotListed => "not_listed",
            EgressDenial::PrivateAddress => "private_address",
            EgressDenial::IpLiteral => "ip_literal",
            EgressDenial::InvalidHost => "invalid_host",
            EgressDenial::UnsupportedCommand => "unsupported_command",
            EgressDenial::TunnelCap => "tunnel_cap",
            EgressDenial::Unresolved => "unresolved",
            EgressDenial::ConnectFailed => "connect_failed",
            EgressDenial::ConnectTimeout => "connect_timeout",
            EgressDenial::BadRequest => "bad_request",
            EgressDenial::RequestTimeout => "request_timeout",
            EgressDenial::PeerMismatch => "peer_mismatch",
            EgressDenial::Shutdown => "shutdown",
        }
    }
}

/// The result of a login: what was stored, never the token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoginOutcome {
    /// The provider (or `mcp:<server>`) logged in to.
    pub provider: String,
    /// What was stored.
    pub kind: AuthKind,
    /// Seconds since the Unix epoch.
    pub expires_at: Option<i64>,
    /// The scopes the authorization server granted.
    pub scopes: Vec<String>,
}

/// One credential the broker holds, described without its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthEntry {
    /// `hanzo`, `anthropic`, `openai`, a custom provider name, or `mcp:<server>`.
    pub name: String,
    /// What kind of credential it is.
    pub kind: AuthKind,
    /// Where it came from.
    pub source: CredentialSource,
    /// Seconds since the Unix epoch (OAuth access tokens).
    pub expires_at: Option<i64>,
    /// The scopes granted (OAuth).
    pub scopes: Vec<String>,
    /// A refresh token is held, so expiry renews itself.
    pub refreshable: bool,
    /// The RFC 8707 resource the tokens are bound to (a remote MCP server's URL): the broker
    /// sends them to that server only.
    pub resource: Option<String>,
}

/// Every credential the broker holds, described without any secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthStatusReport {
    /// One entry per credential.
    pub entries: Vec<AuthEntry>,
    /// What auto-detection picks for model requests (Hanzo, Anthropic, OpenAI).
    pub detected: Option<ProviderId>,
    /// Problems met while loading; never contains a secret.
    pub warnings: Vec<String>,
}
