//! Remote (streamable-HTTP) MCP servers through the real binary: the mcp worker has no socket,
//! so every exchange goes over the mcp ↔ broker direct channel, and the broker decides what may
//! be reached and adds the token. Against the real `server-everything` (npm, `test-deps/mcp`) in
//! its streamable-HTTP mode, and a hostile local server (`fixtures/mcp/remote_server.py`) that
//! echoes the token, redirects, and floods.

mod common;

use common::env::TestHome;
use common::servers::repo_root;
use hanzo_dev::tree::Supervisor;
use hanzo_ipc::roles::broker;
use hanzo_ipc::roles::mcp::{
    McpConfig, McpServerConfig, McpServerState, McpServerStatus, McpTransport, Request, Response,
};
use hanzo_ipc::roles::mcphttp::{McpLogin, McpRemote};
use hanzo_ipc::Role;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// The token stored for the hostile server: it must reach the server and nothing else.
const TOKEN: &str = "mcp-token-canary-9c41e7d2b8";

/// A private user with a directory `srv` for the servers' files.
fn new_home() -> TestHome {
    let home = TestHome::new();
    std::fs::create_dir_all(home.path("srv")).expect("mkdir");
    home
}

/// `credentials.json` holding `TOKEN` for MCP server `server`, mode 0600 from creation.
fn token_for(home: &TestHome, server: &str) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(home.path("config/hanzo/credentials.json"))
        .unwrap();
    let doc = json!({ format!("mcp:{server}"): {"access_token": TOKEN} });
    f.write_all(doc.to_string().as_bytes()).unwrap();
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A child process killed on drop.
struct Server {
    child: Child,
    url: String,
    seen: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Every request the server saw: (method, authorization).
    fn seen(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.seen)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("seen line"))
            .collect()
    }
}

/// Wait (bounded) for a file the server writes once it listens.
fn wait_for_file(path: &Path) -> String {
    for _ in 0..600 {
        if let Ok(s) = std::fs::read_to_string(path) {
            return s;
        }
        // Polling with a deadline: the child announces its port only through this file.
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{} never appeared", path.display());
}

/// The hostile fixture server in `dir`, with extra arguments (`redirect=URL`, `host=ADDR`).
fn hostile(dir: &Path, name: &str, extra: &[String]) -> Server {
    let port_file = dir.join(format!("{name}.port"));
    let seen = dir.join(format!("{name}.seen"));
    let child = Command::new("/usr/bin/python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp/remote_server.py"))
        .arg(&port_file)
        .arg(&seen)
        .args(extra)
        .stdin(Stdio::null())
        .spawn()
        .expect("python3");
    let port = wait_for_file(&port_file);
    let host = extra
        .iter()
        .find_map(|a| a.strip_prefix("host="))
        .unwrap_or("127.0.0.1");
    Server {
        child,
        url: format!("http://{host}:{}/mcp", port.trim()),
        seen,
    }
}

