//! OAuth for remote MCP servers (MCP authorization, 2025-06-18): the broker side, as a library
//! the MCP bridge calls. The tokens are stored as `mcp:<server>` in `credentials.json` and never
//! leave the broker: the bridge hands the broker each HTTP request, and the broker adds the
//! token ([`Broker::authorize_mcp_request`]) and handles the server's challenges
//! ([`Broker::handle_mcp_challenge`]):
//!
//! - **401** → refresh if a refresh token is held; otherwise discover the protected resource's
//!   metadata (RFC 9728: the `resource_metadata` of the `WWW-Authenticate` challenge, else the
//!   well-known paths), then its authorization server's metadata (RFC 8414 / OpenID), register a
//!   client dynamically (RFC 7591) unless one is configured or stored, and run the code flow with
//!   PKCE and `resource` = the server's canonical URL (RFC 8707).
//! - **403 with `error="insufficient_scope"`** → log in again asking for the union of the scopes
//!   held and the scopes the challenge names (step-up).

use super::config::ResolvedProvider;
use super::discovery::{
    auth_server_metadata, canonical_resource, legacy_mcp_metadata, parse_bearer_challenge,
    resource_metadata, AuthServerMetadata, BearerChallenge,
};
use super::login::{code_flow, entry_for, Progress};
use super::{check_endpoint, sanitize, OAuthError};
use crate::credentials::{mcp_key, Credential};
use crate::fetch::Broker;
use std::time::Duration;

/// How to reach and log in to one remote MCP server (from its settings entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerAuth {
    /// The server's name in the settings (`mcp_servers.<name>`).
    pub server: String,
    /// Its streamable-HTTP endpoint.
    pub url: String,
    /// A pre-registered client; `None` registers one dynamically.
    pub client_id: Option<String>,
    /// Scopes to ask for when neither the challenge nor the metadata names any.
    pub scopes: Vec<String>,
}

/// What the caller should do after [`Broker::handle_mcp_challenge`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChallengeOutcome {
    /// New credentials are stored: send the request again (authorized anew).
    Retry,
    /// The answer was not an authorization challenge; pass it on as it is.
    NotAChallenge,
}

impl Broker {
    /// Add `Authorization: Bearer` with the server's stored token to `req` (refreshed first when
    /// it is about to expire). `Ok(false)`: no token is stored yet (send without; a 401 starts
    /// the login). Any `Authorization` the caller set is replaced.
    pub async fn authorize_mcp_request(
        &self,
        server: &str,
        req: &mut reqwest::Request,
    ) -> Result<bool, OAuthError> {
        let Some(cred) = self.current_credential(&mcp_key(server)).await? else {
            req.headers_mut().remove(reqwest::header::AUTHORIZATION);
            return Ok(false);
        };
        let mut value =
            reqwest::header::HeaderValue::from_str(&format!("Bearer {}", cred.secret.expose()))
                .map_err(|_| {
                    OAuthError::Config(format!(
                        "the stored token for MCP server {server:?} is not a valid header value; \
                         log in again"
                    ))
                })?;
        value.set_sensitive(true);
        req.headers_mut()
            .insert(reqwest::header::AUTHORIZATION, value);
        Ok(true)
    }

