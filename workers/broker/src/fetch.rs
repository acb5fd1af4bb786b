//! Authenticated HTTP on behalf of the model worker: check the destination, inject the credential,
//! send with `reqwest` (rustls), and stream back the status, the headers without any
//! credential-bearing one, and the raw body chunks.

use crate::allow::AllowList;
use crate::credentials::{
    credential_path, Credential, CredentialKind, CredentialStore, StoredCredential,
};
use crate::oauth::device::{Pacer, RealPacer};
use crate::oauth::{now_secs, OAuthError, REFRESH_MARGIN_SECS};
use crate::secret::Secret;
use crate::store::StoreLock;
use hanzo_ipc::roles::broker::{AuthStatusReport, CredentialReport};
use hanzo_ipc::roles::http::{HttpFailure, HttpFailureKind, HttpHead, HttpRequest, Item, Response};
use hanzo_ipc::roles::model::ProviderId;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::mpsc;

/// Headers that carry credentials (or could be used to smuggle them): never accepted from the
/// model worker and never passed back to it.
pub const CREDENTIAL_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "api-key",
    "cookie",
    "set-cookie",
    "proxy-authenticate",
];
/// The model worker may not choose these either: they are the connection's business.
const HOP_HEADERS: &[&str] = &["host", "content-length", "transfer-encoding", "connection"];
/// Non-2xx bodies are buffered up to this size so a credential echoed in them can be scrubbed.
const MAX_ERROR_BODY: usize = 64 * 1024;
/// A body that sends nothing for this long is abandoned.
const IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// The broker's state: the credentials it holds, the allow-list they may go to, and the HTTP
/// clients that carry them.
pub struct Broker {
    creds: RwLock<CredentialStore>,
    allow: RwLock<AllowList>,
    client: reqwest::Client,
    /// `$XDG_CONFIG_HOME/hanzo`, where `credentials.json` lives (none: logins cannot be stored).
    config_dir: Option<PathBuf>,
    /// One refresh at a time in this process; other processes are kept out by the file lock.
    refreshing: tokio::sync::Mutex<()>,
    pub(crate) pacer: Arc<dyn Pacer>,
    /// The remote MCP servers the mcp worker may reach (`mcp_http.rs`).
    mcp_servers: RwLock<crate::mcp_http::McpServers>,
    /// The client for them: no redirects, public addresses only for host names.
    mcp_client: reqwest::Client,
    /// Which secrets each MCP stdio server may be given (`mcp_secrets.rs`).
    mcp_secrets: RwLock<crate::mcp_secrets::McpSecretGrants>,
    /// Where those secrets' values come from: this process's environment (tests pass another).
    secret_env: SecretEnv,
}

/// A lookup of a secret variable by name.
pub type SecretEnv = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;

fn fail(kind: HttpFailureKind, message: impl Into<String>) -> Response {
    Response::Failed(HttpFailure {
        kind,
        message: message.into(),
    })
}

/// What a request was sent with, to decide about a refresh after a 401.
enum Sent {
    Response(reqwest::Response),
    Failed(Response),
}

impl Broker {
    /// A broker holding `creds`, with the provider table's allow-list and its HTTP clients (no
    /// redirects, no proxy). Fails only when an HTTP client cannot be built.
    pub fn new(creds: CredentialStore) -> Result<Broker, String> {
        let client = reqwest::Client::builder()
            .use_rustls_tls()
            // A redirect could lead the credential off the allow-list; providers do not redirect.
            .redirect(reqwest::redirect::Policy::none())
            // The broker's environment is allow-listed, but a proxy must be an explicit decision.
            .no_proxy()
            .connect_timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        let mcp_client = crate::mcp_http::mcp_client()?;
        Ok(Broker {
            creds: RwLock::new(creds),
            allow: RwLock::new(AllowList::default()),
            client,
            config_dir: None,
            refreshing: tokio::sync::Mutex::new(()),
            pacer: Arc::new(RealPacer),
            mcp_servers: RwLock::new(crate::mcp_http::McpServers::default()),
            mcp_client,
            mcp_secrets: RwLock::new(crate::mcp_secrets::McpSecretGrants::default()),
            secret_env: Box::new(|k| std::env::var(k).ok()),
        })
    }

