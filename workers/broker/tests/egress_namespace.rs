//! The whole egress path but the final wiring, with real clients: this process runs real servers
//! on the host's loopback (HTTPS with a test CA, plain HTTP, an echo server, a 1 GiB source); a
//! broker child re-executes this binary, confines itself with the broker's own profile
//! (`profile_for(Role::Broker)`: Landlock, seccomp, no capabilities) and serves the egress proxy
//! on its end of the control socket, printing every record; a namespace child re-executes this
//! binary, enters a fresh tier-B namespace set
//! (`hanzo_sandbox::namespaces`: user, mount, pid, net, ipc; its only interface its own `lo`),
//! binds the forwarder's listener on its `127.0.0.1`, starts the forwarder as a process of its own
//! confined with `hanzo_policy::profile::egress_forwarder` (no file, no `socket(2)`), and runs
//! curl, Python's urllib, `git clone`, `pip download`/`pip install` and hand-made SOCKS5 clients
//! with the proxy environment of `hanzo_tools::egress_forward::proxy_env`. The test resolver maps
//! test names to the host's loopback, which the allow-list names literally.
//!
//! A custom harness (`harness = false`): entering namespaces needs a single-threaded process, and
//! libtest runs tests on threads. `--list` prints the scenarios for nextest; `--exact NAME` (or a
//! substring) runs one.

use hanzo_broker::egress::{Egress, EgressConfig, RelayMode, StaticResolver};
use hanzo_ipc::roles::broker::{EgressDenial, EgressOutcome, EgressProtocol, EgressRecord};
use hanzo_policy::network::AllowList;
use hanzo_sandbox::fdpass;
use hanzo_sandbox::namespaces::{self, Side, TierB, WaitAs};
use hanzo_tools::egress_forward;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NS_CHILD: &str = "__egress_ns";
const FORWARDER: &str = "__egress_forwarder";
const BROKER: &str = "__egress_broker";
/// Bounds a wait that would otherwise hang a broken test; never a measurement.
const PATIENCE: Duration = Duration::from_secs(180);
const PY: &str = "/usr/bin/python3";
const SETUP: &str = "run ./scripts/setup.sh, which installs it";

const PKGS: &str = "pkgs.egress.test";
const PLAIN: &str = "plain.egress.test";
const ECHO: &str = "echo.egress.test";
const REBIND: &str = "rebind.egress.test";
const EVIL: &str = "evil.egress.test";
const SOURCE: &str = "source.egress.test";
/// What the source server sends on each connection.
const SOURCE_BYTES: u64 = 1 << 30;

/// One command the namespace side runs (`sh -c`), and what came of it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Step {
    name: String,
    script: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct StepResult {
    name: String,
    /// How long the step took (shown in failures; never asserted on).
    ms: u128,
    code: i32,
    stdout: String,
    stderr: String,
}

// ---------------------------------------------------------------- the namespace side

/// `__egress_ns CONTROL_FD WORKDIR`: enter tier B, start the forwarder, run the steps in
/// `WORKDIR/steps.json`, print one `StepResult` per line.
fn namespace_child(args: &[OsString]) -> i32 {
    let control_fd: i32 = args[0].to_string_lossy().parse().expect("control fd");
    let workdir = PathBuf::from(&args[1]);
    let control = hanzo_sandbox::confine::adopt_inherited_fd(control_fd).expect("control fd");
    // Tier B as the tools worker sets it up: the host read-only, the work directory writable,
    // `/etc` cut down to what programs read, a private sized `/tmp`.
    let cfg = TierB::new(
        vec![workdir.clone()],
        Vec::new(),
        Vec::new(),
        Vec::new(),
        hanzo_policy::profile::COMMAND_ETC,
        64 << 20,
    );
    match namespaces::enter_with(&cfg, |_lo| {}) {
        // The original process only waits for pid 1 and passes its status on.
        Ok(Side::Parent(parent)) => std::process::exit(parent.wait(WaitAs {
            confine: false,
            forward_signals: false,
        })),
        Ok(Side::Child) => {}
        Err(e) => {
            eprintln!("tier B: {e}");
            return 90;
        }
    }
    if !namespaces::loopback_up() {
        eprintln!("tier B has no loopback");
        return 91;
    }
    let listener = egress_forward::bind(0).expect("bind the forwarder's listener");
    let port = listener.local_addr().expect("addr").port();
    let listener: OwnedFd = listener.into();
    for fd in [listener.as_fd(), control.as_fd()] {
        rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty()).expect("inheritable");
    }
    let mut forwarder = Command::new(std::env::current_exe().expect("exe"))
        .arg(FORWARDER)
        .arg(listener.as_raw_fd().to_string())
        .arg(control.as_raw_fd().to_string())
        .env_clear()
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn the forwarder");
    drop((listener, control));

    let steps: Vec<Step> =
        serde_json::from_slice(&std::fs::read(workdir.join("steps.json")).expect("steps.json"))
            .expect("steps");
    let home = workdir.join("home");
    let ca = workdir.join("ca.pem");
    let mut env: Vec<(String, String)> = egress_forward::proxy_env(port);
    for (k, v) in [
        ("PATH", "/usr/local/bin:/usr/bin:/bin".to_string()),
        ("HOME", home.display().to_string()),
        ("LANG", "C.UTF-8".to_string()),
        ("PROXY_PORT", port.to_string()),
        ("CURL_CA_BUNDLE", ca.display().to_string()),
        ("SSL_CERT_FILE", ca.display().to_string()),
        ("GIT_SSL_CAINFO", ca.display().to_string()),
        ("PIP_CERT", ca.display().to_string()),
        ("GIT_CONFIG_NOSYSTEM", "1".to_string()),
        ("GIT_TERMINAL_PROMPT", "0".to_string()),
        ("PIP_NO_CACHE_DIR", "1".to_string()),
        ("PIP_DISABLE_PIP_VERSION_CHECK", "1".to_string()),
        ("PIP_NO_INPUT", "1".to_string()),
        ("PYTHONDONTWRITEBYTECODE", "1".to_string()),
    ] {
        env.push((k.to_string(), v));
    }
    for step in steps {
        let started = Instant::now();
        let out = Command::new("/bin/sh")
            .arg("-c")
            .arg(&step.script)
            .current_dir(&workdir)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .output()
            .expect("run a step");
        let r = StepResult {
            name: step.name,
            ms: started.elapsed().as_millis(),
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        println!("{}", serde_json::to_string(&r).expect("json"));
    }
    let _ = forwarder.kill();
    let _ = forwarder.wait();
    0
}

