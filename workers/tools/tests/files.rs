//! File tools against files that are not what they seem: FIFOs, sockets and devices in the
//! workspace, symlinks to `/dev/zero`, huge (sparse) files, directories given as files, a
//! deadline that has passed, and writes that would plant code a later `git` runs. Real files,
//! through `Tools::run`, unconfined (confinement is `escape.rs`'s job). A hang here is the bug:
//! every test must return, and nextest's 5-minute limit would name the one that did not.

use hanzo_ipc::roles::tools::{ToolCall, ToolResult};
use hanzo_policy::profile::CommandLimits;
use hanzo_tools::Tools;
use serde_json::{json, Value};
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;

struct Fixture {
    ws: tempfile::TempDir,
    _run: tempfile::TempDir,
    tools: Tools,
}

fn fixture() -> Fixture {
    let ws = tempfile::tempdir().expect("tempdir");
    let run = tempfile::tempdir().expect("tempdir");
    let tools = Tools::new(ws.path(), run.path(), &[], &CommandLimits::default()).expect("tools");
    Fixture {
        ws,
        _run: run,
        tools,
    }
}

async fn call(t: &Tools, name: &str, input: Value) -> ToolResult {
    t.run(&ToolCall {
        id: "f".into(),
        name: name.into(),
        input: input.to_string(),
    })
    .await
}

fn error(r: &ToolResult) -> &str {
    assert!(r.is_error, "expected an error, got {r:?}");
    r.error.as_deref().unwrap_or("")
}

fn mkfifo(p: &Path) {
    nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o644)).expect("mkfifo");
}

#[tokio::test]
async fn a_fifo_is_refused_by_every_tool_without_hanging() {
    let f = fixture();
    mkfifo(&f.ws.path().join("pipe"));
    std::fs::write(f.ws.path().join("real.txt"), "needle\n").expect("write");
    let r = call(&f.tools, "read_file", json!({"path": "pipe"})).await;
    assert!(error(&r).contains("pipe is a FIFO"), "{r:?}");
    assert!(error(&r).contains("regular files only"), "{r:?}");
    let r = call(
        &f.tools,
        "write_file",
        json!({"path": "pipe", "content": "x"}),
    )
    .await;
    assert!(error(&r).contains("FIFO"), "{r:?}");
    let r = call(
        &f.tools,
        "edit_file",
        json!({"path": "pipe", "old_string": "a", "new_string": "b"}),
    )
    .await;
    assert!(error(&r).contains("FIFO"), "{r:?}");
    let r = call(
        &f.tools,
        "grep",
        json!({"pattern": "needle", "path": "pipe"}),
    )
    .await;
    assert!(error(&r).contains("FIFO"), "{r:?}");
    let r = call(
        &f.tools,
        "apply_patch",
        json!({"patch": "--- a/pipe\n+++ b/pipe\n@@ -1 +1 @@\n-a\n+b\n"}),
    )
    .await;
    assert!(error(&r).contains("FIFO"), "{r:?}");
    // Walking past it works, and finds the real file.
    let r = call(&f.tools, "grep", json!({"pattern": "needle"})).await;
    assert_eq!(r.output, "real.txt:1:needle\n", "{r:?}");
    let r = call(&f.tools, "list_dir", json!({"path": "pipe"})).await;
    assert!(error(&r).contains("not a directory"), "{r:?}");
}

#[tokio::test]
async fn devices_and_sockets_in_the_workspace_are_refused() {
    let f = fixture();
    let ws = f.ws.path();
    // A character device with /dev/zero's numbers, made in the workspace (the tests run as
    // root, which may mknod): reading it would never end.
    nix::sys::stat::mknod(
        &ws.join("zero"),
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o644),
        nix::sys::stat::makedev(1, 5),
    )
    .expect("mknod (the tests run as root)");
    let r = call(&f.tools, "read_file", json!({"path": "zero"})).await;
    assert!(error(&r).contains("zero is a character device"), "{r:?}");
    let r = call(
        &f.tools,
        "write_file",
        json!({"path": "zero", "content": "x"}),
    )
    .await;
    assert!(error(&r).contains("character device"), "{r:?}");
    let _listener = std::os::unix::net::UnixListener::bind(ws.join("sock")).expect("bind");
    let r = call(&f.tools, "read_file", json!({"path": "sock"})).await;
    assert!(error(&r).contains("sock is a socket"), "{r:?}");
    // A symlink to the real /dev/zero leads outside the workspace.
    symlink("/dev/zero", ws.join("dz")).expect("symlink");
    let r = call(&f.tools, "read_file", json!({"path": "dz"})).await;
    assert!(error(&r).contains("symlink leads outside"), "{r:?}");
    let r = call(&f.tools, "grep", json!({"pattern": "x", "path": "dz"})).await;
    assert!(error(&r).contains("symlink leads outside"), "{r:?}");
}

