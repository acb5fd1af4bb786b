//! HTTP for the mcp worker's remote (streamable-HTTP) MCP servers: the broker half of the
//! mcp ↔ broker direct channel (`hanzo_ipc::roles::mcphttp`).
//!
//! Per exchange: the request names a configured server, its URL must have that server's
//! configured origin ([`McpServers`], replaced by the supervisor from trusted settings and the
//! `http` servers an editor passes over ACP); credential and hop-by-hop headers from the mcp
//! worker are dropped; the server's stored OAuth token (`mcp:<server>`) is added, then the
//! editor's headers for that server (checked by [`check_header`], and scrubbed from answers like
//! every other secret the broker holds); a 401 refreshes it once (and, for
//! [`McpLogin::Headless`], runs the whole MCP authorization flow of `oauth/mcp.rs`); redirects
//! are never followed; the answer goes back with credential headers removed and every secret the
//! broker holds replaced in headers and body (also across chunk boundaries).
//!
//! Names are resolved by [`PublicOnly`]: a configured host name that resolves to a loopback,
//! private or link-local address is refused, so only a URL that names loopback literally
//! (`127.0.0.1`, `[::1]`, `localhost`) reaches a local server.

use crate::fetch::{Broker, CREDENTIAL_HEADERS};
use crate::oauth::mcp::{ChallengeOutcome, McpServerAuth};
use hanzo_ipc::roles::broker::LoginProgress;
use hanzo_ipc::roles::http::{HttpFailure, HttpFailureKind, HttpHead, Item, Response};
use hanzo_ipc::roles::mcp::EnvValue;
use hanzo_ipc::roles::mcphttp::{McpHttpRequest, McpLogin, McpRemote};
use reqwest::Url;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use thiserror::Error;
use tokio::sync::mpsc;

/// The mcp worker may not choose these: they are the connection's business.
const HOP_HEADERS: &[&str] = &["host", "content-length", "transfer-encoding", "connection"];
/// A body that sends nothing for this long is abandoned (an MCP GET stream may idle a while).
const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// How long a headless authorization (conformance client) may take.
const HEADLESS_LOGIN_TIMEOUT: Duration = Duration::from_secs(60);
/// Redirects a headless "browser" follows from the authorization URL to the loopback listener.
const HEADLESS_REDIRECTS: usize = 10;

/// Why a configured remote server or a request to one is refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum McpAllowError {
    /// The server's URL does not parse.
    #[error("mcp_servers.{server}: {url:?} is not a valid URL: {reason}")]
    BadUrl {
        /// The server's name in `mcp_servers`.
        server: String,
        /// The URL as configured.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The URL is not `https://`, nor `http://` to a literally named loopback address.
    #[error(
        "mcp_servers.{server}: {url:?} is refused: only https is allowed, or http to a loopback \
         address named literally (127.0.0.1, [::1], localhost)"
    )]
    Insecure {
        /// The server's name in `mcp_servers`.
        server: String,
        /// The URL as configured.
        url: String,
    },
    /// The URL carries a user name or password.
    #[error("mcp_servers.{server}: {url:?} carries a user name or password; tokens come from the broker")]
    UserInfo {
        /// The server's name in `mcp_servers`.
        server: String,
        /// The URL as configured.
        url: String,
    },
    /// The mcp worker named a server the supervisor did not configure.
    #[error("no remote MCP server named {server:?} is configured; the broker reaches only the `url` servers in the settings")]
    UnknownServer {
        /// The name it gave.
        server: String,
    },
    /// The mcp worker asked for a URL outside the server's configured origin.
    #[error(
        "{url:?} is not the configured address of MCP server {server:?} ({allowed}); the broker \
         reaches only the configured URL's origin"
    )]
    OtherOrigin {
        /// The server's name in `mcp_servers`.
        server: String,
        /// The URL asked for.
        url: String,
        /// The configured origin.
        allowed: String,
    },
    /// A header an editor asked for that cannot or may not be sent (its value is never named).
    #[error("MCP server {server:?}: header {name:?} is refused: {reason}")]
    BadHeader {
        /// The server's name (the editor's `mcpServers[].name`).
        server: String,
        /// The header's name (its first 64 characters).
        name: String,
        /// Why it is refused.
        reason: &'static str,
    },
}

