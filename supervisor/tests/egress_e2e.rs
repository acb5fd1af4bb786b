//! Egress end to end through the real `hanzo-dev` binary: `hanzo-dev sandbox --network-allow …`
//! runs real clients (curl, Python's urllib, `git clone` over dumb HTTP) in tier B with the
//! forwarder in the command's namespace and the proxy served by the broker-confined helper, against
//! a real HTTP server this test starts on the host's loopback. The settings scopes (user grants,
//! project narrows, untrusted gets none) and tier A's refusal are exercised through the same
//! binary. The forwarder and proxy themselves are proven in depth (HTTPS with a test CA, pip,
//! SOCKS5 corner cases, 200 tunnels, 1 GiB, idle timeout, a wrong sender) by
//! `workers/broker/tests/egress_namespace.rs`.

mod common;

use common::www::StaticSite;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const SETUP: &str = "run ./scripts/setup.sh, which installs it";

/// A workspace with a served site (`index.txt`, a dumb-HTTP git repository `repo.git`), a home
/// directory, and the server.
struct Fixture {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    home: PathBuf,
    server: StaticSite,
}

fn sh(dir: &Path, script: &str) {
    let ok = Command::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .stdout(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("sh ({SETUP}): {e}"));
    assert!(ok.success(), "{script}: {ok}");
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().join("ws");
    let home = dir.path().join("home");
    let www = dir.path().join("www");
    for d in [&ws, &home, &www] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    std::fs::write(www.join("index.txt"), "hello-egress\n").expect("index");
    sh(
        &www,
        "git init -q src && cd src && echo egress-repo > README && git add README && \
         git -c user.name=t -c user.email=t@t commit -qm init && cd .. && \
         git clone -q --bare src repo.git && git --git-dir=repo.git update-server-info",
    );
    let server = StaticSite::serve(&www);
    Fixture {
        ws: ws.canonicalize().expect("ws"),
        home,
        _dir: dir,
        server,
    }
}

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Fixture {
    fn hanzo(&self, args: &[&str]) -> Out {
        let out = Command::new(env!("CARGO_BIN_EXE_hanzo-dev"))
            .args(args)
            .current_dir(&self.ws)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &self.home)
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::null())
            .output()
            .expect("hanzo-dev");
        Out {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// `hanzo-dev sandbox [extra…] --workspace WS -- sh -c SCRIPT`.
    fn sandbox(&self, extra: &[&str], script: &str) -> Out {
        let ws = self.ws.display().to_string();
        let mut args = vec!["sandbox", "--workspace", &ws];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "/bin/sh", "-c", script]);
        self.hanzo(&args)
    }

    fn local(&self) -> String {
        self.server.host_port()
    }

    fn write_user_settings(&self, json: &str) {
        let d = self.home.join(".config/hanzo");
        std::fs::create_dir_all(&d).expect("mkdir");
        std::fs::write(d.join("settings.json"), json).expect("user settings");
    }

    fn write_project_settings(&self, json: &str) {
        let d = self.ws.join(".hanzo");
        std::fs::create_dir_all(&d).expect("mkdir");
        std::fs::write(d.join("settings.json"), json).expect("project settings");
    }
}

/// The record lines the sandbox printed.
/// The proxy's records on the command's stderr. Each is one atomic write, but the command shares
/// that stderr and may have written part of a line just before (curl writes its error in pieces:
/// a run under load showed `c` + record + `url: (97) …`), so a record may begin mid-line.
fn records(out: &Out) -> Vec<&str> {
    const PREFIX: &str = "hanzo-dev sandbox: egress: ";
    out.stderr
        .lines()
        .filter_map(|l| l.find(PREFIX).map(|at| &l[at + PREFIX.len()..]))
        .collect()
}

fn require_tier_b() {
    if let Err(why) = hanzo_sandbox::doctor::probe_kernel().tier_b() {
        panic!("these tests need tier B (user namespaces), which this machine lacks: {why}");
    }
}

