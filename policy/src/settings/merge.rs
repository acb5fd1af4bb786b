//! Merging parsed settings scopes into the effective configuration, and its canonical JSON form.

use super::file::{
    InputMode, IsolationMode, LspServerEntry, McpServerEntry, SandboxEntry, Secret, SecretObject,
    SettingsFile, Warning,
};
use super::SettingsError;
use crate::hooks::HookConfig;
use crate::permission::{PermissionRule, RuleError, RuleList, Scope, ScopedPolicy};
use crate::suggest::did_you_mean;
use crate::trust::TrustContent;
use serde::Serialize;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::fmt;

/// HIP-0301 §4's default model: the provider table's (`hanzo_ipc::roles::providers`).
pub const DEFAULT_MODEL: &str = hanzo_ipc::roles::providers::DEFAULT_MODEL;

/// The environment scope: variable → the setting it sets. Empty values count as unset.
pub const ENV_VARS: &[(&str, &str)] = &[
    ("HANZO_API_KEY", "api_key"),
    ("HANZO_MODEL", "model"),
    ("HANZO_INPUT_MODE", "input_mode"),
    ("HANZO_ISOLATION", "sandbox.isolation"),
];

/// Where a merged value came from, for `config show --sources`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The built-in default.
    Default,
    /// The user's settings file.
    User,
    /// The project's `.hanzo/settings.json`.
    Project,
    /// The project's `.hanzo/settings.local.json`.
    Local,
    /// A `HANZO_*` environment variable.
    Env,
    /// A command-line flag.
    Cli,
}

impl Source {
    /// The source as `config show --sources` labels it (`default`, `user`, …, `cli`).
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Default => "default",
            Source::User => "user",
            Source::Project => "project",
            Source::Local => "local",
            Source::Env => "env",
            Source::Cli => "cli",
        }
    }
}

impl From<Scope> for Source {
    fn from(t: Scope) -> Source {
        match t {
            Scope::User => Source::User,
            Scope::Project => Source::Project,
            Scope::Local => Source::Local,
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One parsed settings file and the name it is reported under.
#[derive(Debug, Clone)]
pub struct ScopeFile {
    /// Which scope the file is.
    pub scope: Scope,
    /// How warnings and errors name it (its path).
    pub file: String,
    /// Its parsed content.
    pub settings: SettingsFile,
}

/// Values given on the command line (the last scope).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CliOverrides {
    /// `--model`.
    pub model: Option<String>,
    /// The input mode flag, if given.
    pub input_mode: Option<InputMode>,
    /// `--isolation`.
    pub isolation: Option<IsolationMode>,
    /// `--network-allow HOST` (repeatable): added to the allow-list for this invocation.
    pub network_allow: Vec<String>,
}

/// Whether the workspace's privileged settings (hooks, MCP launch fields, allow rules, sandbox
/// widenings from project/local files) are in effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TrustStatus {
    /// The workspace files contain nothing that needs trust.
    NotRequired,
    /// The user trusted exactly the current content.
    Trusted,
    /// Privileged workspace settings are ignored (allow rules are kept but do not count).
    Untrusted,
}

impl TrustStatus {
    /// The status as `config show` and the run record spell it (`not_required`, `trusted`,
    /// `untrusted`).
    pub fn as_str(self) -> &'static str {
        match self {
            TrustStatus::NotRequired => "not_required",
            TrustStatus::Trusted => "trusted",
            TrustStatus::Untrusted => "untrusted",
        }
    }
}

/// One MCP server after merging the scopes field by field.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct McpServer {
    /// The stdio server's program, if set.
    pub command: Option<String>,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its environment as written (values may name secrets).
    pub env: BTreeMap<String, String>,
    /// Its working directory, if set.
    pub cwd: Option<String>,
    /// A streamable-HTTP server's URL, if set (exclusive with `command`).
    pub url: Option<String>,
    /// Whether the server is turned off.
    pub disabled: bool,
    /// `timeout_ms`: the per-call limit, when set (the caller's default otherwise).
    pub timeout_ms: Option<u64>,
    /// `startup_timeout_ms`: the limit up to `initialize`'s answer, when set.
    pub startup_timeout_ms: Option<u64>,
    /// `network_allow` as written (the caller intersects it with the run's allow-list).
    pub network_allow: Vec<String>,
    /// `filesystem`, when set (`workspace-ro` otherwise).
    pub filesystem: Option<super::file::McpFilesystemSetting>,
    /// `read_paths` as written (absolute or `~/`-relative; vetted when the server is planned).
    pub read_paths: Vec<String>,
    /// `max_result_bytes`, when set (the caller's default otherwise).
    pub max_result_bytes: Option<u64>,
}

/// A hook in effect, with the scope that configured it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfiguredHook {
    /// The scope whose file defines it.
    pub scope: Scope,
    /// The hook.
    pub hook: HookConfig,
}

/// Permission rules per scope, each in file order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ScopeRules {
    /// The user file's rules.
    pub user: Vec<PermissionRule>,
    /// The project file's rules (its allow rules count only when trusted).
    pub project: Vec<PermissionRule>,
    /// The local file's rules (its allow rules count only when trusted).
    pub local: Vec<PermissionRule>,
}