/// The most headers an editor, or a settings entry, may give one server.
const MAX_HEADERS: usize = 32;

/// Whether header `name: value` (an editor's, or a settings entry's) may be sent to MCP server
/// `server`: a valid field name that is not one of the connection's or the MCP transport's
/// (`hanzo_policy::mcp_name::RESERVED_HEADERS`, the rule the settings loader applies too), and
/// a value that is a valid field value (no CR, LF or NUL) of at most 8 KiB. The error names the
/// header, never its value (it may be a credential).
pub fn check_header(server: &str, name: &str, value: &str) -> Result<(), McpAllowError> {
    check_header_name(server, name)?;
    if let Some(reason) = hanzo_policy::mcp_name::header_value_problem(value) {
        return Err(bad_header(server, name, reason));
    }
    Ok(())
}

fn check_header_name(server: &str, name: &str) -> Result<(), McpAllowError> {
    match hanzo_policy::mcp_name::header_name_problem(name) {
        Some(reason) => Err(bad_header(server, name, reason)),
        None => Ok(()),
    }
}

fn bad_header(server: &str, name: &str, reason: &'static str) -> McpAllowError {
    McpAllowError::BadHeader {
        server: server.to_string(),
        name: name.chars().take(64).collect(),
        reason,
    }
}

/// Why a request to a server whose settings name a secret header cannot be sent: the broker
/// holds no such variable, or its value cannot be a header's. Names the secret, never a value.
fn secret_header_failure(server: &str, header: &str, secret: &str, why: &str) -> Response {
    fail(
        HttpFailureKind::NoCredential,
        format!(
            "MCP server {server:?}: its header {header:?} names the secret {secret}, {why} (the \
             broker reads it from hanzo-dev's environment: set {secret} there, or list it in \
             HANZO_SECRET_ENV)"
        ),
    )
}

/// One configured remote server.
#[derive(Debug, Clone)]
struct Allowed {
    remote: McpRemote,
    origin: (String, String, u16),
}

/// The remote MCP servers the mcp worker may reach, by name.
#[derive(Debug, Default, Clone)]
pub struct McpServers {
    servers: BTreeMap<String, Allowed>,
}

fn is_loopback_literal(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    h.eq_ignore_ascii_case("localhost") || h.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn origin(server: &str, url: &str) -> Result<(Url, (String, String, u16)), McpAllowError> {
    let bad = |reason: String| McpAllowError::BadUrl {
        server: server.to_string(),
        url: url.to_string(),
        reason,
    };
    let parsed = Url::parse(url).map_err(|e| bad(e.to_string()))?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(McpAllowError::UserInfo {
            server: server.to_string(),
            url: url.to_string(),
        });
    }
    let host = parsed
        .host_str()
        .ok_or_else(|| bad("no host".into()))?
        .to_ascii_lowercase();
    let port = parsed
        .port_or_known_default()
        .ok_or_else(|| bad("no port".into()))?;
    let scheme = parsed.scheme().to_string();
    match scheme.as_str() {
        "https" => {}
        "http" if is_loopback_literal(&host) => {}
        _ => {
            return Err(McpAllowError::Insecure {
                server: server.to_string(),
                url: url.to_string(),
            })
        }
    }
    Ok((parsed, (scheme, host, port)))
}

