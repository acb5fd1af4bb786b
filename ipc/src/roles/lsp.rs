//! The language-server channel (supervisor ↔ lsp worker).
//!
//! The supervisor says which workspace file a tool changed (the worker, which can read the
//! workspace, reads the content itself) and asks for diagnostics, definitions, references, hover
//! and `lsp check`; the worker reports what its language servers do as events. Positions are
//! 1-based lines and columns in characters, like the numbered lines of `read_file`; paths are
//! relative to the workspace inside it, absolute outside. Every text that came from a language
//! server has been sanitised by the worker (no control characters, bounded).

use super::{impl_protocol, CommonEvent, CommonItem, CommonRequest, CommonResponse};
use crate::Role;
use serde::{Deserialize, Serialize};

/// What the supervisor may ask the lsp worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// A request every worker answers (probes, status).
    Common(CommonRequest),
    /// A tool wrote, created or deleted this path: its server (started if needed) syncs it, and
    /// every running server's file watchers hear of it.
    FileChanged {
        /// The changed file.
        path: String,
    },
    /// A tool read this file: open it on its server, starting the server if needed.
    Touch {
        /// The file read.
        path: String,
    },
    /// Fresh diagnostics of each path, in order (one result per path).
    Diagnostics {
        /// The files, in the order the answers come back.
        paths: Vec<String>,
    },
    /// Where the symbol at `position` is defined (`textDocument/definition`).
    Definition {
        /// The file.
        path: String,
        /// The symbol's position in it.
        position: Position,
    },
    /// Where the symbol at `position` is used (`textDocument/references`).
    References {
        /// The file.
        path: String,
        /// The symbol's position in it.
        position: Position,
        /// Whether the declaration itself is listed too.
        include_declaration: bool,
    },
    /// The server's description of the symbol at `position` (`textDocument/hover`).
    Hover {
        /// The file.
        path: String,
        /// The symbol's position in it.
        position: Position,
    },
    /// `hanzo-dev lsp check`: files or directories; none means the whole workspace.
    Check {
        /// The files and directories to check.
        paths: Vec<String>,
    },
    /// Every configured server and its state (`hanzo-dev lsp status`).
    Status,
    /// The `lsp_servers` settings (a JSON object of `hanzo_lsp::LspServerEntry` by name), sent by
    /// the supervisor before the first other request. Running servers are stopped; the next call
    /// starts servers from the new table.
    Configure {
        /// The table, as JSON text.
        servers_json: String,
    },
}

/// The lsp worker's answers, one variant per request kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// The answer to a common request.
    Common(CommonResponse),
    /// `FileChanged` and `Touch` succeeded.
    Done,
    /// The answer to [`Request::Diagnostics`]: one result per path, in the request's order.
    Diagnostics(Vec<Result<FileDiagnostics, LspFailure>>),
    /// The answer to [`Request::Definition`] and [`Request::References`].
    Locations(Vec<Location>),
    /// The answer to [`Request::Hover`]; `None` when the server has nothing to say.
    Hover(Option<HoverInfo>),
    /// The answer to [`Request::Check`].
    Check(CheckReport),
    /// The answer to [`Request::Status`].
    Status(Vec<ServerStatus>),
    /// Any request but `Diagnostics` failed (the channel is fine).
    Failed(LspFailure),
}

/// Streamed parts of the lsp worker's answers (none of its own).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Item {
    /// A part of a common request's answer.
    Common(CommonItem),
}

