//! Requests to OAuth endpoints that answer JSON (token, device authorization, registration), and
//! the token response.

use super::{
    check_endpoint, describe, now_secs, sanitize, OAuthError, TokenSet, MAX_RESPONSE_BYTES,
};
use crate::secret::Secret;
use serde::Deserialize;
use zeroize::Zeroizing;

/// An OAuth error response (RFC 6749 §5.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorResponse {
    /// The HTTP status it came with.
    pub status: u16,
    /// The `error` code, restricted to its RFC character set.
    pub error: String,
    /// `error_description`, scrubbed and sanitised.
    pub description: Option<String>,
}

#[derive(Deserialize)]
struct RawError {
    error: String,
    #[serde(default)]
    error_description: Option<String>,
}

/// The body and status of a JSON endpoint's answer; the body is zeroized when dropped.
pub struct JsonAnswer {
    /// The HTTP status.
    pub status: u16,
    /// The body, at most the endpoint's bound.
    pub body: Zeroizing<Vec<u8>>,
}

/// POST `form` to `url` and read the answer (bounded). `secrets` are the secret values in the
/// form, scrubbed from any error text.
pub async fn post_form(
    http: &reqwest::Client,
    what: &'static str,
    url: &str,
    form: &[(&str, &str)],
    secrets: &[&str],
) -> Result<JsonAnswer, OAuthError> {
    let u = check_endpoint(what, url)?;
    let req = http.post(u).header("accept", "application/json").form(form);
    send(req, what, url, secrets).await
}

/// Send and read a bounded body.
pub async fn send(
    req: reqwest::RequestBuilder,
    what: &'static str,
    url: &str,
    secrets: &[&str],
) -> Result<JsonAnswer, OAuthError> {
    let mut resp = req.send().await.map_err(|e| OAuthError::Http {
        what,
        url: sanitize(url, secrets),
        detail: describe(&e, secrets),
    })?;
    let status = resp.status().as_u16();
    let mut body = Zeroizing::new(Vec::new());
    loop {
        match resp.chunk().await {
            Ok(Some(c)) => {
                if body.len() + c.len() > MAX_RESPONSE_BYTES {
                    return Err(OAuthError::Malformed {
                        what,
                        url: sanitize(url, secrets),
                        detail: format!("the answer is larger than {MAX_RESPONSE_BYTES} bytes"),
                    });
                }
                body.extend_from_slice(&c);
            }
            Ok(None) => break,
            Err(e) => {
                return Err(OAuthError::Http {
                    what,
                    url: sanitize(url, secrets),
                    detail: describe(&e, secrets),
                })
            }
        }
    }
    Ok(JsonAnswer { status, body })
}

impl JsonAnswer {
    /// The OAuth error this answer carries, if it is not a success. Text from the server is
    /// scrubbed of `secrets`.
    pub fn error(&self, secrets: &[&str]) -> Option<ErrorResponse> {
        if (200..300).contains(&self.status) {
            return None;
        }
        let raw: Option<RawError> = serde_json::from_slice(&self.body).ok();
        let (error, description) = match raw {
            Some(r) => (r.error, r.error_description),
            None => ("(no OAuth error code)".to_string(), None),
        };
        // RFC 6749 limits `error` to %x20-21 / %x23-5B / %x5D-7E; anything else is not shown.
        let error = if !error.is_empty()
            && error.len() <= 64
            && error
                .bytes()
                .all(|b| (0x20..=0x7e).contains(&b) && b != b'"' && b != b'\\')
        {
            sanitize(&error, secrets)
        } else {
            "(invalid error code)".to_string()
        };
        Some(ErrorResponse {
            status: self.status,
            error,
            description: description.map(|d| sanitize(&d, secrets)),
        })
    }

    /// The body as `T`; a body that does not parse is `Malformed` naming `what` at `url`, with
    /// only the error's category and position (the body may hold secrets).
    pub fn parse<T: for<'de> Deserialize<'de>>(
        &self,
        what: &'static str,
        url: &str,
    ) -> Result<T, OAuthError> {
        // serde_json's messages can quote the input; report only the category and position.
        serde_json::from_slice(&self.body).map_err(|e| OAuthError::Malformed {
            what,
            url: sanitize(url, &[]),
            detail: format!(
                "{:?} at line {} column {}",
                e.classify(),
                e.line(),
                e.column()
            ),
        })
    }
}

impl ErrorResponse {
    /// The error as an [`OAuthError::Server`] naming `what` at `url`.
    pub fn into_error(self, what: &'static str, url: &str) -> OAuthError {
        OAuthError::Server {
            what,
            url: sanitize(url, &[]),
            status: self.status,
            error: self.error,
            description: self.description,
        }
    }
}

/// A successful token response (RFC 6749 §5.1). `Drop` zeroizes the tokens.
#[derive(Deserialize)]
struct RawToken {
    access_token: String,
    #[serde(default)]
    token_type: Option<String>,
    #[serde(default)]
    expires_in: Option<serde_json::Value>,
    #[serde(default)]
    refresh_token: Option<String>,
    #[serde(default)]
    scope: Option<String>,
}

impl Drop for RawToken {
    fn drop(&mut self) {
        use zeroize::Zeroize;
        self.access_token.zeroize();
        if let Some(r) = &mut self.refresh_token {
            r.zeroize();
        }
    }
}