impl McpServers {
    /// The set of `remotes`, each URL checked; the first bad one is the error.
    pub fn new(remotes: Vec<McpRemote>) -> Result<McpServers, McpAllowError> {
        let mut servers = BTreeMap::new();
        for remote in remotes {
            let (_, origin) = origin(&remote.server, &remote.url)?;
            if remote.headers.len() + remote.settings_headers.len() > MAX_HEADERS {
                return Err(McpAllowError::BadHeader {
                    server: remote.server.clone(),
                    name: format!("(header {})", MAX_HEADERS + 1),
                    reason: "a server gets at most 32 headers",
                });
            }
            for h in &remote.headers {
                check_header(&remote.server, &h.name, h.value.expose())?;
            }
            for (name, value) in &remote.settings_headers {
                match value {
                    EnvValue::Plain(v) => check_header(&remote.server, name, v)?,
                    EnvValue::Secret(secret) => {
                        check_header_name(&remote.server, name)?;
                        if !crate::mcp_secrets::is_env_name(secret) {
                            return Err(bad_header(
                                &remote.server,
                                name,
                                "it names a secret that is not an environment variable's name",
                            ));
                        }
                    }
                }
            }
            servers.insert(remote.server.clone(), Allowed { remote, origin });
        }
        Ok(McpServers { servers })
    }

    /// The values of every editor-given header of every server (to be replaced in what comes
    /// back, as the broker's other secrets are).
    pub fn header_values(&self) -> impl Iterator<Item = String> + '_ {
        self.servers
            .values()
            .flat_map(|a| a.remote.headers.iter())
            .map(|h| h.value.expose().to_string())
    }

    /// The names of the secrets the servers' settings headers name (their values, read from the
    /// broker's environment, are replaced in what comes back, as the broker's other secrets are).
    pub fn secret_header_names(&self) -> impl Iterator<Item = &str> + '_ {
        self.servers
            .values()
            .flat_map(|a| a.remote.settings_headers.iter())
            .filter_map(|(_, v)| match v {
                EnvValue::Secret(name) => Some(name.as_str()),
                EnvValue::Plain(_) => None,
            })
    }

    /// The request's URL, parsed, if `server` is configured and the URL has its origin.
    pub fn check(&self, server: &str, url: &str) -> Result<(Url, McpRemote), McpAllowError> {
        let allowed = self
            .servers
            .get(server)
            .ok_or_else(|| McpAllowError::UnknownServer {
                server: server.to_string(),
            })?;
        let other = || McpAllowError::OtherOrigin {
            server: server.to_string(),
            url: url.to_string(),
            allowed: format!(
                "{}://{}:{}",
                allowed.origin.0, allowed.origin.1, allowed.origin.2
            ),
        };
        let (parsed, o) = origin(server, url).map_err(|_| other())?;
        if o != allowed.origin {
            return Err(other());
        }
        Ok((parsed, allowed.remote.clone()))
    }

    /// How many servers are configured.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }
}

/// A resolver that refuses every non-public address for a host *name*, except loopback for
/// `localhost`: a configured `https://mcp.example` that resolves to 127.0.0.1 or 10.0.0.5 is not
/// reached (IP literals are not resolved, and were checked by [`McpServers`]).
pub struct PublicOnly;

impl reqwest::dns::Resolve for PublicOnly {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move {
            let local = host.eq_ignore_ascii_case("localhost");
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .filter(|a| {
                    if local {
                        a.ip().is_loopback()
                    } else {
                        hanzo_policy::network::classify(a.ip()).is_none()
                    }
                })
                .collect();
            if addrs.is_empty() {
                return Err(format!(
                    "{host} resolves to no public address (a remote MCP server must be public, \
                     or name loopback literally)"
                )
                .into());
            }
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// The HTTP client for remote MCP servers: no redirects, no proxy, [`PublicOnly`] names.
pub fn mcp_client() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .use_rustls_tls()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(std::sync::Arc::new(PublicOnly))
        .connect_timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| format!("cannot build the MCP HTTP client: {e}"))
}

fn fail(kind: HttpFailureKind, message: impl Into<String>) -> Response {
    Response::Failed(HttpFailure {
        kind,
        message: message.into(),
    })
}

