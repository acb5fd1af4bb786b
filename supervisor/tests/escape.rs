//! `hanzo-dev sandbox`'s command line (`cli/sandbox.rs`). The confinement it applies — the whole
//! escape battery, the canary, ordinary work — is proven by `workers/tools/tests/escape.rs`, which
//! runs the same `hanzo_tools::oneshot::run` in fresh processes.

use clap::Parser;
use hanzo_dev::cli::sandbox::{self, one_shot, Args};
use hanzo_policy::isolation::IsolationMode;
use hanzo_sandbox::doctor::KernelReport;
use std::ffi::OsString;
use std::path::PathBuf;

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    args: Args,
}

fn parse(argv: &[&str]) -> Result<Args, clap::Error> {
    Cli::try_parse_from(std::iter::once("sandbox").chain(argv.iter().copied())).map(|c| c.args)
}

fn report(userns: Result<(), String>) -> KernelReport {
    KernelReport {
        landlock_abi: 6,
        landlock_error: None,
        seccomp: true,
        user_namespaces: userns,
        container: None,
        container_evidence: None,
        kernel_release: "6.8".into(),
        arch: "x86_64".into(),
        running_as_root: false,
    }
}

#[test]
fn arguments_parse_with_the_command_after_the_double_dash() {
    let a = parse(&[
        "--isolation",
        "strict",
        "--workspace",
        "/w",
        "--allow-write",
        "/a",
        "--allow-write",
        "/b",
        "--allow-read",
        "/opt/tc",
        "--",
        "ls",
        "-l",
        "--all",
    ])
    .expect("parse");
    assert_eq!(a.isolation, IsolationMode::Strict);
    assert_eq!(a.workspace, Some(PathBuf::from("/w")));
    assert_eq!(a.allow_write, [PathBuf::from("/a"), PathBuf::from("/b")]);
    assert_eq!(a.allow_read, [PathBuf::from("/opt/tc")]);
    assert_eq!(a.command, ["ls", "-l", "--all"].map(OsString::from));
    let d = parse(&["--", "/bin/true"]).expect("parse");
    assert_eq!(d.isolation, IsolationMode::Auto);
    assert!(parse(&[]).is_err(), "a command is required");
    assert!(parse(&["--isolation", "off", "--", "true"]).is_err());
}

#[test]
fn the_one_shot_run_takes_the_workspace_and_grants_from_the_arguments() {
    let a = parse(&["--allow-write", "/x", "--", "make", "-j2"]).expect("parse");
    let spec = one_shot(&a, &hanzo_dev::secrets::StartEnv { vars: Vec::new() }).expect("spec");
    assert_eq!(spec.workspace, std::env::current_dir().expect("cwd"));
    assert_eq!(spec.allow_write, [PathBuf::from("/x")]);
    assert_eq!(spec.command, ["make", "-j2"].map(OsString::from));
    // Nothing from the environment is added: the command gets the allow-list only.
    assert!(spec.extra_env.is_empty());
}

#[test]
fn entry_point_and_exit_code_match_the_cli() {
    // What `cli::run` will call once the subcommand is wired.
    let _: fn(&Args, hanzo_dev::secrets::StartEnv) -> anyhow::Result<i32> = sandbox::run;
    assert_eq!(
        sandbox::ISOLATION_UNAVAILABLE,
        hanzo_dev::cli::exit::ISOLATION_UNAVAILABLE
    );
}

#[test]
fn strict_failure_names_the_cause_and_the_way_out() {
    let e =
        sandbox::strict_unavailable(&"unshare: EPERM", || report(Err("EPERM; sysctl …".into())));
    assert!(
        e.contains("needs tier B")
            && e.contains("unshare: EPERM")
            && e.contains("sysctl")
            && e.contains("hanzo-dev doctor")
            && e.contains("--isolation auto"),
        "{e}"
    );
}

#[test]
fn isolation_maps_to_the_one_shot_tier() {
    let env = hanzo_dev::secrets::StartEnv { vars: Vec::new() };
    let auto = one_shot(&parse(&["--", "true"]).expect("parse"), &env).expect("spec");
    assert_eq!(auto.isolation, IsolationMode::Auto);
    let strict = one_shot(
        &parse(&["--isolation", "strict", "--", "true"]).expect("parse"),
        &env,
    )
    .expect("spec");
    assert_eq!(strict.isolation, IsolationMode::Strict);
}