    /// Handle a 401 or 403 answer from `auth.url`; `www_authenticate` is that answer's
    /// `WWW-Authenticate` value. Streams `OpenBrowser` to `progress` when a login is needed.
    pub async fn handle_mcp_challenge(
        &self,
        auth: &McpServerAuth,
        status: u16,
        www_authenticate: Option<&str>,
        timeout: Duration,
        progress: &Progress,
    ) -> Result<ChallengeOutcome, OAuthError> {
        let challenge = www_authenticate.and_then(parse_bearer_challenge);
        let key = mcp_key(&auth.server);
        let held = self.read_creds().get_named(&key).cloned();
        match status {
            401 => {
                // An expired token with a refresh token: renewing it is enough.
                if let Some(c) = held.as_ref().filter(|c| refreshable(c)) {
                    if self.refresh(&key, c).await.is_ok() {
                        return Ok(ChallengeOutcome::Retry);
                    }
                }
                self.mcp_login(auth, challenge.as_ref(), &[], timeout, progress)
                    .await?;
                Ok(ChallengeOutcome::Retry)
            }
            403 if challenge
                .as_ref()
                .is_some_and(|c| c.error.as_deref() == Some("insufficient_scope")) =>
            {
                let mut have: Vec<String> = held
                    .as_ref()
                    .and_then(|c| c.oauth.as_ref())
                    .map(|o| o.scopes.clone())
                    .unwrap_or_default();
                if let Some(s) = challenge.as_ref().and_then(|c| c.scope.as_deref()) {
                    for scope in s.split_whitespace() {
                        if !have.iter().any(|h| h == scope) {
                            have.push(scope.to_string());
                        }
                    }
                }
                self.mcp_login(auth, challenge.as_ref(), &have, timeout, progress)
                    .await?;
                Ok(ChallengeOutcome::Retry)
            }
            _ => Ok(ChallengeOutcome::NotAChallenge),
        }
    }

