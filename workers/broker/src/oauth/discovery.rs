//! Discovery: authorization-server metadata (RFC 8414, then OpenID Connect Discovery),
//! protected-resource metadata (RFC 9728) and its `WWW-Authenticate` pointer, and dynamic client
//! registration (RFC 7591).

use super::token::send;
use super::{check_endpoint, sanitize, OAuthError};
use serde::Deserialize;

/// What an authorization server publishes about itself (the fields we use).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct AuthServerMetadata {
    /// The issuer identifier; must equal the issuer the metadata was fetched for.
    pub issuer: String,
    /// Where the user authorizes.
    #[serde(default)]
    pub authorization_endpoint: Option<String>,
    /// Where codes and refresh tokens are exchanged.
    #[serde(default)]
    pub token_endpoint: Option<String>,
    /// Where a device-grant login starts (RFC 8628).
    #[serde(default)]
    pub device_authorization_endpoint: Option<String>,
    /// Where clients register dynamically (RFC 7591).
    #[serde(default)]
    pub registration_endpoint: Option<String>,
    /// PKCE methods the server accepts (`S256` is required of it).
    #[serde(default)]
    pub code_challenge_methods_supported: Option<Vec<String>>,
    /// Scopes the server knows.
    #[serde(default)]
    pub scopes_supported: Option<Vec<String>>,
    /// The server accepts an `https` URL as `client_id`, naming the client's metadata document
    /// (OAuth Client ID Metadata Documents; MCP 2025-11-25).
    #[serde(default)]
    pub client_id_metadata_document_supported: Option<bool>,
    /// How clients may authenticate at the token endpoint.
    #[serde(default)]
    pub token_endpoint_auth_methods_supported: Option<Vec<String>>,
    /// Grant types the server accepts.
    #[serde(default)]
    pub grant_types_supported: Option<Vec<String>>,
}

/// What a protected resource (a remote MCP server) publishes (RFC 9728 §2).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct ResourceMetadata {
    /// The resource identifier; must match the server's URL.
    pub resource: String,
    /// Issuers of the authorization servers that grant tokens for it.
    #[serde(default)]
    pub authorization_servers: Vec<String>,
    /// Scopes the resource knows.
    #[serde(default)]
    pub scopes_supported: Option<Vec<String>>,
    /// The server accepts an `https` URL as `client_id`, naming the client's metadata document
    /// (OAuth Client ID Metadata Documents; MCP 2025-11-25).
    #[serde(default)]
    pub client_id_metadata_document_supported: Option<bool>,
}

/// A `Bearer` challenge from `WWW-Authenticate` (RFC 6750 §3, RFC 9728 §5.1).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BearerChallenge {
    /// `resource_metadata`: where the resource's metadata is (RFC 9728 §5.1).
    pub resource_metadata: Option<String>,
    /// `scope`: the scopes the request needs.
    pub scope: Option<String>,
    /// `error`: why the token was refused (`invalid_token`, `insufficient_scope`).
    pub error: Option<String>,
}

/// Parse the `Bearer` challenge out of a `WWW-Authenticate` value (which may list several
/// schemes). `None` when there is no Bearer challenge.
pub fn parse_bearer_challenge(header: &str) -> Option<BearerChallenge> {
    let lower = header.to_ascii_lowercase();
    let mut start = None;
    let mut search = 0;
    while let Some(i) = lower[search..].find("bearer") {
        let at = search + i;
        let before_ok = at == 0 || matches!(lower.as_bytes()[at - 1], b' ' | b',');
        let after = lower.as_bytes().get(at + 6).copied();
        if before_ok && matches!(after, None | Some(b' ')) {
            start = Some(at + 6);
            break;
        }
        search = at + 6;
    }
    let mut rest = &header[start?..];
    let mut out = BearerChallenge::default();
    loop {
        rest = rest.trim_start_matches([' ', ',']);
        let Some(eq) = rest.find('=') else { break };
        let name = rest[..eq].trim().to_ascii_lowercase();
        // Another scheme starts (`Basic realm=…`): the Bearer parameters are over.
        if name.contains(' ') {
            break;
        }
        rest = &rest[eq + 1..];
        let value;
        if let Some(r) = rest.strip_prefix('"') {
            let mut v = String::new();
            let mut chars = r.char_indices();
            let mut end = r.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, n)) = chars.next() {
                            v.push(n);
                        }
                    }
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    c => v.push(c),
                }
            }
            value = v;
            rest = &r[end.min(r.len())..];
        } else {
            let end = rest.find(',').unwrap_or(rest.len());
            value = rest[..end].trim().to_string();
            rest = &rest[end..];
        }
        match name.as_str() {
            "resource_metadata" => out.resource_metadata = Some(value),
            "scope" => out.scope = Some(value),
            "error" => out.error = Some(value),
            _ => {}
        }
    }
    Some(out)
}

