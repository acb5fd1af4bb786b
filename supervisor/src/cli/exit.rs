//! The process's exit codes: one table, used by every command, documented in the README.
//!
//! A command returns `Ok(code)` for an outcome it reports itself, or an error: a [`CliError`]
//! carries its [`Exit`]; any other error means the job was attempted and failed ([`Exit::Failed`]).

use std::fmt;

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Exit {
    /// It did what was asked.
    Ok,
    /// The job ran and failed: a run that failed or hit a limit, a failing vector, a worker not
    /// confined as required, a model request that failed, a file that could not be written.
    Failed,
    /// Bad usage or configuration, and nothing was run: a malformed flag, an invalid settings
    /// file (with its file, line and column), no credential, an unreadable cassette, a dangerous
    /// workspace.
    Usage,
    /// The isolation asked for (`strict`) is not available on this machine.
    IsolationUnavailable,
    /// What the command line names does not exist: an agent, a run.
    NotFound,
    /// Cancelled with Ctrl-C (128 + SIGINT, as shells report it); in-flight work was stopped.
    Cancelled,
}

impl Exit {
    /// Every code, in the order the README lists them.
    pub const ALL: [Exit; 6] = [
        Exit::Ok,
        Exit::Failed,
        Exit::Usage,
        Exit::IsolationUnavailable,
        Exit::NotFound,
        Exit::Cancelled,
    ];

    /// The number the process exits with.
    pub const fn code(self) -> i32 {
        match self {
            Exit::Ok => 0,
            Exit::Failed => 1,
            Exit::Usage => 2,
            Exit::IsolationUnavailable => 3,
            Exit::NotFound => 4,
            Exit::Cancelled => 130,
        }
    }

    /// What the code means, in a few words (the README's table, `--help`).
    pub fn meaning(self) -> &'static str {
        match self {
            Exit::Ok => "success",
            Exit::Failed => "the job ran and failed",
            Exit::Usage => "bad usage or configuration; nothing was run",
            Exit::IsolationUnavailable => "the isolation asked for (strict) is unavailable",
            Exit::NotFound => "the agent or run named does not exist",
            Exit::Cancelled => "cancelled (Ctrl-C)",
        }
    }

    /// The exit whose code is `code`, if it is one of the table's.
    pub fn from_code(code: i32) -> Option<Exit> {
        Self::ALL.into_iter().find(|e| e.code() == code)
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.code(), self.meaning())
    }
}

/// [`Exit::Ok`]'s code: 0.
pub const OK: i32 = Exit::Ok.code();
/// [`Exit::Failed`]'s code: 1.
pub const FAILED: i32 = Exit::Failed.code();
/// [`Exit::Usage`]'s code: 2.
pub const USAGE: i32 = Exit::Usage.code();
/// [`Exit::IsolationUnavailable`]'s code: 3.
pub const ISOLATION_UNAVAILABLE: i32 = Exit::IsolationUnavailable.code();
/// [`Exit::NotFound`]'s code: 4.
pub const NOT_FOUND: i32 = Exit::NotFound.code();
/// [`Exit::Cancelled`]'s code: 130.
pub const CANCELLED: i32 = Exit::Cancelled.code();

/// An error that knows how the process should end. Its message is shown after `error: `.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct CliError {
    /// How the process ends.
    pub exit: Exit,
    /// What went wrong and what to do, for the person at the terminal.
    pub message: String,
}

/// Bad usage or configuration: exit 2.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    CliError {
        exit: Exit::Usage,
        message: message.into(),
    }
    .into()
}

/// The agent or run named does not exist: exit 4.
pub fn not_found(message: impl Into<String>) -> anyhow::Error {
    CliError {
        exit: Exit::NotFound,
        message: message.into(),
    }
    .into()
}

/// The job ran and failed: exit 1.
pub fn failed(message: impl Into<String>) -> anyhow::Error {
    CliError {
        exit: Exit::Failed,
        message: message.into(),
    }
    .into()
}

/// The exit code for an error a command returned.
pub fn code_of(e: &anyhow::Error) -> i32 {
    match e.downcast_ref::<CliError>() {
        Some(c) => c.exit.code(),
        None => FAILED,
    }
}

/// What to print for an error: its own message for a [`CliError`], the whole chain otherwise,
/// made safe for a terminal (it may quote a model's or a tool's text).
///
/// A cause whose text the message already ends with is not repeated: our error types say
/// `"cannot run X: {source}"` *and* keep the source for callers that walk the chain, which
/// `{:#}` would print twice.
pub fn message_of(e: &anyhow::Error) -> String {
    let text = match e.downcast_ref::<CliError>() {
        Some(c) => c.message.clone(),
        None => {
            let mut text = String::new();
            for cause in e.chain() {
                let part = cause.to_string();
                if text.is_empty() {
                    text = part;
                } else if !text.ends_with(&part) {
                    text.push_str(": ");
                    text.push_str(&part);
                }
            }
            text
        }
    };
    crate::term::sanitize_for_terminal(&text).into_owned()
}

/// Print `error: MESSAGE` on stderr and return the code: the edge every command goes through.
pub fn report(e: &anyhow::Error) -> i32 {
    eprintln!("error: {}", message_of(e));
    code_of(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_round_trip() {
        let codes: std::collections::BTreeSet<i32> = Exit::ALL.iter().map(|e| e.code()).collect();
        assert_eq!(codes.len(), Exit::ALL.len());
        for e in Exit::ALL {
            assert_eq!(Exit::from_code(e.code()), Some(e));
        }
        assert_eq!(Exit::from_code(7), None);
    }

    #[test]
    fn errors_map_to_their_code_and_others_to_failed() {
        assert_eq!(code_of(&usage("x")), 2);
        assert_eq!(code_of(&not_found("x")), 4);
        assert_eq!(code_of(&failed("x")), 1);
        assert_eq!(code_of(&anyhow::anyhow!("io")), 1);
        // Context added on top keeps the code.
        let e = usage("bad flag").context("while parsing");
        assert_eq!(code_of(&e), 2);
        assert_eq!(
            message_of(&anyhow::anyhow!("tool said \x1b]0;x\x07")),
            "tool said ␛]0;x␇"
        );
    }

    #[derive(Debug, thiserror::Error)]
    #[error("cannot run /nope: {source}")]
    struct SpawnFailed {
        source: std::io::Error,
    }

    #[test]
    fn a_cause_already_in_the_message_is_printed_once_and_context_is_kept() {
        let io = || std::io::Error::from(std::io::ErrorKind::NotFound);
        let e = anyhow::Error::new(SpawnFailed { source: io() });
        assert_eq!(message_of(&e), format!("cannot run /nope: {}", io()));
        let e = anyhow::Error::new(SpawnFailed { source: io() }).context("sandbox");
        assert_eq!(
            message_of(&e),
            format!("sandbox: cannot run /nope: {}", io())
        );
        let e = anyhow::Error::new(io()).context("reading settings");
        assert_eq!(message_of(&e), format!("reading settings: {}", io()));
    }
}
