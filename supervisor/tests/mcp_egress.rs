//! Network for MCP stdio servers, end to end through the real binary: `hanzo-dev run --replay`
//! whose model (a cassette in Anthropic's wire format) calls the tools of a real stdio server
//! (`fixtures/mcp/net_server.py`) running sandboxed in the mcp worker's tier-B namespace; its
//! connections reach a real HTTP server on the host's loopback only through the mcp worker's
//! forwarder and the broker's proxy, under the server's own allow-list, and every attempt is in
//! the run's events and record with the server's name.

use hanzo_model::script::{anthropic_cassette, ScriptTurn};
use hanzo_store::{RunId, RunStore};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const EXE: &str = env!("CARGO_BIN_EXE_hanzo-dev");

/// A Python HTTP server on the host's `127.0.0.1`, serving `index.txt`.
struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(dir: &Path) -> Server {
    std::fs::write(dir.join("index.txt"), "hello-mcp-egress\n").expect("index");
    let script = "import functools, http.server, sys\n\
        h = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])\n\
        s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), h)\n\
        print(s.server_address[1], flush=True)\n\
        s.serve_forever()\n";
    let mut child = Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(script)
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 (run ./scripts/setup.sh)");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the server's port");
    let port = line.trim().parse().expect("a port");
    Server { child, port }
}

struct Env {
    root: tempfile::TempDir,
    server: Server,
}

struct Out {
    code: Option<i32>,
    events: Vec<Value>,
    stdout: String,
    stderr: String,
}

