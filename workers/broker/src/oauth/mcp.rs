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
//!
//! `hanzo-dev mcp login` ([`Broker::mcp_user_login`]) runs the same flow ahead of time, with a
//! person at the browser (or the device grant): it probes the server for its challenge first.
//! A stored token is bound to the server's canonical URL (its `resource`): when the settings
//! point the server elsewhere, the token is not sent ([`Broker::authorize_mcp_request`]).

use super::config::ResolvedProvider;
use super::discovery::RegisteredClient;
use super::discovery::{
    auth_server_metadata, canonical_resource, legacy_mcp_metadata, parse_bearer_challenge,
    resource_metadata, AuthServerMetadata, BearerChallenge,
};
use super::login::{code_flow, device_flow, entry_for, Progress};
use super::token::{token_request, ClientAuth};
use super::TokenSet;
use super::{check_endpoint, sanitize, OAuthError};
use crate::credentials::{mcp_key, whole_seconds, Credential};
use crate::fetch::Broker;
use hanzo_ipc::roles::broker::{AuthKind, LoginOutcome};
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
    /// The client's metadata document (an `https` URL), used as `client_id` where the
    /// authorization server accepts one (`client_id_metadata_document_supported`) and no client
    /// id is configured: no registration is needed.
    pub client_metadata_url: Option<String>,
    /// The name of a secret environment variable the broker holds whose value is a
    /// pre-registered client, `{"client_id": …, "client_secret": …}`, used when no client id is
    /// configured. The secret never crosses the supervisor: it reaches the broker's
    /// environment only, as API keys do.
    pub client_env: Option<String>,
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
    /// it is about to expire). `url` is the server's configured URL: a token bound to another
    /// resource (the settings moved the server) is not sent. `Ok(false)`: no usable token is
    /// stored (send without; a 401 starts the login or is a denial). Any `Authorization` the
    /// caller set is replaced.
    pub async fn authorize_mcp_request(
        &self,
        server: &str,
        url: &str,
        req: &mut reqwest::Request,
    ) -> Result<bool, OAuthError> {
        req.headers_mut().remove(reqwest::header::AUTHORIZATION);
        let key = mcp_key(server);
        if let Some(held) = self.read_creds().get_named(&key) {
            if bound_elsewhere(held, url)? {
                eprintln!(
                    "hanzo-dev broker worker: the stored token of MCP server {:?} is for another \
                     URL than the configured one, so it is not sent; log in again: `hanzo-dev \
                     mcp login {}`",
                    sanitize(server, &[]),
                    sanitize(server, &[])
                );
                return Ok(false);
            }
        }
        let Some(cred) = self.current_credential(&key).await? else {
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

    /// `hanzo-dev mcp login`: probe the server for its challenge (an unauthenticated
    /// `initialize`), discover its authorization server, register a client unless one is
    /// configured, and run the code flow (the URL streamed to the CLI, which prints it and opens
    /// the browser) or, with `device`, the device grant; store the tokens as `mcp:<server>`,
    /// bound to the server's canonical URL. Only a description of what was stored is returned.
    pub async fn mcp_user_login(
        &self,
        auth: &McpServerAuth,
        device: bool,
        timeout: Duration,
        progress: &Progress,
    ) -> Result<LoginOutcome, OAuthError> {
        self.credential_path()?;
        let resource = canonical_resource(&auth.url)?;
        let (status, www) = self.probe_mcp(auth).await?;
        let challenge = www.as_deref().and_then(parse_bearer_challenge);
        let asks = status == 401
            || (status == 403
                && challenge
                    .as_ref()
                    .is_some_and(|c| c.error.as_deref() == Some("insufficient_scope")));
        if !asks {
            // It lets us in without a token; log in only where it says it takes one.
            if let Err(OAuthError::Config(_)) =
                resource_metadata(self.http(), &auth.url, None).await
            {
                return Err(OAuthError::Config(format!(
                    "MCP server {:?} did not ask for authorization (HTTP {status}) and publishes \
                     no protected-resource metadata: there is nothing to log in to",
                    sanitize(&auth.server, &[])
                )));
            }
        }
        let (provider, machine) = self
            .mcp_provider(auth, &resource, challenge.as_ref(), &[])
            .await?;
        let (tokens, client) = if machine {
            client_credentials(self.http(), &provider).await?
        } else if device {
            if provider.device_authorization_endpoint.is_none() {
                return Err(OAuthError::Config(format!(
                    "the authorization server of MCP server {:?} ({}) offers no device \
                     authorization grant; log in without `--device`",
                    sanitize(&auth.server, &[]),
                    sanitize(provider.issuer.as_deref().unwrap_or_default(), &[])
                )));
            }
            device_flow(self.http(), &provider, timeout, progress, &*self.pacer).await?
        } else {
            code_flow(self.http(), &provider, timeout, progress).await?
        };
        let key = mcp_key(&auth.server);
        self.store_entry(&key, entry_for(&tokens, &provider, &client))?;
        Ok(LoginOutcome {
            provider: key,
            kind: AuthKind::OAuth,
            expires_at: tokens.expires_at.map(whole_seconds),
            scopes: tokens.scopes.clone(),
        })
    }

    /// An unauthenticated `initialize` to the server (no redirects, public names only): its
    /// status and `WWW-Authenticate`. A session it opened anyway is closed again.
    async fn probe_mcp(&self, auth: &McpServerAuth) -> Result<(u16, Option<String>), OAuthError> {
        let url = check_endpoint("the MCP server", &auth.url)?;
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "hanzo-dev", "version": env!("CARGO_PKG_VERSION")},
            },
        });
        let failed = |e: reqwest::Error| OAuthError::Http {
            what: "the MCP server",
            url: sanitize(&auth.url, &[]),
            detail: super::describe(&e, &[]),
        };
        let resp = self
            .mcp_http()
            .post(url.clone())
            .header(
                reqwest::header::ACCEPT,
                "application/json, text/event-stream",
            )
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .map_err(failed)?;
        let status = resp.status().as_u16();
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let www = header("www-authenticate");
        let session = header("mcp-session-id").filter(|_| resp.status().is_success());
        drop(resp);
        if let Some(id) = session {
            // Best effort: the server may keep it until it expires.
            let _ = self
                .mcp_http()
                .delete(url)
                .header("mcp-session-id", id)
                .timeout(Duration::from_secs(10))
                .send()
                .await;
        }
        Ok((status, www))
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
        self.authorize_mcp_request(&auth.server, &auth.url, &mut first)
            .await?;
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
                self.authorize_mcp_request(&auth.server, &auth.url, &mut again)
                    .await?;
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
        let resource = canonical_resource(&auth.url)?;
        let (provider, machine) = self
            .mcp_provider(auth, &resource, challenge, scopes)
            .await?;
        let (tokens, client) = if machine {
            client_credentials(self.http(), &provider).await?
        } else {
            code_flow(self.http(), &provider, timeout, progress).await?
        };
        self.store_entry(
            &mcp_key(&auth.server),
            entry_for(&tokens, &provider, &client),
        )
    }

    /// Everything a login to `auth`'s authorization server needs: discovery (see [`discover`]),
    /// the scopes (`scopes`, else the challenge's, else the resource's, else the configured
    /// ones, plus `offline_access` where the server lists it), and the client (configured,
    /// registered at an earlier login with the same server, or none yet: registered
    /// dynamically by the flow).
    async fn mcp_provider(
        &self,
        auth: &McpServerAuth,
        resource: &str,
        challenge: Option<&BearerChallenge>,
        scopes: &[String],
    ) -> Result<(ResolvedProvider, bool), OAuthError> {
        let http = self.http();
        let (issuer, meta, prm_scopes) = discover(http, auth, resource, challenge).await?;
        let issuer = &issuer;
        let mut scopes: Vec<String> = if !scopes.is_empty() {
            scopes.to_vec()
        } else if let Some(s) = challenge.and_then(|c| c.scope.as_deref()) {
            s.split_whitespace().map(str::to_string).collect()
        } else if let Some(s) = &prm_scopes {
            s.clone()
        } else {
            auth.scopes.clone()
        };
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
        let pre = auth
            .client_env
            .as_deref()
            .filter(|_| auth.client_id.is_none())
            .and_then(preregistered);
        let client_auth_method = pre
            .as_ref()
            .and_then(|p| p.client_secret.as_ref())
            .map(|_| {
                // Basic unless the server lists only `client_secret_post` (RFC 8414 §2 default).
                let post_only = meta
                    .token_endpoint_auth_methods_supported
                    .as_ref()
                    .is_some_and(|m| {
                        !m.iter().any(|x| x == "client_secret_basic")
                            && m.iter().any(|x| x == "client_secret_post")
                    });
                if post_only {
                    "client_secret_post".to_string()
                } else {
                    "client_secret_basic".to_string()
                }
            });
        // A confidential client at a server that grants only `client_credentials` (SEP-1046):
        // no person, no browser.
        let grants = meta.grant_types_supported.as_deref().unwrap_or_default();
        let machine = client_auth_method.is_some()
            && grants.iter().any(|g| g == "client_credentials")
            && !grants.iter().any(|g| g == "authorization_code");
        let (pre_id, pre_secret) = match pre {
            Some(p) => (Some(p.client_id), p.client_secret),
            None => (None, None),
        };
        Ok((
            ResolvedProvider {
                name: key.clone(),
                issuer: Some(issuer.clone()),
                authorization_endpoint: meta.authorization_endpoint.clone(),
                token_endpoint: meta.token_endpoint.clone().ok_or_else(|| {
                    OAuthError::Config(format!(
                        "the authorization server {} names no token endpoint",
                        sanitize(issuer, &[])
                    ))
                })?,
                device_authorization_endpoint: meta.device_authorization_endpoint.clone(),
                registration_endpoint: meta.registration_endpoint.clone(),
                client_secret: pre_secret,
                client_auth_method,
                client_id: auth
                    .client_id
                    .clone()
                    .or(pre_id)
                    .or(stored_client)
                    .or_else(|| metadata_document_client(auth, &meta)),
                scopes,
                resource: Some(resource.to_string()),
                device_poll_interval: super::config::DEFAULT_POLL_INTERVAL,
            },
            machine,
        ))
    }
}