/// What the lsp worker reports unasked: its servers' lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// An event every worker may send (a log line).
    Common(CommonEvent),
    /// A server process started.
    ServerStarted {
        /// The server's name in `lsp_servers`.
        server: String,
        /// Its pid, as the worker sees it.
        pid: Option<u32>,
        /// Times it was started in this session, this one included.
        starts: u32,
    },
    /// Sent once per server and session.
    ServerMissing {
        /// The server's name in `lsp_servers`.
        server: String,
        /// The program that was not found.
        program: String,
        /// How to install it.
        hint: String,
    },
    /// It ended without being asked to.
    ServerExited {
        /// The server's name in `lsp_servers`.
        server: String,
        /// How it ended (exit status or signal, last stderr line), sanitised.
        detail: String,
    },
    /// It will start again, after `delay_ms`, on the next call that needs it.
    ServerRestarting {
        /// The server's name in `lsp_servers`.
        server: String,
        /// Which restart this is (1-based).
        attempt: u32,
        /// The backoff before the start, in milliseconds.
        delay_ms: u64,
    },
    /// It will not start again in this session.
    ServerUnavailable {
        /// The server's name in `lsp_servers`.
        server: String,
        /// Why, sanitised.
        reason: String,
    },
}

impl_protocol!(LspProtocol, Role::Lsp);

/// A position: 1-based line, 1-based column in characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Position {
    /// The line, from 1.
    pub line: u32,
    /// The column, from 1, counted in characters (not bytes or UTF-16 units).
    pub column: u32,
}

impl Position {
    /// The position at 1-based `line` and `column`.
    pub fn new(line: u32, column: u32) -> Self {
        Position { line, column }
    }
}

/// A span of text, `start` inclusive and `end` exclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Range {
    /// Where it starts.
    pub start: Position,
    /// Where it ends (the first character after it).
    pub end: Position,
}

/// How bad a diagnostic is; the order is the order of importance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Code that will not compile or run.
    Error,
    /// Probably a mistake.
    Warning,
    /// Worth knowing.
    Information,
    /// A suggestion.
    Hint,
}

impl Severity {
    /// The word shown to the model and in `lsp check` (`error`, `warning`, `info`, `hint`).
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Information => "info",
            Severity::Hint => "hint",
        }
    }
}

/// One problem a language server reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    /// The file it is in.
    pub path: String,
    /// Where in the file.
    pub range: Range,
    /// How bad it is.
    pub severity: Severity,
    /// The server's code for the rule (`reportArgumentType`, `2345`), if it gave one.
    pub code: Option<String>,
    /// Who produced it (`Pyright`, `typescript`), if the server said.
    pub source: Option<String>,
    /// The server's message, sanitised and bounded.
    pub message: String,
}

/// How sure the worker is that diagnostics describe the file as it is now (the rules are those
/// of `hanzo_lsp::DiagnosticsWait`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Freshness {
    /// The server said so: a pull answer, or a publish carrying the document's current version.
    Confirmed,
    /// Publishes without a version arrived after the last change, then none for a settle period.
    Settled,
    /// Nothing arrived for the current content within the wait; these are the last diagnostics
    /// the server sent (possibly for older content, possibly none).
    Unconfirmed,
}

/// Diagnostics of one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDiagnostics {
    /// The file.
    pub path: String,
    /// The server that reported them.
    pub server: String,
    /// Whether they describe the file's current content.
    pub freshness: Freshness,
    /// The diagnostics, errors first.
    pub diagnostics: Vec<Diagnostic>,
}

impl FileDiagnostics {
    /// How many diagnostics of `severity` the file has.
    pub fn count(&self, severity: Severity) -> usize {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == severity)
            .count()
    }
}

/// A span in a file, as a definition or reference answer names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Location {
    /// The file.
    pub path: String,
    /// The span.
    pub range: Range,
}

/// A server's hover answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoverInfo {
    /// The server's text (plain text or markdown), sanitised, bounded.
    pub text: String,
    /// The span the text is about, if the server named one.
    pub range: Option<Range>,
}

/// A language server as the worker sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerStatus {
    /// Its name in `lsp_servers`.
    pub name: String,
    /// Whether it runs.
    pub state: ServerState,
    /// The process id while running.
    pub pid: Option<u32>,
    /// Requests sent and not yet answered.
    pub pending_requests: usize,
    /// Times the server was started in this session.
    pub starts: u32,
}

/// Where a language server is in its life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerState {
    /// Not started yet (servers start on the first file of their language).
    Idle,
    /// Its process is running.
    Running,
    /// It ended; the next request starts it again after a backoff delay.
    Exited(String),
    /// It will not be started again in this session.
    Unavailable(String),
}

