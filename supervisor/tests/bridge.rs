//! `hanzo-dev bridge` end to end: the real binary, a real headless Chromium on local pages, real
//! runs (workers, sandbox, store) with the model replayed from a cassette, JWT keys served by a
//! local identity provider and fetched through the broker, and the attacks the bridge must
//! refuse: other origins, forged tokens, rotated keys, redirects, binary and oversized frames,
//! an org named in the params, a peer that stops answering.

use base64::Engine as _;
use hanzo_model::script::{anthropic_cassette, ScriptTurn};
use hanzo_store::{RunId, RunStore};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const EXE: &str = env!("CARGO_BIN_EXE_hanzo-dev");
/// A guard against hangs, not a speed assertion.
const HANG_GUARD: Duration = Duration::from_secs(120);
const AUD: &str = "hanzo-dev";

struct Env {
    root: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let root = tempfile::tempdir().expect("tempdir");
        for d in ["home", "data", "config/hanzo", "ws", "tmp", "run", "chrome"] {
            std::fs::create_dir_all(root.path().join(d)).expect("mkdir");
        }
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            root.path().join("run"),
            std::fs::Permissions::from_mode(0o700),
        )
        .expect("chmod");
        std::fs::write(
            root.path().join("ws/notes.txt"),
            "hello from the workspace\n",
        )
        .expect("notes");
        Env { root }
    }
    fn path(&self, p: &str) -> PathBuf {
        self.root.path().join(p)
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
            .env("XDG_RUNTIME_DIR", self.path("run"))
            .env("TMPDIR", self.path("tmp"))
            .stdin(Stdio::null());
        c
    }
    fn token(&self, org: &str) -> String {
        self.token_and_id(org).0
    }
    /// A new token of `org` and its id (what `serve token revoke` takes).
    fn token_and_id(&self, org: &str) -> (String, String) {
        let out = self
            .command(&["serve", "token", "create", "--org", org])
            .output()
            .expect("token create");
        assert!(out.status.success());
        let err = String::from_utf8(out.stderr).expect("utf8");
        let id = err
            .strip_prefix("created token ")
            .and_then(|r| r.split(' ').next())
            .unwrap_or_else(|| panic!("{err}"))
            .to_string();
        (
            String::from_utf8(out.stdout).expect("utf8").trim().into(),
            id,
        )
    }
    fn cassette(&self) -> String {
        let p = self.path("model.jsonl");
        let turns = [
            ScriptTurn::tool("t1", "read_file", json!({"path": "notes.txt"})),
            ScriptTurn::text("The notes say hello."),
        ];
        std::fs::write(&p, anthropic_cassette(&turns)).expect("cassette");
        p.display().to_string()
    }
    fn store(&self, org: &str) -> RunStore {
        RunStore::open(&self.path("data/hanzo"), org).expect("store")
    }
}

/// A child process with its stderr collected; SIGTERM to its process group on drop.
struct Proc {
    child: Child,
    log: Arc<Mutex<String>>,
}

impl Proc {
    /// Spawn `cmd` in its own process group and collect its stderr; `ready` (if any) is the
    /// prefix of the line to wait for, returned with its rest.
    fn spawn(mut cmd: Command, ready: Option<&str>) -> (Proc, String) {
        use std::os::unix::process::CommandExt;
        cmd.stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = cmd.spawn().expect("spawn");
        let mut err = BufReader::new(child.stderr.take().expect("stderr"));
        let log = Arc::new(Mutex::new(String::new()));
        let mut rest = String::new();
        if let Some(prefix) = ready {
            loop {
                let mut line = String::new();
                let n = err.read_line(&mut line).expect("log line");
                log.lock().expect("log").push_str(&line);
                if n == 0 {
                    let _ = child.wait();
                    panic!(
                        "ended before {prefix:?}: {}",
                        log.lock().expect("log").clone()
                    );
                }
                if let Some(r) = line.trim().strip_prefix(prefix) {
                    rest = r.to_string();
                    break;
                }
            }
        }
        let l = log.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                l.lock()
                    .expect("log")
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        (Proc { child, log }, rest)
    }
    fn log(&self) -> String {
        self.log.lock().expect("log").clone()
    }

    /// The log once it holds `needle` (the process writes a line before it acts, and its stderr
    /// reaches this process a moment later), or as it is after 10 s.
    fn log_with(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let log = self.log();
            if log.contains(needle) || Instant::now() >= deadline {
                return log;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return;
        }
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // The group we created: the process and whatever it started.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(-pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let _ = self.child.wait();
    }
}

/// A running bridge and its `ws://` address.
struct Bridge {
    proc: Proc,
    addr: String,
}

fn start_bridge(env: &Env, extra: &[&str]) -> Bridge {
    start_bridge_with(env, &env.cassette(), "allow-listed", extra)
}

