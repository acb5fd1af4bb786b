//! OAuth 2.1 in the broker: authorization code with PKCE and a loopback redirect
//! ([`code`]), the device authorization grant ([`device`]), token requests and refresh with
//! rotation ([`token`]), authorization-server and protected-resource discovery and dynamic client
//! registration ([`discovery`]), provider configuration ([`config`]), and remote MCP servers
//! ([`mcp`]).
//!
//! Written on the broker's own `reqwest` client rather than the `oauth2` crate: that crate covers
//! only the code exchange, device polling and refresh, while discovery (RFC 8414/9728), dynamic
//! registration, the loopback listener, 401 refresh and scope step-up are ours regardless; it
//! would add `chrono`, a second `rand` and a second `thiserror`; and its errors carry the raw
//! response body, where a provider may echo a token. Here every error is built from the
//! `error` code and a scrubbed, sanitised description only.

pub mod code;
pub mod config;
pub mod device;
pub mod discovery;
pub mod login;
pub mod mcp;
pub mod token;

use crate::credentials::CredentialFileError;
use crate::pkce::PkceError;
use crate::secret::Secret;
use std::time::{SystemTime, UNIX_EPOCH};
use thiserror::Error;

/// Refresh an access token this long before it expires.
pub const REFRESH_MARGIN_SECS: f64 = 60.0;
/// Responses from OAuth endpoints larger than this are refused.
pub const MAX_RESPONSE_BYTES: usize = 256 * 1024;

/// Every way an OAuth operation fails. Messages say what failed and what to do, and never
/// contain a token, a code, a verifier or a client secret: server-provided text is scrubbed of
/// every secret the request carried and stripped of control characters.
#[derive(Debug, Error)]
pub enum OAuthError {
    /// The configuration cannot work (no endpoint known, no client, no listener); says what to do.
    #[error("{0}")]
    Config(String),
    /// An endpoint is not `https://` (nor `http://` to a loopback address).
    #[error("{what}: {url:?} is refused: {reason}")]
    Insecure {
        /// Which endpoint (`the token endpoint`, …).
        what: &'static str,
        /// Its URL, sanitised.
        url: String,
        /// What rule it breaks.
        reason: String,
    },
    /// A request failed before an answer (connect, TLS, timeout, size).
    #[error("{what} at {url} failed: {detail}")]
    Http {
        /// What was being asked (`the token request`, `the authorization server metadata`, …).
        what: &'static str,
        /// The URL, sanitised.
        url: String,
        /// What failed, with secrets scrubbed.
        detail: String,
    },
    /// The server answered with an OAuth error.
    #[error("{what} at {url} was refused (HTTP {status}, {error}){}", description.as_deref().map(|d| format!(": {d}")).unwrap_or_default())]
    Server {
        /// What was being asked (`the token request`, `the authorization server metadata`, …).
        what: &'static str,
        /// The URL, sanitised.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The OAuth `error` code.
        error: String,
        /// The `error_description`, scrubbed and sanitised.
        description: Option<String>,
    },
    /// The server's answer is not the JSON expected.
    #[error("{what} at {url} answered something that is not a valid response: {detail}")]
    Malformed {
        /// What was being asked (`the token request`, `the authorization server metadata`, …).
        what: &'static str,
        /// The URL, sanitised.
        url: String,
        /// What is wrong, without quoting the body.
        detail: String,
    },
    /// The user did not finish in time.
    #[error("the login timed out after {secs} s without an answer; run `hanzo-dev login` again")]
    Timeout {
        /// The time allowed, in seconds.
        secs: u64,
    },
    /// The user (or the server) denied the authorization.
    #[error("the login was denied at the provider{}; run `hanzo-dev login` again to retry", description.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Denied {
        /// The server's description, sanitised.
        description: Option<String>,
    },
    /// The device code expired before the user approved it.
    #[error(
        "the device code expired before it was approved; run `hanzo-dev login --device` again"
    )]
    Expired,
    /// A stored login cannot be refreshed (gone from the file, refresh refused); log in again.
    #[error("{name}: {reason}; log in again: `hanzo-dev login --provider {name}`")]
    ReLogin {
        /// The credential's name.
        name: String,
        /// Why.
        reason: String,
    },
    /// The credential file could not be read or written.
    #[error(transparent)]
    Store(#[from] CredentialFileError),
    /// A PKCE verifier could not be made.
    #[error(transparent)]
    Pkce(#[from] PkceError),
}

/// An access token and what came with it.
#[derive(Debug, Clone)]
pub struct TokenSet {
    /// The access token.
    pub access_token: Secret,
    /// The refresh token, if one was issued.
    pub refresh_token: Option<Secret>,
    /// Seconds since the epoch.
    pub expires_at: Option<f64>,
    /// The scopes granted.
    pub scopes: Vec<String>,
}

/// Seconds since the Unix epoch.
pub fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Server-provided text made safe to show: every known secret replaced (by the one scrubber,
/// `hanzo_policy::secret::SecretValues`), control characters dropped, at most 300 characters.
pub fn sanitize(text: &str, secrets: &[&str]) -> String {
    let scrubbed = hanzo_policy::secret::SecretValues::new(secrets.iter().copied()).scrub(text);
    scrubbed
        .chars()
        .filter(|c| !c.is_control())
        .take(300)
        .collect()
}

/// Check an endpoint the broker is about to send a secret to.
pub fn check_endpoint(what: &'static str, url: &str) -> Result<reqwest::Url, OAuthError> {
    crate::allow::check_secure_url(url).map_err(|e| OAuthError::Insecure {
        what,
        url: sanitize(url, &[]),
        reason: e.to_string(),
    })
}

/// A reqwest error with its causes, scrubbed.
pub(crate) fn describe(e: &reqwest::Error, secrets: &[&str]) -> String {
    let mut s = e.without_url_ref().to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        source = cause.source();
    }
    sanitize(&s, secrets)
}

trait WithoutUrl {
    fn without_url_ref(&self) -> String;
}

impl WithoutUrl for reqwest::Error {
    // The URL can carry a query with a code; the caller names the endpoint itself.
    fn without_url_ref(&self) -> String {
        let mut s = self.to_string();
        if let Some(u) = self.url() {
            s = s.replace(&format!(" ({u})"), "");
            s = s.replace(u.as_str(), "<url>");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_scrubs_secrets_and_control_characters() {
        let out = sanitize("bad token tok-123456\x1b[31m red\nline", &["tok-123456"]);
        assert_eq!(out, "bad token [redacted][31m redline");
        // A secret that contains another is redacted whole, whichever is listed first.
        let out = sanitize("key abcd-efgh-ijkl", &["efgh", "abcd-efgh-ijkl"]);
        assert_eq!(out, "key [redacted]");
    }
}
