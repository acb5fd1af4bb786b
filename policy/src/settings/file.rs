//! One settings file: its types (which also generate the JSON Schema), parsing from text with
//! file:line:column errors and key paths, unknown-key warnings, and semantic validation.

use super::SettingsError;
use crate::hooks::HookConfig;
pub use crate::isolation::IsolationMode;
use crate::permission::{PermissionMode, PermissionRule, Scope, ToolPattern};
use crate::suggest::did_you_mean;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

pub use crate::secret::Secret;

/// An opaque secret object (OAuth credentials), redacted like [`Secret`].
#[derive(Clone, PartialEq, Deserialize)]
#[serde(transparent)]
pub struct SecretObject(pub serde_json::Map<String, Value>);

impl fmt::Debug for SecretObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretObject(<redacted>)")
    }
}

impl JsonSchema for SecretObject {
    fn schema_name() -> Cow<'static, str> {
        "SecretObject".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        schemars::json_schema!({"type": "object"})
    }
}

/// How the interactive session's input line takes keys (`input_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum InputMode {
    /// Plain line editing.
    #[default]
    Default,
    /// Vi-style modal editing.
    Vim,
    /// Emacs-style key bindings.
    Emacs,
}

impl InputMode {
    /// The mode as settings spell it (`default`, `vim`, `emacs`).
    pub fn as_str(self) -> &'static str {
        match self {
            InputMode::Default => "default",
            InputMode::Vim => "vim",
            InputMode::Emacs => "emacs",
        }
    }
    /// The mode spelled `s` in settings or `HANZO_INPUT_MODE`, if any.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "default" => Some(InputMode::Default),
            "vim" => Some(InputMode::Vim),
            "emacs" => Some(InputMode::Emacs),
            _ => None,
        }
    }
}

/// How much of the workspace an MCP stdio server reaches (`mcp_servers.*.filesystem`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum McpFilesystemSetting {
    /// Neither read nor write (the system directories and its run directory only).
    None,
    /// Read the workspace (the default).
    #[default]
    WorkspaceRo,
    /// Read and write the workspace, except what the sandbox protects there (the git
    /// directory, the hooks path, `.hanzo/`).
    WorkspaceRw,
}

impl McpFilesystemSetting {
    /// The name as written in settings.
    pub fn as_str(self) -> &'static str {
        match self {
            McpFilesystemSetting::None => "none",
            McpFilesystemSetting::WorkspaceRo => "workspace-ro",
            McpFilesystemSetting::WorkspaceRw => "workspace-rw",
        }
    }
}

/// One MCP server entry. A later scope overrides exactly the fields it sets.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct McpServerEntry {
    /// Program of a stdio server (run through the sandbox, never a shell).
    pub command: Option<String>,
    /// Arguments of the stdio server's program.
    pub args: Option<Vec<String>>,
    /// Environment for the server. A value is passed as written, or names a secret the broker
    /// resolves at spawn: `"${secret:NAME}"`, or the same as an object, `{"secret": "NAME"}`.
    #[serde(default, deserialize_with = "values_or_secret_objects")]
    #[schemars(schema_with = "values_or_secret_objects_schema")]
    pub env: Option<BTreeMap<String, String>>,
    /// Working directory of a stdio server (default: the workspace; with no filesystem, the
    /// server's private home).
    pub cwd: Option<String>,
    /// URL of a streamable-HTTP server.
    pub url: Option<String>,
    /// Headers the broker sends with every request to this `url` server. A value is sent as
    /// written, or names a secret, `"${secret:NAME}"` (or `{"secret": "NAME"}`): the broker
    /// sends the value of its environment variable `NAME`, which no other process sees. A secret is given only when the
    /// entry's `url` and `headers` both come from the user's settings file. Names are HTTP
    /// tokens; the connection's and the MCP transport's own (`Host`, `Content-Length`,
    /// `Mcp-Session-Id`, …) are refused.
    #[serde(default, deserialize_with = "values_or_secret_objects")]
    #[schemars(schema_with = "values_or_secret_objects_schema")]
    pub headers: Option<BTreeMap<String, String>>,
    /// `true` turns the server off (e.g. a project server, from the local file).
    pub disabled: Option<bool>,
    /// How long one `tools/call` may take, in milliseconds (1 ms to 1 hour; default 120 000).
    /// A call that takes longer fails with a timeout and the server is sent
    /// `notifications/cancelled`.
    pub timeout_ms: Option<u64>,
    /// How long the server may take from start to its answer to `initialize`, in milliseconds
    /// (1 ms to 10 minutes; default 30 000).
    pub startup_timeout_ms: Option<u64>,
    /// Hosts this stdio server may reach through the broker's egress proxy (`host`, `*.host`,
    /// `host:port`, as `sandbox.network_allow`), and only those the run's `sandbox.network_allow`
    /// also allows (a workspace file cannot grant a server network). Unset or empty: no network.
    pub network_allow: Option<Vec<String>>,
    /// What of the workspace this stdio server reaches: `none`, `workspace-ro` (the default) or
    /// `workspace-rw` (the git directory, the hooks path and `.hanzo/` stay read-only). It
    /// widens what a program may do, so a workspace file sets it only once trusted.
    pub filesystem: Option<McpFilesystemSetting>,
    /// Directories (or files) outside the workspace this stdio server may also read: absolute,
    /// or `~/`-relative. Never hanzo's own configuration or data directories. Like
    /// `filesystem`, it widens what a program may do, so a workspace file sets it only once
    /// trusted.
    pub read_paths: Option<Vec<String>>,
    /// The largest `tools/call` result of this server passed on, in bytes (1 to 8 MiB; default
    /// 262 144); a longer result is cut and the cut is marked.
    pub max_result_bytes: Option<u64>,
}

