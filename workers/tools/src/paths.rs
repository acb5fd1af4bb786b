//! Path handling of every file tool (HIP-0301 §10): a path from the model is resolved against the
//! workspace and canonicalized before use, and refused — with an error naming the path and the
//! rule — when `..`, an absolute path, a symlink or a hard link would lead outside the roots the
//! tool may use. The kernel (Landlock) enforces the same boundary underneath; this check gives the
//! model a clear answer instead of a bare `EACCES`, and covers hard links, which Landlock cannot
//! tell apart from the file they share.
//!
//! Writes are refused, too, anywhere under [`protected_paths`] — what a later `git` or
//! `hanzo-dev` outside the sandbox would run or obey: the git directory as a whole (wherever a
//! `gitdir:` file or `commondir` points), the effective hooks directories, included git
//! configuration files, programs the configuration names inside the workspace, hook managers'
//! configuration, `.hanzo/` and `.husky/` — and under any path component named `.git`, and where
//! a write would complete a bare repository (`HEAD`, `objects/`, `refs/`), which a shell prompt's
//! `git status` would then obey.

use hanzo_policy::git::{self as gitpolicy, ConfigReference};
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// Why a path was refused. Every variant names the path as the model wrote it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The path is empty.
    #[error("path {path:?} refused: it is empty")]
    Empty {
        /// The path as the tool call gave it.
        path: String,
    },
    /// `..` components lead above the workspace.
    #[error(
        "path {path:?} refused: `..` leads outside the workspace {root} (rule: paths stay \
         inside the workspace)"
    )]
    DotDot {
        /// The path as the tool call gave it.
        path: String,
        /// The workspace.
        root: String,
    },
    /// An absolute path outside the workspace and every extra root.
    #[error(
        "path {path:?} refused: absolute path outside the workspace {root} (rule: paths stay \
         inside the workspace)"
    )]
    Absolute {
        /// The path as the tool call gave it.
        path: String,
        /// The workspace.
        root: String,
    },
    /// A symlink on the way resolves outside the workspace and every extra root.
    #[error(
        "path {path:?} refused: a symlink leads outside the workspace, to {target} (rule: \
         symlinks may not lead outside the workspace)"
    )]
    Symlink {
        /// The path as the tool call gave it.
        path: String,
        /// Where it resolves to.
        target: String,
    },
    /// A write to a file with more than one hard link (it may be a file outside the workspace).
    #[error(
        "path {path:?} refused: the file has {links} hard links and may be shared with a file \
         outside the workspace (rule: no writing through hard links)"
    )]
    HardLink {
        /// The path as the tool call gave it.
        path: String,
        /// Its link count.
        links: u64,
    },
    /// A write to a path that runs or configures programs later, outside the sandbox (the git
    /// directory, git hooks and configuration, `.hanzo/`).
    #[error(
        "path {path:?} refused: it is {protected} ({why}), which runs or configures programs \
         later, outside the sandbox (rule: no writing to the git directory, git hooks and \
         configuration, or .hanzo/)"
    )]
    Protected {
        /// The path as the tool call gave it.
        path: String,
        /// The protected path it is or lies under.
        protected: String,
        /// Why that path is protected.
        why: String,
    },
    /// Resolving the path failed in the filesystem.
    #[error("path {path:?}: {message}")]
    Io {
        /// The path as the tool call gave it.
        path: String,
        /// The system's error.
        message: String,
    },
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
    /// The path is only read.
    Read,
    /// The path will be written.
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

    /// The workspace, canonical.
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
            // What a later `git` or `hanzo-dev` outside the sandbox would run or obey. Computed
            // afresh for every write: in tier A a command can change the git configuration.
            if let Some((protected, why)) = self.protection(&lexical, &canonical) {
                return Err(PathError::Protected {
                    path,
                    protected,
                    why,
                });
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

impl Roots {
    /// The root `p` (canonical) is under.
    pub fn root_of(&self, p: &Path) -> Option<&Path> {
        std::iter::once(&self.workspace)
            .chain(&self.extra)
            .filter(|r| p.starts_with(r))
            .max_by_key(|r| r.as_os_str().len())
            .map(PathBuf::as_path)
    }

    /// Why writing `canonical` (reached as `lexical`) would plant something that runs later:
    /// what is protected, shown to the model, and the rule's reason.
    fn protection(&self, lexical: &Path, canonical: &Path) -> Option<(String, String)> {
        for p in [lexical, canonical] {
            let root = self.root_of(p).unwrap_or(&self.workspace);
            if let Ok(rel) = p.strip_prefix(root) {
                if let Some(c) = rel
                    .components()
                    .find(|c| gitpolicy::is_git_dir_name(&c.as_os_str().to_string_lossy()))
                {
                    return Some((
                        format!("inside `{}`", c.as_os_str().to_string_lossy()),
                        "a git directory".to_string(),
                    ));
                }
            }
        }
        for entry in protected_detail(&self.workspace) {
            if canonical.starts_with(&entry.path) || lexical.starts_with(&entry.path) {
                return Some((format!("under {}", self.display(&entry.path)), entry.why));
            }
        }
        if let Some(dir) = completes_bare_repository(self.root_of(canonical)?, canonical) {
            return Some((
                format!("in {}", self.display(&dir)),
                "it would make that directory a git repository (HEAD, objects/, refs/)".to_string(),
            ));
        }
        None
    }
}

/// How a file tool opens a file it resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenFor {
    /// Read only.
    Read,
    /// Write, creating the file if it does not exist (then with mode 0666 less the umask).
    Write,
}

