//! `mcp_servers.*.read_paths`: what outside the workspace an MCP stdio server may also read.
//! The loader resolves each path (`~/` against `$HOME`, links followed) and refuses what no
//! sandbox may open: the root, the home directory or a directory containing it, a directory of
//! secrets under it ([`SECRET_HOME_DIRS`]), hanzo's own configuration and data directories
//! (the hidden paths), and anything in a shared temporary directory ([`PRIVATE_TMP_DIRS`]: tier
//! B binds a read path back into the mcp worker's private `/tmp`, where every server of the
//! worker that may read `/tmp` would reach it). The merged settings then hold the resolved paths, which the supervisor
//! grants read-only to the mcp role and to that server alone.

use super::file::{SettingsFile, Warning};
use super::SettingsError;
use crate::profile::{PRIVATE_TMP_DIRS, SECRET_HOME_DIRS};
use std::path::{Component, Path, PathBuf};

/// What the paths are resolved and vetted against.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReadPathRules {
    /// `$HOME`, canonical where it exists.
    pub home: Option<PathBuf>,
    /// hanzo's configuration and data directories, canonical where they exist.
    pub hidden: Vec<PathBuf>,
    /// The shared temporary directories ([`PRIVATE_TMP_DIRS`]), canonical where they exist.
    pub shared_tmp: Vec<PathBuf>,
}

fn canonical(p: PathBuf) -> PathBuf {
    std::fs::canonicalize(&p).unwrap_or(p)
}

impl ReadPathRules {
    pub(crate) fn new(home: Option<PathBuf>, hidden: Vec<PathBuf>) -> Self {
        ReadPathRules {
            home: home.map(canonical),
            hidden: hidden.into_iter().map(canonical).collect(),
            shared_tmp: PRIVATE_TMP_DIRS
                .iter()
                .map(|d| canonical(PathBuf::from(d)))
                .collect(),
        }
    }

    /// Why `real` (canonical) must not be granted, if it must not.
    fn refusal(&self, real: &Path) -> Option<String> {
        if real.parent().is_none() {
            return Some("is the root of the filesystem".into());
        }
        if let Some(home) = &self.home {
            if home.starts_with(real) {
                return Some(if home == real {
                    "is the home directory itself".into()
                } else {
                    format!("contains the home directory {}", home.display())
                });
            }
            if let Ok(rel) = real.strip_prefix(home) {
                if let Some(Component::Normal(first)) = rel.components().next() {
                    if SECRET_HOME_DIRS.iter().any(|d| first == *d) {
                        return Some(format!(
                            "is inside ~/{}, a directory of secrets and settings",
                            first.to_string_lossy()
                        ));
                    }
                }
            }
        }
        if let Some(t) = self.shared_tmp.iter().find(|t| real.starts_with(t)) {
            return Some(format!(
                "is in {}, a temporary directory tier B gives every sandbox a private copy of \
                 (it could not be granted to this server alone)",
                t.display()
            ));
        }
        self.hidden
            .iter()
            .find(|h| h.starts_with(real) || real.starts_with(h))
            .map(|h| format!("overlaps hanzo's own directory {}", h.display()))
    }
}