/// The client-credentials grant (OAuth 2.1 §4.2, MCP SEP-1046) for a pre-registered
/// confidential client, with `resource` and the scopes.
async fn client_credentials(
    http: &reqwest::Client,
    provider: &ResolvedProvider,
) -> Result<(TokenSet, RegisteredClient), OAuthError> {
    let client = RegisteredClient {
        client_id: provider.client_id.clone().unwrap_or_default(),
        client_secret: provider.client_secret.clone(),
        auth_method: provider.client_auth_method.clone(),
    };
    let scope = provider.scopes.join(" ");
    let mut form = vec![("grant_type", "client_credentials")];
    if !scope.is_empty() {
        form.push(("scope", &scope));
    }
    if let Some(r) = &provider.resource {
        form.push(("resource", r));
    }
    let auth = ClientAuth::new(
        &client.client_id,
        client.client_secret.as_ref(),
        client.auth_method.as_deref(),
    );
    let tokens = token_request(
        http,
        &provider.token_endpoint,
        &form,
        Some(auth),
        &[],
        &provider.scopes,
    )
    .await?
    .map_err(|e| e.into_error("the client-credentials grant", &provider.token_endpoint))?;
    Ok((tokens, client))
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

/// A pre-registered client from the broker's environment variable `var`.
struct Preregistered {
    client_id: String,
    client_secret: Option<crate::Secret>,
}

fn preregistered(var: &str) -> Option<Preregistered> {
    #[derive(serde::Deserialize)]
    struct Raw {
        client_id: Option<String>,
        client_secret: Option<String>,
    }
    let text = zeroize::Zeroizing::new(std::env::var(var).ok()?);
    let raw: Raw = serde_json::from_str(&text).ok()?;
    let secret = zeroize::Zeroizing::new(raw.client_secret);
    Some(Preregistered {
        client_id: raw.client_id.filter(|c| !c.is_empty())?,
        client_secret: secret
            .as_deref()
            .filter(|s| !s.is_empty())
            .map(crate::Secret::new),
    })
}

/// The client's metadata-document URL as its `client_id`, where the server takes one.
fn metadata_document_client(auth: &McpServerAuth, meta: &AuthServerMetadata) -> Option<String> {
    if meta.client_id_metadata_document_supported != Some(true) {
        return None;
    }
    auth.client_metadata_url.clone().filter(|u| {
        u.starts_with("https://") && check_endpoint("the client metadata document", u).is_ok()
    })
}

/// Whether `c` is bound to another resource than the server at `url` (a token stored for an
/// earlier URL of the server): such a token is never sent.
pub fn bound_elsewhere(c: &Credential, url: &str) -> Result<bool, OAuthError> {
    let Some(bound) = c.oauth.as_ref().and_then(|o| o.resource.as_deref()) else {
        return Ok(false);
    };
    Ok(bound != canonical_resource(url)?)
}

fn refreshable(c: &Credential) -> bool {
    c.oauth.as_ref().is_some_and(|o| o.refresh_token.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_metadata_document_url_is_the_client_id_only_where_the_server_takes_one() {
        let auth = |url: Option<&str>| McpServerAuth {
            server: "s".into(),
            url: "https://mcp.example/mcp".into(),
            client_id: None,
            scopes: vec![],
            client_metadata_url: url.map(str::to_string),
            client_env: None,
        };
        let meta = |supported: Option<bool>| AuthServerMetadata {
            issuer: "https://as.example".into(),
            client_id_metadata_document_supported: supported,
            ..AuthServerMetadata::default()
        };
        let doc = "https://client.example/meta.json";
        assert_eq!(
            metadata_document_client(&auth(Some(doc)), &meta(Some(true))).as_deref(),
            Some(doc)
        );
        assert_eq!(
            metadata_document_client(&auth(Some(doc)), &meta(None)),
            None
        );
        assert_eq!(
            metadata_document_client(&auth(Some(doc)), &meta(Some(false))),
            None
        );
        assert_eq!(
            metadata_document_client(&auth(None), &meta(Some(true))),
            None
        );
        // Only an https document names a client.
        assert_eq!(
            metadata_document_client(&auth(Some("http://127.0.0.1:9/m.json")), &meta(Some(true))),
            None
        );
    }

    #[test]
    fn a_token_is_bound_to_the_url_it_was_issued_for() {
        let cred = |resource: Option<&str>| Credential {
            secret: crate::secret::Secret::new("t"),
            kind: crate::credentials::CredentialKind::AccessToken,
            source: hanzo_ipc::roles::broker::CredentialSource::CredentialFile,
            oauth: Some(crate::credentials::OAuthState {
                resource: resource.map(str::to_string),
                ..Default::default()
            }),
        };
        let url = "https://mcp.example/mcp";
        assert!(!bound_elsewhere(&cred(Some(url)), "HTTPS://MCP.example/mcp/").unwrap());
        assert!(bound_elsewhere(&cred(Some(url)), "https://evil.example/mcp").unwrap());
        assert!(bound_elsewhere(&cred(Some(url)), "https://mcp.example/other").unwrap());
        // A hand-written token without a resource is not bound (SECURITY.md says so).
        assert!(!bound_elsewhere(&cred(None), "https://evil.example/mcp").unwrap());
    }
}