/// [`start_bridge`] replaying `cassette`, with `approval` as the widest mode.
fn start_bridge_with(env: &Env, cassette: &str, approval: &str, extra: &[&str]) -> Bridge {
    let ws = env.path("ws").display().to_string();
    let mut args = vec![
        "bridge",
        "--listen",
        "127.0.0.1:0",
        "--replay",
        cassette,
        "--workspace",
        &ws,
        "--approval",
        approval,
    ];
    args.extend_from_slice(extra);
    let (proc, at) = Proc::spawn(env.command(&args), Some("hanzo-dev bridge: listening on "));
    let addr = at
        .strip_prefix("ws://")
        .and_then(|a| a.strip_suffix("/v1/bridge"))
        .unwrap_or_else(|| panic!("unexpected address {at:?}"))
        .to_string();
    Bridge { proc, addr }
}

// ---- a tiny HTTP server for the identity provider and the pages ----

type Handler =
    Arc<dyn Fn(&str, &str, &[u8]) -> (u16, Vec<(String, String)>, Vec<u8>) + Send + Sync>;

/// An HTTP/1.1 server on a loopback port, one thread per connection, `Connection: close`.
struct Site {
    port: u16,
    hits: Arc<Mutex<HashMap<String, u32>>>,
}

impl Site {
    fn start(handler: Handler) -> Site {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        let hits = Arc::new(Mutex::new(HashMap::new()));
        let h2 = hits.clone();
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                let (handler, hits) = (handler.clone(), h2.clone());
                std::thread::spawn(move || serve_one(s, &handler, &hits));
            }
        });
        Site { port, hits }
    }
    fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
    fn hits(&self, path: &str) -> u32 {
        self.hits
            .lock()
            .expect("hits")
            .get(path)
            .copied()
            .unwrap_or(0)
    }
}

fn serve_one(mut s: TcpStream, handler: &Handler, hits: &Mutex<HashMap<String, u32>>) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let (head, mut body) = loop {
        let Ok(n) = s.read(&mut chunk) else { return };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break (
                String::from_utf8_lossy(&buf[..i]).into_owned(),
                buf[i + 4..].to_vec(),
            );
        }
    };
    let len: usize = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0);
    while body.len() < len {
        let Ok(n) = s.read(&mut chunk) else { return };
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    let mut first = head.lines().next().unwrap_or("").split(' ');
    let method = first.next().unwrap_or("").to_string();
    let target = first.next().unwrap_or("").to_string();
    let path = target.split('?').next().unwrap_or("").to_string();
    *hits.lock().expect("hits").entry(path.clone()).or_default() += 1;
    let (status, headers, out) = handler(&method, &path, &body);
    let mut resp = format!(
        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n",
        out.len()
    );
    for (k, v) in headers {
        resp.push_str(&format!("{k}: {v}\r\n"));
    }
    resp.push_str("\r\n");
    let _ = s.write_all(resp.as_bytes());
    let _ = s.write_all(&out);
}

// ---- JWTs ----

/// ES256 keys by kid, the set the identity provider publishes, and signing.
struct Keys {
    keys: HashMap<String, ring::signature::EcdsaKeyPair>,
    published: Arc<Mutex<Vec<String>>>,
}

