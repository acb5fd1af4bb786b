//! The owned, simple results the supervisor puts into tool results and the run record.
//!
//! Lines and columns are 1-based and columns count characters, like the numbered lines of the
//! `read_file` tool. Paths are relative to the workspace when the file is inside it, absolute
//! otherwise (a definition in a library stub, say). Every text that came from a server has had
//! its control characters removed.

use serde::{Deserialize, Serialize};

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

/// How sure we are that diagnostics describe the file as it is now (see
/// [`crate::client::DiagnosticsWait`] for the rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Freshness {
    /// The server said so: a pull answer, or a publish carrying the document's current version.
    Confirmed,
    /// A publish without a version arrived after the last change, and no other followed it
    /// within the settle period.
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

/// A server as the manager sees it.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_cross_the_ipc_encoding_unchanged() {
        // The supervisor channel encodes with postcard, which has no self-description: these
        // types must not need it (no untagged or internally tagged enums, no `serde_json::Value`).
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
        let bytes = postcard::to_stdvec(&d).expect("encode");
        assert_eq!(
            postcard::from_bytes::<FileDiagnostics>(&bytes).expect("decode"),
            d
        );
        let s = ServerStatus {
            name: "x".into(),
            state: ServerState::Exited("exit status 3".into()),
            pid: None,
            pending_requests: 0,
            starts: 2,
        };
        let bytes = postcard::to_stdvec(&s).expect("encode");
        assert_eq!(
            postcard::from_bytes::<ServerStatus>(&bytes).expect("decode"),
            s
        );
        let h = HoverInfo {
            text: "x: int".into(),
            range: None,
        };
        let bytes = postcard::to_stdvec(&h).expect("encode");
        assert_eq!(
            postcard::from_bytes::<HoverInfo>(&bytes).expect("decode"),
            h
        );
    }
}
