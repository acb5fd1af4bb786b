//! Test support shared by the integration tests, the example and the bench: where the real peers
//! are (`test-deps/mcp`), a plain tokio spawner for stdio servers, a minimal HTTP/1.1 client over
//! a loopback `TcpStream`, and scripted peers (an in-process stdio server, a local HTTP server).
#![allow(dead_code)]

pub mod http1;
pub mod scripted;

use hanzo_mcp::{
    BoxFuture, ServerExit, ServerIo, ServerProcess, ServerSpawner, SpawnError, StdioSpec,
};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// The repository root (two levels above this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the crate lives at workers/mcp")
        .to_path_buf()
}

/// `test-deps/mcp/node_modules`; fails (never skips) when the peers are not installed.
pub fn node_modules() -> PathBuf {
    let dir = repo_root().join("test-deps/mcp/node_modules");
    let marker = dir.join("@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        marker.is_file() && dir.join("node/bin/node").is_file(),
        "the MCP test peers are missing ({} not found): run ./scripts/setup.sh",
        marker.display()
    );
    dir
}

/// Node 22 from the `node` npm package (the machine's own node may be older).
pub fn node() -> String {
    node_modules().join("node/bin/node").display().to_string()
}

fn base_env() -> Vec<(String, String)> {
    let bin = node_modules().join("node/bin").display().to_string();
    vec![
        ("PATH".into(), format!("{bin}:/usr/bin:/bin")),
        ("HOME".into(), std::env::temp_dir().display().to_string()),
    ]
}

/// `server-everything` over stdio.
pub fn everything_stdio() -> StdioSpec {
    StdioSpec {
        command: node(),
        args: vec![
            node_modules()
                .join("@modelcontextprotocol/server-everything/dist/index.js")
                .display()
                .to_string(),
            "stdio".into(),
        ],
        env: base_env(),
        cwd: None,
    }
}

/// `server-filesystem` over stdio, allowed `dir`.
pub fn filesystem_stdio(dir: &Path) -> StdioSpec {
    StdioSpec {
        command: node(),
        args: vec![
            node_modules()
                .join("@modelcontextprotocol/server-filesystem/dist/index.js")
                .display()
                .to_string(),
            dir.display().to_string(),
        ],
        env: base_env(),
        cwd: None,
    }
}

/// Starts servers as plain child processes (the worker uses the sandboxed runner instead).
pub struct PlainSpawner;

struct PlainProcess(tokio::process::Child);

impl ServerProcess for PlainProcess {
    fn wait(&mut self) -> BoxFuture<'_, ServerExit> {
        Box::pin(async move {
            use std::os::unix::process::ExitStatusExt;
            match self.0.wait().await {
                Ok(s) => ServerExit {
                    code: s.code(),
                    signal: s.signal(),
                },
                Err(_) => ServerExit {
                    code: None,
                    signal: None,
                },
            }
        })
    }

    fn kill(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let _ = self.0.start_kill();
        })
    }
}

impl ServerSpawner for PlainSpawner {
    fn spawn<'a>(&'a self, spec: &'a StdioSpec) -> BoxFuture<'a, Result<ServerIo, SpawnError>> {
        Box::pin(async move {
            let mut cmd = tokio::process::Command::new(&spec.command);
            cmd.args(&spec.args)
                .env_clear()
                .envs(spec.env.iter().cloned())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true);
            if let Some(cwd) = &spec.cwd {
                cmd.current_dir(cwd);
            }
            let mut child = cmd.spawn().map_err(|e| SpawnError(e.to_string()))?;
            let stdin = child.stdin.take().expect("piped");
            let stdout = child.stdout.take().expect("piped");
            let stderr = child.stderr.take().expect("piped");
            Ok(ServerIo {
                stdin: Box::new(stdin),
                stdout: Box::new(stdout),
                stderr: Some(Box::new(stderr)),
                process: Box::new(PlainProcess(child)),
            })
        })
    }
}

/// A free loopback port (bound, then released for the server to take).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// `server-everything` in streamable-HTTP mode on 127.0.0.1, killed on drop.
pub struct EverythingHttp {
    pub child: tokio::process::Child,
    pub url: String,
}

impl EverythingHttp {
    pub async fn start() -> EverythingHttp {
        use tokio::io::{AsyncBufReadExt, BufReader};
        let port = free_port();
        let spec = everything_stdio();
        let mut cmd = tokio::process::Command::new(&spec.command);
        cmd.arg(&spec.args[0])
            .arg("streamableHttp")
            .env_clear()
            .envs(spec.env.iter().cloned())
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("start server-everything streamableHttp");
        let stderr = child.stderr.take().expect("piped");
        let mut lines = BufReader::new(stderr).lines();
        let ready = tokio::time::timeout(Duration::from_secs(60), async {
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("server-everything: {line}");
                if line.contains("listening on port") {
                    return true;
                }
            }
            false
        })
        .await;
        assert_eq!(ready, Ok(true), "server-everything did not start listening");
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("server-everything: {line}");
            }
        });
        EverythingHttp {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }
}

/// Wait (bounded, so a bug fails instead of hanging) until `f` holds.
pub async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..600 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for: {what}");
}
