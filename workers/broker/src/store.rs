//! The credential file on disk: atomic replacement and the lock around read-modify-write.
//!
//! A write never leaves a torn file and never a window with wider permissions: the new content
//! goes to a temporary file created in the same directory with `O_CREAT|O_EXCL|O_NOFOLLOW` and
//! mode 0600, is fsynced, renamed over the file, and the directory is fsynced. Every
//! read-modify-write (login, logout, a token refresh) holds an exclusive `flock` on the sibling
//! `credentials.json.lock`, so two processes refreshing at once cannot lose a rotated refresh
//! token: the second one, once it holds the lock, reads what the first wrote.

use crate::credentials::{read_credential_file, CredentialFile, CredentialFileError};
use nix::fcntl::{Flock, FlockArg};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Temporary files are named `.credentials.json.<random>.tmp` beside the file.
const TMP_PREFIX: &str = ".credentials.json.";
const TMP_SUFFIX: &str = ".tmp";

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CredentialFileError + '_ {
    move |source| CredentialFileError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// The lock file beside `path` (`credentials.json.lock`).
pub fn lock_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_else(|| "credentials.json".into());
    name.push(".lock");
    parent(path).join(name)
}

fn ensure_dir(dir: &Path) -> Result<(), CredentialFileError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_err(dir))
}

/// Write `creds` to `path` atomically (see the module comment). Callers that read the file first
/// must hold a [`StoreLock`]; [`update`] does both.
pub fn write_credential_file(
    path: &Path,
    creds: &CredentialFile,
) -> Result<(), CredentialFileError> {
    let dir = parent(path);
    ensure_dir(dir)?;
    let mut bytes = zeroize::Zeroizing::new(
        serde_json::to_vec_pretty(creds).expect("a map of strings always serializes"),
    );
    bytes.push(b'\n');
    let suffix = crate::pkce::random_bytes(8)
        .map_err(|e| io_err(dir)(std::io::Error::other(e.to_string())))?
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>();
    let tmp = dir.join(format!("{TMP_PREFIX}{suffix}{TMP_SUFFIX}"));
    let written = (|| {
        // Mode 0600 from creation (the umask can only narrow it); never follows a planted link.
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(io_err(path)(e));
    }
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))?;
    Ok(())
}

/// An exclusive `flock` on `credentials.json.lock`, held until dropped.
pub struct StoreLock {
    path: PathBuf,
    _lock: Flock<fs::File>,
}

impl StoreLock {
    /// Block until this process holds the lock for the credential file at `path`.
    pub fn acquire(path: &Path) -> Result<StoreLock, CredentialFileError> {
        ensure_dir(parent(path))?;
        let lp = lock_path(path);
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&lp)
            .map_err(io_err(&lp))?;
        let lock = Flock::lock(file, FlockArg::LockExclusive)
            .map_err(|(_, errno)| io_err(&lp)(std::io::Error::from(errno)))?;
        Ok(StoreLock {
            path: path.to_path_buf(),
            _lock: lock,
        })
    }

    /// [`StoreLock::acquire`] without blocking the async runtime.
    pub async fn acquire_async(path: &Path) -> Result<StoreLock, CredentialFileError> {
        let p = path.to_path_buf();
        tokio::task::spawn_blocking(move || StoreLock::acquire(&p))
            .await
            .unwrap_or_else(|e| {
                Err(io_err(path)(std::io::Error::other(format!(
                    "the lock task failed: {e}"
                ))))
            })
    }

    /// The file's current content (empty when it does not exist yet).
    pub fn read(&self) -> Result<CredentialFile, CredentialFileError> {
        Ok(read_credential_file(&self.path)?.unwrap_or_default())
    }

    /// Replace the file's content, and remove temporary files a killed writer left behind (only
    /// a lock holder writes, so none of them is in use).
    pub fn write(&self, creds: &CredentialFile) -> Result<(), CredentialFileError> {
        write_credential_file(&self.path, creds)?;
        remove_stale_temporaries(parent(&self.path));
        Ok(())
    }
}

fn remove_stale_temporaries(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(TMP_PREFIX) && name.ends_with(TMP_SUFFIX) {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// Read-modify-write under the lock: `f` changes the file's content; it is written only if `f`
/// returns `Ok`. A refused file (too open, corrupt) is an error, never overwritten.
pub fn update<T, E>(
    path: &Path,
    f: impl FnOnce(&mut CredentialFile) -> Result<T, E>,
) -> Result<Result<T, E>, CredentialFileError> {
    let lock = StoreLock::acquire(path)?;
    let mut file = lock.read()?;
    match f(&mut file) {
        Ok(v) => {
            lock.write(&file)?;
            Ok(Ok(v))
        }
        Err(e) => Ok(Err(e)),
    }
}