/// The longest `mcp_servers.*.timeout_ms`: one hour.
pub const MAX_MCP_CALL_TIMEOUT_MS: u64 = 60 * 60 * 1000;
/// The longest `mcp_servers.*.startup_timeout_ms`: ten minutes.
pub const MAX_MCP_STARTUP_TIMEOUT_MS: u64 = 10 * 60 * 1000;
/// The largest `mcp_servers.*.max_result_bytes`: 8 MiB, the largest message the mcp worker
/// accepts from a server at all.
pub const MAX_MCP_RESULT_BYTES: u64 = 8 << 20;

/// A value of `env` or `headers`: a string, or `{"secret": "NAME"}`, read as the string
/// `"${secret:NAME}"` (one form downstream). `NAME` must be an environment variable's name.
struct ValueOrSecret(String);

impl<'de> Deserialize<'de> for ValueOrSecret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ValueOrSecret;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(r#"a string, or {"secret": "NAME"}"#)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ValueOrSecret, E> {
                Ok(ValueOrSecret(v.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ValueOrSecret, A::Error> {
                let shape = || de::Error::custom(r#"expected {"secret": "NAME"}, one key"#);
                let mut name: Option<String> = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key != "secret" || name.is_some() {
                        return Err(shape());
                    }
                    name = Some(map.next_value()?);
                }
                let name = name.ok_or_else(shape)?;
                if !crate::mcp_name::is_env_name(&name) {
                    return Err(de::Error::custom(format!(
                        "the secret {name:?} is not an environment variable's name \
                         ([A-Za-z_][A-Za-z0-9_]*)"
                    )));
                }
                Ok(ValueOrSecret(format!("${{secret:{name}}}")))
            }
        }
        d.deserialize_any(V)
    }
}

fn values_or_secret_objects<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    let values: Option<BTreeMap<String, ValueOrSecret>> = Option::deserialize(d)?;
    Ok(values.map(|m| m.into_iter().map(|(k, v)| (k, v.0)).collect()))
}

fn values_or_secret_objects_schema(_: &mut SchemaGenerator) -> Schema {
    schemars::json_schema!({
        "type": ["object", "null"],
        "additionalProperties": {
            "anyOf": [
                {"type": "string"},
                {
                    "type": "object",
                    "properties": {"secret": {"type": "string"}},
                    "required": ["secret"],
                    "additionalProperties": false
                }
            ]
        }
    })
}

impl McpServerEntry {
    /// The fields that decide what program runs: they need workspace trust in project/local files.
    pub fn sets_launch(&self) -> bool {
        self.command.is_some()
            || self.args.is_some()
            || self.env.is_some()
            || self.cwd.is_some()
            || self.filesystem.is_some()
            || self.read_paths.is_some()
    }
}

/// One entry of the `lsp_servers` settings key. An entry named like a built-in server
/// (`pyright`, `typescript`, `rust-analyzer`) overrides exactly the fields it sets; any other
/// name adds a server, which needs `command` and `files`. Added servers are consulted before the
/// built-in ones.
///
/// `command`, `args` and the options decide what program runs: in project and local settings
/// they take effect only in a trusted workspace (`LspServerEntry::sets_launch`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct LspServerEntry {
    /// The program: a name looked up on the search path, or a path (relative to the workspace).
    pub command: Option<String>,
    /// Arguments of the program.
    pub args: Option<Vec<String>>,
    /// Globs, relative to the workspace, of the files this server handles (`["**/*.py"]`).
    pub files: Option<Vec<String>>,
    /// The language id to send for every file (by default it follows the extension).
    pub language_id: Option<String>,
    /// The server applies only if one of these exists at the workspace root (`["Cargo.toml"]`).
    pub root_markers: Option<Vec<String>>,
    /// Sent as `initializationOptions` in `initialize`.
    pub initialization_options: Option<Value>,
    /// The answers to the server's `workspace/configuration` requests, by section.
    pub settings: Option<Value>,
    /// What to tell the user when the program is not installed.
    pub install_hint: Option<String>,
    /// `true` turns the server off.
    pub disabled: Option<bool>,
}