impl Roots {
    /// Opens `canonical` (a path [`Roots::resolve`] returned) without following any symlink
    /// (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` from its root, so a symlink
    /// swapped in after the check is refused by the kernel; `O_NOFOLLOW` where `openat2` is
    /// missing), non-blocking (a FIFO does not hang the open), and refuses anything but a regular
    /// file: reading a FIFO, a socket or a device would hang or never end. `shown` names the
    /// file in errors.
    pub fn open_file(
        &self,
        canonical: &Path,
        how: OpenFor,
        shown: &str,
    ) -> Result<fs::File, String> {
        use nix::fcntl::OFlag;
        use nix::sys::stat::Mode;
        let mut flags = OFlag::O_NONBLOCK | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NOCTTY;
        flags |= match how {
            OpenFor::Read => OFlag::O_RDONLY,
            OpenFor::Write => OFlag::O_WRONLY | OFlag::O_CREAT,
        };
        // `openat2` refuses a mode without `O_CREAT`.
        let mode = match how {
            OpenFor::Read => Mode::empty(),
            OpenFor::Write => Mode::from_bits_truncate(0o666),
        };
        let fd = self
            .open_beneath(canonical, flags, mode)
            .map_err(|e| match e {
                nix::errno::Errno::ELOOP => format!(
                    "{shown}: refused: a symlink appeared on its path after it was checked \
                     (rule: symlinks may not lead outside the workspace)"
                ),
                nix::errno::Errno::EISDIR => format!("{shown} is a directory"),
                nix::errno::Errno::ENXIO => format!(
                    "{shown} is a FIFO or socket with no reader; the file tools use regular \
                     files only"
                ),
                e => format!("{shown}: {}", std::io::Error::from(e)),
            })?;
        let file = fs::File::from(fd);
        let meta = file.metadata().map_err(|e| format!("{shown}: {e}"))?;
        if !meta.is_file() {
            return Err(format!(
                "{shown} is {}; the file tools read and write regular files only",
                describe_type(&meta)
            ));
        }
        Ok(file)
    }

