//! The escape battery: every attempt is a real process run under the tools confinement (the same
//! path `hanzo-dev sandbox` takes: this binary re-executes itself as a fresh single-threaded
//! process that runs `hanzo_tools::oneshot::run`, which starts the attempt through the runner),
//! and every attempt must fail — with the kernel's answer checked where there is one, and the
//! target checked untouched afterwards. A secret canary sits in the sandbox process's
//! environment, in a fake `~/.ssh` key, in a credential file under `XDG_CONFIG_HOME` and in a
//! fake SSH host key under `/etc/ssh`; it must never appear in any attempt's output. Ordinary
//! work (`git status`, `python3 -c`, `cargo build --offline`) must still succeed. Both tiers run
//! the whole battery; what only tier B promises (the read-only host, protected git paths, a
//! private `/tmp`, hidden configuration inside the workspace) is checked in tier B, and what
//! tier A must refuse instead is checked there.
//!
//! A custom harness (`harness = false`): confinement needs a process of its own, and libtest would
//! run tests on threads.

use hanzo_policy::isolation::IsolationMode;
use hanzo_policy::profile::CommandLimits;
use hanzo_tools::oneshot::{self, OneShot};
use std::ffi::OsString;
use std::io::{ErrorKind, Read};
use std::net::{TcpListener, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const CHILD: &str = "__sandbox";
const CANARY: &str = "sk-canary-HANZO-7d41c2";
const PY: &str = "/usr/bin/python3";

/// The sandboxed side: `__sandbox WORKSPACE AS_BYTES READ_PATHS(:-separated or -) TIER(a|b) --
/// CMD…`; bounds and hidden paths from `HANZO_TEST_*` variables (which the command's own
/// allow-listed environment never carries).
fn child(args: &[OsString]) -> i32 {
    let s = |i: usize| args.get(i).map(|a| a.to_string_lossy().into_owned());
    let (Some(ws), Some(as_bytes), Some(reads), Some(tier)) = (s(0), s(1), s(2), s(3)) else {
        eprintln!("bad child arguments");
        return 100;
    };
    let var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let mut limits = CommandLimits {
        address_space: as_bytes
            .parse()
            .ok()
            .or(CommandLimits::default().address_space),
        ..CommandLimits::default()
    };
    if let Some(t) = var("HANZO_TEST_TMP_SIZE") {
        limits.tmp_size = t;
    }
    if let Some(m) = var("HANZO_TEST_MAX_MEMORY") {
        limits.cgroup.max_memory = Some(m);
    }
    if let Some(p) = var("HANZO_TEST_MAX_PIDS") {
        limits.cgroup.max_pids = Some(p);
    }
    let hidden: Vec<PathBuf> = std::env::var("HANZO_TEST_HIDDEN")
        .map(|h| h.split(':').map(PathBuf::from).collect())
        .unwrap_or_default();
    let allow_read = if reads == "-" {
        Vec::new()
    } else {
        reads.split(':').map(PathBuf::from).collect()
    };
    let spec = OneShot {
        workspace: PathBuf::from(ws),
        allow_write: Vec::new(),
        allow_read,
        extra_env: Vec::new(),
        limits,
        isolation: if tier == "b" {
            IsolationMode::Strict
        } else {
            IsolationMode::TierA
        },
        hidden,
        allow_dangerous_workspace: std::env::var_os("HANZO_TEST_FORCE").is_some(),
        command: args[5..].to_vec(),
    };
    match oneshot::run(&spec) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sandbox: {e}");
            101
        }
    }
}

struct Fixture {
    tier_b: bool,
    _root: tempfile::TempDir,
    root: PathBuf,
    ws: PathBuf,
    out: PathBuf,
    home: PathBuf,
    xdg: PathBuf,
    /// A file outside every grant that stays visible in tier B (not under a hidden directory,
    /// as the temporary root is), for the metadata attacks.
    canary: Canary,
}

/// A file removed when dropped.
struct Canary(PathBuf);

