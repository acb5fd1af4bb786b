//! A login, end to end, in the broker: resolve the provider, get a client (configured, or
//! registered dynamically), run the code flow or the device grant while streaming progress to the
//! CLI, and store the tokens under the credential file's lock. Only a description of what was
//! stored leaves the broker.

use super::code::{authorization_request, exchange_code, LoopbackListener};
use super::config::{resolve, ResolvedProvider};
use super::discovery::{register_client, RegisteredClient};
use super::{device, OAuthError, TokenSet};
use crate::credentials::{valid_entry_name, whole_seconds, StoredCredential};
use crate::fetch::Broker;
use crate::secret::Secret;
use hanzo_ipc::roles::broker::{AuthKind, LoginOutcome, LoginProgress, LoginRequest};
use std::time::Duration;
use tokio::sync::mpsc;

/// Where progress goes (the CLI prints it and opens the browser).
pub type Progress = mpsc::Sender<LoginProgress>;

async fn tell(progress: &Progress, item: LoginProgress) {
    // The requester going away ends the login through cancellation; nothing to do here.
    let _ = progress.send(item).await;
}

/// The client to use: the configured id, else a dynamic registration.
pub async fn client_for(
    http: &reqwest::Client,
    provider: &ResolvedProvider,
    redirect_uris: &[String],
    grant_types: &[&str],
) -> Result<RegisteredClient, OAuthError> {
    if let Some(id) = &provider.client_id {
        return Ok(RegisteredClient {
            client_id: id.clone(),
            client_secret: provider.client_secret.clone(),
            auth_method: provider.client_auth_method.clone(),
        });
    }
    let Some(reg) = &provider.registration_endpoint else {
        return Err(OAuthError::Config(format!(
            "oauth_providers.{}: no `client_id`, and the authorization server offers no dynamic \
             client registration; set `client_id` in the user settings",
            provider.name
        )));
    };
    register_client(http, reg, redirect_uris, grant_types).await
}

/// The browser flow: listener, authorization URL (streamed), redirect, code exchange.
pub async fn code_flow(
    http: &reqwest::Client,
    provider: &ResolvedProvider,
    timeout: Duration,
    progress: &Progress,
) -> Result<(TokenSet, RegisteredClient), OAuthError> {
    let Some(auth_endpoint) = provider.authorization_endpoint.clone() else {
        return Err(OAuthError::Config(format!(
            "oauth_providers.{}: no authorization endpoint (set `authorization_endpoint` or an \
             `issuer`); or use `--device`",
            provider.name
        )));
    };
    let listener = LoopbackListener::bind().await?;
    let redirect_uri = listener.redirect_uri();
    let client = client_for(
        http,
        provider,
        std::slice::from_ref(&redirect_uri),
        &["authorization_code", "refresh_token"],
    )
    .await?;
    let request = authorization_request(
        &auth_endpoint,
        &client.client_id,
        &redirect_uri,
        &provider.scopes,
        provider.resource.as_deref(),
    )?;
    tell(
        progress,
        LoginProgress::OpenBrowser {
            url: request.url.clone(),
        },
    )
    .await;
    tell(
        progress,
        LoginProgress::Waiting {
            message: format!(
                "waiting for the browser to come back to 127.0.0.1:{} (up to {} s)",
                listener.port(),
                timeout.as_secs()
            ),
        },
    )
    .await;
    let code = listener
        .wait(&request.state, provider.issuer.as_deref(), timeout)
        .await?;
    let tokens = exchange_code(http, provider, &client, &code, &request)
        .await?
        .map_err(|e| e.into_error("the code exchange", &provider.token_endpoint))?;
    Ok((tokens, client))
}

/// The device grant: codes (streamed), then polling.
pub async fn device_flow(
    http: &reqwest::Client,
    provider: &ResolvedProvider,
    timeout: Duration,
    progress: &Progress,
    pacer: &dyn device::Pacer,
) -> Result<(TokenSet, RegisteredClient), OAuthError> {
    let Some(endpoint) = provider.device_authorization_endpoint.clone() else {
        return Err(OAuthError::Config(format!(
            "oauth_providers.{}: the provider has no device authorization endpoint (set \
             `device_authorization_endpoint`, or log in without `--device`)",
            provider.name
        )));
    };
    let client = client_for(http, provider, &[], &[device::GRANT_TYPE, "refresh_token"]).await?;
    let auth = device::start(
        http,
        &endpoint,
        &client.client_id,
        &provider.scopes,
        provider.resource.as_deref(),
    )
    .await?;
    tell(
        progress,
        LoginProgress::DeviceCode {
            user_code: auth.user_code.clone(),
            verification_uri: auth.verification_uri.clone(),
            verification_uri_complete: auth
                .verification_uri_complete
                .clone()
                .filter(|u| !u.chars().any(char::is_control)),
            expires_in: auth.expires_in,
        },
    )
    .await;
    tell(
        progress,
        LoginProgress::Waiting {
            message: "waiting for the code to be approved".into(),
        },
    )
    .await;
    let tokens = device::poll(http, provider, &client.client_id, &auth, timeout, pacer).await?;
    Ok((tokens, client))
}

/// The credential-file entry for fresh tokens.
pub fn entry_for(
    tokens: &TokenSet,
    provider: &ResolvedProvider,
    client: &RegisteredClient,
) -> StoredCredential {
    let mut e = StoredCredential::default();
    e.access_token = Some(tokens.access_token.expose().to_string());
    e.refresh_token = tokens
        .refresh_token
        .as_ref()
        .map(|r| r.expose().to_string());
    e.expires_at = tokens.expires_at;
    e.scopes = tokens.scopes.clone();
    e.token_endpoint = Some(provider.token_endpoint.clone());
    e.client_id = Some(client.client_id.clone());
    e.client_secret = client
        .client_secret
        .as_ref()
        .map(|s: &Secret| s.expose().to_string());
    e.token_endpoint_auth_method = client.auth_method.clone();
    e.issuer = provider.issuer.clone();
    e.resource = provider.resource.clone();
    e
}

impl Broker {
    /// Run a login for `req.provider` and store its tokens.
    pub async fn login(
        &self,
        req: &LoginRequest,
        progress: &Progress,
    ) -> Result<LoginOutcome, OAuthError> {
        let name = req.provider.as_str();
        if !valid_entry_name(name) || name.starts_with("mcp:") {
            return Err(OAuthError::Config(format!(
                "{:?} is not a provider name (hanzo, anthropic, openai, or a name from \
                 oauth_providers: a-z 0-9 - _)",
                super::sanitize(name, &[])
            )));
        }
        // Fail before the user spends time in a browser if nothing could be stored.
        self.credential_path()?;
        let provider = resolve(self.http(), name, req.config.as_ref()).await?;
        let timeout = Duration::from_secs(u64::from(req.timeout_secs.max(1)));
        let (tokens, client) = if req.device {
            device_flow(self.http(), &provider, timeout, progress, &*self.pacer).await?
        } else {
            code_flow(self.http(), &provider, timeout, progress).await?
        };
        self.store_entry(name, entry_for(&tokens, &provider, &client))?;
        Ok(LoginOutcome {
            provider: name.to_string(),
            kind: AuthKind::OAuth,
            expires_at: tokens.expires_at.map(whole_seconds),
            scopes: tokens.scopes.clone(),
        })
    }
}