/// `__egress_forwarder LISTEN_FD CONTROL_FD`: confine, then forward until the broker goes.
fn forwarder_child(args: &[OsString]) -> i32 {
    let fd = |i: usize| -> i32 { args[i].to_string_lossy().parse().expect("fd") };
    let listener = hanzo_sandbox::confine::adopt_inherited_fd(fd(0)).expect("listener");
    let control = hanzo_sandbox::confine::adopt_inherited_fd(fd(1)).expect("control");
    let profile = hanzo_policy::profile::egress_forwarder();
    match hanzo_sandbox::confine::confine_current_process(&profile) {
        Ok(a) if a.seccomp.installed => {}
        Ok(a) => {
            eprintln!("forwarder not confined: {:?}", a.notes);
            return 92;
        }
        Err(e) => {
            eprintln!("forwarder: cannot confine: {e}");
            return 92;
        }
    }
    // The profile's socket policy (none) is part of that filter: `socket(2)` is refused.
    // Proof that the confinement holds: no new socket, no file.
    if std::net::TcpStream::connect("127.0.0.1:9").is_ok() || std::fs::read("/etc/hostname").is_ok()
    {
        eprintln!("forwarder: confinement did not hold");
        return 94;
    }
    let e = egress_forward::serve(std::net::TcpListener::from(listener), control);
    eprintln!("forwarder: {e}");
    0
}

// ---------------------------------------------------------------- the broker side

/// What the broker child is told (in `EGRESS_BROKER_CONFIG`).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct BrokerSpec {
    allow: Vec<String>,
    forwarder_pid: u32,
    request_timeout_ms: u64,
    names: BTreeMap<String, Vec<IpAddr>>,
}

/// `__egress_broker CONTROL_FD`: confine as the broker is, serve the egress proxy until the
/// forwarder's end closes, print each record as a JSON line.
fn broker_child(args: &[OsString]) -> i32 {
    let fd: i32 = args[0].to_string_lossy().parse().expect("fd");
    let control = hanzo_sandbox::confine::adopt_inherited_fd(fd).expect("control");
    let spec: BrokerSpec =
        serde_json::from_str(&std::env::var("EGRESS_BROKER_CONFIG").expect("EGRESS_BROKER_CONFIG"))
            .expect("config");
    let profile = hanzo_policy::profile::profile_for(
        hanzo_ipc::Role::Broker,
        &hanzo_policy::profile::ProfileContext::default(),
    );
    match hanzo_sandbox::confine::confine_current_process(&profile) {
        Ok(a)
            if a.seccomp.installed
                && a.caps.all_empty()
                && a.landlock.status == hanzo_ipc::attest::LandlockStatus::FullyEnforced => {}
        Ok(a) => {
            eprintln!("broker not confined: {a:?}");
            return 95;
        }
        Err(e) => {
            eprintln!("broker: cannot confine: {e}");
            return 95;
        }
    }
    let mut resolver = StaticResolver::new();
    for (name, addrs) in &spec.names {
        resolver = resolver.with(name, addrs);
    }
    let cfg = EgressConfig {
        allow: AllowList::parse(&spec.allow).expect("entries"),
        sources: Vec::new(),
        forwarder_pid: spec.forwarder_pid,
        max_tunnels: 256,
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_millis(spec.request_timeout_ms),
        idle_timeout: Duration::from_secs(60),
        relay: RelayMode::Splice,
    };
    // As the broker worker runs: one thread.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let (tx, mut rx) = tokio::sync::mpsc::channel(1024);
        let egress = Egress::new(cfg, Arc::new(resolver), tx);
        let printer = tokio::spawn(async move {
            while let Some(r) = rx.recv().await {
                println!("{}", serde_json::to_string(&r).expect("json"));
            }
        });
        let ended = egress.serve_control(control).await;
        drop(egress);
        let _ = printer.await;
        match ended {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("broker: {e}");
                96
            }
        }
    })
}

