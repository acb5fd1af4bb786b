//! The `git` tool: a fixed set of subcommands with structured input, so the agent can commit
//! without a shell, and nothing the repository configures can make git run a program.
//!
//! The input names a subcommand and its few parameters — never a free-form argument string.
//! Every path is checked like a file tool's path and passed after `--` with literal pathspecs;
//! every branch name and revision is validated (`hanzo_policy::git`), so no input can become an
//! option. git runs as a normal command of this worker (`exec::run`: sandboxed, allow-listed
//! environment, timeout, keeper) with:
//!
//! - `GIT_DIR` and `GIT_WORK_TREE` set to the workspace's repository (no discovery upwards);
//! - no system or global configuration (`GIT_CONFIG_NOSYSTEM`, `GIT_CONFIG_GLOBAL=/dev/null`:
//!   the commands' private `$HOME` is writable by the model);
//! - `-c` overrides, which outrank every file, for each configuration key that names a program
//!   ([`hanzo_policy::git::SAFE_CONFIG`]: hooks, fsmonitor, pager, editor, signing, external
//!   diff, credential helpers, transports) and for every filter, diff and merge driver the
//!   repository's configuration defines (found by reading it, includes followed);
//! - `--no-pager`, `--no-verify`, `--no-gpg-sign`, `--no-ext-diff`, `--no-textconv`, submodules
//!   ignored, no remote operations at all (`protocol.allow=never`, `GIT_NO_LAZY_FETCH`);
//! - the git program found in a system directory of `PATH`, never in the workspace.
//!
//! Aliases never apply: git consults them only for names that are not its own commands.

use crate::exec::{self, ExecConfig};
use crate::paths::{git_repository, Intent, Roots};
use hanzo_ipc::roles::tools::ToolResult;
use hanzo_policy::git::{
    self as gitpolicy, driver_names, driver_overrides, validate_branch_name, validate_revision,
};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long one git command may run.
pub const GIT_TIMEOUT: Duration = Duration::from_secs(120);
/// The longest commit message accepted (it travels as one argument).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;
/// Most paths in one call.
pub const MAX_PATHS: usize = 1000;
/// Default and largest `max_count` for `log`.
pub const DEFAULT_LOG_COUNT: u32 = 20;
/// The largest `max_count` a `log` call may ask for.
pub const MAX_LOG_COUNT: u32 = 1000;

/// Who commits when the repository's own configuration names nobody (global configuration is
/// not read). The supervisor can pass the user's identity with `Tools::with_git_identity`.
pub const FALLBACK_NAME: &str = "hanzo-dev agent";
/// The commit e-mail used when the repository's configuration names none.
pub const FALLBACK_EMAIL: &str = "agent@hanzo-dev.invalid";

/// The tool's input (see its schema in `defs.rs`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GitInput {
    /// One of `status`, `diff`, `log`, `show`, `add`, `commit`, `branch`, `switch`.
    pub subcommand: String,
    /// Paths to limit the command to, relative to the workspace.
    #[serde(default)]
    pub paths: Vec<String>,
    /// `diff`: compare the index with HEAD (`--cached`).
    #[serde(default)]
    pub staged: bool,
    /// `diff`, `log`, `show`: a revision or range.
    pub revision: Option<String>,
    /// `diff`, `log`, `show`: a summary of changed files instead of the patch.
    #[serde(default)]
    pub stat: bool,
    /// `log`: at most this many commits.
    pub max_count: Option<u32>,
    /// `commit`: the message.
    pub message: Option<String>,
    /// `add`: stage everything (`--all`); `commit`: commit all tracked changes (`--all`).
    #[serde(default)]
    pub all: bool,
    /// `branch`, `switch`: the branch.
    pub name: Option<String>,
    /// `switch`: create the branch first (`switch -c`, like `checkout -b`).
    #[serde(default)]
    pub create: bool,
    /// `branch` (create), `switch` with `create`: where the new branch starts.
    pub start_point: Option<String>,
}

/// A refused input: what and why, for the model.
fn refuse(message: impl Into<String>) -> String {
    message.into()
}