/// The outcome of `lsp check`. **API boundary:** this is also its `--json` output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckReport {
    /// Every checked file, with its diagnostics (errors first).
    pub files: Vec<FileDiagnostics>,
    /// Paths that could not be checked, and why.
    pub failures: Vec<CheckFailure>,
    /// Files of expanded directories beyond the limit, not checked.
    pub left_out: usize,
}

/// A path `lsp check` could not check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckFailure {
    /// The path as given.
    pub path: String,
    /// Why, sanitised.
    pub error: String,
}

impl CheckReport {
    /// How many diagnostics of `severity` all files have together.
    pub fn count(&self, severity: Severity) -> usize {
        self.files.iter().map(|f| f.count(severity)).sum()
    }

    /// Whether any file has an error (what makes `lsp check` exit 1).
    pub fn has_errors(&self) -> bool {
        self.count(Severity::Error) > 0
    }
}

/// Why an lsp request failed, for the tool result the model sees.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LspFailure {
    /// What failed.
    pub kind: LspFailureKind,
    /// The server it is about, if any.
    pub server: Option<String>,
    /// What failed and what to do, sanitised.
    pub message: String,
}

/// The class of an [`LspFailure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LspFailureKind {
    /// No configured server handles this kind of file.
    NoServer,
    /// The server's program is not installed.
    ServerMissing,
    /// The server cannot be used in this session (missing, refused, or crashed too often).
    Unavailable,
    /// The server process could not be started.
    Spawn,
    /// The server exited while the request was pending.
    ServerExited,
    /// The server broke the protocol and was stopped.
    Protocol,
    /// The server wrote more output than allowed and was stopped.
    Flooded,
    /// The server did not answer in time; the request was cancelled.
    Timeout,
    /// The server does not offer this request.
    NotSupported,
    /// The server answered with an error.
    ServerError,
    /// The server's answer is not the protocol's result type.
    BadResponse,
    /// The path is outside the workspace.
    OutsideWorkspace,
    /// The file could not be read.
    Read,
    /// The file is larger than a language server is given.
    FileTooLarge,
    /// A line or column of 0 (both start at 1).
    InvalidPosition,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsp_messages_round_trip() {
        let d = FileDiagnostics {
            path: "a.py".into(),
            server: "pyright".into(),
            freshness: Freshness::Settled,
            diagnostics: vec![Diagnostic {
                path: "a.py".into(),
                range: Range {
                    start: Position::new(1, 2),
                    end: Position::new(1, 4),
                },
                severity: Severity::Warning,
                code: None,
                source: Some("Pyright".into()),
                message: "m".into(),
            }],
        };
        let failure = LspFailure {
            kind: LspFailureKind::ServerMissing,
            server: Some("pyright".into()),
            message: "not installed".into(),
        };
        let responses = vec![
            Response::Diagnostics(vec![Ok(d.clone()), Err(failure.clone())]),
            Response::Hover(Some(HoverInfo {
                text: "x: int".into(),
                range: None,
            })),
            Response::Status(vec![ServerStatus {
                name: "x".into(),
                state: ServerState::Exited("exit status 3".into()),
                pid: None,
                pending_requests: 0,
                starts: 2,
            }]),
            Response::Check(CheckReport {
                files: vec![d],
                failures: vec![CheckFailure {
                    path: "b".into(),
                    error: "e".into(),
                }],
                left_out: 1,
            }),
            Response::Failed(failure),
        ];
        for r in responses {
            let bytes = postcard::to_stdvec(&r).expect("encode");
            assert_eq!(postcard::from_bytes::<Response>(&bytes).expect("decode"), r);
        }
        let req = Request::References {
            path: "a.py".into(),
            position: Position::new(3, 7),
            include_declaration: true,
        };
        let bytes = postcard::to_stdvec(&req).expect("encode");
        assert_eq!(
            postcard::from_bytes::<Request>(&bytes).expect("decode"),
            req
        );
    }
}
