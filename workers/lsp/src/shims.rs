//! Version managers' stand-ins for a language server: rustup's proxies (`~/.cargo/bin/rust-analyzer`
//! is a link to `rustup`), pyenv's and asdf's shims (`~/.pyenv/shims/pyright-langserver` is a
//! script that runs `pyenv exec`). Started in the sandbox, a stand-in fails: it needs the
//! manager's whole home (`~/.rustup`, `~/.pyenv`), its settings and, for a shim, a shell and the
//! manager's own scripts. So the supervisor, which may read those settings, resolves a stand-in to
//! the program it would have run — the same choice of toolchain or version the manager makes —
//! and starts that instead ([`resolve`]); only that program's installation prefix is opened.
//!
//! The choice follows each manager's documented order, reading files only (no manager is run):
//!
//! - **rustup:** `RUSTUP_TOOLCHAIN`; the nearest `rust-toolchain.toml` or `rust-toolchain` from
//!   the workspace up; a directory override in `$RUSTUP_HOME/settings.toml`; its
//!   `default_toolchain`. A short name (`stable`) is completed with the host's triple.
//! - **pyenv:** `PYENV_VERSION`; the nearest `.python-version` from the workspace up;
//!   `$PYENV_ROOT/version`. Each may list several versions; the first that has the program wins.
//!   `system` means the program found on `PATH` without the shims.
//! - **asdf:** the plugins the shim names (`# asdf-plugin: NAME VERSION` lines), with the version
//!   from the nearest `.tool-versions` from the workspace up, then `$HOME/.tool-versions`.
//!
//! A toolchain or version name comes from files the workspace may hold: it is only ever a single
//! path component under the manager's own directory (no `/`, no `..`), and a toolchain file that
//! names a custom `path` is refused.

use std::path::{Path, PathBuf};

/// The variables the resolution reads (from the start environment in the supervisor).
#[derive(Debug, Clone, Default)]
pub struct ShimEnv {
    /// `HOME`.
    pub home: Option<PathBuf>,
    /// `RUSTUP_HOME`, if set.
    pub rustup_home: Option<PathBuf>,
    /// `RUSTUP_TOOLCHAIN`: a toolchain chosen for this process.
    pub rustup_toolchain: Option<String>,
    /// `PYENV_ROOT`, if set.
    pub pyenv_root: Option<PathBuf>,
    /// `PYENV_VERSION`: a version chosen for this process.
    pub pyenv_version: Option<String>,
    /// `ASDF_DATA_DIR`, if set.
    pub asdf_data_dir: Option<PathBuf>,
    /// `PATH`'s directories (for pyenv's `system`).
    pub search_path: Vec<PathBuf>,
}

impl ShimEnv {
    /// From a variable lookup (empty values count as unset).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> ShimEnv {
        let get = |k: &str| var(k).filter(|v| !v.is_empty());
        let path = |k: &str| get(k).map(PathBuf::from).filter(|p| p.is_absolute());
        ShimEnv {
            home: path("HOME"),
            rustup_home: path("RUSTUP_HOME"),
            rustup_toolchain: get("RUSTUP_TOOLCHAIN"),
            pyenv_root: path("PYENV_ROOT"),
            pyenv_version: get("PYENV_VERSION"),
            asdf_data_dir: path("ASDF_DATA_DIR"),
            search_path: get("PATH")
                .map(|p| {
                    std::env::split_paths(&p)
                        .filter(|d| d.is_absolute())
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

/// Which manager a stand-in belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Manager {
    /// rustup's toolchain proxies (a link to `rustup` named like the tool).
    Rustup,
    /// pyenv's shims.
    Pyenv,
    /// asdf's shims.
    Asdf,
}

impl std::fmt::Display for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Manager::Rustup => "rustup",
            Manager::Pyenv => "pyenv",
            Manager::Asdf => "asdf",
        })
    }
}

/// The program a stand-in stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The manager whose stand-in it was.
    pub manager: Manager,
    /// The toolchain or version chosen, and where the choice came from.
    pub version: String,
    /// Where the choice came from (a variable, a version file, the default).
    pub source: String,
    /// The real program (absolute, executable).
    pub program: PathBuf,
}

