//! Where credentials come from, in order of precedence: the secret environment variables the
//! supervisor hands to the broker, `api_key` in the user settings file (a Hanzo key), and the
//! credential file `$XDG_CONFIG_HOME/hanzo/credentials.json` (0600, written atomically).

use crate::secret::Secret;
use hanzo_ipc::roles::broker::{
    AuthEntry, AuthKind, AuthStatusReport, CredentialReport, CredentialSource,
};
use hanzo_ipc::roles::model::ProviderId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use thiserror::Error;
use zeroize::Zeroize;

/// The credential file's name inside the config directory.
pub const CREDENTIALS_FILE: &str = "credentials.json";
/// Larger credential files are refused rather than read.
const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// How a credential is presented to the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialKind {
    /// An API key, sent in the provider's key header.
    ApiKey,
    /// An OAuth access token, sent as `Authorization: Bearer`.
    AccessToken,
}

/// One credential the broker holds for a provider.
#[derive(Debug, Clone)]
pub struct Credential {
    /// The value; never leaves the broker except in the request it authorizes.
    pub secret: Secret,
    /// How it is presented to the provider.
    pub kind: CredentialKind,
    /// Where it came from.
    pub source: CredentialSource,
    /// Refresh state, for OAuth access tokens from the credential file.
    pub oauth: Option<OAuthState>,
}

/// One entry in `credentials.json`: an API key, or OAuth tokens with what is needed to refresh
/// them (the token endpoint and client that issued them, so a refresh always goes back to the
/// authorization server that issued the refresh token).
#[derive(Clone, Default, Serialize, Deserialize)]
pub struct StoredCredential {
    /// A static API key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// An OAuth access token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_token: Option<String>,
    /// The OAuth refresh token, if the server issued one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// Seconds since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<f64>,
    /// The scopes granted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// The token endpoint that issued the tokens (refreshes go back to it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_endpoint: Option<String>,
    /// The OAuth client the tokens were issued to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// Only for a dynamically registered confidential client (RFC 7591).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// How that client authenticates at the token endpoint (`client_secret_basic`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_endpoint_auth_method: Option<String>,
    /// The authorization server's issuer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// RFC 8707 resource the tokens are for (remote MCP servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
}

impl StoredCredential {
    /// An entry holding only the API key `key`.
    pub fn from_api_key(key: impl Into<String>) -> Self {
        let mut c = StoredCredential::default();
        c.api_key = Some(key.into());
        c
    }

    /// An entry holding only the access token `token` (no refresh).
    pub fn from_access_token(token: impl Into<String>) -> Self {
        let mut c = StoredCredential::default();
        c.access_token = Some(token.into());
        c
    }
}

impl Drop for StoredCredential {
    fn drop(&mut self) {
        for s in [
            &mut self.api_key,
            &mut self.access_token,
            &mut self.refresh_token,
            &mut self.client_secret,
        ]
        .into_iter()
        .flatten()
        {
            s.zeroize();
        }
    }
}

impl std::fmt::Debug for StoredCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoredCredential([redacted])")
    }
}

/// `credentials.json`: entries keyed by provider name (`hanzo`, `anthropic`, `openai`).
pub type CredentialFile = BTreeMap<String, StoredCredential>;

/// Why `credentials.json` was refused.
#[derive(Debug, Error)]
pub enum CredentialFileError {
    /// Group or others may read or write it.
    #[error(
        "{path}: refused because it is readable or writable by group or others (mode {mode:o}); \
         run `chmod 600 {path}`"
    )]
    TooOpen {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    // serde_json messages can quote values from the file, so only the position is reported.
    /// It is not valid JSON of the expected shape (its content is never shown: it holds secrets).
    #[error(
        "{path}:{line}:{column}: refused because it is not a valid credential file ({category}); \
         fix or remove it (it holds secrets, so its content is not shown)"
    )]
    Corrupt {
        /// The file.
        path: String,
        /// The line of the error, from 1.
        line: usize,
        /// The column of the error, from 1.
        column: usize,
        /// What kind of error (`malformed JSON`, `truncated JSON`, `unexpected structure`).
        category: &'static str,
    },
    /// It is larger than 1 MiB.
    #[error("{path}: refused because it is larger than {MAX_FILE_BYTES} bytes")]
    TooLarge {
        /// The file.
        path: String,
    },
    /// It could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CredentialFileError + '_ {
    move |source| CredentialFileError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Read `path`; `Ok(None)` when it does not exist.