/// The merged `sandbox` settings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SandboxConfig {
    /// How commands are isolated (what the user asked for).
    pub isolation: IsolationMode,
    /// Paths outside the workspace commands may read, from every scope in order (workspace scopes
    /// only when trusted).
    pub extra_read_paths: Vec<String>,
    /// Paths outside the workspace commands may write, from every scope in order (workspace scopes
    /// only when trusted).
    pub extra_write_paths: Vec<String>,
    /// `sandbox.network_allow` as the files write it, concatenated like the path lists (the
    /// canonical form the config-merge vectors fix). **Not** what is enforced: see
    /// `network_effective`.
    pub network_allow: Vec<String>,
    /// The allow-list commands get (`hanzo_policy::network::effective_allow_list` of the scopes:
    /// the user scope grants, project and local only narrow, an untrusted workspace gets none,
    /// `--network-allow` adds): canonical entries, in order.
    pub network_effective: Vec<String>,
    /// Each entry of `network_effective` with the scope it came from.
    pub network_sources: Vec<(String, crate::network::EntrySource)>,
}

impl SandboxConfig {
    /// The enforced allow-list, parsed (its entries parsed when merged; one that no longer
    /// parses is dropped, so nothing is ever widened).
    pub fn allow_list(&self) -> crate::network::AllowList {
        crate::network::AllowList::parse_lenient(&self.network_effective).0
    }
}

/// The effective configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The model to use.
    pub model: String,
    /// The API key from the user file or `HANZO_API_KEY`, with where it came from.
    pub api_key: Option<(Secret, Source)>,
    /// OAuth credentials from the user file, with where they came from.
    pub oauth_credentials: Option<(SecretObject, Source)>,
    /// Extra instructions for the system prompt (the last scope that sets them wins).
    pub custom_instructions: String,
    /// How the interactive session's input line takes keys.
    pub input_mode: InputMode,
    /// Every named server, disabled ones included (marked).
    pub mcp_servers: BTreeMap<String, McpServer>,
    /// Permission rules by scope.
    pub permissions: ScopeRules,
    /// Hooks in effect, in run order (user, then project and local when trusted).
    pub hooks: Vec<ConfiguredHook>,
    /// The sandbox settings.
    pub sandbox: SandboxConfig,
    /// Whether the workspace's privileged settings are in effect.
    pub trust: TrustStatus,
    /// `lsp_servers` in effect, by name (a later file replaces a whole entry; untrusted
    /// workspace files are ignored), as JSON for the lsp worker.
    pub lsp_servers: BTreeMap<String, LspServerEntry>,
}

/// The result of a merge.
#[derive(Debug, Clone)]
pub struct Merged {
    /// The effective configuration.
    pub config: Config,
    /// What was ignored or looked wrong, in order.
    pub warnings: Vec<Warning>,
    /// Canonical key path → the scope that set it.
    pub sources: BTreeMap<String, Source>,
    /// What trusting this workspace would cover (empty when nothing needs trust).
    pub trust_content: TrustContent,
}

fn redacted(source: Source) -> Value {
    Value::String(format!("<redacted:{source}>"))
}

fn rules_json(rules: &[PermissionRule]) -> Value {
    Value::Array(
        rules
            .iter()
            .map(|r| {
                let mut o = Map::new();
                o.insert("tool_pattern".into(), r.tool_pattern.clone().into());
                o.insert("mode".into(), r.mode.as_str().into());
                if let Some(reason) = &r.reason {
                    o.insert("reason".into(), reason.clone().into());
                }
                Value::Object(o)
            })
            .collect(),
    )
}

impl Config {
    /// The canonical JSON form (documented in `test-vectors/README.md`). Secrets appear only as
    /// `"<redacted:SCOPE>"`. Each hook carries its scope under the key `"tier"`, the form the
    /// `config-merge` vectors pin.
    pub fn canonical_json(&self) -> Value {
        let servers: Map<String, Value> = self
            .mcp_servers
            .iter()
            .map(|(name, s)| {
                let mut server = json!({
                    "command": s.command,
                    "args": s.args,
                    "env": s.env,
                    "cwd": s.cwd,
                    "url": s.url,
                    "disabled": s.disabled,
                });
                // Only when set: the canonical form of files without them stays as it was.
                for (key, v) in [
                    ("timeout_ms", s.timeout_ms),
                    ("startup_timeout_ms", s.startup_timeout_ms),
                    ("max_result_bytes", s.max_result_bytes),
                ] {
                    if let Some(v) = v {
                        server[key] = json!(v);
                    }
                }
                if !s.network_allow.is_empty() {
                    server["network_allow"] = json!(s.network_allow);
                }
                if let Some(fs) = s.filesystem {
                    server["filesystem"] = json!(fs.as_str());
                }
                if !s.read_paths.is_empty() {
                    server["read_paths"] = json!(s.read_paths);
                }
                (name.clone(), server)
            })
            .collect();
        json!({
            "model": self.model,
            "api_key": self.api_key.as_ref().map_or(Value::Null, |(_, s)| redacted(*s)),
            "oauth_credentials": self.oauth_credentials.as_ref().map_or(Value::Null, |(_, s)| redacted(*s)),
            "custom_instructions": self.custom_instructions,
            "input_mode": self.input_mode.as_str(),
            "mcp_servers": servers,
            "permissions": {
                "user": rules_json(&self.permissions.user),
                "project": rules_json(&self.permissions.project),
                "local": rules_json(&self.permissions.local),
            },
            "hooks": self.hooks.iter().map(|h| json!({
                "tier": h.scope.as_str(),
                "event": h.hook.event.as_str(),
                "command": h.hook.command,
                "tool_pattern": h.hook.tool_pattern,
                "timeout_ms": h.hook.timeout_ms,
            })).collect::<Vec<_>>(),
            "sandbox": {
                "isolation": self.sandbox.isolation.as_str(),
                "extra_read_paths": self.sandbox.extra_read_paths,
                "extra_write_paths": self.sandbox.extra_write_paths,
                "network_allow": self.sandbox.network_allow,
            },
            "trust": self.trust.as_str(),
        })
    }

