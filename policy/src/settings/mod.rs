//! Layered settings (HIP-0301 §4): the `settings.json` format, parsing with precise errors, the
//! merge of user < project < local < environment < CLI scopes, and the canonical merged form that
//! `hanzo-dev config show --json` prints and the `config-merge` vectors compare.
//!
//! Files are parsed from text (so errors carry line and column); loading from disk is a thin
//! layer over that in [`load`](mod@load), which takes every path and variable as input.

mod file;
pub mod load;
mod merge;
mod read_paths;

pub use file::{
    parse_settings, InputMode, IsolationMode, LspServerEntry, McpFilesystemSetting, McpServerEntry,
    OAuthProviderEntry, PermissionsMap, RuleSpec, SandboxEntry, Secret, SettingsFile, Warning,
};
pub use load::{find_project_root, load, LoadedSettings, SettingsSources};
pub use merge::{
    merge, CliOverrides, Config, ConfiguredHook, McpServer, Merged, SandboxConfig, ScopeFile,
    ScopeRules, Source, TrustStatus, DEFAULT_MODEL, ENV_VARS,
};

/// Why settings could not be loaded. Every variant names where the problem is.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// A settings file exists but could not be read.
    #[error("{file}: cannot read: {source}")]
    Read {
        /// The file, as it is reported.
        file: String,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// A settings file is not valid JSON.
    #[error("{file}:{line}:{column}: invalid JSON: {message}")]
    Syntax {
        /// The file, as it is reported.
        file: String,
        /// The line of the error, from 1.
        line: usize,
        /// The column of the error, from 1.
        column: usize,
        /// serde_json's description.
        message: String,
    },
    /// A value has the wrong type or is not one of the allowed values.
    #[error("{file}:{line}:{column}: at `{key_path}`: {message}")]
    Type {
        /// The file, as it is reported.
        file: String,
        /// The line of the value, from 1.
        line: usize,
        /// The column of the value, from 1.
        column: usize,
        /// The key path of the value (`sandbox.isolation`, `permissions.bash(rm *)`).
        key_path: String,
        /// What is wrong with it.
        message: String,
    },
    /// A value parses but is not acceptable (a pattern that does not compile, a limit out of
    /// range).
    #[error("{file}: at `{key_path}`: {message}")]
    Invalid {
        /// The file, as it is reported.
        file: String,
        /// The key path of the value.
        key_path: String,
        /// What is wrong with it.
        message: String,
    },
    /// A `HANZO_*` environment variable has a value its setting does not accept.
    #[error("environment variable {var}: {message}")]
    Env {
        /// The variable's name.
        var: String,
        /// What is wrong with its value.
        message: String,
    },
    /// The files are fine one by one but contradict each other once merged.
    #[error("{message}")]
    Conflict {
        /// What contradicts what, and how to find it.
        message: String,
    },
}

/// The JSON Schema of `settings.json`, as committed in `policy/settings.schema.json`.
pub fn json_schema() -> serde_json::Value {
    schemars::schema_for!(SettingsFile).to_value()
}
