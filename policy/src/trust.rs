//! Workspace trust. A repository's `.hanzo/` files can define hooks, MCP server commands, allow
//! rules and sandbox widenings — code execution and privilege. They take effect only after the
//! user trusts exactly that content: its SHA-256 is recorded in the user's data directory
//! (outside any workspace), and any change makes the workspace untrusted again.
//!
//! Every function that touches the file system takes its paths as parameters.

use crate::audit::{hex, now_ms};
use crate::hooks::HookConfig;
use crate::permission::PermissionMode;
use crate::settings::SettingsFile;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The launch fields of one MCP server entry.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct McpLaunch {
    /// The program, if the entry sets it.
    pub command: Option<String>,
    /// Its arguments, if the entry sets them.
    pub args: Option<Vec<String>>,
    /// Its environment, if the entry sets it (values as written, secrets by name).
    pub env: Option<BTreeMap<String, String>>,
    /// Its working directory, if the entry sets it.
    pub cwd: Option<String>,
    /// Left out when unset, so that the hash of an entry without it is what it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filesystem: Option<crate::settings::McpFilesystemSetting>,
    /// `read_paths`: what outside the workspace the server may read. Left out when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_paths: Option<Vec<String>>,
}

/// What needs trust in one workspace file.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FileTrustContent {
    /// The hooks the file defines (each runs a command).
    pub hooks: Vec<HookConfig>,
    /// The MCP servers whose launch (command, arguments, environment, directory) the file sets.
    pub mcp_servers: BTreeMap<String, McpLaunch>,
    /// Patterns of allow rules, in file order (reasons are comments and do not count).
    pub allow_rules: Vec<String>,
    /// `sandbox.extra_read_paths`: paths the file would let commands read.
    pub extra_read_paths: Vec<String>,
    /// `sandbox.extra_write_paths`: paths the file would let commands write.
    pub extra_write_paths: Vec<String>,
    /// `sandbox.network_allow`: hosts the file would let commands reach.
    pub network_allow: Vec<String>,
    /// `lsp_servers` entries, which decide what program runs as a language server.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub lsp_servers: BTreeMap<String, serde_json::Value>,
}

impl FileTrustContent {
    fn from_file(s: &SettingsFile) -> Self {
        let sandbox = s.sandbox.clone().unwrap_or_default();
        FileTrustContent {
            hooks: s.hooks.clone().unwrap_or_default(),
            mcp_servers: s
                .mcp_servers
                .iter()
                .flatten()
                .filter(|(_, e)| e.sets_launch())
                .map(|(n, e)| {
                    (
                        n.clone(),
                        McpLaunch {
                            command: e.command.clone(),
                            args: e.args.clone(),
                            env: e.env.clone(),
                            cwd: e.cwd.clone(),
                            filesystem: e.filesystem,
                            read_paths: e.read_paths.clone(),
                        },
                    )
                })
                .collect(),
            allow_rules: s
                .permissions
                .iter()
                .flat_map(|p| p.0.iter())
                .filter(|(_, spec)| spec.mode == PermissionMode::Allow)
                .map(|(pattern, _)| pattern.clone())
                .collect(),
            extra_read_paths: sandbox.extra_read_paths.unwrap_or_default(),
            extra_write_paths: sandbox.extra_write_paths.unwrap_or_default(),
            network_allow: sandbox.network_allow.unwrap_or_default(),
            lsp_servers: s
                .lsp_servers
                .iter()
                .flatten()
                .map(|(n, e)| (n.clone(), serde_json::to_value(e).unwrap_or_default()))
                .collect(),
        }
    }

    /// Whether the file defines nothing that needs trust.
    pub fn is_empty(&self) -> bool {
        *self == FileTrustContent::default()
    }

