//! The `git` tool with a real `git` and a hostile repository: every hook, `core.hooksPath`,
//! `core.fsmonitor`, aliases shadowing the subcommands, diff drivers (textconv and external
//! command), filter drivers (clean, smudge, process; one defined only in an included file), a
//! merge driver, pagers, signing with `gpg.program`, `log.showSignature` and a credential helper
//! all point at one script that records that it ran. A control run of plain `git` proves the
//! trap works; the tool's whole set of subcommands must then run without it ever firing.
//! Also: inputs that try to smuggle options, paths or refs in are refused before git runs.

use hanzo_ipc::roles::tools::{ToolCall, ToolResult};
use hanzo_policy::profile::CommandLimits;
use hanzo_tools::Tools;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

struct Repo {
    ws: tempfile::TempDir,
    _run: tempfile::TempDir,
    /// Outside the workspace: the trap script and its log.
    trap: tempfile::TempDir,
    tools: Tools,
}

impl Repo {
    fn ws(&self) -> &Path {
        self.ws.path()
    }

    fn log(&self) -> PathBuf {
        self.trap.path().join("ran.log")
    }

    fn ran(&self) -> String {
        std::fs::read_to_string(self.log()).unwrap_or_default()
    }
}

/// Plain git, as a user would run it later (system and global configuration kept out, so the
/// test does not depend on the machine's).
fn plain_git(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .expect("run git")
}

fn executable(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).expect("write script");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

fn repo() -> Repo {
    let ws = tempfile::tempdir().expect("tempdir");
    let run = tempfile::tempdir().expect("tempdir");
    let trap = tempfile::tempdir().expect("tempdir");
    assert!(plain_git(ws.path(), &["init", "-q", "-b", "main"])
        .status
        .success());
    std::fs::write(ws.path().join("a.txt"), "one\n").expect("write");
    std::fs::write(ws.path().join("b.md"), "# b\n").expect("write");
    assert!(plain_git(ws.path(), &["add", "."]).status.success());
    assert!(plain_git(ws.path(), &["commit", "-qm", "init"])
        .status
        .success());
    let tools = Tools::new(ws.path(), run.path(), &[], &CommandLimits::default()).expect("tools");
    Repo {
        ws,
        _run: run,
        trap,
        tools,
    }
}

