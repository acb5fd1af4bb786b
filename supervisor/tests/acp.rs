//! `hanzo-dev acp` end to end: the real binary speaking the Agent Client Protocol over stdio to a
//! scripted JSON-RPC client, with real workers, sandbox and store and the model replayed from a
//! cassette. Every line the agent writes must be one JSON-RPC message with no raw control byte.

mod common;
#[path = "../../workers/model/tests/fixtures/mod.rs"]
mod fixtures;

use common::env::TestHome;
use common::procs::{alive, descendants_with};
use common::servers::install_into;
use fixtures::server::{Reply, Server};
use hanzo_model::script::{anthropic_events, ScriptTurn};
use hanzo_store::{RunStatus, SessionId};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A guard against hangs, not a speed assertion.
const HANG_GUARD: Duration = Duration::from_secs(120);
const CANARY: &str = "hanzo-acp-canary-3b9e71";

/// A private user whose `~/.ssh/id_rsa` is [`CANARY`].
fn new_env() -> TestHome {
    let env = TestHome::new();
    std::fs::create_dir_all(env.path("home/.ssh")).expect("mkdir");
    std::fs::write(env.path("home/.ssh/id_rsa"), CANARY).expect("canary");
    env
}

/// `hanzo-dev acp ARGS` in the workspace with `extra_env` added, as a scripted client.
fn acp(env: &TestHome, args: &[&str], extra_env: &[(&str, &str)]) -> Client {
    let mut c = env.command(&["acp"]);
    c.args(args)
        .envs(extra_env.iter().copied())
        .stdin(Stdio::piped());
    Client::start(c)
}

/// A scripted ACP client: writes lines to the agent's stdin, reads its stdout on a thread.
struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    rx: mpsc::Receiver<Value>,
    /// Every message received, in order.
    seen: Vec<Value>,
    next_id: u64,
    /// The agent's stderr, read as it comes (a `-vv` log would fill the pipe otherwise).
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Client {
    fn start(mut cmd: Command) -> Client {
        let mut child = cmd.spawn().expect("spawn hanzo-dev acp");
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().map(|mut e| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = std::io::Read::read_to_end(&mut e, &mut buf);
                String::from_utf8_lossy(&buf).into_owned()
            })
        });
        let stdin = child.stdin.take();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            let mut line = Vec::new();
            loop {
                line.clear();
                match r.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                let text = String::from_utf8(line.clone()).expect("stdout is UTF-8");
                let body = text
                    .strip_suffix('\n')
                    .expect("every message ends its line");
                // A protocol stream: nothing a terminal would act on, not even inside strings.
                assert!(
                    !body.chars().any(|c| c.is_control()),
                    "a raw control character on stdout: {body:?}"
                );
                let v: Value = serde_json::from_str(body)
                    .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {body}"));
                assert_eq!(v["jsonrpc"], "2.0", "{v}");
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        Client {
            child,
            stdin,
            rx,
            seen: Vec::new(),
            next_id: 100,
            stderr,
        }
    }

    fn raw(&mut self, bytes: &[u8]) {
        let s = self.stdin.as_mut().expect("stdin open");
        s.write_all(bytes).expect("write to the agent");
        s.flush().expect("flush");
    }

    fn send(&mut self, v: &Value) {
        let mut line = serde_json::to_vec(v).unwrap();
        line.push(b'\n');
        self.raw(&line);
    }

    /// Send a request; returns its id.
    fn request(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// The next message matching `f` (the ones before it are kept in `seen`).
    fn wait_for(&mut self, what: &str, f: impl Fn(&Value) -> bool) -> Value {
        loop {
            match self.rx.recv_timeout(HANG_GUARD) {
                Ok(v) => {
                    self.seen.push(v.clone());
                    if f(&v) {
                        return v;
                    }
                }
                Err(_) => panic!("no {what}; saw {:#?}", self.seen),
            }
        }
    }

    /// The answer to request `id`.
    fn answer(&mut self, id: u64) -> Value {
        self.wait_for(&format!("answer to {id}"), |v| {
            v["id"] == id && v.get("method").is_none()
        })
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params);
        self.answer(id)
    }

    fn new_session(&mut self, cwd: &Path, mcp: Value) -> String {
        let a = self.call("session/new", json!({"cwd": cwd, "mcpServers": mcp}));
        a["result"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {a}"))
            .to_string()
    }

    fn initialize(&mut self) -> Value {
        let a = self.call(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": true, "writeTextFile": true}}}),
        );
        assert_eq!(a["result"]["protocolVersion"], 1, "{a}");
        a
    }

    /// Close stdin and wait for the agent to exit; returns its exit code and stderr.
    fn finish(mut self) -> (Option<i32>, String, Vec<Value>) {
        drop(self.stdin.take());
        let (tx, rx) = mpsc::channel();
        let mut child = self.child;
        let stderr = self.stderr.take();
        std::thread::spawn(move || {
            let code = child.wait().map(|s| s.code()).ok().flatten();
            let err = stderr
                .map(|t| t.join().unwrap_or_default())
                .unwrap_or_default();
            let _ = tx.send((code, err));
        });
        let (code, stderr) = rx.recv_timeout(HANG_GUARD).expect("hanzo-dev acp hung");
        while let Ok(v) = self.rx.recv_timeout(Duration::from_millis(100)) {
            self.seen.push(v);
        }
        (code, stderr, self.seen)
    }
}

fn error_code(v: &Value) -> i64 {
    v["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {v}"))
}

fn updates<'a>(seen: &'a [Value], session: &str, kind: &str) -> Vec<&'a Value> {
    seen.iter()
        .filter(|v| {
            v["method"] == "session/update"
                && v["params"]["sessionId"] == session
                && v["params"]["update"]["sessionUpdate"] == kind
        })
        .map(|v| &v["params"]["update"])
        .collect()
}