    /// "2 hooks, 1 MCP server command and 3 allow rules"-style summary; empty when nothing.
    pub fn summary(&self) -> String {
        let paths =
            self.extra_read_paths.len() + self.extra_write_paths.len() + self.network_allow.len();
        let parts: Vec<String> = [
            (self.hooks.len(), "hook", "hooks"),
            (
                self.mcp_servers.len(),
                "MCP server command",
                "MCP server commands",
            ),
            (self.allow_rules.len(), "allow rule", "allow rules"),
            (paths, "sandbox widening", "sandbox widenings"),
            (
                self.lsp_servers.len(),
                "language server entry",
                "language server entries",
            ),
        ]
        .iter()
        .filter(|(n, _, _)| *n > 0)
        .map(|(n, one, many)| format!("{n} {}", if *n == 1 { one } else { many }))
        .collect();
        match parts.len() {
            0 => String::new(),
            1 => parts[0].clone(),
            n => format!("{} and {}", parts[..n - 1].join(", "), parts[n - 1]),
        }
    }

    /// One line per item, for `hanzo-dev trust` to show before recording.
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        for h in &self.hooks {
            out.push(format!(
                "hook {} on `{}`: {} (timeout {} ms)",
                h.event, h.tool_pattern, h.command, h.timeout_ms
            ));
        }
        for (name, l) in &self.mcp_servers {
            out.push(format!("MCP server `{name}`: {}", describe_launch(l)));
        }
        for p in &self.allow_rules {
            out.push(format!("allow rule `{p}`"));
        }
        for p in &self.extra_read_paths {
            out.push(format!("sandbox: extra read path {p}"));
        }
        for p in &self.extra_write_paths {
            out.push(format!("sandbox: extra write path {p}"));
        }
        for h in &self.network_allow {
            out.push(format!("sandbox: network host {h}"));
        }
        for (name, entry) in &self.lsp_servers {
            out.push(format!("language server `{name}`: {entry}"));
        }
        out
    }
}

fn describe_launch(l: &McpLaunch) -> String {
    let mut s = match &l.command {
        Some(c) => format!("runs `{c}`"),
        None => "changes the launch of a server defined elsewhere".to_string(),
    };
    if let Some(args) = &l.args {
        s.push_str(&format!(" with args {args:?}"));
    }
    if let Some(env) = &l.env {
        let keys: Vec<&String> = env.keys().collect();
        s.push_str(&format!(", env {keys:?}"));
    }
    if let Some(cwd) = &l.cwd {
        s.push_str(&format!(", in {cwd}"));
    }
    if let Some(paths) = &l.read_paths {
        s.push_str(&format!(", reads {paths:?}"));
    }
    s
}

/// Everything in a workspace's project and local files that needs trust.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TrustContent {
    /// What needs trust in `.hanzo/settings.json`.
    pub project: FileTrustContent,
    /// What needs trust in `.hanzo/settings.local.json`.
    pub local: FileTrustContent,
}

impl TrustContent {
    /// Collect what needs trust from the parsed project and local files (absent files: nothing).
    pub fn from_workspace_files(
        project: Option<&SettingsFile>,
        local: Option<&SettingsFile>,
    ) -> Self {
        TrustContent {
            project: project.map(FileTrustContent::from_file).unwrap_or_default(),
            local: local.map(FileTrustContent::from_file).unwrap_or_default(),
        }
    }

    /// Whether neither file defines anything that needs trust (then no trust is asked for).
    pub fn is_empty(&self) -> bool {
        self.project.is_empty() && self.local.is_empty()
    }

    /// SHA-256 (hex) of the content's JSON serialization, which is deterministic: struct fields
    /// in declaration order, maps sorted, lists in file order.
    pub fn sha256(&self) -> String {
        let bytes = serde_json::to_vec(self).expect("trust content always serializes");
        hex(&Sha256::digest(bytes))
    }

    /// One line per item that needs trust, prefixed with its file, for `hanzo-dev trust` to show.
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (label, c) in [
            (".hanzo/settings.json", &self.project),
            (".hanzo/settings.local.json", &self.local),
        ] {
            out.extend(c.describe().into_iter().map(|l| format!("{label}: {l}")));
        }
        out
    }

    /// What changed since `old`, one line each.
    pub fn changes_since(&self, old: &TrustContent) -> Vec<String> {
        let old_lines = old.describe();
        let new_lines = self.describe();
        let mut out: Vec<String> = new_lines
            .iter()
            .filter(|l| !old_lines.contains(l))
            .map(|l| format!("added: {l}"))
            .collect();
        out.extend(
            old_lines
                .iter()
                .filter(|l| !new_lines.contains(l))
                .map(|l| format!("removed: {l}")),
        );
        if out.is_empty() && self != old {
            out.push("the order or details of trusted entries changed".to_string());
        }
        out
    }
}

