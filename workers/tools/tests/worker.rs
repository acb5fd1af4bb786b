//! The tools worker as a real process behind its channel: this binary plays the supervisor (a
//! socketpair on fd 3, the handshake, the typed client) and re-executes itself as the worker,
//! which runs `hanzo_tools::worker_main` — confined by `hanzo_worker::run_with` exactly as under
//! `hanzo-dev`. Proves the channel's requests, streamed output, cancellation killing the command's
//! process group, the timeout, and that commands run inside the worker's confinement.
//!
//! A custom harness (`harness = false`): the worker needs a fresh single-threaded process.

use hanzo_ipc::channel::{Client, StreamPart};
use hanzo_ipc::frame::DEFAULT_MAX_FRAME;
use hanzo_ipc::roles::tools::{Item, Request, Response, ToolCall, ToolResult, ToolsProtocol};
use hanzo_ipc::transport;
use hanzo_ipc::Role;
use hanzo_policy::profile::ProfileContext;
use hanzo_sandbox::spawn::{configure_command, ChildSetup};
use hanzo_worker::WorkerOptions;
use std::os::fd::AsRawFd;
use std::process::Stdio;
use std::time::Duration;
use tokio::net::unix::OwnedWriteHalf;

const WORKER: &str = "__worker";
const CANARY: &str = "sk-canary-worker-93be";

type ToolsClient = Client<ToolsProtocol, OwnedWriteHalf>;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(WORKER) {
        let isolation = match std::env::var("TEST_TOOLS_TIER").as_deref() {
            Ok("a") => hanzo_tools::Isolation::TierA,
            _ => hanzo_tools::Isolation::Auto,
        };
        let code = match WorkerOptions::parse(&args[2..]) {
            Ok(opts) => hanzo_tools::worker_main_with(opts, isolation),
            Err(e) => {
                eprintln!("{e}");
                64
            }
        };
        std::process::exit(code);
    }
    // nextest lists with `--list --format terse` (and `--ignored` for ignored tests: none here).
    if args.iter().any(|a| a == "--list") {
        if !args.iter().any(|a| a == "--ignored") {
            println!("worker: test");
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
        println!("\n== worker isolation: {tier}");
        failures += runtime.block_on(run_all(tier));
    }
    println!("\nworker checks: {failures} failed");
    if failures > 0 {
        std::process::exit(1);
    }
}

struct Worker {
    client: ToolsClient,
    _child: tokio::process::Child,
    ws: tempfile::TempDir,
    _run: tempfile::TempDir,
}

async fn start(tier: &str) -> Worker {
    let ws = tempfile::tempdir().expect("ws");
    let run = tempfile::tempdir().expect("run");
    let opts = WorkerOptions {
        role: Role::Tools,
        ctx: ProfileContext {
            workspace: Some(ws.path().canonicalize().expect("canon")),
            config_dir: None,
            run_dir: Some(run.path().canonicalize().expect("canon")),
        },
        fault: None,
    };
    let (ours, theirs) = transport::socketpair().expect("socketpair");
    let mut cmd = std::process::Command::new(std::env::current_exe().expect("exe"));
    cmd.arg(WORKER)
        .args(opts.to_args())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        // Worse than the supervisor ever does (it gives workers an allow-listed environment):
        // a secret in the worker's own environment must still not reach a command.
        .env("HANZO_CANARY_API_KEY", CANARY)
        .env("TEST_TOOLS_TIER", tier)
        .stdin(Stdio::null())
        .current_dir("/");
    configure_command(
        &mut cmd,
        ChildSetup {
            fds: vec![(theirs.as_raw_fd(), transport::SUPERVISOR_FD)],
            rlimits: hanzo_policy::profile::profile_for(Role::Tools, &opts.ctx).rlimits,
            parent_pid: std::process::id() as i32,
            new_session: true,
        },
    );
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    let child = cmd.spawn().expect("spawn the worker");
    drop(theirs);
    let stream = transport::stream_from_fd(ours).expect("stream");
    let (mut reader, mut writer) = transport::split(stream, DEFAULT_MAX_FRAME);
    let (_hello, att) = transport::supervisor_handshake(&mut reader, &mut writer, Role::Tools)
        .await
        .expect("handshake");
    assert!(
        att.seccomp.installed && att.no_new_privs && att.non_dumpable,
        "{att:?}"
    );
    let (client, _events, _end) = Client::<ToolsProtocol, _>::start(reader, writer);
    Worker {
        client,
        _child: child,
        ws,
        _run: run,
    }
}