fn is_permission_request(v: &Value) -> bool {
    v["method"] == "session/request_permission"
}

fn select(id: &Value, option: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": {"outcome": {"outcome": "selected", "optionId": option}}})
}

/// The issue's proof: prompt → streamed updates → one permission answered allow and one deny →
/// cancel mid-command (the command killed, the turn recorded cancelled) → `session/load` of the
/// stored session in a new process, which replays it and goes on.
#[test]
fn a_replayed_session_streams_asks_cancels_and_loads_in_a_new_process() {
    let env = new_env();
    let escapes = "printf 'out\\033[2J\\033]0;pwned\\007\\n'";
    let cassette = env.cassette(
        "one.jsonl",
        &[
            ScriptTurn::tool("t1", "bash", json!({"command": escapes}))
                .with_text("Running two commands.")
                .and_tool("t2", "bash", json!({"command": "touch denied.txt"})),
            ScriptTurn::text("The first ran; the second was refused."),
            ScriptTurn::tool(
                "t1",
                "bash",
                json!({"command": "echo started; sleep 60; echo slept", "timeout_ms": 120000}),
            ),
        ],
    );
    let mut c = acp(&env, &["--replay", &cassette], &[]);
    c.initialize();
    let sid = c.new_session(&env.ws(), json!([]));

    // Turn 1: two calls, each asked about; allow the first, reject the second.
    let prompt = c.request(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "run the two commands"}]}),
    );
    let ask1 = c.wait_for("the first permission request", is_permission_request);
    let p1 = &ask1["params"];
    assert_eq!(p1["sessionId"], sid.as_str());
    assert_eq!(p1["toolCall"]["kind"], "execute");
    assert!(p1["toolCall"]["title"]
        .as_str()
        .unwrap()
        .starts_with("bash: printf"));
    let kinds: Vec<&str> = p1["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["allow_once", "allow_always", "reject_once"]);
    // An answer to a question never asked is ignored; the real question stays open.
    c.send(&select(&json!(987_654), "allow_once"));
    c.send(&select(&ask1["id"], "allow_once"));
    let ask2 = c.wait_for("the second permission request", is_permission_request);
    assert!(ask2["params"]["toolCall"]["title"]
        .as_str()
        .unwrap()
        .contains("touch denied.txt"));
    assert_ne!(
        ask2["params"]["toolCall"]["toolCallId"],
        p1["toolCall"]["toolCallId"]
    );
    c.send(&select(&ask2["id"], "reject_once"));
    let done = c.answer(prompt);
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert!(
        !env.path("ws/denied.txt").exists(),
        "the rejected command ran"
    );

    let text: String = updates(&c.seen, &sid, "agent_message_chunk")
        .iter()
        .map(|u| u["content"]["text"].as_str().unwrap())
        .collect();
    assert!(text.contains("Running two commands."), "{text}");
    assert!(text.contains("the second was refused"), "{text}");
    let calls = updates(&c.seen, &sid, "tool_call");
    assert_eq!(calls.len(), 2, "{:#?}", c.seen);
    assert!(calls.iter().all(|u| u["status"] == "pending"));
    let id1 = calls[0]["toolCallId"].clone();
    let id2 = calls[1]["toolCallId"].clone();
    let tool_updates = updates(&c.seen, &sid, "tool_call_update");
    let last = |id: &Value| {
        tool_updates
            .iter()
            .rev()
            .find(|u| &u["toolCallId"] == id)
            .copied()
            .unwrap_or_else(|| panic!("no update for {id}"))
    };
    assert!(tool_updates
        .iter()
        .any(|u| u["toolCallId"] == id1 && u["status"] == "in_progress"));
    assert_eq!(last(&id1)["status"], "completed");
    // The escape sequences arrived as data, escaped in the JSON (the reader thread checked the
    // raw lines), and exactly as the command printed them.
    let out1 = last(&id1)["content"][0]["content"]["text"]
        .as_str()
        .unwrap();
    assert!(out1.contains("out\u{1b}[2J\u{1b}]0;pwned\u{7}"), "{out1:?}");
    assert_eq!(last(&id2)["status"], "failed");

    // Turn 2: a long command, allowed, then cancelled while it runs.
    let prompt = c.request(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "now sleep"}]}),
    );
    let ask = c.wait_for("the sleep's permission request", is_permission_request);
    c.send(&select(&ask["id"], "allow_once"));
    let root = c.child.id();
    let mut sleeper = Vec::new();
    for _ in 0..2000 {
        sleeper = descendants_with(root, &["sleep", "60"]);
        if !sleeper.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    assert!(!sleeper.is_empty(), "the command never started");
    c.notify("session/cancel", json!({"sessionId": sid}));
    let done = c.answer(prompt);
    assert_eq!(done["result"]["stopReason"], "cancelled", "{done}");
    for p in &sleeper {
        let mut gone = false;
        for _ in 0..400 {
            if !alive(*p) {
                gone = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        assert!(gone, "the command {p} survived the cancel");
    }
    let (code, stderr, _) = c.finish();
    assert_eq!(code, Some(0), "{stderr}");

    // On record: a session of two turns, the second cancelled.
    let store = env.store();
    let n: i64 = sid.parse().unwrap();
    let turns = store.session_turns(SessionId(n)).expect("turns");
    let statuses: Vec<RunStatus> = turns.iter().map(|t| t.status).collect();
    assert_eq!(statuses, [RunStatus::Succeeded, RunStatus::Cancelled]);
    assert_eq!(turns[0].user, "run the two commands");
    let cancelled = store.load_run(turns[1].run).expect("the cancelled run");
    let sleep = cancelled
        .steps
        .iter()
        .flat_map(|s| &s.tool_calls)
        .next()
        .expect("the sleep's record");
    assert!(sleep.call.allowed);
    assert!(
        sleep
            .call
            .error
            .as_deref()
            .unwrap_or("")
            .starts_with("cancelled"),
        "{:?}",
        sleep.call
    );
    drop(store);

    // A new process loads the session: its history replayed, then it goes on.
    let cassette = env.cassette("two.jsonl", &[ScriptTurn::text("Welcome back.")]);
    let mut c = acp(&env, &["--replay", &cassette], &[]);
    c.initialize();
    // Only in its own workspace.
    std::fs::create_dir_all(env.path("elsewhere")).unwrap();
    let e = c.call(
        "session/load",
        json!({"sessionId": sid, "cwd": env.path("elsewhere").display().to_string(), "mcpServers": []}),
    );
    assert_eq!(error_code(&e), -32602, "{e}");
    assert!(e["error"]["message"]
        .as_str()
        .unwrap()
        .contains("another workspace"));
    let a = c.call(
        "session/load",
        json!({"sessionId": sid, "cwd": env.ws(), "mcpServers": []}),
    );
    assert_eq!(a["result"]["modes"]["currentModeId"], "prompt", "{a}");
    let users: Vec<&str> = updates(&c.seen, &sid, "user_message_chunk")
        .iter()
        .map(|u| u["content"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(users, ["run the two commands", "now sleep"]);
    let replayed = updates(&c.seen, &sid, "tool_call");
    let st: Vec<&str> = replayed
        .iter()
        .map(|u| u["status"].as_str().unwrap())
        .collect();
    assert_eq!(st, ["completed", "failed", "failed"], "{replayed:#?}");
    let answers: Vec<&str> = updates(&c.seen, &sid, "agent_message_chunk")
        .iter()
        .map(|u| u["content"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(answers.len(), 2);
    assert!(answers[0].contains("the second was refused"));
    assert!(answers[1].contains("cancelled"), "{}", answers[1]);
    let done = c.call(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "hello again"}]}),
    );
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let (code, stderr, _) = c.finish();
    assert_eq!(code, Some(0), "{stderr}");
    let turns = env.store().session_turns(SessionId(n)).expect("turns");
    assert_eq!(turns.len(), 3);
    assert_eq!(turns[2].answer.as_deref(), Some("Welcome back."));
}

/// Malformed input gets JSON-RPC errors and the agent keeps serving; bad sessions and cwds are
/// refused; initialize names the broker's credentials, never their values.
#[test]
fn malformed_and_hostile_messages_are_refused_and_the_agent_keeps_serving() {
    let env = new_env();
    let secret = format!("sk-ant-{CANARY}");
    let mut c = acp(&env, &[], &[("ANTHROPIC_API_KEY", secret.as_str())]);
    c.raw(b"{this is not json\n");
    let e = c.wait_for("the parse error", |v| v.get("error").is_some());
    assert_eq!(error_code(&e), -32700);
    assert_eq!(e["id"], Value::Null);
    for (line, code) in [
        (&b"[1,2,3]\n"[..], -32600),
        (b"42\n", -32600),
        (b"\"a string\"\n", -32600),
        (br#"{"jsonrpc":"1.0","id":5,"method":"initialize"}"#, -32600),
        (
            br#"{"jsonrpc":"2.0","id":{"x":1},"method":"initialize"}"#,
            -32600,
        ),
    ] {
        let mut l = line.to_vec();
        if !l.ends_with(b"\n") {
            l.push(b'\n');
        }
        c.raw(&l);
        let e = c.wait_for("an invalid-request error", |v| v.get("error").is_some());
        assert_eq!(error_code(&e), code, "{}", String::from_utf8_lossy(line));
    }
    let e = c.call("session/fly", json!({}));
    assert_eq!(error_code(&e), -32601);
    // Still serving.
    let init = c.initialize();
    let caps = &init["result"]["agentCapabilities"];
    assert_eq!(caps["loadSession"], true);
    assert_eq!(caps["mcpCapabilities"]["http"], true);
    assert_eq!(caps["mcpCapabilities"]["sse"], false);
    let methods = init["result"]["authMethods"].as_array().unwrap();
    let anthropic = methods
        .iter()
        .find(|m| m["id"] == "anthropic")
        .expect("the broker's anthropic key is named");
    assert!(anthropic["description"].as_str().unwrap().contains("env"));

    for cwd in ["relative/dir", "/nonexistent/acp-test-dir"] {
        let e = c.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
        assert_eq!(error_code(&e), -32602, "{cwd}: {e}");
    }
    // The refusals of `run`: a home directory is no workspace.
    let e = c.call(
        "session/new",
        json!({"cwd": env.path("home").display().to_string(), "mcpServers": []}),
    );
    assert_eq!(error_code(&e), -32602, "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("refusing"),
        "{e}"
    );
    let file = env.path("ws/a-file");
    std::fs::write(&file, "x").unwrap();
    let e = c.call(
        "session/new",
        json!({"cwd": file.display().to_string(), "mcpServers": []}),
    );
    assert_eq!(error_code(&e), -32602);
    let e = c.call(
        "session/prompt",
        json!({"sessionId": "4242", "prompt": [{"type": "text", "text": "hi"}]}),
    );
    assert_eq!(error_code(&e), -32002, "{e}");
    let e = c.call(
        "session/load",
        json!({"sessionId": "4242", "cwd": env.ws(), "mcpServers": []}),
    );
    assert_eq!(error_code(&e), -32002, "{e}");
    // An editor's MCP server may not be handed a secret through the supervisor.
    let e = c.call(
        "session/new",
        json!({"cwd": env.ws(), "mcpServers": [{"name": "gh", "command": "/bin/true", "args": [],
               "env": [{"name": "GITHUB_TOKEN", "value": "ghp_x"}]}]}),
    );
    assert_eq!(error_code(&e), -32602, "{e}");
    // Nor pick one of the user's secrets for it: `${secret:…}` is the user settings' alone.
    let e = c.call(
        "session/new",
        json!({"cwd": env.ws(), "mcpServers": [{"name": "gh", "command": "/bin/true", "args": [],
               "env": [{"name": "SERVICE", "value": "${secret:ANTHROPIC_API_KEY}"}]}]}),
    );
    assert_eq!(error_code(&e), -32602, "{e}");
    let message = e["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("cannot give an MCP server the user's secrets"),
        "{message}"
    );
    // An answer to a request never made is ignored: no reply, and the next request is answered.
    c.send(&select(&json!(1), "allow_always"));
    let e = c.call("session/fly", json!({}));
    assert_eq!(error_code(&e), -32601);
    let (code, stderr, seen) = c.finish();
    assert_eq!(code, Some(0), "{stderr}");
    let all = serde_json::to_string(&seen).unwrap();
    assert!(!all.contains(CANARY), "the key's value reached stdout");
    assert!(!stderr.contains(CANARY), "the key's value reached stderr");
}

/// A line longer than the cap is refused while it is read — never held whole — and the agent
/// answers the next message.
#[test]
fn an_over_long_line_is_refused_without_holding_it() {
    let env = new_env();
    let mut c = acp(&env, &[], &[]);
    let chunk = vec![b'a'; 1 << 20];
    // 96 MiB, six times the 16 MiB cap, in one line.
    c.raw(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"x\":\"");
    for _ in 0..96 {
        c.raw(&chunk);
    }
    c.raw(b"\"}}\n");
    let e = c.wait_for("the refusal", |v| v.get("error").is_some());
    assert_eq!(error_code(&e), -32600, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("16 MiB"));
    let status = std::fs::read_to_string(format!("/proc/{}/status", c.child.id())).unwrap();
    let peak_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    assert!(
        peak_kib < 64 * 1024,
        "peak memory {peak_kib} KiB: the line was held"
    );
    c.initialize();
    let (code, stderr, _) = c.finish();
    assert_eq!(code, Some(0), "{stderr}");
}

/// The editor's MCP server joins the session through the bridge, sandboxed like a configured
/// one: asked by the model to read a key outside the workspace, it cannot.
#[test]
fn an_editor_mcp_server_is_sandboxed_and_cannot_read_outside_the_workspace() {
    let env = new_env();
    let script = env.path("ws/hostile_server.py");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp/hostile_server.py"),
        &script,
    )
    .unwrap();
    env.settings(json!({"permissions": {"mcp__evil__*": "allow"}}));
    let key = env.path("home/.ssh/id_rsa").display().to_string();
    let cassette = env.cassette(
        "mcp.jsonl",
        &[
            ScriptTurn::tool("t1", "mcp__evil__read", json!({"path": key})),
            ScriptTurn::text("done"),
        ],
    );
    let mut c = acp(&env, &["--replay", &cassette], &[]);
    c.initialize();
    let sid = c.new_session(
        &env.ws(),
        json!([{"name": "evil", "command": "/usr/bin/python3",
                "args": [script.display().to_string()], "env": []}]),
    );
    let done = c.call(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "read my key"}]}),
    );
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let calls = updates(&c.seen, &sid, "tool_call");
    assert_eq!(calls.len(), 1, "{:#?}", c.seen);
    assert_eq!(
        calls[0]["title"].as_str().unwrap(),
        format!("mcp__evil__read: {key}")
    );
    let results = updates(&c.seen, &sid, "tool_call_update");
    let last = results.last().expect("a result");
    let text = last["content"][0]["content"]["text"].as_str().unwrap();
    assert!(
        text.contains("refused"),
        "the server was not refused: {text}"
    );
    let (code, stderr, seen) = c.finish();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        !serde_json::to_string(&seen).unwrap().contains(CANARY),
        "the key left the sandbox"
    );
}