    /// The permission policy these settings define; workspace allow rules count only if trusted.
    pub fn permission_policy(&self) -> Result<ScopedPolicy, RuleError> {
        Ok(ScopedPolicy::new(
            RuleList::new(self.permissions.user.clone())?,
            RuleList::new(self.permissions.project.clone())?,
            RuleList::new(self.permissions.local.clone())?,
            self.trust != TrustStatus::Untrusted,
        ))
    }

    /// Servers that should run.
    pub fn enabled_mcp_servers(&self) -> impl Iterator<Item = (&String, &McpServer)> {
        self.mcp_servers.iter().filter(|(_, s)| !s.disabled)
    }
}

fn push_unique(
    list: &mut Vec<String>,
    items: &[String],
    sources: &mut BTreeMap<String, Source>,
    key: &str,
    src: Source,
) {
    for item in items {
        if !list.contains(item) {
            list.push(item.clone());
            sources.insert(format!("{key}[{}]", list.len() - 1), src);
        }
    }
}

/// Merges files (any order; sorted user < project < local), then the environment, then the CLI.
/// `trusted` says whether the user trusted exactly this workspace content.
pub fn merge(
    files: &[ScopeFile],
    env: &BTreeMap<String, String>,
    cli: &CliOverrides,
    trusted: bool,
) -> Result<Merged, SettingsError> {
    let mut files: Vec<&ScopeFile> = files.iter().collect();
    files.sort_by_key(|f| f.scope);
    let (trust_content, trust) = trust_of(&files, trusted);
    let mut m = Merger::new(trust);
    for f in &files {
        m.apply_file(f);
    }
    m.apply_env(env)?;
    m.apply_cli(cli);
    m.finish(trust_content)
}

/// What the workspace files would need trusting for, and whether they are trusted.
fn trust_of(files: &[&ScopeFile], trusted: bool) -> (TrustContent, TrustStatus) {
    let find = |scope: Scope| files.iter().find(|f| f.scope == scope).map(|f| &f.settings);
    let content = TrustContent::from_workspace_files(find(Scope::Project), find(Scope::Local));
    let status = if content.is_empty() {
        TrustStatus::NotRequired
    } else if trusted {
        TrustStatus::Trusted
    } else {
        TrustStatus::Untrusted
    };
    (content, status)
}

/// The merge in progress: every setting as merged so far, where each came from, and warnings.
struct Merger {
    trust: TrustStatus,
    warnings: Vec<Warning>,
    sources: BTreeMap<String, Source>,
    model: String,
    api_key: Option<(Secret, Source)>,
    oauth: Option<(SecretObject, Source)>,
    custom_instructions: String,
    input_mode: InputMode,
    servers: BTreeMap<String, McpServerEntry>,
    permissions: ScopeRules,
    hooks: Vec<ConfiguredHook>,
    sandbox: SandboxConfig,
    lsp_servers: BTreeMap<String, LspServerEntry>,
    /// `sandbox.network_allow` per scope (user, project, local) as written, with the file that
    /// set it last; combined in `finish` (workspace scopes only narrow).
    network: [Option<(Vec<String>, String)>; 3],
    network_cli: Vec<String>,
}

impl Merger {
    fn new(trust: TrustStatus) -> Merger {
        let sources = [
            "model",
            "custom_instructions",
            "input_mode",
            "sandbox.isolation",
        ]
        .into_iter()
        .map(|k| (k.to_string(), Source::Default))
        .collect();
        Merger {
            trust,
            warnings: Vec::new(),
            sources,
            model: DEFAULT_MODEL.to_string(),
            api_key: None,
            oauth: None,
            custom_instructions: String::new(),
            input_mode: InputMode::default(),
            servers: BTreeMap::new(),
            permissions: ScopeRules::default(),
            hooks: Vec::new(),
            sandbox: SandboxConfig::default(),
            lsp_servers: BTreeMap::new(),
            network: [None, None, None],
            network_cli: Vec::new(),
        }
    }