impl LspServerEntry {
    /// The fields that decide what runs: they need workspace trust in project/local files.
    pub fn sets_launch(&self) -> bool {
        self.command.is_some() || self.args.is_some() || self.initialization_options.is_some()
    }
}

/// The `sandbox` settings key: how commands are isolated and what they may reach beyond the
/// workspace.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct SandboxEntry {
    /// `auto`, `strict` or another isolation mode (what the user asks for; the tier applied is
    /// recorded per run).
    pub isolation: Option<IsolationMode>,
    /// Paths outside the workspace the tools may read.
    pub extra_read_paths: Option<Vec<String>>,
    /// Paths outside the workspace the tools may write.
    pub extra_write_paths: Option<Vec<String>>,
    /// Hosts a sandboxed command may reach through the broker's egress proxy (`host`, `*.host`,
    /// `host:port`, IP literals); a workspace file may only narrow what the user file allows.
    pub network_allow: Option<Vec<String>>,
}

/// A permission value: a bare mode, or `{ "mode": …, "reason": … }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleSpec {
    /// What happens to a matching call.
    pub mode: PermissionMode,
    /// Why, shown when the rule decides.
    pub reason: Option<String>,
}

impl<'de> Deserialize<'de> for RuleSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RuleSpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a mode (\"allow\", \"deny\", \"prompt\") or {\"mode\", \"reason\"}")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<RuleSpec, E> {
                let mode = s.parse::<PermissionMode>().map_err(E::custom)?;
                Ok(RuleSpec { mode, reason: None })
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RuleSpec, A::Error> {
                let mut mode: Option<PermissionMode> = None;
                let mut reason: Option<String> = None;
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "mode" => {
                            let s: String = map.next_value()?;
                            mode = Some(s.parse().map_err(de::Error::custom)?);
                        }
                        "reason" => reason = map.next_value()?,
                        // Unknown keys are warnings, reported from the value walk.
                        _ => {
                            map.next_value::<de::IgnoredAny>()?;
                        }
                    }
                }
                let mode = mode.ok_or_else(|| de::Error::missing_field("mode"))?;
                Ok(RuleSpec { mode, reason })
            }
        }
        d.deserialize_any(V)
    }
}

/// `permissions`: pattern → mode, kept in file order (order decides within a scope).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PermissionsMap(pub Vec<(String, RuleSpec)>);

impl PermissionsMap {
    /// The entries as permission rules, in file order.
    pub fn to_rules(&self) -> Vec<PermissionRule> {
        self.0
            .iter()
            .map(|(p, s)| PermissionRule {
                tool_pattern: p.clone(),
                mode: s.mode,
                reason: s.reason.clone(),
            })
            .collect()
    }
}

impl Serialize for PermissionsMap {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for PermissionsMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = PermissionsMap;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object mapping tool patterns to modes")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PermissionsMap, A::Error> {
                let mut out: Vec<(String, RuleSpec)> = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    let spec: RuleSpec = map.next_value()?;
                    if out.iter().any(|(k, _)| *k == key) {
                        return Err(de::Error::custom(format!(
                            "pattern {key:?} appears twice; only one mode can apply"
                        )));
                    }
                    out.push((key, spec));
                }
                Ok(PermissionsMap(out))
            }
        }
        d.deserialize_map(V)
    }
}

impl JsonSchema for PermissionsMap {
    fn schema_name() -> Cow<'static, str> {
        "Permissions".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        schemars::json_schema!({
            "description": "Tool pattern → mode, first match wins within this file. Patterns are globs over tool names (`*`, `?`, `[…]`, `[!…]`, `\\` escapes); `name(arg-glob)` also matches the primary argument (bash: the command, split at ; && || | & and newlines; file tools: the path relative to the workspace).",
            "type": "object",
            "additionalProperties": {
                "oneOf": [
                    {"type": "string", "enum": ["allow", "deny", "prompt"]},
                    {
                        "type": "object",
                        "properties": {
                            "mode": {"type": "string", "enum": ["allow", "deny", "prompt"]},
                            "reason": {"type": "string"}
                        },
                        "required": ["mode"]
                    }
                ]
            }
        })
    }
}

/// A provider `hanzo-dev login --provider NAME` logs in to with OAuth. Honoured from the user
/// settings file only: a project must not redirect a login. Endpoints are `https://`, or
/// `http://` to a loopback address; with `issuer`, whatever is not given comes from the server's
/// metadata (RFC 8414, then OpenID discovery).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct OAuthProviderEntry {
    /// The authorization server's issuer URL.
    pub issuer: Option<String>,
    /// Where the user authorizes the client (browser flow).
    pub authorization_endpoint: Option<String>,
    /// Where codes and refresh tokens are exchanged for tokens.
    pub token_endpoint: Option<String>,
    /// Where a device-grant login starts (RFC 8628).
    pub device_authorization_endpoint: Option<String>,
    /// Dynamic client registration (RFC 7591), used when `client_id` is not set.
    pub registration_endpoint: Option<String>,
    /// The OAuth client id (a public client: no secret).
    pub client_id: Option<String>,
    /// Scopes to ask for.
    pub scopes: Option<Vec<String>>,
    /// RFC 8707 resource indicator for the tokens.
    pub resource: Option<String>,
    /// Seconds between device-grant polls when the server names no interval (default 5).
    pub device_poll_interval_secs: Option<u32>,
}

