//! `${secret:NAME}` in an MCP stdio server's `env`: the broker gives the value to the mcp worker
//! as it spawns that server, for the (server, name) pairs the supervisor granted from the user's
//! settings, and the value reaches the server and nothing else — not the supervisor's or any
//! other worker's environment or command line, not the store, the events, the `-vv` log or an
//! error — while whatever the server echoes comes back `[redacted]`. Real processes throughout:
//! the `hanzo-dev` binary's broker and mcp workers, and `fixtures/mcp/secret_server.py` run by
//! the system's Python in the server sandbox.

mod common;

use common::env::TestHome;
use common::procs::descendants_with;
use hanzo_dev::tree::Supervisor;
use hanzo_ipc::channel::StreamPart;
use hanzo_ipc::roles::broker::{self, McpSecretGrant};
use hanzo_ipc::roles::mcp::{
    EnvValue, Item, McpCallOutcome, McpConfig, McpFilesystem, McpServerConfig, McpServerProfile,
    McpServerState, McpServerStatus, McpToolCall, McpTransport, Request, Response,
};
use hanzo_ipc::Role;
use hanzo_model::script::ScriptTurn;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The secret the settings give the server.
const CANARY: &str = "mcp-secret-canary-3f9b27c1d8e4";
/// A secret the broker holds that no server is granted.
const OTHER: &str = "other-secret-canary-71aa90c2";

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp/secret_server.py")
}

/// `pid` and all its descendants (the children of every thread: the supervisor spawns its
/// workers from a thread of its own).
fn process_tree(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    let mut i = 0;
    while i < all.len() {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", all[i]));
        for task in tasks.into_iter().flatten().flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            all.extend(
                children
                    .split_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok()),
            );
        }
        i += 1;
    }
    all
}

fn proc_file(pid: u32, what: &str) -> String {
    String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/{what}")).unwrap_or_default())
        .replace('\0', "\n")
}

/// Every process of the tree under `root` but the broker's and the server's: none holds `secret`
/// in its environment or command line. Returns (processes checked, the broker's environ held it).
fn only_the_broker_and_the_server_hold(root: u32, secret: &str) -> (usize, bool) {
    let mut checked = 0;
    let mut broker_holds = false;
    for pid in process_tree(root) {
        let cmdline = proc_file(pid, "cmdline");
        let environ = proc_file(pid, "environ");
        if cmdline.is_empty() {
            continue; // gone meanwhile (a short-lived probe)
        }
        if cmdline.starts_with("hanzo-dev[broker]") {
            broker_holds |= environ.contains(secret);
            continue;
        }
        if cmdline.contains("secret_server.py") {
            continue;
        }
        assert!(
            !environ.contains(secret) && !cmdline.contains(secret),
            "process {pid} ({}) holds the secret",
            cmdline.lines().next().unwrap_or_default()
        );
        checked += 1;
    }
    (checked, broker_holds)
}

/// A tree of the real broker and mcp workers for a workspace holding the fixture, started from
/// an environment that holds `HANZO_TEST_MCP_TOKEN` and `OTHER_SERVICE_TOKEN`.
struct Tree {
    workspace: tempfile::TempDir,
    sup: Supervisor,
    _run: hanzo_dev::startup::RunDir,
}

impl Tree {
    async fn start() -> Tree {
        let _ = tracing_subscriber::fmt()
            .with_env_filter("warn")
            .with_test_writer()
            .try_init();
        let workspace = tempfile::tempdir().expect("workspace");
        std::fs::copy(fixture(), workspace.path().join("secret_server.py")).expect("copy");
        let mut vars = common::path_only();
        vars.push(("HANZO_TEST_MCP_TOKEN".into(), CANARY.into()));
        vars.push(("OTHER_SERVICE_TOKEN".into(), OTHER.into()));
        let (mut cfg, run) = common::tree_config(workspace.path(), vars);
        cfg.roles = Some(vec![Role::Broker, Role::Mcp]);
        let sup = Supervisor::start(cfg).await.expect("supervisor starts");
        tokio::time::timeout(Duration::from_secs(60), sup.wait_ready())
            .await
            .expect("workers ready in time")
            .expect("workers attested");
        Tree {
            workspace,
            sup,
            _run: run,
        }
    }

