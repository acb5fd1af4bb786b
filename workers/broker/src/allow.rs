//! The allow-list: which scheme, host and port each provider's credential may be sent to.
//! Defaults are the providers' public HTTPS APIs; more come only from trusted configuration
//! (`AllowEndpoints` from the supervisor), and plain `http` only to a loopback address.

use hanzo_ipc::roles::model::ProviderId;
use reqwest::Url;
use std::net::IpAddr;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    provider: ProviderId,
    scheme: String,
    host: String,
    port: u16,
}

/// Why a URL may not receive a credential.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AllowError {
    /// The URL does not parse or has no host.
    #[error("{url:?} is not a valid URL: {reason}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The URL carries a user name or password.
    #[error("{url:?} carries a user name or password; credentials come from the broker only")]
    UserInfo {
        /// The URL as given.
        url: String,
    },
    /// The URL is not `https://`, nor `http://` to a loopback address.
    #[error(
        "{url:?} uses {scheme}; only https is allowed, or http to a loopback address \
         (127.0.0.1, ::1, localhost)"
    )]
    Insecure {
        /// The URL as given.
        url: String,
        /// Its scheme.
        scheme: String,
    },
    /// The URL's origin is not on the provider's allow-list.
    #[error(
        "{provider} credentials may not be sent to {origin}; allowed: {allowed}. \
         To use another endpoint, configure its base URL in the settings"
    )]
    NotAllowed {
        /// The provider whose credential was to be sent.
        provider: ProviderId,
        /// The URL's origin (scheme, host, port).
        origin: String,
        /// The origins the provider's credential may go to, joined.
        allowed: String,
    },
}

fn is_loopback(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    h.eq_ignore_ascii_case("localhost") || h.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn origin_of(url: &str) -> Result<(Url, String, String, u16), AllowError> {
    let parsed = Url::parse(url).map_err(|e| AllowError::BadUrl {
        url: url.to_string(),
        reason: e.to_string(),
    })?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(AllowError::UserInfo {
            url: url.to_string(),
        });
    }
    let scheme = parsed.scheme().to_string();
    let host = parsed
        .host_str()
        .ok_or_else(|| AllowError::BadUrl {
            url: url.to_string(),
            reason: "no host".into(),
        })?
        .to_ascii_lowercase();
    let port = parsed
        .port_or_known_default()
        .ok_or_else(|| AllowError::BadUrl {
            url: url.to_string(),
            reason: "no port".into(),
        })?;
    match scheme.as_str() {
        "https" => {}
        "http" if is_loopback(&host) => {}
        _ => {
            return Err(AllowError::Insecure {
                url: url.to_string(),
                scheme,
            })
        }
    }
    Ok((parsed, scheme, host, port))
}

/// Check that `url` is `https://`, or `http://` to a loopback address, with no user info: the
/// rule for every endpoint a credential or token may be sent to (OAuth endpoints included).
pub fn check_secure_url(url: &str) -> Result<Url, AllowError> {
    origin_of(url).map(|(u, ..)| u)
}

/// Which origins each provider's credential may be sent to: the provider table's hosts over
/// https on 443 by default, plus endpoints from trusted configuration.
#[derive(Debug, Clone)]
pub struct AllowList {
    entries: Vec<Entry>,
}

impl Default for AllowList {
    fn default() -> Self {
        // The provider table's hosts, https on 443 (`hanzo_ipc::roles::providers`).
        AllowList {
            entries: ProviderId::DETECT_ORDER
                .into_iter()
                .flat_map(|p| {
                    p.info().hosts.iter().map(move |host| Entry {
                        provider: p,
                        scheme: "https".into(),
                        host: (*host).into(),
                        port: 443,
                    })
                })
                .collect(),
        }
    }
}

impl AllowList {
    /// Allow `provider`'s credential to go to the origin of `base_url`.
    pub fn allow(&mut self, provider: ProviderId, base_url: &str) -> Result<(), AllowError> {
        let (_, scheme, host, port) = origin_of(base_url)?;
        let entry = Entry {
            provider,
            scheme,
            host,
            port,
        };
        if !self.entries.contains(&entry) {
            self.entries.push(entry);
        }
        Ok(())
    }

    /// The parsed URL when `provider`'s credential may be sent there.
    pub fn check(&self, provider: ProviderId, url: &str) -> Result<Url, AllowError> {
        let (parsed, scheme, host, port) = origin_of(url)?;
        let ok = self.entries.iter().any(|e| {
            e.provider == provider && e.scheme == scheme && e.host == host && e.port == port
        });
        if ok {
            return Ok(parsed);
        }
        let allowed = self
            .entries
            .iter()
            .filter(|e| e.provider == provider)
            .map(|e| format!("{}://{}:{}", e.scheme, e.host, e.port))
            .collect::<Vec<_>>()
            .join(", ");
        Err(AllowError::NotAllowed {
            provider,
            origin: format!("{scheme}://{host}:{port}"),
            allowed,
        })
    }
}