/// Replaces secrets in a body streamed in chunks: the longest tail of what was seen that could be
/// the start of a secret is held back until the next chunk (or the end), so a secret split across
/// two chunks is still caught, and nothing else is delayed.
pub struct StreamScrubber {
    /// The values the project's scrubber replaces (it ignores values too short to be secrets).
    values: hanzo_policy::secret::SecretValues,
    /// The same values, as bytes, for finding a partial one at the end of a chunk.
    secrets: Vec<Vec<u8>>,
    held: Vec<u8>,
}

impl StreamScrubber {
    /// A scrubber replacing each of `secrets` (those long enough to be secrets) in the stream.
    pub fn new(secrets: Vec<Vec<u8>>) -> StreamScrubber {
        let text: Vec<String> = secrets
            .iter()
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .filter(|s| s.chars().count() >= hanzo_policy::secret::MIN_SECRET_LEN)
            .collect();
        StreamScrubber {
            values: hanzo_policy::secret::SecretValues::new(text.iter().cloned()),
            secrets: text.into_iter().map(String::into_bytes).collect(),
            held: Vec::new(),
        }
    }

    /// What can be sent after `chunk`.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut buf = std::mem::take(&mut self.held);
        buf.extend_from_slice(chunk);
        let mut buf = self.replace(buf);
        let keep = self.partial_tail(&buf);
        self.held = buf.split_off(buf.len() - keep);
        buf
    }

    /// What is left at the end of the body.
    pub fn finish(&mut self) -> Vec<u8> {
        let held = std::mem::take(&mut self.held);
        self.replace(held)
    }

    fn replace(&self, bytes: Vec<u8>) -> Vec<u8> {
        if self.values.is_empty() {
            return bytes;
        }
        self.values.scrub_bytes(bytes)
    }

    /// The length of the longest suffix of `buf` that is a proper prefix of a secret.
    fn partial_tail(&self, buf: &[u8]) -> usize {
        let mut best = 0;
        for s in &self.secrets {
            let max = (s.len() - 1).min(buf.len());
            for n in (best + 1..=max).rev() {
                if buf[buf.len() - n..] == s[..n] {
                    best = n;
                    break;
                }
            }
        }
        best
    }
}

impl Broker {
    /// Replace the remote MCP servers the mcp worker may reach.
    pub fn allow_mcp_servers(&self, remotes: Vec<McpRemote>) -> Result<usize, McpAllowError> {
        let set = McpServers::new(remotes)?;
        let n = set.len();
        *self.mcp_servers_mut() = set;
        Ok(n)
    }

    /// Perform one exchange for the mcp worker, sending the head and body chunks to `out`; the
    /// returned response ends it.
    pub async fn fetch_mcp(&self, req: McpHttpRequest, out: &mpsc::Sender<Item>) -> Response {
        let checked = self.mcp_servers().check(&req.server, &req.url);
        let (url, remote) = match checked {
            Ok(c) => c,
            Err(e) => return fail(HttpFailureKind::NotAllowed, e.to_string()),
        };
        let Ok(method) = reqwest::Method::from_bytes(req.method.as_bytes()) else {
            return fail(
                HttpFailureKind::BadRequest,
                format!("bad method {:?}", req.method),
            );
        };
        let mut builder = self.mcp_http().request(method, url);
        for (name, value) in &req.headers {
            let lower = name.to_ascii_lowercase();
            if CREDENTIAL_HEADERS.contains(&lower.as_str()) || HOP_HEADERS.contains(&lower.as_str())
            {
                continue;
            }
            builder = builder.header(name.as_str(), value.as_str());
        }
        let request = match builder.body(req.body).build() {
            Ok(r) => r,
            Err(e) => {
                return fail(
                    HttpFailureKind::BadRequest,
                    format!(
                        "the request to MCP server {:?} is malformed: {e}",
                        req.server
                    ),
                )
            }
        };
        match self.send_to_mcp(&remote, request).await {
            Ok(resp) => self.stream_mcp(resp, out).await,
            Err(r) => r,
        }
    }

