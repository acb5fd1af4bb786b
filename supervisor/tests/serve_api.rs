//! `hanzo-dev serve` end to end: the real binary serving real HTTP over its unix socket and over
//! loopback TCP, runs driven by real `hanzo-dev run` children (real workers, sandbox and store)
//! with the model replayed from a cassette, and the attacks the API must refuse.

mod common;

use common::env::TestHome;
use hanzo_model::script::ScriptTurn;
use hanzo_store::{RunId, RunStatus, RunStore};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A guard against hangs, not a speed assertion.
const HANG_GUARD: Duration = Duration::from_secs(120);

/// A private user with a runtime directory (`run`, mode 0700) for the API's default socket.
struct Env {
    home: TestHome,
}

impl std::ops::Deref for Env {
    type Target = TestHome;
    fn deref(&self) -> &TestHome {
        &self.home
    }
}

impl Env {
    fn new() -> Env {
        let home = TestHome::new();
        std::fs::create_dir_all(home.path("run")).expect("mkdir");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(home.path("run"), std::fs::Permissions::from_mode(0o700))
            .expect("chmod");
        Env { home }
    }
    /// [`TestHome::command`] with `XDG_RUNTIME_DIR` set.
    fn command(&self, args: &[&str]) -> Command {
        let mut c = self.home.command(args);
        c.env("XDG_RUNTIME_DIR", self.path("run"));
        c
    }
    fn token(&self, org: &str) -> String {
        let out = self
            .command(&["serve", "token", "create", "--org", org])
            .output()
            .expect("token create");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .expect("utf8")
            .trim()
            .to_string()
    }
    fn store(&self, org: &str) -> RunStore {
        RunStore::open(&self.path("data/hanzo"), org).expect("store")
    }
    fn default_socket(&self) -> PathBuf {
        self.path("run/hanzo-dev/api.sock")
    }
}

/// A running server; its stderr (the log) collected as it comes. SIGTERM on drop.
struct Server {
    child: Child,
    log: Arc<Mutex<String>>,
    addr: Addr,
}

#[derive(Clone)]
enum Addr {
    Unix(PathBuf),
    Tcp(String),
}

impl Server {
    /// Start `serve ARGS` and wait for its "listening on" line.
    fn start(env: &Env, args: &[&str]) -> Server {
        let mut all = vec!["serve"];
        all.extend_from_slice(args);
        let mut child = env
            .command(&all)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn serve");
        let mut err = BufReader::new(child.stderr.take().expect("stderr"));
        let mut first = String::new();
        err.read_line(&mut first).expect("first log line");
        let at = first
            .trim()
            .strip_prefix("hanzo-dev serve: listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
            .to_string();
        let addr = match at.strip_prefix("unix:") {
            Some(p) => Addr::Unix(PathBuf::from(p)),
            None => Addr::Tcp(at.trim_start_matches("http://").to_string()),
        };
        let log = Arc::new(Mutex::new(first));
        let l = log.clone();
        std::thread::spawn(move || {
            let mut rest = String::new();
            let mut buf = [0u8; 4096];
            loop {
                match err.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        rest.push_str(&String::from_utf8_lossy(&buf[..n]));
                        l.lock().expect("log").push_str(&rest);
                        rest.clear();
                    }
                }
            }
        });
        Server { child, log, addr }
    }

    fn log(&self) -> String {
        self.log.lock().expect("log").clone()
    }

    fn request(&self, method: &str, path: &str, token: Option<&str>, body: Option<&str>) -> Resp {
        self.raw(method, path, token, body, &[])
    }

    fn raw(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> Resp {
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: local\r\nConnection: close\r\n");
        if let Some(t) = token {
            req.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        if let Some(b) = body {
            req.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                b.len()
            ));
        }
        req.push_str("\r\n");
        if let Some(b) = body {
            req.push_str(b);
        }
        self.exchange(req.as_bytes())
    }

    fn exchange(&self, bytes: &[u8]) -> Resp {
        let mut raw = Vec::new();
        match &self.addr {
            Addr::Unix(p) => {
                let mut s = UnixStream::connect(p).expect("connect unix");
                s.set_read_timeout(Some(HANG_GUARD)).expect("timeout");
                s.write_all(bytes).expect("write");
                s.read_to_end(&mut raw).expect("read");
            }
            Addr::Tcp(a) => {
                let mut s = std::net::TcpStream::connect(a).expect("connect tcp");
                s.set_read_timeout(Some(HANG_GUARD)).expect("timeout");
                s.write_all(bytes).expect("write");
                s.read_to_end(&mut raw).expect("read");
            }
        }
        Resp::parse(&raw)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Never signal a pid already reaped (it may be someone else's by now).
        if !matches!(self.child.try_wait(), Ok(None)) {
            return;
        }
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let _ = self.child.wait();
    }
}

#[derive(Debug)]
struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Resp {
    fn parse(raw: &[u8]) -> Resp {
        let text = String::from_utf8_lossy(raw).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").expect("a header block");
        let mut lines = head.split("\r\n");
        let status: u16 = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|s| s.parse().ok())
            .expect("status line");
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let chunked = headers
            .iter()
            .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
        let body = if chunked {
            dechunk(body)
        } else {
            body.to_string()
        };
        Resp {
            status,
            headers,
            body,
        }
    }
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
    fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).expect("chunk size");
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}

