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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    Common(CommonRequest),
    /// A tool wrote, created or deleted this path: its server (started if needed) syncs it, and
    /// every running server's file watchers hear of it.
    FileChanged {
        path: String,
    },
    /// A tool read this file: open it on its server, starting the server if needed.
    Touch {
        path: String,
    },
    /// Fresh diagnostics of each path, in order (one result per path).
    Diagnostics {
        paths: Vec<String>,
    },
    Definition {
        path: String,
        position: Position,
    },
    References {
        path: String,
        position: Position,
        include_declaration: bool,
    },
    Hover {
        path: String,
        position: Position,
    },
    /// `hanzo-dev lsp check`: files or directories; none means the whole workspace.
    Check {
        paths: Vec<String>,
    },
    Status,
    /// The `lsp_servers` settings (a JSON object of `hanzo_lsp::LspServerEntry` by name), sent by
    /// the supervisor before the first other request. Running servers are stopped; the next call
    /// starts servers from the new table.
    Configure {
        servers_json: String,
    },
    /// A tool wrote, created or deleted these paths: each is synced as by `FileChanged`, then
    /// their fresh diagnostics are answered as by `Diagnostics` (`Response::Diagnostics`, one
    /// result per path, in order) — the agent loop's sync after an edit in one exchange, so the
    /// server gets the change and the diagnostics request together.
    ChangedDiagnostics {
        paths: Vec<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    Common(CommonResponse),
    /// `FileChanged` and `Touch` succeeded.
    Done,
    Diagnostics(Vec<Result<FileDiagnostics, LspFailure>>),
    Locations(Vec<Location>),
    Hover(Option<HoverInfo>),
    Check(CheckReport),
    Status(Vec<ServerStatus>),
    Failed(LspFailure),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Item {
    Common(CommonItem),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    Common(CommonEvent),
    ServerStarted {
        server: String,
        pid: Option<u32>,
        starts: u32,
    },
    /// Sent once per server and session.
    ServerMissing {
        server: String,
        program: String,
        hint: String,
    },
    /// It ended without being asked to.
    ServerExited {
        server: String,
        detail: String,
    },
    /// It will start again, after `delay_ms`, on the next call that needs it.
    ServerRestarting {
        server: String,
        attempt: u32,
        delay_ms: u64,
    },
    /// It will not start again in this session.
    ServerUnavailable {
        server: String,
        reason: String,
    },
}

impl_protocol!(LspProtocol, Role::Lsp);

/// A position: 1-based line, 1-based column in characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Position {
    pub line: u32,
    pub column: u32,
}

impl Position {
    pub fn new(line: u32, column: u32) -> Self {
        Position { line, column }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Range {
    pub start: Position,
    pub end: Position,
}

/// How bad a diagnostic is; the order is the order of importance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
    Information,
    Hint,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Information => "info",
            Severity::Hint => "hint",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    pub path: String,
    pub range: Range,
    pub severity: Severity,
    /// The server's code for the rule (`reportArgumentType`, `2345`), if it gave one.
    pub code: Option<String>,
    /// Who produced it (`Pyright`, `typescript`), if the server said.
    pub source: Option<String>,
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
    pub path: String,
    pub server: String,
    pub freshness: Freshness,
    pub diagnostics: Vec<Diagnostic>,
}

impl FileDiagnostics {
    pub fn count(&self, severity: Severity) -> usize {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == severity)
            .count()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Location {
    pub path: String,
    pub range: Range,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoverInfo {
    /// The server's text (plain text or markdown), sanitised, bounded.
    pub text: String,
    pub range: Option<Range>,
}

/// A language server as the worker sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerStatus {
    pub name: String,
    pub state: ServerState,
    /// The process id while running.
    pub pid: Option<u32>,
    /// Requests sent and not yet answered.
    pub pending_requests: usize,
    /// Times the server was started in this session.
    pub starts: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerState {
    /// Not started yet (servers start on the first file of their language).
    Idle,
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckFailure {
    pub path: String,
    pub error: String,
}

impl CheckReport {
    pub fn count(&self, severity: Severity) -> usize {
        self.files.iter().map(|f| f.count(severity)).sum()
    }

    pub fn has_errors(&self) -> bool {
        self.count(Severity::Error) > 0
    }
}

/// Why an lsp request failed, for the tool result the model sees.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LspFailure {
    pub kind: LspFailureKind,
    pub server: Option<String>,
    /// What failed and what to do, sanitised.
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LspFailureKind {
    NoServer,
    ServerMissing,
    Unavailable,
    Spawn,
    ServerExited,
    Protocol,
    Flooded,
    Timeout,
    NotSupported,
    ServerError,
    BadResponse,
    OutsideWorkspace,
    Read,
    FileTooLarge,
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