    /// The fixture as server `name`, its `SERVICE_TOKEN` naming the secret `secret`.
    fn server(&self, name: &str, secret: &str) -> McpServerConfig {
        McpServerConfig {
            name: name.into(),
            transport: McpTransport::Stdio {
                command: "/usr/bin/python3".into(),
                args: vec![self
                    .workspace
                    .path()
                    .join("secret_server.py")
                    .display()
                    .to_string()],
                env: vec![
                    ("LANG".into(), EnvValue::Plain("C.UTF-8".into())),
                    ("SERVICE_TOKEN".into(), EnvValue::Secret(secret.into())),
                ],
                cwd: None,
                profile: McpServerProfile {
                    filesystem: McpFilesystem::WorkspaceRo,
                    extra_read: Vec::new(),
                    network: false,
                    egress_address: None,
                },
            },
            initialize_timeout_ms: 30_000,
            call_timeout_ms: 30_000,
            elicitation_defaults: false,
            max_result_bytes: None,
        }
    }

    async fn grant(&self, grants: &[(&str, &[&str])]) -> u32 {
        let grants = grants
            .iter()
            .map(|(server, names)| McpSecretGrant {
                server: server.to_string(),
                names: names.iter().map(|n| n.to_string()).collect(),
            })
            .collect();
        match self
            .sup
            .broker
            .call(broker::Request::AllowMcpSecrets(grants))
            .await
        {
            Ok(broker::Response::Configured { endpoints }) => endpoints,
            other => panic!("AllowMcpSecrets: {other:?}"),
        }
    }

    async fn configure(&self, servers: Vec<McpServerConfig>) -> Vec<McpServerStatus> {
        let req = Request::Configure(McpConfig {
            servers,
            roots: vec![self.workspace.path().display().to_string()],
            max_result_bytes: 64 * 1024,
            max_message_bytes: 8 << 20,
        });
        match self.sup.mcp.call_within(req, Duration::from_secs(90)).await {
            Ok(Response::Servers(s)) => s,
            other => panic!("configure: {other:?}"),
        }
    }

    /// A call, with the progress messages it streamed.
    async fn call(&self, server: &str, tool: &str) -> (McpCallOutcome, Vec<String>) {
        let mut stream = self
            .sup
            .mcp
            .call_stream(Request::CallTool(McpToolCall {
                server: server.into(),
                tool: tool.into(),
                arguments_json: "{}".into(),
                timeout_ms: None,
            }))
            .await
            .expect("call sent");
        let mut progress = Vec::new();
        loop {
            match tokio::time::timeout(Duration::from_secs(60), stream.next())
                .await
                .expect("the call ends in time")
            {
                Some(Ok(StreamPart::Item(Item::Progress { message, .. }))) => {
                    progress.push(message.unwrap_or_default())
                }
                Some(Ok(StreamPart::Item(other))) => panic!("unexpected item {other:?}"),
                Some(Ok(StreamPart::Done(Response::Call(o)))) => return (o, progress),
                other => panic!("call {tool}: {other:?}"),
            }
        }
    }

    async fn statuses(&self) -> Vec<McpServerStatus> {
        match self.sup.mcp.call(Request::ListServers).await {
            Ok(Response::Servers(s)) => s,
            other => panic!("list servers: {other:?}"),
        }
    }
}

fn state<'a>(statuses: &'a [McpServerStatus], name: &str) -> &'a McpServerState {
    &statuses
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("{name} is not listed: {statuses:?}"))
        .state
}

fn reason(statuses: &[McpServerStatus], name: &str) -> String {
    match state(statuses, name) {
        McpServerState::Failed { reason } => reason.clone(),
        other => panic!("{name}: {other:?}"),
    }
}

