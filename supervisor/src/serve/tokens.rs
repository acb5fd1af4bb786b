//! Bearer tokens of the local agents API: `hanzo-dev serve token create --org ORG` prints a
//! token once; only its SHA-256 is kept, in `{data_dir}/serve/tokens.json` (mode 0600, replaced
//! atomically, never written through a link). A token names exactly one org, and that org is the
//! only one its bearer can see.
//!
//! A token is `hzd_` and 32 bytes from the operating system's CSPRNG in unpadded base64url. Its
//! id (what `token list` shows and `token revoke` takes) is the first 12 hex digits of its hash,
//! which says nothing about the token itself. The file is read again for every request, so a
//! revocation takes effect at once, without restarting the server.

use crate::userfile::{write_user_file, PRIVATE};
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// What every token starts with (so a leaked one is recognisable by secret scanners).
pub const TOKEN_PREFIX: &str = "hzd_";

/// One issued token, as stored: never the token itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenEntry {
    /// The first 12 hex digits of the hash.
    pub id: String,
    /// The org the token acts for.
    pub org: String,
    /// Lowercase hex SHA-256 of the whole token text.
    pub sha256: String,
    /// Milliseconds since the Unix epoch.
    pub created_ms: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct TokenFile {
    version: u32,
    tokens: Vec<TokenEntry>,
}

/// Why the token file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file exists but could not be read.
    #[error("cannot read the token file {path}: {source}")]
    Read {
        /// The token file.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not the JSON this server writes.
    #[error("the token file {path} is malformed: {why}")]
    Malformed {
        /// The token file.
        path: PathBuf,
        /// What the parser said.
        why: String,
    },
    /// The file could not be replaced (the reason).
    #[error("cannot write the token file: {0}")]
    Write(String),
    /// The directory for the file could not be created.
    #[error("cannot create {path}: {source}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// No random bytes for a new token (the reason).
    #[error("the operating system's random source failed: {0}")]
    Random(String),
    /// No issued token has this id.
    #[error("no token with id {0:?} (`hanzo-dev serve token list` shows them)")]
    UnknownId(String),
}

/// The authenticated caller: the org is the only thing a request is allowed to see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The org whose store the request may open, and no other.
    pub org: String,
    /// The token's id, for the log.
    pub token_id: String,
    /// When (seconds since the epoch) the principal stops being valid: a JWT's `exp` plus the
    /// leeway; `None` for our own tokens. A bridge connection is closed then.
    pub expires: Option<u64>,
    /// One of our own tokens, which `token revoke` can withdraw while a connection made with it
    /// is open (the bridge checks [`TokenStore::still_issued`]); a JWT is not (it expires).
    pub revocable: bool,
}

/// The token file of a data directory.
#[derive(Debug, Clone)]
pub struct TokenStore {
    path: PathBuf,
}