/// One SSE event as the client saw it.
#[derive(Debug, Clone, PartialEq)]
struct Sse {
    id: i64,
    event: String,
    data: Value,
}

fn parse_sse(body: &str) -> Vec<Sse> {
    let mut out = Vec::new();
    for block in body.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let mut id = None;
        let mut event = None;
        let mut data = None;
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("id: ") {
                id = v.parse().ok();
            } else if let Some(v) = line.strip_prefix("event: ") {
                event = Some(v.to_string());
            } else if let Some(v) = line.strip_prefix("data: ") {
                data = Some(serde_json::from_str(v).expect("data is JSON"));
            }
        }
        if let (Some(id), Some(event), Some(data)) = (id, event, data) {
            out.push(Sse { id, event, data });
        }
    }
    out
}

fn replay_server(env: &Env, turns: &[ScriptTurn], extra: &[&str]) -> Server {
    let cassette = env.cassette("model.jsonl", turns);
    let ws = env.path("ws").display().to_string();
    let mut args = vec!["--replay", cassette.as_str(), "--workspace", ws.as_str()];
    args.extend_from_slice(extra);
    Server::start(env, &args)
}

#[test]
fn agents_are_created_listed_read_changed_and_deleted_over_the_default_socket() {
    let env = Env::new();
    let tok = env.token("acme");
    let s = Server::start(&env, &[]);
    // The default socket: in $XDG_RUNTIME_DIR/hanzo-dev, mode 0600, its directory 0700.
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let sock = env.default_socket();
    let meta = std::fs::symlink_metadata(&sock).expect("socket");
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let dir = std::fs::metadata(sock.parent().expect("dir")).expect("dir");
    assert_eq!(dir.permissions().mode() & 0o777, 0o700);

    let body = json!({"name": "reviewer", "system_prompt": "Review.", "tools": ["grep", "read_file"],
                      "model": "m1", "org": "victim"});
    let r = s.request("POST", "/v1/agents", Some(&tok), Some(&body.to_string()));
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.json()["name"], "reviewer");
    assert_eq!(r.json()["tools"], json!(["grep", "read_file"]));
    let r = s.request("POST", "/v1/agents", Some(&tok), Some(&body.to_string()));
    assert_eq!((r.status, r.code().as_str()), (409, "agent_exists"));
    let r = s.request(
        "POST",
        "/v1/agents",
        Some(&tok),
        Some(&json!({"name": "code", "system_prompt": "x"}).to_string()),
    );
    assert_eq!((r.status, r.code().as_str()), (409, "agent_exists"));
    let r = s.request(
        "POST",
        "/v1/agents",
        Some(&tok),
        Some(&json!({"name": "x", "system_prompt": "x", "tools": ["rm_rf"]}).to_string()),
    );
    assert_eq!((r.status, r.code().as_str()), (400, "invalid_agent"));
    let r = s.request("POST", "/v1/agents", Some(&tok), Some("{not json"));
    assert_eq!((r.status, r.code().as_str()), (400, "invalid_json"));

    let r = s.request("GET", "/v1/agents", Some(&tok), None);
    assert_eq!(r.status, 200);
    let names: Vec<Value> = r.json()["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .map(|a| a["name"].clone())
        .collect();
    assert_eq!(names, vec![json!("reviewer")]);
    let r = s.request(
        "PATCH",
        "/v1/agents/reviewer",
        Some(&tok),
        Some(&json!({"model": "m2", "tools": ["glob"]}).to_string()),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let got = s
        .request("GET", "/v1/agents/reviewer", Some(&tok), None)
        .json();
    assert_eq!(
        (
            got["model"].clone(),
            got["tools"].clone(),
            got["system_prompt"].clone()
        ),
        (json!("m2"), json!(["glob"]), json!("Review."))
    );
    // The store agrees, in acme's own file; the body's org named nothing.
    assert_eq!(
        env.store("acme")
            .get_agent("reviewer")
            .expect("get")
            .expect("some")
            .def
            .model,
        "m2"
    );
    assert!(env.store("victim").list_agents().expect("list").is_empty());

    let r = s.request("DELETE", "/v1/agents/reviewer", Some(&tok), None);
    assert_eq!(r.status, 200);
    let r = s.request("GET", "/v1/agents/reviewer", Some(&tok), None);
    assert_eq!((r.status, r.code().as_str()), (404, "agent_not_found"));
    let r = s.request("DELETE", "/v1/agents/reviewer", Some(&tok), None);
    assert_eq!((r.status, r.code().as_str()), (404, "agent_not_found"));
    let r = s.request("PUT", "/v1/agents/reviewer", Some(&tok), None);
    assert_eq!((r.status, r.code().as_str()), (405, "method_not_allowed"));
    let r = s.request("GET", "/v1/nothing", Some(&tok), None);
    assert_eq!((r.status, r.code().as_str()), (404, "not_found"));

    // The OpenAPI document needs no token and is the one the binary carries.
    let r = s.request("GET", "/v1/openapi.json", None, None);
    assert_eq!(r.status, 200);
    let doc = r.json();
    assert!(doc["paths"]["/v1/runs/{id}/events"].is_object());
    // The document and the router agree: every documented operation is routed (whatever it
    // answers for an unknown agent or run, it is not "no such route" or "method not allowed"),
    // and every route of the API is documented.
    let mut documented = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("path item").keys() {
            if method == "parameters" {
                continue;
            }
            documented.push(format!("{} {path}", method.to_uppercase()));
            let concrete = path.replace("{ref}", "nosuch").replace("{id}", "999999");
            let body = matches!(method.as_str(), "post" | "patch").then_some("{}");
            let r = s.request(&method.to_uppercase(), &concrete, Some(&tok), body);
            assert!(
                !matches!(r.code().as_str(), "not_found" | "method_not_allowed"),
                "{method} {concrete}: {} {}",
                r.status,
                r.code()
            );
        }
    }
    documented.sort();
    assert_eq!(
        documented,
        [
            "DELETE /v1/agents/{ref}",
            "GET /v1/agents",
            "GET /v1/agents/{ref}",
            "GET /v1/agents/{ref}/runs",
            "GET /v1/openapi.json",
            "GET /v1/runs/{id}",
            "GET /v1/runs/{id}/events",
            "PATCH /v1/agents/{ref}",
            "POST /v1/agents",
            "POST /v1/agents/{ref}/run",
        ]
    );
}