    async fn send_to_mcp(
        &self,
        remote: &McpRemote,
        request: reqwest::Request,
    ) -> Result<reqwest::Response, Response> {
        let retry = request.try_clone();
        let resp = self.send_authorized(remote, request).await?;
        let status = resp.status().as_u16();
        if !matches!(status, 401 | 403) {
            return Ok(resp);
        }
        let www = resp
            .headers()
            .get(reqwest::header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let auth = McpServerAuth {
            server: remote.server.clone(),
            url: remote.url.clone(),
            client_id: remote.client_id.clone(),
            scopes: remote.scopes.clone(),
            client_metadata_url: remote.client_metadata_url.clone(),
            client_env: remote.client_env.clone(),
        };
        let outcome = match remote.login {
            McpLogin::Never => self.refresh_only(&auth, status).await,
            McpLogin::Headless => self.headless_challenge(&auth, status, www.as_deref()).await,
        };
        match (outcome, retry) {
            (Ok(ChallengeOutcome::Retry), Some(again)) => {
                drop(resp);
                self.send_authorized(remote, again).await
            }
            (Ok(_), _) => Ok(resp),
            (Err(e), _) => {
                eprintln!(
                    "hanzo-dev broker worker: MCP server {:?}: authorization failed",
                    remote.server
                );
                Err(fail(
                    HttpFailureKind::NoCredential,
                    self.scrub_text(&format!(
                        "MCP server {:?} asked for authorization (HTTP {status}) and it failed: {e}",
                        remote.server
                    )),
                ))
            }
        }
    }

    /// Send with the stored token (if any).
    async fn send_authorized(
        &self,
        remote: &McpRemote,
        mut request: reqwest::Request,
    ) -> Result<reqwest::Response, Response> {
        self.authorize_mcp_request(&remote.server, &remote.url, &mut request)
            .await
            .map_err(|e| {
                fail(
                    HttpFailureKind::NoCredential,
                    self.scrub_text(&e.to_string()),
                )
            })?;
        // The editor's headers last: an `Authorization` it gives is the one its server expects.
        for h in &remote.headers {
            let (Ok(name), Ok(mut value)) = (
                reqwest::header::HeaderName::from_bytes(h.name.as_bytes()),
                reqwest::header::HeaderValue::from_str(h.value.expose()),
            ) else {
                continue; // checked when configured; unreachable
            };
            value.set_sensitive(true);
            request.headers_mut().insert(name, value);
        }
        // Then the settings' (checked when configured): a secret is read from this process's
        // environment now, so that it is held nowhere but here and in the request.
        for (header, value) in &remote.settings_headers {
            let Ok(name) = reqwest::header::HeaderName::from_bytes(header.as_bytes()) else {
                continue; // checked when configured; unreachable
            };
            let value = match value {
                EnvValue::Plain(v) => reqwest::header::HeaderValue::from_str(v).ok(),
                EnvValue::Secret(secret) => {
                    let held = self.secret_var(secret).filter(|v| !v.is_empty());
                    let Some(held) = held else {
                        return Err(secret_header_failure(
                            &remote.server,
                            header,
                            secret,
                            "which the broker does not hold",
                        ));
                    };
                    if hanzo_policy::mcp_name::header_value_problem(&held).is_some() {
                        return Err(secret_header_failure(
                            &remote.server,
                            header,
                            secret,
                            "whose value cannot be sent in a header (a control character, or \
                             longer than 8 KiB)",
                        ));
                    }
                    reqwest::header::HeaderValue::from_str(&held)
                        .ok()
                        .map(|mut v| {
                            v.set_sensitive(true);
                            v
                        })
                }
            };
            if let Some(value) = value {
                request.headers_mut().insert(name, value);
            }
        }
        self.mcp_http().execute(request).await.map_err(|e| {
            fail(
                HttpFailureKind::Connect,
                self.scrub_text(&format!(
                    "MCP server {:?} could not be reached: {}",
                    remote.server,
                    crate::fetch::describe(&e)
                )),
            )
        })
    }

    /// Without a login: a 401 with a refreshable token (for this server's URL) refreshes it;
    /// anything else passes on (a denial; the user logs in with `hanzo-dev mcp login`).
    async fn refresh_only(
        &self,
        auth: &McpServerAuth,
        status: u16,
    ) -> Result<ChallengeOutcome, crate::oauth::OAuthError> {
        let key = crate::credentials::mcp_key(&auth.server);
        let held = self.read_creds().get_named(&key).cloned();
        match held {
            Some(c)
                if status == 401
                    && c.oauth.as_ref().is_some_and(|o| o.refresh_token.is_some())
                    && !crate::oauth::mcp::bound_elsewhere(&c, &auth.url)? =>
            {
                self.refresh(&key, &c).await?;
                Ok(ChallengeOutcome::Retry)
            }
            _ => Ok(ChallengeOutcome::NotAChallenge),
        }
    }

    /// The whole MCP authorization flow, with the authorization URL followed by the broker
    /// itself (an authorization server that redirects without a person: the conformance suite).
    async fn headless_challenge(
        &self,
        auth: &McpServerAuth,
        status: u16,
        www: Option<&str>,
    ) -> Result<ChallengeOutcome, crate::oauth::OAuthError> {
        let (tx, mut rx) = mpsc::channel::<LoginProgress>(8);
        let browser = async move {
            while let Some(p) = rx.recv().await {
                if let LoginProgress::OpenBrowser { url } = p {
                    tokio::spawn(follow_authorization(url));
                }
            }
        };
        let flow = async move {
            let r = self
                .handle_mcp_challenge(auth, status, www, HEADLESS_LOGIN_TIMEOUT, &tx)
                .await;
            drop(tx);
            r
        };
        let (outcome, ()) = tokio::join!(flow, browser);
        outcome
    }

    async fn stream_mcp(&self, mut resp: reqwest::Response, out: &mpsc::Sender<Item>) -> Response {
        let status = resp.status().as_u16();
        let secrets: Vec<Vec<u8>> = self
            .held_secrets()
            .into_iter()
            .map(String::into_bytes)
            .collect();
        let headers = resp
            .headers()
            .iter()
            .filter(|(name, _)| !CREDENTIAL_HEADERS.contains(&name.as_str()))
            .filter_map(|(name, value)| {
                let v = value.to_str().ok()?;
                // A header that echoes a credential is dropped whatever its name.
                let echoes = secrets
                    .iter()
                    .any(|s| !s.is_empty() && v.as_bytes().windows(s.len()).any(|w| w == &s[..]));
                (!echoes).then(|| (name.as_str().to_string(), v.to_string()))
            })
            .collect();
        if out
            .send(Item::Head(HttpHead { status, headers }))
            .await
            .is_err()
        {
            return fail(HttpFailureKind::Body, "the requester went away");
        }
        let mut scrubber = StreamScrubber::new(secrets);
        let mut total: u64 = 0;
        loop {
            let chunk = match tokio::time::timeout(IDLE_TIMEOUT, resp.chunk()).await {
                Err(_) => return fail(HttpFailureKind::Body, "the response body stalled"),
                Ok(Err(e)) => {
                    return fail(
                        HttpFailureKind::Body,
                        self.scrub_text(&crate::fetch::describe(&e)),
                    )
                }
                Ok(Ok(None)) => break,
                Ok(Ok(Some(c))) => c,
            };
            total += chunk.len() as u64;
            let clean = scrubber.push(&chunk);
            if !clean.is_empty() && out.send(Item::Body(clean)).await.is_err() {
                return fail(HttpFailureKind::Body, "the requester went away");
            }
        }
        let rest = scrubber.finish();
        if !rest.is_empty() && out.send(Item::Body(rest)).await.is_err() {
            return fail(HttpFailureKind::Body, "the requester went away");
        }
        Response::Done { body_bytes: total }
    }
}

/// Play the browser of a headless authorization: GET the authorization URL and follow its
/// redirects (to the loopback listener, which ends the flow). Failures end the flow by its
/// timeout; nothing of the answer is read.
async fn follow_authorization(url: String) {
    let client = reqwest::Client::builder()
        .use_rustls_tls()
        .redirect(reqwest::redirect::Policy::limited(HEADLESS_REDIRECTS))
        .no_proxy()
        .connect_timeout(Duration::from_secs(10))
        .timeout(HEADLESS_LOGIN_TIMEOUT)
        .build();
    let Ok(client) = client else { return };
    if let Err(e) = client.get(&url).send().await {
        eprintln!(
            "hanzo-dev broker worker: the headless authorization request failed: {}",
            crate::fetch::describe(&e)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote(server: &str, url: &str) -> McpRemote {
        McpRemote {
            server: server.into(),
            url: url.into(),
            client_id: None,
            scopes: vec![],
            client_metadata_url: None,
            client_env: None,
            login: McpLogin::Never,
            headers: Vec::new(),
            settings_headers: Vec::new(),
        }
    }

    #[test]
    fn only_the_configured_origin_of_a_configured_server_is_allowed() {
        let set = McpServers::new(vec![
            remote("web", "https://mcp.example/mcp"),
            remote("local", "http://127.0.0.1:3001/mcp"),
        ])
        .expect("valid");
        assert!(set.check("web", "https://mcp.example/mcp").is_ok());
        assert!(set.check("web", "https://mcp.example:443/other").is_ok());
        assert!(set.check("local", "http://127.0.0.1:3001/mcp").is_ok());
        for (server, url) in [
            ("web", "https://evil.example/mcp"),
            ("web", "http://mcp.example/mcp"),
            ("web", "https://mcp.example:8443/mcp"),
            ("web", "https://user:pw@mcp.example/mcp"),
            ("local", "http://127.0.0.1:3002/mcp"),
            ("local", "http://127.0.0.2:3001/mcp"),
            ("web", "not a url"),
        ] {
            assert!(
                matches!(
                    set.check(server, url),
                    Err(McpAllowError::OtherOrigin { .. })
                ),
                "{url}"
            );
        }
        assert!(matches!(
            set.check("nosuch", "https://mcp.example/mcp"),
            Err(McpAllowError::UnknownServer { .. })
        ));
    }

    #[test]
    fn plain_http_needs_a_literal_loopback_host() {
        for ok in [
            "http://127.0.0.1:1/mcp",
            "http://[::1]:1/mcp",
            "http://localhost:1/mcp",
            "https://mcp.example/mcp",
        ] {
            assert!(McpServers::new(vec![remote("s", ok)]).is_ok(), "{ok}");
        }
        for bad in [
            "http://mcp.example/mcp",
            "http://10.0.0.1/mcp",
            "ftp://127.0.0.1/mcp",
        ] {
            assert!(
                matches!(
                    McpServers::new(vec![remote("s", bad)]),
                    Err(McpAllowError::Insecure { .. })
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            McpServers::new(vec![remote("s", "https://a:b@mcp.example/")]),
            Err(McpAllowError::UserInfo { .. })
        ));
    }

    #[test]
    fn editor_headers_are_checked_and_refusals_never_name_the_value() {
        use hanzo_ipc::roles::mcphttp::{McpHeader, SecretText};
        let with = |name: &str, value: &str| {
            let mut r = remote("ed", "http://127.0.0.1:1/mcp");
            r.headers = vec![McpHeader {
                name: name.into(),
                value: SecretText::new(value.into()),
            }];
            McpServers::new(vec![r])
        };
        let set = with("Authorization", "Bearer s3cret-value").expect("valid");
        assert_eq!(
            set.header_values().collect::<Vec<_>>(),
            ["Bearer s3cret-value"]
        );
        for (name, value) in [
            ("Bad Name", "s3cret-value"),
            ("X-Key", "s3cret\r\nX-Injected: 1"),
            ("Host", "s3cret-value"),
            ("mcp-session-id", "s3cret-value"),
            ("Content-Length", "s3cret-value"),
        ] {
            let e = with(name, value).expect_err(name);
            assert!(matches!(e, McpAllowError::BadHeader { .. }), "{e}");
            assert!(!e.to_string().contains("s3cret"), "{e}");
        }
        let e = with("X-Key", &"v".repeat(9000)).expect_err("long");
        assert!(e.to_string().contains("8 KiB"), "{e}");
    }

    #[test]
    fn settings_headers_are_checked_and_secret_ones_are_named_only() {
        let with = |name: &str, value: EnvValue| {
            let mut r = remote("web", "http://127.0.0.1:1/mcp");
            r.settings_headers = vec![(name.into(), value)];
            McpServers::new(vec![r])
        };
        let set = with("Authorization", EnvValue::Secret("WEB_TOKEN".into())).expect("valid");
        assert_eq!(set.secret_header_names().collect::<Vec<_>>(), ["WEB_TOKEN"]);
        // Plain values are not secrets: sent as written, not scrubbed from answers.
        let set = with("X-Team", EnvValue::Plain("core-team".into())).expect("valid");
        assert_eq!(set.secret_header_names().count(), 0);
        assert_eq!(set.header_values().count(), 0);
        for (name, value) in [
            ("Host", EnvValue::Secret("WEB_TOKEN".into())),
            ("Mcp-Session-Id", EnvValue::Plain("s3cret-value".into())),
            ("Bad Name", EnvValue::Plain("s3cret-value".into())),
            ("X-Key", EnvValue::Plain("s3cret\r\nX-Injected: 1".into())),
            ("X-Key", EnvValue::Secret("A-B".into())),
        ] {
            let e = with(name, value).expect_err(name);
            assert!(matches!(e, McpAllowError::BadHeader { .. }), "{e}");
            assert!(!e.to_string().contains("s3cret"), "{e}");
        }
        let mut r = remote("web", "http://127.0.0.1:1/mcp");
        r.settings_headers = (0..33)
            .map(|i| (format!("X-{i}"), EnvValue::Plain("v".into())))
            .collect();
        assert!(McpServers::new(vec![r]).is_err());
    }

    fn scrub_all(secrets: &[&str], chunks: &[&[u8]]) -> (Vec<u8>, Vec<Vec<u8>>) {
        let mut s = StreamScrubber::new(secrets.iter().map(|x| x.as_bytes().to_vec()).collect());
        let mut out = Vec::new();
        let mut sent = Vec::new();
        for c in chunks {
            let part = s.push(c);
            out.extend_from_slice(&part);
            sent.push(part);
        }
        out.extend_from_slice(&s.finish());
        (out, sent)
    }

    #[test]
    fn a_secret_split_across_chunks_is_replaced() {
        let (out, _) = scrub_all(&["tok-SECRET-123"], &[b"data: tok-SEC", b"RET-123 end\n\n"]);
        assert_eq!(out, b"data: [redacted] end\n\n");
        let (out, _) = scrub_all(&["abcdefgh"], &[b"a", b"bcd", b"e", b"fgh", b"ab"]);
        assert_eq!(out, b"[redacted]ab");
        // Too short to be treated as a secret anywhere in the project: passed on, not held.
        let (_, sent) = scrub_all(&["ab"], &[b"xa"]);
        assert_eq!(sent[0], b"xa");
    }

    #[test]
    fn nothing_but_a_possible_secret_prefix_is_held_back() {
        // An SSE event that ends a chunk must reach the worker at once.
        let (_, sent) = scrub_all(&["tok-SECRET-123"], &[b"data: {}\n\n", b"data: tok"]);
        assert_eq!(sent[0], b"data: {}\n\n");
        assert_eq!(sent[1], b"data: ");
        let (out, sent) = scrub_all(&[], &[b"plain"]);
        assert_eq!(sent[0], b"plain");
        assert_eq!(out, b"plain");
    }
}