// ---------------------------------------------------------------- the host side

fn require_tools() {
    for (tool, probe) in [
        ("curl", vec!["curl", "--version"]),
        ("git", vec!["git", "--version"]),
        ("openssl", vec!["openssl", "version"]),
        (
            "pip for /usr/bin/python3",
            vec![PY, "-m", "pip", "--version"],
        ),
        ("getent", vec!["getent", "--version"]),
    ] {
        let ok = Command::new(probe[0])
            .args(&probe[1..])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "{tool} is missing: {SETUP}");
    }
    if let Err(why) = hanzo_sandbox::doctor::probe_kernel().tier_b() {
        panic!("egress needs tier B, which this machine does not offer: {why}");
    }
}

fn sh(dir: &Path, script: &str) {
    let out = Command::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("sh");
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The test CA and a server certificate for the test names.
fn make_certificates(dir: &Path) {
    let names = [PKGS, PLAIN, ECHO, REBIND, EVIL]
        .iter()
        .map(|n| format!("DNS:{n}"))
        .collect::<Vec<_>>()
        .join(",");
    std::fs::write(
        dir.join("server.ext"),
        format!(
            "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n\
             extendedKeyUsage=serverAuth\nsubjectAltName={names},IP:127.0.0.1\n"
        ),
    )
    .expect("ext");
    sh(
        dir,
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
           -keyout ca.key -out ca.pem -days 2 -subj '/CN=hanzo egress test CA' \
           -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign 2>/dev/null && \
         openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
           -keyout server.key -out server.csr -subj '/CN=pkgs.egress.test' 2>/dev/null && \
         openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
           -out server.pem -days 2 -extfile server.ext 2>/dev/null",
    );
}

const WHEEL_SCRIPT: &str = r#"
import zipfile, hashlib, base64, sys, os
out = sys.argv[1]
files = {
    "egresspkg/__init__.py": b"VALUE = 42\n",
    "egresspkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: egresspkg\nVersion: 1.0\n",
    "egresspkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: hanzo-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
for name, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record.append(f"{name},sha256={digest},{len(data)}")
record.append("egresspkg-1.0.dist-info/RECORD,,")
files["egresspkg-1.0.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
os.makedirs(out, exist_ok=True)
with zipfile.ZipFile(os.path.join(out, "egresspkg-1.0-py3-none-any.whl"), "w") as z:
    for name, data in files.items():
        z.writestr(name, data)
with open(os.path.join(out, "index.html"), "w") as f:
    f.write('<a href="egresspkg-1.0-py3-none-any.whl">egresspkg-1.0-py3-none-any.whl</a>\n')
with open(os.path.join(out, "..", "index.html"), "w") as f:
    f.write('<a href="egresspkg/">egresspkg</a>\n')
"#;

/// What the servers serve: a file, a dumb-HTTP git repository, a simple package index.
fn make_site(dir: &Path) -> PathBuf {
    let www = dir.join("www");
    std::fs::create_dir_all(&www).expect("www");
    std::fs::write(www.join("hello.txt"), "hello from the host\n").expect("hello");
    sh(
        dir,
        "git init -q src && cd src && echo 'cloned through the broker' > README && \
         git add README && git -c user.email=t@example.com -c user.name=t commit -qm init && \
         cd .. && git clone -q --bare src www/repo.git && cd www/repo.git && git update-server-info",
    );
    let out = Command::new(PY)
        .arg("-c")
        .arg(WHEEL_SCRIPT)
        .arg(www.join("simple").join("egresspkg"))
        .output()
        .expect("build the wheel");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    www
}

const SERVER_SCRIPT: &str = r#"
import http.server, ssl, sys, functools
root, cert, key = sys.argv[1:4]
class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a): pass
handler = functools.partial(Quiet, directory=root)
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
if cert != "-":
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;

/// A process killed when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn python_server(www: &Path, tls: Option<(&Path, &Path)>) -> (Server, u16) {
    let (cert, key) = match tls {
        Some((c, k)) => (c.display().to_string(), k.display().to_string()),
        None => ("-".into(), "-".into()),
    };
    let mut child = Command::new(PY)
        .arg("-c")
        .arg(SERVER_SCRIPT)
        .arg(www)
        .arg(cert)
        .arg(key)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start a server");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("port");
    let port = line.trim().parse().expect("a port");
    (Server(child), port)
}

/// Every process below `root`, from `/proc`.
fn descendants(root: u32) -> Vec<u32> {
    let mut parent = BTreeMap::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The ppid follows the command name, which may contain anything but ends with ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            parent.insert(pid, ppid);
        }
    }
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for (child, pp) in &parent {
            if *pp == p {
                out.push(*child);
                frontier.push(*child);
            }
        }
    }
    out
}

