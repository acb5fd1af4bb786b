//! Layered settings (HIP-0301 §4): the `settings.json` format, parsing with precise errors, the
//! merge of user < project < local < environment < CLI tiers, and the canonical merged form that
//! `hanzo-dev config show --json` prints and the `config-merge` vectors compare.
//!
//! Files are parsed from text (so errors carry line and column); loading from disk is a thin
//! layer over that in [`load`], which takes every path and variable as input.

mod file;
pub mod load;
mod merge;

pub use file::{
    parse_settings, InputMode, IsolationMode, LspServerEntry, McpFilesystemSetting, McpServerEntry,
    OAuthProviderEntry, PermissionsMap, RuleSpec, SandboxEntry, Secret, SettingsFile, Warning,
};
pub use load::{find_project_root, load, LoadedSettings, SettingsSources};
pub use merge::{
    merge, CliOverrides, Config, ConfiguredHook, McpServer, Merged, SandboxConfig, Source,
    TierFile, TierRules, TrustStatus, DEFAULT_MODEL, ENV_VARS,
};

/// Why settings could not be loaded. Every variant names where the problem is.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("{file}: cannot read: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}:{line}:{column}: invalid JSON: {message}")]
    Syntax {
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{file}:{line}:{column}: at `{key_path}`: {message}")]
    Type {
        file: String,
        line: usize,
        column: usize,
        key_path: String,
        message: String,
    },
    #[error("{file}: at `{key_path}`: {message}")]
    Invalid {
        file: String,
        key_path: String,
        message: String,
    },
    #[error("environment variable {var}: {message}")]
    Env { var: String, message: String },
    #[error("{message}")]
    Conflict { message: String },
}

/// The JSON Schema of `settings.json`, as committed in `policy/settings.schema.json`.
pub fn json_schema() -> serde_json::Value {
    schemars::schema_for!(SettingsFile).to_value()
}
