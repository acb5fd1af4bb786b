//! Finding and reading the settings files. Everything the loader looks at — working directory,
//! environment, file locations — is an input in [`SettingsSources`], so tests never touch the
//! real home directory; [`SettingsSources::from_process`] is the one place that reads the process.

use super::file::{parse_settings, Warning};
use super::merge::{merge, CliOverrides, Merged, ScopeFile};
use super::SettingsError;
use crate::permission::Scope;
use crate::trust::{TrustCheck, TrustContent, TrustStore};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where settings come from.
#[derive(Debug, Clone, Default)]
pub struct SettingsSources {
    /// The user scope's file (may not exist).
    pub user_file: Option<PathBuf>,
    /// The workspace root: the directory holding `.hanzo/`.
    pub project_root: Option<PathBuf>,
    /// The trust store file (see [`TrustStore::default_path`]).
    pub trust_store: Option<PathBuf>,
    /// Environment variables; only `HANZO_*` ones form the environment scope.
    pub env: BTreeMap<String, String>,
    /// Values from the command line (the last scope).
    pub cli: CliOverrides,
}

impl SettingsSources {
    /// Computes the standard locations from `cwd` and an environment snapshot.
    pub fn resolve(cwd: &Path, env: BTreeMap<String, String>, cli: CliOverrides) -> Self {
        let home = env.get("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
        let config_base = match env
            .get("XDG_CONFIG_HOME")
            .filter(|v| Path::new(v).is_absolute())
        {
            Some(d) => Some(PathBuf::from(d)),
            None => home.as_ref().map(|h| h.join(".config")),
        };
        SettingsSources {
            user_file: config_base.map(|b| b.join("hanzo").join("settings.json")),
            project_root: find_project_root(cwd, home.as_deref()),
            trust_store: TrustStore::default_path(&env),
            env,
            cli,
        }
    }

    /// The real process: current directory and environment.
    pub fn from_process(cli: CliOverrides) -> std::io::Result<Self> {
        let cwd = std::env::current_dir()?;
        // Non-UTF-8 variables cannot be settings; skip them rather than fail.
        let env = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        Ok(SettingsSources::resolve(&cwd, env, cli))
    }

    /// `.hanzo/settings.json` under the project root, if there is a root.
    pub fn project_file(&self) -> Option<PathBuf> {
        self.project_root
            .as_ref()
            .map(|r| r.join(".hanzo").join("settings.json"))
    }

    /// `.hanzo/settings.local.json` under the project root, if there is a root.
    pub fn local_file(&self) -> Option<PathBuf> {
        self.project_root
            .as_ref()
            .map(|r| r.join(".hanzo").join("settings.local.json"))
    }

    /// Each scope's file path that could be known (user, project, local), whether or not it exists.
    pub fn scope_files(&self) -> Vec<(Scope, PathBuf)> {
        [
            (Scope::User, self.user_file.clone()),
            (Scope::Project, self.project_file()),
            (Scope::Local, self.local_file()),
        ]
        .into_iter()
        .filter_map(|(t, p)| Some((t, p?)))
        .collect()
    }
}

/// Walks up from `start` to the nearest directory containing a `.hanzo` directory. The walk stops
/// at a repository root (a `.git` entry), which is then the workspace root even without
/// `.hanzo/`, and never considers `home` itself or anything above it, so `~/.hanzo` or a file
/// in `/` can never become some project's settings.
pub fn find_project_root(start: &Path, home: Option<&Path>) -> Option<PathBuf> {
    for dir in start.ancestors() {
        if home.is_some_and(|h| dir == h || h.starts_with(dir)) {
            return None;
        }
        if dir.join(".hanzo").is_dir() || dir.join(".git").exists() {
            return Some(dir.to_path_buf());
        }
    }
    None
}

/// Loaded settings with everything `config show` and `trust` need to explain them.
#[derive(Debug, Clone)]
pub struct LoadedSettings {
    /// The merged settings, their warnings and sources.
    pub merged: Merged,
    /// Every file that was looked for and whether it existed.
    pub files: Vec<(Scope, PathBuf, bool)>,
    /// The workspace root the project and local files were looked for in.
    pub project_root: Option<PathBuf>,
    /// Whether the workspace's current content is trusted.
    pub trust_check: TrustCheck,
    /// What trusting the workspace would cover.
    pub trust_content: TrustContent,
}

impl LoadedSettings {
    /// Every warning of parsing and merging, in order.
    pub fn warnings(&self) -> &[Warning] {
        &self.merged.warnings
    }
}

/// Reads the files that exist, parses them and merges all scopes. A file that exists but cannot be
/// read or parsed is an error: a broken file never silently becomes the defaults.
pub fn load(sources: &SettingsSources) -> Result<LoadedSettings, SettingsError> {
    let mut scope_files = Vec::new();
    let mut warnings = Vec::new();
    let mut files = Vec::new();
    let read_rules = super::read_paths::ReadPathRules::new(
        sources
            .env
            .get("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from),
        [&sources.user_file, &sources.trust_store]
            .into_iter()
            .flatten()
            .filter_map(|f| f.parent().map(Path::to_path_buf))
            .collect(),
    );
    for (scope, path) in sources.scope_files() {
        let name = path.display().to_string();
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                files.push((scope, path, false));
                continue;
            }
            Err(source) => return Err(SettingsError::Read { file: name, source }),
        };
        files.push((scope, path, true));
        let (mut settings, w) = parse_settings(scope, &name, &text)?;
        warnings.extend(w);
        super::read_paths::resolve(&mut settings, &name, &read_rules, &mut warnings)?;
        scope_files.push(ScopeFile {
            scope,
            file: name,
            settings,
        });
    }
    let find = |t: Scope| {
        scope_files
            .iter()
            .find(|f| f.scope == t)
            .map(|f| &f.settings)
    };
    let content = TrustContent::from_workspace_files(find(Scope::Project), find(Scope::Local));
    let root = sources
        .project_root
        .as_ref()
        .map(|r| std::fs::canonicalize(r).unwrap_or_else(|_| r.clone()));
    let trust_check = match (&root, &sources.trust_store) {
        _ if content.is_empty() => TrustCheck::NotRequired,
        (Some(root), Some(store)) => match TrustStore::new(store).check(root, &content) {
            Ok(c) => c,
            Err(e) => {
                warnings.push(Warning {
                    file: store.display().to_string(),
                    message: format!("{e}; the workspace is treated as untrusted"),
                });
                TrustCheck::NeverTrusted
            }
        },
        _ => {
            warnings.push(Warning {
                file: "trust".into(),
                message: "no data directory ($XDG_DATA_HOME or $HOME) to record trust in; the workspace is treated as untrusted".into(),
            });
            TrustCheck::NeverTrusted
        }
    };
    let mut merged = merge(
        &scope_files,
        &sources.env,
        &sources.cli,
        trust_check.is_trusted(),
    )?;
    if let (TrustCheck::Changed { .. }, Some(root)) = (&trust_check, &root) {
        if let Some(msg) = trust_check.message(root, &content) {
            merged.warnings.insert(
                0,
                Warning {
                    file: root.display().to_string(),
                    message: msg,
                },
            );
        }
    }
    warnings.append(&mut merged.warnings);
    merged.warnings = warnings;
    Ok(LoadedSettings {
        merged,
        files,
        project_root: root,
        trust_check,
        trust_content: content,
    })
}