/// The forwarder's pid as this process sees it: what the supervisor must tell the broker.
fn find_forwarder(ns_child: u32) -> u32 {
    let deadline = Instant::now() + PATIENCE;
    loop {
        for pid in descendants(ns_child) {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if cmdline
                .split(|b| *b == 0)
                .any(|a| a == FORWARDER.as_bytes())
            {
                return pid;
            }
        }
        assert!(Instant::now() < deadline, "the forwarder never started");
        std::thread::sleep(Duration::from_millis(10));
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    tls_port: u16,
    plain_port: u16,
    echo_port: u16,
    source_port: u16,
    _servers: Vec<Server>,
}

impl Fixture {
    fn new() -> Fixture {
        require_tools();
        let tmp = tempfile::Builder::new()
            .prefix("hanzo-egress-")
            .tempdir()
            .expect("tempdir");
        let dir = tmp.path().canonicalize().expect("canonical");
        std::fs::create_dir_all(dir.join("home")).expect("home");
        make_certificates(&dir);
        let www = make_site(&dir);
        let (tls, tls_port) = python_server(
            &www,
            Some((&dir.join("server.pem"), &dir.join("server.key"))),
        );
        let (plain, plain_port) = python_server(&www, None);
        Fixture {
            _dir: tmp,
            dir,
            tls_port,
            plain_port,
            echo_port: 0,
            source_port: 0,
            _servers: vec![tls, plain],
        }
    }

    fn allow(&self) -> Vec<String> {
        let (t, p, e) = (self.tls_port, self.plain_port, self.echo_port);
        let mut allow = vec![
            format!("{PKGS}:{t}"),
            format!("{PLAIN}:{p}"),
            format!("{REBIND}:{t}"),
            format!("127.0.0.1:{t}"),
            format!("127.0.0.1:{p}"),
        ];
        for (name, port) in [(ECHO, e), (SOURCE, self.source_port)] {
            if port != 0 {
                allow.extend([format!("{name}:{port}"), format!("127.0.0.1:{port}")]);
            }
        }
        allow
    }

    fn names(&self) -> BTreeMap<String, Vec<IpAddr>> {
        let lo = IpAddr::from([127, 0, 0, 1]);
        [PKGS, PLAIN, ECHO, EVIL, SOURCE]
            .iter()
            .map(|n| (n.to_string(), vec![lo]))
            .chain([(REBIND.to_string(), vec![IpAddr::from([127, 0, 0, 2])])])
            .collect()
    }

    /// Run `steps` in a fresh tier-B namespace through the proxy; the step results (by name) and
    /// every record the proxy sent.
    fn run(&self, steps: &[(&str, String)], tweak: impl FnOnce(&mut BrokerSpec)) -> Run {
        let steps: Vec<Step> = steps
            .iter()
            .map(|(n, s)| Step {
                name: n.to_string(),
                script: s.clone(),
            })
            .collect();
        std::fs::write(
            self.dir.join("steps.json"),
            serde_json::to_vec(&steps).expect("json"),
        )
        .expect("steps.json");
        let (ours, theirs) = fdpass::seqpacket_pair(false).expect("control pair");
        hanzo_ipc::transport::pass_credentials(ours.as_fd()).expect("SO_PASSCRED");
        for fd in [ours.as_fd(), theirs.as_fd()] {
            rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty()).expect("inheritable");
        }
        let mut ns = Command::new(std::env::current_exe().expect("exe"))
            .arg(NS_CHILD)
            .arg(theirs.as_raw_fd().to_string())
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the namespace child");
        // The supervisor's part: learn the forwarder's pid and tell the broker.
        let forwarder_pid = find_forwarder(ns.id());
        let mut spec = BrokerSpec {
            allow: self.allow(),
            forwarder_pid,
            request_timeout_ms: 10_000,
            names: self.names(),
        };
        tweak(&mut spec);
        // The broker child must not hold the forwarder's end, nor the namespace child ours.
        rustix::io::fcntl_setfd(theirs.as_fd(), rustix::io::FdFlags::CLOEXEC).expect("cloexec");
        let mut broker = Command::new(std::env::current_exe().expect("exe"))
            .arg(BROKER)
            .arg(ours.as_raw_fd().to_string())
            .env(
                "EGRESS_BROKER_CONFIG",
                serde_json::to_string(&spec).expect("json"),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the broker child");
        drop((ours, theirs));
        let broker_pid = broker.id();
        let watch = during(broker_pid);
        let (status, out, err) = collect(&mut ns);
        assert!(
            status.success(),
            "namespace child: {status:?}\n{out}\n{err}"
        );
        let (bstatus, bout, berr) = collect(&mut broker);
        let peak_rss = watch.finish();
        assert!(bstatus.success(), "broker child: {bstatus:?}\n{berr}");
        let records = bout
            .lines()
            .map(|l| serde_json::from_str::<EgressRecord>(l).expect("a record"))
            .collect();
        let results = out
            .lines()
            .map(|l| serde_json::from_str::<StepResult>(l).expect("a step result"))
            .map(|r| (r.name.clone(), r))
            .collect();
        Run {
            results,
            records,
            broker_rss_kib: peak_rss,
        }
    }
}

/// What one run in a namespace produced.
struct Run {
    results: BTreeMap<String, StepResult>,
    records: Vec<EgressRecord>,
    /// The broker child's VmRSS: (first reading, highest reading), KiB.
    broker_rss_kib: (u64, u64),
}

/// A child's exit status and output, waited for at most [`PATIENCE`].
fn collect(child: &mut Child) -> (std::process::ExitStatus, String, String) {
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let err_reader = std::thread::spawn(move || {
        let mut err = String::new();
        let _ = stderr.read_to_string(&mut err);
        err
    });
    let mut out = String::new();
    let _ = stdout.read_to_string(&mut out);
    let deadline = Instant::now() + PATIENCE;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("a child did not finish: {out}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status, out, err_reader.join().unwrap_or_default())
}

fn vm_rss_kib(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Samples a process's VmRSS on a thread until [`RssWatch::finish`].
struct RssWatch {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<(u64, u64)>,
}

fn during(pid: u32) -> RssWatch {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s = stop.clone();
    let thread = std::thread::spawn(move || {
        let mut first = None;
        let mut peak = 0;
        while !s.load(std::sync::atomic::Ordering::Relaxed) {
            if let Some(kib) = vm_rss_kib(pid) {
                first.get_or_insert(kib);
                peak = peak.max(kib);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        (first.unwrap_or(0), peak)
    });
    RssWatch { stop, thread }
}

impl RssWatch {
    fn finish(self) -> (u64, u64) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap_or((0, 0))
    }
}

fn step<'a>(results: &'a BTreeMap<String, StepResult>, name: &str) -> &'a StepResult {
    results
        .get(name)
        .unwrap_or_else(|| panic!("step {name} did not run: {results:?}"))
}

fn expect_ok(results: &BTreeMap<String, StepResult>, name: &str, stdout_has: &str) {
    let r = step(results, name);
    assert!(
        r.code == 0 && r.stdout.contains(stdout_has),
        "{name}: exit {}, stdout {:?}, stderr {:?}",
        r.code,
        r.stdout,
        r.stderr
    );
}

fn records_for<'a>(records: &'a [EgressRecord], host: &str) -> Vec<&'a EgressRecord> {
    records.iter().filter(|r| r.host == host).collect()
}

