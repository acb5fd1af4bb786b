//! `glob` (file names) and `grep` (file contents). Both walk with the `ignore` crate, so
//! `.gitignore`, `.ignore` and `.git/info/exclude` are respected (also outside a git repository),
//! the `.git` directory is skipped, and symlinks are not followed (a link cannot lead the walk out
//! of the workspace).

use crate::files::{Deadline, Outcome};
use crate::paths::{Intent, OpenFor, Roots};
use grep_regex::RegexMatcherBuilder;
use grep_searcher::{sinks::Lossy, BinaryDetection, SearcherBuilder};
use ignore::{DirEntry, WalkBuilder};
use serde::Deserialize;
use std::fmt::Write as _;
use std::path::Path;

/// Paths `glob` lists when the call names no `max_results`.
pub const DEFAULT_GLOB_RESULTS: usize = 1000;
/// Matching lines `grep` shows when the call names no `max_matches`.
pub const DEFAULT_GREP_MATCHES: usize = 200;
/// Hard ceilings, whatever the model asks for.
pub const MAX_RESULTS: usize = 10_000;
/// Longest matching line `grep` shows in full.
pub const MAX_MATCH_LINE: usize = 500;

fn walker(root: &Path) -> impl Iterator<Item = DirEntry> {
    WalkBuilder::new(root)
        .hidden(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(|e| e.file_name() != ".git")
        .build()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
}

fn glob_matcher(pattern: &str) -> Result<globset::GlobMatcher, String> {
    globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| format!("bad glob {pattern:?}: {e}"))
}

/// The `glob` tool's input.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GlobInput {
    /// The glob to match paths against (`src/**/*.rs`), relative to `path`.
    pub pattern: String,
    /// The directory to search (default: the workspace root).
    pub path: Option<String>,
    /// Most paths to list (default [`DEFAULT_GLOB_RESULTS`], at most [`MAX_RESULTS`]).
    pub max_results: Option<usize>,
}

/// `base` must be a directory or a regular file (a FIFO or device is refused, not walked).
fn check_base(roots: &Roots, base: &Path) -> Result<(), String> {
    let shown = roots.display(base);
    let meta = std::fs::symlink_metadata(base).map_err(|e| format!("{shown}: {e}"))?;
    crate::files::refuse_special(&meta, &shown)
}

/// [`glob_within`] with the default deadline ([`crate::files::DEFAULT_DEADLINE`]).
pub fn glob(roots: &Roots, input: GlobInput) -> Outcome {
    glob_within(roots, input, &Deadline::default())
}

/// The `glob` tool; gives up with an error once `deadline` has passed.
pub fn glob_within(roots: &Roots, input: GlobInput, deadline: &Deadline) -> Outcome {
    let base = roots
        .resolve(input.path.as_deref().unwrap_or("."), Intent::Read)
        .map_err(|e| e.to_string())?;
    check_base(roots, &base)?;
    let matcher = glob_matcher(&input.pattern)?;
    let max = input
        .max_results
        .unwrap_or(DEFAULT_GLOB_RESULTS)
        .clamp(1, MAX_RESULTS);
    let mut found: Vec<String> = Vec::new();
    for e in walker(&base) {
        deadline.check()?;
        if e.path()
            .strip_prefix(&base)
            .is_ok_and(|rel| matcher.is_match(rel))
        {
            found.push(roots.display(e.path()));
        }
    }
    found.sort();
    let total = found.len();
    if total == 0 {
        return Ok(format!("no files match {:?}", input.pattern));
    }
    found.truncate(max);
    let mut out = found.join("\n");
    if total > max {
        let _ = write!(out, "\n[… {} more files not shown]", total - max);
    }
    Ok(out)
}

/// The `grep` tool's input.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrepInput {
    /// The regular expression (Rust regex syntax).
    pub pattern: String,
    /// The directory or file to search (default: the workspace root).
    pub path: Option<String>,
    /// Only files whose path matches this glob are searched.
    pub glob: Option<String>,
    /// Match regardless of case.
    #[serde(default)]
    pub case_insensitive: bool,
    /// Most matching lines to show (default [`DEFAULT_GREP_MATCHES`], at most [`MAX_RESULTS`]).
    pub max_matches: Option<usize>,
}

/// [`grep_within`] with the default deadline ([`crate::files::DEFAULT_DEADLINE`]).
pub fn grep(roots: &Roots, input: GrepInput) -> Outcome {
    grep_within(roots, input, &Deadline::default())
}

