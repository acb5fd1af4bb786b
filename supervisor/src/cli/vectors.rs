//! `hanzo-dev vectors FILE…`: run test-vector files; one line per failing case, then
//! `N passed, M failed`. Exit 0 all pass, 1 any fail, 2 a file unreadable, malformed or of an
//! unknown domain.

use super::exit;
use crate::vectors::{run_file, CaseResult};
use std::path::PathBuf;

/// What `hanzo-dev vectors` takes.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Vector files, or directories whose `*.json` files are all run.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// One JSON object per case: {"domain","name","pass","detail"}.
    #[arg(long)]
    pub json: bool,
}

fn expand(paths: &[PathBuf]) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(p)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.extension().is_some_and(|x| x == "json"))
                .collect();
            files.sort();
            out.extend(files);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// Runs `hanzo-dev vectors`; returns the exit code (1 when a case fails, 2 when a file cannot be
/// run).
pub fn run(args: &Args) -> anyhow::Result<i32> {
    let files = match expand(&args.files) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(exit::USAGE);
        }
    };
    let mut results: Vec<CaseResult> = Vec::new();
    for f in &files {
        match run_file(f) {
            Ok(r) => results.extend(r),
            Err(e) => {
                eprintln!("error: {e}");
                return Ok(exit::USAGE);
            }
        }
    }
    let failed = results.iter().filter(|r| !r.pass).count();
    let code = if failed == 0 { exit::OK } else { exit::FAILED };
    match print_results(&results, failed, args.json) {
        // A reader that stops early (`| head`) is not an error of ours.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(code),
        Err(e) => Err(e.into()),
        Ok(()) => Ok(code),
    }
}

fn print_results(results: &[CaseResult], failed: usize, json: bool) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for r in results {
        if json {
            writeln!(
                out,
                "{}",
                serde_json::to_string(r).map_err(std::io::Error::other)?
            )?;
        } else if !r.pass {
            writeln!(out, "FAIL {} / {}: {}", r.domain, r.name, r.detail)?;
        }
    }
    writeln!(out, "{} passed, {} failed", results.len() - failed, failed)?;
    out.flush()
}