/// `--record` through the session host (the path `chat` takes too): a turn against a live
/// provider (a local server speaking Anthropic's SSE) recorded to a cassette that `--replay`
/// plays back, offline, to the same updates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_turn_recorded_to_a_cassette_replays_the_same() {
    let env = std::sync::Arc::new(new_env());
    std::fs::write(env.path("ws/notes.txt"), "remember the milk\n").unwrap();
    let turns = [
        ScriptTurn::tool("t1", "read_file", json!({"path": "notes.txt"})),
        ScriptTurn::text("The note says to remember the milk."),
    ];
    let server = Server::start(
        turns
            .iter()
            .enumerate()
            .map(|(i, t)| Reply::sse(&anthropic_events(i, t).concat(), 64))
            .collect(),
    )
    .await;
    let recorded = env.path("recorded.jsonl").display().to_string();
    let session = |args: Vec<String>, key: bool| {
        let env = env.clone();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let extra: &[(&str, &str)] = if key {
                &[("ANTHROPIC_API_KEY", "sk-ant-test-key-for-the-fake-server")]
            } else {
                &[]
            };
            let mut c = acp(&env, &args, extra);
            c.initialize();
            let sid = c.new_session(&env.ws(), json!([]));
            let done = c.call(
                "session/prompt",
                json!({"sessionId": sid, "prompt": [{"type": "text", "text": "what does the note say?"}]}),
            );
            assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
            let text: String = updates(&c.seen, &sid, "agent_message_chunk")
                .iter()
                .map(|u| u["content"]["text"].as_str().unwrap().to_string())
                .collect();
            let output = updates(&c.seen, &sid, "tool_call_update")
                .last()
                .map(|u| u["content"][0]["content"]["text"].clone())
                .expect("the read's result");
            let (code, stderr, _) = c.finish();
            assert_eq!(code, Some(0), "{stderr}");
            (text, output)
        })
    };
    let live: Vec<String> = [
        "--approval",
        "allow-listed",
        "--provider",
        "anthropic",
        "--base-url",
        &server.base,
        "--record",
        &recorded,
    ]
    .map(String::from)
    .to_vec();
    let first = session(live, true).await.expect("the live session");
    assert_eq!(first.0, "The note says to remember the milk.");
    assert!(first.1.as_str().unwrap().contains("remember the milk"));
    assert_eq!(server.received().len(), 2, "two model requests went out");
    let lines = std::fs::read_to_string(&recorded).expect("the cassette was written");
    assert_eq!(lines.lines().count(), 2, "one line per model exchange");
    let offline: Vec<String> = ["--approval", "allow-listed", "--replay", &recorded]
        .map(String::from)
        .to_vec();
    let again = session(offline, false).await.expect("the replayed session");
    assert_eq!(again, first);
    assert_eq!(server.received().len(), 2, "the replay went nowhere");
}

