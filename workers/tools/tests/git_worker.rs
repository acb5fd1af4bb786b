//! The `git` tool inside a real, confined tools worker (tier A, and tier B where the kernel
//! offers it): this binary plays the supervisor and re-executes itself as the worker, as
//! `worker.rs` does. The repository's configuration is hostile (hooks, `core.hooksPath`,
//! `core.fsmonitor`, a filter, a diff driver, a pager, signing), each pointing at a script in
//! the workspace that records that it ran; a control run of plain `git` proves it fires. Through
//! the worker, status, add, commit, log, show, branch and switch must succeed and it must never
//! fire.
//!
//! A custom harness (`harness = false`): the worker needs a fresh single-threaded process.

use hanzo_ipc::channel::Client;
use hanzo_ipc::frame::DEFAULT_MAX_FRAME;
use hanzo_ipc::roles::tools::{Request, Response, ToolCall, ToolResult, ToolsProtocol};
use hanzo_ipc::socket::WriteHalf;
use hanzo_ipc::transport;
use hanzo_ipc::Role;
use hanzo_policy::isolation::IsolationMode;
use hanzo_policy::profile::ProfileContext;
use hanzo_sandbox::spawn::{configure_command, ChildSetup};
use hanzo_worker::WorkerOptions;
use serde_json::{json, Value};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Stdio};

const WORKER: &str = "__worker";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(WORKER) {
        let code = match WorkerOptions::parse(&args[2..]) {
            Ok(opts) => hanzo_tools::worker_main(opts),
            Err(e) => {
                eprintln!("{e}");
                64
            }
        };
        std::process::exit(code);
    }
    if args.iter().any(|a| a == "--list") {
        if !args.iter().any(|a| a == "--ignored") {
            println!("git_worker: test");
        }
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut failures = 0;
    for tier in ["a", "auto"] {
        println!("\n== git tool in the worker, isolation: {tier}");
        failures += runtime.block_on(run_all(tier));
    }
    println!("\ngit worker checks: {failures} failed");
    if failures > 0 {
        std::process::exit(1);
    }
}

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

/// A repository whose configuration runs `trap.sh` (in the workspace, so it could run inside
/// the sandbox) from every place it can; returns the trap's log path.
fn hostile_repo(ws: &Path) -> std::path::PathBuf {
    assert!(plain_git(ws, &["init", "-q", "-b", "main"])
        .status
        .success());
    std::fs::write(ws.join("a.txt"), "one\n").expect("write");
    assert!(plain_git(ws, &["add", "."]).status.success());
    assert!(plain_git(ws, &["commit", "-qm", "init"]).status.success());
    let log = ws.join("trap.log");
    let trap = ws.join("trap.sh");
    executable(
        &trap,
        &format!(
            "#!/bin/sh\necho \"ran: $*\" >> '{}'\ncat 2>/dev/null || true\n",
            log.display()
        ),
    );
    let t = trap.display();
    std::fs::create_dir(ws.join("hookdir")).expect("mkdir");
    for dir in [ws.join("hookdir"), ws.join(".git/hooks")] {
        for hook in hanzo_policy::git::HOOK_NAMES {
            executable(
                &dir.join(hook),
                &format!("#!/bin/sh\nexec '{t}' hook {hook}\n"),
            );
        }
    }
    std::fs::write(
        ws.join(".git/config"),
        format!(
            "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\thooksPath = hookdir\n\
             \tfsmonitor = {t}\n\tpager = {t}\n\
             [filter \"evil\"]\n\tclean = {t}\n\tsmudge = {t}\n\trequired = true\n\
             [diff \"evil\"]\n\ttextconv = {t}\n[diff]\n\texternal = {t}\n\
             [commit]\n\tgpgSign = true\n[gpg]\n\tprogram = {t}\n[log]\n\tshowSignature = true\n"
        ),
    )
    .expect("config");
    std::fs::write(ws.join(".gitattributes"), "*.txt filter=evil diff=evil\n").expect("attrs");
    std::fs::write(ws.join("a.txt"), "one\ntwo\n").expect("write");
    // The control: plain git runs the trap.
    let _ = plain_git(ws, &["status"]);
    let fired = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        fired.contains("ran:"),
        "the control run did not fire: {fired:?}"
    );
    std::fs::remove_file(&log).expect("reset the log");
    log
}

type ToolsClient = Client<ToolsProtocol, WriteHalf>;

/// The worker's client, its process, and whether it runs in tier B (it attested namespaces).
async fn start(tier: &str, ws: &Path, run: &Path) -> (ToolsClient, tokio::process::Child, bool) {
    let opts = WorkerOptions {
        role: Role::Tools,
        ctx: ProfileContext {
            workspace: Some(ws.to_path_buf()),
            config_dir: None,
            run_dir: Some(run.to_path_buf()),
            ..ProfileContext::default()
        },
        isolation: if tier == "a" {
            IsolationMode::TierA
        } else {
            IsolationMode::Auto
        },
        fault: None,
    };
    let (ours, theirs) = transport::socketpair().expect("socketpair");
    let mut cmd = std::process::Command::new(std::env::current_exe().expect("exe"));
    cmd.arg(WORKER)
        .args(opts.to_args())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdin(Stdio::null())
        .current_dir("/");
    configure_command(
        &mut cmd,
        ChildSetup {
            fds: vec![(theirs.as_raw_fd(), transport::SUPERVISOR_FD)],
            rlimits: hanzo_policy::profile::profile_for(Role::Tools, &opts.ctx).rlimits,
            parent_pid: i32::try_from(std::process::id()).expect("pid"),
            new_session: true,
            join_cgroups: Vec::new(),
        },
    );
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    let child = cmd.spawn().expect("spawn the worker");
    drop(theirs);
    let (mut reader, mut writer) = transport::split(ours, DEFAULT_MAX_FRAME).expect("stream");
    let (_hello, att) = transport::supervisor_handshake(&mut reader, &mut writer, Role::Tools)
        .await
        .expect("handshake");
    assert!(att.seccomp.installed && att.no_new_privs, "{att:?}");
    println!("attested namespaces: {:?}", att.namespaces);
    let tier_b = !att.namespaces.is_empty();
    let (client, _events, _end) = Client::<ToolsProtocol, _>::start(reader, writer);
    (client, child, tier_b)
}