/// `server-everything` in streamable-HTTP mode on 127.0.0.1 (Node 22 from `test-deps/mcp`).
fn everything() -> Server {
    let nm = repo_root().join("test-deps/mcp/node_modules");
    let script = nm.join("@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        script.is_file() && nm.join("node/bin/node").is_file(),
        "the MCP test peers are missing under {}: run ./scripts/setup.sh",
        nm.display()
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let mut child = Command::new(nm.join("node/bin/node"))
        .arg(&script)
        .arg("streamableHttp")
        .env_clear()
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node");
    let stderr = child.stderr.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("listening on port") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("server-everything listens");
    Server {
        child,
        url: format!("http://127.0.0.1:{port}/mcp"),
        seen: PathBuf::new(),
    }
}

/// A private user whose settings name the hostile server as `name` (its URL, every call
/// allowed), with `TOKEN` stored for it.
fn with_hostile(name: &str) -> (TestHome, Server) {
    let home = new_home();
    let server = hostile(&home.path("srv"), name, &[]);
    token_for(&home, name);
    home.settings(json!({
        "mcp_servers": {name: {"url": server.url}},
        "permissions": {format!("mcp__{name}__*"): "allow"},
    }));
    (home, server)
}

fn json_of(stdout: &str) -> Value {
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// `hanzo-dev mcp tools` and `mcp call` reach a real streamable-HTTP server through the broker,
/// and a `run --replay` whose model calls its tool records the call and its classification.
#[test]
fn a_remote_server_is_listed_called_and_used_in_a_run() {
    let server = everything();
    let home = new_home();
    home.settings(json!({
        "mcp_servers": {"everything": {"url": server.url}},
        "permissions": {"mcp__everything__*": "allow"},
    }));
    let out = home.output(&["mcp", "list", "--json"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let doc = json_of(&stdout);
    let s = &doc["servers"][0];
    assert_eq!(s["name"], "everything", "{doc}");
    assert_eq!(s["transport"], "http");
    assert_eq!(s["state"], "ready", "{doc}");

    let out = home.output(&["mcp", "tools", "everything", "--json"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains("mcp__everything__get-sum"), "{stdout}");

    let out = home.output(&[
        "mcp",
        "call",
        "everything",
        "get-sum",
        "--args",
        r#"{"a": 2, "b": 40}"#,
        "--json",
    ]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let doc = json_of(&stdout);
    assert_eq!(doc["classification"], "allowed");
    assert!(doc["result"].to_string().contains("42"), "{doc}");

    use hanzo_model::script::{anthropic_cassette, ScriptTurn};
    let cassette = home.path("model.jsonl");
    std::fs::write(
        &cassette,
        anthropic_cassette(&[
            ScriptTurn::tool("t1", "mcp__everything__get-sum", json!({"a": 20, "b": 22})),
            ScriptTurn::text("done"),
        ]),
    )
    .unwrap();
    let out = home.output(&[
        "run",
        "--json",
        "--replay",
        cassette.to_str().unwrap(),
        "add",
    ]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{stdout}");
    let events: Vec<Value> = stdout.lines().map(json_of).collect();
    let result = events
        .iter()
        .find(|e| e["type"] == "tool_result" && e["id"] == "t1")
        .unwrap_or_else(|| panic!("no result: {events:#?}"));
    assert_eq!(result["is_error"], false, "{result}");
    assert!(
        result["preview"].as_str().unwrap().contains("42"),
        "{result}"
    );
    let store = hanzo_store::RunStore::open(&home.path("data/hanzo"), "local").expect("store");
    let started = events.iter().find(|e| e["type"] == "run_started").unwrap();
    let rec = store
        .load_run(hanzo_store::RunId(started["run_id"].as_i64().unwrap()))
        .expect("run record");
    let call = rec
        .steps
        .iter()
        .flat_map(|s| &s.tool_calls)
        .find(|c| c.call.name == "mcp__everything__get-sum")
        .expect("the call is recorded");
    assert!(call.call.allowed);
    assert_eq!(
        call.call.rule.as_ref().unwrap().pattern,
        "mcp__everything__*"
    );
}

/// The broker adds the stored token (the server sees it), and a server that echoes it back — in
/// a response header, a JSON body, an event stream split mid-token — gets `[redacted]` through
/// to the worker: the token is in no output, no log line and no run record. A 16 MB answer ends
/// that call with a typed outcome, and the next call of the run works.
#[test]
fn the_token_reaches_the_server_only_and_a_flood_ends_one_call() {
    let (home, server) = with_hostile("hostile");
    for tool in ["echo_auth", "echo_sse"] {
        let out = home.output(&["mcp", "call", "hostile", tool, "--json"]);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let doc = json_of(&stdout);
        assert_eq!(doc["classification"], "allowed", "{doc}");
        let answer = doc["result"]["content"][0]["text"].as_str().unwrap();
        assert_eq!(answer, "you sent: Bearer [redacted]", "{tool}");
        assert!(!stdout.contains(TOKEN) && !stderr.contains(TOKEN), "{tool}");
    }
    let seen = server.seen();
    assert!(!seen.is_empty());
    assert!(
        seen.iter()
            .all(|r| r["authorization"] == format!("Bearer {TOKEN}")),
        "every request carried the token: {seen:?}"
    );

    use hanzo_model::script::{anthropic_cassette, ScriptTurn};
    let cassette = home.path("model.jsonl");
    std::fs::write(
        &cassette,
        anthropic_cassette(&[
            ScriptTurn::tool("t1", "mcp__hostile__huge", json!({})).and_tool(
                "t2",
                "mcp__hostile__echo_auth",
                json!({}),
            ),
            ScriptTurn::text("done"),
        ]),
    )
    .unwrap();
    let out = home.output(&[
        "-vv",
        "run",
        "--json",
        "--replay",
        cassette.to_str().unwrap(),
        "show me your token",
    ]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{stdout}");
    assert!(!stdout.contains(TOKEN) && !stderr.contains(TOKEN));
    let events: Vec<Value> = stdout.lines().map(json_of).collect();
    let result = |id: &str| {
        events
            .iter()
            .find(|e| e["type"] == "tool_result" && e["id"] == id)
            .unwrap_or_else(|| panic!("no result for {id}: {events:#?}"))
            .clone()
    };
    assert_eq!(
        result("t1")["is_error"],
        true,
        "the flood is an error: {}",
        result("t1")
    );
    assert_eq!(
        result("t2")["is_error"],
        false,
        "the next call works: {}",
        result("t2")
    );
    assert!(result("t2")["preview"]
        .as_str()
        .unwrap()
        .contains("[redacted]"));
    let store = hanzo_store::RunStore::open(&home.path("data/hanzo"), "local").expect("store");
    let started = events.iter().find(|e| e["type"] == "run_started").unwrap();
    let rec = store
        .load_run(hanzo_store::RunId(started["run_id"].as_i64().unwrap()))
        .expect("run record");
    assert!(
        !format!("{rec:?}").contains(TOKEN),
        "the token reached the record"
    );
    let huge = rec
        .steps
        .iter()
        .flat_map(|s| &s.tool_calls)
        .find(|c| c.call.name == "mcp__hostile__huge")
        .expect("recorded");
    let err = huge.call.error.as_deref().unwrap_or_default();
    assert!(err.contains("MCP"), "{err}");
    // No file the run wrote but credentials.json holds the token.
    for dir in ["data", "tmp", "ws", "home"] {
        assert!(
            !tree_contains(&home.path(dir), TOKEN.as_bytes()),
            "{dir} holds the token"
        );
    }
}

fn tree_contains(dir: &Path, needle: &[u8]) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|e| {
        let path = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() => tree_contains(&path, needle),
            Ok(t) if t.is_file() => std::fs::read(&path)
                .map(|b| b.windows(needle.len()).any(|w| w == needle))
                .unwrap_or(false),
            _ => false,
        }
    })
}

/// A server that redirects to another host is not followed: the other host sees nothing, and the
/// server fails to start with the redirect named as the reason.
#[test]
fn a_redirect_to_another_host_is_not_followed() {
    let home = new_home();
    let elsewhere = hostile(
        &home.path("srv"),
        "elsewhere",
        &["host=127.0.0.2".to_string()],
    );
    let redirecting = hostile(
        &home.path("srv"),
        "redirecting",
        &[format!("redirect={}", elsewhere.url)],
    );
    token_for(&home, "redirecting");
    home.settings(json!({
        "mcp_servers": {"redirecting": {"url": redirecting.url}},
    }));
    let out = home.output(&["mcp", "list", "--json"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let doc = json_of(&stdout);
    let s = &doc["servers"][0];
    assert_ne!(s["state"], "ready", "{doc}");
    assert!(!redirecting.seen().is_empty(), "the server was asked");
    assert!(
        elsewhere.seen().is_empty(),
        "the redirect was followed: {:?}",
        elsewhere.seen()
    );
    assert!(!stdout.contains(TOKEN) && !stderr.contains(TOKEN));
}

fn remote_config(name: &str, url: &str) -> McpServerConfig {
    McpServerConfig {
        name: name.into(),
        transport: McpTransport::Http {
            url: url.into(),
            credential: Some(format!("mcp:{name}")),
        },
        initialize_timeout_ms: 20_000,
        call_timeout_ms: 20_000,
        elicitation_defaults: false,
        max_result_bytes: None,
    }
}

/// The broker reaches only what the supervisor configured: an mcp worker asking for a server the
/// broker was not told about, or for another address under a configured server's name, is
/// refused by the broker, and nothing reaches those addresses.
#[tokio::test]
async fn the_broker_refuses_servers_and_addresses_not_in_the_settings() {
    let dir = tempfile::tempdir().unwrap();
    let listed = hostile(dir.path(), "listed", &[]);
    let unlisted = hostile(dir.path(), "unlisted", &[]);
    let ws = tempfile::tempdir().unwrap();
    let (mut cfg, _run) = common::tree_config(ws.path(), common::path_only());
    cfg.roles = Some(vec![Role::Broker, Role::Mcp]);
    let sup = Supervisor::start(cfg).await.expect("tree");
    tokio::time::timeout(Duration::from_secs(60), sup.wait_ready())
        .await
        .expect("ready in time")
        .expect("attested");
    let allowed = vec![McpRemote {
        server: "web".into(),
        url: listed.url.clone(),
        client_id: None,
        scopes: vec![],
        client_metadata_url: None,
        client_env: None,
        login: McpLogin::Never,
        headers: Vec::new(),
        settings_headers: Vec::new(),
    }];
    let answer = sup
        .broker
        .call(broker::Request::AllowMcpServers(allowed))
        .await
        .expect("configured");
    assert_eq!(answer, broker::Response::Configured { endpoints: 1 });
    // A plain-http URL to a non-loopback host is refused as configuration.
    let refused = sup
        .broker
        .call(broker::Request::AllowMcpServers(vec![McpRemote {
            server: "web".into(),
            url: "http://mcp.example/mcp".into(),
            client_id: None,
            scopes: vec![],
            client_metadata_url: None,
            client_env: None,
            login: McpLogin::Never,
            headers: Vec::new(),
            settings_headers: Vec::new(),
        }]))
        .await;
    assert!(refused.is_err(), "{refused:?}");
    let config = McpConfig {
        servers: vec![
            remote_config("web", &listed.url),
            remote_config("web2", &listed.url),
            remote_config("web_elsewhere", &unlisted.url),
        ],
        roots: vec![ws.path().display().to_string()],
        max_result_bytes: 1 << 20,
        max_message_bytes: 8 << 20,
    };
    let statuses = match sup
        .mcp
        .call_within(Request::Configure(config), Duration::from_secs(60))
        .await
        .expect("configured")
    {
        Response::Servers(s) => s,
        other => panic!("{other:?}"),
    };
    let state = |name: &str| -> McpServerStatus {
        statuses
            .iter()
            .find(|s| s.name == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name}: {statuses:?}"))
    };
    assert_eq!(state("web").state, McpServerState::Ready);
    for name in ["web2", "web_elsewhere"] {
        match state(name).state {
            McpServerState::Failed { reason } => assert!(
                reason.contains("no remote MCP server named"),
                "{name}: {reason}"
            ),
            other => panic!("{name}: {other:?}"),
        }
    }
    assert!(unlisted.seen().is_empty(), "{:?}", unlisted.seen());
    // The same name with another address.
    let config = McpConfig {
        servers: vec![remote_config("web", &unlisted.url)],
        roots: vec![],
        max_result_bytes: 1 << 20,
        max_message_bytes: 8 << 20,
    };
    let statuses = match sup
        .mcp
        .call_within(Request::Configure(config), Duration::from_secs(60))
        .await
        .expect("configured")
    {
        Response::Servers(s) => s,
        other => panic!("{other:?}"),
    };
    match &statuses[0].state {
        McpServerState::Failed { reason } => {
            assert!(reason.contains("not the configured address"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    assert!(unlisted.seen().is_empty(), "{:?}", unlisted.seen());
    sup.shutdown().await;
}

/// The mcp ↔ broker channel survives an mcp worker crash: the restarted worker gets a fresh pair,
/// whose other end the running broker adopts (it is not restarted, and keeps its allow-list), and
/// a remote call works afterwards.
#[tokio::test]
async fn a_restarted_mcp_worker_reaches_the_broker_again() {
    let dir = tempfile::tempdir().unwrap();
    let server = hostile(dir.path(), "server", &[]);
    let ws = tempfile::tempdir().unwrap();
    let (mut cfg, _run) = common::tree_config(ws.path(), common::path_only());
    cfg.roles = Some(vec![Role::Broker, Role::Mcp]);
    let sup = Supervisor::start(cfg).await.expect("tree");
    let config = McpConfig {
        servers: vec![remote_config("web", &server.url)],
        roots: vec![],
        max_result_bytes: 1 << 20,
        max_message_bytes: 8 << 20,
    };
    let configure = || async {
        tokio::time::timeout(Duration::from_secs(60), sup.wait_ready())
            .await
            .expect("ready in time")
            .expect("attested");
        let plan = hanzo_dev::mcp::McpPlan {
            config: config.clone(),
            not_started: vec![],
            network: vec![],
            headers: vec![],
        };
        hanzo_dev::mcp::allow_remotes(&sup, &plan, McpLogin::Never)
            .await
            .expect("allowed");
        match sup
            .mcp
            .call_within(Request::Configure(config.clone()), Duration::from_secs(60))
            .await
            .expect("configured")
        {
            Response::Servers(s) => s[0].state.clone(),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(configure().await, McpServerState::Ready);
    let pid_of = |role: Role| {
        sup.worker_pids()
            .into_iter()
            .find(|(r, _)| *r == role)
            .map(|(_, p)| p)
    };
    let (mcp, broker) = (pid_of(Role::Mcp).unwrap(), pid_of(Role::Broker).unwrap());
    let killed = Command::new("kill")
        .args(["-9", &mcp.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    // Polling with a deadline: the restart happens on the supervising task's own schedule.
    let mut restarted = false;
    for _ in 0..600 {
        if pid_of(Role::Mcp).is_some_and(|m| m != mcp) {
            restarted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(restarted, "the mcp worker was restarted");
    assert_eq!(
        pid_of(Role::Broker),
        Some(broker),
        "the broker was restarted"
    );
    assert_eq!(configure().await, McpServerState::Ready);
    let outcome = sup
        .mcp
        .call(Request::CallTool(hanzo_ipc::roles::mcp::McpToolCall {
            server: "web".into(),
            tool: "echo_auth".into(),
            arguments_json: "{}".into(),
            timeout_ms: None,
        }))
        .await
        .expect("answered");
    assert!(
        matches!(
            outcome,
            Response::Call(hanzo_ipc::roles::mcp::McpCallOutcome::Allowed {
                is_error: false,
                ..
            })
        ),
        "{outcome:?}"
    );
    sup.shutdown().await;
}

/// The value of the secret a `url` server's settings header names: in the broker's environment
/// only (the supervisor hands it there), and it must reach the server and nothing else.
const HEADER_SECRET: &str = "hdr-secret-canary-5e0b97a1c3";

/// A second one, in a variable no secret pattern catches (`CORP_HDR`): naming it in a header
/// makes it a secret.
const PLAIN_NAMED_SECRET: &str = "plain-named-canary-71d0c2";

/// `hanzo-dev ARGS` with `WEB_TOKEN` (a secret by its name) and `CORP_HDR` in its environment.
fn with_secret(home: &TestHome, args: &[&str]) -> Output {
    home.command(args)
        .env("WEB_TOKEN", HEADER_SECRET)
        .env("CORP_HDR", PLAIN_NAMED_SECRET)
        .output()
        .expect("run hanzo-dev")
}

/// `mcp_servers.*.headers` from the user's settings: the broker sends a literal header as
/// written and a `${secret:NAME}` one with the value of its environment variable `NAME`. The
/// server receives both; the secret is in no output (`mcp call`, `mcp list --json`, a `-vv` run),
/// no event, no byte of the store (the SQLite files, WAL included) and no other file the run
/// wrote, and a server echoing it back is answered `[redacted]`.
#[test]
fn settings_headers_reach_the_server_and_a_secret_one_nothing_else() {
    let home = new_home();
    let server = hostile(&home.path("srv"), "hdr", &[]);
    home.settings(json!({
        "mcp_servers": {"hdr": {"url": server.url, "headers": {
            "Authorization": "${secret:WEB_TOKEN}",
            "X-Corp": "${secret:CORP_HDR}",
            "X-Team": "core-team",
        }}},
        "permissions": {"mcp__hdr__*": "allow"},
    }));
    let out = with_secret(&home, &["mcp", "call", "hdr", "echo_auth", "--json"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let doc = json_of(&stdout);
    assert_eq!(doc["classification"], "allowed", "{doc}");
    assert_eq!(
        doc["result"]["content"][0]["text"], "you sent: [redacted]",
        "the server's echo of the secret is scrubbed: {doc}"
    );
    let seen = server.seen();
    assert!(!seen.is_empty());
    for r in &seen {
        assert_eq!(r["authorization"], HEADER_SECRET, "{r}");
        assert_eq!(r["headers"]["x-team"], "core-team", "{r}");
        assert_eq!(r["headers"]["x-corp"], PLAIN_NAMED_SECRET, "{r}");
    }
    assert!(!stdout.contains(HEADER_SECRET) && !stderr.contains(HEADER_SECRET));

    let out = with_secret(&home, &["mcp", "list", "--json"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(json_of(&stdout)["servers"][0]["state"], "ready", "{stdout}");
    assert!(!stdout.contains(HEADER_SECRET) && !stderr.contains(HEADER_SECRET));
    let out = with_secret(&home, &["config", "show", "--json"]);
    let (stdout, _) = text(&out);
    assert!(stdout.contains("${secret:WEB_TOKEN}"), "{stdout}");
    assert!(!stdout.contains(HEADER_SECRET));

    let cassette = home.cassette(
        "model.jsonl",
        &[
            hanzo_model::script::ScriptTurn::tool("t1", "mcp__hdr__echo_auth", json!({})),
            hanzo_model::script::ScriptTurn::text("done"),
        ],
    );
    let out = with_secret(
        &home,
        &[
            "-vv",
            "run",
            "--json",
            "--replay",
            &cassette,
            "show me the header",
        ],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{stdout}");
    assert!(!stdout.contains(HEADER_SECRET), "{stdout}");
    assert!(!stderr.contains(HEADER_SECRET), "the secret in a log line");
    let events: Vec<Value> = stdout.lines().map(json_of).collect();
    let result = events
        .iter()
        .find(|e| e["type"] == "tool_result" && e["id"] == "t1")
        .unwrap_or_else(|| panic!("no result: {events:#?}"));
    assert_eq!(result["is_error"], false, "{result}");
    assert_eq!(
        server.seen().last().unwrap()["authorization"],
        HEADER_SECRET
    );
    let rec = home
        .store()
        .load_run(hanzo_store::RunId(
            events.iter().find(|e| e["type"] == "run_started").unwrap()["run_id"]
                .as_i64()
                .unwrap(),
        ))
        .expect("run record");
    assert!(!format!("{rec:?}").contains(HEADER_SECRET));
    assert!(!stdout.contains(PLAIN_NAMED_SECRET) && !stderr.contains(PLAIN_NAMED_SECRET));
    assert!(!format!("{rec:?}").contains(PLAIN_NAMED_SECRET));
    // The store's files (database, WAL), and whatever else the run wrote.
    for dir in ["data", "tmp", "ws", "home", "config"] {
        for secret in [HEADER_SECRET, PLAIN_NAMED_SECRET] {
            assert!(
                !tree_contains(&home.path(dir), secret.as_bytes()),
                "{dir} holds a secret"
            );
        }
    }
}

/// A secret the broker does not hold fails that server with an error naming the server and the
/// secret (never a value); a bad header name is a settings error naming the key; a project file
/// cannot name a secret (trusted or not: the server is skipped, saying why).
#[test]
fn a_missing_secret_a_bad_header_and_a_project_s_secret_are_clear_errors() {
    let home = new_home();
    let server = hostile(&home.path("srv"), "hdr", &[]);
    home.settings(json!({
        "mcp_servers": {"hdr": {"url": server.url, "headers": {"X-Api-Key": "${secret:MISSING_TOKEN}"}}},
        "permissions": {"mcp__hdr__*": "allow"},
    }));
    let out = with_secret(&home, &["mcp", "list", "--json"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let s = &json_of(&stdout)["servers"][0];
    assert_eq!(s["state"], "failed", "{s}");
    let reason = s["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("\"hdr\"")
            && reason.contains("MISSING_TOKEN")
            && reason.contains("X-Api-Key"),
        "{s}"
    );
    assert!(
        server.seen().is_empty(),
        "nothing was sent: {:?}",
        server.seen()
    );
    let out = with_secret(&home, &["mcp", "call", "hdr", "ok", "--json"]);
    let (stdout, stderr) = text(&out);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        format!("{stdout}{stderr}").contains("MISSING_TOKEN"),
        "{stdout}{stderr}"
    );

    home.settings(json!({
        "mcp_servers": {"hdr": {"url": server.url, "headers": {"Mcp-Session-Id": "x"}}},
    }));
    let out = with_secret(&home, &["mcp", "list", "--json"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("mcp_servers.hdr.headers.Mcp-Session-Id")
            && stderr.contains("settings.json"),
        "{stderr}"
    );

    home.settings(json!({"mcp_servers": {"hdr": {"url": server.url}}}));
    std::fs::create_dir_all(home.ws().join(".hanzo")).unwrap();
    std::fs::write(
        home.ws().join(".hanzo/settings.json"),
        json!({"mcp_servers": {"hdr": {"headers": {"Authorization": "${secret:WEB_TOKEN}"}}}})
            .to_string(),
    )
    .unwrap();
    let out = with_secret(&home, &["mcp", "list", "--json"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let s = &json_of(&stdout)["servers"][0];
    assert_eq!(s["state"], "skipped", "{s}");
    assert!(
        s["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("settings set its `headers`"),
        "{s}"
    );
    assert!(server.seen().is_empty(), "{:?}", server.seen());
    assert!(!stdout.contains(HEADER_SECRET) && !stderr.contains(HEADER_SECRET));
}

/// Each classification case of the HAAP README, answered by a scripted local HTTP server and
/// relayed by the broker (`mcp_http`: status, headers and body streamed back) to the mcp worker,
/// whose client classifies it: the same verdicts as the library's own client sees them directly
/// (`workers/mcp/tests/scripted_http.rs`), so the relay changes no status and no body. Through
/// `hanzo-dev mcp call --json`, then a `run --replay` whose record keeps each classification.
/// Every request carried the stored token (the relay's own additions changed nothing either).
#[test]
fn every_http_classification_case_survives_the_broker_relay() {
    // With a token held, the broker's scrubber runs over every body (a non-UTF-8 or cut one too).
    let (home, server) = with_hostile("cases");
    let cases: [(&str, &str, &str); 13] = [
        ("ok", "allowed", ""),
        ("haap_json", "denied", "-32002"),
        ("haap_sse", "denied", "-32001"),
        ("status_401", "denied", "HTTP 401"),
        ("status_403", "denied", "HTTP 403"),
        ("empty", "denied", "an empty body"),
        ("truncated", "denied", "a truncated body"),
        ("html", "denied", "an HTML body"),
        ("not_utf8", "denied", "not UTF-8"),
        ("missing", "fault", "-32601"),
        ("html_500", "denied", "HTTP 500 with an HTML body"),
        ("sse_cut", "denied", "HTTP 200"),
        // Cut short of its length: the broker's relay reports a body error, read as truncated.
        ("cut", "denied", "a truncated body"),
    ];
    for (tool, classification, needle) in cases {
        let out = home.output(&["mcp", "call", "cases", tool, "--json"]);
        let (stdout, stderr) = text(&out);
        let doc = json_of(&stdout);
        assert_eq!(
            doc["classification"], classification,
            "{tool}: {doc}\n{stderr}"
        );
        let reason = doc["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains(needle),
            "{tool}: {reason:?} lacks {needle:?}"
        );
        let want = if classification == "allowed" { 0 } else { 1 };
        assert_eq!(out.status.code(), Some(want), "{tool}: {stderr}");
    }

    // In a run, each call's record keeps its classification (one call per model turn, so each
    // is judged alone).
    use hanzo_model::script::ScriptTurn;
    let mut turns: Vec<ScriptTurn> = cases
        .iter()
        .enumerate()
        .map(|(i, (tool, ..))| {
            ScriptTurn::tool(&format!("t{i}"), &format!("mcp__cases__{tool}"), json!({}))
        })
        .collect();
    turns.push(ScriptTurn::text("done"));
    let cassette = home.cassette("model.jsonl", &turns);
    let out = home.output(&["run", "--json", "--replay", &cassette, "try each case"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{stdout}");
    let events: Vec<Value> = stdout.lines().map(json_of).collect();
    let run = events.iter().find(|e| e["type"] == "run_started").unwrap()["run_id"]
        .as_i64()
        .unwrap();
    let rec = home
        .store()
        .load_run(hanzo_store::RunId(run))
        .expect("record");
    let calls: Vec<_> = rec.steps.iter().flat_map(|s| &s.tool_calls).collect();
    assert_eq!(calls.len(), cases.len(), "{calls:#?}");
    for (tool, classification, needle) in cases {
        let c = calls
            .iter()
            .find(|c| c.call.name == format!("mcp__cases__{tool}"))
            .unwrap_or_else(|| panic!("no record of {tool}"));
        let m = c
            .mcp
            .as_ref()
            .unwrap_or_else(|| panic!("{tool}: no MCP fields"));
        assert_eq!((m.server.as_str(), m.tool.as_str()), ("cases", tool));
        assert_eq!(m.classification.as_str(), classification, "{tool}: {m:?}");
        assert!(
            m.reason.as_deref().unwrap_or_default().contains(needle),
            "{tool}: {m:?}"
        );
    }
    let seen = server.seen();
    assert!(seen.iter().filter(|r| r["method"] == "POST").count() >= 2 * cases.len());
    assert!(seen
        .iter()
        .all(|r| r["authorization"] == format!("Bearer {TOKEN}")));
    assert!(!stdout.contains(TOKEN) && !stderr.contains(TOKEN));
}

/// The end of a command ends the remote session the way the transport says: the mcp worker's
/// orderly stop sends the server `DELETE` with the session's id (through the broker, which adds
/// the token), after the call and nothing after it. The worker used to be killed, and the session
/// was left to the server's own expiry.
#[test]
fn the_end_of_a_command_ends_the_remote_session_with_delete() {
    let (home, server) = with_hostile("hostile");
    let out = home.output(&["mcp", "call", "hostile", "ok", "--json"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(json_of(&stdout)["classification"], "allowed", "{stdout}");
    let seen = server.seen();
    let methods: Vec<&str> = seen.iter().filter_map(|r| r["method"].as_str()).collect();
    assert_eq!(methods.last(), Some(&"DELETE"), "{seen:#?}");
    let delete = seen.last().expect("a request");
    assert_eq!(delete["headers"]["mcp-session-id"], "s-1", "{delete}");
    assert_eq!(
        delete["authorization"],
        format!("Bearer {TOKEN}"),
        "{delete}"
    );
    assert_eq!(
        methods.iter().filter(|m| **m == "DELETE").count(),
        1,
        "{seen:#?}"
    );
}
