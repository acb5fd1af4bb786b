//! Path handling of every file tool (HIP-0301 §10): a path from the model is resolved against the
//! workspace and canonicalized before use, and refused — with an error naming the path and the
//! rule — when `..`, an absolute path, a symlink or a hard link would lead outside the roots the
//! tool may use. The kernel (Landlock) enforces the same boundary underneath; this check gives the
//! model a clear answer instead of a bare `EACCES`, and covers hard links, which Landlock cannot
//! tell apart from the file they share.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// Why a path was refused. Every variant names the path as the model wrote it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("path {path:?} refused: it is empty")]
    Empty { path: String },
    #[error(
        "path {path:?} refused: `..` leads outside the workspace {root} (rule: paths stay \
         inside the workspace)"
    )]
    DotDot { path: String, root: String },
    #[error(
        "path {path:?} refused: absolute path outside the workspace {root} (rule: paths stay \
         inside the workspace)"
    )]
    Absolute { path: String, root: String },
    #[error(
        "path {path:?} refused: a symlink leads outside the workspace, to {target} (rule: \
         symlinks may not lead outside the workspace)"
    )]
    Symlink { path: String, target: String },
    #[error(
        "path {path:?} refused: the file has {links} hard links and may be shared with a file \
         outside the workspace (rule: no writing through hard links)"
    )]
    HardLink { path: String, links: u64 },
    #[error(
        "path {path:?} refused: {protected} runs or configures things later, outside the sandbox \
         (rule: no writing to .git/hooks, .git/config or .hanzo/)"
    )]
    Protected { path: String, protected: String },
    #[error("path {path:?}: {message}")]
    Io { path: String, message: String },
}

/// The roots a tool may use: the workspace, plus extra read-write roots the user allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    workspace: PathBuf,
    extra: Vec<PathBuf>,
}

/// Whether the path will be written (hard links are then refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intent {
    Read,
    Write,
}

impl Roots {
    /// `workspace` and every extra root are canonicalized here, once.
    pub fn new(workspace: &Path, extra: &[PathBuf]) -> io::Result<Roots> {
        Ok(Roots {
            workspace: workspace.canonicalize()?,
            extra: extra
                .iter()
                .map(|p| p.canonicalize())
                .collect::<io::Result<_>>()?,
        })
    }

    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    fn inside(&self, p: &Path) -> bool {
        p.starts_with(&self.workspace) || self.extra.iter().any(|r| p.starts_with(r))
    }

    /// Resolve `input` (relative to the workspace, or absolute inside an allowed root) to a
    /// canonical path inside the roots. The path need not exist (a file about to be created):
    /// then its deepest existing ancestor is canonicalized and the rest appended.
    pub fn resolve(&self, input: &str, intent: Intent) -> Result<PathBuf, PathError> {
        let path = input.to_string();
        if input.is_empty() {
            return Err(PathError::Empty { path });
        }
        let root = self.workspace.display().to_string();
        let raw = Path::new(input);
        let joined = if raw.is_absolute() {
            raw.to_path_buf()
        } else {
            self.workspace.join(raw)
        };
        // Lexical normalisation first: this names the rule a `..` or an absolute path broke.
        let lexical = normalize(&joined);
        if !self.inside(&lexical) {
            return Err(if raw.is_absolute() {
                PathError::Absolute { path, root }
            } else {
                PathError::DotDot { path, root }
            });
        }
        // Then the filesystem's answer: a symlink anywhere on the way may lead elsewhere.
        let canonical = canonicalize_allow_missing(&lexical).map_err(|e| PathError::Io {
            path: path.clone(),
            message: e.to_string(),
        })?;
        if !self.inside(&canonical) {
            return Err(PathError::Symlink {
                path,
                target: canonical.display().to_string(),
            });
        }
        if intent == Intent::Write {
            // What a later `git` or `hanzo-dev` outside the sandbox would run or obey. Tier B
            // also binds these read-only for commands (when they exist when the worker starts);
            // the file tools refuse them in every tier, existing or not.
            if let Ok(rel) = canonical.strip_prefix(&self.workspace) {
                if let Some(p) = hanzo_policy::profile::PROTECTED_IN_WORKSPACE
                    .iter()
                    .find(|p| rel.starts_with(p))
                {
                    return Err(PathError::Protected {
                        path,
                        protected: p.to_string(),
                    });
                }
            }
            if let Ok(meta) = fs::metadata(&canonical) {
                if meta.is_file() && meta.nlink() > 1 {
                    return Err(PathError::HardLink {
                        path,
                        links: meta.nlink(),
                    });
                }
            }
        }
        Ok(canonical)
    }

    /// The path as the model should see it: relative to the workspace when inside it.
    pub fn display(&self, p: &Path) -> String {
        match p.strip_prefix(&self.workspace) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
            Ok(rel) => rel.display().to_string(),
            Err(_) => p.display().to_string(),
        }
    }
}