    fn open_beneath(
        &self,
        canonical: &Path,
        flags: nix::fcntl::OFlag,
        mode: nix::sys::stat::Mode,
    ) -> Result<std::os::fd::OwnedFd, nix::errno::Errno> {
        use nix::errno::Errno;
        use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
        let beneath = self.root_of(canonical).and_then(|root| {
            let rel = canonical.strip_prefix(root).ok()?;
            (!rel.as_os_str().is_empty()).then_some((root, rel))
        });
        if let Some((root, rel)) = beneath {
            let dir = nix::fcntl::open(
                root,
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            )?;
            let how = OpenHow::new().flags(flags).mode(mode).resolve(
                ResolveFlag::RESOLVE_BENEATH
                    | ResolveFlag::RESOLVE_NO_SYMLINKS
                    | ResolveFlag::RESOLVE_NO_MAGICLINKS,
            );
            match openat2(&dir, rel, how) {
                // No `openat2` (Linux < 5.6, or a filter that refuses it): the last component
                // at least is not followed.
                Err(Errno::ENOSYS | Errno::EPERM) => {}
                other => return other,
            }
        }
        nix::fcntl::open(canonical, flags, mode)
    }
}

/// "a FIFO", "a directory", … for error messages.
pub fn describe_type(meta: &fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_symlink() {
        "a symlink"
    } else {
        "not a regular file"
    }
}

/// The ancestor of `target` (below `root`) that holds, or would hold once `target` is written,
/// all of `HEAD`, `objects` and `refs`: a directory git treats as a repository.
fn completes_bare_repository(root: &Path, target: &Path) -> Option<PathBuf> {
    let rel = target.strip_prefix(root).ok()?;
    let mut dir = root.to_path_buf();
    for comp in rel.components() {
        let name = comp.as_os_str();
        let present = gitpolicy::GIT_DIR_MARKERS
            .iter()
            .filter(|m| name == **m || fs::symlink_metadata(dir.join(m)).is_ok())
            .count();
        if present == gitpolicy::GIT_DIR_MARKERS.len() {
            return Some(dir);
        }
        dir.push(name);
    }
    None
}

/// A path no tool or command may write, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectedPath {
    /// The absolute path (as named, or as resolved when it is a symlink).
    pub path: PathBuf,
    /// Why it is protected (what would run or obey it).
    pub why: String,
}

/// The absolute paths no tool or command may write in `workspace`, existing or not (see the
/// module documentation). Reads the repository's files (`.git`, `commondir`, the configuration
/// and what it includes, installed hooks) but never runs git. Symlinked entries are listed both
/// as named and as resolved.
pub fn protected_paths(workspace: &Path) -> Vec<PathBuf> {
    protected_detail(workspace)
        .into_iter()
        .map(|p| p.path)
        .collect()
}

/// Where Landlock alone (tier A, which has no mount namespace to bind paths read-only) can grant
/// writing in `workspace` while none of `protected` (and nothing beneath one) becomes writable:
/// a Landlock grant reaches everything beneath its path and cannot have holes, so the workspace
/// itself is not among them, nor any directory on the way to a protected path; their other
/// entries are, each whole. Symlinks are left out (a grant would follow one wherever it points).
/// The price: no entry can be created or removed directly in the workspace or in a directory
/// on the way to a protected path (`.git` and `.hanzo` are at the top, so at the top level
/// only existing files can be written). Reads the directories once, at the call.
pub fn writable_around(workspace: &Path, protected: &[PathBuf]) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    carve(workspace, protected, &mut out, 0)?;
    Ok(out)
}

/// Directories `writable_around` descends at most (deeper protected paths are rare; past this
/// the directory on the way is left read-only whole).
const MAX_CARVE_DEPTH: usize = 32;

fn carve(
    dir: &Path,
    protected: &[PathBuf],
    out: &mut Vec<PathBuf>,
    depth: usize,
) -> io::Result<()> {
    if depth > MAX_CARVE_DEPTH {
        return Ok(());
    }
    let mut entries = fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<io::Result<Vec<_>>>()?;
    entries.sort();
    for path in entries {
        let meta = fs::symlink_metadata(&path)?;
        if meta.file_type().is_symlink() || protected.iter().any(|p| path.starts_with(p)) {
            continue;
        }
        if protected.iter().any(|p| p.starts_with(&path)) {
            if meta.is_dir() {
                carve(&path, protected, out, depth + 1)?;
            }
            continue;
        }
        out.push(path);
    }
    Ok(())
}

