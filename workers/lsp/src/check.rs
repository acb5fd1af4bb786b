//! `hanzo-dev lsp check [PATH…] [--json]` as a library function: start the servers the paths
//! need, collect every file's diagnostics, and say how it went. The CLI prints [`to_text`] or
//! the [`CheckReport`] as JSON (an API boundary), and exits with [`exit_code`].

use crate::servers::LanguageServers;
use crate::types::{CheckFailure, CheckReport, Freshness, Severity};
use std::fmt::Write;
use std::path::PathBuf;

/// 1 when a file has an error; otherwise 2 when something could not be checked (a CI job must
/// not pass because its language server is missing); 0 when all is clean.
pub fn exit_code(report: &CheckReport) -> i32 {
    if report.has_errors() {
        1
    } else if !report.failures.is_empty() || report.left_out > 0 {
        2
    } else {
        0
    }
}

/// One line per diagnostic (`path:line:col severity [code] message`), then the failures, then a
/// summary line. Every text in it was sanitised when it was received.
pub fn to_text(report: &CheckReport) -> String {
    let mut out = String::new();
    for f in &report.files {
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
    for failure in &report.failures {
        let _ = writeln!(out, "{}: not checked: {}", failure.path, failure.error);
    }
    if report.left_out > 0 {
        let _ = writeln!(
            out,
            "{} more files were not checked (limit reached); name them to check them",
            report.left_out
        );
    }
    let _ = write!(
        out,
        "{} errors, {} warnings in {} files",
        report.count(Severity::Error),
        report.count(Severity::Warning),
        report.files.len()
    );
    out
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
    fn an_unchecked_path_is_no_pass_and_is_named() {
        let r = CheckReport {
            files: Vec::new(),
            failures: vec![CheckFailure {
                path: "x.ghost".into(),
                error: "no language server is configured for x.ghost".into(),
            }],
            left_out: 3,
        };
        assert_eq!(exit_code(&r), 2);
        assert!(to_text(&r).contains("x.ghost: not checked: no language server"));
        assert!(to_text(&r).contains("3 more files were not checked"));
    }
}
