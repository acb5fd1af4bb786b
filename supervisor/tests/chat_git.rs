//! The chat's git slash commands against a real temporary repository with a bare remote:
//! commit, branch, worktree, stash, push with no `gh` (the URL message), and the error outside
//! a repository.

#[path = "common/tmux.rs"]
mod tmux;

use hanzo_dev::tui::git::{Git, GitError};
use std::path::Path;
use tmux::{git, init_repo};

/// `root/remote.git` (bare) and `root/repo` (one commit on `main`, origin = the bare remote).
fn repo(root: &Path) -> std::path::PathBuf {
    let remote = root.join("remote.git");
    let repo = root.join("repo");
    std::fs::create_dir_all(&repo).expect("mkdir");
    git(
        root,
        &["init", "-q", "--bare", remote.to_str().expect("utf-8")],
    );
    init_repo(&repo);
    git(
        &repo,
        &["remote", "add", "origin", remote.to_str().expect("utf-8")],
    );
    repo
}

#[test]
fn commit_with_an_accepted_message_then_diff_is_empty() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = repo(dir.path());
    std::fs::write(repo.join("a.txt"), "two\n").expect("write");
    let g = Git::open(&repo).expect("a repository");
    let diff = g.diff().expect("diff");
    assert!(diff.contains("-one") && diff.contains("+two"), "{diff}");
    let out = g.commit("fix: count pages right").expect("commit");
    assert!(out.contains("fix: count pages right"), "{out}");
    assert_eq!(
        git(&repo, &["log", "-1", "--format=%s"]).trim(),
        "fix: count pages right"
    );
    assert!(git(&repo, &["status", "--porcelain"]).trim().is_empty());
    assert!(matches!(g.commit("  "), Err(GitError::BadName(_))));
}

#[test]
fn branch_and_worktree_create_what_they_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = repo(dir.path());
    let g = Git::open(&repo).expect("a repository");
    g.branch("feat-x").expect("branch");
    assert_eq!(git(&repo, &["branch", "--show-current"]).trim(), "feat-x");
    let (msg, path) = g.worktree("side").expect("worktree");
    assert!(msg.contains("side"), "{msg}");
    assert_eq!(path, dir.path().join("repo-side"));
    assert_eq!(git(&path, &["branch", "--show-current"]).trim(), "side");
    // A name git would read as an option never reaches it.
    assert!(matches!(g.branch("--orphan"), Err(GitError::BadName(_))));
    assert!(matches!(g.worktree("-f"), Err(GitError::BadName(_))));
}

#[test]
fn stash_is_named_with_the_timestamp() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = repo(dir.path());
    std::fs::write(repo.join("a.txt"), "changed\n").expect("write");
    std::fs::write(repo.join("new.txt"), "untracked\n").expect("write");
    let g = Git::open(&repo).expect("a repository");
    g.stash("2026-12-02T06:00:00Z").expect("stash");
    let list = git(&repo, &["stash", "list"]);
    assert!(list.contains("hanzo: 2026-12-02T06:00:00Z"), "{list}");
    assert!(git(&repo, &["status", "--porcelain"]).trim().is_empty());
}

#[test]
fn commit_push_pr_pushes_to_the_bare_remote_and_without_gh_gives_the_url() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = repo(dir.path());
    let g = Git::open(&repo).expect("a repository");
    g.branch("feat-push").expect("branch");
    std::fs::write(repo.join("b.txt"), "b\n").expect("write");
    git(&repo, &["add", "b.txt"]);
    g.commit("feat: add b").expect("commit");
    let out = g.commit_push_pr(false).expect("push");
    assert!(out.contains("pushed feat-push to origin"), "{out}");
    assert!(out.contains("gh is not installed"), "{out}");
    assert!(out.contains("remote.git (branch feat-push)"), "{out}");
    let remote = dir.path().join("remote.git");
    assert_eq!(
        git(&remote, &["log", "-1", "--format=%s", "feat-push"]).trim(),
        "feat: add b"
    );
    assert_eq!(
        git(
            &repo,
            &["rev-parse", "--abbrev-ref", "feat-push@{upstream}"]
        )
        .trim(),
        "origin/feat-push"
    );
}

#[test]
fn outside_a_repository_the_error_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    match Git::open(dir.path()) {
        Err(GitError::NotARepo(p)) => assert_eq!(p, dir.path()),
        other => panic!("expected NotARepo, got {other:?}"),
    }
    let msg = Git::open(dir.path()).expect_err("no repo").to_string();
    assert!(msg.contains("not inside a git repository"), "{msg}");
}