/// `settings.json` as written; every key is optional.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, JsonSchema)]
#[schemars(title = "hanzo-dev settings")]
pub struct SettingsFile {
    /// Editors: the schema this file follows.
    #[serde(rename = "$schema")]
    pub schema: Option<String>,
    /// Model identifier.
    pub model: Option<String>,
    /// API key; honoured only in the user file (or `HANZO_API_KEY`).
    pub api_key: Option<Secret>,
    /// OAuth credentials; honoured only in the user file.
    pub oauth_credentials: Option<SecretObject>,
    /// MCP servers by name; merged across files field by field. A name must follow the
    /// `mcp__<server>__<tool>` contract (letters, digits, `-`, single `_`): another name is an
    /// error naming the file, line and column.
    #[serde(default, deserialize_with = "mcp_servers_by_valid_name")]
    pub mcp_servers: Option<BTreeMap<String, McpServerEntry>>,
    /// Permission rules: tool pattern → `allow`, `deny` or `prompt` (or `{mode, reason}`), first
    /// match wins within the file.
    pub permissions: Option<PermissionsMap>,
    /// Pre/post tool-use hooks.
    pub hooks: Option<Vec<HookConfig>>,
    /// Extra instructions appended to the system prompt.
    pub custom_instructions: Option<String>,
    /// How the interactive session's input line takes keys: `default`, `vim` or `emacs`.
    pub input_mode: Option<InputMode>,
    /// How commands are sandboxed and what they may reach.
    pub sandbox: Option<SandboxEntry>,
    /// OAuth providers for `hanzo-dev login`, by name; honoured only in the user file.
    pub oauth_providers: Option<BTreeMap<String, OAuthProviderEntry>>,
    /// Language servers by name, added to or overriding the built-in ones (`pyright`,
    /// `typescript`, `rust-analyzer`): `command`, `args`, `files` (globs), `language_id`,
    /// `root_markers`, `initialization_options`, `settings`, `install_hint`, `disabled`. The
    /// entry's shape is `hanzo_lsp::LspServerEntry`, checked by the lsp worker; a later file
    /// replaces a whole entry. From project and local files only when the workspace is trusted
    /// (an entry decides what program runs).
    pub lsp_servers: Option<BTreeMap<String, LspServerEntry>>,
}

/// `mcp_servers`, refusing a server name outside the contract while the parser still knows where
/// the name is (so the error carries its line and column, and the key path).
fn mcp_servers_by_valid_name<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, McpServerEntry>>, D::Error> {
    struct Servers;
    impl<'de> Visitor<'de> for Servers {
        type Value = Option<BTreeMap<String, McpServerEntry>>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an object mapping MCP server names to entries")
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(name) = map.next_key::<String>()? {
                crate::mcp_name::validate_server_name(&name).map_err(de::Error::custom)?;
                let entry: McpServerEntry = map.next_value()?;
                out.insert(name, entry);
            }
            Ok(Some(out))
        }
    }
    d.deserialize_option(Servers)
}

pub(crate) const TOP_KEYS: &[&str] = &[
    "$schema",
    "model",
    "api_key",
    "oauth_credentials",
    "mcp_servers",
    "permissions",
    "hooks",
    "custom_instructions",
    "input_mode",
    "sandbox",
    "oauth_providers",
    "lsp_servers",
];
pub(crate) const OAUTH_PROVIDER_KEYS: &[&str] = &[
    "issuer",
    "authorization_endpoint",
    "token_endpoint",
    "device_authorization_endpoint",
    "registration_endpoint",
    "client_id",
    "scopes",
    "resource",
    "device_poll_interval_secs",
];
pub(crate) const MCP_KEYS: &[&str] = &[
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "disabled",
    "timeout_ms",
    "startup_timeout_ms",
    "network_allow",
    "filesystem",
    "read_paths",
    "max_result_bytes",
];
pub(crate) const HOOK_KEYS: &[&str] = &["event", "command", "tool_pattern", "timeout_ms"];
pub(crate) const SANDBOX_KEYS: &[&str] = &[
    "isolation",
    "extra_read_paths",
    "extra_write_paths",
    "network_allow",
];
pub(crate) const RULE_KEYS: &[&str] = &["mode", "reason"];

/// A problem that does not stop loading. `file` names the settings file (or variable).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Warning {
    /// The settings file (or environment variable) the warning is about.
    pub file: String,
    /// What was ignored or looks wrong, and why.
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file, self.message)
    }
}

