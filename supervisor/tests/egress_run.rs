//! Egress for `hanzo-dev run`, end to end through the real binary: real workers (the broker serves
//! the proxy on the control socket it inherited; the tools worker's tier-B pid 1 runs the
//! forwarder), real commands (`curl`, Python) as `bash` tool calls of a model replayed from a
//! cassette in Anthropic's wire format, a real HTTP server on the host's loopback, a real store.
//! Every connection attempt must be in the `--json` stream (before `run_finished`) and in the
//! run's record, with its reason; what a command sends must not reach a terminal unescaped.

mod common;

use common::env::TestHome;
use common::www::StaticSite;
use hanzo_model::script::{anthropic_cassette, ScriptTurn};
use hanzo_store::RunId;
use serde_json::{json, Value};

/// A private user with a local site (`www`, holding `index.txt`) served while it lives.
struct Env {
    home: TestHome,
    server: StaticSite,
}

impl std::ops::Deref for Env {
    type Target = TestHome;
    fn deref(&self) -> &TestHome {
        &self.home
    }
}

struct Out {
    code: Option<i32>,
    events: Vec<Value>,
    stdout: String,
    stderr: String,
}

impl Env {
    fn new() -> Env {
        let home = TestHome::new();
        let www = home.path("www");
        std::fs::create_dir_all(&www).expect("mkdir");
        std::fs::write(www.join("index.txt"), "hello-egress-run\n").expect("index");
        let server = StaticSite::serve(&www);
        Env { home, server }
    }
    fn port(&self) -> u16 {
        self.server.port
    }
    fn local(&self) -> String {
        self.server.host_port()
    }
    /// User settings: `bash` allowed, plus `extra` merged into `sandbox`.
    fn settings(&self, sandbox: Value) {
        let v = json!({"permissions": {"bash": "allow"}, "sandbox": sandbox});
        std::fs::write(self.path("config/hanzo/settings.json"), v.to_string()).expect("settings");
    }
    fn project_settings(&self, v: Value) {
        let d = self.ws().join(".hanzo");
        std::fs::create_dir_all(&d).expect("mkdir");
        std::fs::write(d.join("settings.json"), v.to_string()).expect("project settings");
    }
    fn output(&self, args: &[&str]) -> Out {
        let out = self.command(args).output().expect("hanzo-dev");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let events = stdout
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        Out {
            code: out.status.code(),
            events,
            stdout,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
    /// `run --json` of a model that makes one `bash` call per script (one turn), then stops.
    fn run_bash(&self, scripts: &[&str], extra: &[&str]) -> Out {
        let mut all = vec!["--json"];
        all.extend_from_slice(extra);
        self.run_bash_plain(scripts, &all)
    }
    /// As `run_bash`, without `--json` unless `extra` has it (the live view on stderr).
    fn run_bash_plain(&self, scripts: &[&str], extra: &[&str]) -> Out {
        let mut turn = ScriptTurn::tool("t0", "bash", json!({"command": scripts[0]}));
        for (i, s) in scripts.iter().enumerate().skip(1) {
            turn = turn.and_tool(&format!("t{i}"), "bash", json!({"command": s}));
        }
        let cassette = self.path("model.jsonl");
        std::fs::write(
            &cassette,
            anthropic_cassette(&[turn, ScriptTurn::text("done")]),
        )
        .expect("cassette");
        let cassette = cassette.display().to_string();
        let mut args = vec![
            "run",
            "--replay",
            &cassette,
            "--max-tool-calls-per-turn",
            "20",
        ];
        args.extend_from_slice(extra);
        args.push("fetch things");
        self.output(&args)
    }
}

fn require_tier_b() {
    if let Err(why) = hanzo_sandbox::doctor::probe_kernel().tier_b() {
        panic!("these tests need tier B (user namespaces), which this machine lacks: {why}");
    }
}

fn of_type<'a>(events: &'a [Value], t: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == t).collect()
}

