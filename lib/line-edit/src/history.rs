//! The input history, persisted per workspace.
//!
//! The supervisor writes this file on the user's behalf, possibly somewhere a model's commands
//! could have reached, so saving never follows a planted symlink: the directory is opened with
//! `O_NOFOLLOW`, the new content goes to a create-exclusive temporary file in it (`O_EXCL |
//! O_NOFOLLOW`, mode 0600), is fsynced, and is renamed over the target relative to that
//! directory; a target that is a symlink (or anything but a regular file) is refused. Loading
//! refuses symlinks and non-regular files too (a FIFO would hang the UI) and reads a bounded
//! amount.
//!
//! Format: a header line, then one entry per line with `\` `\n` `\r` escaped (`\\`, `\n`, `\r`)
//! and a leading `#` written `\#` (lines starting with `#` are comments).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use nix::fcntl::{openat, renameat, OFlag};
use nix::sys::stat::{fstatat, Mode, SFlag};

/// The most entries kept (the oldest go first).
pub const DEFAULT_MAX_ENTRIES: usize = 1000;
/// The largest entry kept, in bytes; a bigger one (a huge paste) is not recorded.
pub const DEFAULT_MAX_ENTRY_BYTES: usize = 8 * 1024;

const HEADER: &str = "# hanzo-dev input history v1";

/// Why the history could not be loaded or saved. Messages name the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The file is a symbolic link, which could point anywhere.
    #[error("input history {path}: refusing a symbolic link (remove it; the history is written only to a regular file)")]
    Symlink {
        /// The history file.
        path: PathBuf,
    },
    /// The path is a directory, device or fifo.
    #[error("input history {path}: not a regular file (remove it or choose another location)")]
    NotRegular {
        /// The history file.
        path: PathBuf,
    },
    /// The path ends in `..` or `/`.
    #[error("input history {path}: the path has no file name")]
    NoFileName {
        /// The history file.
        path: PathBuf,
    },
    /// Opening, reading, writing or renaming the file failed.
    #[error("input history {path}: {op} failed: {source}")]
    Io {
        /// The history file.
        path: PathBuf,
        /// What was being done (`open`, `read`, `write`, …).
        op: &'static str,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
}

fn io_err(path: &Path, op: &'static str, source: impl Into<std::io::Error>) -> HistoryError {
    HistoryError::Io {
        path: path.to_owned(),
        op,
        source: source.into(),
    }
}

fn errno_io(e: Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e as i32)
}

/// Submitted inputs, oldest first, without consecutive duplicates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct History {
    entries: Vec<String>,
    max_entries: usize,
    max_entry_bytes: usize,
}

impl Default for History {
    fn default() -> Self {
        History::new()
    }
}

impl History {
    /// An empty history with the default limits.
    pub fn new() -> Self {
        History::with_limits(DEFAULT_MAX_ENTRIES, DEFAULT_MAX_ENTRY_BYTES)
    }

    /// An empty history keeping at most `max_entries`, each at most `max_entry_bytes` long.
    pub fn with_limits(max_entries: usize, max_entry_bytes: usize) -> Self {
        History {
            entries: Vec::new(),
            max_entries: max_entries.max(1),
            max_entry_bytes: max_entry_bytes.max(1),
        }
    }

    /// The entries, oldest first.
    pub fn entries(&self) -> &[String] {
        &self.entries
    }

    /// How many entries there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Records an entry: blank ones, oversized ones and a repeat of the last are skipped; the
    /// oldest entries go beyond the cap.
    pub fn push(&mut self, entry: &str) {
        if entry.trim().is_empty()
            || entry.len() > self.max_entry_bytes
            || self.entries.last().is_some_and(|last| last == entry)
        {
            return;
        }
        self.entries.push(entry.to_owned());
        if self.entries.len() > self.max_entries {
            let excess = self.entries.len() - self.max_entries;
            self.entries.drain(..excess);
        }
    }

    /// Loads a history file with the default limits; a missing file is an empty history.
    pub fn load(path: &Path) -> Result<History, HistoryError> {
        History::load_with_limits(path, DEFAULT_MAX_ENTRIES, DEFAULT_MAX_ENTRY_BYTES)
    }

