//! The git slash commands. They are the user's own commands, so they run as the user and not
//! through the permission system — but always as an argv (`std::process::Command`, never a
//! shell), with names checked so none can pass for an option, and with a clear error outside a
//! git repository. Their output is shown through the transcript, which sanitises it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Why a git command did not do its job.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// This directory is not inside a git repository.
    #[error("{0} is not inside a git repository (git rev-parse found none); cd into one or use --workspace")]
    NotARepo(PathBuf),
    /// git could not be started (not installed, not executable).
    #[error("cannot run git: {0}")]
    Spawn(std::io::Error),
    /// git ran and exited non-zero.
    #[error("git {args} failed: {stderr}")]
    Failed {
        /// The arguments it ran with, space-separated.
        args: String,
        /// What it wrote to stderr, trimmed.
        stderr: String,
    },
    /// A branch or worktree name or a commit message was refused before git ran; the text says why.
    #[error("{0}")]
    BadName(String),
}

/// Runs git in one directory.
#[derive(Debug, Clone)]
pub struct Git {
    dir: PathBuf,
}

/// Checks a branch or worktree name: non-empty, not an option, no quotes, whitespace or control
/// characters, and what `git check-ref-format` would also refuse (`..`, a leading `/`).
/// [`Git::branch`] and [`Git::worktree`] then ask `git check-ref-format` itself.
pub fn check_name(name: &str) -> Result<(), GitError> {
    let shown = hanzo_md_render::sanitize_line_for_terminal(name);
    let bad = |why: &str| Err(GitError::BadName(format!("bad name {shown:?}: {why}")));
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.starts_with('-') {
        return bad("it starts with '-', which git would read as an option");
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return bad("it contains whitespace or a control character");
    }
    // No shell reads the name, so quotes would become part of it (`"--x"` is not `--x`).
    if name.contains(['"', '\'', '`']) {
        return bad("it contains a quote; type the name without quotes (no shell reads it)");
    }
    if name.contains("..")
        || name.starts_with('/')
        || name.ends_with('/')
        || name.ends_with(".lock")
    {
        return bad("git does not allow it as a branch name");
    }
    Ok(())
}

impl Git {
    /// Git in `dir`, which must be inside a work tree.
    pub fn open(dir: &Path) -> Result<Git, GitError> {
        let git = Git {
            dir: dir.to_path_buf(),
        };
        match git.run(&["rev-parse", "--is-inside-work-tree"]) {
            Ok(out) if out.trim() == "true" => Ok(git),
            Ok(_) | Err(GitError::Failed { .. }) => Err(GitError::NotARepo(dir.to_path_buf())),
            Err(e) => Err(e),
        }
    }