/// Why a stand-in could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShimError {
    /// No version is chosen for the workspace.
    #[error(
        "{} is a {manager} {kind}, and no {manager} version is chosen for this workspace ({tried})",
        program.display(),
        kind = if *manager == Manager::Rustup { "proxy" } else { "shim" }
    )]
    NoVersion {
        /// The stand-in found on `PATH`.
        program: PathBuf,
        /// Its manager.
        manager: Manager,
        /// Where a choice was looked for.
        tried: String,
    },
    /// The chosen version lacks the program.
    #[error(
        "{} is a {manager} stand-in, and {manager} {version} (from {from}) has no {name}: \
         {hint}",
        program.display()
    )]
    NotInstalled {
        /// The stand-in found on `PATH`.
        program: PathBuf,
        /// Its manager.
        manager: Manager,
        /// The version chosen.
        version: String,
        /// Where the version was chosen.
        from: String,
        /// The program's name.
        name: String,
        /// How to install it for that version.
        hint: String,
    },
    /// The manager's files could not be used (unreadable, malformed, or outside what may be read).
    #[error("{} is a {manager} stand-in, and {detail}", program.display())]
    Refused {
        /// The stand-in found on `PATH`.
        program: PathBuf,
        /// Its manager.
        manager: Manager,
        /// What went wrong.
        detail: String,
    },
}

/// `program` (as found on `PATH`), or what it stands for when it is a version manager's proxy or
/// shim: `Ok(None)` for an ordinary program.
pub fn resolve(
    program: &Path,
    workspace: &Path,
    env: &ShimEnv,
) -> Result<Option<Resolved>, ShimError> {
    let Some(name) = program.file_name().and_then(|n| n.to_str()) else {
        return Ok(None);
    };
    if is_rustup_proxy(program, name) {
        return rustup(program, name, workspace, env).map(Some);
    }
    let Some(shims) = program
        .parent()
        .filter(|d| d.file_name() == Some("shims".as_ref()))
    else {
        return Ok(None);
    };
    let head = script_head(program);
    if head.contains("pyenv") && head.contains(" exec ") {
        return pyenv(program, name, shims, workspace, env).map(Some);
    }
    let plugins: Vec<(String, String)> = head
        .lines()
        .filter_map(|l| l.strip_prefix("# asdf-plugin: "))
        .filter_map(|rest| {
            let mut w = rest.split_whitespace();
            Some((w.next()?.to_string(), w.next().unwrap_or("").to_string()))
        })
        .collect();
    if !plugins.is_empty() {
        return asdf(program, name, shims, &plugins, workspace, env).map(Some);
    }
    Ok(None)
}

/// A rustup proxy: a link to `rustup` (or a hard link of the `rustup` beside it), not `rustup`
/// itself.
fn is_rustup_proxy(program: &Path, name: &str) -> bool {
    if name == "rustup" {
        return false;
    }
    let real = std::fs::canonicalize(program).unwrap_or_else(|_| program.to_path_buf());
    if real.file_name() == Some("rustup".as_ref()) {
        return true;
    }
    use std::os::unix::fs::MetadataExt as _;
    match (
        std::fs::metadata(program),
        program
            .parent()
            .map(|d| std::fs::metadata(d.join("rustup"))),
    ) {
        (Ok(a), Some(Ok(b))) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// The first 4 KiB of a file as text (a shim is a short script).
fn script_head(program: &Path) -> String {
    use std::io::Read as _;
    let mut head = vec![0u8; 4096];
    let n = std::fs::File::open(program)
        .and_then(|mut f| f.read(&mut head))
        .unwrap_or(0);
    head.truncate(n);
    String::from_utf8_lossy(&head).into_owned()
}

/// A name that is one path component a manager may use for a toolchain or version.
fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.len() <= 128
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+'))
}

/// `dir` and each of its ancestors.
fn upwards(dir: &Path) -> impl Iterator<Item = &Path> {
    dir.ancestors()
}

fn executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The value of `key = "value"` on a TOML line (only the simple quoted form rustup writes).
fn toml_string(line: &str, key: &str) -> Option<String> {
    let (k, v) = line.split_once('=')?;
    let k = k.trim().trim_matches('"');
    if k != key {
        return None;
    }
    let v = v.trim();
    let v = v.strip_prefix('"')?.split('"').next()?;
    Some(v.to_string())
}

/// The toolchain a `rust-toolchain.toml` (or TOML-form `rust-toolchain`) names, or the legacy
/// one-line form's name; `Err` for a custom `path`.
fn toolchain_file(text: &str) -> Result<Option<String>, String> {
    let mut in_toolchain = false;
    let mut legacy = None;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with('[') {
            in_toolchain = line == "[toolchain]";
            continue;
        }
        if in_toolchain {
            if toml_string(line, "path").is_some() {
                return Err("its toolchain file names a custom toolchain path".into());
            }
            if let Some(c) = toml_string(line, "channel") {
                return Ok(Some(c));
            }
        } else if !line.contains('=') && legacy.is_none() {
            legacy = Some(line.to_string());
        }
    }
    Ok(legacy)
}

