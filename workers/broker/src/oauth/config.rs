//! Provider configuration: built-in defaults merged with the user's `oauth_providers` entry,
//! then discovery (RFC 8414 / OpenID) for whatever an issuer can supply.
//!
//! Built-in defaults exist only where a provider publishes an OAuth client for third-party
//! tools. None of hanzo, anthropic and openai does today (the clients their own CLIs use belong
//! to those CLIs), so all three are configuration-only: a login needs an `oauth_providers` entry
//! naming the issuer (or endpoints) and the client id — or an issuer that allows dynamic client
//! registration.

use super::discovery::auth_server_metadata;
use super::{check_endpoint, OAuthError};
use hanzo_ipc::roles::broker::OAuthProviderConfig;
use std::time::Duration;

/// RFC 8628 §3.5: poll every 5 s when the server names no interval.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(5);

/// Everything a login needs, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedProvider {
    /// The provider's name (`hanzo`, a custom entry, or `mcp:<server>`).
    pub name: String,
    /// The authorization server's issuer, if known.
    pub issuer: Option<String>,
    /// Where the user authorizes (the browser flow needs it).
    pub authorization_endpoint: Option<String>,
    /// Where codes and refresh tokens are exchanged.
    pub token_endpoint: String,
    /// Where a device-grant login starts (the device flow needs it).
    pub device_authorization_endpoint: Option<String>,
    /// Where a client can be registered dynamically (RFC 7591).
    pub registration_endpoint: Option<String>,
    /// The client id; `None` until registered.
    pub client_id: Option<String>,
    /// A pre-registered confidential client's secret (remote MCP servers only, from a secret
    /// variable the broker holds), and how it authenticates (`client_secret_basic`, `_post`).
    pub client_secret: Option<crate::Secret>,
    /// The token endpoint authentication method of that client.
    pub client_auth_method: Option<String>,
    /// Scopes to ask for.
    pub scopes: Vec<String>,
    /// The RFC 8707 resource indicator the tokens are for.
    pub resource: Option<String>,
    /// Time between device-grant polls when the server names none.
    pub device_poll_interval: Duration,
}

/// The built-in configuration of a provider, when it publishes one (see the module comment).
pub fn builtin(_name: &str) -> Option<OAuthProviderConfig> {
    None
}

fn merge(
    base: Option<OAuthProviderConfig>,
    user: Option<&OAuthProviderConfig>,
) -> Option<OAuthProviderConfig> {
    match (base, user) {
        (None, None) => None,
        (Some(b), None) => Some(b),
        (None, Some(u)) => Some(u.clone()),
        (Some(b), Some(u)) => Some(OAuthProviderConfig {
            issuer: u.issuer.clone().or(b.issuer),
            authorization_endpoint: u
                .authorization_endpoint
                .clone()
                .or(b.authorization_endpoint),
            token_endpoint: u.token_endpoint.clone().or(b.token_endpoint),
            device_authorization_endpoint: u
                .device_authorization_endpoint
                .clone()
                .or(b.device_authorization_endpoint),
            registration_endpoint: u.registration_endpoint.clone().or(b.registration_endpoint),
            client_id: u.client_id.clone().or(b.client_id),
            scopes: if u.scopes.is_empty() {
                b.scopes
            } else {
                u.scopes.clone()
            },
            resource: u.resource.clone().or(b.resource),
            device_poll_interval_secs: u.device_poll_interval_secs.or(b.device_poll_interval_secs),
        }),
    }
}