fn hash_hex(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Equal without an early exit (the hashes are not secret, but this costs nothing).
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

impl TokenStore {
    /// The token file under `data_dir` (the run store's data directory).
    pub fn in_data_dir(data_dir: &Path) -> TokenStore {
        TokenStore {
            path: data_dir.join("serve").join("tokens.json"),
        }
    }

    /// Where the hashes are kept.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn load(&self) -> Result<TokenFile, TokenError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(TokenFile::default()),
            Err(source) => {
                return Err(TokenError::Read {
                    path: self.path.clone(),
                    source,
                })
            }
        };
        serde_json::from_str(&text).map_err(|e| TokenError::Malformed {
            path: self.path.clone(),
            why: e.to_string(),
        })
    }

    fn save(&self, file: &TokenFile) -> Result<(), TokenError> {
        let dir = self.path.parent().expect("the token file has a directory");
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|source| TokenError::Dir {
                    path: dir.to_path_buf(),
                    source,
                })?;
        }
        let mut text = serde_json::to_string_pretty(file).expect("token entries serialize");
        text.push('\n');
        write_user_file(&self.path, text.as_bytes(), PRIVATE, None)
            .map_err(|e| TokenError::Write(e.to_string()))
    }

    /// Issue a token for `org` (already validated); returns the token text (shown once) and its
    /// entry.
    pub fn create(&self, org: &str) -> Result<(String, TokenEntry), TokenError> {
        let mut raw = [0u8; 32];
        getrandom::getrandom(&mut raw).map_err(|e| TokenError::Random(e.to_string()))?;
        let token = format!(
            "{TOKEN_PREFIX}{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
        );
        let sha256 = hash_hex(&token);
        let entry = TokenEntry {
            id: sha256[..12].to_string(),
            org: org.to_string(),
            sha256,
            created_ms: now_ms(),
        };
        let mut file = self.load()?;
        file.version = 1;
        file.tokens.push(entry.clone());
        self.save(&file)?;
        Ok((token, entry))
    }

    /// Every issued token, oldest first.
    pub fn list(&self) -> Result<Vec<TokenEntry>, TokenError> {
        Ok(self.load()?.tokens)
    }

    /// Remove the token with `id`.
    pub fn revoke(&self, id: &str) -> Result<TokenEntry, TokenError> {
        let mut file = self.load()?;
        let Some(pos) = file.tokens.iter().position(|t| t.id == id) else {
            return Err(TokenError::UnknownId(id.to_string()));
        };
        let gone = file.tokens.remove(pos);
        file.version = 1;
        self.save(&file)?;
        Ok(gone)
    }

    /// The principal a presented token stands for, if it is one we issued (and not revoked).
    pub fn verify(&self, presented: &str) -> Result<Option<Principal>, TokenError> {
        if !presented.starts_with(TOKEN_PREFIX) || presented.len() > 256 {
            return Ok(None);
        }
        let hash = hash_hex(presented);
        let file = self.load()?;
        Ok(file
            .tokens
            .iter()
            .find(|t| same(&t.sha256, &hash))
            .filter(|t| hanzo_store::validate_org(&t.org).is_ok())
            .map(|t| Principal {
                org: t.org.clone(),
                token_id: t.id.clone(),
                expires: None,
                revocable: true,
            }))
    }

    /// Whether the token `p` was authenticated with is still issued (not revoked since): its id
    /// is still in the file, for the same org. Read from the file each time, as [`Self::verify`].
    pub fn still_issued(&self, p: &Principal) -> Result<bool, TokenError> {
        Ok(self
            .load()?
            .tokens
            .iter()
            .any(|t| t.id == p.token_id && t.org == p.org))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_stored_hashed_verify_to_their_org_and_revoke() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = TokenStore::in_data_dir(dir.path());
        let (a, entry_a) = store.create("org-a").expect("create");
        let (b, _) = store.create("org-b").expect("create");
        assert!(a.starts_with(TOKEN_PREFIX));
        assert_eq!(a.len(), TOKEN_PREFIX.len() + 43);
        assert_ne!(a, b);
        let text = std::fs::read_to_string(store.path()).expect("file");
        assert!(!text.contains(&a) && !text.contains(&a[TOKEN_PREFIX.len()..]));
        assert!(text.contains(&entry_a.sha256));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(store.path())
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            store.verify(&a).expect("verify").expect("known").org,
            "org-a"
        );
        assert_eq!(
            store.verify(&b).expect("verify").expect("known").org,
            "org-b"
        );
        // One character off, a prefix, the hash itself: none is a token.
        let mut off = a.clone();
        off.pop();
        off.push(if a.ends_with('A') { 'B' } else { 'A' });
        for bad in [off.as_str(), &a[..20], entry_a.sha256.as_str(), ""] {
            assert!(store.verify(bad).expect("verify").is_none(), "{bad}");
        }
        let pa = store.verify(&a).expect("verify").expect("known");
        assert!(pa.revocable);
        assert!(store.still_issued(&pa).expect("read"));
        store.revoke(&entry_a.id).expect("revoke");
        assert!(!store.still_issued(&pa).expect("read"));
        assert!(store.verify(&a).expect("verify").is_none());
        assert!(store.verify(&b).expect("verify").is_some());
        assert!(matches!(
            store.revoke(&entry_a.id),
            Err(TokenError::UnknownId(_))
        ));
        assert_eq!(store.list().expect("list").len(), 1);
    }
}