fn rustup(
    program: &Path,
    name: &str,
    workspace: &Path,
    env: &ShimEnv,
) -> Result<Resolved, ShimError> {
    let refused = |detail: String| ShimError::Refused {
        program: program.to_path_buf(),
        manager: Manager::Rustup,
        detail,
    };
    // `$RUSTUP_HOME`, else `.rustup` beside the `.cargo` whose `bin` holds the proxy, else `~`'s.
    let beside = program
        .parent()
        .and_then(Path::parent)
        .filter(|c| c.file_name() == Some(".cargo".as_ref()))
        .and_then(Path::parent)
        .map(|h| h.join(".rustup"));
    let home = env
        .rustup_home
        .clone()
        .or(beside.filter(|d| d.is_dir()))
        .or_else(|| env.home.as_ref().map(|h| h.join(".rustup")))
        .ok_or_else(|| refused("neither RUSTUP_HOME nor HOME is known".into()))?;
    let settings = std::fs::read_to_string(home.join("settings.toml")).unwrap_or_default();
    let mut chosen: Option<(String, String)> = env
        .rustup_toolchain
        .clone()
        .map(|t| (t, "RUSTUP_TOOLCHAIN".to_string()));
    if chosen.is_none() {
        'up: for dir in upwards(workspace) {
            for file in ["rust-toolchain.toml", "rust-toolchain"] {
                let path = dir.join(file);
                let Ok(text) = std::fs::read_to_string(&path) else {
                    continue;
                };
                match toolchain_file(&text) {
                    Ok(Some(t)) => {
                        chosen = Some((t, path.display().to_string()));
                        break 'up;
                    }
                    Ok(None) => {}
                    Err(why) => return Err(refused(format!("{}: {why}", path.display()))),
                }
            }
        }
    }
    if chosen.is_none() {
        let mut overrides = false;
        let mut best: Option<(usize, String)> = None;
        let mut default = None;
        for line in settings.lines().map(str::trim) {
            if line.starts_with('[') {
                overrides = line == "[overrides]";
                continue;
            }
            if overrides {
                if let Some((k, _)) = line.split_once('=') {
                    let dir = PathBuf::from(k.trim().trim_matches('"'));
                    let depth = dir.components().count();
                    if let Some(v) = toml_string(line, k.trim().trim_matches('"')) {
                        if workspace.starts_with(&dir)
                            && best.as_ref().is_none_or(|(d, _)| depth > *d)
                        {
                            best = Some((depth, v));
                        }
                    }
                }
            } else if let Some(v) = toml_string(line, "default_toolchain") {
                default = Some(v);
            }
        }
        let settings_file = home.join("settings.toml").display().to_string();
        chosen = best
            .map(|(_, v)| (v, format!("an override in {settings_file}")))
            .or(default.map(|v| (v, format!("default_toolchain in {settings_file}"))));
    }
    let Some((toolchain, source)) = chosen else {
        return Err(ShimError::NoVersion {
            program: program.to_path_buf(),
            manager: Manager::Rustup,
            tried: "RUSTUP_TOOLCHAIN, rust-toolchain files, settings.toml".into(),
        });
    };
    if !valid_name(&toolchain) {
        return Err(refused(format!(
            "the toolchain name {toolchain:?} (from {source}) is not a plain name"
        )));
    }
    let toolchains = home.join("toolchains");
    let host_suffix = format!("-{}-unknown-linux-", std::env::consts::ARCH);
    let dir = if toolchains.join(&toolchain).is_dir() {
        Some(toolchains.join(&toolchain))
    } else {
        let mut found: Vec<PathBuf> = std::fs::read_dir(&toolchains)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                e.file_name().to_str().is_some_and(|n| {
                    n.strip_prefix(toolchain.as_str())
                        .is_some_and(|rest| rest.starts_with(&host_suffix))
                })
            })
            .map(|e| e.path())
            .collect();
        found.sort();
        found.into_iter().next()
    };
    let not_installed = |hint: String| ShimError::NotInstalled {
        program: program.to_path_buf(),
        manager: Manager::Rustup,
        version: toolchain.clone(),
        from: source.clone(),
        name: name.to_string(),
        hint,
    };
    let Some(dir) = dir else {
        return Err(not_installed(format!(
            "the toolchain is not installed (`rustup toolchain install {toolchain}`)"
        )));
    };
    let real = dir.join("bin").join(name);
    if !executable(&real) {
        return Err(not_installed(format!(
            "`rustup component add {name} --toolchain {toolchain}`"
        )));
    }
    Ok(Resolved {
        manager: Manager::Rustup,
        version: toolchain,
        source,
        program: real,
    })
}