/// LSP diagnostics through the session host (as `chat` gets them): an edit that breaks the
/// types comes back with pyright's diagnostics in the call's output.
#[test]
fn a_session_edit_gets_pyright_diagnostics_back() {
    let env = new_env();
    install_into(&env.ws(), &["pyright-langserver"]);
    std::fs::write(
        env.path("ws/lib.py"),
        "def double(x: int) -> int:\n    return x * 2\n",
    )
    .unwrap();
    std::fs::write(
        env.path("ws/app.py"),
        "from lib import double\n\nprint(double(2))\n",
    )
    .unwrap();
    env.settings(json!({
        "lsp_servers": {"pyright": {"command": "node_modules/.bin/pyright-langserver"}},
        "permissions": {"edit_file": "allow", "read_file": "allow"},
    }));
    let cassette = env.cassette(
        "lsp.jsonl",
        &[
            ScriptTurn::tool("t0", "read_file", json!({"path": "app.py"})),
            ScriptTurn::tool(
                "t1",
                "edit_file",
                json!({"path": "app.py", "old_string": "double(2)", "new_string": "double(\"two\")"}),
            ),
            ScriptTurn::text("I broke the types."),
        ],
    );
    let mut c = acp(&env, &["--replay", &cassette], &[]);
    c.initialize();
    let sid = c.new_session(&env.ws(), json!([]));
    let done = c.call(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "change the call"}]}),
    );
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let calls = updates(&c.seen, &sid, "tool_call");
    let edit_id = calls
        .iter()
        .find(|u| u["kind"] == "edit")
        .expect("the edit")["toolCallId"]
        .clone();
    let edit = updates(&c.seen, &sid, "tool_call_update")
        .into_iter()
        .rev()
        .find(|u| u["toolCallId"] == edit_id)
        .expect("the edit's result");
    let out = edit["content"][0]["content"]["text"].as_str().unwrap();
    assert!(out.contains("<diagnostics"), "{out}");
    assert!(
        out.contains("app.py:3:14 error [reportArgumentType]"),
        "{out}"
    );
    let (code, stderr, seen) = c.finish();
    assert_eq!(code, Some(0), "{stderr}");
    // The client offered its fs capability, but reads and writes stay in the tools worker: the
    // agent asked the editor for no file and no terminal, and the edit is on disk.
    let asked: Vec<&str> = seen
        .iter()
        .filter(|v| v.get("id").is_some())
        .filter_map(|v| v["method"].as_str())
        .collect();
    assert!(
        asked
            .iter()
            .all(|m| !m.starts_with("fs/") && !m.starts_with("terminal/")),
        "{asked:?}"
    );
    assert!(std::fs::read_to_string(env.path("ws/app.py"))
        .unwrap()
        .contains("double(\"two\")"));
}

