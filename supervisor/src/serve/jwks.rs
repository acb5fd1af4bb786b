//! Where the keys that verify JWTs come from: a JWKS file (`--jwks FILE`, read for each token,
//! so replacing the file rotates the keys), or the issuer's published key set fetched through
//! the broker (`--jwks-url URL`, or OpenID discovery from `--jwt-issuer`), cached here.
//!
//! The server process never opens a socket to the issuer: it asks the broker
//! (`Request::FetchJwks`), which enforces https (or loopback http), no redirects, a size cap and
//! a timeout. A token whose `kid` is not in the cached set triggers one refetch, at most once per
//! [`REFETCH_INTERVAL`] (so a flood of made-up kids cannot turn into a flood of fetches); a kid
//! still unknown after it is refused. The cached set is also refreshed when it is older than
//! [`MAX_AGE`], so a key the issuer withdrew stops working.

use super::jwt::{Jwks, JwtError};
use crate::worker::WorkerHandle;
use hanzo_ipc::roles::broker::{BrokerProtocol, JwksFetch, Request, Response};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The shortest time between two refetches caused by an unknown `kid`.
pub const REFETCH_INTERVAL: Duration = Duration::from_secs(30);
/// A cached key set older than this is fetched again before it is used.
pub const MAX_AGE: Duration = Duration::from_secs(15 * 60);
/// How long the broker may take for each document.
const FETCH_TIMEOUT_MS: u64 = 10_000;

/// The keys a [`super::jwt::JwtConfig`] verifies against.
#[derive(Debug)]
pub enum KeySource {
    /// A JWKS file, read for each token (`--jwks`).
    File(PathBuf),
    /// The issuer's key set, fetched through the broker and cached (`--jwks-url`, discovery).
    Broker(BrokerKeys),
}

impl KeySource {
    /// A key set holding `kid` if one can be had (see the module documentation), else the set
    /// as it is (the caller then refuses the token).
    pub async fn keys_for(&self, kid: &str) -> Result<Arc<Jwks>, JwtError> {
        match self {
            KeySource::File(path) => super::jwt::load_jwks(path).map(Arc::new),
            KeySource::Broker(b) => b.keys_for(kid).await,
        }
    }
}

/// A key set fetched through the broker, and when.
pub struct BrokerKeys {
    broker: WorkerHandle<BrokerProtocol>,
    fetch: JwksFetch,
    cache: tokio::sync::Mutex<Cached>,
}

impl std::fmt::Debug for BrokerKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerKeys")
            .field("fetch", &self.fetch)
            .finish_non_exhaustive()
    }
}

struct Cached {
    jwks: Arc<Jwks>,
    fetched: Instant,
    /// The last refetch an unknown kid caused.
    last_refetch: Option<Instant>,
    /// How many times the set was fetched (for the log).
    fetches: u64,
}

/// Why the key set could not be fetched (at start, the server refuses to run).
#[derive(Debug, thiserror::Error)]
#[error("cannot fetch the JWKS of {issuer}: {reason}")]
pub struct FetchError {
    /// The issuer whose keys were asked for.
    pub issuer: String,
    /// What failed (discovery, the fetch, the document).
    pub reason: String,
}

impl BrokerKeys {
    /// Fetch the key set once (so a wrong URL, a redirect or an unreachable issuer is reported
    /// at start) and keep it.
    pub async fn start(
        broker: WorkerHandle<BrokerProtocol>,
        issuer: String,
        jwks_uri: Option<String>,
    ) -> Result<BrokerKeys, FetchError> {
        let fetch = JwksFetch {
            issuer,
            jwks_uri,
            timeout_ms: FETCH_TIMEOUT_MS,
        };
        let (jwks, uri) = fetch_once(&broker, &fetch).await?;
        eprintln!(
            "jwks: fetched {} key(s) from {} through the broker",
            jwks.keys.len(),
            crate::term::sanitize_line_for_terminal(&uri)
        );
        Ok(BrokerKeys {
            broker,
            fetch,
            cache: tokio::sync::Mutex::new(Cached {
                jwks: Arc::new(jwks),
                fetched: Instant::now(),
                last_refetch: None,
                fetches: 1,
            }),
        })
    }

    async fn keys_for(&self, kid: &str) -> Result<Arc<Jwks>, JwtError> {
        // Held across a fetch: concurrent tokens with the same new kid cause one fetch.
        let mut c = self.cache.lock().await;
        let known = c.jwks.has_kid(kid);
        let stale = c.fetched.elapsed() >= MAX_AGE;
        let may_refetch = c
            .last_refetch
            .is_none_or(|t| t.elapsed() >= REFETCH_INTERVAL);
        if known && !stale {
            return Ok(c.jwks.clone());
        }
        if !known && !stale && !may_refetch {
            eprintln!("jwks: kid not in the key set; not refetched (one refetch per 30 s)");
            return Ok(c.jwks.clone());
        }
        match fetch_once(&self.broker, &self.fetch).await {
            Ok((jwks, _)) => {
                c.fetches += 1;
                eprintln!(
                    "jwks: refetched the key set ({} key(s); fetch {})",
                    jwks.keys.len(),
                    c.fetches
                );
                c.jwks = Arc::new(jwks);
                c.fetched = Instant::now();
            }
            // The old set stays (an outage of the issuer does not stop known keys working).
            Err(e) => eprintln!("jwks: {e}"),
        }
        if !known {
            c.last_refetch = Some(Instant::now());
        }
        Ok(c.jwks.clone())
    }
}

async fn fetch_once(
    broker: &WorkerHandle<BrokerProtocol>,
    fetch: &JwksFetch,
) -> Result<(Jwks, String), FetchError> {
    let err = |reason: String| FetchError {
        issuer: crate::term::sanitize_line_for_terminal(&fetch.issuer).into_owned(),
        reason: crate::term::sanitize_line_for_terminal(&reason).into_owned(),
    };
    let deadline = Duration::from_millis(FETCH_TIMEOUT_MS * 2) + Duration::from_secs(5);
    match broker
        .call_within(Request::FetchJwks(fetch.clone()), deadline)
        .await
    {
        Ok(Response::Jwks(doc)) => {
            let jwks: Jwks = serde_json::from_str(&doc.json)
                .map_err(|e| err(format!("the key set is not a JWKS: {e}")))?;
            Ok((jwks, doc.jwks_uri))
        }
        Ok(other) => Err(err(format!("unexpected broker reply {other:?}"))),
        Err(e) => Err(err(e.to_string())),
    }
}