/// Parses one file's text. `file` is how errors and warnings name it.
pub fn parse_settings(
    scope: Scope,
    file: &str,
    text: &str,
) -> Result<(SettingsFile, Vec<Warning>), SettingsError> {
    let value: Value = serde_json::from_str(text).map_err(|e| SettingsError::Syntax {
        file: file.to_string(),
        line: e.line(),
        column: e.column(),
        message: strip_position(&e.to_string()),
    })?;
    let mut de = serde_json::Deserializer::from_str(text);
    let mut settings: SettingsFile = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let key_path = match e.path().to_string() {
            p if p == "." => "(top level)".to_string(),
            p => p,
        };
        let inner = e.into_inner();
        SettingsError::Type {
            file: file.to_string(),
            line: inner.line(),
            column: inner.column(),
            key_path,
            message: strip_position(&inner.to_string()),
        }
    })?;
    let mut warnings = Vec::new();
    let mut warn = |message: String| {
        warnings.push(Warning {
            file: file.to_string(),
            message,
        })
    };
    unknown_keys(&value, &mut warn);
    if scope.is_workspace() {
        for (key, present) in [
            ("api_key", settings.api_key.take().is_some()),
            (
                "oauth_credentials",
                settings.oauth_credentials.take().is_some(),
            ),
        ] {
            if present {
                warn(format!(
                    "`{key}` is ignored in {scope} settings: secrets are read only from the user settings file and the environment"
                ));
            }
        }
        if settings.oauth_providers.take().is_some() {
            warn(format!(
                "`oauth_providers` is ignored in {scope} settings: logins are configured only in the user settings file"
            ));
        }
    }
    validate(&settings, file)?;
    Ok((settings, warnings))
}

/// serde_json appends " at line L column C"; we report the position in our own prefix.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) if message[i..].contains(" column ") => message[..i].to_string(),
        _ => message.to_string(),
    }
}

fn unknown_keys(value: &Value, warn: &mut impl FnMut(String)) {
    let Some(top) = value.as_object() else {
        return;
    };
    let mut check = |obj: &serde_json::Map<String, Value>, prefix: &str, known: &[&str]| {
        for key in obj.keys() {
            if known.contains(&key.as_str()) {
                continue;
            }
            let hint = did_you_mean(key, known)
                .map(|s| format!(" (did you mean `{s}`?)"))
                .unwrap_or_default();
            warn(format!("unknown key `{prefix}{key}`{hint}; it is ignored"));
        }
    };
    check(top, "", TOP_KEYS);
    if let Some(servers) = top.get("mcp_servers").and_then(Value::as_object) {
        for (name, entry) in servers {
            if let Some(obj) = entry.as_object() {
                check(obj, &format!("mcp_servers.{name}."), MCP_KEYS);
            }
        }
    }
    if let Some(hooks) = top.get("hooks").and_then(Value::as_array) {
        for (i, h) in hooks.iter().enumerate() {
            if let Some(obj) = h.as_object() {
                check(obj, &format!("hooks[{i}]."), HOOK_KEYS);
            }
        }
    }
    if let Some(obj) = top.get("sandbox").and_then(Value::as_object) {
        check(obj, "sandbox.", SANDBOX_KEYS);
    }
    if let Some(providers) = top.get("oauth_providers").and_then(Value::as_object) {
        for (name, entry) in providers {
            if let Some(obj) = entry.as_object() {
                check(
                    obj,
                    &format!("oauth_providers.{name}."),
                    OAUTH_PROVIDER_KEYS,
                );
            }
        }
    }
    if let Some(perms) = top.get("permissions").and_then(Value::as_object) {
        for (pattern, spec) in perms {
            if let Some(obj) = spec.as_object() {
                check(obj, &format!("permissions.{pattern}."), RULE_KEYS);
            }
        }
    }
}