/// Read a run's whole event stream (it ends when the run has).
fn follow(s: &Server, tok: &str, run: i64, last: Option<i64>) -> (Resp, Vec<Sse>) {
    let path = format!("/v1/runs/{run}/events");
    let last = last.map(|l| l.to_string());
    let headers: Vec<(&str, &str)> = last.iter().map(|l| ("Last-Event-ID", l.as_str())).collect();
    let r = s.raw("GET", &path, Some(tok), None, &headers);
    let events = parse_sse(&r.body);
    (r, events)
}

#[test]
fn a_run_started_over_tcp_streams_its_events_to_the_end_and_resumes_after_an_id() {
    let env = Env::new();
    std::fs::write(env.path("ws/notes.txt"), "hello from the workspace\n").expect("write");
    let tok = env.token("acme");
    let s = replay_server(
        &env,
        &[
            ScriptTurn::tool("t1", "read_file", json!({"path": "notes.txt"})),
            ScriptTurn::text("The notes say hello."),
        ],
        &["--listen", "127.0.0.1:0", "--approval", "allow-listed"],
    );
    assert!(matches!(s.addr, Addr::Tcp(_)));
    // A task that looks like a flag is the task, not a flag of the run.
    let task = "--allow-dangerous-workspace read the notes";
    let r = s.request(
        "POST",
        "/v1/agents/code/run",
        Some(&tok),
        Some(&json!({"task": task, "org": "victim"}).to_string()),
    );
    assert_eq!(r.status, 202, "{} {}", r.body, s.log());
    let id = r.json()["run_id"].as_i64().expect("run id");
    assert_eq!(
        r.header("location"),
        Some(format!("/v1/runs/{id}").as_str())
    );

    let (resp, events) = follow(&s, &tok, id, None);
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("content-type"), Some("text/event-stream"));
    let kinds: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    // The run's own rows (its configuration) interleave with its `--json` events.
    assert!(kinds[..2].contains(&"run_started"), "{kinds:?}");
    assert!(kinds.contains(&"run_config"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"run_finished"), "{kinds:?}");
    for k in ["tool_call", "tool_decision", "tool_result", "step_finished"] {
        assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
    }
    let result = events
        .iter()
        .find(|e| e.event == "tool_result")
        .expect("result");
    assert!(result.data["preview"]
        .as_str()
        .expect("preview")
        .contains("hello from the workspace"));
    let finished = &events.last().expect("last").data;
    assert_eq!(finished["status"], "succeeded");
    assert_eq!(finished["run_id"], id);
    // Ids are the store's event rows, strictly increasing, and the stream is the store's.
    let stored = env.store("acme").load_run(RunId(id)).expect("run").events;
    let stored_ids: Vec<i64> = stored.iter().map(|e| e.id).collect();
    let seen_ids: Vec<i64> = events.iter().map(|e| e.id).collect();
    assert_eq!(seen_ids, stored_ids);
    assert!(seen_ids.windows(2).all(|w| w[0] < w[1]));

    // Resume after the third event: exactly the rest.
    let (_, rest) = follow(&s, &tok, id, Some(events[2].id));
    assert_eq!(rest, events[3..].to_vec());
    let (_, none) = follow(&s, &tok, id, Some(events.last().expect("last").id));
    assert!(none.is_empty());
    let r = s.raw(
        "GET",
        &format!("/v1/runs/{id}/events"),
        Some(&tok),
        None,
        &[("Last-Event-ID", "x")],
    );
    assert_eq!((r.status, r.code().as_str()), (400, "invalid_request"));

    let run = s
        .request("GET", &format!("/v1/runs/{id}"), Some(&tok), None)
        .json();
    assert_eq!(run["run"]["status"], "succeeded");
    assert_eq!(run["run"]["input"], task);
    assert_eq!(run["active"], false);
    assert_eq!(run["steps"].as_array().expect("steps").len(), 2);
    let runs = s
        .request("GET", "/v1/agents/code/runs", Some(&tok), None)
        .json();
    assert_eq!(runs["runs"][0]["id"], id);
    assert_eq!(
        env.store("acme").get_run(RunId(id)).expect("run").status,
        RunStatus::Succeeded
    );
    assert!(env.store("victim").list_runs(10).expect("runs").is_empty());
}