/// Fetch a JSON document by GET; `Ok(None)` for 404 (so the next candidate is tried).
async fn get_json<T: for<'de> Deserialize<'de>>(
    http: &reqwest::Client,
    what: &'static str,
    url: &str,
) -> Result<Option<T>, OAuthError> {
    let u = check_endpoint(what, url)?;
    let answer = send(
        http.get(u).header("accept", "application/json"),
        what,
        url,
        &[],
    )
    .await?;
    if answer.status == 404 {
        return Ok(None);
    }
    if !(200..300).contains(&answer.status) {
        return Err(OAuthError::Server {
            what,
            url: sanitize(url, &[]),
            status: answer.status,
            error: "metadata unavailable".into(),
            description: None,
        });
    }
    answer.parse(what, url).map(Some)
}

/// Candidate metadata URLs for `issuer`: RFC 8414 (`/.well-known/oauth-authorization-server`
/// inserted before the path), then OpenID Discovery both ways (inserted, appended).
pub fn auth_server_metadata_urls(issuer: &str) -> Result<Vec<String>, OAuthError> {
    let u = check_endpoint("the issuer", issuer)?;
    let origin = u.origin().ascii_serialization();
    let path = u.path().trim_end_matches('/');
    Ok(if path.is_empty() {
        vec![
            format!("{origin}/.well-known/oauth-authorization-server"),
            format!("{origin}/.well-known/openid-configuration"),
        ]
    } else {
        vec![
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
            format!("{origin}/.well-known/openid-configuration{path}"),
            format!("{origin}{path}/.well-known/openid-configuration"),
        ]
    })
}

/// Discover `issuer`'s metadata. The document must name the same issuer (RFC 8414 §3.3), and
/// must advertise S256 PKCE (its absence means no PKCE, and we do not log in without it).
pub async fn auth_server_metadata(
    http: &reqwest::Client,
    issuer: &str,
) -> Result<AuthServerMetadata, OAuthError> {
    for url in auth_server_metadata_urls(issuer)? {
        if let Some(m) =
            get_json::<AuthServerMetadata>(http, "authorization-server metadata", &url).await?
        {
            if m.issuer.trim_end_matches('/') != issuer.trim_end_matches('/') {
                return Err(OAuthError::Malformed {
                    what: "authorization-server metadata",
                    url,
                    detail: format!(
                        "it names the issuer {:?}, not {:?}",
                        sanitize(&m.issuer, &[]),
                        sanitize(issuer, &[])
                    ),
                });
            }
            let s256 = m
                .code_challenge_methods_supported
                .as_ref()
                .is_some_and(|v| v.iter().any(|x| x == "S256"));
            if !s256 {
                return Err(OAuthError::Config(format!(
                    "the authorization server {} does not advertise PKCE with S256 \
                     (code_challenge_methods_supported); hanzo-dev does not log in without it",
                    sanitize(issuer, &[])
                )));
            }
            return Ok(m);
        }
    }
    Err(OAuthError::Config(format!(
        "no authorization-server metadata found for the issuer {} (tried RFC 8414 and OpenID \
         discovery); configure its endpoints explicitly in oauth_providers",
        sanitize(issuer, &[])
    )))
}