    fn set_source(&mut self, key: impl Into<String>, src: Source) {
        self.sources.insert(key.into(), src);
    }

    fn warn(&mut self, file: &str, message: String) {
        self.warnings.push(Warning {
            file: file.to_string(),
            message,
        });
    }

    /// One settings file, on top of what came before.
    fn apply_file(&mut self, f: &ScopeFile) {
        let src = Source::from(f.scope);
        // An untrusted workspace file keeps only what needs no trust.
        let gated = f.scope.is_workspace() && self.trust == TrustStatus::Untrusted;
        if gated {
            self.warn_untrusted(f);
        }
        self.apply_scalars(f, src);
        self.apply_secrets(f, src);
        if let Some(map) = &f.settings.mcp_servers {
            self.apply_mcp_servers(map, src, gated);
        }
        self.apply_permissions(f, src);
        if !gated {
            self.apply_hooks(f, src);
        }
        if let Some(sb) = &f.settings.sandbox {
            self.apply_sandbox(f, sb, src, gated);
        }
        self.apply_lsp_servers(f, src, gated);
    }

    /// Language servers replace by name; an untrusted workspace file sets none.
    fn apply_lsp_servers(&mut self, f: &ScopeFile, src: Source, gated: bool) {
        let Some(map) = &f.settings.lsp_servers else {
            return;
        };
        // `warn_untrusted` named them among what the file's trust would enable.
        if gated {
            return;
        }
        for (name, entry) in map {
            self.lsp_servers.insert(name.clone(), entry.clone());
            self.set_source(format!("lsp_servers.{name}"), src);
        }
    }

    fn warn_untrusted(&mut self, f: &ScopeFile) {
        let c = TrustContent::from_workspace_files(Some(&f.settings), None);
        let summary = c.project.summary();
        if !summary.is_empty() {
            self.warn(
                &f.file,
                format!(
                    "{summary} ignored until you trust this workspace: review .hanzo/ and run `hanzo-dev trust`"
                ),
            );
        }
    }

    /// `model`, `custom_instructions`, `input_mode`: the last file that sets one wins.
    fn apply_scalars(&mut self, f: &ScopeFile, src: Source) {
        let s = &f.settings;
        if let Some(m) = &s.model {
            self.model = m.clone();
            self.set_source("model", src);
        }
        if let Some(ci) = &s.custom_instructions {
            self.custom_instructions = ci.clone();
            self.set_source("custom_instructions", src);
        }
        if let Some(im) = s.input_mode {
            self.input_mode = im;
            self.set_source("input_mode", src);
        }
    }

    /// `api_key`, `oauth_credentials`: from the user file only. `parse_settings` already removed
    /// them from workspace files; checked again because a `ScopeFile` can be built by hand.
    fn apply_secrets(&mut self, f: &ScopeFile, src: Source) {
        if f.scope.is_workspace() {
            return;
        }
        if let Some(k) = &f.settings.api_key {
            self.api_key = Some((k.clone(), src));
            self.set_source("api_key", src);
        }
        if let Some(o) = &f.settings.oauth_credentials {
            self.oauth = Some((o.clone(), src));
            self.set_source("oauth_credentials", src);
        }
    }

    /// MCP servers merge by name, field by field; an untrusted file cannot set what runs.
    fn apply_mcp_servers(
        &mut self,
        map: &BTreeMap<String, McpServerEntry>,
        src: Source,
        gated: bool,
    ) {
        for (name, entry) in map {
            let mut entry = entry.clone();
            if gated {
                entry.command = None;
                entry.args = None;
                entry.env = None;
                entry.cwd = None;
                entry.filesystem = None;
                entry.read_paths = None;
                if entry == McpServerEntry::default() {
                    continue;
                }
            }
            let acc = self.servers.entry(name.clone()).or_default();
            let set = merge_server_fields(acc, entry);
            for field in set {
                self.sources
                    .insert(format!("mcp_servers.{name}.{field}"), src);
            }
        }
    }

    /// Each scope keeps its own list (evaluation needs them apart); a later file of the same scope
    /// replaces it.
    fn apply_permissions(&mut self, f: &ScopeFile, src: Source) {
        let Some(p) = &f.settings.permissions else {
            return;
        };
        let rules = p.to_rules();
        if !rules.is_empty() {
            self.set_source(format!("permissions.{}", f.scope), src);
        }
        match f.scope {
            Scope::User => self.permissions.user = rules,
            Scope::Project => self.permissions.project = rules,
            Scope::Local => self.permissions.local = rules,
        }
    }

    fn apply_hooks(&mut self, f: &ScopeFile, src: Source) {
        for h in f.settings.hooks.iter().flatten() {
            self.sources
                .insert(format!("hooks[{}]", self.hooks.len()), src);
            self.hooks.push(ConfiguredHook {
                scope: f.scope,
                hook: h.clone(),
            });
        }
    }

