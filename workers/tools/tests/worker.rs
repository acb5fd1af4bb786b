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
use hanzo_ipc::socket::WriteHalf;
use hanzo_ipc::transport;
use hanzo_ipc::Role;
use hanzo_policy::isolation::IsolationMode;
use hanzo_policy::profile::ProfileContext;
use hanzo_sandbox::spawn::{configure_command, ChildSetup};
use hanzo_worker::WorkerOptions;
use std::os::fd::AsRawFd;
use std::process::Stdio;
use std::time::Duration;

const WORKER: &str = "__worker";
const CANARY: &str = "sk-canary-worker-93be";

type ToolsClient = Client<ToolsProtocol, WriteHalf>;

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
        // Worse than the supervisor ever does (it gives workers an allow-listed environment):
        // a secret in the worker's own environment must still not reach a command.
        .env("HANZO_CANARY_API_KEY", CANARY)
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

/// A command that leaves its process group in every way a shell can: a `setsid` child, a
/// double-forked `setsid` daemon ignoring SIGTERM and SIGHUP, a SIGTERM-ignoring child, and a
/// python child that calls `setpgid(0, 0)`; the shell itself ignores SIGTERM. Each writes its pid
/// (as its own pid namespace sees it) to `pids` in the workspace; the shell prints `ready` once
/// all five are there, then waits.
pub const ESCAPER: &str = r#"trap '' TERM
echo $$ >> pids
setsid sh -c 'echo $$ >> pids; exec sleep 300' &
sh -c 'setsid sh -c "trap \"\" TERM HUP; echo \$\$ >> pids; exec sleep 301" & exit 0'
sh -c 'trap "" TERM; echo $$ >> pids; exec sleep 302' &
/usr/bin/python3 -c 'import os, time; os.setpgid(0, 0); open("pids", "a").write("%d\n" % os.getpid()); time.sleep(303)' &
while [ "$(wc -l < pids)" -lt 5 ]; do sleep 0.05; done
echo ready
wait
"#;

/// A python program (no single quotes: it goes inside `'…'`) that serves TCP and UDP on
/// 127.0.0.1 and talks to itself.
const LOOPBACK_PY: &str = r#"
import socket, threading
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
def serve():
    c, _ = srv.accept(); c.sendall(b"hello"); c.close()
threading.Thread(target=serve).start()
cli = socket.create_connection(srv.getsockname(), timeout=5)
print("tcp ok", cli.recv(5).decode())
u1 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u1.bind(("127.0.0.1", 0))
u2 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u2.settimeout(5)
u2.sendto(b"ping", u1.getsockname())
data, _ = u1.recvfrom(4)
print("udp ok", data.decode())
"#;

/// The pid namespace the worker's commands run in: in tier B, that of the namespace's pid 1 (the
/// child the process we spawned cloned into it); in tier A, ours.
fn command_pid_ns(worker_host_pid: u32) -> String {
    let ns_of = |pid: u32| {
        std::fs::read_link(format!("/proc/{pid}/ns/pid"))
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    };
    let own = ns_of(worker_host_pid);
    std::fs::read_to_string(format!(
        "/proc/{worker_host_pid}/task/{worker_host_pid}/children"
    ))
    .unwrap_or_default()
    .split_whitespace()
    .filter_map(|p| p.parse::<u32>().ok())
    .map(ns_of)
    .find(|ns| !ns.is_empty() && *ns != own)
    .unwrap_or(own)
}

/// Live (non-zombie) host processes in pid namespace `ns` whose pid there is one of `inner`.
fn live_in_ns(ns: &str, inner: &[i32]) -> Vec<(i32, i32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|host| {
            let link = std::fs::read_link(format!("/proc/{host}/ns/pid")).ok()?;
            if link.display().to_string() != ns {
                return None;
            }
            let status = std::fs::read_to_string(format!("/proc/{host}/status")).ok()?;
            let nspid: i32 = status
                .lines()
                .find_map(|l| l.strip_prefix("NSpid:"))?
                .split_whitespace()
                .last()?
                .parse()
                .ok()?;
            (inner.contains(&nspid) && alive(host)).then_some((nspid, host))
        })
        .collect()
}