/// Largest git metadata file read (`.git` file, `commondir`, a config, a hook).
const MAX_GIT_FILE: u64 = 256 * 1024;
/// How deep `include.path` chains are followed (git stops at 10).
const MAX_INCLUDE_DEPTH: usize = 10;

fn read_small(path: &Path) -> Option<String> {
    use std::io::Read;
    let f = fs::File::open(path).ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    f.take(MAX_GIT_FILE).read_to_string(&mut text).ok()?;
    Some(text)
}

/// `protected_paths` with the reason of each entry.
pub fn protected_detail(workspace: &Path) -> Vec<ProtectedPath> {
    let env = GitEnv::from_process();
    protected_detail_with(workspace, &env)
}

/// Where git looks for configuration besides the repository, when it is readable.
#[derive(Debug, Clone, Default)]
pub struct GitEnv {
    /// The user's home, for `~/` in `include.path` and `core.hooksPath`.
    pub home: Option<PathBuf>,
    /// Global and system configuration files to read (`~/.gitconfig`, XDG, `/etc/gitconfig`).
    pub extra_configs: Vec<PathBuf>,
}

impl GitEnv {
    /// From this process's environment (`HOME`, `XDG_CONFIG_HOME`); the tools worker has
    /// neither, so there only the repository's own files count — the same files git reads in
    /// the sandbox.
    pub fn from_process() -> GitEnv {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .filter(|h| h.is_absolute());
        let xdg = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| home.as_ref().map(|h| h.join(".config")));
        let mut extra_configs = vec![PathBuf::from("/etc/gitconfig")];
        extra_configs.extend(xdg.map(|x| x.join("git/config")));
        extra_configs.extend(home.as_ref().map(|h| h.join(".gitconfig")));
        GitEnv {
            home,
            extra_configs,
        }
    }
}

struct Collect<'a> {
    workspace: &'a Path,
    env: &'a GitEnv,
    out: Vec<ProtectedPath>,
    hooks_dirs: Vec<PathBuf>,
    seen_configs: Vec<PathBuf>,
    /// Entries of the repository's own configuration (and what it includes).
    entries: Vec<gitpolicy::ConfigEntry>,
    /// Whether `config_file` is reading the repository's configuration (not global files).
    in_repository: bool,
}

impl Collect<'_> {
    fn add(&mut self, path: PathBuf, why: impl Into<String>) {
        let why = why.into();
        let path = normalize(&path);
        let resolved = canonicalize_allow_missing(&path).ok();
        for p in std::iter::once(path).chain(resolved) {
            if !self.out.iter().any(|e| e.path == p) {
                self.out.push(ProtectedPath {
                    path: p,
                    why: why.clone(),
                });
            }
        }
    }

    /// `~/x` from the home directory, a relative path from `base`.
    fn resolve(&self, value: &str, base: &Path) -> Option<PathBuf> {
        if let Some(rest) = value.strip_prefix("~/") {
            return self.env.home.as_ref().map(|h| h.join(rest));
        }
        if value.starts_with('~') {
            return None;
        }
        let p = Path::new(value);
        Some(if p.is_absolute() {
            p.to_path_buf()
        } else {
            base.join(p)
        })
    }

    fn config_file(&mut self, file: &Path, depth: usize) {
        if depth > MAX_INCLUDE_DEPTH || self.seen_configs.iter().any(|s| s == file) {
            return;
        }
        self.seen_configs.push(file.to_path_buf());
        let Some(text) = read_small(file) else {
            return;
        };
        let base = file.parent().unwrap_or(Path::new("/")).to_path_buf();
        let entries = gitpolicy::parse_config(&text);
        let references = gitpolicy::config_references(&entries);
        if self.in_repository {
            self.entries.extend(entries);
        }
        for r in references {
            match r {
                ConfigReference::HooksPath(v) => {
                    // A relative hooks path is relative to the work tree (githooks(5)).
                    if let Some(p) = self.resolve(&v, self.workspace) {
                        self.add(p.clone(), "the hooks directory `core.hooksPath` names");
                        self.hooks_dirs.push(p);
                    }
                }
                ConfigReference::Include(v) => {
                    if let Some(p) = self.resolve(&v, &base) {
                        self.add(p.clone(), "a git configuration file that is included");
                        self.config_file(&p, depth + 1);
                    }
                }
                ConfigReference::TemplateDir(v) => {
                    if let Some(p) = self.resolve(&v, self.workspace) {
                        self.add(p, "the template directory `init.templateDir` names");
                    }
                }
                ConfigReference::Program { key, paths } => {
                    for v in paths {
                        let Some(p) = self.resolve(&v, self.workspace) else {
                            continue;
                        };
                        // Programs outside the workspace are not the model's to write anyway.
                        if normalize(&p).starts_with(self.workspace) {
                            self.add(p, format!("a program the git configuration runs (`{key}`)"));
                        }
                    }
                }
            }
        }
    }

    fn hook_managers(&mut self) {
        let dirs = std::mem::take(&mut self.hooks_dirs);
        for dir in &dirs {
            for name in gitpolicy::HOOK_NAMES {
                let Some(text) = read_small(&dir.join(name)) else {
                    continue;
                };
                for cfg in gitpolicy::hook_manager_configs(&text) {
                    self.add(
                        self.workspace.join(cfg),
                        format!("configuration the installed `{name}` hook runs commands from"),
                    );
                }
            }
        }
    }
}