/// MCP 2025-03-26 discovery for a server without protected-resource metadata: the RFC 8414
/// document at the MCP server's `origin`. That revision derives the URL from the server, not
/// from an issuer, so the document's `issuer` is not required to equal `origin` (its endpoints
/// are still checked by every later request); S256 PKCE still must be advertised. `Ok(None)`
/// when there is no document.
pub async fn legacy_mcp_metadata(
    http: &reqwest::Client,
    origin: &str,
) -> Result<Option<AuthServerMetadata>, OAuthError> {
    let url = format!("{origin}/.well-known/oauth-authorization-server");
    let Some(m) =
        get_json::<AuthServerMetadata>(http, "authorization-server metadata", &url).await?
    else {
        return Ok(None);
    };
    let s256 = m
        .code_challenge_methods_supported
        .as_ref()
        .is_some_and(|v| v.iter().any(|x| x == "S256"));
    if !s256 {
        return Err(OAuthError::Config(format!(
            "the authorization server at {} does not advertise PKCE with S256 \
             (code_challenge_methods_supported); hanzo-dev does not log in without it",
            sanitize(origin, &[])
        )));
    }
    Ok(Some(m))
}

/// Candidate protected-resource metadata URLs for a resource URL (RFC 9728 §3.1): with the
/// resource's path, then at the root.
pub fn resource_metadata_urls(resource_url: &str) -> Result<Vec<String>, OAuthError> {
    let u = check_endpoint("the MCP server", resource_url)?;
    let origin = u.origin().ascii_serialization();
    let path = u.path().trim_end_matches('/');
    let mut out = Vec::new();
    if !path.is_empty() {
        out.push(format!(
            "{origin}/.well-known/oauth-protected-resource{path}"
        ));
    }
    out.push(format!("{origin}/.well-known/oauth-protected-resource"));
    Ok(out)
}

/// Discover the protected resource's metadata: from the challenge's `resource_metadata` when
/// given, else the well-known paths.
pub async fn resource_metadata(
    http: &reqwest::Client,
    resource_url: &str,
    challenge: Option<&BearerChallenge>,
) -> Result<ResourceMetadata, OAuthError> {
    let candidates = match challenge.and_then(|c| c.resource_metadata.clone()) {
        Some(u) => vec![u],
        None => resource_metadata_urls(resource_url)?,
    };
    for url in candidates {
        if let Some(m) =
            get_json::<ResourceMetadata>(http, "protected-resource metadata", &url).await?
        {
            return Ok(m);
        }
    }
    Err(OAuthError::Config(format!(
        "{} asks for authorization but publishes no protected-resource metadata (RFC 9728)",
        sanitize(resource_url, &[])
    )))
}

/// The canonical resource identifier of an MCP server URL (RFC 8707, MCP authorization):
/// lowercase scheme and host, no fragment, no trailing slash.
pub fn canonical_resource(url: &str) -> Result<String, OAuthError> {
    let mut u = check_endpoint("the MCP server", url)?;
    u.set_fragment(None);
    let s = u.as_str().to_string();
    Ok(s.strip_suffix('/').map(str::to_string).unwrap_or(s))
}

/// A client registered dynamically (RFC 7591).
#[derive(Debug, Clone)]
pub struct RegisteredClient {
    /// The client id the server assigned.
    pub client_id: String,
    /// The client secret, when the server registered a confidential client.
    pub client_secret: Option<crate::Secret>,
    /// `token_endpoint_auth_method` the server registered (`none`, `client_secret_post`,
    /// `client_secret_basic`).
    pub auth_method: Option<String>,
}

#[derive(Deserialize)]
struct RawRegistration {
    client_id: String,
    #[serde(default)]
    client_secret: Option<String>,
    #[serde(default)]
    token_endpoint_auth_method: Option<String>,
}

impl Drop for RawRegistration {
    fn drop(&mut self) {
        use zeroize::Zeroize;
        if let Some(s) = &mut self.client_secret {
            s.zeroize();
        }
    }
}

