//! Authenticated HTTP on behalf of the model worker: check the destination, inject the credential,
//! send with `reqwest` (rustls), and stream back the status, the headers without any
//! credential-bearing one, and the raw body chunks.

use crate::allow::AllowList;
use crate::credentials::{CredentialKind, CredentialStore};
use hanzo_ipc::roles::http::{HttpFailure, HttpFailureKind, HttpHead, HttpRequest, Item, Response};
use hanzo_ipc::roles::model::ProviderId;
use std::sync::RwLock;
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

pub struct Broker {
    creds: CredentialStore,
    allow: RwLock<AllowList>,
    client: reqwest::Client,
}

fn fail(kind: HttpFailureKind, message: impl Into<String>) -> Response {
    Response::Failed(HttpFailure {
        kind,
        message: message.into(),
    })
}

impl Broker {
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
        Ok(Broker {
            creds,
            allow: RwLock::new(AllowList::default()),
            client,
        })
    }

    pub fn credentials(&self) -> &CredentialStore {
        &self.creds
    }

    pub fn allow(&self, provider: ProviderId, base_url: &str) -> Result<(), crate::AllowError> {
        self.allow
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .allow(provider, base_url)
    }

    /// Perform `req`, sending the head and body chunks to `out`; the returned response ends it.
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
        let Some(cred) = self.creds.get(req.credential) else {
            return fail(
                HttpFailureKind::NoCredential,
                format!(
                    "the broker holds no {} credential: set {} in the environment hanzo-dev \
                     starts from, or store one in $XDG_CONFIG_HOME/hanzo/credentials.json",
                    req.credential,
                    req.credential.env_var()
                ),
            );
        };
        let method = match reqwest::Method::from_bytes(req.method.as_bytes()) {
            Ok(m) => m,
            Err(_) => {
                return fail(
                    HttpFailureKind::BadRequest,
                    format!("bad method {:?}", req.method),
                )
            }
        };
        let mut builder = self.client.request(method, url);
        for (name, value) in &req.headers {
            let lower = name.to_ascii_lowercase();
            if CREDENTIAL_HEADERS.contains(&lower.as_str()) || HOP_HEADERS.contains(&lower.as_str())
            {
                continue;
            }
            builder = builder.header(name.as_str(), value.as_str());
        }
        let mut auth = match (req.credential, &cred.kind) {
            (ProviderId::Anthropic, CredentialKind::ApiKey) => {
                reqwest::header::HeaderValue::from_str(cred.secret.expose())
            }
            _ => {
                reqwest::header::HeaderValue::from_str(&format!("Bearer {}", cred.secret.expose()))
            }
        }
        .map_err(|_| ());
        let Ok(auth_value) = auth.as_mut() else {
            // The error type says nothing about the value, but say even less.
            return fail(
                HttpFailureKind::NoCredential,
                format!(
                    "the {} credential contains characters not allowed in a header",
                    req.credential
                ),
            );
        };
        auth_value.set_sensitive(true);
        let header_name = match (req.credential, &cred.kind) {
            (ProviderId::Anthropic, CredentialKind::ApiKey) => "x-api-key",
            _ => "authorization",
        };
        builder = builder
            .header(header_name, auth_value.clone())
            .body(req.body);

        let mut resp = match builder.send().await {
            Ok(r) => r,
            Err(e) => return fail(HttpFailureKind::Connect, self.scrub_text(&describe(&e))),
        };
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
        self.creds
            .secrets()
            .any(|s| !s.is_empty() && find(hay, s.expose().as_bytes()).is_some())
    }

    /// Replace every held secret in `bytes` with `[redacted]` (error bodies that echo a key).
    pub fn scrub(&self, mut bytes: Vec<u8>) -> Vec<u8> {
        for s in self.creds.secrets() {
            let needle = s.expose().as_bytes();
            if needle.is_empty() {
                continue;
            }
            while let Some(i) = find(&bytes, needle) {
                bytes.splice(i..i + needle.len(), b"[redacted]".iter().copied());
            }
        }
        bytes
    }

    fn scrub_text(&self, s: &str) -> String {
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
fn describe(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        source = cause.source();
    }
    s
}
