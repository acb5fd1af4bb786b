//! Scripted peers: an in-process stdio "server" (an async script over in-memory pipes, behind the
//! same `ServerSpawner` seam the real runner uses) and a local HTTP/1.1 server on 127.0.0.1 whose
//! answers a script writes byte for byte.

use hanzo_mcp::{
    BoxFuture, ServerExit, ServerIo, ServerProcess, ServerSpawner, SpawnError, StdioSpec,
};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use tokio::io::{
    AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, DuplexStream, ReadHalf, WriteHalf,
};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The server side of a scripted stdio server.
pub struct ScriptIo {
    lines: tokio::io::Lines<BufReader<DuplexStream>>,
    pub out: DuplexStream,
    pub err: DuplexStream,
    /// Every message the client sent, in order.
    pub seen: Arc<Mutex<Vec<Value>>>,
}

impl ScriptIo {
    /// The next message from the client; `None` when it closed stdin.
    pub async fn recv(&mut self) -> Option<Value> {
        let line = self.lines.next_line().await.ok()??;
        let v: Value = serde_json::from_str(&line).expect("the client sends JSON lines");
        self.seen.lock().unwrap().push(v.clone());
        Some(v)
    }

    /// The next request with `method`, skipping other messages.
    pub async fn expect(&mut self, method: &str) -> Value {
        loop {
            let v = self
                .recv()
                .await
                .unwrap_or_else(|| panic!("stdin closed before {method}"));
            if v["method"] == method {
                return v;
            }
        }
    }

    /// Read (and record) until the client closes stdin, then return: the "process" exits 0.
    pub async fn drain(&mut self) {
        while self.recv().await.is_some() {}
    }

    pub async fn send(&mut self, v: Value) {
        let mut line = serde_json::to_vec(&v).unwrap();
        line.push(b'\n');
        let _ = self.out.write_all(&line).await;
    }

    pub async fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.out.write_all(bytes).await
    }

    pub async fn reply(&mut self, request: &Value, result: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": request["id"], "result": result}))
            .await;
    }

    /// Answer `initialize` (with `version`) and wait for `notifications/initialized`.
    pub async fn handshake_with(&mut self, version: &str, capabilities: Value) -> Value {
        let init = self.expect("initialize").await;
        self.reply(
            &init,
            json!({"protocolVersion": version, "capabilities": capabilities,
                   "serverInfo": {"name": "scripted", "version": "1"}}),
        )
        .await;
        self.expect("notifications/initialized").await;
        init
    }

    pub async fn handshake(&mut self) -> Value {
        self.handshake_with("2025-11-25", json!({"tools": {"listChanged": true}}))
            .await
    }
}

pub type Script = Arc<dyn Fn(ScriptIo) -> BoxFuture<'static, ()> + Send + Sync>;

/// A spawner whose "process" is `script` running in this process.
pub struct ScriptedSpawner {
    pub script: Script,
    pub seen: Arc<Mutex<Vec<Value>>>,
    pub killed: Arc<Mutex<bool>>,
}

impl ScriptedSpawner {
    pub fn new<F, Fut>(f: F) -> ScriptedSpawner
    where
        F: Fn(ScriptIo) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        ScriptedSpawner {
            script: Arc::new(move |io| Box::pin(f(io))),
            seen: Arc::default(),
            killed: Arc::default(),
        }
    }
}

struct ScriptProcess {
    exit: watch::Receiver<Option<ServerExit>>,
    task: tokio::task::AbortHandle,
    exit_tx: Arc<watch::Sender<Option<ServerExit>>>,
    killed: Arc<Mutex<bool>>,
}

impl ServerProcess for ScriptProcess {
    fn wait(&mut self) -> BoxFuture<'_, ServerExit> {
        Box::pin(async move {
            let r = self.exit.wait_for(Option::is_some).await;
            r.map(|e| e.expect("checked")).unwrap_or(ServerExit {
                code: None,
                signal: None,
            })
        })
    }

    fn kill(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            *self.killed.lock().unwrap() = true;
            self.task.abort();
            self.exit_tx.send_if_modified(|e| {
                if e.is_none() {
                    *e = Some(ServerExit {
                        code: None,
                        signal: Some(9),
                    });
                    true
                } else {
                    false
                }
            });
        })
    }
}