impl Drop for Canary {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl Fixture {
    fn new(tier_b: bool) -> Fixture {
        let root_dir = tempfile::Builder::new()
            .prefix("hanzo-escape-")
            .tempdir()
            .expect("tempdir");
        let root = root_dir.path().canonicalize().expect("canon");
        let ws = root.join("ws");
        let out = root.join("out");
        let home = root.join("home");
        let xdg = root.join("xdg");
        for d in [&ws, &out, &home.join(".ssh"), &xdg.join("hanzo")] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        std::fs::write(
            home.join(".ssh/id_ed25519"),
            format!("PRIVATE KEY {CANARY}\n"),
        )
        .expect("key");
        std::fs::write(
            xdg.join("hanzo/credentials.json"),
            format!("{{\"anthropic\": \"{CANARY}\"}}\n"),
        )
        .expect("cred");
        std::fs::write(out.join("victim"), "original\n").expect("victim");
        std::fs::write(ws.join("file.txt"), "workspace file\n").expect("ws file");
        std::os::unix::fs::symlink(&out, ws.join("link-out")).expect("symlink");
        let git = Command::new("git")
            .args(["init", "-q"])
            .current_dir(&ws)
            .status()
            .expect("git init");
        assert!(git.success());
        std::fs::create_dir_all(ws.join(".hanzo")).expect("mkdir .hanzo");
        std::fs::write(ws.join(".hanzo/settings.json"), "{}\n").expect("settings");
        // A husky-style hooks directory the repository's configuration points at.
        std::fs::create_dir_all(ws.join(".husky")).expect("mkdir .husky");
        let hooks = Command::new("git")
            .args(["config", "core.hooksPath", ".husky"])
            .current_dir(&ws)
            .status()
            .expect("git config");
        assert!(hooks.success());
        let exe = std::env::current_exe().expect("exe");
        let canary = Canary(exe.parent().expect("a directory").join(format!(
            "hanzo-escape-canary-{}-{}",
            std::process::id(),
            u8::from(tier_b)
        )));
        std::fs::write(&canary.0, "canary\n").expect("canary");
        std::fs::set_permissions(&canary.0, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        Fixture {
            tier_b,
            _root: root_dir,
            root,
            ws,
            out,
            home,
            xdg,
            canary,
        }
    }

    /// Run `sh -c cmd` sandboxed; returns (exit code, combined output).
    fn sandbox(&self, cmd: &str, as_bytes: Option<u64>, reads: &[PathBuf]) -> (i32, String) {
        let mut call = self.call(cmd);
        call.as_bytes = as_bytes;
        call.reads = reads.to_vec();
        call.go()
    }

    /// A sandboxed `sh -c cmd` to adjust before running it.
    fn call(&self, cmd: &str) -> Call<'_> {
        Call {
            fx: self,
            cmd: cmd.to_string(),
            as_bytes: None,
            reads: Vec::new(),
            workspace: self.ws.clone(),
            env: Vec::new(),
        }
    }
}

/// One sandboxed command and what it runs with.
struct Call<'a> {
    fx: &'a Fixture,
    cmd: String,
    as_bytes: Option<u64>,
    reads: Vec<PathBuf>,
    workspace: PathBuf,
    /// `HANZO_TEST_*` settings for the sandbox process.
    env: Vec<(String, String)>,
}

impl Call<'_> {
    fn set(mut self, k: &str, v: impl ToString) -> Self {
        self.env.push((k.to_string(), v.to_string()));
        self
    }

    fn workspace(mut self, ws: &Path) -> Self {
        self.workspace = ws.to_path_buf();
        self
    }

    fn go(self) -> (i32, String) {
        let reads = if self.reads.is_empty() {
            "-".to_string()
        } else {
            self.reads
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(":")
        };
        let fx = self.fx;
        let exe = std::env::current_exe().expect("exe");
        let out = Command::new(exe)
            .arg(CHILD)
            .arg(&self.workspace)
            .arg(
                self.as_bytes
                    .map(|b| b.to_string())
                    .unwrap_or_else(|| "-".into()),
            )
            .arg(reads)
            .arg(if fx.tier_b { "b" } else { "a" })
            .arg("--")
            .args(["/bin/sh", "-c", &self.cmd])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", &fx.home)
            .env("XDG_CONFIG_HOME", &fx.xdg)
            .env("HANZO_CANARY_API_KEY", CANARY)
            .env("SSH_AUTH_SOCK", fx.out.join("agent.sock"))
            .envs(self.env)
            .current_dir(&self.workspace)
            .stdin(Stdio::null())
            .output()
            .expect("run the sandbox");
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        (out.status.code().unwrap_or(-1), text)
    }
}

/// A python snippet that makes one raw syscall and prints `DENIED errno=N` or `ALLOWED`, exiting
/// 1 or 0.
fn py_syscall(setup: &str, call: &str) -> String {
    format!(
        "{PY} -c '
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
{setup}
r = {call}
if r < 0:
    print(\"DENIED errno=%d\" % ctypes.get_errno()); sys.exit(1)
print(\"ALLOWED\"); sys.exit(0)
'"
    )
}

struct Report {
    failures: Vec<String>,
    passed: usize,
}

impl Report {
    fn check(&mut self, name: &str, ok: bool, detail: &str) {
        if ok {
            self.passed += 1;
            println!("ok    {name}");
        } else {
            println!("FAIL  {name}\n{detail}");
            self.failures.push(name.to_string());
        }
    }
}

/// An attempt that must fail: non-zero exit, `expect` (if any) in the output, no canary.
fn attempt(fx: &Fixture, r: &mut Report, name: &str, cmd: &str, expect: Option<&str>) -> String {
    let (code, out) = fx.sandbox(cmd, None, &[]);
    let ok = code != 0
        && code != 100
        && code != 101
        && expect.is_none_or(|e| out.contains(e))
        && !out.contains(CANARY);
    r.check(name, ok, &format!("  exit {code}; output:\n{out}"));
    out
}

const EPERM: &str = "DENIED errno=1";
const HOST_KEY: &str = "/etc/ssh/ssh_host_hanzo_canary_key";

/// The canary host key, removed when dropped.
struct HostKey;

impl HostKey {
    fn create() -> HostKey {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::create_dir_all("/etc/ssh").expect("mkdir /etc/ssh");
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(HOST_KEY)
            .expect("the tests run as root: write the canary host key");
        std::io::Write::write_all(&mut f, format!("PRIVATE KEY {CANARY}\n").as_bytes())
            .expect("write");
        HostKey
    }
}

impl Drop for HostKey {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(HOST_KEY);
    }
}
const EACCES: &str = "DENIED errno=13";

fn main() {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == CHILD) {
        std::process::exit(child(&args[2..]));
    }
    // `cargo test` passes libtest flags; a filter or `--list` is not supported here.
    // nextest lists with `--list --format terse` (and `--ignored` for ignored tests: none here).
    if args.iter().any(|a| a == "--list") {
        if !args.iter().any(|a| a == "--ignored") {
            println!("escape: test");
        }
        return;
    }
    // A root-only SSH host key canary (removed at the end): what `cat` must not reach.
    let _host_key = HostKey::create();
    let mut failed = Vec::new();
    for tier_b in [false, true] {
        let tier = if tier_b { "B" } else { "A" };
        if tier_b {
            if let Err(why) = hanzo_sandbox::doctor::probe_kernel().tier_b() {
                println!("\nskip  tier B: {why}");
                continue;
            }
        }
        println!("\n== tier {tier}");
        let r = battery(tier_b);
        println!(
            "escape battery (tier {tier}): {} passed, {} failed",
            r.passed,
            r.failures.len()
        );
        failed.extend(r.failures.into_iter().map(|f| format!("tier {tier}: {f}")));
    }
    if !failed.is_empty() {
        println!("failed: {failed:?}");
        std::process::exit(1);
    }
}