#[test]
fn a_stream_opened_while_the_run_is_live_gets_each_event_as_it_is_recorded() {
    let env = Env::new();
    let tok = env.token("acme");
    // The command waits on a FIFO the test holds, so the run is provably live while the
    // stream is read, and the test decides when it may go on (no timing involved).
    let gate = env.path("ws/gate");
    nix::unistd::mkfifo(&gate, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let s = replay_server(
        &env,
        &[
            ScriptTurn::tool("t1", "bash", json!({"command": "cat gate"})),
            ScriptTurn::text("Done."),
        ],
        &["--approval", "allow"],
    );
    let r = s.request(
        "POST",
        "/v1/agents/code/run",
        Some(&tok),
        Some(&json!({"task": "wait", "approval": "allow"}).to_string()),
    );
    assert_eq!(r.status, 202, "{}", r.body);
    let id = r.json()["run_id"].as_i64().expect("id");
    let Addr::Unix(sock) = s.addr.clone() else {
        panic!("the default is a unix socket")
    };
    let mut stream = UnixStream::connect(&sock).expect("connect");
    stream.set_read_timeout(Some(HANG_GUARD)).expect("timeout");
    write!(
        stream,
        "GET /v1/runs/{id}/events HTTP/1.1\r\nHost: l\r\nAuthorization: Bearer {tok}\r\n\r\n"
    )
    .expect("request");
    // Read until the tool call is there: it was pushed while the command still waits.
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&raw).contains("event: tool_call") {
        let n = stream.read(&mut buf).expect("read the live stream");
        assert!(
            n > 0,
            "the stream ended early: {}",
            String::from_utf8_lossy(&raw)
        );
        raw.extend_from_slice(&buf[..n]);
    }
    let live = s
        .request("GET", &format!("/v1/runs/{id}"), Some(&tok), None)
        .json();
    assert_eq!(live["run"]["status"], "running");
    assert_eq!(live["active"], true);
    assert!(!String::from_utf8_lossy(&raw).contains("run_finished"));
    // Open the gate (the open blocks until `cat` has the FIFO open for reading).
    let writer = std::thread::spawn(move || {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&gate)
            .expect("open gate");
        f.write_all(b"released\n").expect("write gate");
    });
    loop {
        let n = stream.read(&mut buf).expect("read");
        raw.extend_from_slice(&buf[..n]);
        // The stream ends with the run: the terminating chunk.
        if n == 0 || String::from_utf8_lossy(&raw).ends_with("0\r\n\r\n") {
            break;
        }
    }
    writer.join().expect("writer");
    let events = parse_sse(&Resp::parse(&raw).body);
    let last = events.last().expect("events");
    assert_eq!(last.event, "run_finished");
    assert_eq!(last.data["status"], "succeeded");
    let result = events
        .iter()
        .find(|e| e.event == "tool_result")
        .expect("result");
    assert_eq!(result.data["is_error"], false, "{result:?}");
    assert!(result.data["preview"]
        .as_str()
        .expect("preview")
        .contains("released"));
    let stored = env.store("acme").load_run(RunId(id)).expect("run").events;
    assert_eq!(
        events.iter().map(|e| e.id).collect::<Vec<_>>(),
        stored.iter().map(|e| e.id).collect::<Vec<_>>()
    );
}