fn validate(s: &SettingsFile, file: &str) -> Result<(), SettingsError> {
    let invalid = |key_path: String, message: String| SettingsError::Invalid {
        file: file.to_string(),
        key_path,
        message,
    };
    if let Some(perms) = &s.permissions {
        for (pattern, _) in &perms.0 {
            ToolPattern::parse(pattern)
                .map_err(|e| invalid(format!("permissions.{pattern}"), e.to_string()))?;
        }
    }
    if let Some(hooks) = &s.hooks {
        for (i, h) in hooks.iter().enumerate() {
            h.validate()
                .map_err(|e| invalid(format!("hooks[{i}]"), e.to_string()))?;
        }
    }
    if let Some(servers) = &s.mcp_servers {
        for (name, e) in servers {
            for (field, v) in [("command", &e.command), ("url", &e.url)] {
                if v.as_deref().is_some_and(|v| v.trim().is_empty()) {
                    return Err(invalid(
                        format!("mcp_servers.{name}.{field}"),
                        format!("`{field}` must not be empty"),
                    ));
                }
            }
            for (header, value) in e.headers.iter().flatten() {
                let key = format!("mcp_servers.{name}.headers.{header}");
                if let Some(why) = crate::mcp_name::header_name_problem(header) {
                    return Err(invalid(key, format!("header {header:?} is refused: {why}")));
                }
                let why = match crate::mcp_name::secret_reference(value) {
                    Some(secret) if !crate::mcp_name::is_env_name(secret) => Some(
                        "it names a secret that is not an environment variable's name (letters, \
                         digits and `_`, not starting with a digit)",
                    ),
                    Some(_) => None,
                    None => crate::mcp_name::header_value_problem(value),
                };
                if let Some(why) = why {
                    return Err(invalid(key, format!("header {header:?} is refused: {why}")));
                }
            }
            if e.headers.is_some() && e.command.is_some() {
                return Err(invalid(
                    format!("mcp_servers.{name}.headers"),
                    "`headers` are for a `url` server; a stdio server takes `env`".into(),
                ));
            }
            for (field, v, max) in [
                ("timeout_ms", e.timeout_ms, MAX_MCP_CALL_TIMEOUT_MS),
                (
                    "startup_timeout_ms",
                    e.startup_timeout_ms,
                    MAX_MCP_STARTUP_TIMEOUT_MS,
                ),
                ("max_result_bytes", e.max_result_bytes, MAX_MCP_RESULT_BYTES),
            ] {
                if let Some(v) = v.filter(|v| *v == 0 || *v > max) {
                    return Err(invalid(
                        format!("mcp_servers.{name}.{field}"),
                        format!("`{field}` must be between 1 and {max}, got {v}"),
                    ));
                }
            }
        }
    }
    if let Some(m) = &s.model {
        if m.trim().is_empty() {
            return Err(invalid("model".into(), "`model` must not be empty".into()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<(SettingsFile, Vec<Warning>), SettingsError> {
        parse_settings(Scope::User, "/home/u/.config/hanzo/settings.json", text)
    }

    #[test]
    fn syntax_error_names_file_line_column() {
        let err = parse("{\n  \"model\": \"x\",\n  \"hooks\": [,]\n}").expect_err("bad json");
        match &err {
            SettingsError::Syntax { line, column, .. } => assert_eq!((*line, *column), (3, 13)),
            other => panic!("wrong error {other:?}"),
        }
        let text = err.to_string();
        assert!(
            text.starts_with("/home/u/.config/hanzo/settings.json:3:13: invalid JSON"),
            "{text}"
        );
    }

    #[test]
    fn wrong_type_names_key_path_line_column() {
        let err = parse("{\n  \"sandbox\": {\"extra_read_paths\": \"/opt\"}\n}").expect_err("type");
        match &err {
            SettingsError::Type { key_path, line, .. } => {
                assert_eq!(key_path, "sandbox.extra_read_paths");
                assert_eq!(*line, 2);
            }
            other => panic!("wrong error {other:?}"),
        }
        let err = parse("{\"permissions\": {\"bash\": \"alow\"}}").expect_err("mode");
        let text = err.to_string();
        assert!(text.contains("permissions.bash"), "{text}");
        assert!(text.contains("unknown permission mode \"alow\""), "{text}");
        let err = parse("{\"input_mode\": \"vi\"}").expect_err("enum");
        assert!(err.to_string().contains("input_mode"));
        let err = parse("[]").expect_err("not an object");
        assert!(err.to_string().contains("(top level)"), "{err}");
    }

    #[test]
    fn invalid_glob_and_hook_are_errors_with_paths() {
        let err = parse("{\"permissions\": {\"bash([)\": \"deny\"}}").expect_err("glob");
        assert!(
            matches!(&err, SettingsError::Invalid { key_path, .. } if key_path == "permissions.bash([)")
        );
        let err = parse("{\"hooks\": [{\"event\": \"pre_tool_use\", \"command\": \"x\", \"tool_pattern\": \"*\", \"timeout_ms\": 0}]}")
            .expect_err("timeout");
        assert!(err.to_string().contains("hooks[0]"), "{err}");
        let err = parse(
            "{\"hooks\": [{\"event\": \"before\", \"command\": \"x\", \"tool_pattern\": \"*\"}]}",
        )
        .expect_err("event");
        assert!(err.to_string().contains("hooks[0].event"), "{err}");
        for (entry, key) in [
            (
                r#"{"command": "x", "timeout_ms": 0}"#,
                "mcp_servers.s.timeout_ms",
            ),
            (
                r#"{"command": "x", "timeout_ms": 3600001}"#,
                "mcp_servers.s.timeout_ms",
            ),
            (
                r#"{"url": "https://x", "startup_timeout_ms": 0}"#,
                "mcp_servers.s.startup_timeout_ms",
            ),
            (
                r#"{"url": "https://x", "startup_timeout_ms": 600001}"#,
                "mcp_servers.s.startup_timeout_ms",
            ),
            (
                r#"{"command": "x", "max_result_bytes": 0}"#,
                "mcp_servers.s.max_result_bytes",
            ),
            (
                r#"{"command": "x", "max_result_bytes": 8388609}"#,
                "mcp_servers.s.max_result_bytes",
            ),
        ] {
            let err = parse(&format!("{{\"mcp_servers\": {{\"s\": {entry}}}}}")).expect_err(entry);
            assert!(
                matches!(&err, SettingsError::Invalid { key_path, .. } if key_path == key),
                "{entry}: {err}"
            );
            assert!(err.to_string().contains("must be between 1 and"), "{err}");
        }
        let (f, w) = parse(r#"{"mcp_servers": {"s": {"command": "x", "timeout_ms": 3600000, "startup_timeout_ms": 1}}}"#)
            .expect("the limits themselves are accepted");
        assert!(w.is_empty(), "{w:?}");
        let s = &f.mcp_servers.expect("servers")["s"];
        assert_eq!(
            (s.timeout_ms, s.startup_timeout_ms),
            (Some(3_600_000), Some(1))
        );
        let err = parse("{\"permissions\": {\"a\": \"allow\", \"a\": \"deny\"}}").expect_err("dup");
        assert!(err.to_string().contains("appears twice"), "{err}");
    }

    #[test]
    fn a_bad_mcp_server_name_names_file_line_and_column() {
        let text = "{\n  \"mcp_servers\": {\n    \"good\": {\"command\": \"a\"},\n    \"bad__name\": {\"command\": \"b\"}\n  }\n}";
        let err = parse(text).expect_err("bad name");
        match &err {
            SettingsError::Type {
                line,
                column,
                key_path,
                ..
            } => {
                assert_eq!((*line, *column), (4, 15), "{err}");
                assert!(key_path.starts_with("mcp_servers"), "{key_path}");
            }
            other => panic!("wrong error {other:?}"),
        }
        let shown = err.to_string();
        assert!(
            shown.starts_with("/home/u/.config/hanzo/settings.json:4:15: at `mcp_servers`: "),
            "{shown}"
        );
        assert!(shown.contains("\"bad__name\" contains `__`"), "{shown}");
        for bad in ["", "_a", "a.b", "a b", "ä"] {
            let text = serde_json::json!({"mcp_servers": {bad: {"command": "x"}}}).to_string();
            let err = parse(&text).expect_err(bad).to_string();
            assert!(err.contains("MCP server name"), "{bad:?}: {err}");
        }
        let (f, _) = parse(r#"{"mcp_servers": null, "model": "m"}"#).expect("null is unset");
        assert!(f.mcp_servers.is_none());
        let (f, _) = parse(r#"{"mcp_servers": {"my-srv_1": {"command": "x", "read_paths": ["/srv"], "max_result_bytes": 1}}}"#)
            .expect("good name");
        let s = &f.mcp_servers.expect("servers")["my-srv_1"];
        assert_eq!(
            (s.read_paths.as_deref(), s.max_result_bytes),
            (Some(&["/srv".to_string()][..]), Some(1))
        );
    }

    #[test]
    fn bad_mcp_headers_are_settings_errors_naming_the_header_never_the_value() {
        for (header, value, why) in [
            ("Bad Name", "s3cret-value", "not a valid header name"),
            ("Host", "s3cret-value", "belongs to the connection"),
            ("Content-Length", "1", "belongs to the connection"),
            ("Transfer-Encoding", "chunked", "belongs to the connection"),
            ("Connection", "close", "belongs to the connection"),
            (
                "Mcp-Session-Id",
                "s3cret-value",
                "belongs to the connection",
            ),
            (
                "MCP-Protocol-Version",
                "2025-06-18",
                "belongs to the connection",
            ),
            ("X-Key", "s3cret\r\nX-Injected: 1", "cannot carry"),
            ("X-Key", "${secret:A-B}", "not an environment variable"),
        ] {
            let text = serde_json::json!({"mcp_servers": {"web": {"url": "https://x", "headers": {header: value}}}}).to_string();
            let err = parse(&text).expect_err(header);
            let key = format!("mcp_servers.web.headers.{header}");
            assert!(
                matches!(&err, SettingsError::Invalid { key_path, .. } if *key_path == key),
                "{header}: {err}"
            );
            let shown = err.to_string();
            assert!(shown.contains(why), "{shown}");
            assert!(!shown.contains("s3cret"), "{shown}");
        }
        let err = parse(r#"{"mcp_servers": {"s": {"command": "x", "headers": {"A": "b"}}}}"#)
            .expect_err("stdio");
        assert!(err.to_string().contains("for a `url` server"), "{err}");
        let (f, w) = parse(r#"{"mcp_servers": {"web": {"url": "https://x", "headers": {"Authorization": "${secret:WEB_TOKEN}", "X-Team": "core"}}}}"#)
            .expect("valid");
        assert!(w.is_empty(), "{w:?}");
        let h = f.mcp_servers.expect("servers")["web"]
            .headers
            .clone()
            .expect("headers");
        assert_eq!(h["Authorization"], "${secret:WEB_TOKEN}");
    }

    #[test]
    fn unknown_keys_warn_with_suggestions() {
        let (_, w) =
            parse("{\"modle\": \"x\", \"sandbox\": {\"isolaton\": \"strict\"}, \"zzz\": 1}")
                .expect("loads");
        let all: Vec<String> = w.iter().map(ToString::to_string).collect();
        assert!(
            all.iter()
                .any(|w| w.contains("`modle` (did you mean `model`?)")),
            "{all:?}"
        );
        assert!(
            all.iter()
                .any(|w| w.contains("`sandbox.isolaton` (did you mean `isolation`?)")),
            "{all:?}"
        );
        assert!(
            all.iter().any(|w| w.contains("`zzz`; it is ignored")),
            "{all:?}"
        );
    }

    #[test]
    fn permissions_keep_file_order_and_accept_objects() {
        let (s, _) = parse(
            "{\"permissions\": {\"z\": \"allow\", \"a\": {\"mode\": \"deny\", \"reason\": \"no\"}, \"m\": \"prompt\"}}",
        )
        .expect("loads");
        let rules = s.permissions.expect("present").to_rules();
        let order: Vec<&str> = rules.iter().map(|r| r.tool_pattern.as_str()).collect();
        assert_eq!(order, ["z", "a", "m"]);
        assert_eq!(rules[1].reason.as_deref(), Some("no"));
    }

    #[test]
    fn oauth_providers_are_read_from_the_user_file_only() {
        let text = r#"{"oauth_providers": {"corp": {"issuer": "https://id.corp.example", "client_id": "c", "scopes": ["openid"], "clent_secret": "x"}}}"#;
        let (s, w) = parse(text).expect("loads");
        let corp = &s.oauth_providers.as_ref().expect("section")["corp"];
        assert_eq!(corp.issuer.as_deref(), Some("https://id.corp.example"));
        assert_eq!(corp.scopes.as_deref(), Some(&["openid".to_string()][..]));
        assert!(w[0]
            .message
            .contains("unknown key `oauth_providers.corp.clent_secret`"));
        let (s, w) =
            parse_settings(Scope::Project, "/p/.hanzo/settings.json", text).expect("loads");
        assert!(s.oauth_providers.is_none());
        assert!(w.iter().any(|w| w
            .message
            .contains("`oauth_providers` is ignored in project settings")));
    }

    #[test]
    fn secrets_ignored_in_workspace_files_and_hidden_in_debug() {
        let (s, w) = parse_settings(
            Scope::Project,
            "/p/.hanzo/settings.json",
            "{\"api_key\": \"sk-123\", \"model\": \"m\"}",
        )
        .expect("loads");
        assert!(s.api_key.is_none());
        assert!(w[0]
            .to_string()
            .starts_with("/p/.hanzo/settings.json: `api_key` is ignored"));
        let (s, _) = parse("{\"api_key\": \"sk-123\"}").expect("loads");
        assert!(!format!("{s:?}").contains("sk-123"));
    }

    #[test]
    fn a_secret_may_be_named_as_an_object_and_is_read_as_its_reference() {
        let (f, _) = parse(
            r#"{"mcp_servers": {
                "gh": {"command": "gh-mcp", "env": {"GITHUB_TOKEN": {"secret": "GITHUB_TOKEN"}, "MODE": "ro"}},
                "web": {"url": "https://x", "headers": {"Authorization": {"secret": "WEB_TOKEN"}}}}}"#,
        )
        .expect("loads");
        let servers = f.mcp_servers.expect("servers");
        let env = servers["gh"].env.as_ref().expect("env");
        assert_eq!(env["GITHUB_TOKEN"], "${secret:GITHUB_TOKEN}");
        assert_eq!(env["MODE"], "ro");
        let headers = servers["web"].headers.as_ref().expect("headers");
        assert_eq!(headers["Authorization"], "${secret:WEB_TOKEN}");
        // A workspace file's object form is the same reference, so the rule that a workspace
        // file never names a secret (checked on references, `supervisor::mcp`) catches it too.
        let (p, _) = parse_settings(
            Scope::Project,
            "/w/.hanzo/settings.json",
            r#"{"mcp_servers": {"gh": {"command": "x", "env": {"T": {"secret": "GITHUB_TOKEN"}}}}}"#,
        )
        .expect("loads");
        assert_eq!(
            p.mcp_servers.expect("servers")["gh"]
                .env
                .as_ref()
                .expect("env")["T"],
            "${secret:GITHUB_TOKEN}"
        );
        for (bad, why) in [
            (r#"{"secret": "A-B"}"#, "not an environment variable"),
            (r#"{"secret": "A", "x": 1}"#, "one key"),
            (r#"{"name": "A"}"#, "one key"),
            (r#"{}"#, "one key"),
            ("7", r#"a string, or {"secret": "NAME"}"#),
        ] {
            let text = format!(
                r#"{{"mcp_servers": {{"gh": {{"command": "x", "env": {{"T": {bad}}}}}}}}}"#
            );
            let err = parse(&text).expect_err(bad).to_string();
            assert!(err.contains(why), "{bad}: {err}");
            assert!(err.contains("settings.json:1:"), "{bad}: {err}");
        }
    }
}
