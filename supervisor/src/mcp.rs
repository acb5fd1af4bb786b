//! The MCP servers of a run, from settings: `mcp_servers` turned into the mcp worker's
//! [`McpConfig`], with the servers that are not started (disabled, or set by an untrusted
//! workspace) and why.
//!
//! Scope rules: a project or local settings file adds a server only in a trusted workspace (the
//! settings merge already drops an untrusted file's `command`, `args`, `env` and `cwd`; a `url`
//! it sets is refused here, since the broker would otherwise be asked to reach it). Server names
//! follow the `mcp__<server>__<tool>` contract: the settings loader refuses any other name with
//! its file, line and column (`hanzo_policy::mcp_name`), and the plan checks again.
//!
//! Secrets (`"env": {"VAR": "${secret:NAME}"}`): honoured only for a stdio server whose whole
//! launch — `command`, `args`, `env` and `cwd` — comes from the user's settings. A workspace
//! file, even a trusted one, can name no secret, and cannot change what runs with one (a trusted
//! project that set only `command` for a server whose user entry names a secret would otherwise
//! run its own program with the user's token): such a server is not started, with the reason.
//! The supervisor tells the broker the names ([`secret_grants`], `AllowMcpSecrets`), never a
//! value; the broker gives the values to the mcp worker as it spawns that server.
//!
//! Headers of a `url` server (`"headers": {"Authorization": "${secret:NAME}"}`): sent by the
//! broker, which alone reads a named secret's value (from its environment, as it sends); the
//! mcp worker never sees a header. The same rule as for `env`: a secret is honoured only when
//! the server's `url` and `headers` both come from the user's settings (a trusted project that
//! set only `url` would otherwise receive the user's token); otherwise the server is not started,
//! with the reason. Plain values may come from a workspace file (once trusted, when it needs
//! trust).

use hanzo_ipc::roles::broker::{EgressSource, McpSecretGrant};
use hanzo_ipc::roles::mcp::{
    EnvValue, McpConfig, McpFilesystem, McpServerConfig, McpServerProfile, McpTransport,
};
use hanzo_ipc::roles::mcphttp::{McpHeader, McpLogin, McpRemote};
use hanzo_policy::settings::{Config, McpFilesystemSetting, Source};
use std::collections::BTreeMap;
use std::path::Path;

/// Default `initialize` timeout of a server.
pub const INITIALIZE_TIMEOUT_MS: u64 = 30_000;
/// Default per-call timeout.
pub const CALL_TIMEOUT_MS: u64 = 120_000;
/// Largest `tools/call` result passed to the model (cut and marked beyond).
pub const MAX_RESULT_BYTES: u64 = 256 * 1024;
/// Largest single message accepted from a server.
pub const MAX_MESSAGE_BYTES: u64 = 8 << 20;

/// What the mcp worker is configured with, and what is left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpPlan {
    /// The servers the mcp worker starts, with their resolved commands, environments and limits.
    pub config: McpConfig,
    /// `(name, transport, state, reason)` of each configured server that is not started.
    pub not_started: Vec<(String, String, String, String)>,
    /// The `network_allow` of each stdio server that sets one, as written (see
    /// [`assign_egress`]).
    pub network: Vec<(String, Vec<String>)>,
    /// The `headers` of each `url` server that sets them, for the broker alone (a secret by its
    /// name only); the mcp worker's configuration carries none.
    pub headers: Vec<(String, Vec<(String, EnvValue)>)>,
}

/// The first proxy address handed to a server (`127.0.0.1` is the namespace's own loopback,
/// which the servers' `NO_PROXY` keeps direct).
const FIRST_PROXY_OCTET: u8 = 2;

/// Give each stdio server of `plan` that asks for network its share of the mcp worker's egress
/// channel: its entries that `allowed` (the run's effective `sandbox.network_allow`) covers —
/// so a workspace file, which cannot widen `allowed`, cannot grant a server a host — and its own
/// proxy address (`127.0.0.2`, `.3`, … in configuration order). A server none of whose entries
/// is allowed keeps no address and fails to start with the reason. Returns the sources for
/// `ConfigureMcpEgress` and a warning per dropped entry.
pub fn assign_egress(
    plan: &mut McpPlan,
    allowed: &hanzo_policy::network::AllowList,
) -> (Vec<EgressSource>, Vec<String>) {
    let mut sources = Vec::new();
    let mut warnings = Vec::new();
    let mut next = FIRST_PROXY_OCTET;
    for server in &mut plan.config.servers {
        let McpTransport::Stdio { profile, .. } = &mut server.transport else {
            continue;
        };
        if !profile.network {
            continue;
        }
        profile.egress_address = None;
        let asked = plan
            .network
            .iter()
            .find(|(n, _)| *n == server.name)
            .map(|(_, l)| l.as_slice())
            .unwrap_or_default();
        let (list, errors) = hanzo_policy::network::AllowList::parse_lenient(asked);
        for e in errors {
            warnings.push(format!(
                "MCP server {:?}: {e}; the entry is ignored",
                server.name
            ));
        }
        let mut kept = hanzo_policy::network::AllowList::none();
        for rule in list.rules() {
            if allowed.covers(rule) {
                kept.push(rule.clone());
            } else {
                warnings.push(format!(
                    "MCP server {:?}: network entry {:?} is ignored: the run's \
                     sandbox.network_allow does not allow it (a server gets only hosts the user \
                     settings or --network-allow allow)",
                    server.name,
                    rule.to_string()
                ));
            }
        }
        if kept.is_empty() || next == u8::MAX {
            continue;
        }
        let address = format!("127.0.0.{next}");
        next += 1;
        profile.egress_address = Some(address.clone());
        sources.push(EgressSource {
            name: server.name.clone(),
            address,
            allow: kept.entries(),
        });
    }
    (sources, warnings)
}