impl Keys {
    fn new(kids: &[&str]) -> Keys {
        use ring::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
        let rng = ring::rand::SystemRandom::new();
        let mut keys = HashMap::new();
        for kid in kids {
            let pkcs8 =
                EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).expect("key");
            let k =
                EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
                    .expect("key");
            keys.insert(kid.to_string(), k);
        }
        Keys {
            keys,
            published: Arc::new(Mutex::new(vec![kids[0].to_string()])),
        }
    }
    fn jwks(&self) -> Value {
        use ring::signature::KeyPair;
        let published = self.published.lock().expect("published").clone();
        let keys: Vec<Value> = published
            .iter()
            .map(|kid| {
                let p = self.keys[kid].public_key().as_ref();
                json!({"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig",
                       "x": b64(&p[1..33]), "y": b64(&p[33..65])})
            })
            .collect();
        json!({ "keys": keys })
    }
    fn publish(&self, kids: &[&str]) {
        *self.published.lock().expect("published") = kids.iter().map(|k| k.to_string()).collect();
    }
    /// Sign `claims` with the key `key` but name `kid` in the header.
    fn sign_as(&self, key: &str, kid: &str, claims: &Value) -> String {
        let msg = format!(
            "{}.{}",
            b64(json!({"alg": "ES256", "kid": kid, "typ": "JWT"})
                .to_string()
                .as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let sig = self.keys[key]
            .sign(&ring::rand::SystemRandom::new(), msg.as_bytes())
            .expect("sign");
        format!("{msg}.{}", b64(sig.as_ref()))
    }
    fn sign(&self, kid: &str, claims: &Value) -> String {
        self.sign_as(kid, kid, claims)
    }
}

fn b64(v: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v)
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

/// The identity provider: OpenID discovery, its key set, and a redirect to it.
struct Idp {
    site: Site,
    keys: Arc<Keys>,
}

impl Idp {
    fn start(kids: &[&str]) -> Idp {
        let keys = Arc::new(Keys::new(kids));
        let k = keys.clone();
        let port = Arc::new(Mutex::new(0u16));
        let p = port.clone();
        let site = Site::start(Arc::new(move |_, path, _| {
            let me = format!("http://127.0.0.1:{}", *p.lock().expect("port"));
            let json_ct = vec![("Content-Type".to_string(), "application/json".to_string())];
            match path {
                "/.well-known/openid-configuration" => (
                    200,
                    json_ct,
                    json!({"issuer": me, "jwks_uri": format!("{me}/jwks")})
                        .to_string()
                        .into_bytes(),
                ),
                "/jwks" => (200, json_ct, k.jwks().to_string().into_bytes()),
                "/redirect" => (
                    302,
                    vec![("Location".to_string(), format!("{me}/jwks"))],
                    Vec::new(),
                ),
                "/huge" => (
                    200,
                    json_ct,
                    format!("{{\"keys\": [], \"pad\": \"{}\"}}", "x".repeat(200_000)).into_bytes(),
                ),
                _ => (404, Vec::new(), Vec::new()),
            }
        }));
        *port.lock().expect("port") = site.port;
        Idp { site, keys }
    }
    fn issuer(&self) -> String {
        self.site.origin()
    }
    fn claims(&self, owner: &str) -> Value {
        json!({"iss": self.issuer(), "aud": AUD, "owner": owner, "sub": "user-1",
               "exp": now_secs() + 300})
    }
}

// ---- a WebSocket client (RFC 6455, client side) ----

struct Handshake {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Handshake {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

struct Ws {
    s: TcpStream,
}

const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

/// Open a handshake to `path` with `headers`; the socket if the server upgraded.
fn open(addr: &str, path: &str, headers: &[(&str, &str)]) -> (Handshake, Option<Ws>) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(HANG_GUARD)).expect("timeout");
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n"
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).expect("write");
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).expect("read head") == 0 {
            break;
        }
        head.push(b[0]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("status line in {text:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    if status == 101 {
        return (
            Handshake {
                status,
                headers,
                body: String::new(),
            },
            Some(Ws { s }),
        );
    }
    // The refusal keeps the connection alive (no `Connection: close`): read its body by length.
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut raw = vec![0u8; len];
    s.read_exact(&mut raw).expect("body");
    let body = String::from_utf8_lossy(&raw).into_owned();
    (
        Handshake {
            status,
            headers,
            body,
        },
        None,
    )
}

impl Ws {
    // The match arms bound each length to its field's width.
    #[allow(clippy::cast_possible_truncation)]
    fn send_frame(&mut self, first: u8, payload: &[u8]) {
        let mask = [0x5a, 0x17, 0xc3, 0x08];
        let mut out = vec![first];
        match payload.len() {
            n if n < 126 => out.push(0x80 | n as u8),
            n if n <= 65535 => {
                out.push(0x80 | 126);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                out.push(0x80 | 127);
                out.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        out.extend_from_slice(&mask);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.s.write_all(&out).expect("send");
    }
    fn send(&mut self, v: &Value) {
        self.send_frame(0x81, v.to_string().as_bytes());
    }
    /// The next frame: (opcode, payload); `None` at the end of the stream.
    fn frame(&mut self) -> Option<(u8, Vec<u8>)> {
        let mut h = [0u8; 2];
        self.s.read_exact(&mut h).ok()?;
        assert_eq!(h[1] & 0x80, 0, "server frames are unmasked");
        let len = match h[1] & 0x7f {
            126 => {
                let mut b = [0u8; 2];
                self.s.read_exact(&mut b).ok()?;
                u64::from(u16::from_be_bytes(b))
            }
            127 => {
                let mut b = [0u8; 8];
                self.s.read_exact(&mut b).ok()?;
                u64::from_be_bytes(b)
            }
            n => u64::from(n),
        };
        let mut p = vec![0u8; usize::try_from(len).expect("len")];
        self.s.read_exact(&mut p).ok()?;
        Some((h[0] & 0x0f, p))
    }
    /// The next text message as JSON, answering pings on the way.
    fn recv(&mut self) -> Value {
        loop {
            let (op, p) = self.frame().expect("a frame");
            match op {
                0x1 => return serde_json::from_slice(&p).expect("JSON text"),
                0x9 => self.send_frame(0x8A, &p),
                0xA => {}
                other => panic!("unexpected opcode {other}: {p:?}"),
            }
        }
    }
    /// The reply to request `id` (notifications before it are kept in `seen`).
    fn reply(&mut self, id: i64, seen: &mut Vec<Value>) -> Value {
        loop {
            let m = self.recv();
            if m["id"] == id {
                return m;
            }
            seen.push(m);
        }
    }
    fn call(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.reply(id, &mut Vec::new())
    }
    /// The close frame's code (frames before it skipped), then the end of the stream.
    fn close_code(&mut self) -> u16 {
        self.close().0
    }
    /// The close frame's code and reason (frames before it kept in `skipped`), then the end of
    /// the stream.
    fn close(&mut self) -> (u16, String) {
        loop {
            let (op, p) = self.frame().expect("a close frame");
            if op == 0x8 {
                let code = u16::from_be_bytes([p[0], p[1]]);
                let reason = String::from_utf8_lossy(&p[2..]).into_owned();
                // The server closes the connection after its close frame.
                let mut rest = Vec::new();
                let _ = self.s.read_to_end(&mut rest);
                return (code, reason);
            }
        }
    }
}

fn bearer_protocol(token: &str) -> String {
    format!("hanzo-dev.v1, bearer.{token}")
}

/// `agents.run` then `runs.subscribe`: every notification until `runs.end`.
fn run_and_follow(ws: &mut Ws, task: &str) -> (i64, Vec<Value>) {
    let r = ws.call(1, "agents.run", json!({"ref": "code", "task": task}));
    let run = r["result"]["run_id"]
        .as_i64()
        .unwrap_or_else(|| panic!("{r}"));
    let mut seen = Vec::new();
    ws.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "runs.subscribe", "params": {"id": run}}));
    let sub = ws.reply(2, &mut seen);
    assert_eq!(sub["result"]["run_id"], run, "{sub}");
    loop {
        let m = ws.recv();
        if m["method"] == "runs.end" {
            assert_eq!(m["params"]["run_id"], run);
            return (run, seen);
        }
        assert_eq!(m["method"], "runs.event", "{m}");
        seen.push(m);
    }
}

