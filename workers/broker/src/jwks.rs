//! A JWT issuer's key set, fetched on the supervisor's behalf (`Request::FetchJwks`) for
//! `hanzo-dev serve` and `hanzo-dev bridge`: the broker is the one process with network for the
//! runtime's own traffic (design §12), so the servers that verify tokens never open a socket to
//! the outside themselves.
//!
//! OpenID Connect Discovery 1.0 §4: `GET {issuer}/.well-known/openid-configuration`, whose
//! `issuer` must equal the configured one and whose `jwks_uri` is then fetched (or the configured
//! `jwks_uri` directly). Every URL is `https://`, or `http://` to a loopback address; no redirect
//! is followed (a 3xx is an error: a key set must come from where the user said); names resolve
//! to public addresses only ([`crate::mcp_http::PublicOnly`]); each answer is at most
//! [`MAX_JWKS_BYTES`] and must arrive within the timeout.

use hanzo_ipc::roles::broker::{JwksDocument, JwksFetch, MAX_JWKS_BYTES};
use serde::Deserialize;
use std::time::Duration;

/// Why a key set could not be fetched. The text names URLs the user configured (or the issuer
/// published), never a body.
#[derive(Debug, thiserror::Error)]
pub enum JwksError {
    /// The URL is not `https://` (nor `http://` to a loopback address).
    #[error("{what} {url:?} is refused: {reason}")]
    Insecure {
        /// Which document (the OpenID discovery document, the JWKS).
        what: &'static str,
        /// Its URL.
        url: String,
        /// What rule it breaks.
        reason: String,
    },
    /// The server answered with a redirect, which is not followed.
    #[error("{what} {url} answered with a redirect ({status}); redirects are not followed")]
    Redirect {
        /// Which document (the OpenID discovery document, the JWKS).
        what: &'static str,
        /// Its URL.
        url: String,
        /// The redirect's HTTP status.
        status: u16,
    },
    /// The server answered with a status other than 2xx.
    #[error("{what} {url} answered {status}")]
    Status {
        /// Which document (the OpenID discovery document, the JWKS).
        what: &'static str,
        /// Its URL.
        url: String,
        /// The HTTP status.
        status: u16,
    },
    /// The document exceeds [`MAX_JWKS_BYTES`].
    #[error("{what} {url} is larger than {MAX_JWKS_BYTES} bytes")]
    TooLarge {
        /// Which document (the OpenID discovery document, the JWKS).
        what: &'static str,
        /// Its URL.
        url: String,
    },
    /// The document is not the JSON expected (or names another issuer).
    #[error("{what} {url} is not what was expected: {detail}")]
    Malformed {
        /// Which document (the OpenID discovery document, the JWKS).
        what: &'static str,
        /// Its URL.
        url: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The request failed before an answer (connect, TLS, timeout).
    #[error("{what} {url} could not be fetched: {detail}")]
    Unreachable {
        /// Which document (the OpenID discovery document, the JWKS).
        what: &'static str,
        /// Its URL.
        url: String,
        /// What failed.
        detail: String,
    },
}

impl JwksError {
    /// Whether the configuration or the issuer's documents break a rule (rather than the
    /// network failing): answered `Refused`.
    pub fn is_refusal(&self) -> bool {
        !matches!(self, JwksError::Unreachable { .. })
    }
}

/// The HTTP client for key sets: no redirects, no proxy, public names only.
pub fn jwks_client() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .use_rustls_tls()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(std::sync::Arc::new(crate::mcp_http::PublicOnly))
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| format!("cannot build the JWKS client: {e}"))
}

/// The discovery document's URL for `issuer` (OpenID Connect Discovery §4.1: appended to the
/// issuer, path and all).
pub fn discovery_url(issuer: &str) -> String {
    format!(
        "{}/.well-known/openid-configuration",
        issuer.trim_end_matches('/')
    )
}

#[derive(Deserialize)]
struct Discovery {
    issuer: String,
    jwks_uri: String,
}