/// Whether `loaded`'s servers would get network in a run that allows `allowed` (the broker and
/// the mcp worker then need the mcp egress control socket).
pub fn wants_egress(
    loaded: &hanzo_policy::settings::LoadedSettings,
    workspace: &Path,
    allowed: &hanzo_policy::network::AllowList,
) -> bool {
    match plan_for(loaded, workspace) {
        Ok(mut plan) => !assign_egress(&mut plan, allowed).0.is_empty(),
        Err(_) => false,
    }
}

impl McpPlan {
    /// Whether a stdio server of the plan asks for the workspace read-write: the mcp worker is
    /// then started with write access to it
    /// ([`ProfileContext::mcp_workspace_write`](hanzo_policy::profile::ProfileContext)).
    pub fn wants_workspace_write(&self) -> bool {
        self.config.servers.iter().any(|s| {
            matches!(
                &s.transport,
                McpTransport::Stdio { profile, .. }
                    if profile.filesystem == McpFilesystem::WorkspaceRw
            )
        })
    }
}

impl McpPlan {
    /// Every path a stdio server of the plan may read beyond the workspace (their `read_paths`):
    /// the mcp worker and its launcher are started able to read them
    /// ([`ProfileContext::mcp_extra_read`](hanzo_policy::profile::ProfileContext)).
    pub fn extra_reads(&self) -> Vec<std::path::PathBuf> {
        let mut out: Vec<std::path::PathBuf> = Vec::new();
        for s in &self.config.servers {
            if let McpTransport::Stdio { profile, .. } = &s.transport {
                for p in &profile.extra_read {
                    let p = std::path::PathBuf::from(p);
                    if !out.contains(&p) {
                        out.push(p);
                    }
                }
            }
        }
        out
    }
}

/// [`McpPlan::extra_reads`] for `loaded`'s servers in `workspace`.
pub fn extra_reads(
    loaded: &hanzo_policy::settings::LoadedSettings,
    workspace: &Path,
) -> Vec<std::path::PathBuf> {
    plan_for(loaded, workspace).map_or_else(|_| Vec::new(), |p| p.extra_reads())
}

/// [`McpPlan::wants_workspace_write`] for `loaded`'s servers in `workspace`.
pub fn wants_workspace_write(
    loaded: &hanzo_policy::settings::LoadedSettings,
    workspace: &Path,
) -> bool {
    plan_for(loaded, workspace).is_ok_and(|p| p.wants_workspace_write())
}

/// Why the servers cannot be configured at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("settings `mcp_servers.{server}`: {message}")]
pub struct McpSettingsError {
    /// The server's name under `mcp_servers` in the settings.
    pub server: String,
    /// What is wrong with its entry.
    pub message: String,
}

/// The plan for `config`'s servers in `workspace`. `sources` says which scope set each key,
/// `trusted` whether the workspace's own settings are trusted.
pub fn mcp_plan(
    config: &Config,
    sources: &BTreeMap<String, Source>,
    trusted: bool,
    workspace: &Path,
) -> Result<McpPlan, McpSettingsError> {
    mcp_plan_with(config, sources, trusted, workspace, &[])
}

/// The names of the servers an untrusted workspace file launches (its `mcp_servers` entries
/// that set `command`, `args`, `env` or `cwd`), which the merge dropped.
pub fn untrusted_launches(loaded: &hanzo_policy::settings::LoadedSettings) -> Vec<String> {
    if loaded.trust_check.is_trusted() {
        return Vec::new();
    }
    let c = &loaded.merged.trust_content;
    c.project
        .mcp_servers
        .keys()
        .chain(c.local.mcp_servers.keys())
        .cloned()
        .collect()
}

/// The plan for the servers of `loaded` in `workspace`.
pub fn plan_for(
    loaded: &hanzo_policy::settings::LoadedSettings,
    workspace: &Path,
) -> Result<McpPlan, McpSettingsError> {
    mcp_plan_with(
        &loaded.merged.config,
        &loaded.merged.sources,
        loaded.trust_check.is_trusted(),
        workspace,
        &untrusted_launches(loaded),
    )
}