#[test]
fn tenancy_fails_closed_tokens_orgs_and_run_ids() {
    let env = Env::new();
    let a = env.token("org-a");
    let b = env.token("org-b");
    let s = replay_server(&env, &[ScriptTurn::text("ok")], &[]);
    // org-b has two runs and an agent.
    let mut b_runs = Vec::new();
    for _ in 0..2 {
        let r = s.request(
            "POST",
            "/v1/agents/code/run",
            Some(&b),
            Some(&json!({"task": "b's secret task"}).to_string()),
        );
        assert_eq!(r.status, 202, "{}", r.body);
        b_runs.push(r.json()["run_id"].as_i64().expect("id"));
    }
    let r = s.request(
        "POST",
        "/v1/agents",
        Some(&b),
        Some(&json!({"name": "b-agent", "system_prompt": "b only"}).to_string()),
    );
    assert_eq!(r.status, 201);
    for id in &b_runs {
        let (resp, _) = follow(&s, &b, *id, None);
        assert_eq!(resp.status, 200);
    }
    // org-a asks for them: 404, and nothing of b's in the answer.
    for id in &b_runs {
        for path in [format!("/v1/runs/{id}"), format!("/v1/runs/{id}/events")] {
            let r = s.request("GET", &path, Some(&a), None);
            assert_eq!(
                (r.status, r.code().as_str()),
                (404, "run_not_found"),
                "{path}"
            );
            assert!(!r.body.contains("secret task"));
        }
    }
    for path in ["/v1/agents/b-agent", "/v1/agents/b-agent/runs"] {
        let r = s.request("GET", path, Some(&a), None);
        assert!(!r.body.contains("b only"), "{path}: {}", r.body);
    }
    assert_eq!(
        s.request("GET", "/v1/agents/b-agent", Some(&a), None)
            .status,
        404
    );
    assert_eq!(
        s.request("GET", "/v1/agents", Some(&a), None).json()["agents"],
        json!([])
    );
    assert_eq!(
        s.request("GET", "/v1/agents/code/runs", Some(&a), None)
            .json()["runs"],
        json!([])
    );
    // A header naming the other org changes nothing.
    let r = s.raw(
        "GET",
        &format!("/v1/runs/{}", b_runs[0]),
        Some(&a),
        None,
        &[("X-Hanzo-Org", "org-b"), ("X-Org", "org-b")],
    );
    assert_eq!(r.status, 404);

    // No token, a wrong one, a malformed header, b's token hash: 401, for every route.
    let hash = {
        use sha2::Digest;
        let d = sha2::Sha256::digest(b.as_bytes());
        d.iter().map(|x| format!("{x:02x}")).collect::<String>()
    };
    let mut forged = a.clone();
    forged.replace_range(10..11, if &a[10..11] == "A" { "B" } else { "A" });
    for path in [
        "/v1/agents",
        "/v1/runs/1",
        "/v1/runs/1/events",
        "/v1/agents/code/runs",
    ] {
        let r = s.request("GET", path, None, None);
        assert_eq!(
            (r.status, r.code().as_str()),
            (401, "unauthorized"),
            "{path}"
        );
        assert_eq!(r.header("www-authenticate"), Some("Bearer"));
        for bad in [forged.as_str(), hash.as_str(), "hzd_", ""] {
            let r = s.request("GET", path, Some(bad), None);
            assert_eq!(r.status, 401, "{path} with {bad:?}");
        }
        let r = s.raw(
            "GET",
            path,
            None,
            None,
            &[("Authorization", &format!("Basic {a}"))],
        );
        assert_eq!(r.status, 401);
    }
    let r = s.request(
        "POST",
        "/v1/agents/code/run",
        None,
        Some(&json!({"task": "x"}).to_string()),
    );
    assert_eq!(r.status, 401);

    // A revoked token stops working at once, on the running server.
    let list = env
        .command(&["serve", "token", "list", "--json"])
        .output()
        .expect("list");
    let tokens: Value = serde_json::from_slice(&list.stdout).expect("json");
    let a_id = tokens
        .as_array()
        .expect("tokens")
        .iter()
        .find(|t| t["org"] == "org-a")
        .expect("a's token")["id"]
        .as_str()
        .expect("id")
        .to_string();
    assert!(!String::from_utf8_lossy(&list.stdout).contains(&a));
    assert_eq!(s.request("GET", "/v1/agents", Some(&a), None).status, 200);
    let out = env
        .command(&["serve", "token", "revoke", &a_id])
        .output()
        .expect("revoke");
    assert!(out.status.success());
    assert_eq!(s.request("GET", "/v1/agents", Some(&a), None).status, 401);
    assert_eq!(s.request("GET", "/v1/agents", Some(&b), None).status, 200);
}

#[test]
fn oversize_bodies_wide_approval_and_traversal_refs_are_refused() {
    let env = Env::new();
    let tok = env.token("acme");
    let s = replay_server(&env, &[ScriptTurn::text("ok")], &["--max-body", "1024"]);
    let big = json!({"name": "big", "system_prompt": "x".repeat(2000)}).to_string();
    let r = s.request("POST", "/v1/agents", Some(&tok), Some(&big));
    assert_eq!((r.status, r.code().as_str()), (413, "payload_too_large"));
    // Without a Content-Length (chunked), the cap holds while reading.
    let mut chunked = format!(
        "POST /v1/agents HTTP/1.1\r\nHost: l\r\nConnection: close\r\nAuthorization: Bearer {tok}\r\n\
         Transfer-Encoding: chunked\r\n\r\n"
    );
    for _ in 0..4 {
        chunked.push_str(&format!("200\r\n{}\r\n", "y".repeat(512)));
    }
    chunked.push_str("0\r\n\r\n");
    let r = s.exchange(chunked.as_bytes());
    assert_eq!((r.status, r.code().as_str()), (413, "payload_too_large"));
    assert!(env.store("acme").list_agents().expect("list").is_empty());

    // A request cannot widen the server's approval mode (deny by default), nor prompt.
    for (mode, status, code) in [
        ("allow", 403, "approval_not_permitted"),
        ("allow-listed", 403, "approval_not_permitted"),
        ("prompt", 400, "invalid_request"),
    ] {
        let r = s.request(
            "POST",
            "/v1/agents/code/run",
            Some(&tok),
            Some(&json!({"task": "x", "approval": mode}).to_string()),
        );
        assert_eq!((r.status, r.code().as_str()), (status, code), "{mode}");
    }
    assert!(env.store("acme").list_runs(10).expect("runs").is_empty());

    // Path traversal in :ref is a name that is not there; it touches no file.
    let outside = env.path("outside.db");
    for path in [
        "/v1/agents/..%2F..%2F..%2Foutside",
        "/v1/agents/..%2F..%2F..%2Foutside/run",
        "/v1/agents/%2Fetc%2Fpasswd",
        "/v1/agents/..",
    ] {
        let method = if path.ends_with("/run") {
            "POST"
        } else {
            "GET"
        };
        let r = s.request(
            method,
            path,
            Some(&tok),
            Some(&json!({"task": "x"}).to_string()),
        );
        assert_eq!(
            (r.status, r.code().as_str()),
            (404, "agent_not_found"),
            "{path}"
        );
    }
    for path in [
        "/v1/agents/../runs/1",
        "/v1/runs/..%2F1",
        "/v1/runs/1%2Fevents",
    ] {
        let r = s.request("GET", path, Some(&tok), None);
        assert_eq!(r.status, 404, "{path}");
    }
    assert!(!outside.exists());
    let orgs: Vec<_> = std::fs::read_dir(env.path("data/hanzo/orgs"))
        .expect("orgs")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(orgs, vec![std::ffi::OsString::from("acme")]);
}

