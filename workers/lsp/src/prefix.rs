//! Where a language server installed outside the system directories lives, and whether its
//! sandbox may read it.
//!
//! A server under the user's home (`~/.npm-global/bin/pyright-langserver`, `~/.local/bin/…`, a
//! pipx or virtualenv install) cannot run in a sandbox that keeps `$HOME` out of reach. The
//! narrowest opening is its **installation prefix**: the tree of the package that holds the
//! program once links are followed, and of the interpreter its `#!` line names. The supervisor
//! computes these before the lsp worker starts ([`server_prefixes`]) and grants them read-only
//! to the lsp role alone (`ProfileContext::toolchains`); the worker computes them again before it
//! starts a server and refuses one whose prefix was not granted.
//!
//! A prefix is never `$HOME` (nor a directory containing it, the workspace, or one of hanzo's
//! hidden directories), never inside a directory of secrets (`~/.ssh`, `~/.aws`, `~/.config`,
//! `~/.gnupg`, …), and never a directory that directly holds a known secret file or directory.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// Directories under `$HOME` that hold secrets or settings: no prefix is inside one (the list
/// the settings loader also vets MCP servers' `read_paths` with).
pub use hanzo_policy::profile::SECRET_HOME_DIRS;

/// Entries whose presence directly in a directory makes it a refused prefix (a home directory
/// looks like this; a package tree does not).
pub const SECRET_ENTRIES: &[&str] = &[
    ".ssh",
    ".aws",
    ".gnupg",
    ".config",
    ".kube",
    ".docker",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
    ".password-store",
    ".env",
    "credentials",
    "credentials.toml",
    "id_rsa",
    "id_ecdsa",
    "id_ed25519",
];

/// What is already readable without a prefix: the system directories (`SYSTEM_READ_PATHS`).
fn covered_by_system(real: &Path) -> bool {
    hanzo_policy::profile::SYSTEM_READ_PATHS
        .iter()
        .any(|s| real.starts_with(s))
}

/// Why a prefix is not granted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{} is installed under {}, which {why}; the sandbox will not open it to a language server \
     (install the server in a directory of its own, e.g. `npm install -g --prefix ~/.npm-global`, \
     `pipx install`, or a binary in `~/.local/bin`)",
    program.display(),
    prefix.display()
)]
pub struct PrefixRefused {
    /// The server's program, links resolved.
    pub program: PathBuf,
    /// The installation prefix that would have to be granted.
    pub prefix: PathBuf,
    /// Why that prefix is refused (it is the home directory, holds secrets, …).
    pub why: String,
}

/// What a prefix is checked against.
#[derive(Debug, Clone, Default)]
pub struct PrefixRules {
    /// The user's home directory, links resolved (`None` when unknown: the lsp worker does not
    /// receive `HOME`; the secret entries still refuse a home directory).
    pub home: Option<PathBuf>,
    /// The workspace, links resolved: already readable; no prefix may contain it.
    pub workspace: PathBuf,
    /// hanzo's hidden directories: no prefix may contain one (or be inside one).
    pub hidden: Vec<PathBuf>,
    /// Directories searched for the interpreter of `#!/usr/bin/env NAME`.
    pub search_path: Vec<PathBuf>,
}

/// The installation prefixes `program` needs beyond the system directories and the workspace:
/// its own (links followed) and its `#!` interpreter's. Empty for a system or workspace program.
pub fn server_prefixes(program: &Path, rules: &PrefixRules) -> Result<Vec<PathBuf>, PrefixRefused> {
    let mut out = Vec::new();
    let real = std::fs::canonicalize(program).unwrap_or_else(|_| program.to_path_buf());
    push_prefix(program, &real, rules, &mut out)?;
    if let Some(interp) = interpreter(&real, &rules.search_path) {
        let interp_real = std::fs::canonicalize(&interp).unwrap_or(interp.clone());
        push_prefix(&interp, &interp_real, rules, &mut out)?;
    }
    Ok(out)
}

fn push_prefix(
    program: &Path,
    real: &Path,
    rules: &PrefixRules,
    out: &mut Vec<PathBuf>,
) -> Result<(), PrefixRefused> {
    if covered_by_system(real) || real.starts_with(&rules.workspace) {
        return Ok(());
    }
    let prefix = prefix_of(real);
    vet(program, &prefix, rules)?;
    if !out.iter().any(|p| prefix.starts_with(p)) {
        out.retain(|p| !p.starts_with(&prefix));
        out.push(prefix);
    }
    Ok(())
}