/// [`mcp_plan`], also listing `gated` (servers only an untrusted workspace file defines) as
/// skipped.
pub fn mcp_plan_with(
    config: &Config,
    sources: &BTreeMap<String, Source>,
    trusted: bool,
    workspace: &Path,
    gated: &[String],
) -> Result<McpPlan, McpSettingsError> {
    let mut servers = Vec::new();
    let mut not_started: Vec<(String, String, String, String)> = Vec::new();
    let mut network = Vec::new();
    let mut headers = Vec::new();
    for name in gated {
        if !config.mcp_servers.contains_key(name) && !not_started.iter().any(|r| &r.0 == name) {
            not_started.push((
                name.clone(),
                "stdio".to_string(),
                "skipped".to_string(),
                "its command comes from this workspace's settings, which are not trusted: review \
                 .hanzo/ and run `hanzo-dev trust`"
                    .to_string(),
            ));
        }
    }
    for (name, s) in &config.mcp_servers {
        let err = |message: String| McpSettingsError {
            server: name.clone(),
            message,
        };
        hanzo_mcp::validate_server_name(name).map_err(|e| err(e.to_string()))?;
        let transport = if s.url.is_some() { "http" } else { "stdio" };
        let skip = |state: &str, reason: String| {
            (
                name.clone(),
                transport.to_string(),
                state.to_string(),
                reason,
            )
        };
        if s.disabled {
            not_started.push(skip("disabled", "`disabled` is set".into()));
            continue;
        }
        let from_workspace = |key: &str| {
            matches!(
                sources.get(&format!("mcp_servers.{name}.{key}")),
                Some(Source::Project | Source::Local)
            )
        };
        if !trusted && from_workspace("url") {
            not_started.push(skip(
                "skipped",
                "its `url` comes from this workspace's settings, which are not trusted: review \
                 .hanzo/ and run `hanzo-dev trust`"
                    .into(),
            ));
            continue;
        }
        if let Some(why) = refused_secrets(&s.env, &from_workspace) {
            if s.url.is_none() {
                not_started.push(skip("skipped", why));
                continue;
            }
        }
        if s.url.is_some() {
            if let Some(why) = refused_header_secrets(&s.headers, &from_workspace) {
                not_started.push(skip("skipped", why));
                continue;
            }
        }
        let transport = match (&s.command, &s.url) {
            (Some(_), Some(_)) => {
                return Err(err("set either `command` or `url`, not both".into()));
            }
            (Some(command), None) => McpTransport::Stdio {
                command: command.clone(),
                args: s.args.clone(),
                env: s
                    .env
                    .iter()
                    .map(|(k, v)| (k.clone(), env_value(v)))
                    .collect(),
                cwd: s.cwd.clone(),
                profile: McpServerProfile {
                    filesystem: match s.filesystem.unwrap_or_default() {
                        McpFilesystemSetting::None => McpFilesystem::None,
                        McpFilesystemSetting::WorkspaceRo => McpFilesystem::WorkspaceRo,
                        McpFilesystemSetting::WorkspaceRw => McpFilesystem::WorkspaceRw,
                    },
                    // Resolved and vetted by the settings loader.
                    extra_read: s.read_paths.clone(),
                    network: !s.network_allow.is_empty(),
                    egress_address: None,
                },
            },
            (None, Some(url)) => McpTransport::Http {
                url: url.clone(),
                credential: Some(format!("mcp:{name}")),
            },
            (None, None) => {
                not_started.push(skip(
                    "skipped",
                    if trusted {
                        "it sets neither `command` nor `url`".into()
                    } else {
                        "its command comes from this workspace's settings, which are not \
                         trusted: review .hanzo/ and run `hanzo-dev trust`"
                            .into()
                    },
                ));
                continue;
            }
        };
        if matches!(transport, McpTransport::Stdio { .. }) && !s.network_allow.is_empty() {
            network.push((name.clone(), s.network_allow.clone()));
        }
        if matches!(transport, McpTransport::Http { .. }) && !s.headers.is_empty() {
            headers.push((
                name.clone(),
                s.headers
                    .iter()
                    .map(|(k, v)| (k.clone(), env_value(v)))
                    .collect(),
            ));
        }
        servers.push(McpServerConfig {
            name: name.clone(),
            transport,
            initialize_timeout_ms: s.startup_timeout_ms.unwrap_or(INITIALIZE_TIMEOUT_MS),
            call_timeout_ms: s.timeout_ms.unwrap_or(CALL_TIMEOUT_MS),
            elicitation_defaults: false,
            max_result_bytes: s.max_result_bytes,
        });
    }
    Ok(McpPlan {
        config: McpConfig {
            servers,
            roots: vec![workspace.display().to_string()],
            max_result_bytes: MAX_RESULT_BYTES,
            max_message_bytes: MAX_MESSAGE_BYTES,
        },
        not_started,
        network,
        headers,
    })
}

/// Why the secrets a stdio server's `env` names cannot be given to it, if they cannot:
/// a secret named in a workspace file, or a launch field (`command`, `args`, `env`, `cwd`) that
/// a workspace file set (`from_workspace`); a name that is not an environment variable's, or one
/// the supervisor keeps in its own environment (which would then hold the value).
fn refused_secrets(
    env: &BTreeMap<String, String>,
    from_workspace: &dyn Fn(&str) -> bool,
) -> Option<String> {
    let named: Vec<(&String, String)> = env
        .iter()
        .filter_map(|(k, v)| match env_value(v) {
            EnvValue::Secret(n) => Some((k, n)),
            EnvValue::Plain(_) => None,
        })
        .collect();
    let (var, first) = named.first()?;
    let set_by_workspace: Vec<&str> = ["command", "args", "env", "cwd"]
        .into_iter()
        .filter(|k| from_workspace(k))
        .collect();
    if !set_by_workspace.is_empty() {
        return Some(format!(
            "its environment variable {var} names the secret {first}, and its {} {} set by this \
             workspace's .hanzo/ settings: a server is given secrets only when everything that \
             decides what it runs is in the user's settings \
             ($XDG_CONFIG_HOME/hanzo/settings.json); move the entry there",
            set_by_workspace.join(", "),
            if set_by_workspace.len() == 1 {
                "is"
            } else {
                "are"
            },
        ));
    }
    for (var, name) in &named {
        if !is_env_name(name) {
            return Some(format!(
                "its environment variable {var} names the secret {name:?}, which is not an \
                 environment variable's name"
            ));
        }
        if crate::secrets::kept_in_own_env(name, "", &[]) {
            return Some(format!(
                "its environment variable {var} names the secret {name}, which is not a secret \
                 variable (hanzo-dev keeps it in its own environment); name a variable such as \
                 *_TOKEN or *_API_KEY, or list it in HANZO_SECRET_ENV"
            ));
        }
    }
    None
}