/// An agent with stages (`auto`: plan, code, review) shows them as the plan, each completed in
/// turn.
#[test]
fn the_auto_pipeline_is_streamed_as_a_plan() {
    let env = new_env();
    let cassette = env.cassette(
        "auto.jsonl",
        &[
            ScriptTurn::text("1. look 2. fix"),
            ScriptTurn::text("fixed"),
            ScriptTurn::text("looks good"),
        ],
    );
    let mut c = acp(&env, &["--agent", "auto", "--replay", &cassette], &[]);
    c.initialize();
    let sid = c.new_session(&env.ws(), json!([]));
    let done = c.call(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "fix it"}]}),
    );
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let plans: Vec<Vec<(String, String)>> = updates(&c.seen, &sid, "plan")
        .iter()
        .map(|u| {
            u["entries"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| {
                    (
                        e["content"].as_str().unwrap().to_string(),
                        e["status"].as_str().unwrap().to_string(),
                    )
                })
                .collect()
        })
        .collect();
    let status = |p: &Vec<(String, String)>| p.iter().map(|e| e.1.clone()).collect::<Vec<_>>();
    assert_eq!(
        plans[0].iter().map(|e| e.0.as_str()).collect::<Vec<_>>(),
        ["plan stage", "code stage", "review stage"]
    );
    assert_eq!(status(&plans[0]), ["in_progress", "pending", "pending"]);
    assert!(plans
        .iter()
        .any(|p| status(p) == ["completed", "in_progress", "pending"]));
    assert_eq!(
        status(plans.last().unwrap()),
        ["completed", "completed", "completed"]
    );
    let (code, stderr, _) = c.finish();
    assert_eq!(code, Some(0), "{stderr}");
}