    /// Replace which secrets each MCP stdio server may be given; how many pairs were granted.
    pub fn allow_mcp_secrets(
        &self,
        grants: Vec<hanzo_ipc::roles::broker::McpSecretGrant>,
    ) -> Result<usize, crate::mcp_secrets::McpSecretError> {
        let grants = crate::mcp_secrets::McpSecretGrants::new(grants)?;
        let n = grants.len();
        *self.mcp_secrets.write().unwrap_or_else(|p| p.into_inner()) = grants;
        Ok(n)
    }

    /// The values of the secrets `req.server` is to be spawned with, if every one was granted
    /// to it ([`crate::mcp_secrets::McpSecretGrants::resolve`]).
    pub fn resolve_mcp_secrets(
        &self,
        req: &hanzo_ipc::roles::mcphttp::McpSecretRequest,
    ) -> Result<Vec<hanzo_ipc::roles::mcphttp::ResolvedSecret>, crate::mcp_secrets::McpSecretError>
    {
        self.mcp_secrets
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .resolve(&req.server, &req.names, &*self.secret_env)
    }

    /// Where `credentials.json` is: logins, logouts and refreshes write there.
    pub fn with_config_dir(mut self, dir: Option<PathBuf>) -> Broker {
        self.config_dir = dir;
        self
    }

    /// How the device grant waits between polls (tests pass one that does not sleep).
    pub fn with_pacer(mut self, pacer: Arc<dyn Pacer>) -> Broker {
        self.pacer = pacer;
        self
    }

    /// The HTTP client for provider requests.
    pub fn http(&self) -> &reqwest::Client {
        &self.client
    }

    /// The client for remote MCP servers.
    pub(crate) fn mcp_http(&self) -> &reqwest::Client {
        &self.mcp_client
    }

    pub(crate) fn mcp_servers(
        &self,
    ) -> std::sync::RwLockReadGuard<'_, crate::mcp_http::McpServers> {
        self.mcp_servers.read().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn mcp_servers_mut(
        &self,
    ) -> std::sync::RwLockWriteGuard<'_, crate::mcp_http::McpServers> {
        self.mcp_servers.write().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn read_creds(&self) -> std::sync::RwLockReadGuard<'_, CredentialStore> {
        self.creds.read().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn write_creds(&self) -> std::sync::RwLockWriteGuard<'_, CredentialStore> {
        self.creds.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Which providers have a credential (for `DescribeCredentials`).
    pub fn report(&self) -> CredentialReport {
        self.read_creds().report()
    }

    /// Every credential, described without a value (for `auth status`).
    pub fn status(&self) -> AuthStatusReport {
        self.read_creds().status()
    }

    /// Problems met while loading the credentials; never contain a secret.
    pub fn warnings(&self) -> Vec<String> {
        self.read_creds().warnings().to_vec()
    }

    /// The credential file's path, or a clear error when there is no config directory.
    pub fn credential_path(&self) -> Result<PathBuf, OAuthError> {
        self.config_dir
            .as_deref()
            .map(credential_path)
            .ok_or_else(|| {
                OAuthError::Config(
                    "no config directory (set XDG_CONFIG_HOME or HOME), so no credential can be \
                     stored"
                        .into(),
                )
            })
    }

    /// Let `provider`'s credential go to `base_url` too (from trusted configuration).
    pub fn allow(&self, provider: ProviderId, base_url: &str) -> Result<(), crate::AllowError> {
        self.allow
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .allow(provider, base_url)
    }

    /// The credential to use for `name` now: an OAuth access token that expires within the
    /// margin is refreshed first.
    pub async fn current_credential(&self, name: &str) -> Result<Option<Credential>, OAuthError> {
        let cred = self.read_creds().get_named(name).cloned();
        match cred {
            Some(c) if needs_refresh(&c) => self.refresh(name, &c).await.map(Some),
            other => Ok(other),
        }
    }