#[test]
fn escape_sequences_in_names_and_paths_never_reach_the_servers_log_raw() {
    let env = Env::new();
    let tok = env.token("acme");
    let s = Server::start(&env, &[]);
    // Accepted by the store (not a control character), but a bidi override in a log line
    // would reorder what the operator reads.
    let name = "evil\u{202e}txt.exe";
    let r = s.request(
        "POST",
        "/v1/agents",
        Some(&tok),
        Some(&json!({"name": name, "system_prompt": "p"}).to_string()),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let r = s.request("GET", "/v1/agents/evil%E2%80%AEtxt.exe", Some(&tok), None);
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["name"], name);
    // ESC and BEL in a name: refused by the store, and logged escaped.
    let r = s.request(
        "POST",
        "/v1/agents",
        Some(&tok),
        Some(&json!({"name": "\u{1b}]0;pwned\u{7}", "system_prompt": "p"}).to_string()),
    );
    assert_eq!((r.status, r.code().as_str()), (400, "invalid_agent"));
    let r = s.request("GET", "/v1/agents/%1B%5B31mred%1B%5B0m", Some(&tok), None);
    assert_eq!(r.status, 404);
    let r = s.request("GET", "/v1/agents/%1B%5D0%3Bt%07/runs", Some(&tok), None);
    assert_eq!(r.json()["runs"], json!([]));
    // The last request's line is in the log before we look.
    let done = s.request("GET", "/v1/agents/marker-done", Some(&tok), None);
    assert_eq!(done.status, 404);
    let log = wait_for_log(&s, "marker-done");
    assert!(log.contains("/v1/agents/"), "{log}");
    for bad in ['\u{1b}', '\u{7}', '\u{202e}'] {
        assert!(!log.contains(bad), "raw {bad:?} in the log: {log:?}");
    }
}

