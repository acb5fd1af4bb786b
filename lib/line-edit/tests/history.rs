//! The persisted history against a hostile filesystem: the file is written by the supervisor
//! on the user's behalf, where a model's commands may have planted a symlink, a FIFO or a huge
//! file. Real files, links and FIFOs in a temporary directory.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

use hanzo_line_edit::{History, HistoryError};

fn sample() -> History {
    let mut h = History::new();
    for e in [
        "first",
        "two\nlines",
        "#starts with a hash",
        "back\\slash \\n literal",
        "é 日本 🦀",
    ] {
        h.push(e);
    }
    h
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("file exists")
        .permissions()
        .mode()
        & 0o777
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("readable dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect()
}

#[test]
fn save_then_load_round_trips_with_mode_0600() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("history");
    let h = sample();
    h.save(&path).expect("saved");
    assert_eq!(mode(&path), 0o600);
    assert_eq!(History::load(&path).expect("loaded"), h);
    // Replacing an existing file, even one left world-readable, leaves 0600 and no temp file.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let mut more = h.clone();
    more.push("third");
    more.save(&path).expect("saved again");
    assert_eq!(mode(&path), 0o600);
    assert_eq!(
        History::load(&path)
            .expect("loaded")
            .entries()
            .last()
            .map(String::as_str),
        Some("third")
    );
    assert!(
        leftovers(dir.path()).is_empty(),
        "{:?}",
        leftovers(dir.path())
    );
}

#[test]
fn a_missing_file_is_an_empty_history() {
    let dir = tempfile::tempdir().expect("tempdir");
    assert!(History::load(&dir.path().join("none"))
        .expect("no error")
        .is_empty());
}

#[test]
fn save_refuses_a_planted_symlink_and_leaves_its_target_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious\n").expect("victim written");
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let path = dir.path().join("history");
    symlink(&victim, &path).expect("symlink planted");

    let err = sample()
        .save(&path)
        .expect_err("a symlink target is refused");
    assert!(matches!(err, HistoryError::Symlink { .. }), "{err:?}");
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "precious\n"
    );
    assert_eq!(mode(&victim), 0o644);
    assert!(std::fs::symlink_metadata(&path)
        .expect("link")
        .file_type()
        .is_symlink());
    assert!(leftovers(dir.path()).is_empty());

    // A dangling link must not create the file it points to.
    let elsewhere = dir.path().join("created-through-link");
    let dangling = dir.path().join("history2");
    symlink(&elsewhere, &dangling).expect("dangling symlink planted");
    assert!(matches!(
        sample().save(&dangling),
        Err(HistoryError::Symlink { .. })
    ));
    assert!(!elsewhere.exists());
}

#[test]
fn save_refuses_a_symlinked_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let real = dir.path().join("real");
    std::fs::create_dir(&real).expect("dir");
    let link = dir.path().join("link");
    symlink(&real, &link).expect("dir symlink planted");
    let err = sample()
        .save(&link.join("history"))
        .expect_err("a symlinked parent is refused");
    assert!(matches!(err, HistoryError::Symlink { .. }), "{err:?}");
    assert_eq!(
        std::fs::read_dir(&real).expect("readable").count(),
        0,
        "nothing written through the link"
    );
}

#[test]
fn save_refuses_a_directory_or_fifo_target() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sub = dir.path().join("history");
    std::fs::create_dir(&sub).expect("dir");
    assert!(matches!(
        sample().save(&sub),
        Err(HistoryError::NotRegular { .. })
    ));
    let fifo = dir.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    assert!(matches!(
        sample().save(&fifo),
        Err(HistoryError::NotRegular { .. })
    ));
}

#[test]
fn load_refuses_symlinks_and_fifos_without_reading_or_hanging() {
    let dir = tempfile::tempdir().expect("tempdir");
    let secret = dir.path().join("id_rsa");
    std::fs::write(&secret, "-----BEGIN KEY-----\n").expect("secret");
    let path = dir.path().join("history");
    symlink(&secret, &path).expect("symlink planted");
    assert!(matches!(
        History::load(&path),
        Err(HistoryError::Symlink { .. })
    ));

    let fifo = dir.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    // No writer ever opens it: a blocking open would hang here.
    assert!(matches!(
        History::load(&fifo),
        Err(HistoryError::NotRegular { .. })
    ));
}

#[test]
fn load_keeps_the_newest_entries_within_the_caps() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("history");
    let mut body = String::from("# hanzo-dev input history v1\n");
    for i in 0..5000 {
        body.push_str(&format!("entry {i}\n"));
    }
    body.push_str(&"x".repeat(100_000));
    body.push('\n');
    body.push_str("last\n");
    std::fs::write(&path, &body).expect("written");

    let h = History::load(&path).expect("loaded");
    assert_eq!(h.len(), 1000);
    assert_eq!(
        h.entries().last().map(String::as_str),
        Some("last"),
        "the oversized entry is skipped"
    );
    assert_eq!(h.entries()[0], "entry 4001");

    // Only the newest part of an oversized file is read.
    let mut body = String::new();
    for i in 0..5000 {
        body.push_str(&format!("entry {i}\n"));
    }
    std::fs::write(&path, &body).expect("written");
    let small = History::load_with_limits(&path, 3, 16).expect("loaded");
    assert_eq!(small.entries(), ["entry 4997", "entry 4998", "entry 4999"]);
    assert!(small.entries().iter().all(|e| e.len() <= 16));
}

#[test]
fn the_editor_records_what_is_sent() {
    use hanzo_line_edit::{Action, Editor, InputMode, Key, KeyCode};
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("history");
    let mut e = Editor::with_history(InputMode::Default, History::load(&path).expect("empty"));
    let now = std::time::Instant::now();
    for c in "fix the bug".chars() {
        e.handle(Key::char(c), now);
    }
    assert_eq!(
        e.handle(Key::new(KeyCode::Enter), now),
        Action::Submit("fix the bug".into())
    );
    e.history().save(&path).expect("saved");
    let mut again = Editor::with_history(InputMode::Default, History::load(&path).expect("loaded"));
    again.handle(Key::new(KeyCode::Up), now);
    assert_eq!(again.text(), "fix the bug");
}