#[test]
fn allowed_clients_fetch_through_the_proxy_and_each_connection_is_recorded() {
    require_tier_b();
    let f = fixture();
    let p = f.server.port;
    // The clients' own NO_PROXY would keep 127.0.0.1 direct (the namespace's loopback, where
    // nothing listens): the target is the host's, so they are told to use the proxy for it.
    let script = format!(
        "test -n \"$HTTPS_PROXY\" && test \"$ALL_PROXY\" = \"socks5h://${{HTTP_PROXY#http://}}\" || \
           {{ echo no-proxy-env; exit 9; }}; \
         export NO_PROXY= no_proxy=; \
         curl -sS http://127.0.0.1:{p}/index.txt && echo curl-forward-ok; \
         curl -sS -p http://127.0.0.1:{p}/index.txt && echo curl-connect-ok; \
         /usr/bin/python3 -c 'import urllib.request,sys; \
           sys.stdout.write(urllib.request.urlopen(\"http://127.0.0.1:{p}/index.txt\").read().decode())' \
           && echo urllib-ok; \
         GIT_CONFIG_NOSYSTEM=1 git clone -q http://127.0.0.1:{p}/repo.git clone && \
           cat clone/README && echo git-ok"
    );
    let out = f.sandbox(&["--network-allow", &f.local()], &script);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    for ok in ["curl-forward-ok", "curl-connect-ok", "urllib-ok", "git-ok"] {
        assert!(
            out.stdout.contains(ok),
            "{ok} missing:\n{}\n{}",
            out.stdout,
            out.stderr
        );
    }
    assert!(out.stdout.contains("hello-egress") && out.stdout.contains("egress-repo"));
    let recs = records(&out);
    let rule = format!("by rule {}", f.local());
    assert!(
        recs.iter()
            .any(|r| r.starts_with("allowed http_forward") && r.contains(&rule)),
        "{recs:?}"
    );
    assert!(
        recs.iter()
            .any(|r| r.starts_with("allowed http_connect") && r.contains(&rule)),
        "{recs:?}"
    );
    assert!(recs.len() >= 4, "{recs:?}");
    assert!(recs.iter().all(|r| r.starts_with("allowed")), "{recs:?}");
    // Every allowed record counted the response bytes it carried.
    assert!(recs.iter().all(|r| !r.contains(" 0 B down")), "{recs:?}");
}

#[test]
fn denied_requests_are_refused_with_the_recorded_reason_and_nothing_leaks_directly() {
    require_tier_b();
    let f = fixture();
    let p = f.server.port;
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
    udp.set_nonblocking(true).expect("nonblocking");
    let u = udp.local_addr().expect("udp addr").port();
    // Listed: a name that resolves to the host's loopback (rebinding), and another port.
    // The direct probe fails on any HTTP error too: the forwarder picks its port at random in the
    // command's own namespace, and when that is `p` the probe meets the forwarder's refusal, not
    // the host's server (a CI run hit exactly that). "Nothing leaks" is the `hello-egress` check.
    let script = format!(
        "export NO_PROXY= no_proxy=; \
         curl -sS -o /dev/null -w 'unlisted=%{{http_code}}\\n' http://unlisted.example:{p}/; \
         curl -sS -o /dev/null -w 'literal=%{{http_code}}\\n' http://127.0.0.1:{p}/index.txt; \
         curl -sS -o /dev/null -w 'rebind=%{{http_code}}\\n' http://localhost:{p}/index.txt; \
         curl -sS -x \"socks5://${{ALL_PROXY#socks5h://}}\" http://127.0.0.1:{p}/index.txt \
           || echo socks-ipv4-refused; \
         curl -sSf --noproxy '*' --max-time 5 http://127.0.0.1:{p}/index.txt \
           || echo direct-refused; \
         getent hosts example.com || echo dns-refused; \
         /usr/bin/python3 -c 'import socket; \
           socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b\"x\", (\"127.0.0.1\", {u}))' \
           ; echo udp-sent"
    );
    let other = format!("127.0.0.1:{}", if p == 65535 { 1 } else { p + 1 });
    let rebind = format!("localhost:{p}");
    let out = f.sandbox(
        &["--network-allow", &other, "--network-allow", &rebind],
        &script,
    );
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("unlisted=403"), "{}", out.stdout);
    assert!(out.stdout.contains("literal=403"), "{}", out.stdout);
    assert!(out.stdout.contains("rebind=403"), "{}", out.stdout);
    for refused in ["socks-ipv4-refused", "direct-refused", "dns-refused"] {
        assert!(out.stdout.contains(refused), "{refused}: {}", out.stdout);
    }
    assert!(!out.stdout.contains("hello-egress"), "{}", out.stdout);
    let recs = records(&out);
    let find = |what: &str| recs.iter().any(|r| r.contains(what));
    assert!(
        find(&format!(
            "denied http_forward unlisted.example:{p}: not_listed"
        )),
        "{recs:?}"
    );
    assert!(
        find(&format!("denied http_forward 127.0.0.1:{p}: ip_literal")),
        "{recs:?}"
    );
    assert!(
        find(&format!(
            "denied http_forward localhost:{p}: private_address (rule {rebind})"
        )),
        "{recs:?}"
    );
    assert!(
        find(&format!("denied socks5 127.0.0.1:{p}: ip_literal")),
        "{recs:?}\n{}\n{}",
        out.stdout,
        out.stderr
    );
    // UDP goes to the namespace's own loopback: the host's socket got nothing.
    assert!(out.stdout.contains("udp-sent"), "{}", out.stdout);
    let mut buf = [0u8; 8];
    assert!(udp
        .recv(&mut buf)
        .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock));
    // The direct attempt and the lookup never reached the proxy.
    assert_eq!(recs.len(), 4, "{recs:?}\n{}", out.stdout);
}