/// Why the secrets a `url` server's `headers` name cannot be sent, if they cannot: its `url` or
/// `headers` set by a workspace file (`from_workspace`), a name that is not an environment
/// variable's, or one the supervisor keeps in its own environment.
fn refused_header_secrets(
    headers: &BTreeMap<String, String>,
    from_workspace: &dyn Fn(&str) -> bool,
) -> Option<String> {
    let named: Vec<(&String, &str)> = headers
        .iter()
        .filter_map(|(h, v)| hanzo_policy::mcp_name::secret_reference(v).map(|n| (h, n)))
        .collect();
    let (header, first) = named.first()?;
    let set_by_workspace: Vec<&str> = ["url", "headers"]
        .into_iter()
        .filter(|k| from_workspace(k))
        .collect();
    if !set_by_workspace.is_empty() {
        let keys: Vec<String> = set_by_workspace.iter().map(|k| format!("`{k}`")).collect();
        return Some(format!(
            "its header {header} names the secret {first}, and this workspace's .hanzo/ settings \
             set its {}: a server is sent secrets only when its `url` and `headers` are both in \
             the user's settings ($XDG_CONFIG_HOME/hanzo/settings.json); move the entry there",
            keys.join(" and "),
        ));
    }
    for (header, name) in &named {
        if !is_env_name(name) {
            return Some(format!(
                "its header {header} names the secret {name:?}, which is not an environment \
                 variable's name"
            ));
        }
        if crate::secrets::kept_in_own_env(name, "", &[]) {
            return Some(format!(
                "its header {header} names the secret {name}, which is not a secret variable \
                 (hanzo-dev keeps it in its own environment); name a variable such as *_TOKEN or \
                 *_API_KEY, or list it in HANZO_SECRET_ENV"
            ));
        }
    }
    None
}

/// Whether `name` is an environment variable's name: `[A-Za-z_][A-Za-z0-9_]*`.
fn is_env_name(name: &str) -> bool {
    hanzo_policy::mcp_name::is_env_name(name)
}