    /// Refresh `name`'s access token (`stale` is the credential the caller holds), with rotation:
    /// under the credential file's lock, re-read the file — if another process already replaced
    /// the token, use its result rather than spending our (now reused) refresh token — else ask
    /// the token endpoint, and write the new access token and the new refresh token (or the old
    /// one when the server does not rotate) before releasing the lock. A refused refresh token
    /// (`invalid_grant`: reused, revoked, expired) removes the dead tokens and says to log in
    /// again.
    pub async fn refresh(&self, name: &str, stale: &Credential) -> Result<Credential, OAuthError> {
        let _one = self.refreshing.lock().await;
        // Someone in this process may have refreshed while we waited.
        if let Some(c) = self.read_creds().get_named(name) {
            if c.secret != stale.secret && !needs_refresh(c) {
                return Ok(c.clone());
            }
        }
        let relogin = |reason: &str| OAuthError::ReLogin {
            name: name.to_string(),
            reason: reason.to_string(),
        };
        let path = self.credential_path()?;
        let lock = StoreLock::acquire_async(&path).await?;
        let mut file = lock.read()?;
        let Some(entry) = file.get(name) else {
            return Err(relogin("its credential is no longer in credentials.json"));
        };
        let on_disk = entry.access_token.clone().unwrap_or_default();
        let expiring = entry
            .expires_at
            .is_some_and(|t| t - now_secs() < REFRESH_MARGIN_SECS);
        if !on_disk.is_empty() && on_disk != stale.secret.expose() && !expiring {
            // Another process rotated the tokens while we waited for the lock.
            let entry = entry.clone();
            drop(lock);
            self.write_creds().set_from_file(name, &entry);
            return self
                .read_creds()
                .get_named(name)
                .cloned()
                .ok_or_else(|| relogin("its credential could not be read back"));
        }
        let Some(refresh_token) = entry.refresh_token.clone().filter(|r| !r.is_empty()) else {
            return Err(relogin(
                "the access token expired and no refresh token is stored",
            ));
        };
        let Some(endpoint) = entry.token_endpoint.clone() else {
            return Err(relogin(
                "no token endpoint is stored with its refresh token",
            ));
        };
        let refresh_token = Secret::new(refresh_token);
        let client_secret = entry.client_secret.as_deref().map(Secret::new);
        let client = entry.client_id.as_deref().map(|id| {
            crate::oauth::token::ClientAuth::new(
                id,
                client_secret.as_ref(),
                entry.token_endpoint_auth_method.as_deref(),
            )
        });
        let answer = crate::oauth::token::refresh(
            &self.client,
            &endpoint,
            client,
            &refresh_token,
            entry.resource.as_deref(),
            &entry.scopes,
        )
        .await?;
        let tokens = match answer {
            Ok(t) => t,
            Err(e) if e.error == "invalid_grant" => {
                if let Some(entry) = file.get_mut(name) {
                    entry.access_token = None;
                    entry.refresh_token = None;
                    entry.expires_at = None;
                }
                file.retain(|_, e| e.access_token.is_some() || e.api_key.is_some());
                lock.write(&file)?;
                drop(lock);
                self.write_creds().remove_from_file(name);
                return Err(relogin(
                    "the authorization server refused the refresh token (it was revoked, \
                     expired, or already used)",
                ));
            }
            Err(e) => return Err(e.into_error("the token refresh", &endpoint)),
        };
        let entry = file.get_mut(name).expect("checked above, under the lock");
        entry.access_token = Some(tokens.access_token.expose().to_string());
        if let Some(r) = &tokens.refresh_token {
            entry.refresh_token = Some(r.expose().to_string());
        }
        entry.expires_at = tokens.expires_at;
        entry.scopes = tokens.scopes.clone();
        let entry = entry.clone();
        lock.write(&file)?;
        drop(lock);
        self.write_creds().set_from_file(name, &entry);
        self.read_creds()
            .get_named(name)
            .cloned()
            .ok_or_else(|| relogin("its credential could not be read back"))
    }

    /// Store a fresh login's tokens (under the file lock) and make them current.
    pub fn store_entry(&self, name: &str, entry: StoredCredential) -> Result<(), OAuthError> {
        let path = self.credential_path()?;
        let stored = entry.clone();
        crate::store::update(&path, |file| {
            file.insert(name.to_string(), entry);
            Ok::<(), std::convert::Infallible>(())
        })?
        .unwrap_or_else(|e| match e {});
        self.write_creds().set_from_file(name, &stored);
        Ok(())
    }