/// The package tree holding `real` (an absolute path with links resolved): the outermost
/// `node_modules` directory on its path (an npm prefix's packages, so a server finds its sibling
/// packages such as `typescript`); a rustup toolchain (`…/toolchains/<name>`); a virtualenv
/// (`bin/`'s parent holds `pyvenv.cfg`: pipx and venv installs); a version manager's version
/// (`bin/`'s parent is `…/versions/<v>` or `…/installs/<plugin>/<v>`); the program alone when
/// it sits in any other `bin` directory; else the directory holding it.
pub fn prefix_of(real: &Path) -> PathBuf {
    let mut acc = PathBuf::new();
    let mut comps = real.components().peekable();
    while let Some(c) = comps.next() {
        acc.push(c.as_os_str());
        if comps.peek().is_none() {
            break; // the file itself
        }
        if c == Component::Normal("node_modules".as_ref()) {
            return acc;
        }
        if c == Component::Normal("toolchains".as_ref())
            && acc
                .parent()
                .and_then(Path::file_name)
                .is_some_and(|n| n == ".rustup")
        {
            if let Some(next) = comps.next() {
                acc.push(next.as_os_str());
                if comps.peek().is_some() {
                    return acc;
                }
            }
            break;
        }
    }
    let dir = real
        .parent()
        .map_or_else(|| real.to_path_buf(), Path::to_path_buf);
    if dir.file_name().is_none_or(|n| n != "bin") {
        return dir;
    }
    match dir.parent() {
        Some(venv) if venv.join("pyvenv.cfg").is_file() => venv.to_path_buf(),
        Some(install) if is_version_install(install) => install.to_path_buf(),
        // A `bin` directory is where programs of many packages meet (`~/.local/bin`,
        // `/opt/tools/bin`): the program alone, not its neighbours.
        _ => real.to_path_buf(),
    }
}

/// A version manager's installation of one version, whose `bin` holds the program and whose
/// `lib` the rest: `…/versions/3.12.1` (pyenv), `…/versions/node/v20.11.0` (nvm),
/// `…/installs/nodejs/20.11.0` (asdf).
fn is_version_install(dir: &Path) -> bool {
    let looks_like_version = dir.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
        let n = n.strip_prefix('v').unwrap_or(n);
        n.starts_with(|c: char| c.is_ascii_digit())
    });
    let named =
        |p: Option<&Path>, name: &str| p.and_then(Path::file_name).is_some_and(|n| n == name);
    let parent = dir.parent();
    looks_like_version
        && (named(parent, "versions")
            || named(parent.and_then(Path::parent), "versions")
            || named(parent.and_then(Path::parent), "installs"))
}

/// The `bin` directory of the toolchain or version installation `real` belongs to (a rustup
/// toolchain, a pyenv/nvm/asdf version, a virtualenv), to put first on a server's `PATH` so the
/// programs it runs (`cargo` for rust-analyzer, `node` for a script) are the same
/// installation's, not a version manager's stand-in that the sandbox cannot run.
pub fn install_bin(real: &Path) -> Option<PathBuf> {
    let prefix = prefix_of(real);
    if prefix == real || prefix.file_name().is_some_and(|n| n == "node_modules") {
        return None;
    }
    let bin = prefix.join("bin");
    (real.parent() == Some(bin.as_path())).then_some(bin)
}

/// Refuses a prefix that would open too much.
fn vet(program: &Path, prefix: &Path, rules: &PrefixRules) -> Result<(), PrefixRefused> {
    let refuse = |why: String| PrefixRefused {
        program: program.to_path_buf(),
        prefix: prefix.to_path_buf(),
        why,
    };
    if prefix.parent().is_none() {
        return Err(refuse("is the root of the filesystem".into()));
    }
    if let Some(home) = &rules.home {
        if home.starts_with(prefix) {
            return Err(refuse(if home == prefix {
                "is the home directory itself".into()
            } else {
                format!("contains the home directory {}", home.display())
            }));
        }
        if let Ok(rel) = prefix.strip_prefix(home) {
            if let Some(Component::Normal(first)) = rel.components().next() {
                if SECRET_HOME_DIRS.iter().any(|d| first == *d) {
                    return Err(refuse(format!(
                        "is inside ~/{}, a directory of secrets and settings",
                        first.to_string_lossy()
                    )));
                }
            }
        }
    }
    // `symlink_metadata` is a `stat`, which Landlock does not restrict: the worker sees what the
    // supervisor saw.
    if let Some(name) = SECRET_ENTRIES
        .iter()
        .find(|n| std::fs::symlink_metadata(prefix.join(n)).is_ok())
    {
        return Err(refuse(format!(
            "holds {name}, which is where secrets are kept (it looks like a home directory)"
        )));
    }
    // A directory anyone may write (`/tmp`, `/var/tmp`, `/dev/shm`): granting it would open
    // every other user's and program's files there, and anyone could plant the program. For a
    // program granted alone, the same holds for the directory holding it.
    let world_writable = |p: &Path| {
        std::fs::metadata(p)
            .is_ok_and(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o002 != 0)
    };
    if world_writable(prefix) || (!prefix.is_dir() && prefix.parent().is_some_and(world_writable)) {
        return Err(refuse(
            "is writable by every user (a shared temporary directory?); install the server \
             in a directory of its own"
                .into(),
        ));
    }
    if rules.workspace.starts_with(prefix) {
        return Err(refuse(format!(
            "contains the workspace {}",
            rules.workspace.display()
        )));
    }
    if let Some(h) = rules
        .hidden
        .iter()
        .find(|h| h.starts_with(prefix) || prefix.starts_with(h))
    {
        return Err(refuse(format!(
            "overlaps hanzo's own directory {}",
            h.display()
        )));
    }
    Ok(())
}