/// [`protected_detail`] with the global configuration given (tests).
pub fn protected_detail_with(workspace: &Path, env: &GitEnv) -> Vec<ProtectedPath> {
    collect(workspace, env).out
}

/// A repository whose `.git` is at the root of a workspace, as git would find it.
#[derive(Debug, Clone)]
pub struct GitRepository {
    /// The git directory (`.git`, or where a `gitdir:` file points).
    pub git_dir: PathBuf,
    /// `commondir`'s target, or the git directory itself.
    pub common_dir: PathBuf,
    /// The repository's configuration (`config`, `config.worktree`, included files), in order.
    pub config: Vec<gitpolicy::ConfigEntry>,
}

/// The repository at the root of `workspace`, if there is one (read, never run).
pub fn git_repository(workspace: &Path) -> Option<GitRepository> {
    let env = GitEnv::default();
    let c = collect(workspace, &env);
    let (git_dir, common_dir) = git_dirs(workspace, &c)?;
    Some(GitRepository {
        git_dir,
        common_dir,
        config: c.entries,
    })
}

fn git_dirs(workspace: &Path, c: &Collect<'_>) -> Option<(PathBuf, PathBuf)> {
    let dotgit = workspace.join(".git");
    let git_dir = match fs::symlink_metadata(&dotgit) {
        Ok(m) if m.is_file() => read_small(&dotgit)
            .and_then(|t| gitpolicy::parse_gitdir_file(&t))
            .and_then(|t| c.resolve(&t, workspace)),
        Ok(_) => Some(dotgit),
        Err(_) => None,
    }?;
    let git_dir = normalize(&git_dir);
    let common = read_small(&git_dir.join("commondir"))
        .and_then(|t| gitpolicy::parse_commondir(&t))
        .and_then(|t| c.resolve(&t, &git_dir))
        .map(|p| normalize(&p))
        .unwrap_or_else(|| git_dir.clone());
    Some((git_dir, common))
}

