//! The device authorization grant (RFC 8628): ask for a device and user code, show the user
//! code and verification URI, then poll the token endpoint at `interval` (5 s when the server
//! names none): `authorization_pending` keeps polling, `slow_down` adds 5 s to the interval,
//! `access_denied` and `expired_token` end the login with a clear message. Waiting goes through
//! a [`Pacer`], so tests need not sleep real seconds.

use super::config::ResolvedProvider;
use super::token::{parse_token, post_form};
use super::{sanitize, OAuthError, TokenSet};
use crate::secret::Secret;
use serde::Deserialize;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// The `grant_type` of a device-code token request (RFC 8628 §3.4).
pub const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:device_code";
/// RFC 8628 §3.5: `slow_down` adds this to the interval.
pub const SLOW_DOWN_STEP: Duration = Duration::from_secs(5);

/// How the poll loop waits.
pub trait Pacer: Send + Sync {
    /// A future that completes after `d`.
    fn sleep(&self, d: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// Real time.
pub struct RealPacer;

impl Pacer for RealPacer {
    fn sleep(&self, d: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(tokio::time::sleep(d))
    }
}

/// The device authorization response (RFC 8628 §3.2).
#[derive(Deserialize)]
pub struct DeviceAuthorization {
    /// The code the client polls with; a secret, zeroized on drop.
    pub device_code: String,
    /// The code the user types in.
    pub user_code: String,
    /// Where the user types it.
    pub verification_uri: String,
    /// A URL with the code filled in, when the server offers one.
    #[serde(default)]
    pub verification_uri_complete: Option<String>,
    /// Seconds until the codes expire.
    pub expires_in: u64,
    /// Seconds between polls, when the server names it.
    #[serde(default)]
    pub interval: Option<u64>,
}

impl Drop for DeviceAuthorization {
    fn drop(&mut self) {
        use zeroize::Zeroize;
        self.device_code.zeroize();
    }
}

/// Ask for a device code.
pub async fn start(
    http: &reqwest::Client,
    endpoint: &str,
    client_id: &str,
    scopes: &[String],
    resource: Option<&str>,
) -> Result<DeviceAuthorization, OAuthError> {
    const WHAT: &str = "the device authorization request";
    let joined = scopes.join(" ");
    let mut form: Vec<(&str, &str)> = vec![("client_id", client_id)];
    if !scopes.is_empty() {
        form.push(("scope", &joined));
    }
    if let Some(r) = resource {
        form.push(("resource", r));
    }
    let answer = post_form(http, WHAT, endpoint, &form, &[]).await?;
    if let Some(e) = answer.error(&[]) {
        return Err(e.into_error(WHAT, endpoint));
    }
    let d: DeviceAuthorization = answer.parse(WHAT, endpoint)?;
    // The user code and URI are shown in a terminal: refuse control characters outright.
    if d.user_code.chars().any(char::is_control)
        || d.verification_uri.chars().any(char::is_control)
        || d.user_code.is_empty()
    {
        return Err(OAuthError::Malformed {
            what: WHAT,
            url: sanitize(endpoint, &[]),
            detail: "the user code or verification URI contains control characters".into(),
        });
    }
    super::check_endpoint("the verification URI", &d.verification_uri)?;
    Ok(d)
}

/// Poll until the user approves, denies, or the code expires. The provider's poll interval is used
/// when the server named none; `timeout` bounds the whole wait. Time is counted in the pacer's sleeps.
pub async fn poll(
    http: &reqwest::Client,
    provider: &ResolvedProvider,
    client_id: &str,
    auth: &DeviceAuthorization,
    timeout: Duration,
    pacer: &dyn Pacer,
) -> Result<TokenSet, OAuthError> {
    let token_endpoint = provider.token_endpoint.as_str();
    let default_interval = provider.device_poll_interval;
    let requested = provider.scopes.as_slice();
    const WHAT: &str = "the device token request";
    let device_code = Secret::new(auth.device_code.as_str());
    let mut interval = auth
        .interval
        .map(Duration::from_secs)
        .unwrap_or(default_interval);
    let expires = Duration::from_secs(auth.expires_in);
    let limit = expires.min(timeout);
    let mut waited = Duration::ZERO;
    loop {
        if waited >= limit {
            return Err(if waited >= expires {
                OAuthError::Expired
            } else {
                OAuthError::Timeout {
                    secs: timeout.as_secs(),
                }
            });
        }
        pacer.sleep(interval).await;
        waited += interval;
        // Device clients are public (RFC 8628 §3.4): the id goes in the form.
        let form = [
            ("grant_type", GRANT_TYPE),
            ("device_code", device_code.expose()),
            ("client_id", client_id),
        ];
        let answer = post_form(http, WHAT, token_endpoint, &form, &[device_code.expose()]).await?;
        match answer.error(&[device_code.expose()]) {
            None => return parse_token(&answer, WHAT, token_endpoint, requested),
            Some(e) => match e.error.as_str() {
                "authorization_pending" => {}
                "slow_down" => interval += SLOW_DOWN_STEP,
                "access_denied" => {
                    return Err(OAuthError::Denied {
                        description: e.description,
                    })
                }
                "expired_token" => return Err(OAuthError::Expired),
                _ => return Err(e.into_error(WHAT, token_endpoint)),
            },
        }
    }
}