    /// `sandbox.isolation`: a workspace file may raise it (`tier-a` < `auto` < `strict`), never
    /// lower it. The path and host lists concatenate; an untrusted workspace file adds none.
    fn apply_sandbox(&mut self, f: &ScopeFile, sb: &SandboxEntry, src: Source, gated: bool) {
        if let Some(iso) = sb.isolation {
            if f.scope.is_workspace() && iso < self.sandbox.isolation {
                self.warn(
                    &f.file,
                    format!(
                        "`sandbox.isolation: \"{}\"` is ignored: a workspace file can raise isolation but not lower it",
                        iso.as_str()
                    ),
                );
            } else {
                self.sandbox.isolation = iso;
                self.set_source("sandbox.isolation", src);
            }
        }
        if let Some(hosts) = &sb.network_allow {
            let slot = match f.scope {
                Scope::User => 0,
                Scope::Project => 1,
                Scope::Local => 2,
            };
            self.network[slot] = Some((hosts.clone(), f.file.clone()));
        }
        if gated {
            return;
        }
        let lists = [
            (
                "sandbox.extra_read_paths",
                &sb.extra_read_paths,
                &mut self.sandbox.extra_read_paths,
            ),
            (
                "sandbox.extra_write_paths",
                &sb.extra_write_paths,
                &mut self.sandbox.extra_write_paths,
            ),
            (
                "sandbox.network_allow",
                &sb.network_allow,
                &mut self.sandbox.network_allow,
            ),
        ];
        for (key, items, list) in lists {
            if let Some(items) = items {
                push_unique(list, items, &mut self.sources, key, src);
            }
        }
    }

    /// The environment scope: `HANZO_*` variables from [`ENV_VARS`]; a near miss of one of them
    /// is a warning, other `HANZO_*` variables belong to other parts of the product.
    fn apply_env(&mut self, env: &BTreeMap<String, String>) -> Result<(), SettingsError> {
        let known: Vec<&str> = ENV_VARS.iter().map(|(v, _)| *v).collect();
        for (var, value) in env {
            if !var.starts_with("HANZO_") || value.is_empty() {
                continue;
            }
            let bad = |what: &str| SettingsError::Env {
                var: var.clone(),
                message: format!("{value:?} is not {what}"),
            };
            match var.as_str() {
                "HANZO_API_KEY" => {
                    self.api_key = Some((Secret::new(value.clone()), Source::Env));
                    self.set_source("api_key", Source::Env);
                }
                "HANZO_MODEL" => {
                    self.model = value.clone();
                    self.set_source("model", Source::Env);
                }
                "HANZO_INPUT_MODE" => {
                    self.input_mode = InputMode::parse(value)
                        .ok_or_else(|| bad("an input mode (default, vim, emacs)"))?;
                    self.set_source("input_mode", Source::Env);
                }
                "HANZO_ISOLATION" => {
                    self.sandbox.isolation = IsolationMode::parse(value)
                        .ok_or_else(|| bad("an isolation mode (tier-a, auto, strict)"))?;
                    self.set_source("sandbox.isolation", Source::Env);
                }
                other => {
                    if let Some(s) = did_you_mean(other, &known) {
                        self.warn(
                            "environment",
                            format!("`{other}` is not a settings variable (did you mean `{s}`?); it is ignored"),
                        );
                    }
                }
            }
        }
        Ok(())
    }

    fn apply_cli(&mut self, cli: &CliOverrides) {
        if let Some(m) = &cli.model {
            self.model = m.clone();
            self.set_source("model", Source::Cli);
        }
        if let Some(im) = cli.input_mode {
            self.input_mode = im;
            self.set_source("input_mode", Source::Cli);
        }
        if let Some(iso) = cli.isolation {
            self.sandbox.isolation = iso;
            self.set_source("sandbox.isolation", Source::Cli);
        }
        self.network_cli = cli.network_allow.clone();
    }

    /// `sandbox.network_allow`: the user scope grants, the workspace scopes only narrow, an
    /// untrusted workspace gets none, `--network-allow` adds
    /// (`crate::network::effective_allow_list`); each ignored entry is a warning naming its file.
    fn finish_network(&mut self) {
        use crate::network::{effective_allow_list, EntrySource, ScopeEntries};
        let [user, project, local] = std::mem::take(&mut self.network);
        let list = |t: &Option<(Vec<String>, String)>| t.as_ref().map(|(v, _)| v.clone());
        let (u, p, l) = (list(&user), list(&project), list(&local));
        let effective = effective_allow_list(&ScopeEntries {
            user: u.as_deref(),
            project: p.as_deref(),
            local: l.as_deref(),
            cli: &self.network_cli,
            trusted: self.trust != TrustStatus::Untrusted,
        });
        let file_of = |scope: EntrySource| -> String {
            let named = match scope {
                EntrySource::User => &user,
                EntrySource::Project => &project,
                EntrySource::Local => &local,
                EntrySource::Cli => return "--network-allow".to_string(),
            };
            named
                .as_ref()
                .map(|(_, f)| f.clone())
                .unwrap_or_else(|| "settings".to_string())
        };
        for w in &effective.warnings {
            let file = file_of(w.scope);
            self.warn(&file, w.message.clone());
        }
        self.sandbox.network_effective = effective.list.entries();
        self.sandbox.network_sources = effective.sources;
    }