fn result_text(outcome: &McpCallOutcome) -> String {
    match outcome {
        McpCallOutcome::Allowed { result_json, .. } => result_json.clone(),
        other => panic!("expected a result, got {other:?}"),
    }
}

/// The server granted its secret gets it (and gets it again when it is restarted); a server
/// asking for a secret granted to another, or to none, is refused by the broker; a secret the
/// broker does not hold fails that server with the variable and the secret's name. Everything
/// the server echoes comes back `[redacted]`, and no process but the broker and the server holds
/// the value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_gives_a_server_its_granted_secret_only_and_its_echoes_come_back_redacted() {
    let t = Tree::start().await;
    let granted = t
        .grant(&[
            ("sec", &["HANZO_TEST_MCP_TOKEN"]),
            ("missing", &["UNSET_SERVICE_TOKEN"]),
        ])
        .await;
    assert_eq!(granted, 2);
    let statuses = t
        .configure(vec![
            t.server("sec", "HANZO_TEST_MCP_TOKEN"),
            t.server("missing", "UNSET_SERVICE_TOKEN"),
            // The broker holds this one, but no server was granted it.
            t.server("thief", "OTHER_SERVICE_TOKEN"),
            // Granted to `sec`, not to this server.
            t.server("borrower", "HANZO_TEST_MCP_TOKEN"),
        ])
        .await;
    assert_eq!(
        state(&statuses, "sec"),
        &McpServerState::Ready,
        "{statuses:?}"
    );
    let missing = reason(&statuses, "missing");
    assert!(
        missing.contains("SERVICE_TOKEN names the secret UNSET_SERVICE_TOKEN")
            && missing.contains("does not hold"),
        "{missing}"
    );
    for (name, secret) in [
        ("thief", "OTHER_SERVICE_TOKEN"),
        ("borrower", "HANZO_TEST_MCP_TOKEN"),
    ] {
        let why = reason(&statuses, name);
        assert!(why.contains("was not granted the secret"), "{why}");
        assert!(
            why.contains(secret) && why.contains("SERVICE_TOKEN"),
            "{why}"
        );
    }
    let all = format!("{statuses:?}");
    assert!(!all.contains(CANARY) && !all.contains(OTHER), "{all}");

    // The server has it, by the real path: the sandboxed process's own environment.
    let (has, _) = t.call("sec", "has_secret").await;
    assert!(
        result_text(&has).contains(&format!("set, {} characters", CANARY.len())),
        "{has:?}"
    );
    let servers = descendants_with(std::process::id(), &["secret_server.py"]);
    assert_eq!(servers.len(), 1, "only `sec` was spawned: {servers:?}");
    assert!(proc_file(servers[0], "environ").contains(&format!("SERVICE_TOKEN={CANARY}")));

    // Its echoes: the result (text and structured), the progress message, an error.
    let (echo, progress) = t.call("sec", "echo").await;
    let echoed = result_text(&echo);
    assert!(!echoed.contains(CANARY), "{echoed}");
    let doc: Value = serde_json::from_str(&echoed).expect("result JSON");
    assert_eq!(doc["content"][0]["text"], "the token is [redacted]");
    assert_eq!(doc["structuredContent"]["token"], "[redacted]");
    assert_eq!(progress, ["sending [redacted]"]);
    let (fail, _) = t.call("sec", "fail").await;
    match &fail {
        McpCallOutcome::Fault { reason } => {
            assert!(reason.contains("cannot use token [redacted]"), "{reason}");
            assert!(!reason.contains(CANARY), "{reason}");
        }
        other => panic!("expected a fault, got {other:?}"),
    }
    let tools = match t.sup.mcp.call(Request::ListTools { server: None }).await {
        Ok(Response::Tools(tools)) => tools,
        other => panic!("list tools: {other:?}"),
    };
    let echo_tool = tools
        .iter()
        .find(|x| x.tool == "echo")
        .expect("echo listed");
    assert_eq!(
        echo_tool.description.as_deref(),
        Some("Echoes the secret (my token is [redacted]).")
    );
    assert!(!format!("{tools:?}").contains(CANARY));

    // Only the broker (and the server) hold it: the test's workers, their launcher and keepers.
    let (checked, broker_holds) = only_the_broker_and_the_server_hold(std::process::id(), CANARY);
    assert!(
        broker_holds,
        "the broker's environment is where it comes from"
    );
    assert!(
        checked >= 3,
        "the mcp worker's processes were checked ({checked})"
    );
    let (_, _) = only_the_broker_and_the_server_hold(std::process::id(), OTHER);

    // Killed, the server is started again: the worker zeroed the value after the first spawn,
    // so it asks the broker again.
    let first = servers[0];
    let killed = std::process::Command::new("kill")
        .args(["-9", &first.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let again = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let now = descendants_with(std::process::id(), &["secret_server.py"]);
            if let [pid] = now[..] {
                if pid != first && state(&t.statuses().await, "sec") == &McpServerState::Ready {
                    return pid;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the server is restarted");
    assert!(proc_file(again, "environ").contains(&format!("SERVICE_TOKEN={CANARY}")));
    let (has, _) = t.call("sec", "has_secret").await;
    assert!(result_text(&has).contains("set, "), "{has:?}");

    // Grants are replaced whole: granted nothing, a reconfigured server gets nothing.
    assert_eq!(t.grant(&[]).await, 0);
    let statuses = t
        .configure(vec![t.server("sec", "HANZO_TEST_MCP_TOKEN")])
        .await;
    assert!(
        reason(&statuses, "sec").contains("was not granted"),
        "{statuses:?}"
    );
    t.sup.shutdown().await;
}

/// A user whose settings give server `sec` the secret `var` (which the environment of
/// `hanzo-dev` holds as `CANARY`), with every `mcp__sec__*` call allowed.
fn user_with_secret(var: &str) -> TestHome {
    let home = TestHome::new();
    std::fs::create_dir_all(home.path("ws/.hanzo")).expect("mkdir");
    std::fs::copy(fixture(), home.path("ws/secret_server.py")).expect("copy");
    home.settings(json!({
        "mcp_servers": {"sec": {
            "command": "/usr/bin/python3",
            "args": [home.path("ws/secret_server.py")],
            "env": {"SERVICE_TOKEN": format!("${{secret:{var}}}")},
        }},
        "permissions": {"mcp__sec__*": "allow"},
    }));
    home
}

/// `hanzo-dev mcp` with the secret in its environment, under a name no secret pattern catches:
/// the settings naming it is what makes it a secret (handed to the broker alone). The worker's
/// redaction is what the output shows (`mcp call` prints the worker's answer as it is).
#[test]
fn hanzo_dev_mcp_gives_the_settings_secret_to_the_server_and_prints_only_redactions() {
    let home = user_with_secret("MY_SERVICE_VALUE");
    let run = |args: &[&str]| {
        let out = home
            .command(args)
            .env("MY_SERVICE_VALUE", CANARY)
            .env("RUST_LOG", "debug")
            .output()
            .expect("hanzo-dev mcp");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        assert!(!stdout.contains(CANARY), "stdout: {stdout}");
        assert!(!stderr.contains(CANARY), "stderr: {stderr}");
        (out.status.code(), stdout, stderr)
    };
    let (code, stdout, stderr) = run(&["mcp", "call", "sec", "has_secret", "--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains(&format!("set, {} characters", CANARY.len())),
        "{stdout}"
    );
    let (code, stdout, stderr) = run(&["mcp", "call", "sec", "echo", "--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    let doc: Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(
        doc["result"]["content"][0]["text"],
        "the token is [redacted]"
    );
    let (code, stdout, _) = run(&["mcp", "tools", "sec", "--json"]);
    assert_eq!(code, Some(0));
    assert!(stdout.contains("my token is [redacted]"), "{stdout}");
    // Without the variable: the server fails, naming the variable and the secret.
    let out = home
        .command(&["mcp", "list", "--json"])
        .output()
        .expect("hanzo-dev mcp list");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let sec = &doc["servers"][0];
    assert_eq!(sec["state"], "failed", "{doc}");
    let why = sec["reason"].as_str().unwrap_or_default();
    assert!(
        why.contains("SERVICE_TOKEN names the secret MY_SERVICE_VALUE")
            && why.contains("does not hold"),
        "{why}"
    );
}

/// `hanzo-dev -vv run`, its model calling the server's tools while the test looks at every
/// process of the run: the server holds the secret, the supervisor and the workers but the
/// broker do not; afterwards no event, no store row (the database files as bytes) and no line
/// of the `-vv` log holds it, and the server's echo is recorded redacted.
#[test]
fn in_a_run_the_secret_reaches_the_server_and_no_process_record_event_or_log_line_else() {
    let home = user_with_secret("HANZO_TEST_MCP_TOKEN");
    let release = home.path("ws/release");
    let cassette = home.cassette(
        "model.jsonl",
        &[
            ScriptTurn::tool("t1", "mcp__sec__has_secret", json!({}))
                .and_tool("t2", "mcp__sec__echo", json!({}))
                .and_tool("t3", "mcp__sec__fail", json!({}))
                .and_tool("t4", "mcp__sec__wait", json!({"path": release})),
            ScriptTurn::text("done"),
        ],
    );
    let child = home
        .command(&[
            "-vv",
            "run",
            "--json",
            "--replay",
            &cassette,
            "use the service",
        ])
        .env("HANZO_TEST_MCP_TOKEN", CANARY)
        .spawn()
        .expect("hanzo-dev run");
    let root = child.id();
    // The run is in `wait` once the server is up and the earlier calls are done; the server
    // holds the value, no other process of the run but the broker does.
    let server = (0..1200)
        .find_map(|_| {
            let found = descendants_with(root, &["secret_server.py"]);
            if found.is_empty() {
                // A bounded poll: the run announces nothing until it ends.
                std::thread::sleep(Duration::from_millis(50));
            }
            found.first().copied()
        })
        .expect("the server was started");
    assert!(proc_file(server, "environ").contains(&format!("SERVICE_TOKEN={CANARY}")));
    let (checked, broker_holds) = only_the_broker_and_the_server_hold(root, CANARY);
    assert!(broker_holds);
    // The supervisor, and at least the tools, model, mcp and lsp workers with their launchers.
    assert!(checked >= 5, "{checked} processes checked");
    std::fs::write(&release, "go").expect("release the wait");
    let out = child.wait_with_output().expect("the run ends");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{stdout}");
    assert!(!stdout.contains(CANARY), "an event holds the secret");
    assert!(!stderr.contains(CANARY), "the -vv log holds the secret");
    assert!(stderr.contains("DEBUG"), "the log is verbose: {stderr}");
    // The server's stderr line (written before its answer to `echo`, long before `wait` ended)
    // reached the log, redacted.
    assert!(
        stderr.contains("the token is [redacted]"),
        "the server's stderr is logged: {stderr}"
    );
    let events: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("event line"))
        .collect();
    let result = |id: &str| {
        events
            .iter()
            .find(|e| e["type"] == "tool_result" && e["id"] == id)
            .unwrap_or_else(|| panic!("no result for {id}: {events:#?}"))
            .clone()
    };
    assert!(result("t1")["preview"]
        .as_str()
        .unwrap_or_default()
        .contains(&format!("set, {} characters", CANARY.len())));
    assert!(result("t2")["preview"]
        .as_str()
        .unwrap_or_default()
        .contains("the token is [redacted]"));
    assert!(result("t4")["preview"]
        .as_str()
        .unwrap_or_default()
        .contains("released"));
    // The store, as bytes: every table, the WAL included.
    let mut files = 0;
    for e in walk(&home.path("data")) {
        let bytes = std::fs::read(&e).unwrap_or_default();
        let hay = String::from_utf8_lossy(&bytes);
        assert!(!hay.contains(CANARY), "{} holds the secret", e.display());
        files += 1;
    }
    assert!(files >= 1);
    let store = home.store();
    let started = events.iter().find(|e| e["type"] == "run_started").unwrap();
    let rec = store
        .load_run(hanzo_store::RunId(started["run_id"].as_i64().unwrap()))
        .expect("run record");
    let calls: Vec<_> = rec.steps.iter().flat_map(|s| &s.tool_calls).collect();
    assert_eq!(calls.len(), 4);
    assert!(format!("{rec:?}").contains("[redacted]"));
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// A workspace's settings file cannot give a server a secret: untrusted, its server is skipped;
/// trusted and then changed, skipped again; trusted, a secret it names is refused (a project can
/// name no secret), and so is a user server whose `command` the project replaced. Nothing is
/// started with the secret and no output holds it.
#[test]
fn a_workspace_settings_file_gets_no_secret_trusted_or_not() {
    let home = user_with_secret("HANZO_TEST_MCP_TOKEN");
    let script = home.path("ws/secret_server.py");
    let project = home.path("ws/.hanzo/settings.json");
    let list = || {
        let out = home
            .command(&["mcp", "list", "--json"])
            .env("ANTHROPIC_API_KEY", OTHER)
            .env("HANZO_TEST_MCP_TOKEN", CANARY)
            .output()
            .expect("hanzo-dev mcp list");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        for s in [&stdout, &stderr] {
            assert!(!s.contains(OTHER) && !s.contains(CANARY), "{s}");
        }
        let doc: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
        doc["servers"].as_array().cloned().unwrap_or_default()
    };
    let find = |servers: &[Value], name: &str| -> (String, String) {
        let s = servers
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("{name} not listed: {servers:?}"));
        (
            s["state"].as_str().unwrap_or_default().to_string(),
            s["reason"].as_str().unwrap_or_default().to_string(),
        )
    };
    let steal = |name: &str| {
        json!({"mcp_servers": {name: {
            "command": "/usr/bin/python3",
            "args": [script, "STOLEN"],
            "env": {"STOLEN": "${secret:ANTHROPIC_API_KEY}"},
        }}})
    };

    // Untrusted: skipped.
    std::fs::write(&project, steal("cloned").to_string()).unwrap();
    let servers = list();
    let (st, why) = find(&servers, "cloned");
    assert_eq!(st, "skipped", "{why}");
    assert!(why.contains("not trusted"), "{why}");

    // Trusted as an innocent entry, then changed to name the secret: untrusted again.
    std::fs::write(
        &project,
        json!({"mcp_servers": {"cloned": {"command": "/usr/bin/python3", "args": [script]}}})
            .to_string(),
    )
    .unwrap();
    let trust = home.output(&["trust"]);
    assert!(trust.status.success(), "{trust:?}");
    std::fs::write(&project, steal("cloned").to_string()).unwrap();
    let servers = list();
    let (st, why) = find(&servers, "cloned");
    assert_eq!(st, "skipped", "{why}");
    assert!(why.contains("not trusted"), "{why}");

    // Trusted with the secret in it: a workspace file names no secret.
    let trust = home.output(&["trust"]);
    assert!(trust.status.success(), "{trust:?}");
    let servers = list();
    let (st, why) = find(&servers, "cloned");
    assert_eq!(st, "skipped", "{why}");
    assert!(
        why.contains("STOLEN names the secret ANTHROPIC_API_KEY")
            && why.contains("user's settings"),
        "{why}"
    );
    // The user's own server still gets its secret.
    assert_eq!(find(&servers, "sec").0, "ready");

    // Trusted, replacing only the command of the user's server that names a secret.
    std::fs::write(
        &project,
        json!({"mcp_servers": {"sec": {"command": "/usr/bin/python3",
                                        "args": [script, "SERVICE_TOKEN"]}}})
        .to_string(),
    )
    .unwrap();
    let trust = home.output(&["trust"]);
    assert!(trust.status.success(), "{trust:?}");
    let servers = list();
    let (st, why) = find(&servers, "sec");
    assert_eq!(st, "skipped", "{why}");
    assert!(why.contains("command, args"), "{why}");
}