/// The versions a pyenv version file or variable lists (one per line or `:`-separated).
fn versions_in(text: &str) -> Vec<String> {
    text.lines()
        .flat_map(|l| l.split(':'))
        .map(str::trim)
        .filter(|v| !v.is_empty() && !v.starts_with('#'))
        .map(str::to_string)
        .collect()
}

fn pyenv(
    program: &Path,
    name: &str,
    shims: &Path,
    workspace: &Path,
    env: &ShimEnv,
) -> Result<Resolved, ShimError> {
    let root = env
        .pyenv_root
        .clone()
        .or_else(|| shims.parent().map(Path::to_path_buf))
        .unwrap_or_default();
    let mut chosen = env
        .pyenv_version
        .as_deref()
        .map(|v| (versions_in(v), "PYENV_VERSION".to_string()));
    if chosen.is_none() {
        chosen = upwards(workspace)
            .map(|d| d.join(".python-version"))
            .chain(std::iter::once(root.join("version")))
            .find_map(|p| {
                let text = std::fs::read_to_string(&p).ok()?;
                let v = versions_in(&text);
                (!v.is_empty()).then(|| (v, p.display().to_string()))
            });
    }
    let (versions, source) =
        chosen.unwrap_or_else(|| (vec!["system".into()], "no version file".into()));
    for v in &versions {
        if v == "system" {
            let found = env
                .search_path
                .iter()
                .filter(|d| *d != shims)
                .map(|d| d.join(name))
                .find(|p| executable(p));
            if let Some(real) = found {
                return Ok(Resolved {
                    manager: Manager::Pyenv,
                    version: v.clone(),
                    source,
                    program: real,
                });
            }
            continue;
        }
        if !valid_name(v) {
            return Err(ShimError::Refused {
                program: program.to_path_buf(),
                manager: Manager::Pyenv,
                detail: format!("the version name {v:?} (from {source}) is not a plain name"),
            });
        }
        let real = root.join("versions").join(v).join("bin").join(name);
        if executable(&real) {
            return Ok(Resolved {
                manager: Manager::Pyenv,
                version: v.clone(),
                source,
                program: real,
            });
        }
    }
    Err(ShimError::NotInstalled {
        program: program.to_path_buf(),
        manager: Manager::Pyenv,
        version: versions.join(":"),
        from: source,
        name: name.to_string(),
        hint: format!(
            "install it into that version (e.g. `pip install` under `pyenv shell {}`)",
            versions[0]
        ),
    })
}

