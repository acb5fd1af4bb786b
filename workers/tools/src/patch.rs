//! `apply_patch`: multi-file edits as a unified diff.
//!
//! The accepted format is the unified diff `git diff` and `diff -u` produce:
//!
//! - Anything before a file's `--- ` line (`diff --git`, `index`, mode lines) is ignored.
//! - `--- a/PATH` then `+++ b/PATH` name the file; a leading `a/` / `b/` is stripped; a tab and
//!   what follows it (a timestamp) is ignored. `--- /dev/null` creates a file (it must not exist);
//!   `+++ /dev/null` deletes one (the hunk must match all of it).
//! - `@@ -L[,N] +L[,N] @@` starts a hunk; its lines begin with ` ` (context), `-` (removed) or
//!   `+` (added). An empty line inside a hunk counts as an empty context line.
//! - `\ No newline at end of file` after a line marks that line as the file's last, unterminated.
//! - Context and removed lines must match exactly. A hunk is looked for at its stated line first,
//!   then ever further above and below it (after the previous hunk), so line numbers may be off.
//! - Renames and binary patches are not supported: a patch whose `---` and `+++` name different
//!   files is refused (it would move content into or out of a file without either being checked
//!   as the other).
//! - Both paths are checked like every file tool's write (inside the workspace, not protected:
//!   no hunk may touch the git directory, hooks, or `.hanzo/`).
//!
//! Every file is checked and computed first; only when all hunks of all files apply is anything
//! written, so a patch that does not apply changes nothing.

use crate::files::{read_text, write_text, Deadline, Outcome, MAX_EDIT_BYTES};
use crate::paths::{Intent, Roots};
use serde::Deserialize;
use std::fs;
use std::path::PathBuf;

/// The `apply_patch` tool's input.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatchInput {
    /// A unified diff (`---`/`+++` headers and `@@` hunks), for one or more files.
    pub patch: String,
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Hunk {
    old_start: usize,
    old: Vec<String>,
    new: Vec<String>,
}

#[derive(Debug, PartialEq, Eq)]
struct FilePatch {
    old_path: Option<String>,
    new_path: Option<String>,
    hunks: Vec<Hunk>,
    /// `\ No newline at end of file` followed a line of the new side.
    new_no_eol: bool,
    /// … followed a line of the old side only.
    old_no_eol: bool,
}

fn header_path(rest: &str, prefix: &str) -> Option<String> {
    let p = rest.split('\t').next().unwrap_or(rest).trim_end();
    if p == "/dev/null" {
        return None;
    }
    Some(p.strip_prefix(prefix).unwrap_or(p).to_string())
}