pub fn read_credential_file(path: &Path) -> Result<Option<CredentialFile>, CredentialFileError> {
    let mut file = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(path)(e)),
    };
    // Checked on the open file, so the file that is read is the file that was checked.
    let meta = file.metadata().map_err(io_err(path))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(CredentialFileError::TooOpen {
            path: path.display().to_string(),
            mode,
        });
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(CredentialFileError::TooLarge {
            path: path.display().to_string(),
        });
    }
    let mut text = zeroize::Zeroizing::new(String::new());
    file.read_to_string(&mut text).map_err(io_err(path))?;
    serde_json::from_str(&text).map(Some).map_err(|e| {
        let category = match e.classify() {
            serde_json::error::Category::Syntax => "malformed JSON",
            serde_json::error::Category::Eof => "truncated JSON",
            serde_json::error::Category::Data => "unexpected structure",
            serde_json::error::Category::Io => "read error",
        };
        CredentialFileError::Corrupt {
            path: path.display().to_string(),
            line: e.line(),
            column: e.column(),
            category,
        }
    })
}

pub use crate::store::write_credential_file;

/// Only the secret part of the user settings file; everything else in it is the supervisor's.
#[derive(Deserialize)]
struct UserSettingsSecrets {
    #[serde(default)]
    api_key: Option<String>,
}

impl Drop for UserSettingsSecrets {
    fn drop(&mut self) {
        if let Some(k) = &mut self.api_key {
            k.zeroize();
        }
    }
}

/// What the broker needs to renew an OAuth access token.
#[derive(Debug, Clone, Default)]
pub struct OAuthState {
    /// The refresh token, if one was issued.
    pub refresh_token: Option<Secret>,
    /// Seconds since the epoch.
    pub expires_at: Option<f64>,
    /// The scopes granted.
    pub scopes: Vec<String>,
    /// The token endpoint to refresh at.
    pub token_endpoint: Option<String>,
    /// The client the tokens were issued to.
    pub client_id: Option<String>,
    /// The client's secret (a dynamically registered confidential client only).
    pub client_secret: Option<Secret>,
    /// The authorization server's issuer.
    pub issuer: Option<String>,
    /// The RFC 8707 resource the tokens are bound to (remote MCP servers).
    pub resource: Option<String>,
}

impl OAuthState {
    fn from_stored(entry: &StoredCredential) -> OAuthState {
        OAuthState {
            refresh_token: entry
                .refresh_token
                .as_deref()
                .filter(|t| !t.is_empty())
                .map(Secret::new),
            expires_at: entry.expires_at,
            scopes: entry.scopes.clone(),
            token_endpoint: entry.token_endpoint.clone(),
            client_id: entry.client_id.clone(),
            client_secret: entry
                .client_secret
                .as_deref()
                .filter(|t| !t.is_empty())
                .map(Secret::new),
            issuer: entry.issuer.clone(),
            resource: entry.resource.clone(),
        }
    }
}

/// The key of a remote MCP server's tokens in `credentials.json`.
pub fn mcp_key(server: &str) -> String {
    format!("mcp:{server}")
}

