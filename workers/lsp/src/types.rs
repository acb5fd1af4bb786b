//! The owned, simple results the supervisor puts into tool results and the run record. They are
//! the lsp channel's own message types (`hanzo_ipc::roles::lsp`), so what the client returns is
//! what crosses to the supervisor, unchanged.
//!
//! Lines and columns are 1-based and columns count characters, like the numbered lines of the
//! `read_file` tool. Paths are relative to the workspace when the file is inside it, absolute
//! otherwise (a definition in a library stub, say). Every text that came from a server has had
//! its control characters removed.

pub use hanzo_ipc::roles::lsp::{
    CheckFailure, CheckReport, Diagnostic, FileDiagnostics, Freshness, HoverInfo, Location,
    LspFailure, LspFailureKind, Position, Range, ServerState, ServerStatus, Severity,
};