/// Prints `open-fds=[…]`: the command's descriptors above stdio.
const OPEN_FDS: &str = r#"
import os
def is_open(f):
    try:
        os.fstat(f)
        return True
    except OSError:
        return False
print('open-fds=%s' % [f for f in range(3, 4096) if is_open(f)])
"#;

#[test]
fn the_command_holds_neither_end_of_the_control_socket_nor_the_listener() {
    require_tier_b();
    let f = fixture();
    let ws = f.ws.display().to_string();
    let local = f.local();
    let out = f.hanzo(&[
        "sandbox",
        "--workspace",
        &ws,
        "--network-allow",
        &local,
        "--",
        "/usr/bin/python3",
        "-c",
        OPEN_FDS,
    ]);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("open-fds=[]"), "{}", out.stdout);
}

/// A client that sends a `CONNECT` whose host carries terminal control sequences.
const HOSTILE_CONNECT: &str = r#"
import os, socket
port = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
s = socket.create_connection(("127.0.0.1", port))
s.sendall(b"CONNECT a\x1b]0;pwned\x07\x1b[2Jb.example:443 HTTP/1.1\r\nHost: x\r\n\r\n")
print("answer=%r" % s.recv(64)[:12])
"#;

#[test]
fn a_hostile_request_cannot_reach_the_terminal_through_the_records() {
    require_tier_b();
    let f = fixture();
    let ws = f.ws.display().to_string();
    let out = f.hanzo(&[
        "sandbox",
        "--workspace",
        &ws,
        "--network-allow",
        "pypi.org",
        "--",
        "/usr/bin/python3",
        "-c",
        HOSTILE_CONNECT,
    ]);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("answer=b'HTTP/1.1 40"),
        "{}",
        out.stdout
    );
    let recs = records(&out);
    assert_eq!(recs.len(), 1, "{}", out.stderr);
    assert!(recs[0].starts_with("denied "), "{recs:?}");
    assert!(
        !out.stderr.contains('\u{1b}') && !out.stderr.contains('\u{7}'),
        "{:?}",
        out.stderr
    );
}

#[test]
fn without_a_list_the_command_has_no_proxy_and_no_forwarder() {
    require_tier_b();
    let f = fixture();
    let out = f.sandbox(&[], "env | grep -i _proxy || echo no-proxy-env");
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("no-proxy-env"), "{}", out.stdout);
    assert!(records(&out).is_empty(), "{}", out.stderr);
}

