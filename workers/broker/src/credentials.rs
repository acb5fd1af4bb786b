//! Where credentials come from, in order of precedence: the secret environment variables the
//! supervisor hands to the broker, `api_key` in the user settings file (a Hanzo key), and the
//! credential file `$XDG_CONFIG_HOME/hanzo/credentials.json` (0600, written atomically).

use crate::secret::Secret;
use hanzo_ipc::roles::broker::{CredentialReport, CredentialSource};
use hanzo_ipc::roles::model::ProviderId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
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

#[derive(Debug, Clone)]
pub struct Credential {
    pub secret: Secret,
    pub kind: CredentialKind,
    pub source: CredentialSource,
}

/// One provider's entry in `credentials.json`.
#[derive(Clone, Default, Serialize, Deserialize)]
pub struct StoredCredential {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// Seconds since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<f64>,
}

impl StoredCredential {
    pub fn from_api_key(key: impl Into<String>) -> Self {
        StoredCredential {
            api_key: Some(key.into()),
            access_token: None,
            refresh_token: None,
            expires_at: None,
        }
    }

    pub fn from_access_token(token: impl Into<String>) -> Self {
        StoredCredential {
            api_key: None,
            access_token: Some(token.into()),
            refresh_token: None,
            expires_at: None,
        }
    }
}

impl Drop for StoredCredential {
    fn drop(&mut self) {
        for s in [
            &mut self.api_key,
            &mut self.access_token,
            &mut self.refresh_token,
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

#[derive(Debug, Error)]
pub enum CredentialFileError {
    #[error(
        "{path}: refused because it is readable or writable by group or others (mode {mode:o}); \
         run `chmod 600 {path}`"
    )]
    TooOpen { path: String, mode: u32 },
    // serde_json messages can quote values from the file, so only the position is reported.
    #[error(
        "{path}:{line}:{column}: refused because it is not a valid credential file ({category}); \
         fix or remove it (it holds secrets, so its content is not shown)"
    )]
    Corrupt {
        path: String,
        line: usize,
        column: usize,
        category: &'static str,
    },
    #[error("{path}: refused because it is larger than {MAX_FILE_BYTES} bytes")]
    TooLarge { path: String },
    #[error("{path}: {source}")]
    Io {
        path: String,
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

/// Write `creds` to `path` atomically: an exclusive 0600 temporary file in the same directory,
/// written and fsynced, renamed over `path`, then the directory fsynced. A crash leaves either the
/// old file or the new one, never a torn one.
pub fn write_credential_file(
    path: &Path,
    creds: &CredentialFile,
) -> Result<(), CredentialFileError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_err(dir))?;
    let mut bytes = zeroize::Zeroizing::new(
        serde_json::to_vec_pretty(creds).expect("a map of strings always serializes"),
    );
    bytes.push(b'\n');
    // tempfile opens with O_CREAT|O_EXCL and mode 0600.
    let mut tmp = tempfile::Builder::new()
        .prefix(".credentials.")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(io_err(dir))?;
    tmp.as_file()
        .set_permissions(fs::Permissions::from_mode(0o600))
        .map_err(io_err(tmp.path()))?;
    tmp.write_all(&bytes).map_err(io_err(path))?;
    tmp.as_file().sync_all().map_err(io_err(path))?;
    tmp.persist(path).map_err(|e| io_err(path)(e.error))?;
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))?;
    Ok(())
}

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

/// Every credential the broker holds.
#[derive(Debug, Default)]
pub struct CredentialStore {
    creds: BTreeMap<ProviderId, Credential>,
    warnings: Vec<String>,
}

impl CredentialStore {
    /// Load from `env` (a lookup, so tests need not touch the process environment) and the files
    /// in `config_dir` (`settings.json`, `credentials.json`). Problems become warnings; a refused
    /// file contributes nothing.
    pub fn load(env: impl Fn(&str) -> Option<String>, config_dir: Option<&Path>) -> Self {
        let mut store = CredentialStore::default();
        for p in ProviderId::DETECT_ORDER {
            if let Some(v) = env(p.env_var()).filter(|v| !v.trim().is_empty()) {
                store.insert(
                    p,
                    Secret::new(v.trim()),
                    CredentialKind::ApiKey,
                    CredentialSource::Env,
                );
            }
        }
        if let Some(dir) = config_dir {
            store.load_settings(&dir.join("settings.json"));
            store.load_file(&dir.join(CREDENTIALS_FILE));
        }
        store
    }

    fn insert(
        &mut self,
        p: ProviderId,
        secret: Secret,
        kind: CredentialKind,
        source: CredentialSource,
    ) {
        // Earlier sources take precedence.
        self.creds.entry(p).or_insert(Credential {
            secret,
            kind,
            source,
        });
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
                        ProviderId::Hanzo,
                        Secret::new(k.trim()),
                        CredentialKind::ApiKey,
                        CredentialSource::UserSettings,
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
            let Some(p) = ProviderId::parse(name) else {
                self.warnings.push(format!(
                    "{}: unknown provider {name:?} ignored (known: hanzo, anthropic, openai)",
                    path.display()
                ));
                continue;
            };
            if let Some(k) = entry.api_key.as_deref().filter(|k| !k.is_empty()) {
                self.insert(
                    p,
                    Secret::new(k),
                    CredentialKind::ApiKey,
                    CredentialSource::CredentialFile,
                );
            } else if let Some(t) = entry.access_token.as_deref().filter(|t| !t.is_empty()) {
                self.insert(
                    p,
                    Secret::new(t),
                    CredentialKind::AccessToken,
                    CredentialSource::CredentialFile,
                );
            }
        }
    }

    pub fn get(&self, p: ProviderId) -> Option<&Credential> {
        self.creds.get(&p)
    }

    /// The first provider with a credential, in the order Hanzo, Anthropic, OpenAI.
    pub fn detect(&self) -> Option<ProviderId> {
        ProviderId::DETECT_ORDER
            .into_iter()
            .find(|p| self.creds.contains_key(p))
    }

    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Every secret value held, to scrub from anything sent back.
    pub fn secrets(&self) -> impl Iterator<Item = &Secret> {
        self.creds.values().map(|c| &c.secret)
    }

    pub fn report(&self) -> CredentialReport {
        CredentialReport {
            available: self.creds.iter().map(|(p, c)| (*p, c.source)).collect(),
            detected: self.detect(),
            warnings: self.warnings.clone(),
        }
    }
}

/// `$XDG_CONFIG_HOME/hanzo/credentials.json` for a config directory.
pub fn credential_path(config_dir: &Path) -> PathBuf {
    config_dir.join(CREDENTIALS_FILE)
}