impl GitInput {
    /// The parameters each subcommand takes; anything else set is an error (not ignored: the
    /// model should learn it had no effect).
    fn check_fields(&self) -> Result<(), String> {
        let allowed: &[&str] = match self.subcommand.as_str() {
            "status" => &["paths"],
            "diff" => &["paths", "staged", "revision", "stat"],
            "log" => &["paths", "revision", "stat", "max_count"],
            "show" => &["paths", "revision", "stat"],
            "add" => &["paths", "all"],
            "commit" => &["paths", "message", "all"],
            "branch" => &["name", "start_point"],
            "switch" => &["name", "create", "start_point"],
            other => {
                return Err(refuse(format!(
                    "git subcommand {other:?} is not available; the git tool runs {}",
                    gitpolicy::GIT_SUBCOMMANDS.join(", ")
                )))
            }
        };
        let set: [(&str, bool); 10] = [
            ("paths", !self.paths.is_empty()),
            ("staged", self.staged),
            ("revision", self.revision.is_some()),
            ("stat", self.stat),
            ("max_count", self.max_count.is_some()),
            ("message", self.message.is_some()),
            ("all", self.all),
            ("name", self.name.is_some()),
            ("create", self.create),
            ("start_point", self.start_point.is_some()),
        ];
        match set.iter().find(|(k, on)| *on && !allowed.contains(k)) {
            Some((k, _)) => Err(refuse(format!(
                "`{k}` does not apply to `git {}` (it takes: {})",
                self.subcommand,
                allowed.join(", ")
            ))),
            None => Ok(()),
        }
    }
}

/// The workspace-relative, literal pathspecs for `paths`: each must resolve inside the
/// workspace (like a file tool's path) and contain no NUL.
fn pathspecs(roots: &Roots, paths: &[String]) -> Result<Vec<String>, String> {
    if paths.len() > MAX_PATHS {
        return Err(refuse(format!(
            "{} paths given; at most {MAX_PATHS} per call",
            paths.len()
        )));
    }
    paths
        .iter()
        .map(|p| {
            if p.contains('\0') {
                return Err(refuse(format!("path {p:?} contains a NUL byte")));
            }
            let resolved = roots.resolve(p, Intent::Read).map_err(|e| e.to_string())?;
            let rel = resolved
                .strip_prefix(roots.workspace())
                .map_err(|_| {
                    refuse(format!(
                        "path {p:?} is outside the workspace's repository (rule: git paths stay \
                         inside the workspace)"
                    ))
                })?
                .to_string_lossy()
                .into_owned();
            Ok(if rel.is_empty() { ".".to_string() } else { rel })
        })
        .collect()
}

fn revision(rev: &Option<String>) -> Result<Option<String>, String> {
    match rev {
        Some(r) => validate_revision(r)
            .map(|()| Some(r.clone()))
            .map_err(|e| e.to_string()),
        None => Ok(None),
    }
}