#[test]
fn tier_a_with_network_asked_for_fails_closed_with_the_message() {
    let f = fixture();
    let out = f.sandbox(
        &["--isolation", "tier-a", "--network-allow", &f.local()],
        "echo RAN",
    );
    assert_eq!(out.code, 3, "{}\n{}", out.stdout, out.stderr);
    assert!(!out.stdout.contains("RAN"));
    assert!(out.stderr.contains("tier B"), "{}", out.stderr);
    assert!(out.stderr.contains(&f.local()), "{}", out.stderr);
    // Without network the same command runs in tier A.
    let out = f.sandbox(&["--isolation", "tier-a"], "echo RAN");
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("RAN"));
}

#[test]
fn a_run_in_tier_a_with_network_asked_for_fails_closed_before_anything_starts() {
    let f = fixture();
    let out = f.hanzo(&[
        "run",
        "--isolation",
        "tier-a",
        "--network-allow",
        "pypi.org",
        "say hello",
    ]);
    assert_eq!(out.code, 3, "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("needs sandbox tier B") && out.stderr.contains("pypi.org"),
        "{}",
        out.stderr
    );
    // Nothing was recorded: the store was never opened.
    assert!(!f.home.join(".local/share/hanzo").join("runs.db").exists());
}

#[test]
fn a_bad_network_allow_entry_is_a_usage_error() {
    let f = fixture();
    let out = f.sandbox(&["--network-allow", "https://evil.example/x"], "echo RAN");
    assert_ne!(out.code, 0);
    assert!(!out.stdout.contains("RAN"));
    assert!(out.stderr.contains("--network-allow"), "{}", out.stderr);
}

#[test]
fn the_user_scope_grants_a_trusted_project_only_narrows_and_an_untrusted_one_gets_none() {
    require_tier_b();
    let f = fixture();
    let p = f.server.port;
    let local = f.local();
    f.write_user_settings(&format!(
        r#"{{"sandbox": {{"network_allow": ["{local}", "pypi.org"]}}}}"#
    ));
    let fetch = format!(
        "export NO_PROXY= no_proxy=; test -n \"$HTTP_PROXY\" || {{ echo no-proxy-env; exit 0; }}; \
         curl -sS -o /dev/null -w 'code=%{{http_code}}\\n' http://127.0.0.1:{p}/index.txt"
    );
    // The user scope alone: allowed.
    let out = f.sandbox(&[], &fetch);
    assert!(
        out.stdout.contains("code=200"),
        "{}\n{}",
        out.stdout,
        out.stderr
    );

    // A project that narrows to pypi.org and tries to add a host of its own.
    f.write_project_settings(r#"{"sandbox": {"network_allow": ["pypi.org", "evil.example"]}}"#);
    // Untrusted: no network at all, with the warning.
    let out = f.sandbox(&[], &fetch);
    assert!(
        out.stdout.contains("no-proxy-env"),
        "{}\n{}",
        out.stdout,
        out.stderr
    );
    assert!(out.stderr.contains("not trusted"), "{}", out.stderr);
    // `--network-allow` is the user's own decision at the prompt: it applies even so.
    let out = f.sandbox(&["--network-allow", &local], &fetch);
    assert!(
        out.stdout.contains("code=200"),
        "{}\n{}",
        out.stdout,
        out.stderr
    );

    // Trusted: the project's list replaces the user's where the user allows it; the rest is
    // ignored with a warning.
    let trust = f.hanzo(&["trust"]);
    assert_eq!(trust.code, 0, "{}\n{}", trust.stdout, trust.stderr);
    let out = f.sandbox(&[], &fetch);
    assert!(
        out.stdout.contains("code=403"),
        "{}\n{}",
        out.stdout,
        out.stderr
    );
    assert!(
        out.stderr.contains("\"evil.example\" is ignored") && out.stderr.contains("only narrow"),
        "{}",
        out.stderr
    );
    let recs = records(&out);
    assert!(
        recs.iter()
            .any(|r| r.contains(&format!("127.0.0.1:{p}: ip_literal"))),
        "{recs:?}"
    );

    // `config show --sources` says where each written entry came from.
    let show = f.hanzo(&["config", "show", "--sources"]);
    assert_eq!(show.code, 0, "{}\n{}", show.stdout, show.stderr);
    assert!(
        show.stdout.contains("sandbox.network_allow[0] = \"")
            && show.stdout.contains("[user]")
            && show.stdout.contains("[project]"),
        "{}",
        show.stdout
    );
}