fn bash(command: &str, timeout_ms: Option<u64>) -> Request {
    let mut input = serde_json::json!({ "command": command });
    if let Some(t) = timeout_ms {
        input["timeout_ms"] = t.into();
    }
    Request::Run(ToolCall {
        id: "c".into(),
        name: "bash".into(),
        input: input.to_string(),
    })
}

async fn run(w: &Worker, req: Request) -> ToolResult {
    match w.client.call(req).await.expect("call") {
        Response::Result(r) => r,
        other => panic!("unexpected {other:?}"),
    }
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}

/// Host pids of live (non-zombie) processes with `arg` among their arguments.
fn host_pids_with_arg(arg: &str) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|&b| b == 0).any(|a| a == arg.as_bytes()))
                && alive(pid)
        })
        .collect()
}

async fn wait_gone(arg: &str) -> bool {
    for _ in 0..300 {
        if host_pids_with_arg(arg).is_empty() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

async fn run_all(tier: &str) -> usize {
    let w = start(tier).await;
    let mut failures = 0;
    let mut check = |name: &str, ok: bool, detail: String| {
        if ok {
            println!("ok    {name}");
        } else {
            println!("FAIL  {name}\n{detail}");
            failures += 1;
        }
    };

    let defs = w.client.call(Request::Definitions).await.expect("defs");
    check(
        "definitions come from hanzo_tools::definitions()",
        defs == Response::Definitions(hanzo_tools::definitions()),
        format!("{defs:?}"),
    );

    let r = run(&w, bash("echo hello; echo oops >&2; exit 4", None)).await;
    check(
        "bash through the channel: output, exit code",
        r.output == "hello\noops\n[exit code 4]" && r.error.as_deref() == Some("exit code 4"),
        format!("{r:?}"),
    );

    // Streamed output arrives as items before the result.
    let mut stream = w
        .client
        .call_stream(bash("echo one; echo two", None))
        .await
        .expect("stream");
    let mut streamed = Vec::new();
    let mut result = None;
    while let Some(part) = stream.next().await {
        match part.expect("part") {
            StreamPart::Item(Item::Output { chunk }) => streamed.extend(chunk),
            StreamPart::Item(other) => panic!("unexpected item {other:?}"),
            StreamPart::Done(resp) => result = Some(resp),
        }
    }
    check(
        "bash output is streamed as items",
        String::from_utf8_lossy(&streamed) == "one\ntwo\n"
            && matches!(&result, Some(Response::Result(r)) if !r.is_error),
        format!("{streamed:?} {result:?}"),
    );

    let r = run(&w, bash("env", None)).await;
    check(
        "the worker's secret never reaches a command",
        !r.output.contains(CANARY) && !r.output.contains("HANZO_CANARY"),
        r.output.clone(),
    );

    let r = run(&w, bash("cat /root/.bashrc; ls /root", None)).await;
    check(
        "commands inherit the worker's Landlock (no $HOME)",
        r.is_error && r.output.contains("Permission denied"),
        format!("{r:?}"),
    );
    let r = run(
        &w,
        bash(
            "/usr/bin/python3 -c 'import socket; socket.socket(socket.AF_UNIX)'",
            None,
        ),
    )
    .await;
    check(
        "commands cannot create sockets",
        r.is_error && r.output.contains("PermissionError"),
        format!("{r:?}"),
    );
    let r = run(
        &w,
        Request::Run(ToolCall {
            id: "w".into(),
            name: "write_file".into(),
            input: r#"{"path": "../../etc/x", "content": "x"}"#.into(),
        }),
    )
    .await;
    check(
        "file tools refuse a path outside, naming the rule",
        r.is_error && r.error.as_deref().is_some_and(|e| e.contains("`..`")),
        format!("{r:?}"),
    );
    let r = run(
        &w,
        Request::Run(ToolCall {
            id: "w".into(),
            name: "write_file".into(),
            input: r#"{"path": "made/here.txt", "content": "ok"}"#.into(),
        }),
    )
    .await;
    check(
        "file tools write in the workspace",
        !r.is_error
            && std::fs::read_to_string(w.ws.path().join("made/here.txt"))
                .ok()
                .as_deref()
                == Some("ok"),
        format!("{r:?}"),
    );

    // Timeout: a command ignoring SIGTERM, with a child, is killed with its group. Processes are
    // found by a unique argument on the host's /proc (in tier B the command's own pids are those
    // of its namespace).
    let r = run(
        &w,
        bash(
            "trap '' TERM; (trap '' TERM; sleep 1001.25) & wait",
            Some(300),
        ),
    )
    .await;
    let dead = wait_gone("1001.25").await;
    check(
        "timeout kills a SIGTERM-ignoring command and its children",
        r.is_error
            && r.error
                .as_deref()
                .is_some_and(|e| e.starts_with("timed out"))
            && dead,
        format!("{r:?} children gone {dead}"),
    );

    // Cancel: dropping the stream cancels the request; the worker aborts it and its guard kills
    // the process group.
    let stream = w
        .client
        .call_stream(bash("sleep 1002.25 & wait", None))
        .await
        .expect("stream");
    let mut was_alive = false;
    for _ in 0..500 {
        if !host_pids_with_arg("1002.25").is_empty() {
            was_alive = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stream.cancel().await.expect("cancel");
    drop(stream);
    let dead = wait_gone("1002.25").await;
    check(
        "cancelling a call kills its command's process group",
        was_alive && dead,
        format!("alive before {was_alive} gone after {dead}"),
    );

    if tier == "auto" && hanzo_sandbox::doctor::probe_kernel().tier_b().is_ok() {
        // Tier B (auto): the worker and its commands live in their own namespaces.
        let git = std::process::Command::new("git")
            .args(["init", "-q"])
            .current_dir(w.ws.path())
            .status()
            .expect("git init");
        assert!(git.success());
        // Mounts are made when the worker starts: a .git created later is not protected, so this
        // worker shows the pid namespace only; `escape.rs` proves the protected paths.
        let r = run(
            &w,
            bash("echo $$; test -e /tmp/.X11-unix || echo private-tmp", None),
        )
        .await;
        let pid: Option<u32> = r.output.lines().next().and_then(|l| l.parse().ok());
        check(
            "tier B: commands run in the worker's pid namespace",
            pid.is_some_and(|p| p < 100),
            format!("{r:?}"),
        );
        // Orphans are reaped: the namespace's pid 1 (the host process's only child) keeps exactly
        // one child, the worker, and the killed background sleep leaves no zombie anywhere.
        let r = run(&w, bash("sleep 1003.25 & echo started", None)).await;
        let host_pid = w._child.id().expect("worker pid");
        let children = |pid: u32| -> Vec<u32> {
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        };
        // host process → pid 1 (reaper) → pid 2 (worker) → nothing once the command is done.
        let mut reaped = false;
        let mut seen = Vec::new();
        for _ in 0..300 {
            let init = children(host_pid);
            let workers: Vec<u32> = init.iter().flat_map(|&p| children(p)).collect();
            let leftovers: Vec<u32> = workers.iter().flat_map(|&p| children(p)).collect();
            seen = vec![init.clone(), workers.clone(), leftovers.clone()];
            if init.len() == 1 && workers.len() == 1 && leftovers.is_empty() {
                reaped = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        check(
            "tier B: pid 1 reaps what commands leave behind",
            r.output.starts_with("started") && reaped,
            format!("{r:?} children of pid 1: {seen:?}"),
        );
    }

    // The worker is still healthy after all that.
    let r = run(&w, bash("echo still here", None)).await;
    check(
        "the worker keeps serving",
        r.output == "still here\n[exit code 0]",
        format!("{r:?}"),
    );
    failures
}