// --- Commands that leave their process group, through the real supervisor and tools worker.
//
// The tools worker runs each command under a keeper (`hanzo_sandbox::keeper`) that kills every
// process of the command's Landlock domain, whatever its session or group. This runs the tier
// the host offers (`auto`: B here when user namespaces work); `workers/tools/tests/worker.rs`
// runs the same checks against a worker forced to tier A and one in tier B.

mod common;

use hanzo_dev::tree::Supervisor;
use hanzo_ipc::channel::StreamPart;
use hanzo_ipc::roles::tools::{Item, Request, Response, ToolCall};
use std::time::Duration;

/// Leaves the group every way a shell can (`setsid`; a double-forked `setsid` daemon ignoring
/// SIGTERM/SIGHUP; a SIGTERM-ignoring child; `setpgid(0, 0)` from python), each writing its pid
/// (as its own pid namespace sees it) to `pids`; prints `ready` once all five are written.
const ESCAPER: &str = r#"trap '' TERM
echo $$ >> pids
setsid sh -c 'echo $$ >> pids; exec sleep 310' &
sh -c 'setsid sh -c "trap \"\" TERM HUP; echo \$\$ >> pids; exec sleep 311" & exit 0'
sh -c 'trap "" TERM; echo $$ >> pids; exec sleep 312' &
/usr/bin/python3 -c 'import os, time; os.setpgid(0, 0); open("pids", "a").write("%d\n" % os.getpid()); time.sleep(313)' &
while [ "$(wc -l < pids)" -lt 5 ]; do sleep 0.05; done
echo ready
wait
"#;

fn bash(command: &str, timeout_ms: Option<u64>) -> Request {
    let mut input = serde_json::json!({ "command": command });
    if let Some(t) = timeout_ms {
        input["timeout_ms"] = t.into();
    }
    Request::Run(ToolCall {
        id: "e".into(),
        name: "bash".into(),
        input: input.to_string(),
    })
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}

/// Live (non-zombie) processes of pid namespace `ns` whose pid there is one of `inner`, as
/// (pid in the namespace, host pid).
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

/// The pid namespace a worker's commands run in: in tier B, that of the namespace's pid 1 (the
/// child the worker process cloned into it); in tier A, the worker's own.
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

/// The supervisor's tools worker, its workspace, and the pid namespace its commands run in
/// (`pid_for_children` of the worker process: the namespace tier B made, or the host's).
struct Tree {
    sup: Supervisor,
    ws: tempfile::TempDir,
    _run: hanzo_dev::startup::RunDir,
    ns: String,
    tier: &'static str,
}