/// A provider or MCP entry name: lowercase letters, digits, `-` and `_` (MCP: `mcp:` + any
/// printable name without quotes).
pub fn valid_entry_name(name: &str) -> bool {
    if let Some(server) = name.strip_prefix("mcp:") {
        return !server.is_empty()
            && server.len() <= 128
            && server.chars().all(|c| c.is_ascii_graphic() && c != '"');
    }
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// Every credential the broker holds, by entry name (`hanzo`, `anthropic`, `openai`, custom
/// provider names, `mcp:<server>`).
#[derive(Debug, Default)]
pub struct CredentialStore {
    creds: BTreeMap<String, Credential>,
    warnings: Vec<String>,
    /// Tokens replaced by a refresh or removed by a logout in this process: still scrubbed from
    /// anything sent back, since a server may echo an old one.
    retired: Vec<Secret>,
}

/// How many retired secrets are kept for scrubbing.
const MAX_RETIRED: usize = 64;

impl CredentialStore {
    /// Load from `env` (a lookup, so tests need not touch the process environment) and the files
    /// in `config_dir` (`settings.json`, `credentials.json`). Problems become warnings; a refused
    /// file contributes nothing.
    pub fn load(env: impl Fn(&str) -> Option<String>, config_dir: Option<&Path>) -> Self {
        let mut store = CredentialStore::default();
        for p in ProviderId::DETECT_ORDER {
            if let Some(v) = env(p.env_var()).filter(|v| !v.trim().is_empty()) {
                store.insert(
                    p.as_str(),
                    Credential {
                        secret: Secret::new(v.trim()),
                        kind: CredentialKind::ApiKey,
                        source: CredentialSource::Env,
                        oauth: None,
                    },
                );
            }
        }
        if let Some(dir) = config_dir {
            store.load_settings(&dir.join("settings.json"));
            store.load_file(&dir.join(CREDENTIALS_FILE));
        }
        store
    }

    fn insert(&mut self, name: &str, cred: Credential) {
        // Earlier sources take precedence.
        self.creds.entry(name.to_string()).or_insert(cred);
    }

    fn load_settings(&mut self, path: &Path) {
        let text = match fs::read_to_string(path) {
            Ok(t) => zeroize::Zeroizing::new(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => {
                self.warnings.push(format!("{}: {e}", path.display()));
                return;
            }
        };
        match serde_json::from_str::<UserSettingsSecrets>(&text) {
            Ok(s) => {
                if let Some(k) = s.api_key.as_deref().filter(|k| !k.trim().is_empty()) {
                    self.insert(
                        ProviderId::Hanzo.as_str(),
                        Credential {
                            secret: Secret::new(k.trim()),
                            kind: CredentialKind::ApiKey,
                            source: CredentialSource::UserSettings,
                            oauth: None,
                        },
                    );
                }
            }
            // The supervisor reports settings errors in full; here only where, never what.
            Err(e) => self.warnings.push(format!(
                "{}:{}:{}: api_key not read (invalid settings file)",
                path.display(),
                e.line(),
                e.column()
            )),
        }
    }

    fn load_file(&mut self, path: &Path) {
        let file = match read_credential_file(path) {
            Ok(Some(f)) => f,
            Ok(None) => return,
            Err(e) => {
                self.warnings.push(e.to_string());
                return;
            }
        };
        for (name, entry) in &file {
            if !valid_entry_name(name) {
                self.warnings.push(format!(
                    "{}: entry {:?} ignored: names are hanzo, anthropic, openai, a provider \
                     name from oauth_providers (a-z 0-9 - _), or mcp:<server>",
                    path.display(),
                    name.chars()
                        .filter(|c| !c.is_control())
                        .take(64)
                        .collect::<String>()
                ));
                continue;
            }
            if let Some(cred) = credential_from_entry(entry) {
                self.insert(name, cred);
            }
        }
    }

    /// Replace (or add) what the file holds for `name`, after a login or a refresh. Values from
    /// the environment and the settings file keep precedence, as at load.
    pub fn set_from_file(&mut self, name: &str, entry: &StoredCredential) {
        if self
            .creds
            .get(name)
            .is_some_and(|c| c.source != CredentialSource::CredentialFile)
        {
            return;
        }
        let old = match credential_from_entry(entry) {
            Some(c) => self.creds.insert(name.to_string(), c),
            None => self.creds.remove(name),
        };
        if let Some(old) = old {
            self.retire(old);
        }
    }

    fn retire(&mut self, old: Credential) {
        self.retired.push(old.secret);
        if let Some(o) = old.oauth {
            self.retired.extend(o.refresh_token);
        }
        let excess = self.retired.len().saturating_sub(MAX_RETIRED);
        self.retired.drain(..excess);
    }

    /// Forget the file's credential for `name` (after a logout).
    pub fn remove_from_file(&mut self, name: &str) {
        if self
            .creds
            .get(name)
            .is_some_and(|c| c.source == CredentialSource::CredentialFile)
        {
            if let Some(old) = self.creds.remove(name) {
                self.retire(old);
            }
        }
    }

    /// The credential for provider `p`, if held.
    pub fn get(&self, p: ProviderId) -> Option<&Credential> {
        self.creds.get(p.as_str())
    }

    /// The credential stored under `name` (a custom provider, or `mcp:<server>`), if held.
    pub fn get_named(&self, name: &str) -> Option<&Credential> {
        self.creds.get(name)
    }

    /// The first provider with a credential, in the order Hanzo, Anthropic, OpenAI.
    pub fn detect(&self) -> Option<ProviderId> {
        ProviderId::DETECT_ORDER
            .into_iter()
            .find(|p| self.creds.contains_key(p.as_str()))
    }

    /// Problems met while loading; never contain a secret.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Every secret value held, to scrub from anything sent back.
    pub fn secrets(&self) -> impl Iterator<Item = &Secret> {
        self.creds
            .values()
            .flat_map(|c| {
                std::iter::once(&c.secret).chain(
                    c.oauth
                        .iter()
                        .flat_map(|o| o.refresh_token.iter().chain(o.client_secret.iter())),
                )
            })
            .chain(self.retired.iter())
    }

    /// Which providers have a credential and from where, without any value.
    pub fn report(&self) -> CredentialReport {
        CredentialReport {
            available: ProviderId::DETECT_ORDER
                .into_iter()
                .filter_map(|p| self.get(p).map(|c| (p, c.source)))
                .collect(),
            detected: self.detect(),
            warnings: self.warnings.clone(),
        }
    }

    /// `hanzo-dev auth status`: kind, source, expiry and scopes of each entry; never a value.
    pub fn status(&self) -> AuthStatusReport {
        AuthStatusReport {
            entries: self
                .creds
                .iter()
                .map(|(name, c)| AuthEntry {
                    name: name.clone(),
                    kind: match c.kind {
                        CredentialKind::ApiKey => AuthKind::ApiKey,
                        CredentialKind::AccessToken => AuthKind::OAuth,
                    },
                    source: c.source,
                    expires_at: c
                        .oauth
                        .as_ref()
                        .and_then(|o| o.expires_at)
                        .map(whole_seconds),
                    scopes: c
                        .oauth
                        .as_ref()
                        .map(|o| o.scopes.clone())
                        .unwrap_or_default(),
                    refreshable: c.oauth.as_ref().is_some_and(|o| o.refresh_token.is_some()),
                    resource: c.oauth.as_ref().and_then(|o| o.resource.clone()),
                })
                .collect(),
            detected: self.detect(),
            warnings: self.warnings.clone(),
        }
    }
}

fn credential_from_entry(entry: &StoredCredential) -> Option<Credential> {
    if let Some(k) = entry.api_key.as_deref().filter(|k| !k.is_empty()) {
        return Some(Credential {
            secret: Secret::new(k),
            kind: CredentialKind::ApiKey,
            source: CredentialSource::CredentialFile,
            oauth: None,
        });
    }
    let t = entry.access_token.as_deref().filter(|t| !t.is_empty())?;
    Some(Credential {
        secret: Secret::new(t),
        kind: CredentialKind::AccessToken,
        source: CredentialSource::CredentialFile,
        oauth: Some(OAuthState::from_stored(entry)),
    })
}

/// `$XDG_CONFIG_HOME/hanzo/credentials.json` for a config directory.
pub fn credential_path(config_dir: &Path) -> PathBuf {
    config_dir.join(CREDENTIALS_FILE)
}

/// An expiry time in seconds since the epoch, as stored (`f64`), floored to whole seconds.
#[allow(
    clippy::cast_possible_truncation,
    reason = "narrowing intended: a float-to-int `as` saturates (NaN gives 0), and every real \
              timestamp is far inside i64"
)]
pub(crate) fn whole_seconds(t: f64) -> i64 {
    t.floor() as i64
}