async fn call(client: &ToolsClient, name: &str, input: Value) -> ToolResult {
    let req = Request::Run(ToolCall {
        id: "g".into(),
        name: name.into(),
        input: input.to_string(),
    });
    match client.call(req).await.expect("call") {
        Response::Result(r) => r,
        other => panic!("unexpected {other:?}"),
    }
}

async fn run_all(tier: &str) -> usize {
    let ws = tempfile::tempdir().expect("ws");
    let run = tempfile::tempdir().expect("run");
    let wsp = ws.path().canonicalize().expect("canon");
    let log = hostile_repo(&wsp);
    let (client, _child, tier_b) =
        start(tier, &wsp, &run.path().canonicalize().expect("canon")).await;
    let mut failures = 0;
    let steps: Vec<(&str, Value)> = vec![
        ("status", json!({"subcommand": "status"})),
        ("diff", json!({"subcommand": "diff"})),
        ("add", json!({"subcommand": "add", "paths": ["a.txt"]})),
        (
            "commit",
            json!({"subcommand": "commit", "message": "second"}),
        ),
        ("log", json!({"subcommand": "log", "max_count": 2})),
        ("show", json!({"subcommand": "show", "stat": true})),
        ("branch", json!({"subcommand": "branch", "name": "topic"})),
        (
            "switch -c",
            json!({"subcommand": "switch", "name": "feature", "create": true}),
        ),
        (
            "switch back",
            json!({"subcommand": "switch", "name": "main"}),
        ),
    ];
    // Tier B binds the whole git directory read-only for commands (SECURITY.md); the git tool
    // runs git in its own launcher's view, where only the configuration, hooks and links stay
    // read-only: every subcommand works in both tiers, and nothing configured runs either way.
    for (what, input) in steps {
        let r = call(&client, "git", input).await;
        let ran = std::fs::read_to_string(&log).unwrap_or_default();
        if r.is_error || !ran.is_empty() {
            println!("FAIL  git {what}: {r:?}\n      trap log: {ran:?}");
            failures += 1;
        } else {
            println!("ok    git {what}");
        }
    }
    if tier_b {
        failures += commands_cannot_reach_the_git_view(&client, &wsp).await;
    }
    let last = plain_git(
        &wsp,
        &[
            "-c",
            "core.fsmonitor=false",
            "-c",
            "log.showSignature=false",
            "--no-pager",
            "log",
            "--format=%s|%G?",
            "-1",
        ],
    );
    let line = String::from_utf8_lossy(&last.stdout).trim().to_string();
    let expected = "second|N";
    if line == expected {
        println!("ok    the last commit is {expected:?}, unsigned");
    } else {
        println!("FAIL  the commit: {line:?} {last:?}");
        failures += 1;
    }
    // The definitions the worker serves include the git tool.
    match client.call(Request::Definitions).await.expect("defs") {
        Response::Definitions(d) if d.iter().any(|d| d.name == "git") => {
            println!("ok    the worker defines the git tool")
        }
        other => {
            println!("FAIL  definitions: {other:?}");
            failures += 1;
        }
    }
    failures
}

/// The attacks on the git view from a command (tier B): the git directory is read-only and not
/// renameable in the commands' view, and no process's `/proc/PID/root` (the git launcher's
/// among them) leads a command into the view where it is writable.
async fn commands_cannot_reach_the_git_view(client: &ToolsClient, ws: &Path) -> usize {
    let script = format!(
        "cd {ws}; echo x > .git/planted 2>/dev/null && echo WROTE-direct; \
         mv .git .git-moved 2>/dev/null && echo MOVED; \
         for p in /proc/[0-9]*; do \
           for f in planted config hooks/pre-commit; do \
             (echo pwned > $p/root{ws}/.git/$f) 2>/dev/null && echo WROTE $p $f; \
           done; \
           ls $p/root{ws}/.git/ >/dev/null 2>&1 && echo LISTED $p; \
         done; echo done",
        ws = ws.display()
    );
    let r = call(client, "bash", json!({ "command": script })).await;
    let mut failures = 0;
    let leaked: Vec<&str> = r
        .output
        .lines()
        .filter(|l| l.starts_with("WROTE") || l.starts_with("MOVED"))
        .collect();
    if !r.output.contains("done") || !leaked.is_empty() {
        println!("FAIL  a command reached the git directory: {leaked:?} {r:?}");
        failures += 1;
    } else {
        println!(
            "ok    a command cannot write, rename or reach the git view through /proc ({} \
             processes it could list)",
            r.output.lines().filter(|l| l.starts_with("LISTED")).count()
        );
    }
    for f in ["planted", "hooks/pre-commit"] {
        let text = std::fs::read_to_string(ws.join(".git").join(f)).unwrap_or_default();
        if text.contains("pwned") || (f == "planted" && ws.join(".git/planted").exists()) {
            println!("FAIL  .git/{f} was written: {text:?}");
            failures += 1;
        }
    }
    if std::fs::read_to_string(ws.join(".git/config"))
        .unwrap_or_default()
        .contains("pwned")
    {
        println!("FAIL  .git/config was written");
        failures += 1;
    }
    failures
}