async fn tools_tree() -> Tree {
    let ws = tempfile::tempdir().expect("ws");
    let (cfg, run) = common::tree_config(ws.path(), common::path_only());
    let sup = Supervisor::start(cfg).await.expect("start");
    let (_, info) = tokio::time::timeout(Duration::from_secs(30), sup.tools.ready())
        .await
        .expect("hang guard")
        .expect("tools ready");
    let ns = command_pid_ns(info.pid);
    let tier = if info.attestation.namespaces.is_empty() {
        "A"
    } else {
        "B"
    };
    Tree {
        sup,
        ws,
        _run: run,
        ns,
        tier,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_command_leaves_nothing_even_after_setsid_double_fork_or_setpgid() {
    let Tree {
        sup,
        ws,
        _run,
        ns,
        tier,
    } = tools_tree().await;
    let r = tokio::time::timeout(
        Duration::from_secs(60),
        sup.tools.call(bash(ESCAPER, Some(4000))),
    )
    .await
    .expect("hang guard")
    .expect("the call completes");
    let Response::Result(res) = r else {
        panic!("unexpected {r:?}")
    };
    // Checked the moment the call has returned: the worker answers only once the command's
    // keeper has swept and reaped everything.
    let pids = recorded_pids(ws.path());
    let left = live_in_ns(&ns, &pids);
    assert!(
        res.error
            .as_deref()
            .is_some_and(|e| e.starts_with("timed out"))
            && res.output.contains("ready"),
        "tier {tier}: {res:?}"
    );
    assert_eq!(pids.len(), 5, "tier {tier}: {pids:?}");
    assert!(
        left.is_empty(),
        "tier {tier}: still alive (ns pid, host pid): {left:?}"
    );
    sup.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_command_leaves_nothing_even_after_setsid_double_fork_or_setpgid() {
    let Tree {
        sup,
        ws,
        _run,
        ns,
        tier,
    } = tools_tree().await;
    let mut stream = sup
        .tools
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
    assert!(ready, "tier {tier}: {}", String::from_utf8_lossy(&seen));
    let pids = recorded_pids(ws.path());
    assert_eq!(pids.len(), 5, "tier {tier}: {pids:?}");
    assert_eq!(live_in_ns(&ns, &pids).len(), 5, "tier {tier}: all run");
    stream.cancel().await.expect("cancel");
    drop(stream);
    // Cancellation is asynchronous (the worker drops the call; the keeper sweeps).
    let gone = async {
        loop {
            if live_in_ns(&ns, &pids).is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let swept = tokio::time::timeout(Duration::from_secs(20), gone).await;
    assert!(
        swept.is_ok(),
        "tier {tier}: still alive after cancel: {:?}",
        live_in_ns(&ns, &pids)
    );
    sup.shutdown().await;
}

/// Tier B: commands have a loopback of their own (a TCP server and client inside one command
/// work) and cannot reach a listener the test opened on the host's 127.0.0.1; tier A: no inet
/// socket at all. The tools worker itself refuses inet sockets in both tiers (its attestation).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_get_their_own_loopback_in_tier_b_and_never_the_hosts() {
    let Tree {
        sup,
        ws: _ws,
        _run,
        ns: _,
        tier,
    } = tools_tree().await;
    let host = std::net::TcpListener::bind("127.0.0.1:0").expect("tcp");
    host.set_nonblocking(true).expect("nonblocking");
    let port = host.local_addr().expect("addr").port();
    let script = format!(
        "/usr/bin/python3 -c '
import socket, threading
try:
    srv = socket.socket(); srv.bind((\"127.0.0.1\", 0)); srv.listen(1)
    threading.Thread(target=lambda: srv.accept()[0].sendall(b\"hello\")).start()
    print(\"own\", socket.create_connection(srv.getsockname(), timeout=5).recv(5).decode())
except OSError as e:
    print(\"own denied\", e.errno)
try:
    socket.create_connection((\"127.0.0.1\", {port}), timeout=2); print(\"HOST REACHED\")
except OSError as e:
    print(\"host denied\", e.errno)
'"
    );
    let r = sup.tools.call(bash(&script, None)).await.expect("call");
    let Response::Result(res) = r else {
        panic!("unexpected {r:?}")
    };
    let (_, info) = sup.tools.ready().await.expect("ready");
    assert_eq!(
        info.attestation.seccomp.sockets,
        hanzo_ipc::attest::SocketPolicy::None,
        "the worker itself creates no socket at all"
    );
    if tier == "B" {
        assert!(res.output.contains("own hello"), "tier B: {res:?}");
        assert!(
            info.attestation
                .namespaces
                .iter()
                .any(|n| n == "net (loopback only, for commands)"),
            "{:?}",
            info.attestation.namespaces
        );
    } else {
        assert!(res.output.contains("own denied 13"), "tier A: {res:?}");
    }
    assert!(
        res.output.contains("host denied") && !res.output.contains("REACHED"),
        "tier {tier}: {res:?}"
    );
    assert!(host
        .accept()
        .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock));
    sup.shutdown().await;
}

// --- The real `hanzo-dev sandbox` binary, attacked the way issue 10 did: through a real
// terminal (a pty whose slave is the caller's controlling terminal, as in an interactive shell),
// and as a real non-root user. The terminal is driven by python's `os.openpty` (the test itself
// stays free of `unsafe`).

/// Opens a pty, starts `hanzo-dev sandbox --isolation MODE -- CMD…` as a session leader with the
/// slave as its controlling terminal and stdio, and prints a JSON report: the exit status, what
/// the command wrote (read from the master), and what was left queued as *input* on the
/// terminal afterwards (read from the slave after a control line written to the master). With
/// `--interrupt`, waits for `ready` on the master and types ^C.
const PTY_DRIVER: &str = r#"
import fcntl, json, os, select, subprocess, sys, termios, time
exe, mode, interrupt, cmd = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4:]
master, slave = os.openpty()
def ctty():
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
p = subprocess.Popen([exe, "sandbox", "--isolation", mode, "--"] + cmd,
                     stdin=slave, stdout=slave, stderr=slave, preexec_fn=ctty, close_fds=True)
out = b""
deadline = time.monotonic() + 60
typed = False
while time.monotonic() < deadline:
    r, _, _ = select.select([master], [], [], 0.1)
    if r:
        try:
            out += os.read(master, 65536)
        except OSError:
            pass
    if interrupt and not typed and b"ready" in out:
        os.write(master, b"\x03"); typed = True
    if p.poll() is not None:
        break
else:
    p.kill()
code = p.wait()
while select.select([master], [], [], 0.2)[0]:
    try:
        chunk = os.read(master, 65536)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
# Whatever the command pushed into the terminal's input queue is read by the next reader of the
# slave: the caller's shell. A control line typed on the master shows the queue is readable.
os.write(master, b"control\n")
time.sleep(0.2)
os.set_blocking(slave, False)
queued = b""
try:
    while True:
        c = os.read(slave, 4096)
        if not c:
            break
        queued += c
except BlockingIOError:
    pass
print(json.dumps({"code": code, "out": out.decode("utf-8", "replace"), "queued": queued.decode("utf-8", "replace")}))
"#;

/// The attack run inside the sandbox: open the controlling terminal, then push a command line
/// into the terminal's input through each standard descriptor with `TIOCSTI`, and try
/// `TIOCLINUX`.
const TIOCSTI_ATTACK: &str = r#"
import fcntl, os, termios
r = []
try:
    os.open("/dev/tty", os.O_RDWR); r.append("tty=open")
except OSError as e:
    r.append("tty=%d" % e.errno)
for fd in (0, 1, 2):
    try:
        for ch in b"echo INJECTED\n":
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([ch]))
        r.append("sti%d=ok" % fd)
    except OSError as e:
        r.append("sti%d=%d" % (fd, e.errno))
try:
    fcntl.ioctl(0, 0x541C, b"\x06\x00")
    r.append("linux=ok")
except OSError as e:
    r.append("linux=%d" % e.errno)
print("RESULT", " ".join(r))
"#;

struct PtyRun {
    code: i64,
    out: String,
    queued: String,
}

fn through_pty(mode: &str, interrupt: bool, cmd: &[&str]) -> PtyRun {
    let ws = tempfile::tempdir().expect("workspace");
    let out = std::process::Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(PTY_DRIVER)
        .arg(env!("CARGO_BIN_EXE_hanzo-dev"))
        .arg(mode)
        .arg(if interrupt { "1" } else { "0" })
        .args(cmd)
        .current_dir(ws.path())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run the pty driver (python3)");
    assert!(
        out.status.success(),
        "pty driver failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("driver report");
    PtyRun {
        code: v["code"].as_i64().expect("code"),
        out: v["out"].as_str().expect("out").to_string(),
        queued: v["queued"].as_str().expect("queued").to_string(),
    }
}

/// The isolation modes to attack: tier A always, tier B where the kernel offers it.
fn modes() -> Vec<&'static str> {
    let mut m = vec!["tier-a"];
    match hanzo_sandbox::doctor::probe_kernel().tier_b() {
        Ok(()) => m.push("strict"),
        Err(why) => println!("tier B unavailable here ({why}): tier A only"),
    }
    m
}

#[test]
fn a_command_under_hanzo_dev_sandbox_cannot_push_keystrokes_into_the_callers_terminal() {
    for mode in modes() {
        let run = through_pty(mode, false, &["/usr/bin/python3", "-c", TIOCSTI_ATTACK]);
        let result = run
            .out
            .lines()
            .find_map(|l| l.trim().strip_prefix("RESULT "))
            .unwrap_or_else(|| panic!("{mode}: no result in {:?}", run.out))
            .to_string();
        assert_eq!(run.code, 0, "{mode}: {}", run.out);
        // No controlling terminal (ENXIO), every TIOCSTI and TIOCLINUX refused by the filter.
        assert_eq!(
            result, "tty=6 sti0=1 sti1=1 sti2=1 linux=1",
            "{mode}: {}",
            run.out
        );
        // Nothing reached the terminal's input: the caller's shell would read only what the
        // user typed.
        assert_eq!(
            run.queued, "control\n",
            "{mode}: input queued {:?}",
            run.queued
        );
    }
}

#[test]
fn ctrl_c_on_the_callers_terminal_still_interrupts_the_command() {
    for mode in modes() {
        let run = through_pty(mode, true, &["/bin/sh", "-c", "echo ready; exec sleep 120"]);
        assert_eq!(run.code, 128 + 2, "{mode}: {}", run.out);
    }
}

/// The non-root account the tests run `hanzo-dev sandbox` as (created when absent; tests run as
/// root). Returns (uid, gid).
fn test_user() -> (u32, u32) {
    const NAME: &str = "hanzo-sbx";
    let id = |flag: &str| -> Option<u32> {
        let out = std::process::Command::new("id")
            .args([flag, NAME])
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    if id("-u").is_none() {
        // Exit 9: created meanwhile by another test process.
        let made = std::process::Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
                NAME,
            ])
            .status()
            .expect("useradd (package passwd; ./scripts/setup.sh installs it)");
        assert!(made.success() || made.code() == Some(9), "useradd: {made}");
    }
    (
        id("-u").expect("the test user's uid"),
        id("-g").expect("the test user's gid"),
    )
}

/// `hanzo-dev sandbox --isolation MODE --workspace WS -- sh -c SCRIPT`, run through `prefix`
/// (e.g. `setpriv …`), with a clean environment whose `HOME` is `home`: (exit code, stdout,
/// stderr).
fn sandbox_via(
    prefix: &[&str],
    mode: &str,
    ws: &std::path::Path,
    home: &std::path::Path,
    script: &str,
) -> (i32, String, String) {
    let bin = env!("CARGO_BIN_EXE_hanzo-dev");
    let (program, pre) = prefix
        .split_first()
        .map_or((bin, &[][..]), |(p, r)| (*p, r));
    let mut cmd = std::process::Command::new(program);
    cmd.args(pre);
    if !prefix.is_empty() {
        cmd.arg(bin);
    }
    let out = cmd
        .args(["sandbox", "--isolation", mode, "--workspace"])
        .arg(ws)
        .args(["--", "/bin/sh", "-c", script])
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", home)
        .current_dir(ws)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run hanzo-dev sandbox");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn hanzo_dev_sandbox_works_for_a_real_non_root_user_in_both_tiers() {
    use std::os::unix::fs::PermissionsExt;
    let (uid, gid) = test_user();
    let ws = tempfile::tempdir().expect("workspace");
    std::os::unix::fs::chown(ws.path(), Some(uid), Some(gid)).expect("chown the workspace");
    let home = tempfile::tempdir().expect("home");
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let (u, g) = (uid.to_string(), gid.to_string());
    let setpriv = [
        "setpriv",
        "--reuid",
        u.as_str(),
        "--regid",
        g.as_str(),
        "--clear-groups",
    ];
    let script = "echo tier=$HANZO_SANDBOX_TIER uid=$(id -u); echo written > out.txt; \
                  cat /etc/shadow >/dev/null 2>&1 && echo SHADOW-READ; exit 0";
    let mut modes = vec![("tier-a", "A")];
    if hanzo_sandbox::doctor::probe_kernel().tier_b().is_ok() {
        // Twice: the id maps were written racing pid 1's dumpable flag.
        modes.push(("strict", "B"));
        modes.push(("strict", "B"));
    }
    for (mode, tier) in modes {
        let _ = std::fs::remove_file(ws.path().join("out.txt"));
        let (code, out, err) = sandbox_via(&setpriv, mode, ws.path(), home.path(), script);
        assert_eq!(code, 0, "{mode} as uid {uid}: {out}{err}");
        assert!(
            out.contains(&format!("tier={tier} uid={uid}")),
            "{mode}: {out}{err}"
        );
        assert!(!out.contains("SHADOW-READ"), "{mode}: {out}");
        assert!(
            !err.contains("uid 0"),
            "{mode}: no root warning for a user: {err}"
        );
        use std::os::unix::fs::MetadataExt;
        let written = std::fs::metadata(ws.path().join("out.txt")).expect("the command's file");
        assert_eq!(written.uid(), uid, "{mode}: the file belongs to the user");
    }
}

#[test]
fn auto_falls_back_to_tier_a_with_the_reason_when_namespaces_are_refused() {
    let ws = tempfile::tempdir().expect("workspace");
    let home = tempfile::tempdir().expect("home");
    // A user namespace whose own limit on nested user namespaces is 0: creating tier B's fails.
    let bin = env!("CARGO_BIN_EXE_hanzo-dev");
    let no_userns = |mode: &str| {
        let out = std::process::Command::new("unshare")
            .args(["--user", "--map-root-user", "/bin/sh", "-c"])
            .arg(format!(
                "echo 0 > /proc/sys/user/max_user_namespaces && exec \"$0\" sandbox \
                 --isolation {mode} --workspace \"$1\" -- /bin/sh -c 'echo tier=$HANZO_SANDBOX_TIER'"
            ))
            .arg(bin)
            .arg(ws.path())
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", home.path())
            .current_dir(ws.path())
            .output()
            .expect("unshare (util-linux)");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = no_userns("auto");
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out.trim(), "tier=A", "{err}");
    assert!(
        err.contains("tier B is unavailable") && err.contains("running in tier A"),
        "the reason is given: {err}"
    );
    let (code, out, err) = no_userns("strict");
    assert_eq!(code, sandbox::ISOLATION_UNAVAILABLE, "{out}{err}");
    assert!(out.is_empty(), "nothing ran: {out}");
    assert!(err.contains("--isolation strict needs tier B"), "{err}");
}