/// Parse a token response. `requested` scopes stand in when the server omits `scope`
/// (RFC 6749 §5.1: then the granted scope is the requested one).
pub fn parse_token(
    answer: &JsonAnswer,
    what: &'static str,
    url: &str,
    requested: &[String],
) -> Result<TokenSet, OAuthError> {
    let raw: RawToken = answer.parse(what, url)?;
    if raw.access_token.is_empty() {
        return Err(OAuthError::Malformed {
            what,
            url: sanitize(url, &[]),
            detail: "empty access_token".into(),
        });
    }
    match raw.token_type.as_deref() {
        Some(t) if t.eq_ignore_ascii_case("bearer") => {}
        other => {
            return Err(OAuthError::Malformed {
                what,
                url: sanitize(url, &[]),
                detail: format!(
                    "token_type {:?} is not supported (only Bearer)",
                    other.map(|t| sanitize(t, &[]))
                ),
            })
        }
    }
    let expires_in = match &raw.expires_in {
        Some(serde_json::Value::Number(n)) => n.as_f64(),
        // Some servers send it as a string.
        Some(serde_json::Value::String(s)) => s.trim().parse::<f64>().ok(),
        _ => None,
    }
    .filter(|s| s.is_finite() && *s >= 0.0);
    let scopes = match &raw.scope {
        Some(s) => s.split_whitespace().map(str::to_string).collect(),
        None => requested.to_vec(),
    };
    Ok(TokenSet {
        access_token: Secret::new(raw.access_token.as_str()),
        refresh_token: raw
            .refresh_token
            .as_deref()
            .filter(|r| !r.is_empty())
            .map(Secret::new),
        expires_at: expires_in.map(|s| now_secs() + s),
        scopes,
    })
}

/// How the client authenticates at the token endpoint (RFC 6749 §2.3.1): a public client sends
/// its id in the form; a confidential one its secret too, in the form (`client_secret_post`) or
/// in an `Authorization: Basic` header (`client_secret_basic`).
#[derive(Debug, Clone, Copy)]
pub struct ClientAuth<'a> {
    /// The client id.
    pub id: &'a str,
    /// The client secret; `None` for a public client.
    pub secret: Option<&'a Secret>,
    /// Send the secret in `Authorization: Basic` (`client_secret_basic`) instead of the form.
    pub basic: bool,
}

impl<'a> ClientAuth<'a> {
    /// A public client: only its id, in the form.
    pub fn public(id: &'a str) -> ClientAuth<'a> {
        ClientAuth {
            id,
            secret: None,
            basic: false,
        }
    }

    /// From the registration's (or the stored) `token_endpoint_auth_method`.
    pub fn new(id: &'a str, secret: Option<&'a Secret>, method: Option<&str>) -> ClientAuth<'a> {
        ClientAuth {
            id,
            secret,
            basic: secret.is_some() && method == Some("client_secret_basic"),
        }
    }
}

fn form_encode(s: &str) -> String {
    let mut u = reqwest::Url::parse("x:/").expect("a constant URL");
    u.query_pairs_mut().append_pair("v", s);
    u.query()
        .unwrap_or_default()
        .trim_start_matches("v=")
        .to_string()
}

/// POST a grant to the token endpoint and parse the token, or return the server's OAuth error.
pub async fn token_request(
    http: &reqwest::Client,
    token_endpoint: &str,
    form: &[(&str, &str)],
    client: Option<ClientAuth<'_>>,
    secrets: &[&str],
    requested: &[String],
) -> Result<Result<TokenSet, ErrorResponse>, OAuthError> {
    const WHAT: &str = "the token request";
    let mut form = form.to_vec();
    let mut secrets = secrets.to_vec();
    let mut basic = None;
    if let Some(c) = client {
        if let Some(s) = c.secret {
            secrets.push(s.expose());
        }
        match (c.secret, c.basic) {
            (Some(s), true) => {
                use base64::Engine;
                basic = Some(zeroize::Zeroizing::new(format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(format!(
                        "{}:{}",
                        form_encode(c.id),
                        form_encode(s.expose())
                    ))
                )));
            }
            (secret, _) => {
                form.push(("client_id", c.id));
                if let Some(s) = secret {
                    form.push(("client_secret", s.expose()));
                }
            }
        }
    }
    let answer = match &basic {
        None => post_form(http, WHAT, token_endpoint, &form, &secrets).await?,
        Some(b) => {
            let u = check_endpoint(WHAT, token_endpoint)?;
            let mut value = reqwest::header::HeaderValue::from_str(b).map_err(|_| {
                OAuthError::Config("the client credentials are not valid in a header".into())
            })?;
            value.set_sensitive(true);
            let req = http
                .post(u)
                .header("accept", "application/json")
                .header(reqwest::header::AUTHORIZATION, value)
                .form(&form);
            send(req, WHAT, token_endpoint, &secrets).await?
        }
    };
    if let Some(e) = answer.error(&secrets) {
        return Ok(Err(e));
    }
    parse_token(&answer, "the token request", token_endpoint, requested).map(Ok)
}

/// Refresh with `refresh_token`. `Ok(Err(_))` is the server's refusal (`invalid_grant`: reused,
/// revoked or expired).
pub async fn refresh(
    http: &reqwest::Client,
    token_endpoint: &str,
    client: Option<ClientAuth<'_>>,
    refresh_token: &Secret,
    resource: Option<&str>,
    scopes: &[String],
) -> Result<Result<TokenSet, ErrorResponse>, OAuthError> {
    let mut form: Vec<(&str, &str)> = vec![
        ("grant_type", "refresh_token"),
        ("refresh_token", refresh_token.expose()),
    ];
    if let Some(r) = resource {
        form.push(("resource", r));
    }
    token_request(
        http,
        token_endpoint,
        &form,
        client,
        &[refresh_token.expose()],
        scopes,
    )
    .await
}