    /// As [`History::load`] with these limits: older and oversized entries are dropped.
    pub fn load_with_limits(
        path: &Path,
        max_entries: usize,
        max_entry_bytes: usize,
    ) -> Result<History, HistoryError> {
        let mut history = History::with_limits(max_entries, max_entry_bytes);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_CLOEXEC)
            .open(path);
        let file = match file {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(history),
            Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => {
                return Err(HistoryError::Symlink {
                    path: path.to_owned(),
                })
            }
            Err(e) => return Err(io_err(path, "open", e)),
        };
        let meta = file.metadata().map_err(|e| io_err(path, "stat", e))?;
        if !meta.file_type().is_file() {
            return Err(HistoryError::NotRegular {
                path: path.to_owned(),
            });
        }
        // Escaping at most doubles an entry; of a longer file only the newest part is read.
        let limit = (history.max_entries as u64)
            .saturating_mul(history.max_entry_bytes as u64 * 2 + 1)
            .saturating_add(HEADER.len() as u64 + 1);
        let mut file = file;
        let cut = meta.len() > limit;
        if cut {
            file.seek(SeekFrom::End(-i64::try_from(limit).unwrap_or(i64::MAX)))
                .map_err(|e| io_err(path, "seek", e))?;
        }
        let mut raw = Vec::new();
        file.take(limit)
            .read_to_end(&mut raw)
            .map_err(|e| io_err(path, "read", e))?;
        if cut {
            // The first line read is a fragment.
            let start = raw
                .iter()
                .position(|&b| b == b'\n')
                .map_or(raw.len(), |i| i + 1);
            raw.drain(..start);
        }
        let text = String::from_utf8_lossy(&raw);
        for line in text.lines() {
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            history.push(&unescape(line));
        }
        Ok(history)
    }

    /// Writes the history to `path` atomically, never through a symlink (see the module
    /// documentation). The file is left with mode 0600.
    pub fn save(&self, path: &Path) -> Result<(), HistoryError> {
        let name = path.file_name().ok_or_else(|| HistoryError::NoFileName {
            path: path.to_owned(),
        })?;
        let dir_path = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let dir: OwnedFd = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_DIRECTORY | nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
            .open(dir_path)
            .map_err(|e| {
                // O_NOFOLLOW with O_DIRECTORY reports a symlink as ELOOP or ENOTDIR.
                let link =
                    std::fs::symlink_metadata(dir_path).is_ok_and(|m| m.file_type().is_symlink());
                if link {
                    HistoryError::Symlink {
                        path: dir_path.to_owned(),
                    }
                } else {
                    io_err(dir_path, "open directory", e)
                }
            })?
            .into();
        self.check_target(&dir, name, path)?;

        let mut body = String::with_capacity(HEADER.len() + 1 + self.entries.len() * 32);
        body.push_str(HEADER);
        body.push('\n');
        for entry in &self.entries {
            body.push_str(&escape(entry));
            body.push('\n');
        }

        let (tmp_name, tmp) = create_temp(&dir, name, path)?;
        let result = write_and_rename(&dir, &tmp_name, tmp, name, path, body.as_bytes(), self);
        if result.is_err() {
            let _ = nix::unistd::unlinkat(
                &dir,
                tmp_name.as_str(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            );
        }
        result
    }

    /// The target must be absent or a regular file; a symlink is refused.
    fn check_target(
        &self,
        dir: &OwnedFd,
        name: &std::ffi::OsStr,
        path: &Path,
    ) -> Result<(), HistoryError> {
        match fstatat(dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => {
                let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
                if kind == SFlag::S_IFLNK {
                    Err(HistoryError::Symlink {
                        path: path.to_owned(),
                    })
                } else if kind != SFlag::S_IFREG {
                    Err(HistoryError::NotRegular {
                        path: path.to_owned(),
                    })
                } else {
                    Ok(())
                }
            }
            Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(io_err(path, "stat", errno_io(e))),
        }
    }
}

fn create_temp(
    dir: &OwnedFd,
    name: &std::ffi::OsStr,
    path: &Path,
) -> Result<(String, File), HistoryError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let base = name.to_string_lossy();
    for _ in 0..16 {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let tmp_name = format!(".{base}.{}.{n}.{nanos:x}.tmp", std::process::id());
        let flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        match openat(
            dir,
            tmp_name.as_str(),
            flags,
            Mode::from_bits_truncate(0o600),
        ) {
            Ok(fd) => return Ok((tmp_name, File::from(fd))),
            Err(Errno::EEXIST) => continue,
            Err(e) => return Err(io_err(path, "create temporary file", errno_io(e))),
        }
    }
    Err(io_err(
        path,
        "create temporary file",
        std::io::Error::from(std::io::ErrorKind::AlreadyExists),
    ))
}

fn write_and_rename(
    dir: &OwnedFd,
    tmp_name: &str,
    mut tmp: File,
    name: &std::ffi::OsStr,
    path: &Path,
    body: &[u8],
    history: &History,
) -> Result<(), HistoryError> {
    use std::os::unix::fs::PermissionsExt;
    // The umask may have narrowed the mode further; make it exactly 0600.
    tmp.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(|e| io_err(path, "chmod temporary file", e))?;
    tmp.write_all(body)
        .map_err(|e| io_err(path, "write temporary file", e))?;
    tmp.sync_all()
        .map_err(|e| io_err(path, "fsync temporary file", e))?;
    drop(tmp);
    // A symlink planted since the first check is refused too; a race after this check can only
    // replace the link itself, since rename does not follow it.
    history.check_target(dir, name, path)?;
    renameat(dir, tmp_name, dir, name).map_err(|e| io_err(path, "rename", errno_io(e)))?;
    File::from(
        dir.try_clone()
            .map_err(|e| io_err(path, "fsync directory", e))?,
    )
    .sync_all()
    .map_err(|e| io_err(path, "fsync directory", e))?;
    Ok(())
}

fn escape(entry: &str) -> String {
    let mut out = String::with_capacity(entry.len() + 2);
    if entry.starts_with('#') {
        out.push('\\');
    }
    for c in entry.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out
}

fn unescape(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('\\') => out.push('\\'),
            Some('#') => out.push('#'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_round_trips() {
        for s in [
            "plain",
            "two\nlines",
            "back\\slash\\n",
            "#hash",
            "cr\r\nlf",
            "\\",
            "é日本",
        ] {
            let e = escape(s);
            assert!(!e.contains('\n') && !e.starts_with('#'), "{e:?}");
            assert_eq!(unescape(&e), s);
        }
    }

    #[test]
    fn push_skips_blank_repeats_and_oversized_and_caps() {
        let mut h = History::with_limits(3, 10);
        for e in ["a", "a", "  ", "b", "0123456789X", "c", "d"] {
            h.push(e);
        }
        assert_eq!(h.entries(), ["b", "c", "d"]);
    }
}