/// Why the trust store could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// Reading or writing the store failed.
    #[error("{path}: cannot {action}: {source}")]
    Io {
        /// The store's path.
        path: String,
        /// What was being done (`read`, `write`, `replace`, `create its directory`).
        action: &'static str,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The store is not valid JSON of a known version; it is never overwritten then.
    #[error("{path}: not a valid trust store ({message}); move it aside and run `hanzo-dev trust` again")]
    Corrupt {
        /// The store's path.
        path: String,
        /// What is wrong with it.
        message: String,
    },
}

/// One trusted workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustEntry {
    /// SHA-256 (hex) of the trusted content ([`TrustContent::sha256`]).
    pub sha256: String,
    /// Milliseconds since the Unix epoch.
    pub trusted_at: u64,
    /// Kept so a later change can be explained item by item.
    pub content: TrustContent,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct TrustFile {
    version: u32,
    workspaces: BTreeMap<String, TrustEntry>,
}

/// The result of checking a workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrustCheck {
    /// The workspace's files define nothing that needs trust.
    NotRequired,
    /// The user trusted exactly the current content.
    Trusted,
    /// The user never trusted this workspace.
    NeverTrusted,
    /// Trusted before, but the content differs now.
    Changed {
        /// What changed, one line each (`added: …`, `removed: …`).
        changes: Vec<String>,
    },
}

impl TrustCheck {
    /// Whether the workspace's trusted-only settings may take effect.
    pub fn is_trusted(&self) -> bool {
        matches!(self, TrustCheck::NotRequired | TrustCheck::Trusted)
    }

    /// The message for an untrusted workspace; `None` when trusted.
    pub fn message(&self, workspace: &Path, content: &TrustContent) -> Option<String> {
        let how = format!(
            "hooks, MCP server commands, allow rules and sandbox widenings from its .hanzo/ files are ignored until you review them and run `hanzo-dev trust` in {}",
            workspace.display()
        );
        match self {
            TrustCheck::NotRequired | TrustCheck::Trusted => None,
            TrustCheck::NeverTrusted => Some(format!(
                "workspace {} is not trusted ({}); {how}",
                workspace.display(),
                content.project.summary_joined(&content.local)
            )),
            TrustCheck::Changed { changes } => Some(format!(
                "workspace {} changed since you trusted it ({}); {how}",
                workspace.display(),
                changes.join("; ")
            )),
        }
    }
}

impl FileTrustContent {
    fn summary_joined(&self, other: &FileTrustContent) -> String {
        let mut merged = self.clone();
        merged.hooks.extend(other.hooks.iter().cloned());
        merged.mcp_servers.extend(
            other
                .mcp_servers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        merged.allow_rules.extend(other.allow_rules.iter().cloned());
        merged
            .extra_read_paths
            .extend(other.extra_read_paths.iter().cloned());
        merged
            .extra_write_paths
            .extend(other.extra_write_paths.iter().cloned());
        merged
            .network_allow
            .extend(other.network_allow.iter().cloned());
        merged.lsp_servers.extend(
            other
                .lsp_servers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        merged.summary()
    }
}

/// The trust records, one JSON file in the user's data directory.
#[derive(Debug, Clone)]
pub struct TrustStore {
    path: PathBuf,
}

impl TrustStore {
    /// A store kept in the file at `path` (created on the first `trust`).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        TrustStore { path: path.into() }
    }

    /// `$XDG_DATA_HOME/hanzo/trust.json`, else `$HOME/.local/share/hanzo/trust.json`.
    pub fn default_path(env: &BTreeMap<String, String>) -> Option<PathBuf> {
        let base = match env
            .get("XDG_DATA_HOME")
            .filter(|v| Path::new(v).is_absolute())
        {
            Some(d) => PathBuf::from(d),
            None => PathBuf::from(env.get("HOME").filter(|h| !h.is_empty())?).join(".local/share"),
        };
        Some(base.join("hanzo").join("trust.json"))
    }

    /// The store's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn key(workspace: &Path) -> String {
        workspace.to_string_lossy().into_owned()
    }