#[tokio::test]
async fn a_huge_file_is_read_in_part_and_a_sparse_one_is_binary() {
    let f = fixture();
    let ws = f.ws.path();
    // 8 GiB of zeros, costing no disk: binary, and decided on its first bytes.
    let sparse = std::fs::File::create(ws.join("sparse.img")).expect("create");
    sparse.set_len(8 << 30).expect("set_len");
    let r = call(&f.tools, "read_file", json!({"path": "sparse.img"})).await;
    assert_eq!(
        r,
        ToolResult::ok("sparse.img is a binary file (8589934592 bytes); not shown")
    );
    // Text followed by a sparse tail beyond what read_file scans.
    let text: String = (1..=2000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(ws.join("big.log"), &text).expect("write");
    let big = std::fs::OpenOptions::new()
        .append(true)
        .open(ws.join("big.log"))
        .expect("open");
    big.set_len(text.len() as u64 + (1 << 30)).expect("set_len");
    let r = call(
        &f.tools,
        "read_file",
        json!({"path": "big.log", "offset": 1999, "limit": 2}),
    )
    .await;
    assert_eq!(r.output, "  1999\tline 1999\n  2000\tline 2000\n", "{r:?}");
    // Lines are counted in the part that was read, and the answer says so.
    let size = text.len() as u64 + (1 << 30);
    let r = call(
        &f.tools,
        "read_file",
        json!({"path": "big.log", "offset": 5000}),
    )
    .await;
    let e = error(&r);
    assert!(
        e.contains("has at least 2001")
            && e.contains(&format!(
                "only the first 67108864 bytes of {size} were read"
            )),
        "{e}"
    );
    let r = call(
        &f.tools,
        "edit_file",
        json!({"path": "big.log", "old_string": "line 1\n", "new_string": "x"}),
    )
    .await;
    assert!(error(&r).contains("not edited in place"), "{r:?}");
}

#[tokio::test]
async fn a_directory_given_as_a_file_is_an_error_naming_it() {
    let f = fixture();
    std::fs::create_dir(f.ws.path().join("dir")).expect("mkdir");
    std::fs::write(f.ws.path().join("file"), "x\n").expect("write");
    let r = call(&f.tools, "read_file", json!({"path": "dir"})).await;
    assert_eq!(error(&r), "dir is a directory; use list_dir");
    let r = call(
        &f.tools,
        "write_file",
        json!({"path": "dir", "content": "x"}),
    )
    .await;
    assert!(error(&r).contains("dir is a directory"), "{r:?}");
    let r = call(
        &f.tools,
        "edit_file",
        json!({"path": "dir", "old_string": "a", "new_string": "b"}),
    )
    .await;
    assert!(error(&r).contains("dir is a directory"), "{r:?}");
    let r = call(
        &f.tools,
        "apply_patch",
        json!({"patch": "--- a/dir\n+++ b/dir\n@@ -1 +1 @@\n-a\n+b\n"}),
    )
    .await;
    assert!(error(&r).contains("dir is a directory"), "{r:?}");
    let r = call(&f.tools, "list_dir", json!({"path": "file"})).await;
    assert!(
        error(&r).contains("file is a file, not a directory"),
        "{r:?}"
    );
    assert!(f.ws.path().join("dir").is_dir());
}

#[tokio::test]
async fn every_file_tool_gives_up_at_its_deadline_naming_it() {
    let ws = tempfile::tempdir().expect("tempdir");
    let run = tempfile::tempdir().expect("tempdir");
    std::fs::write(ws.path().join("f.txt"), "a\n").expect("write");
    // A deadline that has already passed: each tool's first check fires, whatever the clock.
    let tools = Tools::new(ws.path(), run.path(), &[], &CommandLimits::default())
        .expect("tools")
        .with_file_deadline(Duration::ZERO);
    for (tool, input) in [
        ("read_file", json!({"path": "f.txt"})),
        ("write_file", json!({"path": "g.txt", "content": "x"})),
        (
            "edit_file",
            json!({"path": "f.txt", "old_string": "a", "new_string": "b"}),
        ),
        ("list_dir", json!({})),
        ("glob", json!({"pattern": "*"})),
        ("grep", json!({"pattern": "a"})),
        (
            "apply_patch",
            json!({"patch": "--- a/f.txt\n+++ b/f.txt\n@@ -1 +1 @@\n-a\n+b\n"}),
        ),
    ] {
        let r = call(&tools, tool, input).await;
        assert!(error(&r).contains("deadline of 0 ms"), "{tool}: {r:?}");
    }
    assert_eq!(
        std::fs::read_to_string(ws.path().join("f.txt")).expect("read"),
        "a\n",
        "nothing changed"
    );
    assert!(!ws.path().join("g.txt").exists());
}

#[tokio::test]
async fn a_symlink_swapped_in_after_the_check_is_not_followed() {
    // `open_file` is what every tool opens with; give it a path whose last component became a
    // symlink to a file outside after `resolve` saw a regular file.
    let f = fixture();
    let outside = tempfile::tempdir().expect("tempdir");
    let secret = outside.path().join("secret");
    std::fs::write(&secret, "top secret\n").expect("write");
    let p = f.ws.path().join("note.txt");
    std::fs::write(&p, "hello\n").expect("write");
    let resolved = f
        .tools
        .roots()
        .resolve("note.txt", hanzo_tools::paths::Intent::Write)
        .expect("resolves");
    std::fs::remove_file(&p).expect("rm");
    symlink(&secret, &p).expect("symlink");
    let e = f
        .tools
        .roots()
        .open_file(&resolved, hanzo_tools::paths::OpenFor::Write, "note.txt")
        .expect_err("refused");
    assert!(e.contains("symlink appeared"), "{e}");
    assert_eq!(
        std::fs::read_to_string(&secret).expect("read"),
        "top secret\n"
    );
    // So is a directory on the way.
    std::fs::remove_file(&p).expect("rm");
    std::fs::create_dir(f.ws.path().join("d")).expect("mkdir");
    let inner = f
        .tools
        .roots()
        .resolve("d/x.txt", hanzo_tools::paths::Intent::Write)
        .expect("resolves");
    std::fs::remove_dir(f.ws.path().join("d")).expect("rmdir");
    symlink(outside.path(), f.ws.path().join("d")).expect("symlink");
    let e = f
        .tools
        .roots()
        .open_file(&inner, hanzo_tools::paths::OpenFor::Write, "d/x.txt")
        .expect_err("refused");
    assert!(e.contains("symlink appeared"), "{e}");
    assert!(!outside.path().join("x.txt").exists());
}

#[tokio::test]
async fn writes_that_plant_code_for_a_later_git_are_refused() {
    let f = fixture();
    let ws = f.ws.path();
    let git = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(ws)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .status()
        .expect("git init");
    assert!(git.success());
    std::fs::write(
        ws.join(".git/config"),
        "[core]\n\thooksPath = .githooks\n\tfsmonitor = scripts/watch.sh\n",
    )
    .expect("write");
    for (path, content) in [
        (".git/hooks/pre-commit", "#!/bin/sh\necho pwned\n"),
        (".git/commondir", "../../elsewhere\n"),
        (".git/config", "[core]\n\tfsmonitor = /tmp/x\n"),
        (".git", "gitdir: /tmp/evil\n"),
        (".githooks/post-checkout", "#!/bin/sh\necho pwned\n"),
        ("scripts/watch.sh", "#!/bin/sh\necho pwned\n"),
        (".husky/pre-commit", "#!/bin/sh\necho pwned\n"),
        ("sub/.git/config", "[core]\n\tfsmonitor = x\n"),
        (".hanzo/settings.json", "{}"),
    ] {
        let r = call(
            &f.tools,
            "write_file",
            json!({"path": path, "content": content}),
        )
        .await;
        assert!(
            error(&r).contains("rule: no writing to the git directory"),
            "{path}: {r:?}"
        );
        let patch = format!("--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+x\n");
        let r = call(&f.tools, "apply_patch", json!({ "patch": patch })).await;
        assert!(r.is_error, "{path}: {r:?}");
    }
    // A patch that "renames" content out of the git directory is refused too.
    let r = call(
        &f.tools,
        "apply_patch",
        json!({"patch": "--- a/.git/config\n+++ b/notes.txt\n@@ -1 +1 @@\n-a\n+b\n"}),
    )
    .await;
    assert!(
        error(&r).contains("rule: no writing to the git directory"),
        "{r:?}"
    );
    let r = call(
        &f.tools,
        "apply_patch",
        json!({"patch": "--- a/a.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-a\n+b\n"}),
    )
    .await;
    assert!(r.is_error, "{r:?}");
    assert!(!ws.join(".git/hooks/pre-commit").exists());
    assert!(!ws.join(".githooks").exists());
    assert!(!ws.join("scripts/watch.sh").exists());
    assert!(!ws.join("sub").exists());
    assert!(ws.join(".git").is_dir());
    assert_eq!(
        std::fs::read_to_string(ws.join(".git/config")).expect("read"),
        "[core]\n\thooksPath = .githooks\n\tfsmonitor = scripts/watch.sh\n"
    );
}

#[test]
fn protected_paths_of_a_real_linked_worktree() {
    let outside = tempfile::tempdir().expect("tempdir");
    let main = outside.path().join("main");
    std::fs::create_dir(&main).expect("mkdir");
    let git = |dir: &Path, args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .expect("git");
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&main, &["init", "-q"]);
    git(&main, &["commit", "-q", "--allow-empty", "-m", "init"]);
    git(&main, &["worktree", "add", "-q", "../wt", "-b", "wt"]);
    let wt = outside.path().join("wt");
    let protected = hanzo_tools::paths::protected_paths(&wt);
    let canon = |p: &Path| p.canonicalize().expect("exists");
    for expected in [
        wt.join(".git"),
        canon(&main.join(".git/worktrees/wt")),
        canon(&main.join(".git")),
        wt.join(".hanzo"),
        wt.join(".husky"),
    ] {
        assert!(
            protected.contains(&expected),
            "{expected:?} not in {protected:?}"
        );
    }
}