fn parse(patch: &str) -> Result<Vec<FilePatch>, String> {
    let lines: Vec<&str> = patch.lines().collect();
    let mut files = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(old) = lines[i].strip_prefix("--- ") else {
            i += 1;
            continue;
        };
        let new = lines
            .get(i + 1)
            .and_then(|l| l.strip_prefix("+++ "))
            .ok_or_else(|| format!("line {}: `--- ` not followed by `+++ `", i + 1))?;
        let mut fp = FilePatch {
            old_path: header_path(old, "a/"),
            new_path: header_path(new, "b/"),
            hunks: Vec::new(),
            new_no_eol: false,
            old_no_eol: false,
        };
        if fp.old_path.is_none() && fp.new_path.is_none() {
            return Err(format!("line {}: both sides are /dev/null", i + 1));
        }
        i += 2;
        while i < lines.len() && lines[i].starts_with("@@") {
            let header = lines[i];
            let mut parts = header.split_whitespace().skip(1);
            let old_range = parts
                .next()
                .and_then(|r| r.strip_prefix('-'))
                .ok_or_else(|| format!("line {}: bad hunk header {header:?}", i + 1))?;
            let (old_start, old_count) = counts(old_range)
                .ok_or_else(|| format!("line {}: bad hunk header {header:?}", i + 1))?;
            let (_, new_count) = parts
                .next()
                .and_then(|r| r.strip_prefix('+'))
                .and_then(counts)
                .ok_or_else(|| format!("line {}: bad hunk header {header:?}", i + 1))?;
            let mut hunk = Hunk {
                old_start,
                ..Hunk::default()
            };
            i += 1;
            let mut last = ' ';
            while i < lines.len() && (hunk.old.len() < old_count || hunk.new.len() < new_count) {
                let line = lines[i];
                let (tag, text) = match line.chars().next() {
                    None => (' ', ""),
                    Some(c @ (' ' | '-' | '+')) => (c, &line[1..]),
                    Some('\\') => {
                        mark_no_eol(&mut fp, last);
                        i += 1;
                        continue;
                    }
                    Some(_) => {
                        return Err(format!("line {}: unexpected {line:?} in a hunk", i + 1))
                    }
                };
                match tag {
                    ' ' => {
                        hunk.old.push(text.to_string());
                        hunk.new.push(text.to_string());
                    }
                    '-' => hunk.old.push(text.to_string()),
                    _ => hunk.new.push(text.to_string()),
                }
                last = tag;
                i += 1;
            }
            if hunk.old.len() != old_count || hunk.new.len() != new_count {
                return Err(format!(
                    "hunk {header:?}: expected {old_count} old and {new_count} new lines, found {} \
                     and {}",
                    hunk.old.len(),
                    hunk.new.len()
                ));
            }
            if lines.get(i).is_some_and(|l| l.starts_with('\\')) {
                mark_no_eol(&mut fp, last);
                i += 1;
            }
            fp.hunks.push(hunk);
        }
        if fp.hunks.is_empty() {
            return Err(format!(
                "file {:?} has no hunks",
                fp.new_path.as_ref().or(fp.old_path.as_ref())
            ));
        }
        files.push(fp);
    }
    if files.is_empty() {
        return Err("no file in the patch (expected `--- a/PATH` / `+++ b/PATH` headers)".into());
    }
    Ok(files)
}

fn counts(range: &str) -> Option<(usize, usize)> {
    let mut it = range.split(',');
    let start = it.next()?.parse().ok()?;
    let count = match it.next() {
        Some(c) => c.parse().ok()?,
        None => 1,
    };
    Some((start, count))
}

fn mark_no_eol(fp: &mut FilePatch, last: char) {
    match last {
        '-' => fp.old_no_eol = true,
        _ => fp.new_no_eol = true,
    }
}

/// Find `needle` in `hay` at or after `from`, nearest to `want` first.
fn find_at(hay: &[String], needle: &[String], want: usize, from: usize) -> Option<usize> {
    if needle.is_empty() {
        return Some(want.clamp(from, hay.len()));
    }
    if needle.len() > hay.len() {
        return None;
    }
    let last = hay.len() - needle.len();
    let matches = |at: usize| at >= from && at <= last && hay[at..at + needle.len()] == *needle;
    let want = want.min(last);
    for d in 0..=hay.len() {
        if want >= d && matches(want - d) {
            return Some(want - d);
        }
        if matches(want + d) {
            return Some(want + d);
        }
        if want < d && want + d > last {
            break;
        }
    }
    None
}

enum Change {
    Write(PathBuf, String),
    Delete(PathBuf),
}

/// [`apply_patch_within`] with the default deadline ([`crate::files::DEFAULT_DEADLINE`]).
pub fn apply_patch(roots: &Roots, input: PatchInput) -> Outcome {
    apply_patch_within(roots, input, &Deadline::default())
}