/// The secrets the settings headers of `plan`'s `url` servers name: they reach the broker alone
/// (as every secret variable does), which sends their values.
pub fn header_secret_names(plan: &McpPlan) -> Vec<String> {
    let mut names: Vec<String> = plan
        .headers
        .iter()
        .flat_map(|(_, h)| h.iter())
        .filter_map(|(_, v)| match v {
            EnvValue::Secret(n) => Some(n.clone()),
            EnvValue::Plain(_) => None,
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Which secrets each stdio server of `config` may be given (its `EnvValue::Secret` names), for
/// the broker. Only the servers of the settings name any: an editor's env values are plain.
pub fn secret_grants(config: &McpConfig) -> Vec<McpSecretGrant> {
    config
        .servers
        .iter()
        .filter_map(|s| match &s.transport {
            McpTransport::Stdio { env, .. } => {
                let mut names: Vec<String> = env
                    .iter()
                    .filter_map(|(_, v)| match v {
                        EnvValue::Secret(n) => Some(n.clone()),
                        EnvValue::Plain(_) => None,
                    })
                    .collect();
                names.sort();
                names.dedup();
                (!names.is_empty()).then(|| McpSecretGrant {
                    server: s.name.clone(),
                    names,
                })
            }
            McpTransport::Http { .. } => None,
        })
        .collect()
}

/// The names of the secrets `loaded`'s servers may be given in `workspace` (in a stdio server's
/// environment, or in a `url` server's headers): handed to the broker alone (as every secret
/// variable is), and scrubbed from what the run records.
pub fn secret_names(
    loaded: &hanzo_policy::settings::LoadedSettings,
    workspace: &Path,
) -> Vec<String> {
    let Ok(plan) = plan_for(loaded, workspace) else {
        return Vec::new();
    };
    let mut names: Vec<String> = secret_grants(&plan.config)
        .into_iter()
        .flat_map(|g| g.names)
        .chain(header_secret_names(&plan))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Tell the broker which secrets each stdio server of `config` may be given (replacing any
/// earlier grant). Names only.
pub async fn allow_secrets(
    broker: &crate::worker::WorkerHandle<hanzo_ipc::roles::broker::BrokerProtocol>,
    config: &McpConfig,
) -> anyhow::Result<()> {
    match broker
        .call(hanzo_ipc::roles::broker::Request::AllowMcpSecrets(
            secret_grants(config),
        ))
        .await
    {
        Ok(hanzo_ipc::roles::broker::Response::Configured { .. }) => Ok(()),
        Ok(other) => anyhow::bail!("the broker answered AllowMcpSecrets with {other:?}"),
        Err(e) => anyhow::bail!("the broker refused the MCP servers' secrets: {e}"),
    }
}

/// Whether a stdio server of `config` names a secret (the broker must run for it).
pub fn has_secrets(config: &McpConfig) -> bool {
    !secret_grants(config).is_empty()
}

/// The remote servers of `config` the broker may reach for the mcp worker (the configured
/// `url` servers, only those); a 401 with no usable token is answered as `login` says.
pub fn remotes_of(config: &McpConfig, login: McpLogin) -> Vec<McpRemote> {
    config
        .servers
        .iter()
        .filter_map(|s| match &s.transport {
            McpTransport::Http { url, .. } => Some(McpRemote {
                server: s.name.clone(),
                url: url.clone(),
                client_id: None,
                scopes: Vec::new(),
                client_metadata_url: None,
                client_env: None,
                login,
                headers: Vec::new(),
                settings_headers: Vec::new(),
            }),
            McpTransport::Stdio { .. } => None,
        })
        .collect()
}

/// Whether `config` names a remote server (the broker must run for it).
pub fn has_remote(config: &McpConfig) -> bool {
    config
        .servers
        .iter()
        .any(|s| matches!(s.transport, McpTransport::Http { .. }))
}

/// Tell the broker which remote servers of `plan` the mcp worker may reach (replacing any
/// earlier set), with their settings headers.
pub async fn allow_remotes(
    sup: &crate::tree::Supervisor,
    plan: &McpPlan,
    login: McpLogin,
) -> anyhow::Result<()> {
    allow_remotes_with(sup, plan, login, Vec::new()).await
}

/// [`allow_remotes`], the editor's `headers` (by server name) added to its servers. They are
/// moved into the request and dropped (zeroized) once it is sent: the broker keeps them, this
/// process does not.
pub async fn allow_remotes_with(
    sup: &crate::tree::Supervisor,
    plan: &McpPlan,
    login: McpLogin,
    mut headers: Vec<(String, Vec<McpHeader>)>,
) -> anyhow::Result<()> {
    let mut remotes = remotes_of(&plan.config, login);
    for r in &mut remotes {
        if let Some(i) = headers.iter().position(|(n, _)| *n == r.server) {
            r.headers = headers.swap_remove(i).1;
        }
        if let Some((_, h)) = plan.headers.iter().find(|(n, _)| *n == r.server) {
            r.settings_headers = h.clone();
        }
    }
    match sup
        .broker
        .call(hanzo_ipc::roles::broker::Request::AllowMcpServers(remotes))
        .await
    {
        Ok(hanzo_ipc::roles::broker::Response::Configured { .. }) => Ok(()),
        Ok(other) => anyhow::bail!("the broker answered AllowMcpServers with {other:?}"),
        Err(e) => anyhow::bail!("the broker refused the remote MCP servers: {e}"),
    }
}

/// What the mcp worker is given to report a timeout of its own before the supervisor stops
/// waiting for it.
const WORKER_GRACE_MS: u64 = 10_000;

/// How long a run's MCP call may take before the worker is considered unresponsive: the longest
/// call timeout of `config`'s servers and a grace for the worker to report it.
pub fn run_call_limit(config: &McpConfig) -> std::time::Duration {
    let longest = config
        .servers
        .iter()
        .map(|s| s.call_timeout_ms)
        .max()
        .unwrap_or(CALL_TIMEOUT_MS);
    std::time::Duration::from_millis(longest.saturating_add(WORKER_GRACE_MS))
}

/// How long configuring `config`'s servers may take: the longest start-up timeout (servers
/// start side by side) and the grace.
pub fn configure_limit(config: &McpConfig) -> std::time::Duration {
    let longest = config
        .servers
        .iter()
        .map(|s| s.initialize_timeout_ms)
        .max()
        .unwrap_or(INITIALIZE_TIMEOUT_MS);
    std::time::Duration::from_millis(longest.saturating_add(WORKER_GRACE_MS))
}

/// MCP servers an editor passes over ACP, beside the configured ones: their configurations for
/// the mcp worker (remote ones by URL only), and for its remote ones the headers the broker is to
/// send. `Debug` shows header names, never values.
#[derive(Debug, Default)]
pub struct ExtraServers {
    /// Their configurations for the mcp worker (a remote one by its URL only, no headers).
    pub servers: Vec<McpServerConfig>,
    /// (server name, headers); the values may be credentials, for the broker only.
    pub headers: Vec<(String, Vec<McpHeader>)>,
}

/// Configure the mcp worker with the run's servers (from `loaded`) and `extra` servers beside the
/// configured ones (the servers an editor passes over ACP: the user's own choice; stdio ones
/// started in the same sandbox profile as configured stdio servers, remote ones reached through
/// the broker with the editor's headers). When at least one is ready, so that the run offers MCP
/// tools, the answer is how long a call may take ([`run_call_limit`]). Servers that fail or are
/// left out are reported on stderr with the reason; the run goes on without them.
/// An extra server whose name a configured one already has is left out, and so are its headers.
pub async fn start_for_run_with(
    sup: &crate::tree::Supervisor,
    loaded: &hanzo_policy::settings::LoadedSettings,
    workspace: &Path,
    extra: ExtraServers,
) -> Option<std::time::Duration> {
    let ExtraServers {
        servers: extra,
        headers: mut extra_headers,
    } = extra;
    let mut plan = match plan_for(loaded, workspace) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("warning: {e}; no MCP server is started");
            return None;
        }
    };
    // The grants are the settings' servers' alone, decided before any editor server joins.
    let grants_of = plan.config.clone();
    for server in extra {
        if plan.config.servers.iter().any(|s| s.name == server.name) {
            eprintln!(
                "warning: MCP server {:?} from the editor skipped: the settings define a server \
                 of that name",
                server.name
            );
            // Never the settings server's: that name is theirs.
            extra_headers.retain(|(n, _)| *n != server.name);
            continue;
        }
        plan.config.servers.push(server);
    }
    for (name, _, state, reason) in &plan.not_started {
        eprintln!("warning: MCP server {name:?} {state}: {reason}");
    }
    if plan.config.servers.is_empty() {
        return None;
    }
    let (sources, warnings) = assign_egress(&mut plan, &loaded.merged.config.sandbox.allow_list());
    for w in warnings {
        eprintln!("warning: {}", crate::term::sanitize_line_for_terminal(&w));
    }
    if !sources.is_empty() {
        if let Err(e) = crate::egress::configure_mcp(&sup.mcp, &sup.broker, &sources).await {
            // Fail closed: the servers that asked for network are not started, with the reason.
            eprintln!(
                "warning: network for MCP servers could not be set up ({}); the servers that \
                 ask for it are not started",
                crate::term::sanitize_line_for_terminal(&e.to_string())
            );
            for s in &mut plan.config.servers {
                if let McpTransport::Stdio { profile, .. } = &mut s.transport {
                    profile.egress_address = None;
                }
            }
        }
    }
    let keeper_config = plan.config.clone();
    if has_remote(&plan.config) {
        let headers = std::mem::take(&mut extra_headers);
        if let Err(e) = allow_remotes_with(sup, &plan, McpLogin::Never, headers).await {
            eprintln!(
                "warning: {}; remote MCP servers will be refused",
                crate::term::sanitize_line_for_terminal(&e.to_string())
            );
        }
    }
    // Handed over (or there was no remote server to hand them to): none is kept here.
    drop(extra_headers);
    if has_secrets(&grants_of) {
        if let Err(e) = allow_secrets(&sup.broker, &grants_of).await {
            // The servers that name secrets then fail to start, each with the broker's refusal.
            eprintln!(
                "warning: {}; MCP servers that name secrets will not start",
                crate::term::sanitize_line_for_terminal(&e.to_string())
            );
        }
    }
    let limit = run_call_limit(&plan.config);
    let within = configure_limit(&plan.config);
    let request = hanzo_ipc::roles::mcp::Request::Configure(plan.config);
    let generation = sup.mcp.info().map(|i| i.generation).unwrap_or(0);
    match sup.mcp.call_within(request, within).await {
        Ok(hanzo_ipc::roles::mcp::Response::Servers(statuses)) => {
            // Calls wait for a restarted worker to be configured again (`keep_configured`).
            sup.mcp.mark_configured(generation);
            tokio::spawn(keep_configured(
                sup.mcp.clone(),
                sup.broker.clone(),
                keeper_config,
                grants_of,
                sources,
                generation,
            ));
            let mut ready = false;
            for s in statuses {
                match s.state {
                    hanzo_ipc::roles::mcp::McpServerState::Ready => ready = true,
                    hanzo_ipc::roles::mcp::McpServerState::Failed { reason } => eprintln!(
                        "warning: MCP server {:?} did not start: {}",
                        s.name,
                        crate::term::sanitize_line_for_terminal(&reason)
                    ),
                    _ => {}
                }
            }
            ready.then_some(limit)
        }
        Ok(other) => {
            eprintln!("warning: the mcp worker answered Configure with {other:?}");
            None
        }
        Err(e) => {
            eprintln!("warning: the MCP servers could not be configured: {e}");
            None
        }
    }
}

/// Configure every later mcp worker process (a crash restarts it, and a new process knows no
/// server) as the first was: the secrets its servers may be given (a broker that restarted with
/// it knows none), its egress channel (a new forwarder's pid) when servers have network, then
/// the servers. Ends when the mcp role fails or the tree stops.
async fn keep_configured(
    mcp: crate::worker::WorkerHandle<hanzo_ipc::roles::mcp::McpProtocol>,
    broker: crate::worker::WorkerHandle<hanzo_ipc::roles::broker::BrokerProtocol>,
    mut config: McpConfig,
    grants_of: McpConfig,
    sources: Vec<EgressSource>,
    mut generation: u64,
) {
    while let Some(info) = mcp.next_ready(generation).await {
        generation = info.generation;
        if has_secrets(&grants_of) {
            if let Err(e) = allow_secrets(&broker, &grants_of).await {
                tracing::error!("MCP server secrets not granted again after a restart: {e}");
            }
        }
        if !sources.is_empty() {
            if let Err(e) = crate::egress::configure_mcp(&mcp, &broker, &sources).await {
                tracing::error!("MCP egress not reconfigured after a restart: {e}");
                for s in &mut config.servers {
                    if let McpTransport::Stdio { profile, .. } = &mut s.transport {
                        profile.egress_address = None;
                    }
                }
            }
        }
        let within = configure_limit(&config);
        let request = hanzo_ipc::roles::mcp::Request::Configure(config.clone());
        match mcp.call_within(request, within).await {
            Ok(_) => {
                mcp.mark_configured(generation);
                tracing::info!(generation, "mcp worker reconfigured after a restart")
            }
            Err(e) => tracing::error!("mcp worker not reconfigured after a restart: {e}"),
        }
    }
}

/// `${secret:NAME}` names a secret the broker resolves at spawn; anything else is plain text.
pub fn env_value(v: &str) -> EnvValue {
    match v
        .strip_prefix("${secret:")
        .and_then(|rest| rest.strip_suffix('}'))
    {
        Some(name) if !name.is_empty() => EnvValue::Secret(name.to_string()),
        _ => EnvValue::Plain(v.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hanzo_policy::settings::McpServer;

    fn config(servers: &[(&str, McpServer)]) -> Config {
        let mut c = hanzo_policy::settings::merge(
            &[],
            &BTreeMap::new(),
            &hanzo_policy::settings::CliOverrides::default(),
            true,
        )
        .expect("defaults merge")
        .config;
        c.mcp_servers = servers
            .iter()
            .map(|(n, s)| (n.to_string(), s.clone()))
            .collect();
        c
    }

    /// Where each `mcp_servers.<key>` came from.
    fn sources_of(keys: &[(&str, Source)]) -> BTreeMap<String, Source> {
        keys.iter()
            .map(|(key, src)| (format!("mcp_servers.{key}"), *src))
            .collect()
    }

    /// The servers a plan starts, by name.
    fn started(plan: &McpPlan) -> Vec<&str> {
        plan.config
            .servers
            .iter()
            .map(|s| s.name.as_str())
            .collect()
    }

    fn stdio(cmd: &str) -> McpServer {
        McpServer {
            command: Some(cmd.into()),
            ..Default::default()
        }
    }

    #[test]
    fn servers_become_worker_config_and_left_out_ones_say_why() {
        let url = McpServer {
            url: Some("https://mcp.example/mcp".into()),
            ..Default::default()
        };
        let off = McpServer {
            disabled: true,
            ..stdio("x")
        };
        let gated = McpServer::default();
        let c = config(&[
            ("a", stdio("node")),
            ("web", url),
            ("off", off),
            ("p", gated),
        ]);
        let sources = sources_of(&[("web.url", Source::Project)]);
        let plan = mcp_plan(&c, &sources, false, Path::new("/w")).unwrap();
        assert_eq!(started(&plan), ["a"]);
        let McpTransport::Stdio { profile, .. } = &plan.config.servers[0].transport else {
            panic!("stdio")
        };
        assert_eq!(profile.filesystem, McpFilesystem::WorkspaceRo);
        assert!(!profile.network);
        let left: Vec<(&str, &str)> = plan
            .not_started
            .iter()
            .map(|(n, _, s, _)| (n.as_str(), s.as_str()))
            .collect();
        assert_eq!(
            left,
            [("off", "disabled"), ("p", "skipped"), ("web", "skipped")]
        );
        assert!(plan.not_started[1].3.contains("hanzo-dev trust"));
        assert!(plan.not_started[2].3.contains("not trusted"));
        // Trusted, the workspace's url is used.
        let plan = mcp_plan(&c, &sources, true, Path::new("/w")).unwrap();
        assert_eq!(plan.config.servers.len(), 2);
    }

    #[test]
    fn read_paths_and_result_caps_reach_the_worker_config() {
        let docs = McpServer {
            read_paths: vec!["/srv/docs".into()],
            max_result_bytes: Some(4096),
            ..stdio("d")
        };
        let c = config(&[("docs", docs), ("plain", stdio("p"))]);
        let plan = mcp_plan(&c, &BTreeMap::new(), true, Path::new("/w")).unwrap();
        let of = |n: &str| plan.config.servers.iter().find(|s| s.name == n).unwrap();
        assert_eq!(of("docs").max_result_bytes, Some(4096));
        assert_eq!(of("plain").max_result_bytes, None);
        let reads = |n: &str| match &of(n).transport {
            McpTransport::Stdio { profile, .. } => profile.extra_read.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(reads("docs"), ["/srv/docs"]);
        assert!(reads("plain").is_empty());
        assert_eq!(plan.extra_reads(), [std::path::PathBuf::from("/srv/docs")]);
        assert_eq!(plan.config.max_result_bytes, MAX_RESULT_BYTES);
    }

    #[test]
    fn per_server_timeouts_reach_the_worker_config_and_bound_the_supervisor_s_waits() {
        let slow = McpServer {
            timeout_ms: Some(900_000),
            startup_timeout_ms: Some(45_000),
            ..stdio("slow")
        };
        let quick = McpServer {
            timeout_ms: Some(1_500),
            ..stdio("quick")
        };
        let c = config(&[("quick", quick), ("slow", slow), ("plain", stdio("p"))]);
        let plan = mcp_plan(&c, &BTreeMap::new(), true, Path::new("/w")).unwrap();
        let limits: Vec<(&str, u64, u64)> = plan
            .config
            .servers
            .iter()
            .map(|s| (s.name.as_str(), s.call_timeout_ms, s.initialize_timeout_ms))
            .collect();
        assert_eq!(
            limits,
            [
                ("plain", CALL_TIMEOUT_MS, INITIALIZE_TIMEOUT_MS),
                ("quick", 1_500, INITIALIZE_TIMEOUT_MS),
                ("slow", 900_000, 45_000),
            ]
        );
        // The supervisor waits for the slowest server, plus the worker's time to report.
        assert_eq!(
            run_call_limit(&plan.config),
            std::time::Duration::from_millis(900_000 + WORKER_GRACE_MS)
        );
        assert_eq!(
            configure_limit(&plan.config),
            std::time::Duration::from_millis(45_000 + WORKER_GRACE_MS)
        );
        let none = McpConfig {
            servers: vec![],
            ..plan.config
        };
        assert_eq!(
            run_call_limit(&none),
            std::time::Duration::from_millis(CALL_TIMEOUT_MS + WORKER_GRACE_MS)
        );
    }

    #[test]
    fn bad_server_names_and_both_transports_are_settings_errors() {
        for bad in ["a__b", "with space", ""] {
            let e = mcp_plan(
                &config(&[(bad, stdio("x"))]),
                &BTreeMap::new(),
                true,
                Path::new("/w"),
            )
            .unwrap_err();
            assert_eq!(e.server, bad);
        }
        let both = McpServer {
            url: Some("https://x".into()),
            ..stdio("x")
        };
        let e = mcp_plan(
            &config(&[("b", both)]),
            &BTreeMap::new(),
            true,
            Path::new("/w"),
        )
        .unwrap_err();
        assert!(e.message.contains("not both"), "{e}");
    }

    #[test]
    fn secrets_are_granted_only_to_servers_launched_wholly_from_the_user_settings() {
        let with = |env: &[(&str, &str)]| McpServer {
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..stdio("node")
        };
        let c = config(&[
            (
                "gh",
                with(&[("GITHUB_TOKEN", "${secret:GH_TOKEN}"), ("LANG", "C")]),
            ),
            ("proj", with(&[("T", "${secret:ANTHROPIC_API_KEY}")])),
            ("swapped", with(&[("T", "${secret:GH_TOKEN}")])),
            ("kept", with(&[("T", "${secret:HANZO_MODEL}")])),
            ("odd", with(&[("T", "${secret:A-B}")])),
            ("plain", with(&[("T", "value")])),
        ]);
        let sources = sources_of(&[
            ("gh.env", Source::User),
            ("gh.command", Source::User),
            ("proj.env", Source::Project),
            ("swapped.env", Source::User),
            ("swapped.command", Source::Local),
        ]);
        let plan = mcp_plan(&c, &sources, true, Path::new("/w")).unwrap();
        assert_eq!(started(&plan), ["gh", "plain"]);
        assert_eq!(
            secret_grants(&plan.config),
            [McpSecretGrant {
                server: "gh".into(),
                names: vec!["GH_TOKEN".into()],
            }]
        );
        assert!(has_secrets(&plan.config));
        let why = |name: &str| {
            plan.not_started
                .iter()
                .find(|r| r.0 == name)
                .map(|r| (r.2.clone(), r.3.clone()))
                .unwrap_or_else(|| panic!("{name} not listed"))
        };
        let (state, proj) = why("proj");
        assert_eq!(state, "skipped");
        assert!(
            proj.contains("T names the secret ANTHROPIC_API_KEY") && proj.contains("its env is"),
            "{proj}"
        );
        assert!(
            why("swapped").1.contains("its command is set by"),
            "{}",
            why("swapped").1
        );
        assert!(
            why("kept").1.contains("not a secret variable"),
            "{}",
            why("kept").1
        );
        assert!(
            why("odd").1.contains("not an environment variable"),
            "{}",
            why("odd").1
        );
        // Written as sentences: no line-continuation gap.
        for r in &plan.not_started {
            assert!(!r.3.contains("  "), "{:?}", r.3);
        }
    }

    #[test]
    fn url_headers_go_to_the_plan_for_the_broker_and_secrets_only_from_the_user_file() {
        let web = |headers: &[(&str, &str)]| McpServer {
            url: Some("https://mcp.example/mcp".into()),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        };
        let c = config(&[
            (
                "web",
                web(&[("Authorization", "${secret:WEB_TOKEN}"), ("X-Team", "core")]),
            ),
            ("swapped", web(&[("Authorization", "${secret:WEB_TOKEN}")])),
            ("proj", web(&[("Authorization", "${secret:WEB_TOKEN}")])),
            ("kept", web(&[("X-Model", "${secret:HANZO_MODEL}")])),
            ("plain", web(&[("X-Team", "core")])),
        ]);
        let sources = sources_of(&[
            ("web.url", Source::User),
            ("web.headers", Source::User),
            ("swapped.url", Source::Project),
            ("swapped.headers", Source::User),
            ("proj.url", Source::User),
            ("proj.headers", Source::Local),
            ("plain.headers", Source::Project),
        ]);
        let plan = mcp_plan(&c, &sources, true, Path::new("/w")).unwrap();
        assert_eq!(started(&plan), ["plain", "web"]);
        // The mcp worker's configuration carries no header; the plan keeps them for the broker.
        assert!(!format!("{:?}", plan.config).contains("X-Team"));
        let of = |n: &str| {
            plan.headers
                .iter()
                .find(|(s, _)| s == n)
                .map(|(_, h)| h.clone())
        };
        assert_eq!(
            of("web").unwrap(),
            [
                (
                    "Authorization".to_string(),
                    EnvValue::Secret("WEB_TOKEN".into())
                ),
                ("X-Team".to_string(), EnvValue::Plain("core".into())),
            ]
        );
        assert_eq!(
            of("plain").unwrap(),
            [("X-Team".to_string(), EnvValue::Plain("core".into()))]
        );
        assert_eq!(header_secret_names(&plan), ["WEB_TOKEN"]);
        // Not the stdio servers' grants: the mcp worker can never ask for a header's secret.
        assert!(secret_grants(&plan.config).is_empty());
        let why = |name: &str| {
            plan.not_started
                .iter()
                .find(|r| r.0 == name)
                .map(|r| r.3.clone())
                .unwrap_or_else(|| panic!("{name} not listed"))
        };
        assert!(
            why("swapped").contains("settings set its `url`"),
            "{}",
            why("swapped")
        );
        assert!(
            why("proj").contains("settings set its `headers`"),
            "{}",
            why("proj")
        );
        assert!(
            why("kept").contains("not a secret variable"),
            "{}",
            why("kept")
        );
        let remotes = remotes_of(&plan.config, McpLogin::Never);
        assert!(remotes
            .iter()
            .all(|r| r.settings_headers.is_empty() && r.headers.is_empty()));
    }

    #[test]
    fn secret_env_values_are_named_not_inlined() {
        assert_eq!(
            env_value("${secret:GITHUB_TOKEN}"),
            EnvValue::Secret("GITHUB_TOKEN".into())
        );
        assert_eq!(
            env_value("${secret:}"),
            EnvValue::Plain("${secret:}".into())
        );
        assert_eq!(env_value("plain"), EnvValue::Plain("plain".into()));
    }
}