// ---- Chromium ----

fn chromium() -> PathBuf {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("chromium is not installed (scripts/setup.sh installs the Debian package)")
}

/// The page's script: open the bridge with the token in the subprotocol, run the code agent,
/// follow its events, and post what happened to `/report` on its own origin.
fn page(bridge: &str, token: &str) -> String {
    format!(
        r#"<!doctype html><html><body><script>
const report = (r) => fetch('/report', {{method: 'POST', body: JSON.stringify(r)}});
const events = [];
let opened = false;
const ws = new WebSocket('ws://{bridge}/v1/bridge', ['hanzo-dev.v1', 'bearer.{token}']);
ws.onopen = () => {{
  opened = true;
  ws.send(JSON.stringify({{jsonrpc: '2.0', id: 1, method: 'agents.run',
                           params: {{ref: 'code', task: 'read the notes', org: 'victim'}}}}));
}};
ws.onmessage = (m) => {{
  const msg = JSON.parse(m.data);
  if (msg.id === 1) {{
    ws.send(JSON.stringify({{jsonrpc: '2.0', id: 2, method: 'runs.subscribe',
                             params: {{id: msg.result.run_id}}}}));
  }} else if (msg.method === 'runs.event') {{
    events.push(msg.params);
  }} else if (msg.method === 'runs.end') {{
    report({{opened, protocol: ws.protocol, run_id: msg.params.run_id, events}});
    ws.close(1000);
  }}
}};
ws.onclose = (e) => {{ if (!opened) report({{opened, code: e.code}}); }};
</script></body></html>"#
    )
}

/// A page that opens the bridge and sends one binary frame; it reports the close code.
fn binary_page(bridge: &str, token: &str) -> String {
    format!(
        r#"<!doctype html><html><body><script>
const report = (r) => fetch('/report', {{method: 'POST', body: JSON.stringify(r)}});
let opened = false;
const ws = new WebSocket('ws://{bridge}/v1/bridge', ['hanzo-dev.v1', 'bearer.{token}']);
ws.onopen = () => {{ opened = true; ws.send(new Uint8Array([0, 1, 2, 3])); }};
ws.onclose = (e) => report({{opened, code: e.code}});
</script></body></html>"#
    )
}

/// A page server whose `/report` answers are collected.
struct Pages {
    site: Site,
    reports: Arc<Mutex<Vec<Value>>>,
    html: Arc<Mutex<String>>,
}