/// The log once it contains `marker` (the server writes each line after answering).
fn wait_for_log(s: &Server, marker: &str) -> String {
    let deadline = std::time::Instant::now() + HANG_GUARD;
    loop {
        let log = s.log();
        if log.contains(marker) {
            return log;
        }
        assert!(std::time::Instant::now() < deadline, "no {marker} in {log}");
        // Polling with a deadline: the log line is written right after the response.
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn serve_fails(env: &Env, args: &[&str]) -> (Option<i32>, String) {
    let mut all = vec!["serve"];
    all.extend_from_slice(args);
    let out = env
        .command(&all)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("serve");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_socket_path_refuses_a_planted_link_a_file_a_live_server_and_a_wide_address() {
    let env = Env::new();
    let victim = env.path("home/precious");
    std::fs::write(&victim, "keep me").expect("write");
    let sock = env.path("tmp/api.sock");
    let listen = format!("unix:{}", sock.display());
    std::os::unix::fs::symlink(&victim, &sock).expect("symlink");
    let (code, err) = serve_fails(&env, &["--listen", &listen]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("not a socket"), "{err}");
    assert_eq!(std::fs::read_to_string(&victim).expect("victim"), "keep me");
    assert!(std::fs::symlink_metadata(&sock)
        .expect("link")
        .file_type()
        .is_symlink());
    // A dangling link, too (bind would not follow it, but nothing may replace it).
    std::fs::remove_file(&sock).expect("rm");
    std::os::unix::fs::symlink(env.path("home/not-there"), &sock).expect("symlink");
    let (code, _) = serve_fails(&env, &["--listen", &listen]);
    assert_eq!(code, Some(2));
    assert!(!env.path("home/not-there").exists());
    std::fs::remove_file(&sock).expect("rm");
    std::fs::write(&sock, "a file").expect("file");
    let (code, err) = serve_fails(&env, &["--listen", &listen]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(std::fs::read_to_string(&sock).expect("file"), "a file");
    std::fs::remove_file(&sock).expect("rm");

    // A planted link in place of the default socket's directory.
    std::fs::create_dir_all(env.path("home/elsewhere")).expect("mkdir");
    std::os::unix::fs::symlink(env.path("home/elsewhere"), env.path("run/hanzo-dev")).expect("ln");
    let (code, err) = serve_fails(&env, &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(
        std::fs::read_dir(env.path("home/elsewhere"))
            .expect("dir")
            .count(),
        0
    );
    std::fs::remove_file(env.path("run/hanzo-dev")).expect("rm");

    // A live server keeps its socket; a second one is refused.
    let s = Server::start(&env, &["--listen", &listen]);
    let (code, err) = serve_fails(&env, &["--listen", &listen]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("another server"), "{err}");
    assert_eq!(s.request("GET", "/v1/openapi.json", None, None).status, 200);
    drop(s);
    // Stopped with SIGTERM, it removed its socket.
    assert!(std::fs::symlink_metadata(&sock).is_err());
    // Its stale socket (a server killed without cleaning up) is replaced.
    let stale = std::os::unix::net::UnixListener::bind(&sock).expect("stale socket");
    drop(stale);
    let s = Server::start(&env, &["--listen", &listen]);
    assert_eq!(s.request("GET", "/v1/openapi.json", None, None).status, 200);
    drop(s);

    for wide in ["0.0.0.0:0", "192.0.2.1:80"] {
        let (code, err) = serve_fails(&env, &["--listen", wide]);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains("loopback"), "{err}");
    }
}

#[test]
fn a_missing_agent_or_task_starts_no_run() {
    let env = Env::new();
    let tok = env.token("acme");
    let s = replay_server(&env, &[ScriptTurn::text("ok")], &[]);
    let r = s.request(
        "POST",
        "/v1/agents/nobody/run",
        Some(&tok),
        Some(&json!({"task": "x"}).to_string()),
    );
    assert_eq!((r.status, r.code().as_str()), (404, "agent_not_found"));
    for body in [
        json!({"task": "  "}),
        json!({"task": "x", "max_steps": 0}),
        json!({}),
    ] {
        let r = s.request(
            "POST",
            "/v1/agents/code/run",
            Some(&tok),
            Some(&body.to_string()),
        );
        assert_eq!(r.status, 400, "{body}");
    }
    assert!(env.store("acme").list_runs(10).expect("runs").is_empty());
}

/// ES256 JWTs for the tests, and the JWKS with their public key.
struct JwtIssuer {
    key: ring::signature::EcdsaKeyPair,
}

impl JwtIssuer {
    fn new() -> JwtIssuer {
        use ring::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).expect("key");
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .expect("key");
        JwtIssuer { key }
    }
    fn jwks(&self) -> Value {
        use ring::signature::KeyPair;
        let p = self.key.public_key().as_ref();
        json!({"keys": [{"kty": "EC", "crv": "P-256", "kid": "k1",
                          "x": b64(&p[1..33]), "y": b64(&p[33..65])}]})
    }
    fn sign(&self, alg: &str, kid: &str, claims: &Value) -> String {
        let msg = format!(
            "{}.{}",
            b64(json!({"alg": alg, "kid": kid}).to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let sig = self
            .key
            .sign(&ring::rand::SystemRandom::new(), msg.as_bytes())
            .expect("sign");
        format!("{msg}.{}", b64(sig.as_ref()))
    }
}

fn b64(v: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v)
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

#[test]
fn a_signed_jwt_is_its_owners_principal_and_forged_ones_are_refused() {
    let env = Env::new();
    let issuer = JwtIssuer::new();
    let jwks = env.path("jwks.json");
    std::fs::write(&jwks, issuer.jwks().to_string()).expect("jwks");
    let tok = env.token("jorg");
    let jwks_s = jwks.display().to_string();
    let s = Server::start(
        &env,
        &[
            "--jwks",
            &jwks_s,
            "--jwt-issuer",
            "https://id.local",
            "--jwt-audience",
            "hanzo-dev",
        ],
    );
    let claims = |f: &dyn Fn(&mut Value)| {
        let mut c = json!({"iss": "https://id.local", "aud": "hanzo-dev", "owner": "jorg",
                           "sub": "user-1", "exp": now_secs() + 300});
        f(&mut c);
        c
    };
    let good = issuer.sign("ES256", "k1", &claims(&|_| {}));
    let body = json!({"name": "via-jwt", "system_prompt": "p", "org": "other"}).to_string();
    let r = s.request("POST", "/v1/agents", Some(&good), Some(&body));
    assert_eq!(r.status, 201, "{} {}", r.body, s.log());
    // The owner claim chose the store: the bearer token of the same org sees the agent.
    let r = s.request("GET", "/v1/agents/via-jwt", Some(&tok), None);
    assert_eq!(r.status, 200);
    assert!(env.store("other").list_agents().expect("list").is_empty());

    let (msg, sig) = good.rsplit_once('.').expect("jws");
    let mut flipped = sig.as_bytes().to_vec();
    flipped[5] = if flipped[5] == b'A' { b'B' } else { b'A' };
    let bad_sig = format!("{msg}.{}", String::from_utf8(flipped).expect("ascii"));
    let none = format!(
        "{}.{}.",
        b64(br#"{"alg":"none","kid":"k1"}"#),
        b64(claims(&|_| {}).to_string().as_bytes())
    );
    let forged = [
        ("bad signature", bad_sig),
        ("alg none", none),
        (
            "expired",
            issuer.sign(
                "ES256",
                "k1",
                &claims(&|c| c["exp"] = json!(now_secs() - 3600)),
            ),
        ),
        (
            "wrong audience",
            issuer.sign("ES256", "k1", &claims(&|c| c["aud"] = json!("other"))),
        ),
        (
            "wrong issuer",
            issuer.sign("ES256", "k1", &claims(&|c| c["iss"] = json!("https://x"))),
        ),
        ("unknown kid", issuer.sign("ES256", "k2", &claims(&|_| {}))),
        (
            "bad owner",
            issuer.sign("ES256", "k1", &claims(&|c| c["owner"] = json!("../jorg"))),
        ),
    ];
    for (what, jwt) in &forged {
        let r = s.request("GET", "/v1/agents", Some(jwt), None);
        assert_eq!(
            (r.status, r.code().as_str()),
            (401, "unauthorized"),
            "{what}"
        );
    }
    let log = s.log();
    for why in [
        "bad signature",
        "expired",
        "wrong audience",
        "no key with kid",
    ] {
        assert!(log.contains(why), "{why} not logged: {log}");
    }
    drop(s);
    // A server without a JWKS accepts no JWT at all.
    let s = Server::start(&env, &[]);
    assert_eq!(
        s.request("GET", "/v1/agents", Some(&good), None).status,
        401
    );
    assert_eq!(s.request("GET", "/v1/agents", Some(&tok), None).status, 200);
}

#[test]
fn a_stream_of_a_run_whose_process_died_ends_and_the_run_reads_interrupted() {
    let env = Env::new();
    let tok = env.token("acme");
    let gate = env.path("ws/gate");
    nix::unistd::mkfifo(&gate, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let cassette = env.cassette(
        "model.jsonl",
        &[
            ScriptTurn::tool("t1", "bash", json!({"command": "cat gate"})),
            ScriptTurn::text("never"),
        ],
    );
    // A run this server does not drive: a `hanzo-dev run` of the same org, killed mid-command.
    let mut run = env
        .command(&[
            "run",
            "--json",
            "--org",
            "acme",
            "--approval",
            "allow",
            "--replay",
            &cassette,
            "--",
            "wait",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run");
    let mut id = None;
    for line in BufReader::new(run.stdout.take().expect("stdout")).lines() {
        let v: Value = serde_json::from_str(&line.expect("line")).expect("json");
        if v["type"] == "run_started" {
            id = v["run_id"].as_i64();
        }
        if v["type"] == "tool_call" {
            break;
        }
    }
    let id = id.expect("run id");
    let s = Server::start(&env, &[]);
    let r = s.request("GET", &format!("/v1/runs/{id}"), Some(&tok), None);
    assert_eq!(r.json()["run"]["status"], "running");
    run.kill().expect("kill -9");
    run.wait().expect("wait");
    // The stream does not wait for ever on a run nobody is running.
    let (resp, _) = follow(&s, &tok, id, None);
    assert_eq!(resp.status, 200);
    let r = s.request("GET", &format!("/v1/runs/{id}"), Some(&tok), None);
    assert_eq!(r.json()["run"]["status"], "interrupted");
    assert_eq!(
        env.store("acme").get_run(RunId(id)).expect("run").status,
        RunStatus::Interrupted
    );
}

#[test]
fn stopping_the_server_cancels_its_live_runs_and_they_are_recorded_cancelled() {
    let env = Env::new();
    let tok = env.token("acme");
    let gate = env.path("ws/gate");
    nix::unistd::mkfifo(&gate, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let mut s = replay_server(
        &env,
        &[
            ScriptTurn::tool("t1", "bash", json!({"command": "cat gate"})),
            ScriptTurn::text("never"),
        ],
        &["--approval", "allow"],
    );
    let r = s.request(
        "POST",
        "/v1/agents/code/run",
        Some(&tok),
        Some(&json!({"task": "wait"}).to_string()),
    );
    assert_eq!(r.status, 202, "{}", r.body);
    let id = r.json()["run_id"].as_i64().expect("id");
    // Wait (on the store, with a deadline) until the command is running.
    let deadline = std::time::Instant::now() + HANG_GUARD;
    while !env
        .store("acme")
        .load_run(RunId(id))
        .expect("run")
        .events
        .iter()
        .any(|e| e.kind == "tool_call")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the tool call never started"
        );
        // Polling the store with a deadline: the server records the event as the child reports it.
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = nix::unistd::Pid::from_raw(i32::try_from(s.child.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("sigterm");
    let status = s.child.wait().expect("wait");
    assert!(status.success(), "{status:?} {}", s.log());
    assert_eq!(
        env.store("acme").get_run(RunId(id)).expect("run").status,
        RunStatus::Cancelled,
        "{}",
        s.log()
    );
}