    /// Remove `name` from the credential file. `Ok(false)` when it held nothing for it.
    pub fn remove_entry(&self, name: &str) -> Result<bool, OAuthError> {
        let path = self.credential_path()?;
        let removed = crate::store::update(&path, |file| {
            Ok::<bool, std::convert::Infallible>(file.remove(name).is_some())
        })?
        .unwrap_or_else(|e| match e {});
        self.write_creds().remove_from_file(name);
        Ok(removed)
    }

    fn build(
        &self,
        req: &HttpRequest,
        url: &reqwest::Url,
        cred: &Credential,
    ) -> Result<reqwest::RequestBuilder, Response> {
        let method = reqwest::Method::from_bytes(req.method.as_bytes()).map_err(|_| {
            fail(
                HttpFailureKind::BadRequest,
                format!("bad method {:?}", req.method),
            )
        })?;
        let mut builder = self.client.request(method, url.clone());
        for (name, value) in &req.headers {
            let lower = name.to_ascii_lowercase();
            if CREDENTIAL_HEADERS.contains(&lower.as_str()) || HOP_HEADERS.contains(&lower.as_str())
            {
                continue;
            }
            builder = builder.header(name.as_str(), value.as_str());
        }
        let api_key_header = matches!(
            (req.credential, &cred.kind),
            (ProviderId::Anthropic, CredentialKind::ApiKey)
        );
        let value = if api_key_header {
            reqwest::header::HeaderValue::from_str(cred.secret.expose())
        } else {
            reqwest::header::HeaderValue::from_str(&format!("Bearer {}", cred.secret.expose()))
        };
        let Ok(mut value) = value else {
            // The error type says nothing about the value, but say even less.
            return Err(fail(
                HttpFailureKind::NoCredential,
                format!(
                    "the {} credential contains characters not allowed in a header",
                    req.credential
                ),
            ));
        };
        value.set_sensitive(true);
        let header_name = if api_key_header {
            "x-api-key"
        } else {
            "authorization"
        };
        Ok(builder.header(header_name, value).body(req.body.clone()))
    }

    async fn send_once(&self, req: &HttpRequest, url: &reqwest::Url, cred: &Credential) -> Sent {
        let builder = match self.build(req, url, cred) {
            Ok(b) => b,
            Err(r) => return Sent::Failed(r),
        };
        match builder.send().await {
            Ok(r) => Sent::Response(r),
            Err(e) => Sent::Failed(fail(
                HttpFailureKind::Connect,
                self.scrub_text(&describe(&e)),
            )),
        }
    }

    /// Perform `req`, sending the head and body chunks to `out`; the returned response ends it.
    /// An OAuth access token is refreshed before it expires, and once after a 401 (then the
    /// request is sent again).
    pub async fn fetch(&self, req: HttpRequest, out: &mpsc::Sender<Item>) -> Response {
        let url = match self
            .allow
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .check(req.credential, &req.url)
        {
            Ok(u) => u,
            Err(e) => return fail(HttpFailureKind::NotAllowed, e.to_string()),
        };
        let name = req.credential.as_str();
        let cred = match self.current_credential(name).await {
            Ok(Some(c)) => c,
            Ok(None) => {
                return fail(
                    HttpFailureKind::NoCredential,
                    format!(
                        "the broker holds no {} credential: set {} in the environment hanzo-dev \
                         starts from, run `hanzo-dev login --provider {}`, or store one in \
                         $XDG_CONFIG_HOME/hanzo/credentials.json",
                        req.credential,
                        req.credential.env_var(),
                        req.credential
                    ),
                )
            }
            Err(e) => {
                return fail(
                    HttpFailureKind::NoCredential,
                    self.scrub_text(&e.to_string()),
                )
            }
        };
        let mut resp = match self.send_once(&req, &url, &cred).await {
            Sent::Response(r) => r,
            Sent::Failed(f) => return f,
        };
        if resp.status() == reqwest::StatusCode::UNAUTHORIZED && is_refreshable(&cred) {
            drop(resp);
            let fresh = match self.refresh(name, &cred).await {
                Ok(c) => c,
                Err(e) => {
                    return fail(
                        HttpFailureKind::NoCredential,
                        self.scrub_text(&e.to_string()),
                    )
                }
            };
            resp = match self.send_once(&req, &url, &fresh).await {
                Sent::Response(r) => r,
                Sent::Failed(f) => return f,
            };
        }
        self.stream_back(resp, out).await
    }