/// The `grep` tool; gives up with an error once `deadline` has passed.
pub fn grep_within(roots: &Roots, input: GrepInput, deadline: &Deadline) -> Outcome {
    let base = roots
        .resolve(input.path.as_deref().unwrap_or("."), Intent::Read)
        .map_err(|e| e.to_string())?;
    check_base(roots, &base)?;
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(input.case_insensitive)
        .build(&input.pattern)
        .map_err(|e| format!("bad regex {:?}: {e}", input.pattern))?;
    let only = input.glob.as_deref().map(glob_matcher).transpose()?;
    let max = input
        .max_matches
        .unwrap_or(DEFAULT_GREP_MATCHES)
        .clamp(1, MAX_RESULTS);
    let mut searcher = SearcherBuilder::new()
        .binary_detection(BinaryDetection::quit(0))
        .line_number(true)
        .build();
    let mut out = String::new();
    let mut count = 0usize;
    let mut more = false;
    // A single file given as `path` is searched on its own; a directory is walked.
    let files: Box<dyn Iterator<Item = std::path::PathBuf>> = if base.is_file() {
        Box::new(std::iter::once(base.clone()))
    } else {
        Box::new(walker(&base).map(|e| e.into_path()))
    };
    for file in files {
        deadline.check()?;
        if let Some(m) = &only {
            let rel = file.strip_prefix(&base).unwrap_or(&file);
            let name = file.file_name().map(Path::new).unwrap_or(rel);
            if !m.is_match(rel) && !m.is_match(name) {
                continue;
            }
        }
        let shown = roots.display(&file);
        // Opened like every file tool opens: regular files only, never through a symlink, never
        // blocking (a file swapped for a FIFO after the walk saw it is skipped, not waited on).
        let Ok(handle) = roots.open_file(&file, OpenFor::Read, &shown) else {
            continue;
        };
        let result = searcher.search_file(
            &matcher,
            &handle,
            Lossy(|line_number, line| {
                if count >= max {
                    more = true;
                    return Ok(false);
                }
                count += 1;
                let line = line.trim_end_matches(['\n', '\r']);
                let line = if line.chars().count() > MAX_MATCH_LINE {
                    let cut: String = line.chars().take(MAX_MATCH_LINE).collect();
                    format!("{cut} [… cut]")
                } else {
                    line.to_string()
                };
                let _ = writeln!(out, "{shown}:{line_number}:{line}");
                Ok(true)
            }),
        );
        // An unreadable file (permissions, a race with deletion) is skipped, as grep -s does.
        let _ = result;
        if more {
            break;
        }
    }
    if count == 0 {
        return Ok(format!("no matches for {:?}", input.pattern));
    }
    if more {
        let _ = write!(
            out,
            "[… stopped at {max} matches; narrow the pattern or path, or raise max_matches]"
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn tree() -> (tempfile::TempDir, Roots) {
        let d = tempfile::tempdir().expect("tempdir");
        let p = d.path();
        fs::create_dir_all(p.join("src/deep")).expect("mkdir");
        fs::create_dir_all(p.join("target")).expect("mkdir");
        fs::write(p.join(".gitignore"), "target/\n*.log\n").expect("write");
        fs::write(p.join("src/a.rs"), "fn main() {}\n// TODO one\n").expect("write");
        fs::write(p.join("src/deep/b.rs"), "// todo two\nfn b() {}\n").expect("write");
        fs::write(p.join("target/c.rs"), "// TODO ignored\n").expect("write");
        fs::write(p.join("x.log"), "TODO ignored\n").expect("write");
        fs::write(p.join("bin.dat"), b"TODO\0\0binary").expect("write");
        let r = Roots::new(p, &[]).expect("roots");
        (d, r)
    }

    #[test]
    fn glob_respects_gitignore() {
        let (_d, r) = tree();
        let out = glob(
            &r,
            GlobInput {
                pattern: "**/*.rs".into(),
                path: None,
                max_results: None,
            },
        );
        assert_eq!(out, Ok("src/a.rs\nsrc/deep/b.rs".into()));
        let out = glob(
            &r,
            GlobInput {
                pattern: "*.rs".into(),
                path: Some("src".into()),
                max_results: None,
            },
        );
        assert_eq!(out, Ok("src/a.rs".into()));
    }

    #[test]
    fn grep_finds_lines_respects_ignores_and_limits() {
        let (_d, r) = tree();
        let g = |pattern: &str, ci: bool, max: Option<usize>, only: Option<&str>| {
            grep(
                &r,
                GrepInput {
                    pattern: pattern.into(),
                    path: None,
                    glob: only.map(String::from),
                    case_insensitive: ci,
                    max_matches: max,
                },
            )
        };
        assert_eq!(
            g("TODO", false, None, None),
            Ok("src/a.rs:2:// TODO one\n".into())
        );
        let both = g("todo", true, None, None).expect("grep");
        assert!(
            both.contains("src/a.rs:2:") && both.contains("src/deep/b.rs:1:"),
            "{both}"
        );
        assert!(!both.contains("target") && !both.contains("x.log") && !both.contains("bin.dat"));
        let limited = g("todo", true, Some(1), None).expect("grep");
        assert_eq!(limited.lines().count(), 2, "{limited}");
        assert!(limited.contains("stopped at 1 matches"));
        assert_eq!(
            g("fn", false, None, Some("b.rs")),
            Ok("src/deep/b.rs:2:fn b() {}\n".into())
        );
        assert!(g("(", false, None, None)
            .expect_err("bad")
            .contains("bad regex"));
    }
}