/// "Allow always" remembers the exact call, never a pattern: the same command again is not
/// asked about, a different one is.
#[test]
fn allow_always_covers_only_the_exact_call() {
    let env = new_env();
    let cassette = env.cassette(
        "always.jsonl",
        &[
            ScriptTurn::tool("t1", "bash", json!({"command": "echo same"})),
            ScriptTurn::text("one"),
            ScriptTurn::tool("t1", "bash", json!({"command": "echo same"})),
            ScriptTurn::text("two"),
            ScriptTurn::tool(
                "t1",
                "bash",
                json!({"command": "echo same; touch other.txt"}),
            ),
            ScriptTurn::text("three"),
        ],
    );
    let mut c = acp(&env, &["--replay", &cassette], &[]);
    c.initialize();
    let sid = c.new_session(&env.ws(), json!([]));
    let prompt = |c: &mut Client, text: &str| {
        c.request(
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": text}]}),
        )
    };
    let p = prompt(&mut c, "first");
    let ask = c.wait_for("the question", is_permission_request);
    c.send(&select(&ask["id"], "allow_always"));
    assert_eq!(c.answer(p)["result"]["stopReason"], "end_turn");
    let before = c.seen.iter().filter(|v| is_permission_request(v)).count();
    let p = prompt(&mut c, "second");
    assert_eq!(c.answer(p)["result"]["stopReason"], "end_turn");
    assert_eq!(
        c.seen.iter().filter(|v| is_permission_request(v)).count(),
        before,
        "the same command was asked about again"
    );
    let p = prompt(&mut c, "third");
    let ask = c.wait_for("a question for the other command", is_permission_request);
    assert!(ask["params"]["toolCall"]["title"]
        .as_str()
        .unwrap()
        .contains("touch other.txt"));
    c.send(&select(&ask["id"], "reject_once"));
    assert_eq!(c.answer(p)["result"]["stopReason"], "end_turn");
    assert!(!env.path("ws/other.txt").exists());
    let (code, stderr, _) = c.finish();
    assert_eq!(code, Some(0), "{stderr}");
}

/// `session/cancel` while a question is open: the question counts as a denial, nothing runs,
/// the prompt answers `cancelled`, and a late answer to the closed question is ignored.
#[test]
fn cancel_with_a_question_open_denies_it_and_a_late_answer_is_ignored() {
    let env = new_env();
    let cassette = env.cassette(
        "open.jsonl",
        &[
            ScriptTurn::tool("t1", "bash", json!({"command": "touch should-not-exist"})),
            ScriptTurn::text("after the cancel"),
        ],
    );
    let mut c = acp(&env, &["--replay", &cassette], &[]);
    c.initialize();
    let sid = c.new_session(&env.ws(), json!([]));
    let p = c.request(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "make the file"}]}),
    );
    let ask = c.wait_for("the question", is_permission_request);
    c.notify("session/cancel", json!({"sessionId": sid}));
    assert_eq!(c.answer(p)["result"]["stopReason"], "cancelled");
    c.send(&select(&ask["id"], "allow_once"));
    assert!(!env.path("ws/should-not-exist").exists(), "the command ran");
    // Still serving the session.
    let p = c.call(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "and now?"}]}),
    );
    assert_eq!(p["result"]["stopReason"], "end_turn", "{p}");
    let (code, stderr, _) = c.finish();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("never asked"), "{stderr}");
    let n: i64 = sid.parse().unwrap();
    let turns = env.store().session_turns(SessionId(n)).expect("turns");
    let statuses: Vec<RunStatus> = turns.iter().map(|t| t.status).collect();
    assert_eq!(statuses, [RunStatus::Cancelled, RunStatus::Succeeded]);
}

/// Requests sent while a prompt runs wait for it, up to a bound: past it they are refused at
/// once, and every one gets exactly one answer.
#[test]
fn requests_during_a_prompt_are_answered_after_it_and_the_backlog_is_bounded() {
    let env = new_env();
    let cassette = env.cassette(
        "backlog.jsonl",
        &[
            ScriptTurn::tool("t1", "bash", json!({"command": "echo hi"})),
            ScriptTurn::text("done"),
        ],
    );
    let mut c = acp(&env, &["--replay", &cassette], &[]);
    c.initialize();
    let sid = c.new_session(&env.ws(), json!([]));
    let p = c.request(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]}),
    );
    let ask = c.wait_for("the question", is_permission_request);
    // The turn is waiting for our answer: everything sent now must wait, or be refused.
    let ids: Vec<u64> = (0..300)
        .map(|_| c.request("session/fly", json!({})))
        .collect();
    let refused: Vec<Value> = (0..44)
        .map(|_| c.wait_for("a refusal", |v| v.get("error").is_some()))
        .collect();
    assert!(refused.iter().all(|e| error_code(e) == -32603
        && e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("too many requests")));
    c.send(&select(&ask["id"], "reject_once"));
    assert_eq!(c.answer(p)["result"]["stopReason"], "end_turn");
    for id in &ids[..256] {
        assert_eq!(error_code(&c.answer(*id)), -32601);
    }
    let (code, stderr, seen) = c.finish();
    assert_eq!(code, Some(0), "{stderr}");
    for id in ids {
        let answers = seen
            .iter()
            .filter(|v| v["id"] == id && v.get("method").is_none());
        assert_eq!(answers.count(), 1, "request {id}");
    }
}

/// A session whose workers cannot start (the tools worker exits before its handshake, by the
/// test-only fault switch) is refused with the reason, and leaves no session in the store: the
/// row is created only once the workers are ready.
#[test]
fn a_session_whose_workers_fail_is_refused_and_leaves_no_stored_session() {
    let env = new_env();
    let cassette = env.cassette("one.jsonl", &[ScriptTurn::text("never asked")]);
    let mut c = acp(
        &env,
        &["--replay", &cassette],
        &[("HANZO_DEV_TEST_FAULT", "tools:crash-at-start")],
    );
    c.initialize();
    let a = c.call("session/new", json!({"cwd": env.ws(), "mcpServers": []}));
    assert_eq!(error_code(&a), -32603, "{a}");
    let message = a["error"]["message"].as_str().expect("message");
    assert!(message.contains("did not start"), "{message}");
    // Nothing to load, and nothing stored: the store has no session at all.
    assert!(env
        .store()
        .list_sessions(None, 100)
        .expect("sessions")
        .is_empty());
    let p = c.call(
        "session/prompt",
        json!({"sessionId": "1", "prompt": [{"type": "text", "text": "hi"}]}),
    );
    assert_eq!(error_code(&p), -32002, "{p}");
    let (code, stderr, _) = c.finish();
    assert_eq!(code, Some(0), "{stderr}");
}