    /// Send `req` to the server with its token; on a challenge, handle it and send once more.
    /// `req` must have a cloneable body (MCP's JSON-RPC bodies are bytes).
    pub async fn send_mcp(
        &self,
        auth: &McpServerAuth,
        req: reqwest::Request,
        timeout: Duration,
        progress: &Progress,
    ) -> Result<reqwest::Response, OAuthError> {
        let retry = req.try_clone();
        let mut first = req;
        self.authorize_mcp_request(&auth.server, &mut first).await?;
        let resp = self
            .http()
            .execute(first)
            .await
            .map_err(|e| OAuthError::Http {
                what: "the MCP request",
                url: sanitize(&auth.url, &[]),
                detail: super::describe(&e, &[]),
            })?;
        let status = resp.status().as_u16();
        if !matches!(status, 401 | 403) {
            return Ok(resp);
        }
        let www = resp
            .headers()
            .get(reqwest::header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        match self
            .handle_mcp_challenge(auth, status, www.as_deref(), timeout, progress)
            .await?
        {
            ChallengeOutcome::NotAChallenge => Ok(resp),
            ChallengeOutcome::Retry => {
                let Some(mut again) = retry else {
                    return Ok(resp);
                };
                drop(resp);
                self.authorize_mcp_request(&auth.server, &mut again).await?;
                self.http()
                    .execute(again)
                    .await
                    .map_err(|e| OAuthError::Http {
                        what: "the MCP request",
                        url: sanitize(&auth.url, &[]),
                        detail: super::describe(&e, &[]),
                    })
            }
        }
    }

    async fn mcp_login(
        &self,
        auth: &McpServerAuth,
        challenge: Option<&BearerChallenge>,
        scopes: &[String],
        timeout: Duration,
        progress: &Progress,
    ) -> Result<(), OAuthError> {
        self.credential_path()?;
        let http = self.http();
        let resource = canonical_resource(&auth.url)?;
        let (issuer, meta, prm_scopes) = discover(http, auth, &resource, challenge).await?;
        let issuer = &issuer;
        let scopes: Vec<String> = if !scopes.is_empty() {
            scopes.to_vec()
        } else if let Some(s) = challenge.and_then(|c| c.scope.as_deref()) {
            s.split_whitespace().map(str::to_string).collect()
        } else if let Some(s) = &prm_scopes {
            s.clone()
        } else {
            auth.scopes.clone()
        };
        let mut scopes = scopes;
        // A refresh token is wanted: ask for `offline_access` where the server lists it (and
        // only there: SEP-2207).
        let offline = "offline_access";
        if meta
            .scopes_supported
            .as_ref()
            .is_some_and(|s| s.iter().any(|x| x == offline))
            && !scopes.iter().any(|x| x == offline)
        {
            scopes.push(offline.to_string());
        }
        let key = mcp_key(&auth.server);
        // A client registered at an earlier login is reused (same authorization server).
        let stored_client = self.read_creds().get_named(&key).and_then(|c| {
            c.oauth
                .as_ref()
                .filter(|o| o.issuer.as_deref() == Some(issuer.as_str()))
                .and_then(|o| o.client_id.clone())
        });
        let provider = ResolvedProvider {
            name: key.clone(),
            issuer: Some(issuer.clone()),
            authorization_endpoint: meta.authorization_endpoint.clone(),
            token_endpoint: meta.token_endpoint.clone().ok_or_else(|| {
                OAuthError::Config(format!(
                    "the authorization server {} names no token endpoint",
                    sanitize(issuer, &[])
                ))
            })?,
            device_authorization_endpoint: None,
            registration_endpoint: meta.registration_endpoint.clone(),
            client_id: auth.client_id.clone().or(stored_client),
            scopes,
            resource: Some(resource),
            device_poll_interval: super::config::DEFAULT_POLL_INTERVAL,
        };
        let (tokens, client) = code_flow(http, &provider, timeout, progress).await?;
        self.store_entry(&key, entry_for(&tokens, &provider, &client))
    }
}

/// The authorization server of `auth.url`: from its protected-resource metadata (RFC 9728,
/// which must describe this server), or — for a server that publishes none, as MCP 2025-03-26
/// allowed — the server's own origin as the issuer, with its RFC 8414 metadata or, lacking that,
/// the 2025-03-26 default endpoints (`/authorize`, `/token`, `/register` at the origin).
/// Returns the issuer, its metadata and the resource's `scopes_supported`.
async fn discover(
    http: &reqwest::Client,
    auth: &McpServerAuth,
    resource: &str,
    challenge: Option<&BearerChallenge>,
) -> Result<(String, AuthServerMetadata, Option<Vec<String>>), OAuthError> {
    let prm = match resource_metadata(http, &auth.url, challenge).await {
        Ok(prm) => prm,
        Err(OAuthError::Config(why)) => {
            let origin = check_endpoint("the MCP server", &auth.url)?
                .origin()
                .ascii_serialization();
            let meta = match legacy_mcp_metadata(http, &origin).await? {
                Some(m) => m,
                None => AuthServerMetadata {
                    issuer: origin.clone(),
                    authorization_endpoint: Some(format!("{origin}/authorize")),
                    token_endpoint: Some(format!("{origin}/token")),
                    registration_endpoint: Some(format!("{origin}/register")),
                    ..AuthServerMetadata::default()
                },
            };
            eprintln!(
                "hanzo-dev broker worker: {}; using the 2025-03-26 discovery at {}",
                sanitize(&why, &[]),
                sanitize(&origin, &[])
            );
            let issuer = if meta.issuer.is_empty() {
                origin
            } else {
                meta.issuer.clone()
            };
            return Ok((issuer, meta, None));
        }
        Err(e) => return Err(e),
    };
    // RFC 9728 §3.3: the metadata must be about this server.
    let named = prm.resource.trim_end_matches('/');
    if !(resource == named || resource.starts_with(&format!("{named}/"))) {
        return Err(OAuthError::Malformed {
            what: "protected-resource metadata",
            url: sanitize(&auth.url, &[]),
            detail: format!(
                "it describes {:?}, not this server",
                sanitize(&prm.resource, &[])
            ),
        });
    }
    let Some(issuer) = prm.authorization_servers.first().cloned() else {
        return Err(OAuthError::Config(format!(
            "{} names no authorization server in its protected-resource metadata",
            sanitize(&auth.url, &[])
        )));
    };
    let meta = auth_server_metadata(http, &issuer).await?;
    Ok((issuer, meta, prm.scopes_supported))
}

fn refreshable(c: &Credential) -> bool {
    c.oauth.as_ref().is_some_and(|o| o.refresh_token.is_some())
}