/// Register a public native client with loopback redirects (RFC 7591, RFC 8252). No `scope`
/// is registered: servers refuse registrations naming scopes outside their own list (resource
/// scopes often are), and the authorization request names the scopes anyway.
pub async fn register_client(
    http: &reqwest::Client,
    registration_endpoint: &str,
    redirect_uris: &[String],
    grant_types: &[&str],
) -> Result<RegisteredClient, OAuthError> {
    const WHAT: &str = "dynamic client registration";
    let u = check_endpoint(WHAT, registration_endpoint)?;
    let body = serde_json::json!({
        "client_name": "hanzo-dev",
        "application_type": "native",
        "redirect_uris": redirect_uris,
        "grant_types": grant_types,
        "response_types": if grant_types.contains(&"authorization_code") { vec!["code"] } else { vec![] },
        "token_endpoint_auth_method": "none",
    });
    let answer = send(
        http.post(u)
            .header("accept", "application/json")
            .header("content-type", "application/json")
            .body(body.to_string()),
        WHAT,
        registration_endpoint,
        &[],
    )
    .await?;
    if let Some(e) = answer.error(&[]) {
        return Err(e.into_error(WHAT, registration_endpoint));
    }
    let raw: RawRegistration = answer.parse(WHAT, registration_endpoint)?;
    Ok(RegisteredClient {
        client_id: raw.client_id.clone(),
        client_secret: raw
            .client_secret
            .as_deref()
            .filter(|s| !s.is_empty())
            .map(crate::Secret::new),
        auth_method: raw.token_endpoint_auth_method.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_challenges_parse() {
        let c = parse_bearer_challenge(
            r#"Bearer error="insufficient_scope", scope="files:read files:write", resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource""#,
        )
        .expect("bearer");
        assert_eq!(c.error.as_deref(), Some("insufficient_scope"));
        assert_eq!(c.scope.as_deref(), Some("files:read files:write"));
        assert_eq!(
            c.resource_metadata.as_deref(),
            Some("https://mcp.example.com/.well-known/oauth-protected-resource")
        );
        let c = parse_bearer_challenge(r#"Basic realm="x", Bearer scope=read"#).expect("bearer");
        assert_eq!(c.scope.as_deref(), Some("read"));
        assert_eq!(parse_bearer_challenge("Basic realm=\"x\""), None);
        let c = parse_bearer_challenge("Bearer").expect("bare");
        assert_eq!(c, BearerChallenge::default());
        let c =
            parse_bearer_challenge(r#"Bearer realm="a\"b", error=invalid_token"#).expect("escaped");
        assert_eq!(c.error.as_deref(), Some("invalid_token"));
    }

    #[test]
    fn metadata_urls_follow_rfc_8414_and_9728() {
        assert_eq!(
            auth_server_metadata_urls("https://as.example.com/tenant1").expect("ok"),
            vec![
                "https://as.example.com/.well-known/oauth-authorization-server/tenant1",
                "https://as.example.com/.well-known/openid-configuration/tenant1",
                "https://as.example.com/tenant1/.well-known/openid-configuration",
            ]
        );
        assert_eq!(
            auth_server_metadata_urls("https://as.example.com").expect("ok"),
            vec![
                "https://as.example.com/.well-known/oauth-authorization-server",
                "https://as.example.com/.well-known/openid-configuration",
            ]
        );
        assert_eq!(
            resource_metadata_urls("https://mcp.example.com/mcp").expect("ok"),
            vec![
                "https://mcp.example.com/.well-known/oauth-protected-resource/mcp",
                "https://mcp.example.com/.well-known/oauth-protected-resource",
            ]
        );
        assert!(auth_server_metadata_urls("http://as.example.com").is_err());
        assert_eq!(
            canonical_resource("HTTPS://MCP.Example.com/mcp/#x").expect("ok"),
            "https://mcp.example.com/mcp"
        );
    }
}