    /// The servers in effect: an enabled one needs exactly one of `command` and `url`.
    fn finish_mcp_servers(&mut self) -> Result<BTreeMap<String, McpServer>, SettingsError> {
        let mut out = BTreeMap::new();
        for (name, e) in std::mem::take(&mut self.servers) {
            let disabled = e.disabled.unwrap_or(false);
            if !disabled {
                match (&e.command, &e.url) {
                    (Some(_), Some(_)) => {
                        return Err(SettingsError::Conflict {
                            message: format!(
                                "mcp server `{name}` has both `command` and `url` after merging the settings files; set only one (see `hanzo-dev config show --sources`)"
                            ),
                        })
                    }
                    (None, None) => {
                        self.warn(
                            "settings",
                            format!(
                                "mcp server `{name}` has neither `command` nor `url` in effect; it is skipped"
                            ),
                        );
                        for f in ["command", "args", "env", "cwd", "url", "disabled"] {
                            self.sources.remove(&format!("mcp_servers.{name}.{f}"));
                        }
                        continue;
                    }
                    _ => {}
                }
            }
            out.insert(
                name,
                McpServer {
                    command: e.command,
                    args: e.args.unwrap_or_default(),
                    env: e.env.unwrap_or_default(),
                    cwd: e.cwd,
                    url: e.url,
                    disabled,
                    timeout_ms: e.timeout_ms,
                    startup_timeout_ms: e.startup_timeout_ms,
                    network_allow: e.network_allow.unwrap_or_default(),
                    filesystem: e.filesystem,
                    read_paths: e.read_paths.unwrap_or_default(),
                    max_result_bytes: e.max_result_bytes,
                },
            );
        }
        Ok(out)
    }

    fn finish(mut self, trust_content: TrustContent) -> Result<Merged, SettingsError> {
        let mcp_servers = self.finish_mcp_servers()?;
        self.finish_network();
        Ok(Merged {
            config: Config {
                model: self.model,
                api_key: self.api_key,
                oauth_credentials: self.oauth,
                custom_instructions: self.custom_instructions,
                input_mode: self.input_mode,
                mcp_servers,
                permissions: self.permissions,
                hooks: self.hooks,
                sandbox: self.sandbox,
                trust: self.trust,
                lsp_servers: self.lsp_servers,
            },
            warnings: self.warnings,
            sources: self.sources,
            trust_content,
        })
    }
}

