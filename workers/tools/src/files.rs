//! `read_file`, `write_file`, `edit_file` and `list_dir`.
//!
//! Every file is opened through [`Roots::open_file`]: regular files only (a FIFO, socket or
//! device is refused with an error naming its type), non-blocking, never through a symlink. Each
//! call also carries a [`Deadline`]; loops check it, and the worker abandons a call that passes
//! it (see `Tools::blocking`).

use crate::paths::{Intent, OpenFor, Roots};
use serde::Deserialize;
use std::fmt::Write as _;
use std::fs;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// How long one file tool call may take before it is abandoned with an error.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(30);
/// Most bytes `read_file` scans for lines (the shown text is capped at [`MAX_READ_BYTES`]).
pub const MAX_SCAN_BYTES: u64 = 64 * 1024 * 1024;
/// Largest file `edit_file` and `apply_patch` load.
pub const MAX_EDIT_BYTES: u64 = 16 * 1024 * 1024;

/// When a file tool call must give up.
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    at: Instant,
    limit: Duration,
}

impl Deadline {
    /// A deadline `limit` from now.
    pub fn after(limit: Duration) -> Deadline {
        Deadline {
            at: Instant::now() + limit,
            limit,
        }
    }

    /// The time the call was given, for the error message.
    pub fn limit(&self) -> Duration {
        self.limit
    }

    /// The error a tool returns when it ran out of time.
    pub fn message(limit: Duration) -> String {
        format!(
            "the tool did not finish within its deadline of {} ms and was abandoned; narrow the \
             path or pattern, or read a smaller part",
            limit.as_millis()
        )
    }

    /// `Err` once the deadline has passed.
    pub fn check(&self) -> Result<(), String> {
        if Instant::now() >= self.at {
            Err(Deadline::message(self.limit))
        } else {
            Ok(())
        }
    }
}

impl Default for Deadline {
    fn default() -> Self {
        Deadline::after(DEFAULT_DEADLINE)
    }
}

/// Largest amount of file text `read_file` returns in one call.
pub const MAX_READ_BYTES: usize = 256 * 1024;
/// Longest line `read_file` shows in full.
pub const MAX_LINE_CHARS: usize = 2000;
/// Most entries `list_dir` shows.
pub const MAX_DIR_ENTRIES: usize = 2000;
/// How much of a file's start is checked for NUL bytes to decide it is binary.
const BINARY_SNIFF: usize = 8192;

/// A file tool's answer: the text for the model, or the error for the model.
pub type Outcome = Result<String, String>;

/// The `read_file` tool's input.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadInput {
    /// The file, relative to the workspace (or absolute inside it).
    pub path: String,
    /// The first line to show, from 1 (default 1).
    pub offset: Option<usize>,
    /// How many lines to show (default: up to the output cap).
    pub limit: Option<usize>,
}

/// [`read_file_within`] with the default deadline ([`crate::files::DEFAULT_DEADLINE`]).
pub fn read_file(roots: &Roots, input: ReadInput) -> Outcome {
    read_file_within(roots, input, &Deadline::default())
}