/// Remove `.` and resolve `..` lexically (a `..` at the root stays at the root).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// `canonicalize`, except that missing trailing components are appended to the canonical form of
/// the deepest existing ancestor. A dangling symlink counts as existing (its target is what
/// would be written), so it is followed by resolving it by hand.
fn canonicalize_allow_missing(p: &Path) -> io::Result<PathBuf> {
    let mut missing: Vec<std::ffi::OsString> = Vec::new();
    let mut cur = p.to_path_buf();
    loop {
        match cur.canonicalize() {
            Ok(c) => {
                let mut out = c;
                for m in missing.iter().rev() {
                    out.push(m);
                }
                return Ok(out);
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // A dangling symlink: follow it once, lexically, and continue from its target.
                if let Ok(target) = fs::read_link(&cur) {
                    let parent = cur.parent().map(Path::to_path_buf).unwrap_or_default();
                    let next = normalize(&parent.join(target));
                    if missing.len() > 40 {
                        return Err(io::Error::other("too many levels of symbolic links"));
                    }
                    cur = next;
                    continue;
                }
                let name = cur
                    .file_name()
                    .ok_or_else(|| io::Error::other("no existing ancestor"))?
                    .to_os_string();
                missing.push(name);
                if !cur.pop() {
                    return Err(e);
                }
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn writes_to_git_hooks_git_config_and_hanzo_are_refused_naming_the_rule() {
        let (ws, _outside, roots) = setup();
        std::fs::create_dir_all(ws.path().join(".git/hooks")).expect("mkdir");
        for p in [
            ".git/hooks/pre-commit",
            ".git/config",
            ".hanzo/settings.json",
            "./.hanzo/new/x.json",
            "sub/../.hanzo",
        ] {
            let e = roots.resolve(p, Intent::Write).expect_err(p);
            assert!(matches!(e, PathError::Protected { .. }), "{p}: {e:?}");
            assert!(
                e.to_string().contains("rule: no writing to .git/hooks"),
                "{e}"
            );
        }
        // Reading them is fine, and so are look-alikes.
        assert!(roots.resolve(".hanzo/settings.json", Intent::Read).is_ok());
        for p in [
            ".git/config.lock",
            ".hanzo-notes",
            "src/.hanzo.txt",
            ".git/HEAD",
        ] {
            assert!(roots.resolve(p, Intent::Write).is_ok(), "{p}");
        }
    }

    fn setup() -> (tempfile::TempDir, tempfile::TempDir, Roots) {
        let ws = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("tempdir");
        let roots = Roots::new(ws.path(), &[]).expect("roots");
        (ws, outside, roots)
    }

    #[test]
    fn relative_and_absolute_inside_are_accepted() {
        let (ws, _o, roots) = setup();
        fs::write(ws.path().join("a.txt"), "x").expect("write");
        let canon = ws.path().canonicalize().expect("canon");
        assert_eq!(
            roots.resolve("a.txt", Intent::Read),
            Ok(canon.join("a.txt"))
        );
        assert_eq!(
            roots.resolve(&canon.join("a.txt").display().to_string(), Intent::Read),
            Ok(canon.join("a.txt"))
        );
        assert_eq!(
            roots.resolve("new/dir/b.txt", Intent::Write),
            Ok(canon.join("new/dir/b.txt"))
        );
        assert_eq!(
            roots.resolve("sub/../a.txt", Intent::Read),
            Ok(canon.join("a.txt"))
        );
    }

    #[test]
    fn dotdot_absolute_and_empty_are_refused_naming_the_rule() {
        let (_ws, _o, roots) = setup();
        let e = roots.resolve("../x", Intent::Write).expect_err("refused");
        assert!(matches!(e, PathError::DotDot { .. }), "{e}");
        assert!(e.to_string().contains("\"../x\"") && e.to_string().contains("`..`"));
        let e = roots
            .resolve("/etc/passwd", Intent::Read)
            .expect_err("refused");
        assert!(matches!(e, PathError::Absolute { .. }), "{e}");
        assert!(e.to_string().contains("/etc/passwd"));
        assert!(matches!(
            roots.resolve("", Intent::Read),
            Err(PathError::Empty { .. })
        ));
    }

    #[test]
    fn symlinks_leading_outside_are_refused_even_dangling_ones() {
        let (ws, outside, roots) = setup();
        symlink(outside.path(), ws.path().join("out")).expect("symlink");
        let e = roots
            .resolve("out/secret", Intent::Write)
            .expect_err("refused");
        assert!(matches!(e, PathError::Symlink { .. }), "{e}");
        assert!(e.to_string().contains("symlink"));
        symlink(outside.path().join("nope"), ws.path().join("dangling")).expect("symlink");
        let e = roots
            .resolve("dangling", Intent::Write)
            .expect_err("refused");
        assert!(matches!(e, PathError::Symlink { .. }), "{e}");
        // A symlink that stays inside is fine.
        fs::write(ws.path().join("real"), "x").expect("write");
        symlink("real", ws.path().join("alias")).expect("symlink");
        assert!(roots.resolve("alias", Intent::Write).is_ok());
    }

    #[test]
    fn hard_links_are_refused_for_writing_only() {
        let (ws, outside, roots) = setup();
        let target = outside.path().join("victim");
        fs::write(&target, "secret").expect("write");
        fs::hard_link(&target, ws.path().join("link")).expect("hard link");
        let e = roots.resolve("link", Intent::Write).expect_err("refused");
        assert!(matches!(e, PathError::HardLink { links: 2, .. }), "{e}");
        assert!(roots.resolve("link", Intent::Read).is_ok());
    }

    #[test]
    fn extra_roots_are_allowed() {
        let ws = tempfile::tempdir().expect("tempdir");
        let extra = tempfile::tempdir().expect("tempdir");
        let roots = Roots::new(ws.path(), &[extra.path().to_path_buf()]).expect("roots");
        let p = extra.path().join("f").display().to_string();
        assert!(roots.resolve(&p, Intent::Write).is_ok());
    }
}
