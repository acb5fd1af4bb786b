//! The one error type of the crate: what failed, for which server or file, and what to do.
//!
//! Texts that came from a server (its error messages, its stderr) are sanitised before they are
//! put into an error, because errors end up in tool results the model reads and in terminals.

use std::path::PathBuf;
use std::time::Duration;

/// Why a language-server operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LspError {
    /// No configured server handles this kind of file.
    #[error("no language server is configured for {path}")]
    NoServer {
        /// The file, as the caller named it.
        path: String,
    },

    /// The server's program is not installed. Reported once per server; later calls get
    /// [`LspError::Unavailable`].
    #[error("language server {server} is not installed ({program} not found); {hint}")]
    ServerMissing {
        /// The server's name in `lsp_servers`.
        server: String,
        /// The program that was not found.
        program: String,
        /// How to install it.
        hint: String,
    },

    /// The server cannot be used in this session (missing, failed to start, or crashed too often).
    #[error("language server {server} is unavailable: {reason}")]
    Unavailable {
        /// The server's name in `lsp_servers`.
        server: String,
        /// Why it cannot be used.
        reason: String,
    },

    /// The server is installed where its sandbox may not read (its installation prefix would be
    /// the home directory, a directory of secrets, or was not granted at the worker's start).
    #[error("language server {server} is refused: {detail}")]
    Refused {
        /// The server's name in `lsp_servers`.
        server: String,
        /// Where it is installed and why that is refused.
        detail: String,
    },

    /// The server process could not be started.
    #[error("could not start language server {server}: {detail}")]
    Spawn {
        /// The server's name in `lsp_servers`.
        server: String,
        /// The system's error.
        detail: String,
    },

    /// The server exited (or was killed) while the request was in flight or before it was sent.
    #[error("language server {server} exited: {detail}")]
    ServerExited {
        /// The server's name in `lsp_servers`.
        server: String,
        /// How it ended, sanitised.
        detail: String,
    },

    /// The server broke the protocol (framing, an absurd message) and was stopped.
    #[error("language server {server} broke the protocol and was stopped: {detail}")]
    Protocol {
        /// The server's name in `lsp_servers`.
        server: String,
        /// What it sent that is not the protocol.
        detail: String,
    },

    /// The server wrote more output than its bounds allow and was stopped.
    #[error("language server {server} flooded its output and was stopped: {detail}")]
    Flooded {
        /// The server's name in `lsp_servers`.
        server: String,
        /// Which bound it exceeded.
        detail: String,
    },

    /// The server did not answer in time. The request was cancelled; the server keeps running
    /// unless it keeps timing out.
    #[error("language server {server} did not answer {method} within {} ms", after.as_millis())]
    Timeout {
        /// The server's name in `lsp_servers`.
        server: String,
        /// The LSP method that went unanswered.
        method: String,
        /// How long it was given.
        after: Duration,
    },

    /// The server does not offer this request.
    #[error("language server {server} does not support {method}")]
    NotSupported {
        /// The server's name in `lsp_servers`.
        server: String,
        /// The LSP method it does not offer.
        method: String,
    },

    /// The server answered with an error.
    #[error("language server {server} answered {method} with error {code}: {message}")]
    ServerError {
        /// The server's name in `lsp_servers`.
        server: String,
        /// The LSP method.
        method: String,
        /// The JSON-RPC error code.
        code: i64,
        /// The server's error message, sanitised.
        message: String,
    },

    /// The server answered with something that is not the protocol's result type.
    #[error("language server {server} sent an invalid answer to {method}: {detail}")]
    BadResponse {
        /// The server's name in `lsp_servers`.
        server: String,
        /// The LSP method.
        method: String,
        /// What is wrong with the answer.
        detail: String,
    },

    /// The path is not inside the workspace (after resolving links).
    #[error("{} is outside the workspace; language servers only see workspace files", path.display())]
    OutsideWorkspace {
        /// The path as given.
        path: PathBuf,
    },

    /// The file could not be read.
    #[error("cannot read {}: {detail}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The system's error.
        detail: String,
    },

    /// The file is bigger than a language server is given.
    #[error("{} has {size} bytes, more than the {limit} bytes given to a language server", path.display())]
    FileTooLarge {
        /// The file.
        path: PathBuf,
        /// Its size, in bytes.
        size: u64,
        /// The most a server is given, in bytes.
        limit: u64,
    },

    /// A position the caller gave (1-based line and column) is not valid.
    #[error("invalid position {line}:{column}: lines and columns start at 1")]
    InvalidPosition {
        /// The line given.
        line: u32,
        /// The column given.
        column: u32,
    },
}