/// The `read_file` tool; gives up with an error once `deadline` has passed.
pub fn read_file_within(roots: &Roots, input: ReadInput, deadline: &Deadline) -> Outcome {
    let path = roots
        .resolve(&input.path, Intent::Read)
        .map_err(|e| e.to_string())?;
    let shown = roots.display(&path);
    let meta = fs::symlink_metadata(&path).map_err(|e| format!("{shown}: {e}"))?;
    if meta.is_dir() {
        return Err(format!("{shown} is a directory; use list_dir"));
    }
    refuse_special(&meta, &shown)?;
    let file = roots.open_file(&path, OpenFor::Read, &shown)?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut bytes = Vec::new();
    let mut reader = file.take(MAX_SCAN_BYTES);
    let mut chunk = vec![0u8; 1 << 20];
    loop {
        deadline.check()?;
        let n = reader
            .read(&mut chunk)
            .map_err(|e| format!("{shown}: {e}"))?;
        if n == 0 {
            break;
        }
        bytes.extend_from_slice(&chunk[..n]);
        // Binary is decided on the first bytes: no need to read a huge binary file on.
        if bytes.len() >= BINARY_SNIFF && is_binary(&bytes) {
            break;
        }
    }
    if is_binary(&bytes) {
        return Ok(format!(
            "{shown} is a binary file ({size} bytes); not shown"
        ));
    }
    let scanned_all = (bytes.len() as u64) >= size;
    let text = String::from_utf8_lossy(&bytes);
    let first = input.offset.unwrap_or(1).max(1);
    let limit = input.limit.unwrap_or(usize::MAX);
    let total_lines = text.lines().count();
    let of_total = if scanned_all {
        format!("{total_lines}")
    } else {
        format!(
            "at least {total_lines} (only the first {MAX_SCAN_BYTES} bytes of {size} were read)"
        )
    };
    let mut out = String::new();
    let mut last_shown = first.saturating_sub(1);
    for (i, line) in text.lines().enumerate().skip(first - 1).take(limit) {
        let n = i + 1;
        let line = if line.chars().count() > MAX_LINE_CHARS {
            let cut: String = line.chars().take(MAX_LINE_CHARS).collect();
            format!("{cut} [… line cut at {MAX_LINE_CHARS} characters]")
        } else {
            line.to_string()
        };
        if out.len() + line.len() > MAX_READ_BYTES {
            let _ = write!(
                out,
                "[… truncated at {MAX_READ_BYTES} bytes: showed lines {first}-{last_shown} of \
                 {of_total}; read on with offset={}]",
                last_shown + 1
            );
            return Ok(out);
        }
        let _ = writeln!(out, "{n:>6}\t{line}");
        last_shown = n;
    }
    if out.is_empty() {
        if total_lines == 0 {
            return Ok(format!("{shown} is empty"));
        }
        return Err(format!(
            "{shown} has {of_total} lines; offset {first} is past the end"
        ));
    }
    Ok(out)
}

/// A FIFO, socket or device is refused before it is even opened (opening some devices does
/// something); [`Roots::open_file`] checks again on the open descriptor.
pub(crate) fn refuse_special(meta: &fs::Metadata, shown: &str) -> Result<(), String> {
    if meta.is_file() || meta.is_dir() {
        Ok(())
    } else {
        Err(format!(
            "{shown} is {}; the file tools read and write regular files only",
            crate::paths::describe_type(meta)
        ))
    }
}

/// The whole of a (regular) file as text, for tools that rewrite it; refused above `max` bytes.
pub(crate) fn read_text(
    roots: &Roots,
    path: &std::path::Path,
    shown: &str,
    max: u64,
) -> Result<String, String> {
    if let Ok(meta) = fs::symlink_metadata(path) {
        if meta.is_dir() {
            return Err(format!("{shown} is a directory"));
        }
        refuse_special(&meta, shown)?;
    }
    let file = roots.open_file(path, OpenFor::Read, shown)?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    if size > max {
        return Err(format!(
            "{shown} is {size} bytes; files above {max} bytes are not edited in place (write a new file instead)"
        ));
    }
    let mut text = String::new();
    file.take(max + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("{shown}: {e}"))?;
    Ok(text)
}

/// Replaces the content of a (regular) file, created if missing, never through a symlink.
pub(crate) fn write_text(
    roots: &Roots,
    path: &std::path::Path,
    shown: &str,
    text: &[u8],
) -> Result<(), String> {
    if let Ok(meta) = fs::symlink_metadata(path) {
        if meta.is_dir() {
            return Err(format!("{shown} is a directory"));
        }
        refuse_special(&meta, shown)?;
    }
    let mut file = roots.open_file(path, OpenFor::Write, shown)?;
    file.set_len(0).map_err(|e| format!("{shown}: {e}"))?;
    file.write_all(text).map_err(|e| format!("{shown}: {e}"))
}

/// NUL bytes near the start mean binary, as git and grep decide.
pub fn is_binary(bytes: &[u8]) -> bool {
    bytes[..bytes.len().min(BINARY_SNIFF)].contains(&0)
}

/// The `write_file` tool's input.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteInput {
    /// The file, relative to the workspace (or absolute inside it).
    pub path: String,
    /// The file's whole new content.
    pub content: String,
}

/// [`write_file_within`] with the default deadline ([`crate::files::DEFAULT_DEADLINE`]).
pub fn write_file(roots: &Roots, input: WriteInput) -> Outcome {
    write_file_within(roots, input, &Deadline::default())
}