    async fn stream_back(&self, mut resp: reqwest::Response, out: &mpsc::Sender<Item>) -> Response {
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .filter(|(name, _)| !CREDENTIAL_HEADERS.contains(&name.as_str()))
            .filter_map(|(name, value)| {
                let v = value.to_str().ok()?;
                // A header that echoes a credential is dropped whatever its name.
                (!self.contains_secret(v.as_bytes()))
                    .then(|| (name.as_str().to_string(), v.to_string()))
            })
            .collect();
        if out
            .send(Item::Head(HttpHead { status, headers }))
            .await
            .is_err()
        {
            return fail(HttpFailureKind::Body, "the requester went away");
        }
        let success = (200..300).contains(&status);
        let mut total: u64 = 0;
        let mut error_body = Vec::new();
        loop {
            let chunk = match tokio::time::timeout(IDLE_TIMEOUT, resp.chunk()).await {
                Err(_) => return fail(HttpFailureKind::Body, "the response body stalled"),
                Ok(Err(e)) => return fail(HttpFailureKind::Body, self.scrub_text(&describe(&e))),
                Ok(Ok(None)) => break,
                Ok(Ok(Some(c))) => c,
            };
            total += chunk.len() as u64;
            if success {
                if out.send(Item::Body(chunk.to_vec())).await.is_err() {
                    return fail(HttpFailureKind::Body, "the requester went away");
                }
            } else if error_body.len() < MAX_ERROR_BODY {
                error_body.extend_from_slice(&chunk);
            }
        }
        if !error_body.is_empty() {
            error_body.truncate(MAX_ERROR_BODY);
            let scrubbed = self.scrub(error_body);
            if out.send(Item::Body(scrubbed)).await.is_err() {
                return fail(HttpFailureKind::Body, "the requester went away");
            }
        }
        Response::Done { body_bytes: total }
    }

    fn contains_secret(&self, hay: &[u8]) -> bool {
        self.held_secrets()
            .iter()
            .any(|s| !s.is_empty() && find(hay, s.as_bytes()).is_some())
    }

    /// Every secret value the broker holds: its credentials', the header values editors
    /// gave for their remote MCP servers (any of which may be a credential), the secrets
    /// granted to MCP stdio servers, and those remote servers' settings headers name.
    pub(crate) fn held_secrets(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .read_creds()
            .secrets()
            .map(|s| s.expose().to_string())
            .collect();
        all.extend(self.mcp_servers().header_values());
        let granted: Vec<String> = self
            .mcp_secrets
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .names()
            .into_iter()
            .map(str::to_string)
            .collect();
        all.extend(granted.iter().filter_map(|n| (self.secret_env)(n)));
        let headers: Vec<String> = self
            .mcp_servers()
            .secret_header_names()
            .map(str::to_string)
            .collect();
        all.extend(headers.iter().filter_map(|n| (self.secret_env)(n)));
        all
    }

    /// The value of the secret variable `name` (this process's environment, or the tests'
    /// stand-in): for the settings headers of remote MCP servers.
    pub(crate) fn secret_var(&self, name: &str) -> Option<String> {
        (self.secret_env)(name)
    }

    /// Replace every held secret in `bytes` with `[redacted]` (error bodies that echo a key),
    /// through the project's one scrubber.
    pub fn scrub(&self, bytes: Vec<u8>) -> Vec<u8> {
        hanzo_policy::secret::SecretValues::new(self.held_secrets()).scrub_bytes(bytes)
    }

    pub(crate) fn scrub_text(&self, s: &str) -> String {
        String::from_utf8_lossy(&self.scrub(s.as_bytes().to_vec())).into_owned()
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || needle.len() > hay.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A reqwest error with its causes (the top level alone is often just "error sending request").
pub(crate) fn describe(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        source = cause.source();
    }
    s
}

fn is_refreshable(c: &Credential) -> bool {
    c.kind == CredentialKind::AccessToken
        && c.oauth.as_ref().is_some_and(|o| o.refresh_token.is_some())
}

/// An access token that expires within the margin and can be renewed.
fn needs_refresh(c: &Credential) -> bool {
    is_refreshable(c)
        && c.oauth
            .as_ref()
            .and_then(|o| o.expires_at)
            .is_some_and(|t| t - now_secs() < REFRESH_MARGIN_SECS)
}
