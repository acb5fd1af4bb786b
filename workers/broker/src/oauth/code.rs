//! Authorization code with PKCE (S256) and a loopback redirect (RFC 8252 §7.3): a one-shot
//! listener on `127.0.0.1` with a port the kernel picks, waiting for the browser to come back
//! with `code` and the `state` we sent. A response with a wrong or missing `state` is refused
//! (the browser is told so) and the listener keeps waiting, until the timeout; the first response
//! with the right `state` ends it. The pages shown to the browser are fixed text: nothing from
//! the request is reflected.

use super::config::ResolvedProvider;
use super::discovery::RegisteredClient;
use super::token::{token_request, ClientAuth, ErrorResponse};
use super::{check_endpoint, OAuthError, TokenSet};
use crate::pkce::{random_token, PkcePair, METHOD};
use crate::secret::Secret;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The path of the redirect URI on the loopback listener.
pub const CALLBACK_PATH: &str = "/callback";
/// Largest request head read from the browser.
const MAX_REQUEST: usize = 16 * 1024;
/// A browser connection that sends nothing for this long is dropped (the listener goes on).
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);

/// The loopback listener, bound before the authorization URL is built (the URL names its port).
pub struct LoopbackListener {
    listener: TcpListener,
    port: u16,
}

impl LoopbackListener {
    /// Listen on a free port of `127.0.0.1` for the login's redirect.
    pub async fn bind() -> Result<LoopbackListener, OAuthError> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.map_err(|e| {
            OAuthError::Config(format!(
                "cannot listen on 127.0.0.1 for the login's redirect: {e}; use `--device`"
            ))
        })?;
        let port = listener
            .local_addr()
            .map_err(|e| OAuthError::Config(format!("the loopback listener has no port: {e}")))?
            .port();
        Ok(LoopbackListener { listener, port })
    }

    /// The port listened on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The redirect URI to register and send: `http://127.0.0.1:<port>/callback`.
    pub fn redirect_uri(&self) -> String {
        format!("http://127.0.0.1:{}{CALLBACK_PATH}", self.port)
    }

    /// Wait for the browser's redirect carrying `state` (until `timeout`): the authorization
    /// code, or the error the authorization server sent back.
    /// `issuer`, when known, is checked against the redirect's `iss` (RFC 9207) when the server
    /// sends one: a different issuer is a mix-up attack and ends the login.
    pub async fn wait(
        &self,
        state: &str,
        issuer: Option<&str>,
        timeout: Duration,
    ) -> Result<Secret, OAuthError> {
        let wait = async {
            loop {
                let Ok((stream, _)) = self.listener.accept().await else {
                    continue;
                };
                match tokio::time::timeout(CONNECTION_TIMEOUT, handle(stream, state, issuer)).await
                {
                    Ok(Some(outcome)) => return outcome,
                    // A wrong state, another path, a broken connection: keep waiting.
                    Ok(None) | Err(_) => continue,
                }
            }
        };
        tokio::time::timeout(timeout, wait)
            .await
            .unwrap_or(Err(OAuthError::Timeout {
                secs: timeout.as_secs(),
            }))
    }
}

/// What a redirect carried.
enum Redirect {
    /// The code, and the `iss` parameter if the server sent one (RFC 9207).
    Code(Secret, Option<String>),
    Error(String, Option<String>),
    WrongState,
    Other,
}