/// The header value an editor gives its HTTP MCP server: a credential that must reach that server
/// (through the broker) and nothing else.
const HEADER_CANARY: &str = "editor-mcp-header-canary-51f0c2a9";

/// `fixtures/mcp/remote_server.py` (a streamable-HTTP MCP server that records the
/// `Authorization` of each request and echoes it back from its `echo_auth` tool) on a loopback
/// port; returns the child, its URL and the file of what it saw.
fn remote_mcp(dir: &Path) -> (Child, String, std::path::PathBuf) {
    let port_file = dir.join("remote.port");
    let seen = dir.join("remote.seen");
    let child = Command::new("/usr/bin/python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp/remote_server.py"))
        .arg(&port_file)
        .arg(&seen)
        .stdin(Stdio::null())
        .spawn()
        .expect("python3");
    let deadline = std::time::Instant::now() + HANG_GUARD;
    let port = loop {
        if let Ok(p) = std::fs::read_to_string(&port_file) {
            break p;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the server never listened"
        );
        // Polling with a deadline: the child announces its port only through this file.
        std::thread::sleep(Duration::from_millis(50));
    };
    (child, format!("http://127.0.0.1:{}/mcp", port.trim()), seen)
}

/// An editor's streamable-HTTP MCP server (`"type": "http"`) joins the session through the
/// broker: its tool is offered and called, the editor's `Authorization` header reaches the
/// server on every request, and the header's value is in no answer to the editor, no `-vv` log
/// line, no stored row or file, no process's environment or command line (the server echoes it
/// back, and the broker replaces it). A plain-http URL to another host, an `sse` server and a
/// header that could split a request are refused, the refusals naming no value.
#[test]
fn an_editor_http_mcp_server_is_called_through_the_broker_and_its_header_goes_nowhere_else() {
    let env = new_env();
    std::fs::create_dir_all(env.path("srv")).expect("mkdir");
    let (mut server, url, seen_file) = remote_mcp(&env.path("srv"));
    env.settings(json!({"permissions": {"mcp__web__*": "allow"}}));
    let cassette = env.cassette(
        "http.jsonl",
        &[
            ScriptTurn::tool("t1", "mcp__web__echo_auth", json!({})),
            ScriptTurn::text("done"),
        ],
    );
    let mut cmd = env.command(&["-vv", "acp", "--replay", &cassette]);
    cmd.stdin(Stdio::piped());
    let mut c = Client::start(cmd);
    let init = c.initialize();
    assert_eq!(
        init["result"]["agentCapabilities"]["mcpCapabilities"],
        json!({"http": true, "sse": false})
    );
    let header = json!([{"name": "Authorization", "value": format!("Bearer {HEADER_CANARY}")}]);

    // Refusals, each before anything starts.
    let refused = |c: &mut Client, server: Value| {
        let a = c.call(
            "session/new",
            json!({"cwd": env.ws(), "mcpServers": [server]}),
        );
        assert_eq!(error_code(&a), -32602, "{a}");
        let m = a["error"]["message"].as_str().expect("message").to_string();
        assert!(!m.contains(HEADER_CANARY), "{m}");
        m
    };
    let m = refused(
        &mut c,
        json!({"type": "http", "name": "web", "url": "http://mcp.example/mcp", "headers": header}),
    );
    assert!(
        m.contains("\"http://mcp.example/mcp\" is refused: only https is allowed"),
        "{m}"
    );
    let m = refused(
        &mut c,
        json!({"type": "sse", "name": "web", "url": url, "headers": header}),
    );
    assert!(m.contains("sse servers"), "{m}");
    let m = refused(
        &mut c,
        json!({"type": "http", "name": "web", "url": url, "headers": [
            {"name": "X-Key", "value": format!("{HEADER_CANARY}\r\nX-Injected: 1")}]}),
    );
    assert!(m.contains("header \"X-Key\" is refused"), "{m}");
    let m = refused(
        &mut c,
        json!({"type": "http", "name": "web", "url": url, "headers": [
            {"name": "Mcp-Session-Id", "value": HEADER_CANARY}]}),
    );
    assert!(m.contains("MCP transport"), "{m}");
    assert!(
        std::fs::read_to_string(&seen_file)
            .unwrap_or_default()
            .is_empty(),
        "a refused server was reached"
    );

    // The server joins, its tool is called.
    let sid = c.new_session(
        &env.ws(),
        json!([{"type": "http", "name": "web", "url": url, "headers": header}]),
    );
    let done = c.call(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "who am I?"}]}),
    );
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let calls = updates(&c.seen, &sid, "tool_call");
    assert_eq!(calls.len(), 1, "{:#?}", c.seen);
    assert_eq!(calls[0]["title"], "mcp__web__echo_auth: {}");
    let result = updates(&c.seen, &sid, "tool_call_update")
        .last()
        .map(|u| u["content"][0]["content"]["text"].clone())
        .expect("a result");
    assert_eq!(result, "you sent: [redacted]", "{:#?}", c.seen);
    let seen: Vec<Value> = std::fs::read_to_string(&seen_file)
        .expect("the server was reached")
        .lines()
        .map(|l| serde_json::from_str(l).expect("seen line"))
        .collect();
    assert!(
        seen.len() >= 3,
        "initialize, tools/list, tools/call: {seen:?}"
    );
    assert!(
        seen.iter()
            .all(|r| r["authorization"] == format!("Bearer {HEADER_CANARY}")),
        "every request carried the editor's header: {seen:?}"
    );

    // While the tree is up: no process of it holds the value in its environment or command line.
    let root = c.child.id();
    let mut procs = descendants_with(root, &[]);
    procs.push(root);
    assert!(procs.len() >= 6, "the agent and its workers: {procs:?}");
    let mut read = 0;
    for pid in procs {
        for f in ["environ", "cmdline"] {
            let bytes = std::fs::read(format!("/proc/{pid}/{f}")).unwrap_or_default();
            read += usize::from(!bytes.is_empty());
            assert!(
                !String::from_utf8_lossy(&bytes).contains(HEADER_CANARY),
                "/proc/{pid}/{f} holds the header value"
            );
        }
    }
    assert!(read >= 2, "not even the agent's own files could be read");

    let (code, stderr, msgs) = c.finish();
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("DEBUG") || stderr.contains("TRACE"),
        "-vv logs"
    );
    assert!(
        !stderr.contains(HEADER_CANARY),
        "the log holds the header value"
    );
    assert!(
        !serde_json::to_string(&msgs)
            .unwrap()
            .contains(HEADER_CANARY),
        "a message to the editor holds the header value"
    );
    for (what, text) in common::browser::file_texts(&[
        env.path("data"),
        env.path("config"),
        env.path("home"),
        env.path("tmp"),
        env.ws(),
    ]) {
        assert!(
            !text.contains(HEADER_CANARY),
            "{what} holds the header value"
        );
    }
    // And the store's rows themselves (the files are SQLite; checked above byte-wise too).
    let store = env.store();
    let sessions = store.list_sessions(None, 10).expect("sessions");
    assert_eq!(sessions.len(), 1);
    for t in store.session_turns(sessions[0].id).expect("turns") {
        let run = store.load_run(t.run).expect("run");
        assert!(!format!("{run:?}").contains(HEADER_CANARY));
    }
}