/// Fetch the key set `req` names.
pub async fn fetch(client: &reqwest::Client, req: &JwksFetch) -> Result<JwksDocument, JwksError> {
    let timeout = Duration::from_millis(req.timeout_ms.clamp(1, 60_000));
    let jwks_uri = match &req.jwks_uri {
        Some(u) => u.clone(),
        None => {
            let url = discovery_url(&req.issuer);
            let body = get(client, "the OpenID discovery document", &url, timeout).await?;
            let d: Discovery = serde_json::from_slice(&body).map_err(|e| JwksError::Malformed {
                what: "the OpenID discovery document",
                url: url.clone(),
                detail: e.to_string(),
            })?;
            if d.issuer.trim_end_matches('/') != req.issuer.trim_end_matches('/') {
                return Err(JwksError::Malformed {
                    what: "the OpenID discovery document",
                    url,
                    detail: format!(
                        "it names the issuer {:?}, not {:?}",
                        printable(&d.issuer),
                        printable(&req.issuer)
                    ),
                });
            }
            d.jwks_uri
        }
    };
    let body = get(client, "the JWKS", &jwks_uri, timeout).await?;
    let text = String::from_utf8(body).map_err(|_| JwksError::Malformed {
        what: "the JWKS",
        url: jwks_uri.clone(),
        detail: "not UTF-8".into(),
    })?;
    let doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| JwksError::Malformed {
        what: "the JWKS",
        url: jwks_uri.clone(),
        detail: e.to_string(),
    })?;
    if !doc.get("keys").is_some_and(serde_json::Value::is_array) {
        return Err(JwksError::Malformed {
            what: "the JWKS",
            url: jwks_uri,
            detail: "no `keys` array".into(),
        });
    }
    Ok(JwksDocument {
        jwks_uri,
        json: text,
    })
}

/// At most 200 printable characters of a string from a document, for an error message.
fn printable(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_control())
        .take(200)
        .collect::<String>()
}

async fn get(
    client: &reqwest::Client,
    what: &'static str,
    url: &str,
    timeout: Duration,
) -> Result<Vec<u8>, JwksError> {
    let shown = printable(url);
    let u = crate::allow::check_secure_url(url).map_err(|e| JwksError::Insecure {
        what,
        url: shown.clone(),
        reason: e.to_string(),
    })?;
    let unreachable = |e: reqwest::Error| JwksError::Unreachable {
        what,
        url: shown.clone(),
        detail: e.without_url().to_string(),
    };
    let exchange = async {
        let mut resp = client
            .get(u)
            .header("accept", "application/json")
            .send()
            .await
            .map_err(unreachable)?;
        let status = resp.status().as_u16();
        if resp.status().is_redirection() {
            return Err(JwksError::Redirect {
                what,
                url: shown.clone(),
                status,
            });
        }
        if !resp.status().is_success() {
            return Err(JwksError::Status {
                what,
                url: shown.clone(),
                status,
            });
        }
        if resp
            .content_length()
            .is_some_and(|n| n > MAX_JWKS_BYTES as u64)
        {
            return Err(JwksError::TooLarge {
                what,
                url: shown.clone(),
            });
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(unreachable)? {
            if body.len() + chunk.len() > MAX_JWKS_BYTES {
                return Err(JwksError::TooLarge {
                    what,
                    url: shown.clone(),
                });
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| JwksError::Unreachable {
            what,
            url: shown.clone(),
            detail: format!("no answer within {} ms", timeout.as_millis()),
        })?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_appends_to_the_issuer_path() {
        assert_eq!(
            discovery_url("https://id.example/"),
            "https://id.example/.well-known/openid-configuration"
        );
        assert_eq!(
            discovery_url("https://id.example/tenant/a"),
            "https://id.example/tenant/a/.well-known/openid-configuration"
        );
    }

    #[tokio::test]
    async fn plain_http_to_a_remote_host_and_user_info_are_refused_before_any_request() {
        let client = jwks_client().expect("client");
        for (issuer, jwks) in [
            ("http://id.example", None),
            ("https://id.example", Some("http://keys.example/jwks.json")),
            ("https://id.example", Some("https://u:p@keys.example/jwks")),
            ("https://id.example", Some("file:///etc/passwd")),
        ] {
            let req = JwksFetch {
                issuer: issuer.into(),
                jwks_uri: jwks.map(str::to_string),
                timeout_ms: 1000,
            };
            let e = fetch(&client, &req).await.expect_err(issuer);
            assert!(matches!(e, JwksError::Insecure { .. }), "{e}");
            assert!(e.is_refusal());
        }
    }
}