/// The `write_file` tool; gives up with an error once `deadline` has passed.
pub fn write_file_within(roots: &Roots, input: WriteInput, deadline: &Deadline) -> Outcome {
    let path = roots
        .resolve(&input.path, Intent::Write)
        .map_err(|e| e.to_string())?;
    let shown = roots.display(&path);
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(|e| format!("{shown}: creating parents: {e}"))?;
    }
    deadline.check()?;
    write_text(roots, &path, &shown, input.content.as_bytes())?;
    Ok(format!("wrote {} bytes to {shown}", input.content.len()))
}

/// The `edit_file` tool's input.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditInput {
    /// The file, relative to the workspace (or absolute inside it).
    pub path: String,
    /// The exact text to replace, whitespace included.
    pub old_string: String,
    /// The text to put in its place.
    pub new_string: String,
    /// Replace every occurrence instead of failing when there are several.
    #[serde(default)]
    pub replace_all: bool,
}

/// [`edit_file_within`] with the default deadline ([`crate::files::DEFAULT_DEADLINE`]).
pub fn edit_file(roots: &Roots, input: EditInput) -> Outcome {
    edit_file_within(roots, input, &Deadline::default())
}

/// The `edit_file` tool; gives up with an error once `deadline` has passed.
pub fn edit_file_within(roots: &Roots, input: EditInput, deadline: &Deadline) -> Outcome {
    let path = roots
        .resolve(&input.path, Intent::Write)
        .map_err(|e| e.to_string())?;
    let shown = roots.display(&path);
    if input.old_string.is_empty() {
        return Err("old_string is empty; use write_file to create a file".to_string());
    }
    if input.old_string == input.new_string {
        return Err("old_string and new_string are the same; nothing to change".to_string());
    }
    let text = read_text(roots, &path, &shown, MAX_EDIT_BYTES)?;
    deadline.check()?;
    let count = text.matches(&input.old_string).count();
    if count == 0 {
        return Err(format!("old_string not found in {shown}"));
    }
    if count > 1 && !input.replace_all {
        return Err(format!(
            "old_string occurs {count} times in {shown}; add surrounding context to make it \
             unique, or set replace_all"
        ));
    }
    let new = if input.replace_all {
        text.replace(&input.old_string, &input.new_string)
    } else {
        text.replacen(&input.old_string, &input.new_string, 1)
    };
    deadline.check()?;
    write_text(roots, &path, &shown, new.as_bytes())?;
    Ok(format!(
        "replaced {count} occurrence{} in {shown}",
        if count == 1 { "" } else { "s" }
    ))
}

/// The `list_dir` tool's input.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ListInput {
    /// The directory (default: the workspace root).
    #[serde(default)]
    pub path: Option<String>,
}

/// [`list_dir_within`] with the default deadline ([`crate::files::DEFAULT_DEADLINE`]).
pub fn list_dir(roots: &Roots, input: ListInput) -> Outcome {
    list_dir_within(roots, input, &Deadline::default())
}