/// The git arguments after the global options, for a checked input.
pub fn subcommand_args(roots: &Roots, input: &GitInput) -> Result<Vec<String>, String> {
    input.check_fields()?;
    let paths = pathspecs(roots, &input.paths)?;
    let rev = revision(&input.revision)?;
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<String>>();
    let mut args = match input.subcommand.as_str() {
        "status" => s(&["status", "--short", "--branch", "--ignore-submodules=all"]),
        "diff" => {
            let mut a = s(&[
                "diff",
                "--no-ext-diff",
                "--no-textconv",
                "--no-color",
                "--ignore-submodules=all",
            ]);
            if input.staged {
                a.push("--cached".into());
            }
            if input.stat {
                a.push("--stat".into());
            }
            a.extend(rev);
            a
        }
        "log" => {
            let n = input
                .max_count
                .unwrap_or(DEFAULT_LOG_COUNT)
                .clamp(1, MAX_LOG_COUNT);
            let mut a = s(&[
                "log",
                "--no-ext-diff",
                "--no-textconv",
                "--no-color",
                "--no-show-signature",
            ]);
            a.push(format!("--max-count={n}"));
            if input.stat {
                a.push("--stat".into());
            }
            a.extend(rev);
            a
        }
        "show" => {
            let mut a = s(&[
                "show",
                "--no-ext-diff",
                "--no-textconv",
                "--no-color",
                "--no-show-signature",
            ]);
            if input.stat {
                a.push("--stat".into());
            }
            a.push(rev.unwrap_or_else(|| "HEAD".into()));
            a
        }
        "add" => {
            if paths.is_empty() && !input.all {
                return Err(refuse(
                    "`git add` needs `paths`, or `all: true` to stage every change",
                ));
            }
            let mut a = s(&["add"]);
            if input.all {
                a.push("--all".into());
            }
            a
        }
        "commit" => {
            let message = input
                .message
                .as_deref()
                .filter(|m| !m.trim().is_empty())
                .ok_or_else(|| refuse("`git commit` needs a non-empty `message`"))?;
            if message.len() > MAX_MESSAGE_BYTES {
                return Err(refuse(format!(
                    "the commit message is {} bytes; at most {MAX_MESSAGE_BYTES}",
                    message.len()
                )));
            }
            if message.contains('\0') {
                return Err(refuse("the commit message contains a NUL byte"));
            }
            let mut a = s(&["commit", "--no-verify", "--no-gpg-sign", "--no-edit"]);
            if input.all {
                a.push("--all".into());
            }
            a.push("--message".into());
            a.push(message.to_string());
            a
        }
        "branch" => match &input.name {
            None => {
                if input.start_point.is_some() {
                    return Err(refuse("`start_point` needs a `name` for the new branch"));
                }
                s(&["branch", "--list", "--no-color", "-v"])
            }
            Some(name) => {
                validate_branch_name(name).map_err(|e| e.to_string())?;
                let mut a = s(&["branch", "--no-track", name]);
                if let Some(start) = &input.start_point {
                    validate_revision(start).map_err(|e| e.to_string())?;
                    a.push(start.clone());
                }
                a
            }
        },
        "switch" => {
            let name = input
                .name
                .as_deref()
                .ok_or_else(|| refuse("`git switch` needs the branch `name`"))?;
            validate_branch_name(name).map_err(|e| e.to_string())?;
            let mut a = s(&["switch", "--no-guess", "--no-recurse-submodules"]);
            if input.create {
                a.extend(s(&["--no-track", "--create", name]));
                if let Some(start) = &input.start_point {
                    validate_revision(start).map_err(|e| e.to_string())?;
                    a.push(start.clone());
                }
            } else {
                if input.start_point.is_some() {
                    return Err(refuse("`start_point` applies only with `create: true`"));
                }
                a.push(name.to_string());
            }
            a
        }
        _ => unreachable!("check_fields refused other subcommands"),
    };
    if !paths.is_empty() {
        args.push("--".into());
        args.extend(paths);
    }
    Ok(args)
}

/// The git program: the first `git` in an absolute `PATH` directory that is not inside the
/// workspace or the run directory (both writable by commands), else `/usr/bin/git`.
pub fn git_program(cfg: &ExecConfig) -> PathBuf {
    let path = cfg
        .env()
        .into_iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v)
        .unwrap_or_default();
    path.split(':')
        .map(Path::new)
        .filter(|d| d.is_absolute() && !d.starts_with(&cfg.cwd) && !d.starts_with(&cfg.run_dir))
        .map(|d| d.join("git"))
        .find(|p| is_executable_file(p))
        .unwrap_or_else(|| PathBuf::from("/usr/bin/git"))
}

fn is_executable_file(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `'…'` for `/bin/sh`: nothing inside single quotes is special but the quote itself.
pub fn sh_quote(arg: &str) -> String {
    format!("'{}'", arg.replace('\'', r"'\''"))
}

/// Who commits: the identity configured for the tools (the user's), else the fallback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitIdentity {
    /// `user.name`.
    pub name: String,
    /// `user.email`.
    pub email: String,
}

impl Default for GitIdentity {
    fn default() -> Self {
        GitIdentity {
            name: FALLBACK_NAME.to_string(),
            email: FALLBACK_EMAIL.to_string(),
        }
    }
}

/// Everything one git command needs besides the subcommand: global arguments and environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitInvocation {
    /// The git program to run.
    pub program: PathBuf,
    /// Options before the subcommand (`--no-pager`, the safe `-c` settings).
    pub global_args: Vec<String>,
    /// The command's complete environment.
    pub env: Vec<(String, String)>,
}