fn recorded_pids(ws: &std::path::Path) -> Vec<i32> {
    std::fs::read_to_string(ws.join("pids"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
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

    // Leaving the process group does not help: at the timeout every process the command started
    // is gone by the time the call returns (`setsid`, a double-forked daemon, SIGTERM ignored,
    // `setpgid`). Checked by pid, in the namespace the command saw.
    let ns = command_pid_ns(w._child.id().expect("worker pid"));
    let _ = std::fs::remove_file(w.ws.path().join("pids"));
    let r = run(&w, bash(ESCAPER, Some(4000))).await;
    let pids = recorded_pids(w.ws.path());
    let left = live_in_ns(&ns, &pids);
    check(
        "timeout kills descendants that left the group or session (setsid, double fork, setpgid)",
        r.error
            .as_deref()
            .is_some_and(|e| e.starts_with("timed out"))
            && r.output.contains("ready")
            && pids.len() == 5
            && left.is_empty(),
        format!("{r:?} recorded {pids:?} still alive (ns pid, host pid) {left:?}"),
    );

    // The same when the call is cancelled instead.
    let _ = std::fs::remove_file(w.ws.path().join("pids"));
    let mut stream = w
        .client
        .call_stream(bash(ESCAPER, None))
        .await
        .expect("stream");
    let mut seen = Vec::new();
    let ready = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(part) = stream.next().await {
            if let Ok(StreamPart::Item(Item::Output { chunk })) = part {
                seen.extend(chunk);
                if String::from_utf8_lossy(&seen).contains("ready") {
                    return true;
                }
            }
        }
        false
    })
    .await
    .unwrap_or(false);
    let pids = recorded_pids(w.ws.path());
    let before = live_in_ns(&ns, &pids).len();
    stream.cancel().await.expect("cancel");
    drop(stream);
    let mut left = live_in_ns(&ns, &pids);
    for _ in 0..500 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        left = live_in_ns(&ns, &pids);
    }
    check(
        "cancelling kills descendants that left the group or session",
        ready && pids.len() == 5 && before == 5 && left.is_empty(),
        format!("ready {ready} recorded {pids:?} alive before {before} still alive {left:?}"),
    );

    // Nothing a command leaves running outlives it either, group or not.
    let _ = std::fs::remove_file(w.ws.path().join("pids"));
    let r = run(
        &w,
        bash(
            "setsid sh -c 'echo $$ >> pids; exec sleep 304' & \
             while [ ! -s pids ]; do sleep 0.05; done; echo started",
            None,
        ),
    )
    .await;
    let pids = recorded_pids(w.ws.path());
    let left = live_in_ns(&ns, &pids);
    check(
        "a setsid child does not outlive a finished command",
        !r.is_error && pids.len() == 1 && left.is_empty(),
        format!("{r:?} recorded {pids:?} still alive {left:?}"),
    );

    // Network: tier A refuses inet sockets to commands; tier B gives them a loopback of their
    // own (TCP and UDP between two sockets of the command work) and nothing else (the test's own
    // listener on the host's 127.0.0.1 is unreachable).
    let tier_b = tier == "auto" && hanzo_sandbox::doctor::probe_kernel().tier_b().is_ok();
    let host_tcp = std::net::TcpListener::bind("127.0.0.1:0").expect("tcp");
    host_tcp.set_nonblocking(true).expect("nonblocking");
    let host_udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
    host_udp.set_nonblocking(true).expect("nonblocking");
    let (tcp_port, udp_port) = (
        host_tcp.local_addr().expect("addr").port(),
        host_udp.local_addr().expect("addr").port(),
    );
    let r = run(
        &w,
        bash(&format!("/usr/bin/python3 -c '{LOOPBACK_PY}'"), None),
    )
    .await;
    check(
        if tier_b {
            "tier B: a command serves and connects TCP and UDP on its own loopback"
        } else {
            "tier A: a command cannot create an inet socket"
        },
        if tier_b {
            r.output.contains("tcp ok hello") && r.output.contains("udp ok ping") && !r.is_error
        } else {
            r.is_error && r.output.contains("PermissionError")
        },
        format!("{r:?}"),
    );
    let r = run(
        &w,
        bash(
            &format!(
                "/usr/bin/python3 -c '
import socket
try:
    socket.create_connection((\"127.0.0.1\", {tcp_port}), timeout=2); print(\"TCP REACHED\")
except OSError as e:
    print(\"tcp denied\", e.errno)
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect((\"127.0.0.1\", {udp_port}))
    s.send(b\"x\"); s.settimeout(2); s.recv(1); print(\"UDP ANSWERED\")
except OSError as e:
    print(\"udp denied\", e.errno)
'"
            ),
            None,
        ),
    )
    .await;
    let mut b = [0u8; 4];
    check(
        "TCP and UDP to the host's 127.0.0.1 do not arrive",
        r.output.contains("tcp denied")
            && r.output.contains("udp denied")
            && host_tcp
                .accept()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock)
            && host_udp
                .recv(&mut b)
                .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
        format!("{r:?}"),
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
        // host process → pid 1 (reaper) → the command launcher (when commands get loopback
        // networking) and pid 2 (the worker) → nothing once the command is done (the
        // launcher's keepers are reaped by the kernel: it ignores SIGCHLD).
        let mut reaped = false;
        let mut seen = Vec::new();
        for _ in 0..300 {
            let init = children(host_pid);
            let under_init: Vec<u32> = init.iter().flat_map(|&p| children(p)).collect();
            let leftovers: Vec<u32> = under_init.iter().flat_map(|&p| children(p)).collect();
            seen = vec![init.clone(), under_init.clone(), leftovers.clone()];
            if init.len() == 1 && (1..=2).contains(&under_init.len()) && leftovers.is_empty() {
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