impl Pages {
    fn start() -> Pages {
        let reports = Arc::new(Mutex::new(Vec::new()));
        let html = Arc::new(Mutex::new(String::new()));
        let (r, h) = (reports.clone(), html.clone());
        let site = Site::start(Arc::new(move |method, path, body| match (method, path) {
            ("GET", "/page.html") => (
                200,
                vec![("Content-Type".into(), "text/html".into())],
                h.lock().expect("html").clone().into_bytes(),
            ),
            ("POST", "/report") => {
                let v = serde_json::from_slice(body).unwrap_or(Value::Null);
                r.lock().expect("reports").push(v);
                (204, Vec::new(), Vec::new())
            }
            _ => (404, Vec::new(), Vec::new()),
        }));
        Pages {
            site,
            reports,
            html,
        }
    }
    /// Load the page in a fresh headless Chromium and wait (bounded) for its report.
    fn visit(&self, env: &Env, profile: &str) -> Value {
        let dir = env.path(&format!("chrome/{profile}"));
        std::fs::create_dir_all(&dir).expect("profile");
        let mut cmd = Command::new(chromium());
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--remote-debugging-port=0",
        ])
        .arg(format!("--user-data-dir={}", dir.display()))
        .arg(format!("{}/page.html", self.site.origin()))
        .env("HOME", env.path("home"));
        let (browser, _) = Proc::spawn(cmd, None);
        let deadline = Instant::now() + HANG_GUARD;
        loop {
            if let Some(r) = self.reports.lock().expect("reports").pop() {
                drop(browser);
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "no report from the page; chromium said: {}",
                browser.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn a_chromium_page_on_an_allowed_origin_runs_a_replayed_session_and_another_origin_gets_403() {
    let env = Env::new();
    let idp = Idp::start(&["k1"]);
    let good = Pages::start();
    let evil = Pages::start();
    let origin = good.site.origin();
    let b = start_bridge(
        &env,
        &[
            "--allow-origin",
            &origin,
            "--jwt-issuer",
            &idp.issuer(),
            "--jwt-audience",
            AUD,
        ],
    );
    // The keys came from the identity provider, by discovery, through the broker.
    assert_eq!(idp.site.hits("/.well-known/openid-configuration"), 1);
    assert_eq!(idp.site.hits("/jwks"), 1);
    let token = idp.keys.sign("k1", &idp.claims("acme"));
    *good.html.lock().expect("html") = page(&b.addr, &token);
    *evil.html.lock().expect("html") = page(&b.addr, &token);

    let r = good.visit(&env, "good");
    assert_eq!(r["opened"], true, "{r} {}", b.proc.log());
    assert_eq!(r["protocol"], "hanzo-dev.v1");
    let run = r["run_id"].as_i64().expect("run id");
    let events = r["events"].as_array().expect("events");
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap_or(""))
        .collect();
    assert!(kinds.contains(&"run_started"), "{kinds:?}");
    for k in ["tool_call", "tool_result", "step_finished"] {
        assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
    }
    assert_eq!(kinds.last(), Some(&"run_finished"), "{kinds:?}");
    let finished = &events.last().expect("last")["data"];
    assert_eq!(finished["status"], "succeeded");
    let result = events
        .iter()
        .find(|e| e["event"] == "tool_result")
        .expect("result");
    assert!(result["data"]["preview"]
        .as_str()
        .expect("preview")
        .contains("hello from the workspace"));
    // Exactly the store's rows of the run, in the token owner's store; the org in the params
    // chose nothing.
    let stored = env.store("acme").load_run(RunId(run)).expect("run").events;
    let stored_ids: Vec<i64> = stored.iter().map(|e| e.id).collect();
    let seen_ids: Vec<i64> = events
        .iter()
        .map(|e| e["id"].as_i64().unwrap_or(0))
        .collect();
    assert_eq!(seen_ids, stored_ids);
    assert!(env.store("victim").list_runs(10).expect("runs").is_empty());

    // The same page and token on an origin not on the list: refused before the upgrade.
    let r = evil.visit(&env, "evil");
    assert_eq!(r["opened"], false, "{r}");
    assert_eq!(r["code"], 1006, "{r}");
    let log = b.proc.log_with("GET /v1/bridge 403");
    assert!(log.contains("GET /v1/bridge 101"), "{log}");
    assert!(log.contains("GET /v1/bridge 403"), "{log}");
    // The token never reaches the log.
    assert!(!log.contains(&token), "{log}");

    // A binary frame from the browser closes the connection with 1003.
    *good.html.lock().expect("html") = binary_page(&b.addr, &token);
    let r = good.visit(&env, "binary");
    assert_eq!(r["opened"], true, "{r}");
    assert_eq!(r["code"], 1003, "{r}");
}

#[test]
fn the_handshake_refuses_other_origins_missing_and_forged_tokens_before_the_upgrade() {
    let env = Env::new();
    let idp = Idp::start(&["k1", "k2"]);
    let origin = "http://app.test:8080";
    let b = start_bridge(
        &env,
        &[
            "--allow-origin",
            origin,
            "--jwt-issuer",
            &idp.issuer(),
            "--jwt-audience",
            AUD,
        ],
    );
    let good = idp.keys.sign("k1", &idp.claims("acme"));
    let proto = bearer_protocol(&good);
    let with = |o: Option<&str>, p: Option<&str>| {
        let mut h = Vec::new();
        if let Some(o) = o {
            h.push(("Origin", o));
        }
        if let Some(p) = p {
            h.push(("Sec-WebSocket-Protocol", p));
        }
        open(&b.addr, "/v1/bridge", &h).0
    };
    // Origins: absent, another, a look-alike, the scheme changed.
    for o in [
        None,
        Some("http://evil.test"),
        Some("http://app.test:8080.evil.test"),
        Some("https://app.test:8080"),
        Some("null"),
    ] {
        let h = with(o, Some(&proto));
        assert_eq!(h.status, 403, "{o:?}: {}", h.body);
        assert!(h.body.contains("origin_refused"), "{}", h.body);
        assert!(h.header("sec-websocket-accept").is_none());
    }
    // The origin is fine; the token is missing or forged.
    assert_eq!(with(Some(origin), None).status, 401);
    assert_eq!(
        with(Some(origin), Some(&format!("bearer.{good}"))).status,
        400,
        "a bearer entry without hanzo-dev.v1 cannot be answered"
    );
    let (msg, sig) = good.rsplit_once('.').expect("jws");
    let mut raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(sig)
        .expect("sig");
    raw[3] ^= 0x40;
    let claims = |f: &dyn Fn(&mut Value)| {
        let mut c = idp.claims("acme");
        f(&mut c);
        c
    };
    let forged = [
        ("bad signature", format!("{msg}.{}", b64(&raw))),
        (
            "alg none",
            format!(
                "{}.{}.",
                b64(br#"{"alg":"none","kid":"k1"}"#),
                b64(idp.claims("acme").to_string().as_bytes())
            ),
        ),
        (
            "expired",
            idp.keys
                .sign("k1", &claims(&|c| c["exp"] = json!(now_secs() - 3600))),
        ),
        (
            "wrong audience",
            idp.keys
                .sign("k1", &claims(&|c| c["aud"] = json!("someone-else"))),
        ),
        (
            "signed by k2 but naming k1",
            idp.keys.sign_as("k2", "k1", &idp.claims("acme")),
        ),
    ];
    for (what, jwt) in &forged {
        let h = with(Some(origin), Some(&bearer_protocol(jwt)));
        assert_eq!(h.status, 401, "{what}: {}", h.body);
        assert!(h.header("sec-websocket-accept").is_none(), "{what}");
    }
    // No refetch for any of those: their kid was known (or the header was refused first).
    assert_eq!(idp.site.hits("/jwks"), 1);
    // An unknown kid: one refetch through the broker, still unknown, refused; a second token
    // with an unknown kid right after causes no fetch at all.
    let unknown = idp.keys.sign("k2", &idp.claims("acme"));
    assert_eq!(
        with(Some(origin), Some(&bearer_protocol(&unknown))).status,
        401
    );
    assert_eq!(idp.site.hits("/jwks"), 2);
    let other = idp.keys.sign_as("k2", "k9", &idp.claims("acme"));
    assert_eq!(
        with(Some(origin), Some(&bearer_protocol(&other))).status,
        401
    );
    assert_eq!(idp.site.hits("/jwks"), 2, "refetches are rate-limited");

    // The valid token: upgraded, the subprotocol selected (never the bearer entry), the accept
    // key of RFC 6455 §1.3.
    let (h, ws) = open(
        &b.addr,
        "/v1/bridge",
        &[("Origin", origin), ("Sec-WebSocket-Protocol", &proto)],
    );
    assert_eq!(h.status, 101, "{}", h.body);
    assert_eq!(
        h.header("sec-websocket-accept"),
        Some("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
    );
    assert_eq!(h.header("sec-websocket-protocol"), Some("hanzo-dev.v1"));
    let mut ws = ws.expect("socket");
    assert_eq!(
        ws.call(1, "agents.list", json!({}))["result"]["agents"],
        json!([])
    );
    // The query parameter works too (for clients that cannot set a subprotocol).
    let (h, _) = open(
        &b.addr,
        &format!("/v1/bridge?access_token={good}"),
        &[("Origin", origin)],
    );
    assert_eq!(h.status, 101);
    // Other paths and plain requests are not upgraded.
    assert_eq!(
        open(&b.addr, "/v1/agents", &[("Origin", origin)]).0.status,
        404
    );
    // A connection ends when its token does: `exp` a few seconds from the end of the leeway.
    let short = idp
        .keys
        .sign("k1", &claims(&|c| c["exp"] = json!(now_secs() - 57)));
    let (h, ws) = open(
        &b.addr,
        "/v1/bridge",
        &[
            ("Origin", origin),
            ("Sec-WebSocket-Protocol", &bearer_protocol(&short)),
        ],
    );
    assert_eq!(h.status, 101);
    assert_eq!(ws.expect("socket").close_code(), 1008);
    let log = b.proc.log_with("token expired");
    assert!(log.contains("token expired"), "{log}");
    assert!(log.contains("no key with kid"), "{log}");
    assert!(log.contains("expired"), "{log}");
    assert!(!log.contains(&good), "a token reached the log: {log}");
}

#[test]
fn json_rpc_over_the_socket_keeps_tenancy_and_bad_frames_close_with_their_codes() {
    let env = Env::new();
    let acme = env.token("acme");
    let bob = env.token("bob");
    let b = start_bridge(
        &env,
        &[
            "--allow-no-origin",
            "--max-message",
            "4096",
            "--ping-interval",
            "1",
        ],
    );
    let connect = |tok: &str| {
        let (h, ws) = open(
            &b.addr,
            "/v1/bridge",
            &[("Sec-WebSocket-Protocol", &bearer_protocol(tok))],
        );
        assert_eq!(h.status, 101, "{}", h.body);
        ws.expect("socket")
    };
    let mut a = connect(&acme);
    // Malformed JSON: a parse error, and the connection goes on.
    a.send_frame(0x81, b"{not json");
    let e = a.recv();
    assert_eq!(e["error"]["code"], -32700, "{e}");
    assert_eq!(e["id"], Value::Null);
    a.send(&json!([{"jsonrpc": "2.0", "id": 1, "method": "agents.list"}]));
    assert_eq!(a.recv()["error"]["code"], -32600);
    assert_eq!(a.call(2, "agents.nope", json!({}))["error"]["code"], -32601);
    assert_eq!(a.call(3, "agents.get", json!({}))["error"]["code"], -32602);
    // A fragmented request with a ping in the middle is one request.
    let req = json!({"jsonrpc": "2.0", "id": 4, "method": "agents.create",
                     "params": {"name": "helper", "system_prompt": "help", "org": "bob"}})
    .to_string();
    let (x, y) = req.as_bytes().split_at(20);
    a.send_frame(0x01, x);
    a.send_frame(0x89, b"hi");
    a.send_frame(0x80, y);
    let mut seen = Vec::new();
    let created = a.reply(4, &mut seen);
    assert_eq!(created["result"]["name"], "helper", "{created}");
    // The org in the params chose nothing.
    assert!(env
        .store("acme")
        .get_agent("helper")
        .expect("get")
        .is_some());
    assert!(env.store("bob").get_agent("helper").expect("get").is_none());
    let (run, events) = run_and_follow(&mut a, "read the notes");
    assert_eq!(
        events.last().expect("last")["params"]["event"],
        "run_finished"
    );
    // A clean close is echoed.
    a.send_frame(0x88, &1000u16.to_be_bytes());
    assert_eq!(a.close_code(), 1000);

    // Another org's principal sees none of it: 404s, not someone else's data.
    let mut o = connect(&bob);
    let e = o.call(1, "agents.get", json!({"ref": "helper", "org": "acme"}));
    assert_eq!(e["error"]["data"]["code"], "agent_not_found", "{e}");
    assert_eq!(e["error"]["data"]["status"], 404);
    let e = o.call(2, "runs.get", json!({"id": run}));
    assert_eq!(e["error"]["data"]["code"], "run_not_found", "{e}");
    let e = o.call(3, "runs.subscribe", json!({"id": run}));
    assert_eq!(e["error"]["data"]["code"], "run_not_found", "{e}");
    assert_eq!(
        o.call(4, "agents.list", json!({}))["result"]["agents"],
        json!([])
    );

    // A binary frame closes with 1003.
    o.send_frame(0x82, &[0, 1, 2, 3]);
    assert_eq!(o.close_code(), 1003);
    // A frame over --max-message closes with 1009 (its header says so; no payload is read).
    let mut big = connect(&acme);
    big.send_frame(0x81, "x".repeat(5000).as_bytes());
    assert_eq!(big.close_code(), 1009);
    // An unmasked frame is a protocol error.
    let mut bare = connect(&acme);
    bare.s.write_all(&[0x81, 0x02, b'h', b'i']).expect("write");
    assert_eq!(bare.close_code(), 1002);

    // The server pings; a peer that never answers is dropped.
    let mut silent = connect(&acme);
    let mut pings = 0;
    while let Some((op, _)) = silent.frame() {
        assert_eq!(op, 0x9, "only pings come to a silent peer");
        pings += 1;
    }
    assert!(pings >= 1);
    let log = b.proc.log_with("stopped answering pings");
    assert!(log.contains("stopped answering pings"), "{log}");
}

#[test]
fn keys_rotate_through_the_broker_serve_fetches_by_url_and_a_redirect_is_refused() {
    let env = Env::new();
    let idp = Idp::start(&["k1", "k2"]);
    let b = start_bridge(
        &env,
        &[
            "--allow-no-origin",
            "--jwt-issuer",
            &idp.issuer(),
            "--jwt-audience",
            AUD,
            "--jwks-url",
            &format!("{}/jwks", idp.issuer()),
        ],
    );
    // --jwks-url: no discovery.
    assert_eq!(idp.site.hits("/.well-known/openid-configuration"), 0);
    let status = |tok: &str| {
        open(
            &b.addr,
            "/v1/bridge",
            &[("Sec-WebSocket-Protocol", &bearer_protocol(tok))],
        )
        .0
        .status
    };
    let k1 = idp.keys.sign("k1", &idp.claims("acme"));
    let k2 = idp.keys.sign("k2", &idp.claims("acme"));
    assert_eq!(status(&k1), 101);
    // The issuer rotates: k2 replaces k1. The first k2 token refetches and is accepted.
    idp.keys.publish(&["k2"]);
    assert_eq!(status(&k2), 101, "{}", b.proc.log());
    assert_eq!(idp.site.hits("/jwks"), 2);
    // k1 is gone from the refetched set: refused (and no second refetch so soon).
    assert_eq!(status(&k1), 401);
    assert_eq!(idp.site.hits("/jwks"), 2);
    drop(b);

    // `serve --jwks-url` verifies by the same path.
    let (serve, at) = Proc::spawn(
        env.command(&[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--jwt-issuer",
            &idp.issuer(),
            "--jwt-audience",
            AUD,
            "--jwks-url",
            &format!("{}/jwks", idp.issuer()),
        ]),
        Some("hanzo-dev serve: listening on http://"),
    );
    let mut s = TcpStream::connect(&at).expect("connect");
    write!(
        s,
        "GET /v1/agents HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {k2}\r\n\r\n"
    )
    .expect("write");
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("read");
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp} {}", serve.log());
    drop(serve);

    // A key set URL that redirects, one that is too large, plain http to a remote host: each
    // refused at start (exit 2), and the redirect's target never fetched.
    let before = idp.site.hits("/jwks");
    for (url, why) in [
        (format!("{}/redirect", idp.issuer()), "redirect"),
        (format!("{}/huge", idp.issuer()), "larger than"),
        ("http://keys.example/jwks".to_string(), "refused"),
    ] {
        let out = env
            .command(&[
                "bridge",
                "--listen",
                "127.0.0.1:0",
                "--jwt-issuer",
                &idp.issuer(),
                "--jwt-audience",
                AUD,
                "--jwks-url",
                &url,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .expect("bridge");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{url}: {err}");
        assert!(err.contains(why), "{url}: {err}");
        assert!(!err.contains("listening on"), "{err}");
    }
    assert_eq!(
        idp.site.hits("/jwks"),
        before,
        "the redirect was not followed"
    );
    assert_eq!(idp.site.hits("/redirect"), 1);
}

#[test]
fn revoking_a_serve_token_closes_its_open_subscribed_connection_with_1008() {
    let env = Env::new();
    let (acme, acme_id) = env.token_and_id("acme");
    let (kept, _) = env.token_and_id("acme");
    // The run's command waits on a FIFO the test holds: the run is provably live while the
    // token is revoked (no timing involved).
    let gate = env.path("ws/gate");
    nix::unistd::mkfifo(&gate, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let cassette = env.path("gate.jsonl");
    let turns = [
        ScriptTurn::tool("t1", "bash", json!({"command": "cat gate"})),
        ScriptTurn::text("Done."),
    ];
    std::fs::write(&cassette, anthropic_cassette(&turns)).expect("cassette");
    let b = start_bridge_with(
        &env,
        &cassette.display().to_string(),
        "allow",
        &["--allow-no-origin"],
    );
    let connect = |tok: &str| {
        let (h, ws) = open(
            &b.addr,
            "/v1/bridge",
            &[("Sec-WebSocket-Protocol", &bearer_protocol(tok))],
        );
        assert_eq!(h.status, 101, "{}", h.body);
        ws.expect("socket")
    };
    let mut a = connect(&acme);
    let mut other = connect(&kept);
    let r = a.call(
        1,
        "agents.run",
        json!({"ref": "code", "task": "wait", "approval": "allow"}),
    );
    let run = r["result"]["run_id"]
        .as_i64()
        .unwrap_or_else(|| panic!("{r}"));
    let mut seen = Vec::new();
    a.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "runs.subscribe", "params": {"id": run}}));
    a.reply(2, &mut seen);
    // Subscribed, with the run waiting in its tool call.
    while !seen
        .iter()
        .any(|m| m["method"] == "runs.event" && m["params"]["event"] == "tool_call")
    {
        seen.push(a.recv());
    }
    let out = env
        .command(&["serve", "token", "revoke", &acme_id])
        .output()
        .expect("revoke");
    assert!(out.status.success(), "{out:?}");
    // The connection is closed by the server (policy violation), the reason naming no token;
    // no request of the client's was needed.
    let (code, reason) = a.close();
    assert_eq!(code, 1008);
    assert_eq!(reason, "the token was revoked");
    // The run itself goes on: it is the org's, not the connection's.
    let writer = std::thread::spawn(move || {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&gate)
            .expect("open gate");
        f.write_all(b"released\n").expect("write gate");
    });
    // The same org's other token is untouched: it follows the run to its end.
    other.send(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "runs.subscribe", "params": {"id": run}}),
    );
    let mut events = Vec::new();
    other.reply(1, &mut events);
    loop {
        let m = other.recv();
        if m["method"] == "runs.end" {
            break;
        }
        events.push(m);
    }
    writer.join().expect("writer");
    assert_eq!(
        events.last().expect("events")["params"]["event"],
        "run_finished"
    );
    // A new handshake with the revoked token is refused before the upgrade.
    let (h, ws) = open(
        &b.addr,
        "/v1/bridge",
        &[("Sec-WebSocket-Protocol", &bearer_protocol(&acme))],
    );
    assert_eq!(h.status, 401);
    assert!(ws.is_none());
    let log = b
        .proc
        .log_with(&format!("token {acme_id} of org acme was revoked"));
    assert!(
        log.contains(&format!("token {acme_id} of org acme was revoked")),
        "{log}"
    );
    assert!(!log.contains(&acme) && !log.contains(&kept), "{log}");
}
