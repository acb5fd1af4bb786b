//! `hanzo-dev vectors`: runs test-vector files (format: `../shared/test-vectors.md`, extended in
//! `test-vectors/README.md`) against the real implementation.
//!
//! Each domain has one module here with `fn run(case: &Value) -> Result<(), String>`; `Err` carries
//! the difference between expected and actual in one line. The modules call the same functions the
//! product uses, never a copy.

use serde_json::Value;
use std::path::Path;

mod backoff;
mod config_merge;
mod ipc_frames;
mod mcp_normalization;
mod oauth_pkce;
mod permission_policy;
mod session_compaction;
mod sse;

/// The result of one case.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CaseResult {
    /// The file's domain (`ipc-frames`, `permission-policy`, …).
    pub domain: String,
    /// The case's `name`, or `case #N` (its index) when it has none.
    pub name: String,
    /// Whether the implementation gave the expected result.
    pub pass: bool,
    /// Expected against actual, in one line, when the case failed; empty when it passed.
    pub detail: String,
}

/// Why a file could not be run at all (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file could not be read.
    #[error("{path}: cannot read: {err}")]
    Unreadable {
        /// The file, as given.
        path: String,
        /// The system's error.
        err: std::io::Error,
    },
    /// The file is not JSON.
    #[error("{path}: not valid JSON: {err}")]
    Malformed {
        /// The file, as given.
        path: String,
        /// Where and why parsing stopped.
        err: serde_json::Error,
    },
    /// The JSON lacks the envelope's `domain` string or `cases` array.
    #[error("{path}: {what}")]
    BadEnvelope {
        /// The file, as given.
        path: String,
        /// Which key is missing.
        what: String,
    },
    /// The file's domain is not one this build can run.
    #[error("{path}: unknown domain {domain:?} (known: {known})")]
    UnknownDomain {
        /// The file, as given.
        path: String,
        /// The domain the file names.
        domain: String,
        /// The domains this build runs, comma-separated.
        known: String,
    },
}

type CaseFn = fn(&Value) -> Result<(), String>;

/// Every domain this build can run.
pub const DOMAINS: &[(&str, CaseFn)] = &[
    ("ipc-frames", ipc_frames::run),
    ("backoff-timing", backoff::run),
    ("sse-frames", sse::run),
    ("permission-policy", permission_policy::run),
    ("config-merge", config_merge::run),
    ("session-compaction", session_compaction::run),
    ("oauth-pkce", oauth_pkce::run),
    ("mcp-normalization", mcp_normalization::run),
];

fn domain_fn(domain: &str) -> Option<CaseFn> {
    DOMAINS.iter().find(|(d, _)| *d == domain).map(|(_, f)| *f)
}

/// Load and run one file. A case that panics is a failed case, not a crashed runner.
pub fn run_file(path: &Path) -> Result<Vec<CaseResult>, FileError> {
    let p = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|err| FileError::Unreadable {
        path: p.clone(),
        err,
    })?;
    let doc: Value = serde_json::from_str(&text).map_err(|err| FileError::Malformed {
        path: p.clone(),
        err,
    })?;
    let domain =
        doc.get("domain")
            .and_then(Value::as_str)
            .ok_or_else(|| FileError::BadEnvelope {
                path: p.clone(),
                what: "missing string key \"domain\"".into(),
            })?;
    let cases =
        doc.get("cases")
            .and_then(Value::as_array)
            .ok_or_else(|| FileError::BadEnvelope {
                path: p.clone(),
                what: "missing array key \"cases\"".into(),
            })?;
    let run = domain_fn(domain).ok_or_else(|| FileError::UnknownDomain {
        path: p.clone(),
        domain: domain.to_string(),
        known: DOMAINS
            .iter()
            .map(|(d, _)| *d)
            .collect::<Vec<_>>()
            .join(", "),
    })?;
    let mut out = Vec::with_capacity(cases.len());
    for (i, case) in cases.iter().enumerate() {
        let name = case
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| format!("case #{i}"));
        let result = match std::panic::catch_unwind(|| run(case)) {
            Ok(r) => r,
            Err(_) => Err("the implementation panicked on this case".to_string()),
        };
        out.push(CaseResult {
            domain: domain.to_string(),
            name,
            pass: result.is_ok(),
            detail: result.err().unwrap_or_default(),
        });
    }
    Ok(out)
}

// ---- helpers shared by the domain modules ----

pub(crate) fn field<'a>(case: &'a Value, key: &str) -> Result<&'a Value, String> {
    case.get(key)
        .ok_or_else(|| format!("malformed case: missing key {key:?}"))
}

pub(crate) fn str_field<'a>(case: &'a Value, key: &str) -> Result<&'a str, String> {
    field(case, key)?
        .as_str()
        .ok_or_else(|| format!("malformed case: {key:?} must be a string"))
}

pub(crate) fn u64_field(case: &Value, key: &str) -> Result<u64, String> {
    field(case, key)?
        .as_u64()
        .ok_or_else(|| format!("malformed case: {key:?} must be a non-negative integer"))
}

pub(crate) fn hex_decode(s: &str) -> Result<Vec<u8>, String> {
    if !s.len().is_multiple_of(2) {
        return Err(format!("malformed case: odd-length hex {s:?}"));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&s[i..i + 2], 16)
                .map_err(|_| format!("malformed case: bad hex {s:?}"))
        })
        .collect()
}

pub(crate) fn hex_encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