/// Resolves every `read_paths` entry of `settings` in place. A path that does not exist is
/// dropped with a warning; one that is not absolute (or `~/`-relative) or is refused is an error
/// naming the file and the key.
pub(crate) fn resolve(
    settings: &mut SettingsFile,
    file: &str,
    rules: &ReadPathRules,
    warnings: &mut Vec<Warning>,
) -> Result<(), SettingsError> {
    let Some(servers) = settings.mcp_servers.as_mut() else {
        return Ok(());
    };
    for (name, entry) in servers.iter_mut() {
        let Some(paths) = entry.read_paths.as_mut() else {
            continue;
        };
        let key_path = format!("mcp_servers.{name}.read_paths");
        let invalid = |message: String| SettingsError::Invalid {
            file: file.to_string(),
            key_path: key_path.clone(),
            message,
        };
        let mut resolved = Vec::new();
        for written in paths.iter() {
            let path = match written.strip_prefix("~/") {
                Some(rest) => match &rules.home {
                    Some(home) => home.join(rest),
                    None => {
                        return Err(invalid(format!(
                            "{written:?} starts with `~/` and there is no $HOME"
                        )))
                    }
                },
                None if Path::new(written).is_absolute() => PathBuf::from(written),
                None => {
                    return Err(invalid(format!(
                        "{written:?} must be absolute or start with `~/`"
                    )))
                }
            };
            let real = match std::fs::canonicalize(&path) {
                Ok(r) => r,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    warnings.push(Warning {
                        file: file.to_string(),
                        message: format!(
                            "`{key_path}`: {} does not exist; it is ignored",
                            path.display()
                        ),
                    });
                    continue;
                }
                Err(e) => return Err(invalid(format!("{}: {e}", path.display()))),
            };
            if let Some(why) = rules.refusal(&real) {
                let shown = if real == path {
                    format!("{written:?}")
                } else {
                    format!("{written:?} ({})", real.display())
                };
                return Err(invalid(format!(
                    "{shown} {why}; an MCP server may not be given it"
                )));
            }
            let real = real.display().to_string();
            if !resolved.contains(&real) {
                resolved.push(real);
            }
        }
        *paths = resolved;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::permission::Scope;
    use crate::settings::parse_settings;

    fn run(home: &Path, paths: &[&str]) -> Result<(Vec<String>, Vec<Warning>), SettingsError> {
        let text = serde_json::json!({"mcp_servers": {"s": {"command": "x", "read_paths": paths}}})
            .to_string();
        let (mut s, _) = parse_settings(Scope::User, "u.json", &text).expect("parses");
        let mut rules = ReadPathRules::new(
            Some(home.to_path_buf()),
            vec![home.join(".config/hanzo"), home.join(".local/share/hanzo")],
        );
        // The test's home lies in a temporary directory: only `/var/tmp` stands for them here.
        rules.shared_tmp = vec![PathBuf::from("/var/tmp")];
        let mut w = Vec::new();
        resolve(&mut s, "u.json", &rules, &mut w)?;
        let out = s.mcp_servers.expect("servers")["s"]
            .read_paths
            .clone()
            .expect("set");
        Ok((out, w))
    }

    #[test]
    fn read_paths_are_resolved_and_secrets_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().join("home");
        for d in [
            "docs/a",
            ".ssh",
            ".config/hanzo",
            ".local/share/hanzo/runs",
            "other",
        ] {
            std::fs::create_dir_all(home.join(d)).expect("mkdir");
        }
        std::os::unix::fs::symlink(home.join(".ssh"), home.join("docs/keys")).expect("link");
        let real_home = std::fs::canonicalize(&home).expect("canonical");
        let (ok, w) = run(&home, &["~/docs", "~/docs/a/../a", "~/missing"]).expect("ok");
        assert_eq!(
            ok,
            [
                real_home.join("docs").display().to_string(),
                real_home.join("docs/a").display().to_string()
            ]
        );
        assert!(
            w[0].message.contains("does not exist; it is ignored"),
            "{w:?}"
        );
        for (bad, why) in [
            ("/", "root of the filesystem"),
            ("~/", "home directory itself"),
            ("~/docs/keys", "inside ~/.ssh"),
            ("~/.ssh", "inside ~/.ssh"),
            (
                "~/.local/share/hanzo/runs",
                "overlaps hanzo's own directory",
            ),
            ("~/.local", "overlaps hanzo's own directory"),
            ("docs", "must be absolute"),
            (
                "/var/tmp",
                "a temporary directory tier B gives every sandbox",
            ),
        ] {
            let err = run(&home, &[bad]).expect_err(bad).to_string();
            assert!(err.contains(why), "{bad}: {err}");
            assert!(
                err.contains("u.json: at `mcp_servers.s.read_paths`"),
                "{err}"
            );
        }
        let parent = real_home.parent().expect("parent").display().to_string();
        let err = run(&home, &[&parent])
            .expect_err("contains home")
            .to_string();
        assert!(err.contains("contains the home directory"), "{err}");
        let tmp = ReadPathRules::new(None, Vec::new());
        assert!(tmp
            .refusal(&std::fs::canonicalize("/tmp").expect("/tmp"))
            .is_some_and(|why| why.contains("temporary directory")));
        assert!(tmp.refusal(Path::new("/srv/docs")).is_none());
    }
}