/// The `apply_patch` tool; gives up with an error once `deadline` has passed.
pub fn apply_patch_within(roots: &Roots, input: PatchInput, deadline: &Deadline) -> Outcome {
    let files = parse(&input.patch)?;
    let mut changes = Vec::new();
    let mut summary = Vec::new();
    for fp in &files {
        deadline.check()?;
        let name = fp
            .new_path
            .as_deref()
            .or(fp.old_path.as_deref())
            .expect("parse refuses a patch with both sides /dev/null");
        // Both sides are checked as writes: the old side is the file that changes.
        let mut resolved = Vec::new();
        for side in [&fp.old_path, &fp.new_path].into_iter().flatten() {
            resolved.push(
                roots
                    .resolve(side, Intent::Write)
                    .map_err(|e| e.to_string())?,
            );
        }
        if let [old, new] = resolved.as_slice() {
            if old != new {
                return Err(format!(
                    "{name}: the patch renames {} to {}; renames are not supported (patch the \
                     file in place, or create the new file and delete the old one)",
                    fp.old_path.as_deref().unwrap_or_default(),
                    fp.new_path.as_deref().unwrap_or_default(),
                ));
            }
        }
        let path = resolved
            .pop()
            .expect("a file patch names at least one side");
        let (mut lines, had_eol) = match &fp.old_path {
            None => {
                if path.exists() {
                    return Err(format!(
                        "{name}: the patch creates it, but it already exists"
                    ));
                }
                (Vec::new(), true)
            }
            Some(_) => {
                let text = read_text(roots, &path, name, MAX_EDIT_BYTES)?;
                let eol = text.is_empty() || text.ends_with('\n');
                (text.lines().map(String::from).collect::<Vec<_>>(), eol)
            }
        };
        let mut from = 0usize;
        // Hunks apply in order; a shift from earlier hunks moves the expected place of later ones.
        let mut shift: isize = 0;
        for (n, h) in fp.hunks.iter().enumerate() {
            // `-N,M` names the hunk's first old line, N (1-based); a hunk with no old lines
            // (`-N,0`, a pure insertion) goes after line N, which is index N.
            let first = if h.old.is_empty() {
                h.old_start
            } else {
                h.old_start.saturating_sub(1)
            };
            let want = first.saturating_add_signed(shift);
            let at = find_at(&lines, &h.old, want, from).ok_or_else(|| {
                format!(
                    "{name}: hunk {} (at line {}) does not match the file; nothing was changed",
                    n + 1,
                    h.old_start
                )
            })?;
            lines.splice(at..at + h.old.len(), h.new.iter().cloned());
            from = at + h.new.len();
            // A `Vec`'s length never exceeds `isize::MAX`: `cast_signed` keeps its value.
            shift += h.new.len().cast_signed() - h.old.len().cast_signed();
        }
        if fp.new_path.is_none() {
            if !lines.is_empty() {
                return Err(format!(
                    "{name}: the patch deletes it, but its hunks do not cover the whole file"
                ));
            }
            changes.push(Change::Delete(path));
            summary.push(format!("deleted {name}"));
            continue;
        }
        let eol = if fp.new_no_eol {
            false
        } else {
            had_eol || fp.old_no_eol
        };
        let mut text = lines.join("\n");
        if eol && !lines.is_empty() {
            text.push('\n');
        }
        summary.push(format!(
            "{} {name}",
            if fp.old_path.is_none() {
                "created"
            } else {
                "patched"
            }
        ));
        changes.push(Change::Write(path, text));
    }
    deadline.check()?;
    for change in changes {
        match change {
            Change::Write(path, text) => {
                let shown = roots.display(&path);
                if let Some(parent) = path.parent() {
                    fs::create_dir_all(parent).map_err(|e| format!("{shown}: {e}"))?;
                }
                write_text(roots, &path, &shown, text.as_bytes())?;
            }
            Change::Delete(path) => {
                fs::remove_file(&path).map_err(|e| format!("{}: {e}", roots.display(&path)))?
            }
        }
    }
    Ok(summary.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> (tempfile::TempDir, Roots) {
        let d = tempfile::tempdir().expect("tempdir");
        let r = Roots::new(d.path(), &[]).expect("roots");
        (d, r)
    }

    fn apply(r: &Roots, patch: &str) -> Outcome {
        apply_patch(
            r,
            PatchInput {
                patch: patch.into(),
            },
        )
    }

    #[test]
    fn applies_multi_file_git_diff_with_create_and_delete() {
        let (d, r) = ws();
        fs::write(d.path().join("a.txt"), "one\ntwo\nthree\nfour\n").expect("write");
        fs::write(d.path().join("gone.txt"), "bye\n").expect("write");
        let patch = "diff --git a/a.txt b/a.txt\nindex 1..2 100644\n--- a/a.txt\n+++ b/a.txt\n\
                     @@ -2,2 +2,3 @@\n two\n-three\n+THREE\n+three and a half\n\
                     --- /dev/null\n+++ b/new/n.txt\n@@ -0,0 +1,2 @@\n+hello\n+world\n\
                     --- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n";
        assert_eq!(
            apply(&r, patch),
            Ok("patched a.txt\ncreated new/n.txt\ndeleted gone.txt".into())
        );
        assert_eq!(
            fs::read_to_string(d.path().join("a.txt")).expect("read"),
            "one\ntwo\nTHREE\nthree and a half\nfour\n"
        );
        assert_eq!(
            fs::read_to_string(d.path().join("new/n.txt")).expect("read"),
            "hello\nworld\n"
        );
        assert!(!d.path().join("gone.txt").exists());
    }

    #[test]
    fn hunks_are_found_when_line_numbers_are_off() {
        let (d, r) = ws();
        fs::write(d.path().join("f"), "x\ny\na\nb\nc\n").expect("write");
        let patch = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n+B\n";
        assert_eq!(apply(&r, patch), Ok("patched f".into()));
        assert_eq!(
            fs::read_to_string(d.path().join("f")).expect("read"),
            "x\ny\na\nB\nc\n"
        );
    }

    #[test]
    fn a_shrinking_hunk_moves_the_place_of_the_next_one_up() {
        // The second hunk's text occurs four times; only the shift left by the first hunk (two
        // lines fewer) picks the line it names, the original line 6.
        let (d, r) = ws();
        fs::write(d.path().join("f"), "a\nb\nc\nk\nk\nk\nk\n").expect("write");
        let patch = "--- a/f\n+++ b/f\n@@ -1,3 +1,1 @@\n a\n-b\n-c\n@@ -6,1 +4,1 @@\n-k\n+K\n";
        assert_eq!(apply(&r, patch), Ok("patched f".into()));
        assert_eq!(
            fs::read_to_string(d.path().join("f")).expect("read"),
            "a\nk\nk\nK\nk\n"
        );
    }

    #[test]
    fn pure_insertions_go_after_the_line_their_header_names() {
        // `diff -U0` of "a b c" against "Z a b X c d": insertions only, no context lines.
        let (d, r) = ws();
        fs::write(d.path().join("f"), "a\nb\nc\n").expect("write");
        let patch = "--- a/f\n+++ b/f\n@@ -0,0 +1 @@\n+Z\n@@ -2,0 +4 @@\n+X\n@@ -3,0 +6 @@\n+d\n";
        assert_eq!(apply(&r, patch), Ok("patched f".into()));
        assert_eq!(
            fs::read_to_string(d.path().join("f")).expect("read"),
            "Z\na\nb\nX\nc\nd\n"
        );
    }

    #[test]
    fn a_mismatch_changes_nothing() {
        let (d, r) = ws();
        fs::write(d.path().join("f"), "a\nb\n").expect("write");
        fs::write(d.path().join("g"), "c\n").expect("write");
        let patch =
            "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+A\n--- a/g\n+++ b/g\n@@ -1 +1 @@\n-zzz\n+Z\n";
        let e = apply(&r, patch).expect_err("mismatch");
        assert!(e.contains("g: hunk 1"), "{e}");
        assert_eq!(
            fs::read_to_string(d.path().join("f")).expect("read"),
            "a\nb\n"
        );
    }

    #[test]
    fn no_newline_marker_and_escape_refusal() {
        let (d, r) = ws();
        fs::write(d.path().join("f"), "a\n").expect("write");
        let patch = "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n\\ No newline at end of file\n";
        assert_eq!(apply(&r, patch), Ok("patched f".into()));
        assert_eq!(fs::read_to_string(d.path().join("f")).expect("read"), "b");
        let e = apply(&r, "--- /dev/null\n+++ b/../../evil\n@@ -0,0 +1 @@\n+x\n").expect_err("out");
        assert!(e.contains("`..`"), "{e}");
        assert!(apply(&r, "just text").is_err());
    }
}