/// The interpreter a `#!` line names (`#!/usr/bin/env NAME` looked up on `search_path`), if the
/// file starts with one and it can be read.
fn interpreter(real: &Path, search_path: &[PathBuf]) -> Option<PathBuf> {
    let mut head = [0u8; 256];
    let n = std::fs::File::open(real).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    let first = PathBuf::from(words.next()?);
    if first.file_name().is_some_and(|n| n == "env") {
        let name = words.find(|w| !w.starts_with('-') && !w.contains('='))?;
        if name.contains('/') {
            return Some(PathBuf::from(name));
        }
        return search_path
            .iter()
            .map(|d| d.join(name))
            .find(|p| p.is_file());
    }
    Some(first)
}

/// What the lsp role is opened to for a table of servers: the prefixes of each server whose
/// program is found (on `rules.search_path`, or by its path relative to the workspace), merged;
/// and the servers refused, with why (the worker refuses them again, naming the path, when a
/// file of theirs is used). Servers not installed are left out: they are reported when needed.
pub fn grants_for(
    registry: &crate::Registry,
    rules: &PrefixRules,
) -> (Vec<PathBuf>, Vec<(String, PrefixRefused)>) {
    let mut granted: Vec<PathBuf> = Vec::new();
    let mut refused = Vec::new();
    for spec in registry.servers() {
        let Some(program) =
            crate::registry::resolve_program(&spec.command, &rules.search_path, &rules.workspace)
        else {
            continue;
        };
        match server_prefixes(&program, rules) {
            Ok(prefixes) => {
                for p in prefixes {
                    if !granted.iter().any(|g| p.starts_with(g)) {
                        granted.retain(|g| !g.starts_with(&p));
                        granted.push(p);
                    }
                }
            }
            Err(e) => refused.push((spec.name.clone(), e)),
        }
    }
    granted.sort();
    (granted, refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_package_trees() {
        let p = |s: &str| prefix_of(Path::new(s));
        assert_eq!(
            p("/h/.npm-global/lib/node_modules/pyright/langserver.index.js"),
            PathBuf::from("/h/.npm-global/lib/node_modules")
        );
        assert_eq!(
            p("/h/.rustup/toolchains/stable-x86_64-unknown-linux-gnu/bin/rust-analyzer"),
            PathBuf::from("/h/.rustup/toolchains/stable-x86_64-unknown-linux-gnu")
        );
        // A shared `bin` directory: the program alone.
        assert_eq!(
            p("/h/.local/bin/rust-analyzer"),
            PathBuf::from("/h/.local/bin/rust-analyzer")
        );
        assert_eq!(p("/h/server"), PathBuf::from("/h"));
        assert_eq!(p("/h/tools/srv/run"), PathBuf::from("/h/tools/srv"));
        // Version managers' installs are one prefix each, their `bin` first on a server's PATH.
        assert_eq!(
            p("/h/.pyenv/versions/3.12.1/bin/python3.12"),
            PathBuf::from("/h/.pyenv/versions/3.12.1")
        );
        assert_eq!(
            p("/h/.nvm/versions/node/v20.11.0/bin/node"),
            PathBuf::from("/h/.nvm/versions/node/v20.11.0")
        );
        assert_eq!(
            p("/h/.asdf/installs/nodejs/20.11.0/bin/node"),
            PathBuf::from("/h/.asdf/installs/nodejs/20.11.0")
        );
        assert_eq!(
            install_bin(Path::new(
                "/h/.rustup/toolchains/stable-x/bin/rust-analyzer"
            )),
            Some(PathBuf::from("/h/.rustup/toolchains/stable-x/bin"))
        );
        assert_eq!(
            install_bin(Path::new(
                "/h/.pyenv/versions/3.12.1/bin/pyright-langserver"
            )),
            Some(PathBuf::from("/h/.pyenv/versions/3.12.1/bin"))
        );
        assert_eq!(install_bin(Path::new("/h/.local/bin/rust-analyzer")), None);
        assert_eq!(
            install_bin(Path::new("/h/.npm/lib/node_modules/p/x.js")),
            None
        );
    }

    #[test]
    fn a_virtualenv_is_one_prefix() {
        let dir = tempfile::tempdir().expect("tmp");
        let venv = dir.path().join("pipx/venvs/pyright");
        std::fs::create_dir_all(venv.join("bin")).expect("mkdir");
        std::fs::write(venv.join("pyvenv.cfg"), "home = /usr/bin\n").expect("cfg");
        assert_eq!(prefix_of(&venv.join("bin/pyright-langserver")), venv);
    }

    fn rules(home: &Path) -> PrefixRules {
        PrefixRules {
            home: Some(home.to_path_buf()),
            workspace: home.join("src/project"),
            hidden: vec![home.join(".config/hanzo"), home.join(".local/share/hanzo")],
            search_path: vec![],
        }
    }

    #[test]
    fn a_directory_every_user_may_write_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tmp");
        let shared = dir.path().canonicalize().expect("dir").join("shared");
        std::fs::create_dir(&shared).expect("mkdir");
        std::fs::write(shared.join("server"), "#!/bin/sh\n").expect("server");
        let r = rules(Path::new("/nonexistent/home"));
        assert!(vet(&shared.join("server"), &shared, &r).is_ok());
        // As /tmp is: sticky and world-writable.
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
        let e = vet(&shared.join("server"), &shared, &r).expect_err("refused");
        assert!(e.why.contains("writable by every user"), "{}", e.why);
        // Its prefix is the directory holding it, which is refused on the real /tmp too.
        assert_eq!(prefix_of(&shared.join("server")), shared);
        let tmp = vet(Path::new("/tmp/server"), Path::new("/tmp"), &r).expect_err("refused");
        assert!(tmp.why.contains("writable by every user"), "{}", tmp.why);
    }

    #[test]
    fn home_secrets_and_the_workspace_parent_are_refused() {
        let dir = tempfile::tempdir().expect("tmp");
        let home = dir.path().canonicalize().expect("home");
        std::fs::create_dir_all(home.join(".ssh")).expect("ssh");
        let r = rules(&home);
        let why = |prefix: &Path| vet(&prefix.join("x"), prefix, &r).expect_err("refused").why;
        assert_eq!(why(&home), "is the home directory itself");
        assert!(why(home.parent().expect("parent")).starts_with("contains the home"));
        assert!(why(&home.join(".config/nvim/bin")).contains("~/.config"));
        assert!(why(&home.join(".ssh")).contains("~/.ssh"));
        assert!(why(&home.join("src")).starts_with("contains the workspace"));
        assert!(why(&home.join(".local")).contains(".local/share/hanzo"));
        assert!(vet(Path::new("x"), &home.join(".local/bin"), &r).is_ok());
        // Without HOME, a directory that looks like one is still refused.
        let blind = PrefixRules { home: None, ..r };
        let e = vet(&home.join("srv"), &home, &blind).expect_err("refused");
        assert!(e.why.contains(".ssh"), "{}", e.why);
        assert!(e.to_string().contains(&home.display().to_string()), "{e}");
    }

    #[test]
    fn a_script_brings_its_interpreters_prefix() {
        let dir = tempfile::tempdir().expect("tmp");
        let home = dir.path().canonicalize().expect("home");
        let node_bin = home.join(".nvm/versions/node/v20/bin");
        let pkg = home.join(".nvm/versions/node/v20/lib/node_modules/srv");
        std::fs::create_dir_all(&node_bin).expect("mkdir");
        std::fs::create_dir_all(&pkg).expect("mkdir");
        std::fs::write(node_bin.join("node"), "").expect("node");
        std::fs::write(pkg.join("main.js"), "#!/usr/bin/env node\n").expect("script");
        std::os::unix::fs::symlink(pkg.join("main.js"), node_bin.join("srv")).expect("link");
        let r = PrefixRules {
            search_path: vec![node_bin.clone()],
            ..rules(&home)
        };
        // nvm's version holds both the package and the interpreter: one prefix.
        assert_eq!(
            server_prefixes(&node_bin.join("srv"), &r).expect("granted"),
            vec![home.join(".nvm/versions/node/v20")]
        );
        assert_eq!(
            server_prefixes(Path::new("/usr/bin/env"), &r).expect("system"),
            Vec::<PathBuf>::new()
        );
    }
}