fn denial_of(r: &EgressRecord) -> EgressDenial {
    match &r.outcome {
        EgressOutcome::Denied { reason, .. } => *reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn allowed_rule(r: &EgressRecord) -> String {
    match &r.outcome {
        EgressOutcome::Allowed { rule, .. } => rule.clone(),
        other => panic!("expected a tunnel, got {other:?} for {r:?}"),
    }
}

// ---------------------------------------------------------------- scenarios

fn allowed_clients_fetch_through_the_broker() {
    let fx = Fixture::new();
    let (t, p) = (fx.tls_port, fx.plain_port);
    let Run {
        results, records, ..
    } = fx.run(
        &[
            ("curl https", format!("curl -sS -m 30 https://{PKGS}:{t}/hello.txt")),
            (
                "curl socks5h",
                format!(
                    "curl -sS -m 30 --proxy socks5h://127.0.0.1:$PROXY_PORT https://{PKGS}:{t}/hello.txt"
                ),
            ),
            ("curl plain http", format!("curl -sS -m 30 http://{PLAIN}:{p}/hello.txt")),
            (
                "python urllib",
                format!(
                    "{PY} -c \"import urllib.request; \
                     print(urllib.request.urlopen('https://{PKGS}:{t}/hello.txt', timeout=30).read().decode())\""
                ),
            ),
            (
                "git clone",
                format!("git clone -q https://{PKGS}:{t}/repo.git cloned && cat cloned/README"),
            ),
            (
                "pip download",
                format!(
                    "{PY} -m pip download -q --no-deps --timeout 30 -d dl \
                     --index-url https://{PKGS}:{t}/simple egresspkg && ls dl"
                ),
            ),
            (
                "pip install",
                format!(
                    "{PY} -m pip install -q --no-deps --timeout 30 --target site \
                     --index-url https://{PKGS}:{t}/simple egresspkg 2>/dev/null && \
                     PYTHONPATH=site {PY} -c 'import egresspkg; print(egresspkg.VALUE)'"
                ),
            ),
        ],
        |_| {},
    );
    if std::env::var_os("EGRESS_SHOW_STEPS").is_some() {
        for r in results.values() {
            eprintln!("{:>6} ms  {}", r.ms, r.name);
        }
    }
    expect_ok(&results, "curl https", "hello from the host");
    expect_ok(&results, "curl socks5h", "hello from the host");
    expect_ok(&results, "curl plain http", "hello from the host");
    expect_ok(&results, "python urllib", "hello from the host");
    expect_ok(&results, "git clone", "cloned through the broker");
    expect_ok(&results, "pip download", "egresspkg-1.0-py3-none-any.whl");
    expect_ok(&results, "pip install", "42");
    // Every connection is on record, allowed by the name's entry, and nothing else happened.
    let pkgs = records_for(&records, PKGS);
    assert!(pkgs.len() >= 6, "{records:#?}");
    for r in &pkgs {
        assert_eq!(allowed_rule(r), format!("{PKGS}:{t}"));
        assert!(r.bytes_up > 0 && r.bytes_down > 0, "{r:?}");
    }
    assert!(pkgs.iter().any(|r| r.protocol == EgressProtocol::Socks5));
    assert!(pkgs
        .iter()
        .any(|r| r.protocol == EgressProtocol::HttpConnect));
    let plain = records_for(&records, PLAIN);
    assert_eq!(plain.len(), 1, "{records:#?}");
    assert_eq!(plain[0].protocol, EgressProtocol::HttpForward);
    assert_eq!(allowed_rule(plain[0]), format!("{PLAIN}:{p}"));
    assert_eq!(
        records.len(),
        pkgs.len() + plain.len(),
        "unexpected connections: {records:#?}"
    );
}

const SOCKS_CLIENT: &str = r#"
import socket, sys, os
cmd, atyp, host, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
s = socket.create_connection(("127.0.0.1", int(os.environ["PROXY_PORT"])), timeout=30)
s.sendall(bytes([5, 1, 0]))
assert s.recv(2) == bytes([5, 0])
if atyp == 1:
    addr = bytes([1]) + socket.inet_aton(host)
else:
    addr = bytes([3, len(host)]) + host.encode()
s.sendall(bytes([5, cmd, 0]) + addr + port.to_bytes(2, "big"))
reply = s.recv(10)
print("reply", reply[1] if len(reply) > 1 else "closed")
"#;

fn denied_requests_are_refused_and_recorded() {
    let fx = Fixture::new();
    let t = fx.tls_port;
    let socks = |cmd: u8, atyp: u8, host: &str, port: u16| {
        format!("{PY} -c '{SOCKS_CLIENT}' {cmd} {atyp} {host} {port}")
    };
    let Run {
        results, records, ..
    } = fx.run(
        &[
            (
                "not listed",
                format!("curl -sS -m 30 https://{EVIL}:{t}/hello.txt"),
            ),
            (
                "rebinding",
                format!("curl -sS -m 30 https://{REBIND}:{t}/hello.txt"),
            ),
            (
                "ip literal",
                format!("curl -sS -m 30 https://10.1.2.3:{t}/hello.txt"),
            ),
            (
                "socks5 atyp ipv4",
                format!(
                    "curl -sS -m 30 --proxy socks5://127.0.0.1:$PROXY_PORT http://10.1.2.3:{t}/"
                ),
            ),
            ("socks5 raw ipv4", socks(1, 1, "10.1.2.3", t)),
            ("socks5 bind", socks(2, 3, PKGS, t)),
            ("socks5 udp associate", socks(3, 3, PKGS, t)),
            (
                "python urllib not listed",
                format!(
                    "{PY} -c \"import urllib.request; \
                     urllib.request.urlopen('https://{EVIL}:{t}/hello.txt', timeout=30)\""
                ),
            ),
        ],
        |_| {},
    );
    for name in [
        "not listed",
        "rebinding",
        "ip literal",
        "socks5 atyp ipv4",
        "python urllib not listed",
    ] {
        let r = step(&results, name);
        assert_ne!(r.code, 0, "{name} must fail: {r:?}");
        assert!(!r.stdout.contains("hello from the host"), "{name}: {r:?}");
    }
    // curl says why: the proxy's 403 and SOCKS5's "not allowed by ruleset".
    assert!(
        step(&results, "not listed").stderr.contains("403"),
        "{:?}",
        step(&results, "not listed")
    );
    // curl 97: "Can't complete SOCKS5 connection to 10.1.2.3. (2)", 2 being the reply code.
    let r = step(&results, "socks5 atyp ipv4");
    assert!(r.code == 97 && r.stderr.contains("(2)"), "{r:?}");
    assert!(step(&results, "socks5 raw ipv4").stdout.contains("reply 2"));
    assert!(step(&results, "socks5 bind").stdout.contains("reply 7"));
    assert!(step(&results, "socks5 udp associate")
        .stdout
        .contains("reply 7"));

    let reasons = |host: &str| -> Vec<EgressDenial> {
        records_for(&records, host)
            .into_iter()
            .map(denial_of)
            .collect()
    };
    assert_eq!(
        reasons(EVIL),
        [EgressDenial::NotListed, EgressDenial::NotListed]
    );
    assert_eq!(reasons(REBIND), [EgressDenial::PrivateAddress]);
    let literal = records_for(&records, "10.1.2.3");
    assert_eq!(literal.len(), 3, "{records:#?}");
    assert!(literal
        .iter()
        .all(|r| denial_of(r) == EgressDenial::IpLiteral));
    assert_eq!(
        literal
            .iter()
            .filter(|r| r.protocol == EgressProtocol::Socks5)
            .count(),
        2
    );
    assert_eq!(
        reasons(PKGS),
        [
            EgressDenial::UnsupportedCommand,
            EgressDenial::UnsupportedCommand
        ]
    );
    assert_eq!(records.len(), 8, "{records:#?}");
    assert!(records.iter().all(|r| r.bytes_up == 0 && r.bytes_down == 0));
}

const DIRECT_TCP: &str = r#"
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
    print("connected")
except OSError as e:
    print("refused", e.errno)
"#;

fn the_namespace_reaches_nothing_directly() {
    let fx = Fixture::new();
    // A TCP and a UDP service on the host's loopback that must see nothing.
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").expect("tcp");
    tcp.set_nonblocking(true).expect("nonblocking");
    let tcp_port = tcp.local_addr().expect("addr").port();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
    udp.set_nonblocking(true).expect("nonblocking");
    let udp_port = udp.local_addr().expect("addr").port();
    let Run {
        results, records, ..
    } = fx.run(
        &[
            (
                "tcp to the host loopback",
                format!("{PY} -c '{DIRECT_TCP}' 127.0.0.1 {tcp_port}"),
            ),
            (
                "tcp to the https server's port",
                format!("{PY} -c '{DIRECT_TCP}' 127.0.0.1 {}", fx.tls_port),
            ),
            (
                "tcp to a routable address",
                format!("{PY} -c '{DIRECT_TCP}' 10.0.0.1 80"),
            ),
            (
                "udp to the host loopback",
                format!(
                    "{PY} -c 'import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); \
                     s.sendto(b\"leak\", (\"127.0.0.1\", {udp_port})); print(\"sent\")'"
                ),
            ),
            ("dns with getent", "getent hosts example.com".to_string()),
            (
                "dns with python",
                format!(
                    "{PY} -c 'import socket; socket.getaddrinfo(\"{PKGS}\", 443)' 2>&1 | tail -1"
                ),
            ),
            (
                "curl without the proxy",
                format!(
                    "curl -sS -m 10 --noproxy '*' https://{PKGS}:{}/hello.txt",
                    fx.tls_port
                ),
            ),
        ],
        |_| {},
    );
    for name in ["tcp to the host loopback", "tcp to the https server's port"] {
        let r = step(&results, name);
        assert!(
            r.stdout.contains(&format!(
                "refused {}",
                rustix::io::Errno::CONNREFUSED.raw_os_error()
            )),
            "{name}: {r:?}"
        );
    }
    let r = step(&results, "tcp to a routable address");
    assert!(
        r.stdout.contains(&format!(
            "refused {}",
            rustix::io::Errno::NETUNREACH.raw_os_error()
        )),
        "{r:?}"
    );
    assert!(step(&results, "udp to the host loopback")
        .stdout
        .contains("sent"));
    let getent = step(&results, "dns with getent");
    assert_eq!(getent.code, 2, "no resolver reachable: {getent:?}");
    assert!(step(&results, "dns with python")
        .stdout
        .contains("gaierror"));
    let curl = step(&results, "curl without the proxy");
    assert_eq!(curl.code, 6, "curl could not resolve: {curl:?}");
    assert!(
        tcp.accept().is_err(),
        "a direct TCP connection reached the host"
    );
    let mut buf = [0u8; 16];
    assert!(
        udp.recv_from(&mut buf).is_err(),
        "a datagram reached the host"
    );
    assert!(records.is_empty(), "{records:#?}");
}

const MANY_TUNNELS: &str = r#"
import asyncio, os, sys
N, host, port = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
proxy = int(os.environ["PROXY_PORT"])
async def main():
    opened = []
    for i in range(N):
        r, w = await asyncio.open_connection("127.0.0.1", proxy)
        w.write(f"CONNECT {host}:{port} HTTP/1.1\r\n\r\n".encode())
        opened.append((r, w))
    for r, w in opened:
        head = await r.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
    async def use(i, r, w):
        msg = f"tunnel {i:03}".encode()
        w.write(msg)
        await w.drain()
        assert await r.readexactly(len(msg)) == msg
        w.close()
    await asyncio.gather(*(use(i, r, w) for i, (r, w) in enumerate(opened)))
    print("ok", len(opened))
asyncio.run(main())
"#;

const DOWNLOAD: &str = r#"
import socket, os, sys
host, port = sys.argv[1], int(sys.argv[2])
s = socket.create_connection(("127.0.0.1", int(os.environ["PROXY_PORT"])), timeout=60)
s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\n\r\n".encode())
head = b""
while not head.endswith(b"\r\n\r\n"):
    head += s.recv(1)
assert head.startswith(b"HTTP/1.1 200"), head
buf = memoryview(bytearray(1 << 20))
total = 0
while True:
    n = s.recv_into(buf)
    if n == 0:
        break
    total += n
print("received", total)
"#;

const SILENT: &str = r#"
import socket, os
s = socket.create_connection(("127.0.0.1", int(os.environ["PROXY_PORT"])), timeout=60)
print("closed" if s.recv(1) == b"" else "data")
"#;

fn the_forwarder_survives_load_and_silent_clients() {
    let mut fx = Fixture::new();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let echo = rt.block_on(async {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("echo");
        let port = l.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        port
    });
    fx.echo_port = echo;
    fx.source_port = rt.block_on(async {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("source");
        let port = l.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    use tokio::io::AsyncWriteExt;
                    let chunk = vec![0x5au8; 1 << 20];
                    for _ in 0..SOURCE_BYTES / chunk.len() as u64 {
                        if s.write_all(&chunk).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        port
    });
    let source = fx.source_port;
    let Run {
        results,
        records,
        broker_rss_kib: (rss_first, rss_peak),
    } = fx.run(
        &[
            (
                "1 GiB through one tunnel",
                format!("{PY} -c '{DOWNLOAD}' {SOURCE} {source}"),
            ),
            (
                "200 tunnels",
                format!("{PY} -c '{MANY_TUNNELS}' 200 {ECHO} {echo}"),
            ),
            ("silent client", format!("{PY} -c '{SILENT}'")),
            (
                "still serving",
                format!("curl -sS -m 30 https://{PKGS}:{}/hello.txt", fx.tls_port),
            ),
        ],
        |spec| spec.request_timeout_ms = 500,
    );
    expect_ok(
        &results,
        "1 GiB through one tunnel",
        &format!("received {SOURCE_BYTES}"),
    );
    let big = records_for(&records, SOURCE);
    assert_eq!(big.len(), 1);
    assert_eq!(big[0].bytes_down, SOURCE_BYTES);
    // The broker's memory does not follow what passes through it: the bytes stay in the kernel.
    eprintln!("broker VmRSS: {rss_first} KiB at start, {rss_peak} KiB at most");
    assert!(
        rss_peak < rss_first + 16 * 1024,
        "the broker grew from {rss_first} KiB to {rss_peak} KiB"
    );
    expect_ok(&results, "200 tunnels", "ok 200");
    expect_ok(&results, "silent client", "closed");
    expect_ok(&results, "still serving", "hello from the host");
    let echoed = records_for(&records, ECHO);
    assert_eq!(echoed.len(), 200);
    for r in echoed {
        assert_eq!(allowed_rule(r), format!("{ECHO}:{echo}"));
        assert_eq!((r.bytes_up, r.bytes_down), (10, 10));
    }
    let silent: Vec<_> = records
        .iter()
        .filter(|r| r.protocol == EgressProtocol::Unknown)
        .collect();
    assert_eq!(silent.len(), 1, "{silent:#?}");
    assert_eq!(denial_of(silent[0]), EgressDenial::RequestTimeout);
    drop(rt);
}

// ---------------------------------------------------------------- harness

const SCENARIOS: &[(&str, fn())] = &[
    (
        "allowed_clients_fetch_through_the_broker",
        allowed_clients_fetch_through_the_broker,
    ),
    (
        "denied_requests_are_refused_and_recorded",
        denied_requests_are_refused_and_recorded,
    ),
    (
        "the_namespace_reaches_nothing_directly",
        the_namespace_reaches_nothing_directly,
    ),
    (
        "the_forwarder_survives_load_and_silent_clients",
        the_forwarder_survives_load_and_silent_clients,
    ),
];

fn main() {
    let args: Vec<OsString> = std::env::args_os().collect();
    match args
        .get(1)
        .map(|a| a.to_string_lossy().into_owned())
        .as_deref()
    {
        Some(NS_CHILD) => std::process::exit(namespace_child(&args[2..])),
        Some(FORWARDER) => std::process::exit(forwarder_child(&args[2..])),
        Some(BROKER) => std::process::exit(broker_child(&args[2..])),
        _ => {}
    }
    let flags: Vec<String> = args[1..]
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if flags.iter().any(|a| a == "--list") {
        if !flags.iter().any(|a| a == "--ignored") {
            for (name, _) in SCENARIOS {
                println!("{name}: test");
            }
        }
        return;
    }
    let exact = flags.iter().any(|a| a == "--exact");
    let filter: Vec<&String> = flags.iter().filter(|a| !a.starts_with("--")).collect();
    let mut failed = Vec::new();
    let mut ran = 0;
    for (name, scenario) in SCENARIOS {
        let selected = filter.is_empty()
            || filter.iter().any(|f| {
                if exact {
                    f == name
                } else {
                    name.contains(f.as_str())
                }
            });
        if !selected {
            continue;
        }
        ran += 1;
        println!("test {name} ...");
        match std::panic::catch_unwind(scenario) {
            Ok(()) => println!("test {name} ... ok"),
            Err(_) => {
                println!("test {name} ... FAILED");
                failed.push(*name);
            }
        }
    }
    println!(
        "egress_namespace: {} passed, {} failed",
        ran - failed.len(),
        failed.len()
    );
    if !failed.is_empty() {
        std::process::exit(1);
    }
}