impl ServerSpawner for ScriptedSpawner {
    fn spawn<'a>(&'a self, _spec: &'a StdioSpec) -> BoxFuture<'a, Result<ServerIo, SpawnError>> {
        Box::pin(async move {
            let (client_in, server_in) = tokio::io::duplex(64 * 1024);
            let (server_out, client_out) = tokio::io::duplex(64 * 1024);
            let (server_err, client_err) = tokio::io::duplex(64 * 1024);
            let io = ScriptIo {
                lines: BufReader::new(server_in).lines(),
                out: server_out,
                err: server_err,
                seen: self.seen.clone(),
            };
            let (exit_tx, exit_rx) = watch::channel(None);
            let exit_tx = Arc::new(exit_tx);
            let done = exit_tx.clone();
            let fut = (self.script)(io);
            let task = tokio::spawn(async move {
                fut.await;
                done.send_if_modified(|e| {
                    if e.is_none() {
                        *e = Some(ServerExit {
                            code: Some(0),
                            signal: None,
                        });
                        true
                    } else {
                        false
                    }
                });
            });
            Ok(ServerIo {
                stdin: Box::new(client_in),
                stdout: Box::new(client_out),
                stderr: Some(Box::new(client_err)),
                process: Box::new(ScriptProcess {
                    exit: exit_rx,
                    task: task.abort_handle(),
                    exit_tx,
                    killed: self.killed.clone(),
                }),
            })
        })
    }
}

pub fn spec() -> StdioSpec {
    StdioSpec {
        command: "scripted".into(),
        args: vec![],
        env: vec![],
        cwd: None,
    }
}

/// One request as the scripted HTTP server read it.
#[derive(Debug, Clone)]
pub struct SeenRequest {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl SeenRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

pub type HttpScript = Arc<dyn Fn(SeenRequest) -> BoxFuture<'static, Vec<u8>> + Send + Sync>;

/// A local HTTP server answering each request with the bytes its script returns, then closing.
pub struct ScriptedHttp {
    pub url: String,
    pub seen: Arc<Mutex<Vec<SeenRequest>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ScriptedHttp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ScriptedHttp {
    pub async fn start<F, Fut>(f: F) -> ScriptedHttp
    where
        F: Fn(SeenRequest) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Vec<u8>> + Send + 'static,
    {
        let script: HttpScript = Arc::new(move |r| Box::pin(f(r)));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let seen: Arc<Mutex<Vec<SeenRequest>>> = Arc::default();
        let seen2 = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let script = script.clone();
                let seen = seen2.clone();
                tokio::spawn(async move {
                    let (r, mut w): (ReadHalf<_>, WriteHalf<_>) = tokio::io::split(stream);
                    let mut r = BufReader::new(r);
                    let mut line = String::new();
                    if r.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    let mut parts = line.split_whitespace();
                    let method = parts.next().unwrap_or("").to_string();
                    let path = parts.next().unwrap_or("").to_string();
                    let mut headers = Vec::new();
                    loop {
                        let mut h = String::new();
                        if r.read_line(&mut h).await.unwrap_or(0) == 0 || h.trim().is_empty() {
                            break;
                        }
                        if let Some((k, v)) = h.split_once(':') {
                            headers.push((k.trim().to_string(), v.trim().to_string()));
                        }
                    }
                    let len = headers
                        .iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                        .and_then(|(_, v)| v.parse().ok())
                        .unwrap_or(0usize);
                    let mut body = vec![0u8; len];
                    if r.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    let req = SeenRequest {
                        method,
                        path,
                        headers,
                        body,
                    };
                    seen.lock().unwrap().push(req.clone());
                    let answer = script(req).await;
                    let _ = w.write_all(&answer).await;
                    let _ = w.shutdown().await;
                });
            }
        });
        ScriptedHttp { url, seen, task }
    }

    pub fn requests(&self) -> Vec<SeenRequest> {
        self.seen.lock().unwrap().clone()
    }
}

/// A complete HTTP/1.1 response with a Content-Length body.
pub fn response(status: u16, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

/// A response whose body is read to the end of the connection (no length: can be "truncated").
pub fn response_to_end(status: u16, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status} X\r\nConnection: close\r\n");
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

pub fn json_response(v: &Value, headers: &[(&str, &str)]) -> Vec<u8> {
    let mut h = vec![("Content-Type", "application/json")];
    h.extend_from_slice(headers);
    response(200, &h, v.to_string().as_bytes())
}