/// Merge the built-in defaults with the user's entry and discover what the issuer supplies.
pub async fn resolve(
    http: &reqwest::Client,
    name: &str,
    user: Option<&OAuthProviderConfig>,
) -> Result<ResolvedProvider, OAuthError> {
    let Some(cfg) = merge(builtin(name), user) else {
        return Err(OAuthError::Config(format!(
            "no OAuth configuration for the provider {name:?}: add an entry \
             `oauth_providers.{name}` with `issuer` (or the endpoints) and `client_id` to the user \
             settings ($XDG_CONFIG_HOME/hanzo/settings.json). hanzo, anthropic and openai publish \
             no OAuth client for third-party tools, so they need one too; or set an API key \
             ({}).",
            hanzo_ipc::roles::model::ProviderId::parse(name)
                .unwrap_or(hanzo_ipc::roles::model::ProviderId::Hanzo)
                .env_var()
        )));
    };
    let mut out = ResolvedProvider {
        name: name.to_string(),
        issuer: cfg.issuer.clone(),
        authorization_endpoint: cfg.authorization_endpoint.clone(),
        token_endpoint: cfg.token_endpoint.clone().unwrap_or_default(),
        device_authorization_endpoint: cfg.device_authorization_endpoint.clone(),
        registration_endpoint: cfg.registration_endpoint.clone(),
        client_id: cfg.client_id.clone().filter(|c| !c.is_empty()),
        client_secret: None,
        client_auth_method: None,
        scopes: cfg.scopes.clone(),
        resource: cfg.resource.clone(),
        device_poll_interval: cfg
            .device_poll_interval_secs
            .map(|s| Duration::from_secs(u64::from(s.max(1))))
            .unwrap_or(DEFAULT_POLL_INTERVAL),
    };
    let complete = out.authorization_endpoint.is_some()
        && !out.token_endpoint.is_empty()
        && out.device_authorization_endpoint.is_some()
        && (out.client_id.is_some() || out.registration_endpoint.is_some());
    if let (Some(issuer), false) = (&cfg.issuer, complete) {
        let m = auth_server_metadata(http, issuer).await?;
        out.authorization_endpoint = out.authorization_endpoint.or(m.authorization_endpoint);
        if out.token_endpoint.is_empty() {
            out.token_endpoint = m.token_endpoint.unwrap_or_default();
        }
        out.device_authorization_endpoint = out
            .device_authorization_endpoint
            .or(m.device_authorization_endpoint);
        out.registration_endpoint = out.registration_endpoint.or(m.registration_endpoint);
    }
    if out.token_endpoint.is_empty() {
        return Err(OAuthError::Config(format!(
            "oauth_providers.{name}: no token endpoint (set `token_endpoint`, or an `issuer` \
             whose metadata names one)"
        )));
    }
    for (what, url) in [
        ("the token endpoint", Some(&out.token_endpoint)),
        (
            "the authorization endpoint",
            out.authorization_endpoint.as_ref(),
        ),
        (
            "the device authorization endpoint",
            out.device_authorization_endpoint.as_ref(),
        ),
        (
            "the registration endpoint",
            out.registration_endpoint.as_ref(),
        ),
    ] {
        if let Some(u) = url {
            check_endpoint(what, u)?;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_fields_override_builtin_ones() {
        let base = OAuthProviderConfig {
            issuer: Some("https://a".into()),
            client_id: Some("base".into()),
            scopes: vec!["x".into()],
            ..Default::default()
        };
        let user = OAuthProviderConfig {
            client_id: Some("mine".into()),
            ..Default::default()
        };
        let m = merge(Some(base), Some(&user)).expect("merged");
        assert_eq!(m.issuer.as_deref(), Some("https://a"));
        assert_eq!(m.client_id.as_deref(), Some("mine"));
        assert_eq!(m.scopes, vec!["x".to_string()]);
        assert_eq!(merge(None, None), None);
    }

    #[tokio::test]
    async fn a_provider_without_oauth_settings_is_told_its_own_key_variable() {
        let http = reqwest::Client::new();
        for (name, var) in [
            ("anthropic", "ANTHROPIC_API_KEY"),
            ("openai", "OPENAI_API_KEY"),
            ("hanzo", "HANZO_API_KEY"),
        ] {
            let Err(OAuthError::Config(msg)) = resolve(&http, name, None).await else {
                panic!("{name}: resolved without settings");
            };
            assert!(msg.contains(&format!("({var})")), "{name}: {msg}");
        }
    }
}