/// The global options and environment for the repository at `workspace`.
pub fn invocation(
    cfg: &ExecConfig,
    workspace: &Path,
    identity: &GitIdentity,
) -> Result<GitInvocation, String> {
    let repo = git_repository(workspace).ok_or_else(|| {
        refuse(
            "the workspace is not the root of a git repository (no `.git` there); the git tool \
             does not create or look above it",
        )
    })?;
    let mut config: Vec<(String, String)> = gitpolicy::SAFE_CONFIG
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let drivers = driver_names(&repo.config);
    if let Some((_, name)) = drivers
        .iter()
        .find(|(_, n)| gitpolicy::is_unusual_driver_name(n))
    {
        return Err(refuse(format!(
            "the repository's configuration defines a driver named {name:?}, which cannot be \
             switched off safely; the git tool refuses to run in it"
        )));
    }
    config.extend(driver_overrides(&drivers));
    config.push((
        "safe.directory".into(),
        workspace.to_string_lossy().into_owned(),
    ));
    let has = |key: &str| {
        repo.config
            .iter()
            .any(|e| e.section == "user" && e.subsection.is_none() && e.key == key)
    };
    if !has("name") {
        config.push(("user.name".into(), identity.name.clone()));
    }
    if !has("email") {
        config.push(("user.email".into(), identity.email.clone()));
    }
    let mut global_args = vec!["--no-pager".to_string()];
    for (k, v) in config {
        global_args.push("-c".into());
        global_args.push(format!("{k}={v}"));
    }
    let mut env: Vec<(String, String)> = gitpolicy::SAFE_ENV
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    env.push((
        "GIT_DIR".into(),
        repo.git_dir.to_string_lossy().into_owned(),
    ));
    env.push((
        "GIT_WORK_TREE".into(),
        workspace.to_string_lossy().into_owned(),
    ));
    Ok(GitInvocation {
        program: git_program(cfg),
        global_args,
        env,
    })
}

/// The `sh -c` command line for `git` with `args`: `exec` and every word single-quoted.
pub fn command_line(inv: &GitInvocation, args: &[String]) -> Result<String, String> {
    let mut words = vec!["exec".to_string()];
    for w in std::iter::once(inv.program.to_string_lossy().as_ref())
        .chain(inv.global_args.iter().map(String::as_str))
        .chain(args.iter().map(String::as_str))
    {
        if w.contains('\0') {
            return Err(refuse("an argument contains a NUL byte"));
        }
        words.push(sh_quote(w));
    }
    Ok(words.join(" "))
}

/// The environment of a git command: the worker's command environment with only `PATH`,
/// `LANG`, `LC_ALL` and `TZ` inherited and the git variables above; configured extra
/// variables (which could name `GIT_*`) are not passed.
pub fn exec_config(cfg: &ExecConfig, inv: &GitInvocation) -> ExecConfig {
    let mut cfg = cfg.clone();
    cfg.inherited
        .retain(|(k, _)| matches!(k.as_str(), "PATH" | "LANG" | "LC_ALL" | "TZ"));
    cfg.extra_env = inv.env.clone();
    cfg
}

/// Runs one git tool call.
pub async fn run(
    runner: &crate::runner::Runner,
    roots: &Roots,
    cfg: &ExecConfig,
    identity: &GitIdentity,
    input: GitInput,
) -> ToolResult {
    let prepared = subcommand_args(roots, &input).and_then(|args| {
        let inv = invocation(cfg, roots.workspace(), identity)?;
        let line = command_line(&inv, &args)?;
        Ok((exec_config(cfg, &inv), line))
    });
    let (cfg, line) = match prepared {
        Ok(p) => p,
        Err(e) => return ToolResult::err(e),
    };
    // In tier B, git runs in the git launcher's view when there is one (the git directory
    // writable but for its configuration and hooks); elsewhere in the commands' view.
    let git_runner = crate::runner::git_runner().ok();
    let runner = git_runner.as_deref().unwrap_or(runner);
    let outcome = match exec::run(runner, &cfg, &line, GIT_TIMEOUT, |_| {}).await {
        Ok(o) => o,
        Err(e) => return ToolResult::err(format!("cannot run git: {e}")),
    };
    let mut result = crate::command_result(outcome, GIT_TIMEOUT);
    if result.is_error && result.output.contains("Read-only file system") {
        result.output.push_str(
            "\n[the git directory is read-only in this sandbox; changing it (add, commit, \
             branch, switch) is not possible here]",
        );
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_any_text() {
        assert_eq!(sh_quote("a b"), "'a b'");
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
        assert_eq!(sh_quote("$(rm -rf /)`x`"), "'$(rm -rf /)`x`'");
    }

    #[test]
    fn fields_must_belong_to_the_subcommand() {
        let input = GitInput {
            subcommand: "status".into(),
            message: Some("x".into()),
            ..Default::default()
        };
        let e = input.check_fields().expect_err("refused");
        assert!(
            e.contains("`message` does not apply to `git status`"),
            "{e}"
        );
        let input = GitInput {
            subcommand: "push".into(),
            ..Default::default()
        };
        let e = input.check_fields().expect_err("refused");
        assert!(e.contains("\"push\" is not available"), "{e}");
    }
}