fn battery(tier_b: bool) -> Report {
    let fx = Fixture::new(tier_b);
    let mut r = Report {
        failures: Vec::new(),
        passed: 0,
    };
    let me = std::process::id();
    let out = fx.out.display().to_string();
    let out_name = fx
        .out
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let ws_name = fx
        .ws
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();

    // --- Secrets: files and environment.
    attempt(
        &fx,
        &mut r,
        "read ~/.ssh key",
        &format!("cat {}/.ssh/id_ed25519", fx.home.display()),
        None,
    );
    attempt(
        &fx,
        &mut r,
        "read the credential file",
        &format!("cat {}/hanzo/credentials.json", fx.xdg.display()),
        None,
    );
    attempt(&fx, &mut r, "list the real $HOME", "ls /root", None);
    let (code, env_out) = fx.sandbox(
        "env; echo; printenv HANZO_CANARY_API_KEY; exit 0",
        None,
        &[],
    );
    r.check(
        "the canary is not in the command's environment",
        code == 0
            && env_out.contains(if fx.tier_b {
                "HANZO_SANDBOX_TIER=B"
            } else {
                "HANZO_SANDBOX_TIER=A"
            })
            && !env_out.contains(CANARY)
            && !env_out.contains("HANZO_CANARY")
            && !env_out.contains("SSH_AUTH_SOCK"),
        &env_out,
    );

    // --- Writes outside the workspace.
    let victim_intact = |fx: &Fixture| {
        std::fs::read_to_string(fx.out.join("victim"))
            .ok()
            .as_deref()
            == Some("original\n")
    };
    let writes = [
        ("write: absolute path", format!("echo pwned > {out}/abs")),
        ("write: ..", format!("echo pwned > ../{out_name}/dotdot")),
        ("write: symlink", "echo pwned > link-out/sym".to_string()),
        (
            "write: hard link made inside",
            format!("ln {out}/victim hl && echo pwned >> hl"),
        ),
        ("write: rename out", format!("mv file.txt {out}/moved")),
        ("write: rename in", format!("mv {out}/victim stolen")),
        (
            "write: /proc/self/root",
            format!("echo pwned > /proc/self/root{out}/procroot"),
        ),
        (
            "write: /proc/self/cwd/..",
            format!("echo pwned > /proc/self/cwd/../{out_name}/proccwd"),
        ),
    ];
    for (name, cmd) in &writes {
        attempt(&fx, &mut r, name, cmd, None);
    }
    // The host's /tmp: refused in tier A; in tier B /tmp is the command's own (it may write
    // there) and nothing reaches the host's.
    let (code, tmp) = fx.sandbox("echo pwned > /tmp/hanzo-escape-tmp-write", None, &[]);
    r.check(
        "write: the host's /tmp",
        (code == 0) == tier_b && !Path::new("/tmp/hanzo-escape-tmp-write").exists(),
        &format!("exit {code}: {tmp}"),
    );
    let strays: Vec<_> = std::fs::read_dir(&fx.out)
        .expect("read out")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "victim")
        .collect();
    r.check(
        "nothing was created outside and the victim is intact",
        strays.is_empty()
            && victim_intact(&fx)
            && !Path::new("/tmp/hanzo-escape-tmp-write").exists(),
        &format!("strays {strays:?}"),
    );
    r.check(
        "the workspace file was not moved",
        fx.ws.join("file.txt").exists(),
        "file.txt gone",
    );
    let _ = ws_name;

    // --- Network and sockets.
    let tcp = TcpListener::bind("127.0.0.1:0").expect("tcp");
    tcp.set_nonblocking(true).expect("nonblocking");
    let tcp_port = tcp.local_addr().expect("addr").port();
    let udp = UdpSocket::bind("127.0.0.1:0").expect("udp");
    udp.set_nonblocking(true).expect("nonblocking");
    let udp_port = udp.local_addr().expect("addr").port();
    let sock_path = fx.out.join("host.sock");
    let unix = UnixListener::bind(&sock_path).expect("unix");
    unix.set_nonblocking(true).expect("nonblocking");
    let abstract_name = format!("hanzo-escape-{me}");
    let abs_listener = {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes())
            .expect("abstract addr");
        UnixListener::bind_addr(&addr).expect("abstract bind")
    };
    abs_listener.set_nonblocking(true).expect("nonblocking");
    let py_net = |body: &str| {
        format!(
            "{PY} -c '
import socket, sys
try:
    {body}
except OSError as e:
    print(\"DENIED errno=%d\" % e.errno); sys.exit(1)
print(\"ALLOWED\"); sys.exit(0)
'"
        )
    };
    attempt(
        &fx,
        &mut r,
        "TCP to 127.0.0.1",
        &py_net(&format!(
            "socket.create_connection((\"127.0.0.1\", {tcp_port}), timeout=2)"
        )),
        Some("DENIED errno="),
    );
    attempt(
        &fx,
        &mut r,
        "UDP to 127.0.0.1",
        &py_net(&format!(
            // Connected, so that tier B (where the socket exists, in a namespace of its own)
            // learns of the missing listener: ECONNREFUSED from its own loopback. Were the
            // datagram to reach the host's listener, recv would time out (no errno: a failure).
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect((\"127.0.0.1\", {udp_port})); s.send(b\"x\"); s.settimeout(2); s.recv(1)"
        )),
        Some("DENIED errno="),
    );
    attempt(
        &fx,
        &mut r,
        "connect to a host unix socket outside the workspace",
        &py_net(&format!(
            "s = socket.socket(socket.AF_UNIX); s.connect(\"{}\")",
            sock_path.display()
        )),
        Some(EACCES),
    );
    attempt(
        &fx,
        &mut r,
        "connect to an abstract unix socket",
        &py_net(&format!(
            "s = socket.socket(socket.AF_UNIX); s.connect(\"\\0{abstract_name}\")"
        )),
        Some("DENIED errno="),
    );
    attempt(
        &fx,
        &mut r,
        "nc to 127.0.0.1 (if installed) / bash /dev/tcp",
        &format!("exec 3<>/dev/tcp/127.0.0.1/{tcp_port}"),
        None,
    );
    let mut buf = [0u8; 16];
    r.check(
        "no connection or datagram reached the listeners",
        tcp.accept()
            .is_err_and(|e| e.kind() == ErrorKind::WouldBlock)
            && udp
                .recv(&mut buf)
                .is_err_and(|e| e.kind() == ErrorKind::WouldBlock)
            && unix
                .accept()
                .is_err_and(|e| e.kind() == ErrorKind::WouldBlock)
            && abs_listener
                .accept()
                .is_err_and(|e| e.kind() == ErrorKind::WouldBlock),
        "a listener accepted something",
    );
    if !tier_b {
        attempt(
            &fx,
            &mut r,
            "tier A: create an inet socket",
            &py_net("socket.socket(socket.AF_INET, socket.SOCK_STREAM)"),
            Some(EACCES),
        );
    }
    let (code, pair) = fx.sandbox(
        &format!("{PY} -c 'import socket; a, b = socket.socketpair(); a.send(b\"hi\"); print(b.recv(2))'"),
        None,
        &[],
    );
    r.check(
        "socketpair still works (in-process plumbing)",
        code == 0 && pair.contains("b'hi'"),
        &pair,
    );

    // --- Other processes.
    let ptrace = |pid: &str| py_syscall(&format!("pid = {pid}"), "libc.ptrace(16, pid, 0, 0)");
    attempt(
        &fx,
        &mut r,
        "ptrace the supervisor",
        &ptrace(&me.to_string()),
        Some(EPERM),
    );
    attempt(
        &fx,
        &mut r,
        "ptrace the sandbox process (worker)",
        &ptrace("os.getppid()"),
        Some(EPERM),
    );
    let vm_read = |pid: &str| {
        py_syscall(
            &format!(
                "pid = {pid}
class iovec(ctypes.Structure):
    _fields_ = [(\"base\", ctypes.c_void_p), (\"len\", ctypes.c_size_t)]
buf = ctypes.create_string_buffer(64)
local = iovec(ctypes.cast(buf, ctypes.c_void_p), 64)
remote = iovec(0x400000, 64)"
            ),
            "libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)",
        )
    };
    attempt(
        &fx,
        &mut r,
        "process_vm_readv the supervisor",
        &vm_read(&me.to_string()),
        Some(EPERM),
    );
    attempt(
        &fx,
        &mut r,
        "process_vm_readv the worker",
        &vm_read("os.getppid()"),
        Some(EPERM),
    );
    attempt(
        &fx,
        &mut r,
        "signal the supervisor",
        &py_syscall(
            "import signal",
            &format!("libc.kill({me}, signal.SIGWINCH)"),
        ),
        // Landlock's scope refuses it (EPERM); in tier B the pid is not even visible (ESRCH).
        Some(if tier_b { "DENIED errno=" } else { EPERM }),
    );
    attempt(
        &fx,
        &mut r,
        "read the supervisor's environ",
        &format!("cat /proc/{me}/environ"),
        None,
    );
    attempt(
        &fx,
        &mut r,
        "read the supervisor's memory",
        &format!("head -c 16 /proc/{me}/mem"),
        None,
    );
    attempt(
        &fx,
        &mut r,
        "read the worker's environ",
        "cat /proc/$PPID/environ",
        None,
    );

    // --- Kernel attack surface.
    attempt(
        &fx,
        &mut r,
        "mount",
        &py_syscall("", "libc.mount(b\"none\", b\"/tmp\", b\"tmpfs\", 0, None)"),
        Some(EPERM),
    );
    attempt(
        &fx,
        &mut r,
        "unshare (user namespace)",
        &py_syscall("", "libc.unshare(0x10000000)"),
        Some(EPERM),
    );
    attempt(&fx, &mut r, "unshare(1) -U", "unshare -U true", None);
    attempt(
        &fx,
        &mut r,
        "setns",
        &py_syscall("", "libc.setns(0, 0)"),
        Some(EPERM),
    );
    attempt(
        &fx,
        &mut r,
        "io_uring_setup",
        &py_syscall(
            "params = ctypes.create_string_buffer(120)",
            "libc.syscall(425, 8, params)",
        ),
        Some(EPERM),
    );
    attempt(
        &fx,
        &mut r,
        "setuid binary: mount",
        &format!("/bin/mount -t tmpfs none {}", fx.ws.display()),
        None,
    );
    attempt(
        &fx,
        &mut r,
        "setuid binary: su",
        "/usr/bin/su -c 'id' root </dev/null",
        None,
    );
    attempt(
        &fx,
        &mut r,
        "no privilege: chown",
        "chown 1:1 file.txt",
        None,
    );
    attempt(
        &fx,
        &mut r,
        "no privilege: setgroups",
        &py_syscall("arr = (ctypes.c_uint * 1)(0)", "libc.setgroups(1, arr)"),
        Some(EPERM),
    );

    // --- Limits.
    let (code, hog) = fx.sandbox(
        &format!("{PY} -c 'b = bytearray(2 << 30); print(\"ALLOCATED\")'"),
        Some(1 << 30),
        &[],
    );
    r.check(
        "a memory hog stays within RLIMIT_AS",
        code != 0 && hog.contains("MemoryError") && !hog.contains("ALLOCATED"),
        &hog,
    );
    let (code, lim) = fx.sandbox(
        &format!(
            "{PY} -c 'import resource as r; [print(*r.getrlimit(x)) for x in (r.RLIMIT_NPROC, r.RLIMIT_NOFILE, r.RLIMIT_CORE, r.RLIMIT_AS)]'"
        ),
        None,
        &[],
    );
    r.check(
        "process, open-file, core and memory limits are set (soft = hard)",
        code == 0
            && lim.lines().collect::<Vec<_>>()
                == ["4096 4096", "1024 1024", "0 0", "8589934592 8589934592"],
        &lim,
    );

    // --- The private directory ($HOME's parent) is removed after the run. Tier B's lives in its
    // private /tmp. Tier A's is in /dev/shm (a memory filesystem, as tier B's /tmp is) when the
    // sandbox process has no TMPDIR (the child's environment carries none, whatever this test's
    // does), and in the sandbox process's TMPDIR when it has one.
    let shm_usable = std::fs::read_to_string("/proc/mounts")
        .is_ok_and(|m| m.lines().any(|l| l.starts_with("tmpfs /dev/shm ")))
        && std::fs::metadata("/dev/shm").is_ok_and(|m| m.permissions().mode() & 0o1000 != 0);
    let base = if fx.tier_b || !shm_usable {
        Path::new("/tmp")
    } else {
        Path::new("/dev/shm")
    };
    let removed_under = |home: &str, base: &Path| {
        let run_dir = Path::new(home.trim()).parent().map(Path::to_path_buf);
        let ok = run_dir
            .as_ref()
            .is_some_and(|d| d.starts_with(base) && d != base && !d.exists());
        (
            ok,
            format!("{home} -> {run_dir:?}, expected under {}", base.display()),
        )
    };
    let (code, home) = fx.sandbox("echo $HOME", None, &[]);
    let (removed, why) = removed_under(&home, base);
    r.check(
        "the command's private directory is removed afterwards",
        code == 0 && removed,
        &why,
    );
    if !fx.tier_b {
        let chosen = fx.out.join("chosen-tmp");
        std::fs::create_dir_all(&chosen).expect("mkdir");
        let (code, home) = fx.call("echo $HOME").set("TMPDIR", chosen.display()).go();
        let (removed, why) = removed_under(&home, &chosen);
        r.check(
            "tier A's private directory is in the sandbox process's TMPDIR when it has one",
            code == 0 && removed,
            &why,
        );
    }

    // --- Ordinary work still works. (In tier B the git directory is read-only for commands:
    // status and diff work, a commit is refused; tier A commits.)
    if tier_b {
        let (code, git) = fx.sandbox(
            "git status --short --branch && git diff --stat && ! git add file.txt 2>/dev/null && echo refused",
            None,
            &[],
        );
        r.check(
            "git status and diff in the workspace; writing the git directory refused",
            code == 0 && git.contains("No commits yet") && git.trim_end().ends_with("refused"),
            &git,
        );
    } else {
        let (code, git) = fx.sandbox("git status --short --branch && git add file.txt && git -c user.name=t -c user.email=t@t commit -qm init && git log --oneline | wc -l", None, &[]);
        r.check(
            "git status/add/commit in the workspace",
            code == 0 && git.trim_end().ends_with('1'),
            &git,
        );
    }
    let (code, py) = fx.sandbox(
        &format!("{PY} -c 'import json, os; print(json.dumps({{\"sum\": 1 + 2}}))'"),
        None,
        &[],
    );
    r.check("python3 -c", code == 0 && py.contains("{\"sum\": 3}"), &py);
    match toolchain_dir() {
        Some(tc) => {
            std::fs::create_dir_all(fx.ws.join("tiny/src")).expect("mkdir");
            std::fs::write(
                fx.ws.join("tiny/Cargo.toml"),
                "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
            )
            .expect("toml");
            std::fs::write(
                fx.ws.join("tiny/src/main.rs"),
                "fn main() { println!(\"tiny ok\"); }\n",
            )
            .expect("main");
            let bin = tc.join("bin");
            let cmd = format!(
                "export PATH={}:$PATH; cd tiny && cargo build --offline -q && ./target/debug/tiny",
                bin.display()
            );
            let (code, cargo) = fx.sandbox(&cmd, None, &[tc]);
            r.check(
                "cargo build --offline of a tiny crate",
                code == 0 && cargo.contains("tiny ok"),
                &cargo,
            );
        }
        None => println!("skip  cargo build (no rustup toolchain found)"),
    }

    holes(&fx, &mut r);
    if tier_b {
        tier_b_only(&fx, &mut r);
    } else {
        tier_a_only(&fx, &mut r);
    }
    let _ = &fx.root;
    r
}

/// A python snippet that runs `body` and prints `DENIED errno=N` (exit 1) when it raises
/// `OSError`, `ALLOWED` (exit 0) otherwise.
fn py_os(body: &str) -> String {
    format!(
        "{PY} -c '
import os, sys, fcntl, struct, termios
try:
    {body}
except OSError as e:
    print(\"DENIED errno=%d\" % e.errno); sys.exit(1)
print(\"ALLOWED\"); sys.exit(0)
'"
    )
}

/// Host pids of live (non-zombie) processes with `arg` among their arguments.
fn host_pids_with_arg(arg: &str) -> Vec<i32> {
    let alive = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            !s.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
    };
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

/// The holes issue 10 found, attempted in both tiers: terminal injection, metadata writes
/// outside the workspace, set-id files, root-only /etc secrets, inherited descriptors, and the
/// bounds on processes, memory and daemons.
fn holes(fx: &Fixture, r: &mut Report) {
    // --- Terminal injection: the filter refuses TIOCSTI and TIOCLINUX whatever the fd (the
    // kernel alone would say ENOTTY for /dev/null). The pty attack through `hanzo-dev sandbox`
    // itself is `supervisor/tests/escape.rs`.
    for (name, req) in [("TIOCSTI", "termios.TIOCSTI"), ("TIOCLINUX", "0x541C")] {
        attempt(
            fx,
            r,
            &format!("ioctl({name}) refused by the filter"),
            &py_os(&format!(
                "fcntl.ioctl(os.open(\"/dev/null\", os.O_RDWR), {req}, b\"x\")"
            )),
            Some(EPERM),
        );
    }

    // --- Metadata writes outside the workspace (a file outside every grant, visible in both
    // tiers) and set-id bits anywhere.
    let canary = fx.canary.0.display().to_string();
    let meta = |p: &Path| std::fs::metadata(p).map(|m| (m.mode(), m.mtime())).ok();
    let before = meta(&fx.canary.0);
    attempt(
        fx,
        r,
        "chmod u+s outside the workspace",
        &py_os(&format!("os.chmod(\"{canary}\", 0o4755)")),
        Some(EPERM),
    );
    attempt(
        fx,
        r,
        "setxattr outside the workspace",
        &py_os(&format!(
            "os.setxattr(\"{canary}\", \"user.hanzo\", b\"1\")"
        )),
        Some(EPERM),
    );
    attempt(
        fx,
        r,
        "removexattr outside the workspace",
        &py_os(&format!("os.removexattr(\"{canary}\", \"user.hanzo\")")),
        Some(EPERM),
    );
    attempt(
        fx,
        r,
        "chattr (FS_IOC_SETFLAGS) on a workspace file",
        &py_os(
            "fcntl.ioctl(os.open(\"file.txt\", os.O_RDONLY), 0x40086602, struct.pack(\"l\", 0x10))",
        ),
        Some(EPERM),
    );
    attempt(
        fx,
        r,
        "a set-uid file created in the workspace",
        &py_os("os.close(os.open(\"suid\", os.O_CREAT | os.O_WRONLY, 0o4755))"),
        Some(EPERM),
    );
    attempt(
        fx,
        r,
        "chmod g+s in the workspace",
        &py_os("os.chmod(\"file.txt\", 0o2755)"),
        Some(EPERM),
    );
    attempt(
        fx,
        r,
        "mknod of a set-uid file",
        &py_os("os.mknod(\"suid2\", 0o104755)"),
        Some(EPERM),
    );
    use std::os::unix::fs::MetadataExt;
    let setid = |p: &Path| std::fs::metadata(p).map(|m| m.mode() & 0o6000).unwrap_or(0);
    r.check(
        "no set-id bit was set and the canary's metadata is unchanged",
        !fx.ws.join("suid").exists()
            && !fx.ws.join("suid2").exists()
            && setid(&fx.ws.join("file.txt")) == 0
            && meta(&fx.canary.0) == before
            && xattr_absent(&fx.canary.0),
        &format!("{before:?} -> {:?}", meta(&fx.canary.0)),
    );

    // --- Root-only secrets under /etc: not granted (tier A), not even there (tier B).
    attempt(fx, r, "read /etc/shadow", "cat /etc/shadow", None);
    attempt(
        fx,
        r,
        "read an SSH host key",
        &format!("cat {HOST_KEY}"),
        None,
    );
    attempt(fx, r, "list /etc/ssh", "ls /etc/ssh", None);
    let (code, etc) = fx.sandbox(
        "head -1 /etc/passwd && ls /etc/ssl/certs | head -1 && test -r /etc/ld.so.cache && echo linker-ok",
        None,
        &[],
    );
    r.check(
        "what programs need under /etc is there",
        code == 0 && etc.contains("root:") && etc.contains("linker-ok"),
        &etc,
    );

    // --- Inherited descriptors: a file outside the workspace and a connected socket, open
    // without close-on-exec in the caller, do not reach the command.
    let outside = std::fs::File::open(fx.out.join("victim")).expect("open outside");
    let (keep_a, keep_b) = std::os::unix::net::UnixStream::pair().expect("pair");
    use std::os::fd::AsFd;
    for fd in [outside.as_fd(), keep_a.as_fd()] {
        nix::fcntl::fcntl(
            fd,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
        )
        .expect("clear close-on-exec");
    }
    let (code, fds) = fx.sandbox(
        &format!(
            "{PY} -c '
import os
fds = []
for fd in range(3, 1024):
    try:
        os.fstat(fd); fds.append(fd)
    except OSError:
        pass
print(\"FDS\", fds)
'"
        ),
        None,
        &[],
    );
    r.check(
        "no descriptor above 2 reaches the command",
        code == 0 && fds.contains("FDS []"),
        &format!(
            "caller had {} and {} open: {fds}",
            outside.as_raw_fd(),
            keep_a.as_raw_fd()
        ),
    );
    drop((outside, keep_a, keep_b));

    // --- Bounds: a fork bomb stops at pids.max; memory beyond memory.max is killed; a daemon
    // does not outlive the command.
    let (code, bomb) = fx
        .call(&format!(
            "{PY} -c '
import os, time
n = 0
for i in range(400):
    try:
        if os.fork() == 0:
            time.sleep(60); os._exit(0)
        n += 1
    except OSError:
        break
print(\"FORKED\", n)
'"
        ))
        .set("HANZO_TEST_MAX_PIDS", 48)
        .go();
    let forked: Option<u32> = bomb
        .lines()
        .find_map(|l| l.strip_prefix("FORKED "))
        .and_then(|n| n.trim().parse().ok());
    r.check(
        "a fork bomb stops at the cgroup's pids.max",
        code == 0 && forked.is_some_and(|n| (1..48).contains(&n)),
        &bomb,
    );
    let (code, hog) = fx
        .call(&format!(
            "{PY} -c '
b = bytearray(384 << 20)
for i in range(0, len(b), 4096):
    b[i] = 1
print(\"ALLOCATED\")
'"
        ))
        .set("HANZO_TEST_MAX_MEMORY", 128u64 << 20)
        .go();
    r.check(
        "memory beyond memory.max (swap off) is killed",
        code == 128 + libc::SIGKILL && !hog.contains("ALLOCATED"),
        &format!("exit {code}: {hog}"),
    );
    let marker = format!("1009.{}{}", std::process::id(), u8::from(fx.tier_b));
    let (code, daemon) = fx.sandbox(
        &format!("sh -c 'setsid sh -c \"exec sleep {marker}\" & exit 0'; sleep 0.3; echo started"),
        None,
        &[],
    );
    r.check(
        "a double-forked daemon does not outlive the command",
        code == 0 && daemon.contains("started") && host_pids_with_arg(&marker).is_empty(),
        &format!("{daemon} alive: {:?}", host_pids_with_arg(&marker)),
    );
}

/// Whether `p` carries none of the test's extended attribute.
fn xattr_absent(p: &Path) -> bool {
    let out = Command::new(PY)
        .args([
            "-c",
            &format!(
                "import os; print(\"user.hanzo\" in os.listxattr(\"{}\"))",
                p.display()
            ),
        ])
        .output();
    out.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "False")
}

/// What tier A must do where it cannot hide: refuse a workspace that contains hanzo's
/// configuration (Landlock cannot carve a hole in a grant) unless forced.
fn tier_a_only(fx: &Fixture, r: &mut Report) {
    let hidden = fx.xdg.join("hanzo");
    let (code, out) = fx
        .call("cat xdg/hanzo/credentials.json")
        .workspace(&fx.root)
        .set("HANZO_TEST_HIDDEN", hidden.display())
        .go();
    r.check(
        "tier A refuses a workspace containing the configuration directory",
        code == 101 && out.contains("--allow-dangerous-workspace") && !out.contains(CANARY),
        &format!("exit {code}: {out}"),
    );
}

/// What only tier B promises: the host read-only, protected paths inside the writable workspace
/// (the git directory as a whole, the hooks directory its configuration names, `.hanzo/`), not
/// renameable either, and the user's next `git commit` running nothing the command planted; a
/// private, size-limited `/tmp`; hanzo's configuration hidden even inside the workspace; a
/// hidden `$HOME`; a pid namespace of its own.
fn tier_b_only(fx: &Fixture, r: &mut Report) {
    // --- Metadata outside: the whole host is read-only.
    let canary = fx.canary.0.display().to_string();
    for (name, body) in [
        (
            "chmod outside the workspace",
            format!("os.chmod(\"{canary}\", 0o600)"),
        ),
        (
            "utimensat outside the workspace",
            format!("os.utime(\"{canary}\", (0, 0))"),
        ),
        (
            "chown outside the workspace",
            format!("os.chown(\"{canary}\", 0, 0)"),
        ),
    ] {
        attempt(
            fx,
            r,
            &format!("tier B: {name}"),
            &py_os(&body),
            Some("DENIED errno=30"),
        );
    }
    // --- Git run-later tricks, then the user's own git.
    let planted = fx.root.join("planted-hook-ran");
    let hook = format!("#!/bin/sh\ntouch {}\n", planted.display());
    for (name, cmd) in [
        (
            "rename .git away and recreate it",
            format!("mv .git .git-old && mkdir -p .git/hooks && printf '{hook}' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit"),
        ),
        ("write .git/commondir", "echo /tmp/evil > .git/commondir".to_string()),
        (
            "write into the core.hooksPath directory (.husky)",
            format!("printf '{hook}' > .husky/pre-commit && chmod +x .husky/pre-commit"),
        ),
        (
            "replace the core.hooksPath directory",
            format!("mv .husky .husky-old && mkdir .husky && printf '{hook}' > .husky/pre-commit"),
        ),
        ("point core.hooksPath elsewhere", "git config core.hooksPath /tmp".to_string()),
    ] {
        attempt(fx, r, name, &cmd, None);
    }
    let commit = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "--allow-empty",
            "-qm",
            "after the sandbox",
        ])
        .current_dir(&fx.ws)
        .output()
        .expect("git commit");
    r.check(
        "the user's next git commit runs nothing the command planted",
        commit.status.success()
            && !planted.exists()
            && !fx.ws.join(".git-old").exists()
            && !fx.ws.join(".husky-old").exists()
            && !fx.ws.join(".git/commondir").exists()
            && !fx.ws.join(".husky/pre-commit").exists(),
        &format!("{commit:?}"),
    );

    // --- A private /tmp of bounded size.
    let (code, tmp) = fx
        .call("echo x > /tmp/ok && cat /tmp/ok && dd if=/dev/zero of=/tmp/big bs=1M count=32 2>&1; echo dd=$?")
        .set("HANZO_TEST_TMP_SIZE", 8u64 << 20)
        .go();
    r.check(
        "tier B: /tmp is private, writable and size-limited",
        code == 0
            && tmp.starts_with("x\n")
            && tmp.contains("No space left")
            && !tmp.contains("dd=0"),
        &tmp,
    );

    // --- hanzo's configuration hidden even inside the workspace.
    let hidden = fx.xdg.join("hanzo");
    let (code, out) = fx
        .call("cat xdg/hanzo/credentials.json; ls -A xdg/hanzo | wc -l; echo x > xdg/hanzo/planted")
        .workspace(&fx.root)
        .set("HANZO_TEST_HIDDEN", hidden.display())
        .go();
    r.check(
        "tier B hides the configuration directory inside the workspace",
        code != 0
            && !out.contains(CANARY)
            && out.lines().any(|l| l.trim() == "0")
            && !hidden.join("planted").exists(),
        &format!("exit {code}: {out}"),
    );

    for (name, cmd) in [
        (
            "write .git/hooks/pre-commit",
            "printf '#!/bin/sh\\necho pwned\\n' > .git/hooks/pre-commit",
        ),
        (
            "write .git/config",
            "echo '[core] hooksPath = /tmp' >> .git/config",
        ),
        (
            "write .hanzo/settings.json",
            "echo '{\"hooks\": 1}' > .hanzo/settings.json",
        ),
        ("create a file in .hanzo/", "echo x > .hanzo/new.json"),
        ("replace .git/hooks", "mv .git/hooks .git/hooks-old"),
        ("replace .hanzo", "mv .hanzo .hanzo-old"),
    ] {
        attempt(fx, r, name, cmd, None);
    }
    r.check(
        "protected paths are unchanged",
        !fx.ws.join(".git/hooks/pre-commit").exists()
            && !fx.ws.join(".hanzo/new.json").exists()
            && std::fs::read_to_string(fx.ws.join(".hanzo/settings.json"))
                .ok()
                .as_deref()
                == Some("{}\n")
            && !std::fs::read_to_string(fx.ws.join(".git/config"))
                .unwrap_or_default()
                .contains("hooksPath = /tmp")
            && fx.ws.join(".git/hooks").is_dir(),
        "a protected path changed",
    );
    let marker = format!("/tmp/hanzo-escape-host-{}", std::process::id());
    std::fs::write(&marker, "host").expect("marker");
    attempt(
        fx,
        r,
        "see the host's /tmp",
        &format!("test -e {marker}"),
        None,
    );
    attempt(
        fx,
        r,
        "see the host's $HOME",
        &format!("test -e {}", fx.home.display()),
        None,
    );
    attempt(fx, r, "see /root", "test -e /root/.cargo", None);
    let _ = std::fs::remove_file(&marker);
    // A loopback of its own: a TCP server and a client, and UDP, inside the command.
    let (code, out) = fx.sandbox(
        &format!(
            "{PY} -c '
import socket, threading
srv = socket.socket(); srv.bind((\"127.0.0.1\", 0)); srv.listen(1)
def serve():
    c, _ = srv.accept(); c.sendall(b\"hello\"); c.close()
threading.Thread(target=serve).start()
cli = socket.create_connection(srv.getsockname(), timeout=5)
print(\"tcp ok\", cli.recv(5).decode())
u1 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u1.bind((\"127.0.0.1\", 0))
u2 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u2.sendto(b\"ping\", u1.getsockname())
print(\"udp ok\", u1.recvfrom(4)[0].decode())
'"
        ),
        None,
        &[],
    );
    r.check(
        "a TCP server and client, and UDP, on the command's own loopback",
        code == 0 && out.contains("tcp ok hello") && out.contains("udp ok ping"),
        &out,
    );
    attempt(
        fx,
        r,
        "unix sockets stay refused with inet allowed",
        &format!(
            "{PY} -c 'import socket, sys\ntry:\n    socket.socket(socket.AF_UNIX)\nexcept OSError as e:\n    print(\"DENIED errno=%d\" % e.errno); sys.exit(1)'"
        ),
        Some(EACCES),
    );
    let (code, out) = fx.sandbox("echo $$", None, &[]);
    r.check(
        "the command runs in a pid namespace of its own",
        code == 0 && out.trim().parse::<u32>().is_ok_and(|p| p < 10),
        &out,
    );
}

/// The active toolchain's directory (`rustc --print sysroot`), read-only in the sandbox.
fn toolchain_dir() -> Option<PathBuf> {
    let out = Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .ok()?;
    let mut s = String::new();
    out.stdout.as_slice().read_to_string(&mut s).ok()?;
    let p = PathBuf::from(s.trim());
    p.join("bin/cargo").exists().then_some(p)
}