/// The `list_dir` tool; gives up with an error once `deadline` has passed.
pub fn list_dir_within(roots: &Roots, input: ListInput, deadline: &Deadline) -> Outcome {
    let path = roots
        .resolve(input.path.as_deref().unwrap_or("."), Intent::Read)
        .map_err(|e| e.to_string())?;
    let shown = roots.display(&path);
    let meta = fs::metadata(&path).map_err(|e| format!("{shown}: {e}"))?;
    if !meta.is_dir() {
        return Err(format!(
            "{shown} is {}, not a directory; use read_file for files",
            if meta.is_file() {
                "a file"
            } else {
                crate::paths::describe_type(&meta)
            }
        ));
    }
    let mut entries = Vec::new();
    for e in fs::read_dir(&path).map_err(|e| format!("{shown}: {e}"))? {
        deadline.check()?;
        let Ok(e) = e else { continue };
        entries.push(e);
    }
    let mut entries: Vec<String> = entries
        .into_iter()
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            match e.file_type() {
                Ok(t) if t.is_symlink() => format!("{name}@"),
                Ok(t) if t.is_dir() => format!("{name}/"),
                _ => name,
            }
        })
        .collect();
    entries.sort();
    let total = entries.len();
    let mut out = entries
        .into_iter()
        .take(MAX_DIR_ENTRIES)
        .collect::<Vec<_>>()
        .join("\n");
    if total > MAX_DIR_ENTRIES {
        let _ = write!(
            out,
            "\n[… {} more entries not shown]",
            total - MAX_DIR_ENTRIES
        );
    }
    if total == 0 {
        return Ok(format!("{shown} is empty"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> (tempfile::TempDir, Roots) {
        let d = tempfile::tempdir().expect("tempdir");
        let r = Roots::new(d.path(), &[]).expect("roots");
        (d, r)
    }

    fn read(r: &Roots, path: &str, offset: Option<usize>, limit: Option<usize>) -> Outcome {
        read_file(
            r,
            ReadInput {
                path: path.into(),
                offset,
                limit,
            },
        )
    }

    #[test]
    fn read_numbers_lines_and_honours_ranges() {
        let (d, r) = ws();
        fs::write(d.path().join("f"), "a\nb\nc\nd\n").expect("write");
        assert_eq!(
            read(&r, "f", None, None),
            Ok("     1\ta\n     2\tb\n     3\tc\n     4\td\n".into())
        );
        assert_eq!(
            read(&r, "f", Some(2), Some(2)),
            Ok("     2\tb\n     3\tc\n".into())
        );
        assert!(read(&r, "f", Some(9), None)
            .expect_err("past end")
            .contains("past the end"));
    }

    #[test]
    fn read_caps_size_with_a_marker_and_detects_binary() {
        let (d, r) = ws();
        let line = "x".repeat(1000);
        let big = (0..1000)
            .map(|_| line.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        fs::write(d.path().join("big"), big).expect("write");
        let out = read(&r, "big", None, None).expect("read");
        assert!(out.len() <= MAX_READ_BYTES + 200);
        assert!(
            out.contains("[… truncated at"),
            "{}",
            &out[out.len() - 200..]
        );
        assert!(out.contains("of 1000; read on with offset="));
        fs::write(d.path().join("bin"), b"\x7fELF\0\0\x01").expect("write");
        assert_eq!(
            read(&r, "bin", None, None),
            Ok("bin is a binary file (7 bytes); not shown".into())
        );
    }

    #[test]
    fn write_creates_parents_and_refuses_outside() {
        let (d, r) = ws();
        let out = write_file(
            &r,
            WriteInput {
                path: "a/b/c.txt".into(),
                content: "hi".into(),
            },
        );
        assert_eq!(out, Ok("wrote 2 bytes to a/b/c.txt".into()));
        assert_eq!(
            fs::read_to_string(d.path().join("a/b/c.txt")).expect("read"),
            "hi"
        );
        let e = write_file(
            &r,
            WriteInput {
                path: "../escape".into(),
                content: "x".into(),
            },
        )
        .expect_err("refused");
        assert!(e.contains("`..`"), "{e}");
    }

    #[test]
    fn edit_requires_a_unique_match_unless_replace_all() {
        let (d, r) = ws();
        let f = d.path().join("e");
        fs::write(&f, "one two one").expect("write");
        let edit = |old: &str, new: &str, all: bool| {
            edit_file(
                &r,
                EditInput {
                    path: "e".into(),
                    old_string: old.into(),
                    new_string: new.into(),
                    replace_all: all,
                },
            )
        };
        assert_eq!(
            edit("three", "3", false),
            Err("old_string not found in e".into())
        );
        let e = edit("one", "1", false).expect_err("ambiguous");
        assert!(e.contains("occurs 2 times"), "{e}");
        assert_eq!(fs::read_to_string(&f).expect("read"), "one two one");
        assert_eq!(
            edit("two", "2", false),
            Ok("replaced 1 occurrence in e".into())
        );
        assert_eq!(
            edit("one", "1", true),
            Ok("replaced 2 occurrences in e".into())
        );
        assert_eq!(fs::read_to_string(&f).expect("read"), "1 2 1");
        assert!(edit("", "x", false).is_err());
    }

    #[test]
    fn list_marks_directories_and_symlinks() {
        let (d, r) = ws();
        fs::create_dir(d.path().join("dir")).expect("mkdir");
        fs::write(d.path().join("file"), "").expect("write");
        std::os::unix::fs::symlink("file", d.path().join("link")).expect("symlink");
        assert_eq!(
            list_dir(&r, ListInput::default()),
            Ok("dir/\nfile\nlink@".into())
        );
    }
}