fn collect<'a>(workspace: &'a Path, env: &'a GitEnv) -> Collect<'a> {
    let mut c = Collect {
        workspace,
        env,
        out: Vec::new(),
        hooks_dirs: Vec::new(),
        seen_configs: Vec::new(),
        entries: Vec::new(),
        in_repository: true,
    };
    for name in gitpolicy::ALWAYS_PROTECTED {
        let why = match *name {
            ".git" => "the git directory, or the file naming it",
            ".hanzo" => "hanzo-dev's settings for this workspace",
            _ => "husky's hooks directory",
        };
        c.add(workspace.join(name), why);
    }
    if let Some((git_dir, common)) = git_dirs(workspace, &c) {
        c.add(git_dir.clone(), "the git directory `.git` points to");
        if common != git_dir {
            c.add(
                common.clone(),
                "the common git directory `commondir` points to",
            );
        }
        c.hooks_dirs.push(common.join("hooks"));
        for config in [common.join("config"), git_dir.join("config.worktree")] {
            c.config_file(&config, 0);
        }
    }
    c.in_repository = false;
    for config in env.extra_configs.clone() {
        c.config_file(&config, 0);
    }
    c.hook_managers();
    c
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
    fn writes_into_the_git_directory_and_hanzo_are_refused_naming_the_rule() {
        let (ws, _outside, roots) = setup();
        std::fs::create_dir_all(ws.path().join(".git/hooks")).expect("mkdir");
        for p in [
            ".git/hooks/pre-commit",
            ".git/config",
            ".git/commondir",
            ".git/HEAD",
            ".git/objects/ab/cdef",
            ".git/worktrees/x/gitdir",
            ".git",
            ".hanzo/settings.json",
            "./.hanzo/new/x.json",
            "sub/../.hanzo",
            ".husky/pre-commit",
            "vendor/lib/.git/config",
            "nested/.GIT/hooks/x",
        ] {
            let e = roots.resolve(p, Intent::Write).expect_err(p);
            assert!(matches!(e, PathError::Protected { .. }), "{p}: {e:?}");
            assert!(
                e.to_string()
                    .contains("rule: no writing to the git directory"),
                "{e}"
            );
        }
        // Reading them is fine, and so are look-alikes.
        assert!(roots.resolve(".hanzo/settings.json", Intent::Read).is_ok());
        assert!(roots.resolve(".git/config", Intent::Read).is_ok());
        for p in [
            ".gitignore",
            ".hanzo-notes",
            "src/.hanzo.txt",
            "git/config",
            ".github/x",
        ] {
            assert!(roots.resolve(p, Intent::Write).is_ok(), "{p}");
        }
    }

    #[test]
    fn writable_around_grants_everything_but_the_protected_paths_and_their_ancestors() {
        let ws = tempfile::tempdir().expect("ws");
        let w = ws.path();
        for d in [
            ".git/hooks",
            "src/deep",
            "tools/hooks",
            "tools/bin",
            ".hanzo",
        ] {
            fs::create_dir_all(w.join(d)).expect("mkdir");
        }
        for f in [
            "README.md",
            "src/lib.rs",
            "tools/run.sh",
            "tools/hooks/pre-commit",
        ] {
            fs::write(w.join(f), "x").expect("write");
        }
        symlink(w.join(".git"), w.join("gitlink")).expect("symlink");
        // `core.hooksPath` set to a directory below the top level.
        let protected = vec![w.join(".git"), w.join(".hanzo"), w.join("tools/hooks")];
        let got = writable_around(w, &protected).expect("carve");
        let rel: Vec<String> = got
            .iter()
            .map(|p| p.strip_prefix(w).unwrap().display().to_string())
            .collect();
        assert_eq!(rel, ["README.md", "src", "tools/bin", "tools/run.sh"]);
        // Nothing granted lies in or above a protected path, and no symlink is granted.
        for p in &got {
            assert!(
                !protected
                    .iter()
                    .any(|q| p.starts_with(q) || q.starts_with(p)),
                "{p:?}"
            );
        }
        // A protected path that does not exist yet still keeps its directory read-only.
        let fresh = tempfile::tempdir().expect("fresh");
        fs::write(fresh.path().join("a.txt"), "x").expect("write");
        let got = writable_around(fresh.path(), &[fresh.path().join(".hanzo")]).expect("carve");
        assert_eq!(got, [fresh.path().join("a.txt")]);
    }

    fn write_refused(roots: &Roots, p: &str) -> String {
        match roots.resolve(p, Intent::Write) {
            Err(e @ PathError::Protected { .. }) => e.to_string(),
            other => panic!("{p}: expected a protected-path refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_gitdir_file_commondir_and_worktrees_are_followed() {
        let (ws, outside, roots) = setup();
        // The workspace is a linked worktree: `.git` is a file naming an admin directory, whose
        // `commondir` names the main repository's git directory.
        let main_git = outside.path().join("main/.git");
        let admin = main_git.join("worktrees/wt");
        fs::create_dir_all(&admin).expect("mkdir");
        fs::write(admin.join("commondir"), "../..\n").expect("write");
        fs::write(
            ws.path().join(".git"),
            format!("gitdir: {}\n", admin.display()),
        )
        .expect("write");
        let protected = protected_paths(ws.path());
        let canon = |p: &Path| p.canonicalize().expect("canon");
        assert!(protected.contains(&canon(&admin)), "{protected:?}");
        assert!(protected.contains(&canon(&main_git)), "{protected:?}");
        assert!(protected.contains(&ws.path().join(".git")), "{protected:?}");
        // Replacing the `.git` file is refused too.
        write_refused(&roots, ".git");
    }

    #[test]
    fn hooks_path_includes_and_configured_programs_are_protected() {
        let (ws, outside, roots) = setup();
        let git = ws.path().join(".git");
        fs::create_dir_all(&git).expect("mkdir");
        fs::write(
            outside.path().join("shared.inc"),
            "[core]\n\tfsmonitor = tools/fsmon.sh\n",
        )
        .expect("write");
        fs::write(
            git.join("config"),
            format!(
                "[core]\n\thooksPath = githooks\n[include]\n\tpath = ../project.gitconfig\n\
                 [includeIf \"gitdir:/nowhere/\"]\n\tpath = {}\n\
                 [diff \"pdf\"]\n\ttextconv = sh scripts/pdf2txt.sh\n\
                 [alias]\n\tup = !./bin/update --all\n",
                outside.path().join("shared.inc").display()
            ),
        )
        .expect("write");
        for (p, why) in [
            ("githooks/pre-commit", "core.hooksPath"),
            ("project.gitconfig", "included"),
            ("tools/fsmon.sh", "core.fsmonitor"),
            ("scripts/pdf2txt.sh", "diff.pdf.textconv"),
            ("bin/update", "alias.up"),
        ] {
            let e = write_refused(&roots, p);
            assert!(e.contains(why), "{p}: {e}");
        }
        assert!(roots.resolve("scripts/other.sh", Intent::Write).is_ok());
    }

    #[test]
    fn a_hook_manager_s_configuration_is_protected_when_its_hook_is_installed() {
        let (ws, _outside, roots) = setup();
        assert!(roots
            .resolve(".pre-commit-config.yaml", Intent::Write)
            .is_ok());
        let hooks = ws.path().join(".git/hooks");
        fs::create_dir_all(&hooks).expect("mkdir");
        fs::write(
            hooks.join("pre-commit"),
            "#!/usr/bin/env bash\nexec pre-commit hook-impl --config=.pre-commit-config.yaml\n",
        )
        .expect("write");
        let e = write_refused(&roots, ".pre-commit-config.yaml");
        assert!(e.contains("installed `pre-commit` hook"), "{e}");
    }

    #[test]
    fn completing_a_bare_repository_is_refused() {
        let (ws, _outside, roots) = setup();
        let bare = ws.path().join("fixtures/evil");
        fs::create_dir_all(bare.join("objects")).expect("mkdir");
        fs::create_dir_all(bare.join("refs")).expect("mkdir");
        // HEAD would complete it.
        let e = write_refused(&roots, "fixtures/evil/HEAD");
        assert!(e.contains("make that directory a git repository"), "{e}");
        fs::write(bare.join("HEAD"), "ref: refs/heads/main\n").expect("write");
        // Once it is one, nothing may be written into it (its `config` would run).
        write_refused(&roots, "fixtures/evil/config");
        write_refused(&roots, "fixtures/evil/hooks/post-checkout");
        assert!(roots.resolve("fixtures/other/HEAD", Intent::Write).is_ok());
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
