//! What confinement costs a command, all measured in the same run:
//!
//! - `plain/true`: fork+exec of `/bin/true` (and `plain/sh-c-true`: through `/bin/sh -c`, which is
//!   what the `bash` tool runs);
//! - `worker/bash-true`: the `bash` tool running `/bin/true` in a warm, confined tools worker,
//!   request to result over the real channel (target ≤ 1.3× plain);
//! - `oneshot-tier-a/true` (and `oneshot-tier-b/true`): a fresh process that confines itself with the tools profile and runs
//!   `/bin/true` — the `hanzo-dev sandbox -- /bin/true` path (this bench binary stands in for
//!   `hanzo-dev`; set `HANZO_DEV_BIN` to also time the real binary's `sandbox` subcommand, with
//!   the default isolation and in tier A) (target ≤ plain + 3 ms);
//! - `bwrap/true`: `bwrap --ro-bind / / --unshare-all /bin/true`, when bubblewrap is installed.
//!
//! A custom main (`harness = false`): the bench re-executes itself as the worker and as the
//! one-shot sandbox, which need fresh single-threaded processes.

use criterion::Criterion;
use hanzo_ipc::channel::Client;
use hanzo_ipc::frame::DEFAULT_MAX_FRAME;
use hanzo_ipc::roles::tools::{Request, Response, ToolCall, ToolsProtocol};
use hanzo_ipc::transport;
use hanzo_ipc::Role;
use hanzo_policy::isolation::IsolationMode;
use hanzo_policy::profile::CommandLimits;
use hanzo_policy::profile::ProfileContext;
use hanzo_sandbox::spawn::{configure_command, ChildSetup};
use hanzo_tools::oneshot::{self, OneShot};
use hanzo_worker::WorkerOptions;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const WORKER: &str = "__worker";
const ONESHOT: &str = "__sandbox";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some(WORKER) => {
            let code = match WorkerOptions::parse(&args[2..]) {
                Ok(opts) => hanzo_tools::worker_main(opts),
                Err(_) => 64,
            };
            std::process::exit(code);
        }
        Some(ONESHOT) => {
            let isolation = if args[2] == "b" {
                IsolationMode::Strict
            } else {
                IsolationMode::TierA
            };
            let spec = OneShot {
                isolation,
                workspace: PathBuf::from(&args[3]),
                allow_write: Vec::new(),
                allow_read: Vec::new(),
                extra_env: Vec::new(),
                limits: CommandLimits::default(),
                hidden: Vec::new(),
                allow_dangerous_workspace: false,
                command: args[4..].iter().map(Into::into).collect(),
            };
            let code = oneshot::run(&spec).unwrap_or_else(|e| {
                eprintln!("{e}");
                101
            });
            std::process::exit(code);
        }
        _ => {}
    }
    let mut c = Criterion::default().configure_from_args();
    benches(&mut c);
    c.final_summary();
}

fn run_ok(cmd: &mut Command) {
    let status = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("spawn");
    assert!(status.success(), "{cmd:?}: {status}");
}

fn benches(c: &mut Criterion) {
    let ws = tempfile::tempdir().expect("ws");
    let run = tempfile::tempdir().expect("run");
    let ws_path = ws.path().canonicalize().expect("canon");
    let exe = std::env::current_exe().expect("exe");

    let mut g = c.benchmark_group("exec");
    g.bench_function("plain/true", |b| {
        b.iter(|| run_ok(&mut Command::new("/bin/true")))
    });
    g.bench_function("plain/sh-c-true", |b| {
        b.iter(|| run_ok(Command::new("/bin/sh").args(["-c", "/bin/true"])))
    });

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let (client, _child) = rt.block_on(start_worker(&exe, &ws_path, run.path()));
    let call = Request::Run(ToolCall {
        id: "b".into(),
        name: "bash".into(),
        input: r#"{"command": "/bin/true"}"#.into(),
    });
    g.bench_function("worker/bash-true", |b| {
        b.iter(|| {
            let r = rt.block_on(client.call(call.clone())).expect("call");
            assert!(matches!(r, Response::Result(ref t) if !t.is_error), "{r:?}");
        })
    });

    g.bench_function("oneshot-tier-a/true", |b| {
        b.iter(|| {
            run_ok(
                Command::new(&exe)
                    .args([ONESHOT, "a"])
                    .arg(&ws_path)
                    .arg("/bin/true"),
            )
        })
    });
    if hanzo_sandbox::doctor::probe_kernel().tier_b().is_ok() {
        g.bench_function("oneshot-tier-b/true", |b| {
            b.iter(|| {
                run_ok(
                    Command::new(&exe)
                        .args([ONESHOT, "b"])
                        .arg(&ws_path)
                        .arg("/bin/true"),
                )
            })
        });
    }
    if let Ok(bin) = std::env::var("HANZO_DEV_BIN") {
        // The default isolation (tier B where the kernel allows it), and tier A: against the
        // stand-in above, what the real binary adds (its start, the command line, the settings).
        for (name, isolation) in [
            ("hanzo-dev-sandbox/true", None),
            ("hanzo-dev-sandbox-tier-a/true", Some("tier-a")),
        ] {
            g.bench_function(name, |b| {
                b.iter(|| {
                    let mut command = Command::new(&bin);
                    command.arg("sandbox");
                    if let Some(isolation) = isolation {
                        command.args(["--isolation", isolation]);
                    }
                    command.arg("--workspace").arg(&ws_path);
                    run_ok(command.args(["--", "/bin/true"]))
                })
            });
        }
    }
    if Path::new("/usr/bin/bwrap").exists() {
        g.bench_function("bwrap/true", |b| {
            b.iter(|| {
                run_ok(Command::new("/usr/bin/bwrap").args([
                    "--ro-bind",
                    "/",
                    "/",
                    "--unshare-all",
                    "/bin/true",
                ]))
            })
        });
    }
    g.finish();
}

async fn start_worker(
    exe: &Path,
    ws: &Path,
    run: &Path,
) -> (
    Client<ToolsProtocol, hanzo_ipc::socket::WriteHalf>,
    tokio::process::Child,
) {
    let opts = WorkerOptions {
        role: Role::Tools,
        ctx: ProfileContext {
            workspace: Some(ws.to_path_buf()),
            config_dir: None,
            run_dir: Some(run.canonicalize().expect("canon")),
            ..ProfileContext::default()
        },
        isolation: Default::default(),
        fault: None,
    };
    let (ours, theirs) = transport::socketpair().expect("socketpair");
    let mut cmd = Command::new(exe);
    cmd.arg(WORKER)
        .args(opts.to_args())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdin(Stdio::null())
        .current_dir("/");
    configure_command(
        &mut cmd,
        ChildSetup {
            fds: vec![(theirs.as_raw_fd(), transport::SUPERVISOR_FD)],
            rlimits: hanzo_policy::profile::profile_for(Role::Tools, &opts.ctx).rlimits,
            parent_pid: i32::try_from(std::process::id()).expect("pid"),
            new_session: true,
            join_cgroups: Vec::new(),
        },
    );
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    let child = cmd.spawn().expect("spawn the worker");
    drop(theirs);
    let (mut reader, mut writer) = transport::split(ours, DEFAULT_MAX_FRAME).expect("stream");
    transport::supervisor_handshake(&mut reader, &mut writer, Role::Tools)
        .await
        .expect("handshake");
    let (client, _events, _end) = Client::<ToolsProtocol, _>::start(reader, writer);
    (client, child)
}
