//! The documents a client has open on its server: their text as last sent, version, when it was
//! sent, and which one was used least recently (closed first when the bound is reached).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// The LSP language id of a file, by extension (`None` if we do not know it).
pub fn language_id(path: &Path) -> Option<&'static str> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    Some(match ext.as_str() {
        "py" | "pyi" | "pyw" => "python",
        "ts" | "mts" | "cts" => "typescript",
        "tsx" => "typescriptreact",
        "js" | "mjs" | "cjs" => "javascript",
        "jsx" => "javascriptreact",
        "rs" => "rust",
        "go" => "go",
        "c" | "h" => "c",
        "cc" | "cpp" | "cxx" | "hpp" | "hh" | "hxx" => "cpp",
        "java" => "java",
        "rb" => "ruby",
        "json" => "json",
        "toml" => "toml",
        "yaml" | "yml" => "yaml",
        "md" => "markdown",
        "sh" | "bash" => "shellscript",
        "lua" => "lua",
        "zig" => "zig",
        "cs" => "csharp",
        "swift" => "swift",
        "kt" | "kts" => "kotlin",
        "php" => "php",
        _ => return None,
    })
}

/// A document as the server last heard of it.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The file, absolute.
    pub path: PathBuf,
    /// Its `file://` URI, as the server knows it.
    pub uri: String,
    /// The LSP language id it was opened with.
    pub language_id: String,
    /// The version last sent (1 at `didOpen`, one more per `didChange`).
    pub version: i32,
    /// The text last sent.
    pub text: Arc<str>,
    /// When the last `didOpen`/`didChange` was queued.
    pub changed_at: Instant,
    /// Whether the last sync was a `didChange` (not the first `didOpen`).
    pub changed: bool,
}

/// The documents a client has open on its server, with their recency, and the files it has
/// heard of (open or not).
#[derive(Debug, Default)]
pub struct Documents {
    open: HashMap<PathBuf, (Snapshot, u64)>,
    clock: u64,
    known: HashSet<PathBuf>,
}

const MAX_KNOWN: usize = 65_536;

impl Documents {
    /// The open document at `path`, marked as just used.
    pub fn get(&mut self, path: &Path) -> Option<Snapshot> {
        self.clock += 1;
        let clock = self.clock;
        self.open.get_mut(path).map(|(s, used)| {
            *used = clock;
            s.clone()
        })
    }

    /// The open document at `path`, without marking it used.
    pub fn peek(&self, path: &Path) -> Option<&Snapshot> {
        self.open.get(path).map(|(s, _)| s)
    }

    /// Record `snap` as open (replacing an earlier one for its path), marked as just used.
    pub fn insert(&mut self, snap: Snapshot) {
        self.clock += 1;
        self.note_known(&snap.path);
        self.open.insert(snap.path.clone(), (snap, self.clock));
    }

    /// Forget the open document at `path` (after `didClose`), returning it.
    pub fn remove(&mut self, path: &Path) -> Option<Snapshot> {
        self.open.remove(path).map(|(s, _)| s)
    }

    /// How many documents are open.
    pub fn len(&self) -> usize {
        self.open.len()
    }

    /// Whether no document is open.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// The paths of the open documents, in no order.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.open.keys().cloned().collect()
    }

    /// The least recently used open document.
    pub fn least_recent(&self) -> Option<PathBuf> {
        self.open
            .iter()
            .min_by_key(|(_, (_, used))| *used)
            .map(|(p, _)| p.clone())
    }

    /// Whether the file was seen before (to tell a server "changed" rather than "created").
    pub fn known(&self, path: &Path) -> bool {
        self.known.contains(path)
    }

    /// Remember that `path` exists (bounded: beyond 65 536 paths the memory starts afresh).
    pub fn note_known(&mut self, path: &Path) {
        if self.known.len() >= MAX_KNOWN {
            // Forgetting only turns a later "changed" into "created", which servers accept.
            self.known.clear();
        }
        self.known.insert(path.to_path_buf());
    }

    /// Forget `path` (it was deleted).
    pub fn forget_known(&mut self, path: &Path) {
        self.known.remove(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn language_ids_by_extension() {
        assert_eq!(language_id(Path::new("a/b.py")), Some("python"));
        assert_eq!(language_id(Path::new("x.TSX")), Some("typescriptreact"));
        assert_eq!(language_id(Path::new("x.mjs")), Some("javascript"));
        assert_eq!(language_id(Path::new("Makefile")), None);
    }

    #[test]
    fn the_least_recently_used_document_is_found() {
        let mut d = Documents::default();
        let snap = |p: &str| Snapshot {
            path: PathBuf::from(p),
            uri: format!("file://{p}"),
            language_id: "python".into(),
            version: 1,
            text: Arc::from(""),
            changed_at: Instant::now(),
            changed: false,
        };
        d.insert(snap("/a"));
        d.insert(snap("/b"));
        assert_eq!(d.least_recent(), Some(PathBuf::from("/a")));
        d.get(Path::new("/a"));
        assert_eq!(d.least_recent(), Some(PathBuf::from("/b")));
        assert!(d.known(Path::new("/b")));
    }
}
