//! `hanzo-dev lsp check [PATH…] [--json]` as a library function: start the servers the paths
//! need, collect every file's diagnostics, and say how it went. The CLI prints
//! [`CheckReport::to_text`] or the report as JSON, and exits with [`CheckReport::exit_code`].

use crate::servers::LanguageServers;
use crate::types::{FileDiagnostics, Freshness, Severity};
use serde::{Deserialize, Serialize};
use std::fmt::Write;
use std::path::PathBuf;

/// The outcome of a check. **API boundary:** this is the `--json` output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckReport {
    /// Every checked file, with its diagnostics (errors first).
    pub files: Vec<FileDiagnostics>,
    /// Paths that could not be checked, and why (no server, server missing, outside the
    /// workspace, …).
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

    /// 1 when a file has an error; otherwise 2 when something could not be checked (a CI job
    /// must not pass because its language server is missing); 0 when all is clean.
    pub fn exit_code(&self) -> i32 {
        if self.has_errors() {
            1
        } else if !self.failures.is_empty() || self.left_out > 0 {
            2
        } else {
            0
        }
    }

    /// One line per diagnostic (`path:line:col severity [code] message`), then the failures,
    /// then a summary line. Every text in it was sanitised when it was received.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for f in &self.files {
            for d in &f.diagnostics {
                let code = d
                    .code
                    .as_deref()
                    .map(|c| format!(" [{c}]"))
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "{}:{}:{} {}{code} {}",
                    d.path,
                    d.range.start.line,
                    d.range.start.column,
                    d.severity.as_str(),
                    d.message
                );
            }
            if f.freshness == Freshness::Unconfirmed {
                let _ = writeln!(
                    out,
                    "{}: the server did not confirm these diagnostics (it may still be analysing)",
                    f.path
                );
            }
        }
        for failure in &self.failures {
            let _ = writeln!(out, "{}: not checked: {}", failure.path, failure.error);
        }
        if self.left_out > 0 {
            let _ = writeln!(
                out,
                "{} more files were not checked (limit reached); name them to check them",
                self.left_out
            );
        }
        let _ = write!(
            out,
            "{} errors, {} warnings in {} files",
            self.count(Severity::Error),
            self.count(Severity::Warning),
            self.files.len()
        );
        out
    }
}

/// Checks `paths` (files, or directories whose files some server handles). An empty list means
/// the whole workspace.
pub async fn check(servers: &LanguageServers, paths: &[PathBuf]) -> CheckReport {
    let paths = if paths.is_empty() {
        vec![servers.root().to_path_buf()]
    } else {
        paths.to_vec()
    };
    let (files, errors, left_out) = servers.expand(&paths);
    let mut report = CheckReport {
        files: Vec::new(),
        failures: errors
            .into_iter()
            .map(|(p, e)| CheckFailure {
                path: crate::sanitize::one_line(&p.to_string_lossy()),
                error: e.to_string(),
            })
            .collect(),
        left_out,
    };
    for (path, result) in servers.diagnostics_of(&files).await {
        match result {
            Ok(d) => report.files.push(d),
            Err(e) => report.failures.push(CheckFailure {
                path: crate::sanitize::one_line(
                    &path
                        .strip_prefix(servers.root())
                        .unwrap_or(&path)
                        .to_string_lossy(),
                ),
                error: e.to_string(),
            }),
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_crosses_the_ipc_encoding_and_reads_as_json() {
        let r = CheckReport {
            files: Vec::new(),
            failures: vec![CheckFailure {
                path: "x.ghost".into(),
                error: "no language server is configured for x.ghost".into(),
            }],
            left_out: 3,
        };
        let bytes = postcard::to_stdvec(&r).expect("encode");
        assert_eq!(
            postcard::from_bytes::<CheckReport>(&bytes).expect("decode"),
            r
        );
        assert_eq!(r.exit_code(), 2);
        assert!(r
            .to_text()
            .contains("x.ghost: not checked: no language server"));
        assert!(r.to_text().contains("3 more files were not checked"));
    }
}