fn parse_callback(target: &str, state: &str) -> Redirect {
    let Ok(u) = reqwest::Url::parse(&format!("http://127.0.0.1{target}")) else {
        return Redirect::Other;
    };
    if u.path() != CALLBACK_PATH {
        return Redirect::Other;
    }
    let mut got_state = None;
    let mut code = None;
    let mut error = None;
    let mut description = None;
    let mut iss = None;
    for (k, v) in u.query_pairs() {
        match k.as_ref() {
            // A repeated parameter makes the response ambiguous: refuse it like a wrong state.
            "state" if got_state.is_none() => got_state = Some(v.into_owned()),
            "state" => return Redirect::WrongState,
            "code" if code.is_none() => code = Some(Secret::new(v.into_owned())),
            "code" => return Redirect::WrongState,
            "error" => error = Some(v.into_owned()),
            "error_description" => description = Some(v.into_owned()),
            "iss" => iss = Some(v.into_owned()),
            _ => {}
        }
    }
    if !got_state
        .as_deref()
        .is_some_and(|s| constant_time_eq(s.as_bytes(), state.as_bytes()))
    {
        return Redirect::WrongState;
    }
    match (code, error) {
        (_, Some(e)) => Redirect::Error(e, description),
        (Some(c), None) if !c.is_empty() => Redirect::Code(c, iss),
        _ => Redirect::Other,
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

const PAGE_STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:36em;margin:4em auto;\
padding:0 1em;color:#222}h1{font-size:1.4em}";

fn page(title: &str, text: &str) -> String {
    format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{t}</title>\
         <style>{PAGE_STYLE}</style></head><body><h1>{t}</h1><p>{x}</p></body></html>",
        t = html_escape(title),
        x = html_escape(text)
    )
}

/// Escape text for HTML (every page goes through this, though none carries request input).
pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

async fn respond(stream: &mut TcpStream, status: &str, body: &str) {
    let head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\n\
         cache-control: no-store\r\nreferrer-policy: no-referrer\r\n\
         content-security-policy: default-src 'none'; style-src 'unsafe-inline'\r\n\
         x-content-type-options: nosniff\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Serve one browser connection. `Some` ends the wait.
async fn handle(
    mut stream: TcpStream,
    state: &str,
    issuer: Option<&str>,
) -> Option<Result<Secret, OAuthError>> {
    let mut buf = zeroize::Zeroizing::new(Vec::with_capacity(1024));
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > MAX_REQUEST {
            respond(
                &mut stream,
                "431 Request Header Fields Too Large",
                &page("Request too large", "This request is too large."),
            )
            .await;
            return None;
        }
    }
    let line_end = buf.iter().position(|&b| b == b'\r')?;
    let line = std::str::from_utf8(&buf[..line_end]).ok()?;
    let mut parts = line.split(' ');
    let (method, target) = (parts.next()?, parts.next()?);
    if method != "GET" {
        respond(
            &mut stream,
            "405 Method Not Allowed",
            &page("Not allowed", "Only the login redirect is served here."),
        )
        .await;
        return None;
    }
    match parse_callback(target, state) {
        Redirect::Code(_, Some(iss))
            if issuer
                .is_some_and(|want| want.trim_end_matches('/') != iss.trim_end_matches('/')) =>
        {
            respond(
                &mut stream,
                "400 Bad Request",
                &page(
                    "Login refused",
                    "The response came from another authorization server than the one hanzo-dev asked. \
                     The terminal says more; you can close this window.",
                ),
            )
            .await;
            Some(Err(OAuthError::Malformed {
                what: "the authorization response",
                url: "the loopback redirect".into(),
                detail: format!(
                    "it names the issuer {:?}, not {:?} (RFC 9207: a mix-up attack, or a \
                     misconfigured provider)",
                    super::sanitize(&iss, &[]),
                    super::sanitize(issuer.unwrap_or_default(), &[])
                ),
            }))
        }
        Redirect::Code(code, _) => {
            respond(
                &mut stream,
                "200 OK",
                &page(
                    "Logged in to hanzo-dev",
                    "You are logged in. You can close this window and return to the terminal.",
                ),
            )
            .await;
            Some(Ok(code))
        }
        Redirect::Error(error, description) => {
            respond(
                &mut stream,
                "200 OK",
                &page(
                    "Login not completed",
                    "The provider did not authorize hanzo-dev. The terminal says why; you can close this window.",
                ),
            )
            .await;
            let description = description.map(|d| super::sanitize(&d, &[]));
            Some(Err(if error == "access_denied" {
                OAuthError::Denied { description }
            } else {
                OAuthError::Server {
                    what: "the authorization request",
                    url: "the authorization endpoint".into(),
                    status: 302,
                    error: super::sanitize(&error, &[]).chars().take(64).collect(),
                    description,
                }
            }))
        }
        Redirect::WrongState => {
            respond(
                &mut stream,
                "400 Bad Request",
                &page(
                    "This sign-in response is not for this login",
                    "It does not belong to the login hanzo-dev is waiting for, so it was refused. \
                     If you started a login, finish it in the window it opened.",
                ),
            )
            .await;
            None
        }
        Redirect::Other => {
            respond(
                &mut stream,
                "404 Not Found",
                &page("Not found", "Nothing is served here."),
            )
            .await;
            None
        }
    }
}

/// The parameters of one authorization request.
pub struct AuthorizationRequest {
    /// The authorization URL to open in the browser.
    pub url: String,
    /// The random `state` the redirect must carry back.
    pub state: String,
    /// The PKCE verifier (kept for the token request) and its challenge (in `url`).
    pub pkce: PkcePair,
    /// The redirect URI sent (the token request repeats it).
    pub redirect_uri: String,
}

/// Build the authorization URL: `response_type=code`, the client, the loopback redirect,
/// `scope`, a random `state`, the S256 challenge, and `resource` (RFC 8707) when given.
pub fn authorization_request(
    authorization_endpoint: &str,
    client_id: &str,
    redirect_uri: &str,
    scopes: &[String],
    resource: Option<&str>,
) -> Result<AuthorizationRequest, OAuthError> {
    let mut url = check_endpoint("the authorization endpoint", authorization_endpoint)?;
    let pkce = PkcePair::generate()?;
    let state = random_token()?;
    {
        let mut q = url.query_pairs_mut();
        q.append_pair("response_type", "code")
            .append_pair("client_id", client_id)
            .append_pair("redirect_uri", redirect_uri)
            .append_pair("state", &state)
            .append_pair("code_challenge", &pkce.challenge)
            .append_pair("code_challenge_method", METHOD);
        if !scopes.is_empty() {
            q.append_pair("scope", &scopes.join(" "));
        }
        if let Some(r) = resource {
            q.append_pair("resource", r);
        }
    }
    Ok(AuthorizationRequest {
        url: url.to_string(),
        state,
        pkce,
        redirect_uri: redirect_uri.to_string(),
    })
}

/// Exchange the code for tokens (with the verifier, the same redirect URI and resource).
pub async fn exchange_code(
    http: &reqwest::Client,
    provider: &ResolvedProvider,
    client: &RegisteredClient,
    code: &Secret,
    request: &AuthorizationRequest,
) -> Result<Result<TokenSet, ErrorResponse>, OAuthError> {
    let resource = provider.resource.as_deref();
    let mut form: Vec<(&str, &str)> = vec![
        ("grant_type", "authorization_code"),
        ("code", code.expose()),
        ("redirect_uri", &request.redirect_uri),
        ("code_verifier", request.pkce.verifier.expose()),
    ];
    if let Some(r) = resource {
        form.push(("resource", r));
    }
    let auth = ClientAuth::new(
        &client.client_id,
        client.client_secret.as_ref(),
        client.auth_method.as_deref(),
    );
    token_request(
        http,
        &provider.token_endpoint,
        &form,
        Some(auth),
        &[code.expose(), request.pkce.verifier.expose()],
        &provider.scopes,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callbacks_need_the_exact_state_once() {
        assert!(matches!(
            parse_callback("/callback?code=abc&state=s1", "s1"),
            Redirect::Code(c, None) if c.expose() == "abc"
        ));
        assert!(matches!(
            parse_callback("/callback?code=abc&state=s2", "s1"),
            Redirect::WrongState
        ));
        assert!(matches!(
            parse_callback("/callback?code=abc", "s1"),
            Redirect::WrongState
        ));
        assert!(matches!(
            parse_callback("/callback?code=abc&state=s1&state=s1", "s1"),
            Redirect::WrongState
        ));
        assert!(matches!(
            parse_callback("/callback?error=access_denied&state=s1", "s1"),
            Redirect::Error(e, None) if e == "access_denied"
        ));
        assert!(matches!(
            parse_callback("/favicon.ico", "s1"),
            Redirect::Other
        ));
    }

    #[test]
    fn pages_escape_everything() {
        assert_eq!(
            html_escape("<script>\"x\"&'y'</script>"),
            "&lt;script&gt;&quot;x&quot;&amp;&#39;y&#39;&lt;/script&gt;"
        );
    }

    #[test]
    fn the_authorization_url_carries_s256_and_never_plain() {
        let r = authorization_request(
            "https://as.example.com/auth?tenant=1",
            "client",
            "http://127.0.0.1:5555/callback",
            &["openid".into(), "offline_access".into()],
            Some("https://mcp.example.com/mcp"),
        )
        .expect("builds");
        let u = reqwest::Url::parse(&r.url).expect("url");
        let q: std::collections::HashMap<_, _> = u.query_pairs().into_owned().collect();
        assert_eq!(q["tenant"], "1");
        assert_eq!(q["code_challenge_method"], "S256");
        assert_eq!(q["code_challenge"], r.pkce.challenge);
        assert_ne!(q["code_challenge"], r.pkce.verifier.expose());
        assert_eq!(q["scope"], "openid offline_access");
        assert_eq!(q["resource"], "https://mcp.example.com/mcp");
        assert_eq!(q["state"], r.state);
        assert!(!r.url.contains(r.pkce.verifier.expose()));
    }
}