fn asdf(
    program: &Path,
    name: &str,
    shims: &Path,
    plugins: &[(String, String)],
    workspace: &Path,
    env: &ShimEnv,
) -> Result<Resolved, ShimError> {
    let data = env
        .asdf_data_dir
        .clone()
        .or_else(|| shims.parent().map(Path::to_path_buf))
        .unwrap_or_default();
    let files = upwards(workspace)
        .map(|d| d.join(".tool-versions"))
        .chain(env.home.iter().map(|h| h.join(".tool-versions")));
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        for line in text.lines() {
            let mut words = line.split('#').next().unwrap_or("").split_whitespace();
            let Some(plugin) = words.next() else { continue };
            if !plugins.iter().any(|(p, _)| p == plugin) {
                continue;
            }
            let source = file.display().to_string();
            let listed: Vec<&str> = words.collect();
            for v in &listed {
                if *v == "system" {
                    continue;
                }
                if !valid_name(plugin) || !valid_name(v) {
                    return Err(ShimError::Refused {
                        program: program.to_path_buf(),
                        manager: Manager::Asdf,
                        detail: format!(
                            "the entry {plugin} {v} (from {source}) is not a plain name"
                        ),
                    });
                }
                let real = data
                    .join("installs")
                    .join(plugin)
                    .join(v)
                    .join("bin")
                    .join(name);
                if executable(&real) {
                    return Ok(Resolved {
                        manager: Manager::Asdf,
                        version: format!("{plugin} {v}"),
                        source,
                        program: real,
                    });
                }
            }
            return Err(ShimError::NotInstalled {
                program: program.to_path_buf(),
                manager: Manager::Asdf,
                version: format!("{plugin} {}", listed.join(" ")),
                from: source,
                name: name.to_string(),
                hint: format!("install it for that version, or `asdf reshim {plugin}`"),
            });
        }
    }
    Err(ShimError::NoVersion {
        program: program.to_path_buf(),
        manager: Manager::Asdf,
        tried: format!(
            ".tool-versions from the workspace up and in the home, for {}",
            plugins
                .iter()
                .map(|(p, _)| p.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt as _};

    fn exe(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().expect("dir")).expect("mkdir");
        std::fs::write(path, text).expect("write");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }

    struct Home {
        _dir: tempfile::TempDir,
        home: PathBuf,
        ws: PathBuf,
    }

    fn home() -> Home {
        let dir = tempfile::tempdir().expect("tmp");
        let home = dir.path().canonicalize().expect("home");
        let ws = home.join("src/project");
        std::fs::create_dir_all(&ws).expect("ws");
        Home {
            _dir: dir,
            home,
            ws,
        }
    }

    fn env(h: &Home) -> ShimEnv {
        ShimEnv {
            home: Some(h.home.clone()),
            ..ShimEnv::default()
        }
    }

    /// `~/.cargo/bin/rust-analyzer -> rustup`, two toolchains, `stable` the default.
    fn rustup_home(h: &Home) -> PathBuf {
        let bin = h.home.join(".cargo/bin");
        exe(&bin.join("rustup"), "\x7fELF rustup");
        symlink("rustup", bin.join("rust-analyzer")).expect("proxy");
        let triple = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
        for tc in ["stable", "nightly"] {
            exe(
                &h.home.join(format!(
                    ".rustup/toolchains/{tc}-{triple}/bin/rust-analyzer"
                )),
                tc,
            );
        }
        std::fs::write(
            h.home.join(".rustup/settings.toml"),
            format!(
                "version = \"12\"\ndefault_toolchain = \"stable-{triple}\"\n\n[overrides]\n\"{}\" = \"nightly-{triple}\"\n",
                h.home.join("src/other").display()
            ),
        )
        .expect("settings");
        bin.join("rust-analyzer")
    }

    #[test]
    fn a_rustup_proxy_is_its_default_toolchains_program() {
        let h = home();
        let proxy = rustup_home(&h);
        let r = resolve(&proxy, &h.ws, &env(&h))
            .expect("ok")
            .expect("a proxy");
        assert_eq!(r.manager, Manager::Rustup);
        assert!(r.version.starts_with("stable-"), "{r:?}");
        assert!(r.source.starts_with("default_toolchain in "), "{r:?}");
        assert_eq!(std::fs::read_to_string(&r.program).expect("read"), "stable");
        // `rustup` itself, and an ordinary program, are not proxies.
        assert_eq!(
            resolve(&h.home.join(".cargo/bin/rustup"), &h.ws, &env(&h)),
            Ok(None)
        );
        exe(&h.home.join(".local/bin/tool"), "#!/bin/sh\n");
        assert_eq!(
            resolve(&h.home.join(".local/bin/tool"), &h.ws, &env(&h)),
            Ok(None)
        );
    }

    #[test]
    fn rustup_s_order_toolchain_file_then_override_then_variable_first() {
        let h = home();
        let proxy = rustup_home(&h);
        // A directory override for another directory does not apply; one for an ancestor does.
        let other = h.home.join("src/other/deep");
        std::fs::create_dir_all(&other).expect("mkdir");
        let r = resolve(&proxy, &other, &env(&h))
            .expect("ok")
            .expect("proxy");
        assert!(r.version.starts_with("nightly-"), "{r:?}");
        assert!(r.source.starts_with("an override in"), "{r:?}");
        // The workspace's toolchain file, short name completed with the host triple.
        std::fs::write(
            h.ws.join("rust-toolchain.toml"),
            "[toolchain]\nchannel = \"nightly\"\ncomponents = [\"rust-analyzer\"]\n",
        )
        .expect("file");
        let r = resolve(&proxy, &h.ws, &env(&h))
            .expect("ok")
            .expect("proxy");
        assert_eq!(
            std::fs::read_to_string(&r.program).expect("read"),
            "nightly"
        );
        assert_eq!(
            r.source,
            h.ws.join("rust-toolchain.toml").display().to_string()
        );
        // RUSTUP_TOOLCHAIN outranks it.
        let mut e = env(&h);
        e.rustup_toolchain = Some("stable".into());
        let r = resolve(&proxy, &h.ws, &e).expect("ok").expect("proxy");
        assert_eq!(std::fs::read_to_string(&r.program).expect("read"), "stable");
    }

    #[test]
    fn a_hostile_toolchain_file_cannot_leave_the_toolchains() {
        let h = home();
        let proxy = rustup_home(&h);
        exe(&h.home.join("evil/bin/rust-analyzer"), "evil");
        for (file, text) in [
            ("rust-toolchain", "../../evil\n"),
            (
                "rust-toolchain.toml",
                "[toolchain]\nchannel = \"../../../evil\"\n",
            ),
            (
                "rust-toolchain.toml",
                "[toolchain]\npath = \"/home/evil\"\n",
            ),
        ] {
            let _ = std::fs::remove_file(h.ws.join("rust-toolchain"));
            let _ = std::fs::remove_file(h.ws.join("rust-toolchain.toml"));
            std::fs::write(h.ws.join(file), text).expect("file");
            let e = resolve(&proxy, &h.ws, &env(&h)).expect_err("refused");
            assert!(matches!(e, ShimError::Refused { .. }), "{text}: {e}");
        }
        // A toolchain that is not installed, and one without the component, say what to run.
        std::fs::remove_file(h.ws.join("rust-toolchain.toml")).expect("rm");
        std::fs::write(h.ws.join("rust-toolchain"), "beta\n").expect("file");
        let e = resolve(&proxy, &h.ws, &env(&h))
            .expect_err("absent")
            .to_string();
        assert!(e.contains("rustup toolchain install beta"), "{e}");
        std::fs::remove_dir_all(h.home.join(format!(
            ".rustup/toolchains/nightly-{}-unknown-linux-gnu/bin",
            std::env::consts::ARCH
        )))
        .expect("rm");
        std::fs::write(h.ws.join("rust-toolchain"), "nightly\n").expect("file");
        let e = resolve(&proxy, &h.ws, &env(&h))
            .expect_err("absent")
            .to_string();
        assert!(
            e.contains("rustup component add rust-analyzer --toolchain nightly"),
            "{e}"
        );
    }

    /// A pyenv root with a shim as pyenv writes it, versions 3.11.7 and 3.12.1.
    fn pyenv_root(h: &Home) -> PathBuf {
        let root = h.home.join(".pyenv");
        let shim = root.join("shims/pyright-langserver");
        exe(
            &shim,
            &format!(
                "#!/usr/bin/env bash\nset -e\nprogram=\"${{0##*/}}\"\nexport PYENV_ROOT=\"{}\"\nexec \"{}/libexec/pyenv\" exec \"$program\" \"$@\"\n",
                root.display(),
                root.display()
            ),
        );
        exe(&root.join("versions/3.12.1/bin/pyright-langserver"), "312");
        std::fs::create_dir_all(root.join("versions/3.11.7/bin")).expect("mkdir");
        std::fs::write(root.join("version"), "3.12.1\n").expect("version");
        shim
    }

    #[test]
    fn a_pyenv_shim_follows_the_version_files() {
        let h = home();
        let shim = pyenv_root(&h);
        let r = resolve(&shim, &h.ws, &env(&h)).expect("ok").expect("shim");
        assert_eq!((r.manager, r.version.as_str()), (Manager::Pyenv, "3.12.1"));
        assert_eq!(
            r.program,
            h.home.join(".pyenv/versions/3.12.1/bin/pyright-langserver")
        );
        // The workspace's `.python-version` lists a version without it first: the next one wins.
        std::fs::write(h.home.join("src/.python-version"), "3.11.7\n3.12.1\n").expect("file");
        let r = resolve(&shim, &h.ws, &env(&h)).expect("ok").expect("shim");
        assert_eq!(r.version, "3.12.1");
        assert_eq!(
            r.source,
            h.home.join("src/.python-version").display().to_string()
        );
        // Only 3.11.7: not installed there, with the hint.
        let mut e = env(&h);
        e.pyenv_version = Some("3.11.7".into());
        let err = resolve(&shim, &h.ws, &e).expect_err("absent").to_string();
        assert!(
            err.contains("pyenv 3.11.7 (from PYENV_VERSION) has no pyright-langserver"),
            "{err}"
        );
        // `system`: PATH without the shims.
        exe(&h.home.join("usr/bin/pyright-langserver"), "system");
        e.pyenv_version = Some("system".into());
        e.search_path = vec![h.home.join(".pyenv/shims"), h.home.join("usr/bin")];
        let r = resolve(&shim, &h.ws, &e).expect("ok").expect("shim");
        assert_eq!(r.program, h.home.join("usr/bin/pyright-langserver"));
        // A version name that climbs out is refused.
        e.pyenv_version = Some("../../../usr".into());
        assert!(matches!(
            resolve(&shim, &h.ws, &e),
            Err(ShimError::Refused { .. })
        ));
    }

    #[test]
    fn an_asdf_shim_uses_the_plugins_it_names() {
        let h = home();
        let shim = h.home.join(".asdf/shims/typescript-language-server");
        exe(
            &shim,
            "#!/usr/bin/env bash\n# asdf-plugin: nodejs 20.11.0\n# asdf-plugin: nodejs 22.1.0\nexec asdf exec \"typescript-language-server\" \"$@\"\n",
        );
        exe(
            &h.home
                .join(".asdf/installs/nodejs/22.1.0/bin/typescript-language-server"),
            "22",
        );
        let err = resolve(&shim, &h.ws, &env(&h)).expect_err("no version");
        assert!(matches!(err, ShimError::NoVersion { .. }), "{err}");
        std::fs::write(
            h.home.join(".tool-versions"),
            "python 3.12.1\nnodejs 20.11.0 22.1.0\n",
        )
        .expect("file");
        let r = resolve(&shim, &h.ws, &env(&h)).expect("ok").expect("shim");
        assert_eq!(r.version, "nodejs 22.1.0");
        assert_eq!(
            r.source,
            h.home.join(".tool-versions").display().to_string()
        );
        std::fs::write(h.ws.join(".tool-versions"), "nodejs ../../../../x\n").expect("file");
        assert!(matches!(
            resolve(&shim, &h.ws, &env(&h)),
            Err(ShimError::Refused { .. })
        ));
    }
}