/// `session/set_mode`: the session modes are the approval modes (`allow` only when the agent was
/// started with `--approval allow`), advertised by `session/new`; a change is confirmed with a
/// `current_mode_update` and decides the next call that needs approval — between turns, and
/// during one (answered at once, while a question is open).
#[test]
fn set_mode_switches_the_approval_mode_between_and_during_turns() {
    let env = new_env();
    let cassette = env.cassette(
        "modes.jsonl",
        &[
            ScriptTurn::tool("t1", "bash", json!({"command": "touch one.txt"})),
            ScriptTurn::text("first"),
            ScriptTurn::tool("t1", "bash", json!({"command": "touch two.txt"})).and_tool(
                "t2",
                "bash",
                json!({"command": "touch three.txt"}),
            ),
            ScriptTurn::text("second"),
        ],
    );
    let mut c = acp(&env, &["--replay", &cassette], &[]);
    c.initialize();
    let a = c.call("session/new", json!({"cwd": env.ws(), "mcpServers": []}));
    let sid = a["result"]["sessionId"]
        .as_str()
        .expect("session")
        .to_string();
    let modes = &a["result"]["modes"];
    assert_eq!(modes["currentModeId"], "prompt", "{a}");
    let ids: Vec<&str> = modes["availableModes"]
        .as_array()
        .expect("modes")
        .iter()
        .map(|m| m["id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, ["prompt", "deny", "allow-listed"]);
    // `allow` was not offered, so it cannot be chosen; nor can a mode of an unknown session.
    let e = c.call(
        "session/set_mode",
        json!({"sessionId": sid, "modeId": "allow"}),
    );
    assert_eq!(error_code(&e), -32602, "{e}");
    let e = c.call(
        "session/set_mode",
        json!({"sessionId": "999", "modeId": "deny"}),
    );
    assert_eq!(error_code(&e), -32002, "{e}");

    // Between turns: deny, and the next call is denied without a question.
    let r = c.call(
        "session/set_mode",
        json!({"sessionId": sid, "modeId": "deny"}),
    );
    assert_eq!(r["result"], json!({}), "{r}");
    let changes = updates(&c.seen, &sid, "current_mode_update");
    assert_eq!(changes.last().expect("an update")["currentModeId"], "deny");
    let done = c.call(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "make one"}]}),
    );
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert!(!c.seen.iter().any(is_permission_request), "{:#?}", c.seen);
    assert!(!env.ws().join("one.txt").exists());

    // Back to prompt; during the turn, with the first question open, switch to allow-listed:
    // answered at once, and the second call (not read-only) is then denied without a question.
    c.call(
        "session/set_mode",
        json!({"sessionId": sid, "modeId": "prompt"}),
    );
    let prompt = c.request(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "make two and three"}]}),
    );
    let ask = c.wait_for("a permission request", is_permission_request);
    let switched = c.call(
        "session/set_mode",
        json!({"sessionId": sid, "modeId": "allow-listed"}),
    );
    assert_eq!(switched["result"], json!({}), "{switched}");
    assert!(
        !c.seen
            .iter()
            .any(|v| v["id"] == prompt && v.get("method").is_none()),
        "the mode changed while the turn still ran"
    );
    c.send(&select(&ask["id"], "allow_once"));
    let done = c.answer(prompt);
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let asks = c.seen.iter().filter(|v| is_permission_request(v)).count();
    assert_eq!(asks, 1, "the second call was decided by the new mode");
    assert!(env.ws().join("two.txt").exists());
    assert!(!env.ws().join("three.txt").exists());
    let (code, stderr, _) = c.finish();
    assert_eq!(code, Some(0), "{stderr}");
    // The store says which mode decided each call.
    let store = env.store();
    let session = store.list_sessions(None, 10).expect("sessions")[0].id;
    let turns = store.session_turns(session).expect("turns");
    let run = store.load_run(turns[1].run).expect("run");
    let calls: Vec<_> = run
        .steps
        .iter()
        .flat_map(|s| &s.tool_calls)
        .map(|c| (c.call.allowed, format!("{:?}", c.call.decided_by)))
        .collect();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(calls[0].0 && calls[0].1.contains("Prompt"), "{calls:?}");
    assert!(
        !calls[1].0 && calls[1].1.contains("AllowListed"),
        "{calls:?}"
    );
}