/// Arms every program-running setting of the repository with the trap.
fn arm(r: &Repo) {
    let log = r.log();
    // Records its name and arguments, and passes stdin through (so it also "works" as a
    // filter, pager or textconv).
    let trap = r.trap.path().join("trap.sh");
    executable(
        &trap,
        &format!(
            "#!/bin/sh\necho \"ran: $0 $*\" >> '{}'\ncat 2>/dev/null || true\nexit 0\n",
            log.display()
        ),
    );
    let t = trap.display().to_string();
    let hooks = r.ws().join("hookdir");
    std::fs::create_dir(&hooks).expect("mkdir");
    for dir in [hooks.clone(), r.ws().join(".git/hooks")] {
        for hook in hanzo_policy::git::HOOK_NAMES {
            executable(
                &dir.join(hook),
                &format!("#!/bin/sh\nexec '{t}' hook {hook} \"$@\"\n"),
            );
        }
    }
    std::fs::write(
        r.ws().join("extra.gitconfig"),
        format!("[filter \"other\"]\n\tclean = {t}\n\tsmudge = {t}\n\trequired = true\n[core]\n\tfsmonitor = {t}\n"),
    )
    .expect("write include");
    let config = format!(
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\
         \thooksPath = hookdir\n\tfsmonitor = {t}\n\tpager = {t}\n\teditor = {t}\n\
         \tsshCommand = {t}\n\taskPass = {t}\n\
         [include]\n\tpath = ../extra.gitconfig\n\
         [alias]\n\tstatus = !{t} alias\n\tdiff = !{t} alias\n\tlog = !{t} alias\n\
         \tcommit = !{t} alias\n\tadd = !{t} alias\n\tswitch = !{t} alias\n\
         [diff]\n\texternal = {t}\n\
         [diff \"evil\"]\n\ttextconv = {t}\n\tcommand = {t}\n\
         [filter \"evil\"]\n\tclean = {t}\n\tsmudge = {t}\n\tprocess = {t}\n\trequired = true\n\
         [merge \"evil\"]\n\tdriver = {t}\n\
         [pager]\n\tlog = {t}\n\tdiff = {t}\n\tshow = {t}\n\tstatus = {t}\n\tbranch = {t}\n\
         [commit]\n\tgpgSign = true\n[gpg]\n\tprogram = {t}\n[log]\n\tshowSignature = true\n\
         [credential]\n\thelper = {t}\n[status]\n\tshowUntrackedFiles = all\n"
    );
    std::fs::write(r.ws().join(".git/config"), config).expect("write config");
    std::fs::write(
        r.ws().join(".gitattributes"),
        "*.txt diff=evil filter=evil merge=evil\n*.md filter=other\n",
    )
    .expect("write attributes");
}

async fn git(r: &Repo, input: Value) -> ToolResult {
    r.tools
        .run(&ToolCall {
            id: "g".into(),
            name: "git".into(),
            input: input.to_string(),
        })
        .await
}

fn ok(result: &ToolResult, what: &str) {
    assert!(!result.is_error, "{what}: {result:?}");
}

#[tokio::test]
async fn a_hostile_repository_configuration_never_runs_anything() {
    let r = repo();
    arm(&r);
    // The control: a user's plain `git status` runs the trap (fsmonitor, filters), so a clean
    // log below means the tool stopped it, not that the trap was broken.
    std::fs::write(r.ws().join("a.txt"), "one\ntwo\n").expect("write");
    let _ = plain_git(r.ws(), &["status"]);
    assert!(
        r.ran().contains("ran:"),
        "the control run did not fire the trap: {:?}",
        r.ran()
    );
    std::fs::remove_file(r.log()).expect("reset the log");

    let steps: Vec<(&str, Value)> = vec![
        ("status", json!({"subcommand": "status"})),
        ("diff", json!({"subcommand": "diff"})),
        ("diff --stat", json!({"subcommand": "diff", "stat": true})),
        ("add", json!({"subcommand": "add", "paths": ["a.txt"]})),
        (
            "diff --cached",
            json!({"subcommand": "diff", "staged": true}),
        ),
        (
            "commit",
            json!({"subcommand": "commit", "message": "second\n\nbody"}),
        ),
        ("log", json!({"subcommand": "log", "max_count": 5})),
        ("log --stat", json!({"subcommand": "log", "stat": true})),
        ("show", json!({"subcommand": "show"})),
        (
            "diff HEAD~1",
            json!({"subcommand": "diff", "revision": "HEAD~1", "paths": ["a.txt"]}),
        ),
        (
            "branch create",
            json!({"subcommand": "branch", "name": "topic"}),
        ),
        ("branch list", json!({"subcommand": "branch"})),
        (
            "switch -c",
            json!({"subcommand": "switch", "name": "feature/x", "create": true}),
        ),
        ("switch", json!({"subcommand": "switch", "name": "topic"})),
        ("add all", json!({"subcommand": "add", "all": true})),
        (
            "switch back",
            json!({"subcommand": "switch", "name": "main"}),
        ),
    ];
    // New content on the way: a filtered .md file and an untracked one.
    std::fs::write(r.ws().join("b.md"), "# b\nmore\n").expect("write");
    for (what, input) in steps {
        let result = git(&r, input).await;
        ok(&result, what);
        assert_eq!(r.ran(), "", "`{what}` ran a configured program");
    }
    // What the tool did, it did: the commit exists, with the fallback identity, unsigned.
    let log = plain_git(
        r.ws(),
        &[
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
            "-c",
            "log.showSignature=false",
            "--no-pager",
            "log",
            "--format=%an <%ae>|%s|%G?",
            "-1",
            "main",
        ],
    );
    let line = String::from_utf8_lossy(&log.stdout);
    assert_eq!(
        line.trim(),
        "hanzo-dev agent <agent@hanzo-dev.invalid>|second|N",
        "{log:?}"
    );
    let head = std::fs::read_to_string(r.ws().join(".git/HEAD")).expect("HEAD");
    assert_eq!(head.trim(), "ref: refs/heads/main");
    assert!(r.ws().join(".git/refs/heads/feature/x").exists());
}

#[tokio::test]
async fn output_of_the_read_only_subcommands() {
    let r = repo();
    std::fs::write(r.ws().join("a.txt"), "one\ntwo\n").expect("write");
    let status = git(&r, json!({"subcommand": "status"})).await;
    assert_eq!(
        status.output, "## main\n M a.txt\n[exit code 0]",
        "{status:?}"
    );
    let diff = git(&r, json!({"subcommand": "diff", "paths": ["a.txt"]})).await;
    assert!(diff.output.contains("+two"), "{diff:?}");
    let log = git(&r, json!({"subcommand": "log"})).await;
    assert!(log.output.contains("    init"), "{log:?}");
    let show = git(&r, json!({"subcommand": "show", "stat": true})).await;
    assert!(show.output.contains("a.txt | 1 +"), "{show:?}");
    // `status` changes nothing, not even the index's stat cache.
    let index = std::fs::read(r.ws().join(".git/index")).expect("index");
    std::fs::write(r.ws().join("a.txt"), "one\n").expect("touch");
    let _ = git(&r, json!({"subcommand": "status"})).await;
    assert_eq!(
        std::fs::read(r.ws().join(".git/index")).expect("index"),
        index,
        "status wrote the index"
    );
}

#[tokio::test]
async fn the_repository_s_own_identity_is_used_when_it_has_one() {
    let r = repo();
    assert!(plain_git(r.ws(), &["config", "user.name", "Repo Owner"])
        .status
        .success());
    assert!(
        plain_git(r.ws(), &["config", "user.email", "owner@example.com"])
            .status
            .success()
    );
    std::fs::write(r.ws().join("a.txt"), "changed\n").expect("write");
    ok(
        &git(
            &r,
            json!({"subcommand": "commit", "message": "m", "all": true}),
        )
        .await,
        "commit",
    );
    let log = plain_git(r.ws(), &["log", "--format=%an <%ae>", "-1"]);
    assert_eq!(
        String::from_utf8_lossy(&log.stdout).trim(),
        "Repo Owner <owner@example.com>"
    );
    // And the user's identity from the supervisor, when the repository has none.
    let r2 = repo();
    let tools = r2.tools.clone().with_git_identity("Ada", "ada@example.com");
    std::fs::write(r2.ws().join("a.txt"), "changed\n").expect("write");
    let result = tools
        .run(&ToolCall {
            id: "g".into(),
            name: "git".into(),
            input: json!({"subcommand": "commit", "message": "m", "all": true}).to_string(),
        })
        .await;
    ok(&result, "commit");
    let log = plain_git(r2.ws(), &["log", "--format=%an <%ae>", "-1"]);
    assert_eq!(
        String::from_utf8_lossy(&log.stdout).trim(),
        "Ada <ada@example.com>"
    );
}

#[tokio::test]
async fn inputs_that_smuggle_options_refs_or_paths_are_refused_before_git_runs() {
    let r = repo();
    arm(&r);
    let cases: Vec<(Value, &str)> = vec![
        (json!({"subcommand": "push"}), "\"push\" is not available"),
        (
            json!({"subcommand": "status", "message": "x"}),
            "`message` does not apply",
        ),
        (
            json!({"subcommand": "diff", "revision": "--output=/tmp/pwn"}),
            "revision",
        ),
        (json!({"subcommand": "diff", "revision": "-p"}), "revision"),
        (
            json!({"subcommand": "log", "revision": "HEAD@{1}"}),
            "revision",
        ),
        (
            json!({"subcommand": "show", "revision": "HEAD:a.txt"}),
            "revision",
        ),
        (
            json!({"subcommand": "show", "revision": ":/fix"}),
            "revision",
        ),
        (
            json!({"subcommand": "branch", "name": "--exec=sh"}),
            "branch name",
        ),
        (
            json!({"subcommand": "branch", "name": "a..b"}),
            "branch name",
        ),
        (json!({"subcommand": "switch", "name": "-"}), "branch name"),
        (
            json!({"subcommand": "switch", "name": "x", "start_point": "main"}),
            "only with `create",
        ),
        (
            json!({"subcommand": "branch", "name": "x", "start_point": "--upload-pack=sh"}),
            "revision",
        ),
        (
            json!({"subcommand": "add", "paths": ["../outside"]}),
            "`..`",
        ),
        (
            json!({"subcommand": "add", "paths": ["/etc/passwd"]}),
            "absolute path outside",
        ),
        (json!({"subcommand": "add", "paths": ["a\u{0}b"]}), "NUL"),
        (json!({"subcommand": "add"}), "needs `paths`"),
        (json!({"subcommand": "commit"}), "non-empty `message`"),
        (
            json!({"subcommand": "commit", "message": "  "}),
            "non-empty `message`",
        ),
        (
            json!({"subcommand": "status", "args": ["-c", "core.pager=sh"]}),
            "bad tool input",
        ),
        (
            json!({"subcommand": "status", "config": {"core.fsmonitor": "x"}}),
            "bad tool input",
        ),
    ];
    for (input, expected) in cases {
        let result = git(&r, input.clone()).await;
        let e = result.error.as_deref().unwrap_or("");
        assert!(
            result.is_error && e.contains(expected),
            "{input}: {result:?}"
        );
    }
    // A path that looks like an option stays a path (after `--`): git says it matches nothing.
    let result = git(&r, json!({"subcommand": "add", "paths": ["--force"]})).await;
    assert!(result.is_error, "{result:?}");
    assert!(
        result.output.contains("pathspec '--force' did not match"),
        "{result:?}"
    );
    // A message that looks like an option or a command is only a message.
    std::fs::write(r.ws().join("a.txt"), "x\n").expect("write");
    let result = git(
        &r,
        json!({"subcommand": "commit", "all": true, "message": "--amend $(touch /tmp/hanzo-git-pwn) `id`"}),
    )
    .await;
    ok(&result, "commit with an odd message");
    assert!(!Path::new("/tmp/hanzo-git-pwn").exists());
    let log = plain_git(
        r.ws(),
        &[
            "-c",
            "core.fsmonitor=false",
            "-c",
            "log.showSignature=false",
            "--no-pager",
            "log",
            "--format=%s",
            "-1",
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&log.stdout).trim(),
        "--amend $(touch /tmp/hanzo-git-pwn) `id`"
    );
    assert_eq!(
        r.ran(),
        "",
        "a refused or odd input ran a configured program"
    );
}

#[tokio::test]
async fn a_workspace_that_is_not_a_repository_root_is_refused() {
    let ws = tempfile::tempdir().expect("tempdir");
    let run = tempfile::tempdir().expect("tempdir");
    // A repository above the workspace must not be used (the tool never looks upwards).
    assert!(plain_git(ws.path(), &["init", "-q"]).status.success());
    let sub = ws.path().join("sub");
    std::fs::create_dir(&sub).expect("mkdir");
    let tools = Tools::new(&sub, run.path(), &[], &CommandLimits::default()).expect("tools");
    let result = tools
        .run(&ToolCall {
            id: "g".into(),
            name: "git".into(),
            input: json!({"subcommand": "status"}).to_string(),
        })
        .await;
    assert!(
        result
            .error
            .as_deref()
            .is_some_and(|e| e.contains("not the root of a git repository")),
        "{result:?}"
    );
}

#[test]
fn the_git_environment_survives_the_command_environment() {
    // Every safety variable must reach git: `ExecConfig::env` drops secret-looking names, and a
    // dropped `GIT_CONFIG_GLOBAL` would hand the model's `$HOME/.gitconfig` to git.
    let ws = tempfile::tempdir().expect("tempdir");
    let run = tempfile::tempdir().expect("tempdir");
    assert!(plain_git(ws.path(), &["init", "-q"]).status.success());
    let tools = Tools::new(ws.path(), run.path(), &[], &CommandLimits::default()).expect("tools");
    let inv = hanzo_tools::git::invocation(
        tools.exec_config(),
        tools.roots().workspace(),
        &hanzo_tools::git::GitIdentity::default(),
    )
    .expect("a repository");
    let env = hanzo_tools::git::exec_config(tools.exec_config(), &inv).env();
    for (k, v) in hanzo_policy::git::SAFE_ENV {
        assert!(
            env.contains(&(k.to_string(), v.to_string())),
            "{k} is missing from {env:?}"
        );
    }
    for k in ["GIT_DIR", "GIT_WORK_TREE"] {
        assert!(env.iter().any(|(n, _)| n == k), "{k}");
    }
    assert!(inv.program.is_absolute());
    assert!(!inv.program.starts_with(ws.path()));
}