/// A later scope replaces exactly the fields it sets (`args` and `env` as a whole); returns the
/// names of the fields it set.
fn merge_server_fields(acc: &mut McpServerEntry, entry: McpServerEntry) -> Vec<&'static str> {
    let mut set = Vec::new();
    if entry.command.is_some() {
        acc.command = entry.command;
        set.push("command");
    }
    if entry.args.is_some() {
        acc.args = entry.args;
        set.push("args");
    }
    if entry.env.is_some() {
        acc.env = entry.env;
        set.push("env");
    }
    if entry.cwd.is_some() {
        acc.cwd = entry.cwd;
        set.push("cwd");
    }
    if entry.url.is_some() {
        acc.url = entry.url;
        set.push("url");
    }
    if entry.disabled.is_some() {
        acc.disabled = entry.disabled;
        set.push("disabled");
    }
    if entry.timeout_ms.is_some() {
        acc.timeout_ms = entry.timeout_ms;
        set.push("timeout_ms");
    }
    if entry.startup_timeout_ms.is_some() {
        acc.startup_timeout_ms = entry.startup_timeout_ms;
        set.push("startup_timeout_ms");
    }
    if entry.network_allow.is_some() {
        acc.network_allow = entry.network_allow;
        set.push("network_allow");
    }
    if entry.filesystem.is_some() {
        acc.filesystem = entry.filesystem;
        set.push("filesystem");
    }
    if entry.read_paths.is_some() {
        acc.read_paths = entry.read_paths;
        set.push("read_paths");
    }
    if entry.max_result_bytes.is_some() {
        acc.max_result_bytes = entry.max_result_bytes;
        set.push("max_result_bytes");
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::parse_settings;

    fn scope_file(scope: Scope, text: &str) -> ScopeFile {
        ScopeFile {
            scope,
            file: scope.as_str().to_string(),
            settings: parse_settings(scope, scope.as_str(), text)
                .expect("valid")
                .0,
        }
    }

    #[test]
    fn command_and_url_after_merge_is_an_error() {
        let files = [
            scope_file(
                Scope::User,
                r#"{"mcp_servers": {"x": {"url": "https://x"}}}"#,
            ),
            scope_file(
                Scope::Project,
                r#"{"mcp_servers": {"x": {"command": "x"}}}"#,
            ),
        ];
        let err =
            merge(&files, &BTreeMap::new(), &CliOverrides::default(), true).expect_err("conflict");
        assert!(
            err.to_string().contains("both `command` and `url`"),
            "{err}"
        );
    }

    #[test]
    fn mcp_timeouts_merge_field_by_field_and_show_only_when_set() {
        let files = [
            scope_file(
                Scope::User,
                r#"{"mcp_servers": {"x": {"command": "x", "timeout_ms": 5000}, "y": {"command": "y"}}}"#,
            ),
            scope_file(
                Scope::Local,
                r#"{"mcp_servers": {"x": {"startup_timeout_ms": 9000}}}"#,
            ),
        ];
        let m = merge(&files, &BTreeMap::new(), &CliOverrides::default(), true).expect("merges");
        let x = &m.config.mcp_servers["x"];
        assert_eq!(
            (x.timeout_ms, x.startup_timeout_ms),
            (Some(5000), Some(9000))
        );
        assert_eq!(x.command.as_deref(), Some("x"));
        let y = &m.config.mcp_servers["y"];
        assert_eq!((y.timeout_ms, y.startup_timeout_ms), (None, None));
        let canonical = m.config.canonical_json();
        assert_eq!(canonical["mcp_servers"]["x"]["timeout_ms"], 5000);
        assert_eq!(canonical["mcp_servers"]["x"]["startup_timeout_ms"], 9000);
        // A server without them has the canonical form it always had.
        let mut keys: Vec<&String> = canonical["mcp_servers"]["y"]
            .as_object()
            .expect("object")
            .keys()
            .collect();
        keys.sort();
        assert_eq!(keys, ["args", "command", "cwd", "disabled", "env", "url"]);
        assert_eq!(
            m.sources.get("mcp_servers.x.startup_timeout_ms"),
            Some(&Source::Local)
        );
    }

    #[test]
    fn mcp_filesystem_merges_shows_only_when_set_and_needs_trust_from_a_workspace() {
        use crate::settings::McpFilesystemSetting as Fs;
        let files = [
            scope_file(
                Scope::User,
                r#"{"mcp_servers": {"x": {"command": "x"}, "y": {"command": "y", "filesystem": "none"}}}"#,
            ),
            scope_file(
                Scope::Project,
                r#"{"mcp_servers": {"x": {"filesystem": "workspace-rw"}}}"#,
            ),
        ];
        let m = merge(&files, &BTreeMap::new(), &CliOverrides::default(), true).expect("merges");
        assert_eq!(m.config.mcp_servers["x"].filesystem, Some(Fs::WorkspaceRw));
        assert_eq!(m.config.mcp_servers["y"].filesystem, Some(Fs::None));
        assert_eq!(
            m.sources.get("mcp_servers.x.filesystem"),
            Some(&Source::Project)
        );
        let canonical = m.config.canonical_json();
        assert_eq!(canonical["mcp_servers"]["x"]["filesystem"], "workspace-rw");
        // The project file's `filesystem` is trust content: untrusted, the user's server keeps
        // its own (unset: read-only).
        assert!(!m.trust_content.is_empty());
        let m = merge(&files, &BTreeMap::new(), &CliOverrides::default(), false).expect("merges");
        assert_eq!(m.config.trust, TrustStatus::Untrusted);
        assert_eq!(m.config.mcp_servers["x"].filesystem, None);
        assert!(canonical["mcp_servers"]["x"].get("filesystem").is_some());
        assert!(m.config.canonical_json()["mcp_servers"]["x"]
            .get("filesystem")
            .is_none());
        // Anything else is a settings error naming the key.
        let err = parse_settings(
            Scope::User,
            "u",
            r#"{"mcp_servers": {"x": {"command": "x", "filesystem": "everything"}}}"#,
        )
        .expect_err("bad value");
        assert!(err.to_string().contains("filesystem"), "{err}");
    }

    #[test]
    fn secrets_from_a_hand_built_workspace_scope_are_still_ignored() {
        let settings = SettingsFile {
            api_key: Some(Secret::new("sk-evil")),
            ..Default::default()
        };
        let files = [ScopeFile {
            scope: Scope::Local,
            file: "l".into(),
            settings,
        }];
        let m = merge(&files, &BTreeMap::new(), &CliOverrides::default(), true).expect("merges");
        assert!(m.config.api_key.is_none());
    }

    #[test]
    fn cli_beats_env_beats_files_and_sources_say_so() {
        let files = [scope_file(
            Scope::User,
            r#"{"model": "u", "input_mode": "vim"}"#,
        )];
        let mut env = BTreeMap::new();
        env.insert("HANZO_MODEL".to_string(), "e".to_string());
        env.insert("HANZO_ISOLATION".to_string(), "strict".to_string());
        let cli = CliOverrides {
            model: Some("c".into()),
            ..Default::default()
        };
        let m = merge(&files, &env, &cli, false).expect("merges");
        assert_eq!(m.config.model, "c");
        assert_eq!(m.config.sandbox.isolation, IsolationMode::Strict);
        assert_eq!(m.sources["model"], Source::Cli);
        assert_eq!(m.sources["input_mode"], Source::User);
        assert_eq!(m.sources["sandbox.isolation"], Source::Env);
        assert_eq!(m.sources["custom_instructions"], Source::Default);
        let mut bad = BTreeMap::new();
        bad.insert("HANZO_ISOLATION".to_string(), "off".to_string());
        let err = merge(&files, &bad, &CliOverrides::default(), false).expect_err("bad env");
        assert!(err.to_string().contains("HANZO_ISOLATION"), "{err}");
    }

    #[test]
    fn lsp_servers_from_an_untrusted_workspace_are_ignored_and_named() {
        let files = [
            scope_file(
                Scope::User,
                r#"{"lsp_servers": {"pyright": {"command": "/opt/p"}}}"#,
            ),
            scope_file(
                Scope::Project,
                r#"{"lsp_servers": {"evil": {"command": "./x", "files": ["*.py"]}}}"#,
            ),
        ];
        let m = merge(&files, &BTreeMap::new(), &CliOverrides::default(), false).expect("merges");
        assert_eq!(m.config.trust, TrustStatus::Untrusted);
        assert_eq!(
            m.config.lsp_servers.keys().collect::<Vec<_>>(),
            vec!["pyright"]
        );
        assert!(
            m.warnings
                .iter()
                .any(|w| w.message.contains("1 language server entry")),
            "{:?}",
            m.warnings
        );
        let m = merge(&files, &BTreeMap::new(), &CliOverrides::default(), true).expect("merges");
        assert_eq!(m.config.trust, TrustStatus::Trusted);
        assert_eq!(m.config.lsp_servers.len(), 2);
        assert_eq!(m.sources["lsp_servers.evil"], Source::Project);
    }

    #[test]
    fn untrusted_policy_ignores_workspace_allow_but_keeps_deny() {
        let files = [scope_file(
            Scope::Project,
            r#"{"permissions": {"bash(npm *)": "allow", "bash(rm *)": "deny"}}"#,
        )];
        let m = merge(&files, &BTreeMap::new(), &CliOverrides::default(), false).expect("merges");
        assert_eq!(m.config.trust, TrustStatus::Untrusted);
        let p = m.config.permission_policy().expect("valid");
        let eval = |c: &str| {
            p.evaluate("bash", &serde_json::json!({ "command": c }))
                .mode
        };
        assert_eq!(eval("npm test"), crate::PermissionMode::Prompt);
        assert_eq!(eval("rm -rf /"), crate::PermissionMode::Deny);
    }

    #[test]
    fn network_allow_user_grants_project_narrows_with_warnings_cli_adds() {
        use crate::network::EntrySource;
        let files = [
            scope_file(
                Scope::User,
                r#"{"sandbox": {"network_allow": ["pypi.org", "*.crates.io"]}}"#,
            ),
            scope_file(
                Scope::Project,
                r#"{"sandbox": {"network_allow": ["static.crates.io", "evil.example"]}}"#,
            ),
        ];
        let cli = CliOverrides {
            network_allow: vec!["api.example.com:8443".into()],
            ..Default::default()
        };
        let m = merge(&files, &BTreeMap::new(), &cli, true).expect("merges");
        assert_eq!(
            m.config.sandbox.network_effective,
            ["static.crates.io", "api.example.com:8443"]
        );
        assert_eq!(
            m.config.sandbox.network_sources,
            [
                ("static.crates.io".to_string(), EntrySource::Project),
                ("api.example.com:8443".to_string(), EntrySource::Cli)
            ]
        );
        let warned: Vec<_> = m
            .warnings
            .iter()
            .filter(|w| w.message.contains("evil.example"))
            .collect();
        assert_eq!(warned.len(), 1, "{:?}", m.warnings);
        assert!(warned[0].message.contains("only narrow"), "{:?}", warned[0]);
        assert_eq!(warned[0].file, "project");
        assert!(!m.config.sandbox.allow_list().is_empty());
        // The canonical form keeps what the files wrote.
        assert!(m
            .config
            .sandbox
            .network_allow
            .contains(&"evil.example".to_string()));
    }

    #[test]
    fn network_allow_in_an_untrusted_workspace_enforces_nothing_even_from_the_user_scope() {
        let files = [
            scope_file(
                Scope::User,
                r#"{"sandbox": {"network_allow": ["pypi.org"]}}"#,
            ),
            scope_file(
                Scope::Project,
                r#"{"sandbox": {"network_allow": ["evil.example"]}}"#,
            ),
        ];
        let m = merge(&files, &BTreeMap::new(), &CliOverrides::default(), false).expect("merges");
        assert_eq!(m.config.trust, TrustStatus::Untrusted);
        assert!(m.config.sandbox.network_effective.is_empty());
        assert!(m.config.sandbox.allow_list().is_empty());
        assert!(
            m.warnings.iter().any(|w| w.message.contains("not trusted")),
            "{:?}",
            m.warnings
        );
        let cli = CliOverrides {
            network_allow: vec!["pypi.org".into()],
            ..Default::default()
        };
        let m = merge(&files, &BTreeMap::new(), &cli, false).expect("merges");
        assert_eq!(m.config.sandbox.network_effective, ["pypi.org"]);
    }
}