impl LspError {
    /// The server this error is about, if any.
    pub fn server(&self) -> Option<&str> {
        match self {
            LspError::ServerMissing { server, .. }
            | LspError::Unavailable { server, .. }
            | LspError::Spawn { server, .. }
            | LspError::Refused { server, .. }
            | LspError::ServerExited { server, .. }
            | LspError::Protocol { server, .. }
            | LspError::Flooded { server, .. }
            | LspError::Timeout { server, .. }
            | LspError::ServerError { server, .. }
            | LspError::NotSupported { server, .. }
            | LspError::BadResponse { server, .. } => Some(server),
            LspError::NoServer { .. }
            | LspError::OutsideWorkspace { .. }
            | LspError::Read { .. }
            | LspError::FileTooLarge { .. }
            | LspError::InvalidPosition { .. } => None,
        }
    }

    /// The failure as the lsp channel carries it to the supervisor.
    pub fn to_failure(&self) -> crate::types::LspFailure {
        use crate::types::LspFailureKind as K;
        let kind = match self {
            LspError::NoServer { .. } => K::NoServer,
            LspError::ServerMissing { .. } => K::ServerMissing,
            LspError::Unavailable { .. } | LspError::Refused { .. } => K::Unavailable,
            LspError::Spawn { .. } => K::Spawn,
            LspError::ServerExited { .. } => K::ServerExited,
            LspError::Protocol { .. } => K::Protocol,
            LspError::Flooded { .. } => K::Flooded,
            LspError::Timeout { .. } => K::Timeout,
            LspError::NotSupported { .. } => K::NotSupported,
            LspError::ServerError { .. } => K::ServerError,
            LspError::BadResponse { .. } => K::BadResponse,
            LspError::OutsideWorkspace { .. } => K::OutsideWorkspace,
            LspError::Read { .. } => K::Read,
            LspError::FileTooLarge { .. } => K::FileTooLarge,
            LspError::InvalidPosition { .. } => K::InvalidPosition,
        };
        crate::types::LspFailure {
            kind,
            server: self.server().map(str::to_string),
            message: crate::sanitize::one_line(&self.to_string()),
        }
    }

    /// Whether the server process is gone because of this error (the next call restarts it).
    pub fn ended_server(&self) -> bool {
        matches!(
            self,
            LspError::ServerExited { .. } | LspError::Protocol { .. } | LspError::Flooded { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::LspFailureKind;

    #[test]
    fn errors_become_channel_failures_with_their_kind_and_server() {
        let e = LspError::ServerMissing {
            server: "pyright".into(),
            program: "pyright-langserver".into(),
            hint: "install it".into(),
        };
        let f = e.to_failure();
        assert_eq!(
            (f.kind, f.server.as_deref()),
            (LspFailureKind::ServerMissing, Some("pyright"))
        );
        assert_eq!(f.message, e.to_string());
        let outside = LspError::OutsideWorkspace {
            path: "/etc/x\n".into(),
        }
        .to_failure();
        assert_eq!(
            (outside.kind, outside.server),
            (LspFailureKind::OutsideWorkspace, None)
        );
        assert!(!outside.message.contains('\n'));
    }
}
