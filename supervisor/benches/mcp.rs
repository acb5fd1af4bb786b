//! The MCP bridge against the same server driven directly, in the same run:
//!
//! - `mcp_call`: one `tools/call` (server-everything's `echo`) from the supervisor through the
//!   mcp worker to the sandboxed stdio server and back, against an `McpClient` in this process
//!   talking to a plain (unsandboxed) instance of the same server;
//! - `mcp_start`: one server from nothing to `initialized` (and shut down again): configured
//!   through the worker, started sandboxed by its launcher, against the same client connecting
//!   to a plainly spawned instance.
//!
//! `cargo bench -p hanzo-dev --bench mcp` (needs `./scripts/setup.sh` for the server).

use criterion::{criterion_group, Criterion};
use hanzo_dev::secrets::StartEnv;
use hanzo_dev::startup::supervisor_config;
use hanzo_dev::tree::Supervisor;
use hanzo_ipc::roles::mcp::{
    McpCallOutcome, McpConfig, McpFilesystem, McpServerConfig, McpServerProfile, McpServerState,
    McpToolCall, McpTransport, Request, Response,
};
use hanzo_ipc::Role;
use hanzo_mcp::{
    BoxFuture, CallOptions, CallOutcome, ClientOptions, McpClient, ServerExit, ServerIo,
    ServerProcess, ServerSpawner, SpawnError, StdioSpec,
};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

struct PlainSpawner;
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
            let mut child = tokio::process::Command::new(&spec.command)
                .args(&spec.args)
                .env_clear()
                .envs(spec.env.iter().cloned())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| SpawnError(e.to_string()))?;
            let stdin = child.stdin.take().expect("piped");
            let stdout = child.stdout.take().expect("piped");
            Ok(ServerIo {
                stdin: Box::new(stdin),
                stdout: Box::new(stdout),
                stderr: None,
                process: Box::new(PlainProcess(child)),
            })
        })
    }
}

/// A workspace holding hard links of the peers (a server reads nothing outside it and the
/// system), the tree with the mcp worker, and the plain spec of the same server.
struct Setup {
    ws: tempfile::TempDir,
    _run: hanzo_dev::startup::RunDir,
    sup: Supervisor,
}

fn node_modules() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../test-deps/mcp/node_modules");
    assert!(
        dir.join("@modelcontextprotocol/server-everything/dist/index.js")
            .is_file(),
        "the MCP test peers are missing: run ./scripts/setup.sh"
    );
    dir
}

impl Setup {
    async fn start() -> Setup {
        let ws = tempfile::tempdir().expect("workspace");
        std::fs::create_dir(ws.path().join(".peers")).expect("mkdir");
        let ok = std::process::Command::new("cp")
            .arg("-al")
            .arg(node_modules())
            .arg(ws.path().join(".peers/node_modules"))
            .status()
            .expect("cp");
        assert!(ok.success());
        let env = StartEnv {
            vars: std::env::vars().filter(|(k, _)| k == "PATH").collect(),
        };
        let abi = hanzo_sandbox::doctor::probe_kernel().landlock_abi;
        let (mut cfg, run) =
            supervisor_config(Some(ws.path().to_path_buf()), &env, abi).expect("cfg");
        cfg.exe = PathBuf::from(env!("CARGO_BIN_EXE_hanzo-dev"));
        cfg.roles = Some(vec![Role::Mcp]);
        let sup = Supervisor::start(cfg).await.expect("start");
        sup.wait_ready().await.expect("ready");
        Setup { ws, _run: run, sup }
    }

    fn spec(&self) -> StdioSpec {
        let peers = self.ws.path().join(".peers/node_modules");
        StdioSpec {
            command: peers.join("node/bin/node").display().to_string(),
            args: vec![
                peers
                    .join("@modelcontextprotocol/server-everything/dist/index.js")
                    .display()
                    .to_string(),
                "stdio".into(),
            ],
            env: vec![
                ("PATH".into(), "/usr/bin:/bin".into()),
                ("HOME".into(), std::env::temp_dir().display().to_string()),
            ],
            cwd: None,
        }
    }

    fn config(&self) -> McpConfig {
        let spec = self.spec();
        McpConfig {
            servers: vec![McpServerConfig {
                name: "everything".into(),
                transport: McpTransport::Stdio {
                    command: spec.command,
                    args: spec.args,
                    env: Vec::new(),
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
            }],
            roots: vec![self.ws.path().display().to_string()],
            max_result_bytes: 1 << 20,
            max_message_bytes: 8 << 20,
        }
    }

    async fn configure(&self) {
        match self
            .sup
            .mcp
            .call_within(Request::Configure(self.config()), Duration::from_secs(60))
            .await
        {
            Ok(Response::Servers(s)) if s[0].state == McpServerState::Ready => {}
            other => panic!("configure: {other:?}"),
        }
    }
}

fn echo_call() -> Request {
    Request::CallTool(McpToolCall {
        server: "everything".into(),
        tool: "echo".into(),
        arguments_json: r#"{"message":"ping"}"#.into(),
        timeout_ms: None,
    })
}

fn benches_mcp(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let setup = rt.block_on(Setup::start());
    rt.block_on(setup.configure());
    let direct = rt.block_on(async {
        McpClient::connect_stdio(
            "plain",
            &setup.spec(),
            &PlainSpawner,
            ClientOptions::default(),
        )
        .await
        .expect("plain server")
    });

    let mut g = c.benchmark_group("mcp_call");
    g.bench_function("bridge", |b| {
        b.iter(|| {
            rt.block_on(async {
                match setup.sup.mcp.call(echo_call()).await {
                    Ok(Response::Call(McpCallOutcome::Allowed { .. })) => {}
                    other => panic!("bridge call: {other:?}"),
                }
            })
        })
    });
    g.bench_function("direct", |b| {
        b.iter(|| {
            rt.block_on(async {
                match direct
                    .call_tool("echo", json!({"message": "ping"}), CallOptions::default())
                    .await
                {
                    Ok(CallOutcome::Allowed(_)) => {}
                    other => panic!("direct call: {other:?}"),
                }
            })
        })
    });
    g.finish();

    let mut g = c.benchmark_group("mcp_start");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(20));
    g.bench_function("sandboxed_through_worker", |b| {
        // Each Configure first shuts the previous instance down, as the plain case does.
        b.iter(|| rt.block_on(setup.configure()))
    });
    g.bench_function("plain", |b| {
        b.iter(|| {
            rt.block_on(async {
                let c = McpClient::connect_stdio(
                    "plain",
                    &setup.spec(),
                    &PlainSpawner,
                    ClientOptions::default(),
                )
                .await
                .expect("plain server");
                c.shutdown().await;
            })
        })
    });
    g.finish();
    rt.block_on(async {
        direct.shutdown().await;
        setup.sup.shutdown().await;
    });
}

criterion_group!(benches, benches_mcp);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