/// The output the model was shown for each call, in order.
fn previews(out: &Out) -> Vec<String> {
    of_type(&out.events, "tool_result")
        .iter()
        .map(|r| r["preview"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn run_id(out: &Out) -> RunId {
    let started = of_type(&out.events, "run_started");
    RunId(started[0]["run_id"].as_i64().expect("run_id"))
}

/// The `egress` events the run stored.
fn stored_egress(env: &Env, id: RunId) -> Vec<Value> {
    env.store()
        .load_run(id)
        .expect("run")
        .events
        .into_iter()
        .filter(|e| e.kind == "egress")
        .map(|e| e.data)
        .collect()
}

fn find<'a>(events: &'a [&'a Value], decision: &str, host: &str) -> Option<&'a Value> {
    events
        .iter()
        .copied()
        .find(|e| e["decision"] == decision && e["host"] == host)
}

/// The port of the rebinding entry (nothing needs to listen: it is refused before any connect).
const REBIND_PORT: u16 = 9;

#[test]
fn a_run_s_commands_reach_an_allowed_host_and_every_attempt_is_recorded_with_its_reason() {
    require_tier_b();
    let env = Env::new();
    env.settings(json!({}));
    let p = env.port();
    let fetch = format!(
        "export NO_PROXY= no_proxy=; test -n \"$HTTPS_PROXY\" || echo no-proxy-env; \
         curl -sS http://127.0.0.1:{p}/index.txt && echo allowed-ok; \
         curl -sS -p -o /dev/null -w 'tunnel=%{{http_code}}\\n' http://127.0.0.1:{p}/index.txt"
    );
    let denied = format!(
        "export NO_PROXY= no_proxy=; \
         curl -s -o /dev/null -w 'notlisted=%{{http_code}}\\n' http://not-listed.example/; \
         curl -s -o /dev/null -w 'literal=%{{http_code}}\\n' http://10.1.2.3/; \
         curl -s -o /dev/null -w 'rebind=%{{http_code}}\\n' http://localhost:{REBIND_PORT}/; \
         curl -sf --noproxy '*' --max-time 5 http://127.0.0.1:{p}/index.txt || echo direct-refused"
    );
    // A listed name that resolves to the host's loopback, on a port the literal entry does not
    // name: a rebinding name cannot reach the host's own services.
    let rebind = format!("localhost:{REBIND_PORT}");
    let out = env.run_bash(
        &[&fetch, &denied],
        &["--network-allow", &env.local(), "--network-allow", &rebind],
    );
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    let shown = previews(&out);
    assert!(
        shown[0].contains("hello-egress-run") && shown[0].contains("allowed-ok"),
        "{shown:?}\n{}",
        out.stderr
    );
    assert!(shown[0].contains("tunnel=200"), "{shown:?}");
    assert!(!shown[0].contains("no-proxy-env"), "{shown:?}");
    for want in [
        "notlisted=403",
        "literal=403",
        "rebind=403",
        "direct-refused",
    ] {
        assert!(shown[1].contains(want), "{want}: {shown:?}");
    }
    assert!(!shown[1].contains("hello-egress-run"), "{shown:?}");

    // The stream: every attempt, each before `run_finished`, which stays last.
    let egress = of_type(&out.events, "egress");
    let rule = env.local();
    let forward = find(&egress, "allowed", "127.0.0.1").expect("allowed record");
    assert_eq!(forward["rule"], rule.as_str(), "{egress:#?}");
    assert_eq!(forward["port"], p);
    assert!(forward["bytes_down"].as_u64().unwrap() > 0, "{forward}");
    assert!(
        egress
            .iter()
            .any(|e| e["decision"] == "allowed" && e["protocol"] == "http_connect"),
        "{egress:#?}"
    );
    let reason = |host: &str| {
        find(&egress, "denied", host).unwrap_or_else(|| panic!("no denial of {host}: {egress:#?}"))
            ["reason"]
            .clone()
    };
    assert_eq!(reason("not-listed.example"), "not_listed");
    assert_eq!(reason("10.1.2.3"), "ip_literal");
    assert_eq!(reason("localhost"), "private_address");
    assert_eq!(
        find(&egress, "denied", "localhost").unwrap()["rule"],
        rebind.as_str()
    );
    assert_eq!(out.events.last().unwrap()["type"], "run_finished");
    // The direct attempt never reached the proxy: nothing else is on record.
    assert_eq!(egress.len(), 5, "{egress:#?}");

    // The record: the same attempts, in `runs show` and its `--json`.
    let id = run_id(&out);
    let stored = stored_egress(&env, id);
    assert_eq!(stored.len(), egress.len());
    let show = env.output(&["runs", "show", &id.0.to_string()]);
    assert_eq!(show.code, Some(0), "{}", show.stderr);
    assert!(
        show.stdout.contains("egress") && show.stdout.contains("not_listed"),
        "{}",
        show.stdout
    );
    let json = env.output(&["runs", "show", &id.0.to_string(), "--json"]);
    let rec: Value = serde_json::from_str(&json.stdout).expect("runs show --json");
    let kinds = rec["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["kind"] == "egress")
        .count();
    assert_eq!(kinds, egress.len(), "{}", json.stdout);
}

#[test]
fn a_run_without_a_list_has_no_proxy_no_network_and_no_records() {
    require_tier_b();
    let env = Env::new();
    env.settings(json!({}));
    let p = env.port();
    let script = format!(
        "env | grep -i _proxy || echo no-proxy-env; \
         curl -s --max-time 5 http://127.0.0.1:{p}/index.txt || echo no-network"
    );
    let out = env.run_bash(&[&script], &[]);
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    let shown = previews(&out);
    assert!(
        shown[0].contains("no-proxy-env") && shown[0].contains("no-network"),
        "{shown:?}"
    );
    assert!(of_type(&out.events, "egress").is_empty());
    assert!(stored_egress(&env, run_id(&out)).is_empty());
}

/// Everything a command could try on the way to the broker's control socket: its own
/// descriptors, the forwarder's through `/proc` (pid 2 in the namespace) and `pidfd_getfd`.
const REACH_CONTROL: &str = r#"
import ctypes, os, socket
def is_open(f):
    try:
        os.fstat(f)
        return True
    except OSError:
        return False
print('open-fds=%s' % [f for f in range(3, 1024) if is_open(f)])
got = []
for n in range(0, 64):
    try:
        fd = os.open('/proc/2/fd/%d' % n, os.O_RDWR)
        got.append(n)
    except OSError:
        pass
print('proc-fds=%s' % got)
libc = ctypes.CDLL(None, use_errno=True)
pidfd = libc.syscall(434, 2, 0)
taken = []
if pidfd >= 0:
    for n in range(0, 64):
        if libc.syscall(438, pidfd, n, 0) >= 0:
            taken.append(n)
print('pidfd-getfd=%s' % taken)
# Forged records: a record is the broker's, made from a connection; all a command can do is
# connect, and what it sends is only ever a request: an escape-laden name, a huge one, and one
# that tries to start a line of its own.
port = int(os.environ['HTTP_PROXY'].rsplit(':', 1)[1])
# SOCKS5 carries the name as raw bytes (HTTP parsing refuses control characters outright).
name = b'a\x1b]0;pwned\x07\x1b[2J\r\nallowed http_connect evil:443 by rule evil.example'
s = socket.create_connection(('127.0.0.1', port))
s.sendall(b'\x05\x01\x00')
s.recv(2)
s.sendall(b'\x05\x01\x00\x03' + bytes([len(name)]) + name + b'\x01\xbb')
print('socks=%r' % s.recv(2))
s.close()
for host in [b'h' * 20000, b'x\r\nallowed http_connect evil:443 by rule evil']:
    s = socket.create_connection(('127.0.0.1', port))
    s.sendall(b'CONNECT ' + host + b':443 HTTP/1.1\r\n\r\n')
    print('answer=%r' % s.recv(12))
    s.close()
"#;

#[test]
fn a_command_cannot_reach_the_control_socket_or_forge_a_record_and_hostile_names_are_escaped() {
    require_tier_b();
    let env = Env::new();
    env.settings(json!({}));
    let script = format!("/usr/bin/python3 - <<'EOF'\n{REACH_CONTROL}\nEOF");
    let out = env.run_bash(&[&script], &["--network-allow", &env.local()]);
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    let shown = previews(&out);
    assert!(shown[0].contains("open-fds=[]"), "{shown:?}");
    assert!(shown[0].contains("proc-fds=[]"), "{shown:?}");
    assert!(shown[0].contains("pidfd-getfd=[]"), "{shown:?}");
    assert!(shown[0].contains("answer=b'HTTP/1.1 40"), "{shown:?}");
    assert!(shown[0].contains("socks=b'\\x05\\x02'"), "{shown:?}");
    let egress = of_type(&out.events, "egress");
    assert_eq!(egress.len(), 3, "{egress:#?}");
    for e in &egress {
        assert_eq!(e["decision"], "denied", "{e}");
        let host = e["host"].as_str().unwrap();
        assert!(host.chars().count() <= 301, "{}", host.len());
        assert!(!host.chars().any(|c| c.is_control()), "{host:?}");
        let summary = e["summary"].as_str().unwrap();
        assert!(summary.starts_with("denied "), "{summary}");
        assert!(!summary.chars().any(|c| c.is_control()), "{summary:?}");
    }
    // The escape-laden name was read and is on record, made visible rather than obeyed.
    assert!(
        egress
            .iter()
            .any(|e| e["host"].as_str().unwrap().contains("pwned")),
        "{egress:#?}"
    );
    // The terminal view of the run and of the record carry no control character either.
    let id = run_id(&out);
    let show = env.output(&["runs", "show", &id.0.to_string()]);
    assert_eq!(show.code, Some(0), "{}", show.stderr);
    assert!(
        !show.stdout.contains('\u{1b}') && !show.stdout.contains('\u{7}'),
        "{:?}",
        show.stdout
    );
    assert!(
        !show
            .stdout
            .lines()
            .any(|l| l.trim_start().starts_with("allowed http_connect evil")),
        "a forged line: {}",
        show.stdout
    );
}

#[test]
fn for_a_run_a_project_only_narrows_and_an_untrusted_workspace_gets_no_network() {
    require_tier_b();
    let env = Env::new();
    let p = env.port();
    env.settings(json!({"network_allow": [env.local(), "pypi.org"]}));
    env.project_settings(json!({"sandbox": {"network_allow": ["pypi.org", "evil.example"]}}));
    let fetch = format!(
        "export NO_PROXY= no_proxy=; test -n \"$HTTP_PROXY\" || {{ echo no-proxy-env; exit 0; }}; \
         curl -s -o /dev/null -w 'code=%{{http_code}}\\n' http://127.0.0.1:{p}/index.txt"
    );
    // Untrusted: the settings give no network at all, with the warning (stderr, also in --json).
    let out = env.run_bash(&[&fetch], &[]);
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(
        previews(&out)[0].contains("no-proxy-env"),
        "{:?}",
        previews(&out)
    );
    assert!(of_type(&out.events, "egress").is_empty());

    // Trusted: the project narrows the user's list to pypi.org; its own host is ignored.
    let trust = env.output(&["trust"]);
    assert_eq!(trust.code, Some(0), "{}\n{}", trust.stdout, trust.stderr);
    let out = env.run_bash(&[&fetch], &[]);
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(
        previews(&out)[0].contains("code=403"),
        "{:?}",
        previews(&out)
    );
    let egress = of_type(&out.events, "egress");
    assert_eq!(egress.len(), 1, "{egress:#?}");
    assert_eq!(egress[0]["reason"], "ip_literal");
    assert_eq!(stored_egress(&env, run_id(&out)).len(), 1);
}

#[test]
fn a_run_in_tier_a_with_a_settings_list_fails_closed() {
    let env = Env::new();
    env.settings(json!({"network_allow": [env.local()]}));
    let out = env.run_bash(&["echo RAN"], &["--isolation", "tier-a"]);
    assert_eq!(out.code, Some(3), "{}\n{}", out.stdout, out.stderr);
    assert!(!out.stdout.contains("RAN"));
    assert!(out.stderr.contains("tier B"), "{}", out.stderr);
}

#[test]
fn the_live_view_shows_each_record_on_one_line_without_control_characters() {
    require_tier_b();
    let env = Env::new();
    env.settings(json!({}));
    let script = format!("/usr/bin/python3 - <<'EOF'\n{REACH_CONTROL}\nEOF");
    let out = env.run_bash_plain(&[&script], &["--network-allow", &env.local()]);
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    let lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("⇄ egress: "))
        .collect();
    assert_eq!(lines.len(), 3, "{}", out.stderr);
    assert!(
        lines.iter().all(|l| l.contains("⇄ egress: denied ")),
        "{lines:?}"
    );
    // The SOCKS5 name is shown, every control character in it made visible.
    assert!(
        lines
            .iter()
            .any(|l| l.contains("denied socks5 ") && l.contains("pwned")),
        "{lines:?}"
    );
    assert!(
        !out.stderr.contains('\u{1b}') && !out.stderr.contains('\u{7}'),
        "{:?}",
        out.stderr
    );
    // The forged text stays inside the one record line: no line of its own.
    assert!(
        !out.stderr
            .lines()
            .any(|l| l.trim_start().starts_with("allowed http_connect evil")),
        "{}",
        out.stderr
    );
}

/// A command that opens connections as fast as it can: each is refused, and each must be on
/// record. The broker's records reach the supervisor as events on its channel; the channel used
/// to drop events its receiver had no room for. Here the supervisor drains them fast enough that
/// this test passed on that code too: the channel's own tests (`ipc/tests/channel.rs`, the
/// backpressure burst) are the ones that catch a lossy reader. This one holds the whole path.
const BURST: usize = 600;
const FLOOD: &str = r#"
import os, socket
port = int(os.environ['HTTP_PROXY'].rsplit(':', 1)[1])
answered = 0
for i in range(BURST):
    s = socket.create_connection(('127.0.0.1', port))
    s.sendall(b'CONNECT burst-%d.example:443 HTTP/1.1\r\n\r\n' % i)
    answered += s.recv(12).startswith(b'HTTP/1.1 40')
    s.close()
print('answered=%d' % answered)
"#;

#[test]
fn a_burst_of_connections_leaves_one_record_each() {
    require_tier_b();
    let env = Env::new();
    env.settings(json!({}));
    let script = format!("/usr/bin/python3 - <<'EOF'\nBURST = {BURST}\n{FLOOD}\nEOF");
    let out = env.run_bash(&[&script], &["--network-allow", &env.local()]);
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(
        previews(&out)[0].contains(&format!("answered={BURST}")),
        "{:?}",
        previews(&out)
    );
    let stored = stored_egress(&env, run_id(&out));
    let mut hosts: Vec<String> = stored
        .iter()
        .filter(|e| e["decision"] == "denied")
        .filter_map(|e| e["host"].as_str().map(str::to_string))
        .collect();
    hosts.sort();
    hosts.dedup();
    assert_eq!(hosts.len(), BURST, "{} records stored", stored.len());
    // The live stream carries each one too.
    assert_eq!(of_type(&out.events, "egress").len(), stored.len());
}

/// More connections held open at once than the proxy serves (`max_tunnels`, 256, served; as many
/// again refused with an answer; beyond that closed unread): each one still leaves a record.
const HELD: usize = 600;
const HOLD_OPEN: &str = r#"
import os, socket
port = int(os.environ['HTTP_PROXY'].rsplit(':', 1)[1])
socks = []
for i in range(HELD):
    s = socket.create_connection(('127.0.0.1', port))
    s.sendall(b'CONNECT held-%d.example:443 HTTP/1.1\r\n\r\n' % i)
    socks.append(s)
answered = reset = 0
for s in socks:
    try:
        answered += s.recv(12).startswith(b'HTTP/1.1 4')
    except ConnectionResetError:
        reset += 1
print('answered=%d reset=%d' % (answered, reset))
"#;

#[test]
fn connections_beyond_the_proxy_s_capacity_are_each_recorded() {
    require_tier_b();
    let env = Env::new();
    env.settings(json!({}));
    let script = format!("/usr/bin/python3 - <<'EOF'\nHELD = {HELD}\n{HOLD_OPEN}\nEOF");
    let out = env.run_bash(&[&script], &["--network-allow", &env.local()]);
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    let shown = previews(&out);
    let stored = stored_egress(&env, run_id(&out));
    assert_eq!(stored.len(), HELD, "{shown:?}");
    assert!(
        stored.iter().all(|e| e["decision"] == "denied"),
        "{stored:?}"
    );
    let unread = stored
        .iter()
        .filter(|e| e.to_string().contains("closed unread"))
        .count();
    // Only a connection closed unread can be reset; one closed before its request arrived ends
    // cleanly instead, so resets are at most the `closed unread` records (a CI run: 87 of 88).
    let reset: usize = shown[0]
        .split("reset=")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no reset count in {shown:?}"));
    assert!(
        reset <= unread,
        "{reset} resets but {unread} closed unread: {shown:?}"
    );
}