impl Env {
    fn new() -> Env {
        let root = tempfile::tempdir().expect("tempdir");
        for d in ["home", "data", "config/hanzo", "ws", "tmp", "www"] {
            std::fs::create_dir_all(root.path().join(d)).expect("mkdir");
        }
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp/net_server.py"),
            root.path().join("ws/net_server.py"),
        )
        .expect("fixture");
        let server = serve(&root.path().join("www"));
        Env { root, server }
    }
    fn path(&self, p: &str) -> PathBuf {
        self.root.path().join(p)
    }
    fn local(&self) -> String {
        format!("127.0.0.1:{}", self.server.port)
    }
    fn url(&self) -> String {
        format!("http://{}/index.txt", self.local())
    }
    fn script(&self) -> String {
        self.path("ws/net_server.py").display().to_string()
    }
    /// User settings: every MCP tool allowed, `sandbox.network_allow` as given, and the servers:
    /// `net` with `net_allow` (when `Some`), `quiet` without network.
    fn settings(&self, network_allow: &[String], net_allow: Option<Vec<String>>) {
        let mut net = json!({"command": "/usr/bin/python3", "args": [self.script()]});
        if let Some(list) = net_allow {
            net["network_allow"] = json!(list);
        }
        let v = json!({
            "permissions": {"mcp__*": "allow"},
            "sandbox": {"network_allow": network_allow},
            "mcp_servers": {
                "net": net,
                "quiet": {"command": "/usr/bin/python3", "args": [self.script()]},
            },
        });
        std::fs::write(self.path("config/hanzo/settings.json"), v.to_string()).expect("settings");
    }
    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(EXE);
        c.args(args)
            .current_dir(self.path("ws"))
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.path("home"))
            .env("XDG_DATA_HOME", self.path("data"))
            .env("XDG_CONFIG_HOME", self.path("config"))
            .env("TMPDIR", self.path("tmp"))
            .stdin(Stdio::null());
        c
    }
    fn output(&self, args: &[&str]) -> Out {
        let out = self.command(args).output().expect("hanzo-dev");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        Out {
            code: out.status.code(),
            events: stdout
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect(),
            stdout,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
    /// `run --json` of a model that makes these MCP calls (`(id, tool, arguments)`, one turn).
    fn run(&self, calls: &[(&str, &str, Value)], extra: &[&str]) -> Out {
        let (id, tool, args) = &calls[0];
        let mut turn = ScriptTurn::tool(id, tool, args.clone());
        for (id, tool, args) in &calls[1..] {
            turn = turn.and_tool(id, tool, args.clone());
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
            "--json",
            "--replay",
            &cassette,
            "--max-tool-calls-per-turn",
            "20",
        ];
        args.extend_from_slice(extra);
        args.push("use the network");
        self.output(&args)
    }
    fn store(&self) -> RunStore {
        RunStore::open(&self.path("data/hanzo"), "local").expect("store")
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

/// What the model was shown for the call `id`.
fn shown(out: &Out, id: &str) -> String {
    out.events
        .iter()
        .find(|e| e["type"] == "tool_result" && e["id"] == id)
        .unwrap_or_else(|| panic!("no result for {id}: {}\n{}", out.stdout, out.stderr))["preview"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn stored_egress(env: &Env, out: &Out) -> Vec<Value> {
    let started = of_type(&out.events, "run_started");
    let id = RunId(started[0]["run_id"].as_i64().expect("run_id"));
    env.store()
        .load_run(id)
        .expect("run")
        .events
        .into_iter()
        .filter(|e| e.kind == "egress")
        .map(|e| e.data)
        .collect()
}

#[test]
fn a_stdio_server_reaches_only_its_allowed_hosts_through_the_broker_and_each_attempt_is_recorded() {
    require_tier_b();
    let env = Env::new();
    let local = env.local();
    // `not-listed.example` is the server's own wish; the user's list does not allow it.
    env.settings(
        std::slice::from_ref(&local),
        Some(vec![local.clone(), "not-listed.example".into()]),
    );
    let port = env.server.port;
    let out = env.run(
        &[
            ("t1", "mcp__net__fetch", json!({"url": env.url()})),
            (
                "t2",
                "mcp__net__tunnel",
                json!({"host": "127.0.0.1", "port": port, "path": "/index.txt"}),
            ),
            (
                "t3",
                "mcp__net__fetch",
                json!({"url": "http://not-listed.example/"}),
            ),
            (
                "t4",
                "mcp__net__connect",
                json!({"host": "127.0.0.1", "port": port}),
            ),
            ("t5", "mcp__net__proxy_env", json!({})),
            (
                "t6",
                "mcp__net__fetch_via",
                json!({"url": env.url(), "proxy_host": "127.0.0.1"}),
            ),
            (
                "t7",
                "mcp__quiet__connect",
                json!({"host": "127.0.0.1", "port": port}),
            ),
            ("t8", "mcp__quiet__proxy_env", json!({})),
        ],
        &[],
    );
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    // The dropped entry is named in a warning.
    assert!(
        out.stderr.contains("\"not-listed.example\" is ignored"),
        "{}",
        out.stderr
    );
    // Allowed: plain HTTP forwarded, and a CONNECT tunnel.
    assert!(
        shown(&out, "t1").contains("status=200 body=hello-mcp-egress"),
        "{}\n{}",
        shown(&out, "t1"),
        out.stderr
    );
    assert!(
        shown(&out, "t2").contains("tunnel hello-mcp-egress"),
        "{}",
        shown(&out, "t2")
    );
    // Denied by the broker: not on the server's list.
    assert!(
        shown(&out, "t3").contains("status=403"),
        "{}",
        shown(&out, "t3")
    );
    // A direct connection to the host's 127.0.0.1 reaches nothing: the namespace's loopback is
    // not the host's.
    let direct = shown(&out, "t4");
    assert!(
        direct.contains("refused") && !direct.contains("hello-mcp-egress"),
        "{direct}"
    );
    // Its proxy is its own address, not the namespace's 127.0.0.1.
    let vars: Value = serde_json::from_str(
        shown(&out, "t5")
            .trim_start_matches("ok: ")
            .trim_start_matches(|c| c != '{'),
    )
    .unwrap_or_else(|e| panic!("{e}: {}", shown(&out, "t5")));
    let proxy = vars["HTTPS_PROXY"].as_str().expect("HTTPS_PROXY");
    assert!(proxy.starts_with("http://127.0.0.2:"), "{vars}");
    assert_eq!(vars["ALL_PROXY"], proxy.replace("http://", "socks5h://"));
    assert_eq!(vars["NO_PROXY"], "localhost,127.0.0.1,::1");
    // The forwarder's port at an address that is no server's: refused by the broker.
    assert!(
        shown(&out, "t6").contains("status=403"),
        "{}",
        shown(&out, "t6")
    );
    // A server without network: no socket at all, and no proxy variables.
    let quiet = shown(&out, "t7");
    assert!(
        quiet.contains("refused") && quiet.contains("PermissionError"),
        "{quiet}"
    );
    assert!(shown(&out, "t8").contains("\"HTTPS_PROXY\": null"));

    // Every attempt that reached the proxy is an egress event of the run, with the server's name,
    // before `run_finished`; the direct ones never reached it.
    // (The one made to no server's address is not attributed to any.)
    let egress = of_type(&out.events, "egress");
    assert_eq!(egress.len(), 4, "{egress:#?}\n{}", out.stderr);
    let named = egress.iter().filter(|e| e["server"] == "net").count();
    assert_eq!(named, 3, "{egress:#?}");
    let find = |decision: &str, protocol: &str| {
        egress
            .iter()
            .find(|e| e["decision"] == decision && e["protocol"] == protocol)
            .copied()
    };
    let forward = find("allowed", "http_forward").expect("the forwarded GET");
    assert_eq!(forward["host"], "127.0.0.1");
    assert_eq!(forward["rule"], local.as_str());
    assert!(forward["bytes_down"].as_u64().unwrap() > 0, "{forward}");
    let tunnel = find("allowed", "http_connect").expect("the tunnel");
    assert_eq!(tunnel["port"], port);
    let not_listed = egress
        .iter()
        .find(|e| e["host"] == "not-listed.example")
        .expect("the unlisted host");
    assert_eq!(not_listed["decision"], "denied");
    assert_eq!(not_listed["reason"], "not_listed");
    let elsewhere = egress
        .iter()
        .find(|e| {
            e["decision"] == "denied"
                && e["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("no MCP server's proxy address"))
        })
        .expect("the connection made to another address");
    assert_eq!(elsewhere["reason"], "not_listed");
    assert!(elsewhere.get("server").is_none(), "{elsewhere}");
    assert!(not_listed["summary"]
        .as_str()
        .unwrap()
        .contains("for MCP server net"));
    assert!(
        not_listed["detail"]
            .as_str()
            .unwrap()
            .contains("mcp_servers.net.network_allow"),
        "{not_listed}"
    );
    assert_eq!(out.events.last().unwrap()["type"], "run_finished");
    // And in the run's record.
    let stored = stored_egress(&env, &out);
    assert_eq!(stored.len(), 4, "{stored:#?}");
    assert_eq!(stored.iter().filter(|e| e["server"] == "net").count(), 3);
}

#[test]
fn a_workspace_file_cannot_give_a_server_a_host_and_an_untrusted_one_gives_it_no_network() {
    require_tier_b();
    let env = Env::new();
    let local = env.local();
    env.settings(std::slice::from_ref(&local), Some(vec![local.clone()]));
    // The project replaces the server's list with one that adds a host. (A file that only
    // narrows a server's list needs no trust: it cannot widen anything.)
    let project = env.path("ws/.hanzo");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(
        project.join("settings.json"),
        json!({
            "mcp_servers": {"net": {"network_allow": ["evil.example", local]}},
            // A sandbox list makes the file need trust (it narrows the user's to the same host).
            "sandbox": {"network_allow": [local]},
        })
        .to_string(),
    )
    .unwrap();
    let calls = [
        (
            "t1",
            "mcp__net__fetch",
            json!({"url": "http://evil.example/"}),
        ),
        ("t2", "mcp__net__fetch", json!({"url": env.url()})),
        ("t3", "mcp__quiet__proxy_env", json!({})),
    ];
    // Untrusted: the settings give no network; the server is not started, with the reason, and
    // the run goes on with the other.
    let out = env.run(&calls, &[]);
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("MCP server \"net\" did not start")
            && out.stderr.contains("sandbox.network_allow also allows"),
        "{}",
        out.stderr
    );
    assert!(shown(&out, "t3").contains("HTTPS_PROXY"));
    assert!(of_type(&out.events, "egress").is_empty());

    // Trusted: the project's host is dropped (warned), the user's stays.
    let trust = env.output(&["trust"]);
    assert_eq!(trust.code, Some(0), "{}\n{}", trust.stdout, trust.stderr);
    let out = env.run(&calls, &[]);
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("\"evil.example\" is ignored"),
        "{}",
        out.stderr
    );
    assert!(
        shown(&out, "t1").contains("status=403"),
        "{}",
        shown(&out, "t1")
    );
    assert!(
        shown(&out, "t2").contains("body=hello-mcp-egress"),
        "{}",
        shown(&out, "t2")
    );
    let egress = of_type(&out.events, "egress");
    let evil = egress
        .iter()
        .find(|e| e["host"] == "evil.example")
        .unwrap_or_else(|| panic!("{egress:#?}"));
    assert_eq!(evil["reason"], "not_listed");
    assert_eq!(evil["server"], "net");
}

#[test]
fn in_tier_a_a_server_that_asks_for_network_fails_closed_and_the_run_goes_on() {
    let env = Env::new();
    let local = env.local();
    // No `sandbox.network_allow`: commands get no network, so the run itself may be in tier A.
    env.settings(&[], Some(vec![local]));
    let out = env.run(
        &[
            ("t1", "mcp__net__fetch", json!({"url": env.url()})),
            ("t2", "mcp__quiet__proxy_env", json!({})),
        ],
        &["--isolation", "tier-a"],
    );
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("MCP server \"net\" did not start") && out.stderr.contains("tier A"),
        "{}",
        out.stderr
    );
    let t1 = shown(&out, "t1");
    assert!(!t1.contains("hello-mcp-egress"), "{t1}");
    assert!(shown(&out, "t2").contains("HTTPS_PROXY"));
    assert!(of_type(&out.events, "egress").is_empty());
}
