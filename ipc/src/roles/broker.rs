//! The broker channel (supervisor ↔ broker). Credential-free HTTP requests from the model worker
//! travel on the separate direct channel ([`super::http`]), not here. Nothing on this channel
//! carries a secret value: the supervisor learns which credentials exist, never what they are.

use super::model::ProviderId;
use super::{impl_protocol, CommonEvent, CommonItem, CommonRequest, CommonResponse};
use crate::Role;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
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
    /// Forget a provider's stored credential (`credentials.json`); replies
    /// [`Response::LoggedOut`].
    Logout {
        provider: String,
    },
    /// Every credential the broker holds, described without any secret; replies
    /// [`Response::AuthStatus`].
    AuthStatus,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    Common(CommonResponse),
    Configured { endpoints: u32 },
    Credentials(CredentialReport),
    LoggedIn(LoginOutcome),
    LoggedOut { provider: String, removed: bool },
    AuthStatus(AuthStatusReport),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Item {
    Common(CommonItem),
    Login(LoginProgress),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    Common(CommonEvent),
}

impl_protocol!(BrokerProtocol, Role::Broker);

/// A base URL the broker may send `provider`'s credential to: `https://host[:port][/path]`, or
/// `http://` to a loopback address (a local server such as Ollama).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    pub provider: ProviderId,
    pub base_url: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CredentialSource {
    /// A secret environment variable handed to the broker at start.
    Env,
    /// `api_key` in the user settings file.
    UserSettings,
    /// `$XDG_CONFIG_HOME/hanzo/credentials.json`.
    CredentialFile,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialReport {
    pub available: Vec<(ProviderId, CredentialSource)>,
    /// The first provider with a credential in the order Hanzo, Anthropic, OpenAI.
    pub detected: Option<ProviderId>,
    /// Problems met while loading (a refused credential file, …); never contains a secret.
    pub warnings: Vec<String>,
}

/// A login to run in the broker. `provider` is `hanzo`, `anthropic`, `openai`, or the name of a
/// provider entry in the user settings (`oauth_providers`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoginRequest {
    pub provider: String,
    /// Use the device authorization grant (RFC 8628) instead of the browser and loopback redirect.
    pub device: bool,
    /// The user settings' entry for this provider, if any; it overrides the built-in defaults
    /// field by field. Only the user tier may supply it (a project must not redirect a login).
    pub config: Option<OAuthProviderConfig>,
    /// How long to wait for the user, in seconds.
    pub timeout_secs: u32,
}

/// Where and as whom to log in. Endpoints are `https://`, or `http://` to a loopback address.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct OAuthProviderConfig {
    /// Authorization-server issuer: its metadata (RFC 8414, then OpenID discovery) supplies
    /// every endpoint not given explicitly.
    pub issuer: Option<String>,
    pub authorization_endpoint: Option<String>,
    pub token_endpoint: Option<String>,
    pub device_authorization_endpoint: Option<String>,
    /// Dynamic client registration (RFC 7591), used when no `client_id` is configured.
    pub registration_endpoint: Option<String>,
    pub client_id: Option<String>,
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
    OpenBrowser { url: String },
    /// Device grant: the user enters `user_code` at `verification_uri`.
    DeviceCode {
        user_code: String,
        verification_uri: String,
        verification_uri_complete: Option<String>,
        expires_in: u64,
    },
    /// Still waiting for the user (what for, in a sentence).
    Waiting { message: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AuthKind {
    ApiKey,
    OAuth,
}

impl AuthKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AuthKind::ApiKey => "api_key",
            AuthKind::OAuth => "oauth",
        }
    }
}

/// The result of a login: what was stored, never the token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoginOutcome {
    pub provider: String,
    pub kind: AuthKind,
    /// Seconds since the Unix epoch.
    pub expires_at: Option<i64>,
    pub scopes: Vec<String>,
}

/// One credential the broker holds, described without its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthEntry {
    /// `hanzo`, `anthropic`, `openai`, a custom provider name, or `mcp:<server>`.
    pub name: String,
    pub kind: AuthKind,
    pub source: CredentialSource,
    /// Seconds since the Unix epoch (OAuth access tokens).
    pub expires_at: Option<i64>,
    pub scopes: Vec<String>,
    /// A refresh token is held, so expiry renews itself.
    pub refreshable: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthStatusReport {
    pub entries: Vec<AuthEntry>,
    /// What auto-detection picks for model requests (Hanzo, Anthropic, OpenAI).
    pub detected: Option<ProviderId>,
    /// Problems met while loading; never contains a secret.
    pub warnings: Vec<String>,
}
