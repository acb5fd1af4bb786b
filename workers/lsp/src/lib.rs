//! The LSP client core of the lsp worker: language servers started lazily by the files they
//! serve, kept in sync with edits on disk, asked for diagnostics, definitions, references and hover.
//!
//! [`LanguageServers`] is the entry point: it picks a server per file ([`registry`]), starts it
//! through a [`ServerSpawner`] (the sandboxed command runner in the worker, [`TokioSpawner`] in
//! tests), restarts it with backoff when it crashes, and reports a missing one once.
//! [`LspClient`] speaks to one server; [`format_diagnostics_block`] turns diagnostics into the
//! block the next model turn sees; [`check()`] is `hanzo-dev lsp check`.
// The cast lints (issue 11), enforced crate by crate until every member passes them.
#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss,
    clippy::cast_lossless
)]
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod check;
pub mod client;
pub mod conn;
pub mod documents;
pub mod enrich;
pub mod error;
pub mod framing;
pub mod inbound;
pub mod prefix;
pub mod registry;
pub mod sanitize;
pub mod servers;
pub mod shims;
pub mod spawn;
pub mod text;
pub mod types;
pub mod worker;

pub use check::check;
pub use client::{ClientOptions, DiagnosticsWait, LspClient, ServerSetup};
pub use enrich::format_diagnostics_block;
pub use error::LspError;
pub use inbound::{LogKind, LogSink, ServerLog};
pub use registry::{LspServerEntry, LspServers, Registry};
pub use servers::{EventSink, LanguageServers, LanguageServersConfig, RestartPolicy, ServerEvent};
pub use spawn::{
    LaunchSpec, ServerExit, ServerProcess, ServerSpawner, SpawnedServer, TokioSpawner,
};
pub use types::*;
pub use worker::{worker_main, LspHandler, RunnerSpawner};