    fn read(&self) -> Result<TrustFile, TrustError> {
        let p = self.path.display().to_string();
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(TrustFile {
                    version: 1,
                    workspaces: BTreeMap::new(),
                })
            }
            Err(source) => {
                return Err(TrustError::Io {
                    path: p,
                    action: "read",
                    source,
                })
            }
        };
        let file: TrustFile = serde_json::from_str(&text).map_err(|e| TrustError::Corrupt {
            path: p.clone(),
            message: e.to_string(),
        })?;
        if file.version != 1 {
            return Err(TrustError::Corrupt {
                path: p,
                message: format!("unsupported version {}", file.version),
            });
        }
        Ok(file)
    }

    /// Written to a temporary file and renamed, so a crash never leaves half a store; 0600 in a
    /// 0700 directory because it reveals which directories the user works in.
    fn write(&self, file: &TrustFile) -> Result<(), TrustError> {
        let p = self.path.display().to_string();
        let io = |action: &'static str| {
            let p = p.clone();
            move |source| TrustError::Io {
                path: p,
                action,
                source,
            }
        };
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(dir).map_err(io("create its directory"))?;
        let tmp = self
            .path
            .with_extension(format!("json.tmp.{}", std::process::id()));
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        let mut f = opts.open(&tmp).map_err(io("write"))?;
        let mut text = serde_json::to_string_pretty(file).expect("trust file always serializes");
        text.push('\n');
        f.write_all(text.as_bytes()).map_err(io("write"))?;
        f.sync_all().map_err(io("write"))?;
        std::fs::rename(&tmp, &self.path).map_err(io("replace"))?;
        Ok(())
    }

    /// Whether `content` is what the user trusted for `workspace`.
    pub fn check(
        &self,
        workspace: &Path,
        content: &TrustContent,
    ) -> Result<TrustCheck, TrustError> {
        if content.is_empty() {
            return Ok(TrustCheck::NotRequired);
        }
        let file = self.read()?;
        Ok(match file.workspaces.get(&Self::key(workspace)) {
            None => TrustCheck::NeverTrusted,
            Some(e) if e.sha256 == content.sha256() => TrustCheck::Trusted,
            Some(e) => TrustCheck::Changed {
                changes: content.changes_since(&e.content),
            },
        })
    }

    /// Records `content` as trusted for `workspace` (replacing any earlier record).
    pub fn trust(
        &self,
        workspace: &Path,
        content: &TrustContent,
    ) -> Result<TrustEntry, TrustError> {
        let mut file = self.read()?;
        file.version = 1;
        let entry = TrustEntry {
            sha256: content.sha256(),
            trusted_at: now_ms(),
            content: content.clone(),
        };
        file.workspaces.insert(Self::key(workspace), entry.clone());
        self.write(&file)?;
        Ok(entry)
    }

    /// Forgets `workspace`; returns whether it was trusted.
    pub fn revoke(&self, workspace: &Path) -> Result<bool, TrustError> {
        let mut file = self.read()?;
        let had = file.workspaces.remove(&Self::key(workspace)).is_some();
        if had {
            self.write(&file)?;
        }
        Ok(had)
    }

    /// Every trusted workspace with its record, sorted by path.
    pub fn list(&self) -> Result<Vec<(String, TrustEntry)>, TrustError> {
        Ok(self.read()?.workspaces.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::permission::Scope;
    use crate::settings::parse_settings;

    fn file(text: &str) -> SettingsFile {
        parse_settings(Scope::Project, "p", text).expect("valid").0
    }

    #[test]
    fn content_covers_exactly_the_privileged_parts() {
        let s = file(
            r#"{"model": "m", "custom_instructions": "x",
                "permissions": {"bash": "allow", "rm": "deny", "x": "prompt"},
                "mcp_servers": {"a": {"command": "srv"}, "b": {"url": "https://x"}, "c": {"disabled": true}},
                "hooks": [{"event": "pre_tool_use", "command": "./h", "tool_pattern": "*"}]}"#,
        );
        let c = TrustContent::from_workspace_files(Some(&s), None);
        assert_eq!(c.project.allow_rules, vec!["bash".to_string()]);
        assert_eq!(c.project.mcp_servers.keys().collect::<Vec<_>>(), vec!["a"]);
        assert_eq!(c.project.hooks.len(), 1);
        assert_eq!(
            c.project.summary(),
            "1 hook, 1 MCP server command and 1 allow rule"
        );
        // Non-privileged edits do not change the hash.
        let s2 = file(
            r#"{"model": "other", "permissions": {"bash": {"mode": "allow", "reason": "ok"}, "rm": "deny"},
                "mcp_servers": {"a": {"command": "srv"}, "b": {"url": "https://y"}},
                "hooks": [{"event": "pre_tool_use", "command": "./h", "tool_pattern": "*"}]}"#,
        );
        let c2 = TrustContent::from_workspace_files(Some(&s2), None);
        assert_eq!(c.sha256(), c2.sha256());
        let s3 = file(
            r#"{"hooks": [{"event": "pre_tool_use", "command": "./h2", "tool_pattern": "*"}]}"#,
        );
        let c3 = TrustContent::from_workspace_files(Some(&s3), None);
        assert_ne!(c.sha256(), c3.sha256());
        assert!(
            TrustContent::from_workspace_files(Some(&file(r#"{"model": "m"}"#)), None).is_empty()
        );
    }

    #[test]
    fn store_trust_check_change_revoke_list() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = TrustStore::new(dir.path().join("data/hanzo/trust.json"));
        let ws = Path::new("/work/repo");
        let c1 = TrustContent::from_workspace_files(
            Some(&file(r#"{"permissions": {"bash": "allow"}}"#)),
            None,
        );
        assert_eq!(
            store.check(ws, &c1).expect("check"),
            TrustCheck::NeverTrusted
        );
        assert!(store
            .check(ws, &c1)
            .expect("check")
            .message(ws, &c1)
            .expect("msg")
            .contains("hanzo-dev trust"));
        store.trust(ws, &c1).expect("trust");
        assert_eq!(store.check(ws, &c1).expect("check"), TrustCheck::Trusted);
        // Another workspace with the same content is not trusted by this record.
        assert_eq!(
            store.check(Path::new("/elsewhere"), &c1).expect("check"),
            TrustCheck::NeverTrusted
        );
        let c2 = TrustContent::from_workspace_files(
            Some(&file(
                r#"{"permissions": {"bash": "allow", "write_file": "allow"}}"#,
            )),
            None,
        );
        match store.check(ws, &c2).expect("check") {
            TrustCheck::Changed { changes } => {
                assert_eq!(
                    changes,
                    vec!["added: .hanzo/settings.json: allow rule `write_file`".to_string()]
                );
            }
            other => panic!("expected Changed, got {other:?}"),
        }
        let list = store.list().expect("list");
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].0, "/work/repo");
        assert!(store.revoke(ws).expect("revoke"));
        assert!(!store.revoke(ws).expect("revoke again"));
        assert_eq!(
            store.check(ws, &c1).expect("check"),
            TrustCheck::NeverTrusted
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(store.path())
                .expect("meta")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn corrupt_store_is_an_error_not_trust() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("trust.json");
        std::fs::write(&p, "{not json").expect("write");
        let store = TrustStore::new(&p);
        let c = TrustContent::from_workspace_files(
            Some(&file(r#"{"permissions": {"bash": "allow"}}"#)),
            None,
        );
        assert!(matches!(
            store.check(Path::new("/w"), &c),
            Err(TrustError::Corrupt { .. })
        ));
    }

    #[test]
    fn default_path_prefers_xdg() {
        let mut env = BTreeMap::new();
        env.insert("HOME".to_string(), "/home/u".to_string());
        assert_eq!(
            TrustStore::default_path(&env),
            Some(PathBuf::from("/home/u/.local/share/hanzo/trust.json"))
        );
        env.insert("XDG_DATA_HOME".to_string(), "/x/data".to_string());
        assert_eq!(
            TrustStore::default_path(&env),
            Some(PathBuf::from("/x/data/hanzo/trust.json"))
        );
        assert_eq!(TrustStore::default_path(&BTreeMap::new()), None);
    }
}