    /// Run `git ARGS` and return its standard output.
    pub fn run(&self, args: &[&str]) -> Result<String, GitError> {
        let out = Command::new("git")
            .args(args)
            .current_dir(&self.dir)
            .stdin(std::process::Stdio::null())
            // Never wait on a terminal prompt (credentials) that the screen would hide.
            .env("GIT_TERMINAL_PROMPT", "0")
            .output()
            .map_err(GitError::Spawn)?;
        if !out.status.success() {
            return Err(GitError::Failed {
                args: args.join(" "),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Refuses a name that is not a valid branch name by git's own rules
    /// (`git check-ref-format refs/heads/NAME`, which expands nothing, unlike `--branch`).
    fn check_ref(&self, name: &str) -> Result<(), GitError> {
        check_name(name)?;
        let full = format!("refs/heads/{name}");
        match self.run(&["check-ref-format", &full]) {
            Ok(_) => Ok(()),
            Err(GitError::Failed { .. }) => Err(GitError::BadName(format!(
                "bad name {:?}: git check-ref-format refuses it as a branch name",
                hanzo_md_render::sanitize_line_for_terminal(name)
            ))),
            Err(e) => Err(e),
        }
    }

    /// `/branch NAME`: create the branch and switch to it.
    pub fn branch(&self, name: &str) -> Result<String, GitError> {
        self.check_ref(name)?;
        self.run(&["switch", "-c", name])?;
        Ok(format!("switched to a new branch {name}"))
    }

    /// `/diff`: the staged and the unstaged changes, for the next message's context.
    pub fn diff(&self) -> Result<String, GitError> {
        let staged = self.run(&["diff", "--cached", "--no-color", "--no-ext-diff"])?;
        let unstaged = self.run(&["diff", "--no-color", "--no-ext-diff"])?;
        Ok(format!(
            "--- staged changes ---\n{staged}\n--- unstaged changes ---\n{unstaged}"
        ))
    }

    /// `/stash`: stash the changes (untracked files too) as `hanzo: <timestamp>`.
    pub fn stash(&self, timestamp: &str) -> Result<String, GitError> {
        let message = format!("hanzo: {timestamp}");
        self.run(&["stash", "push", "--include-untracked", "-m", &message])?;
        Ok(format!("stashed as \"{message}\""))
    }

    /// `/worktree NAME`: a new branch NAME checked out in a worktree beside this repository
    /// (`<repo>-NAME` next to the top-level directory).
    pub fn worktree(&self, name: &str) -> Result<(String, PathBuf), GitError> {
        self.check_ref(name)?;
        let top = PathBuf::from(self.run(&["rev-parse", "--show-toplevel"])?.trim());
        let base = top
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "repo".into());
        let flat = name.replace('/', "-");
        let path = top.parent().unwrap_or(&top).join(format!("{base}-{flat}"));
        let p = path.to_string_lossy().into_owned();
        self.run(&["worktree", "add", "-b", name, "--", &p])?;
        Ok((format!("worktree {p} on a new branch {name}"), path))
    }

    /// `/commit MESSAGE`: commit what is staged (everything tracked when nothing is).
    pub fn commit(&self, message: &str) -> Result<String, GitError> {
        if message.trim().is_empty() {
            return Err(GitError::BadName("the commit message is empty".into()));
        }
        let staged = self.run(&["diff", "--cached", "--name-only"])?;
        let mut args = vec!["commit", "-m", message];
        if staged.trim().is_empty() {
            args.insert(1, "-a");
        }
        let out = self.run(&args)?;
        Ok(out.lines().next().unwrap_or("committed").to_string())
    }

    /// `/commit-push-pr`: push the branch to `origin`, then `gh pr create --fill` when `gh` is
    /// installed; otherwise say where to open the pull request.
    pub fn commit_push_pr(&self, gh_available: bool) -> Result<String, GitError> {
        let branch = self
            .run(&["rev-parse", "--abbrev-ref", "HEAD"])?
            .trim()
            .to_string();
        self.run(&["push", "-u", "origin", "HEAD"])?;
        let mut out = format!("pushed {branch} to origin");
        if gh_available {
            let pr = self.run_program("gh", &["pr", "create", "--fill"])?;
            out.push_str(&format!("\n{}", pr.trim()));
        } else {
            let url = self
                .run(&["remote", "get-url", "origin"])?
                .trim()
                .to_string();
            out.push_str(&format!(
                "\ngh is not installed: open a pull request for {branch} at {}",
                pr_url(&url, &branch)
            ));
        }
        Ok(out)
    }

    fn run_program(&self, program: &str, args: &[&str]) -> Result<String, GitError> {
        let out = Command::new(program)
            .args(args)
            .current_dir(&self.dir)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(GitError::Spawn)?;
        if !out.status.success() {
            return Err(GitError::Failed {
                args: format!("({program}) {}", args.join(" ")),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// Whether `gh` is on the PATH.
pub fn gh_available() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("gh").is_file()))
}

/// Where to open a pull request for `branch` of the remote `url`: GitHub's compare page for a
/// GitHub remote, else the remote itself.
pub fn pr_url(url: &str, branch: &str) -> String {
    let path = url
        .strip_prefix("git@github.com:")
        .or_else(|| url.strip_prefix("https://github.com/"))
        .or_else(|| url.strip_prefix("ssh://git@github.com/"));
    match path {
        Some(p) => format!(
            "https://github.com/{}/pull/new/{branch}",
            p.trim_end_matches(".git")
        ),
        None => format!("{url} (branch {branch})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_git_would_take_as_options_are_refused() {
        for bad in [
            "",
            "-b",
            "--upload-pack=x",
            "\"--upload-pack=evil\"",
            "'-f'",
            "a b",
            "a..b",
            "../../x",
            "/x",
            "x\u{1b}",
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        check_name("feat/x-1").expect("a normal name");
    }

    #[test]
    fn pr_urls_for_github_and_other_remotes() {
        assert_eq!(
            pr_url("git@github.com:hanzoai/dev.git", "feat"),
            "https://github.com/hanzoai/dev/pull/new/feat"
        );
        assert_eq!(
            pr_url("/tmp/remote.git", "feat"),
            "/tmp/remote.git (branch feat)"
        );
    }
}
