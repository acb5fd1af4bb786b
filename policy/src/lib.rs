//! `hanzo-policy` decides what an agent may do: layered settings, workspace trust, permission
//! rules with audit records, the hook contract, the network allow-list, and the sandbox profile of
//! every worker role.
//! It holds data and decision logic only; it never spawns a process.
// The cast lints (issue 11), enforced crate by crate until every member passes them.
#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss,
    clippy::cast_lossless
)]
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod audit;
pub mod defaults;
pub mod git;
pub mod glob;
pub mod hooks;
pub mod isolation;
pub mod mcp_name;
pub mod network;
pub mod permission;
pub mod profile;
pub mod secret;
pub mod secret_names;
pub mod settings;
pub mod shell;
mod suggest;
pub mod trust;

pub use audit::AuditRecord;
pub use hooks::{HookConfig, HookEvent};
pub use isolation::{IsolationMode, Tier};
pub use permission::{
    Decision, PermissionMode, PermissionPolicy, PermissionRule, RuleList, RuleRef, Scope,
    ScopedPolicy, ToolPattern,
};
pub use settings::{Config, SettingsError, SettingsSources};
pub use trust::{TrustCheck, TrustContent, TrustStore};
