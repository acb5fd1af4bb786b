//! Stand-in for `hanzo_tools::paths::protected_paths`, which the file-tools work defines (with
//! the same signature) and which replaces this module when it lands: the paths inside a
//! workspace whose contents run later, outside the sandbox, and so must not be written — the git
//! directory as a whole, the targets of its `gitdir` and `commondir` files, the effective
//! `core.hooksPath` directory, and `.hanzo/`. Tier B makes those that exist read-only and not
//! renameable (`hanzo_sandbox::namespaces`).
//!
//! This stand-in reads the repository's own configuration only (no includes, no global or system
//! configuration): enough for the tier-B mounts, and never wider than what it finds.

use std::path::{Path, PathBuf};

/// Absolute paths inside (or reached from) `workspace` that must not be written, existing or not.
pub fn protected_paths(workspace: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let dot_git = workspace.join(".git");
    out.push(dot_git.clone());
    // A worktree or submodule: `.git` is a file naming the real git directory.
    let git_dir = match std::fs::read_to_string(&dot_git) {
        Ok(text) => text
            .lines()
            .find_map(|l| l.strip_prefix("gitdir:"))
            .map(|p| resolve(workspace, p.trim())),
        Err(_) => Some(dot_git.clone()),
    };
    if let Some(git_dir) = &git_dir {
        if git_dir != &dot_git {
            out.push(git_dir.clone());
        }
        // A linked worktree's git directory names the common one.
        if let Ok(common) = std::fs::read_to_string(git_dir.join("commondir")) {
            out.push(resolve(git_dir, common.trim()));
        }
        if let Some(hooks) = hooks_path(&git_dir.join("config")) {
            out.push(resolve(workspace, &hooks));
        }
    }
    out.push(workspace.join(".hanzo"));
    out.sort();
    out.dedup();
    out
}

fn resolve(base: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

/// `core.hooksPath` from a git config file (the last one wins, as in git).
fn hooks_path(config: &Path) -> Option<String> {
    let text = std::fs::read_to_string(config).ok()?;
    let mut in_core = false;
    let mut found = None;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_core = line
                .trim_start_matches('[')
                .trim_end_matches(']')
                .trim()
                .eq_ignore_ascii_case("core");
            continue;
        }
        if !in_core {
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            if k.trim().eq_ignore_ascii_case("hookspath") {
                found = Some(v.trim().trim_matches('"').to_string());
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_git_directory_its_hooks_path_and_hanzo_are_protected() {
        let ws = tempfile::tempdir().expect("tmp");
        let w = ws.path();
        std::fs::create_dir_all(w.join(".git")).expect("mkdir");
        std::fs::write(w.join(".git/config"), "[core]\n\thooksPath = .husky\n").expect("w");
        let p = protected_paths(w);
        assert!(p.contains(&w.join(".git")));
        assert!(p.contains(&w.join(".husky")));
        assert!(p.contains(&w.join(".hanzo")));
    }

    #[test]
    fn a_worktree_protects_its_gitdir_and_commondir_targets() {
        let ws = tempfile::tempdir().expect("tmp");
        let w = ws.path();
        let admin = w.join("main/.git/worktrees/wt");
        std::fs::create_dir_all(&admin).expect("mkdir");
        std::fs::write(admin.join("commondir"), "../..\n").expect("w");
        std::fs::create_dir_all(w.join("wt")).expect("mkdir");
        std::fs::write(w.join("wt/.git"), format!("gitdir: {}\n", admin.display())).expect("w");
        let p = protected_paths(&w.join("wt"));
        assert!(p.contains(&w.join("wt/.git")));
        assert!(p.contains(&admin));
        assert!(p.contains(&admin.join("../..")));
    }
}
