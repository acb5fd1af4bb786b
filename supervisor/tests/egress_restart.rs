//! A run's egress survives a worker restart: the tree with real workers and an egress control
//! pair, the broker configured for the tools worker's forwarder, a `bash` command fetching from a
//! real HTTP server on the host's loopback through it — then the tools worker is killed; the pair
//! is remade, both workers restart, `keep_configured` tells the new broker the new forwarder's
//! pid, and the next command's fetch is served and recorded again.
//!
//! Bounds (`within`) only keep a broken build from hanging the suite; no test asserts on time.

mod common;

use common::www::StaticSite;
use hanzo_dev::secrets::StartEnv;
use hanzo_dev::startup::supervisor_config;
use hanzo_dev::tree::Supervisor;
use hanzo_ipc::roles::broker::{EgressOutcome, EgressRecord};
use hanzo_ipc::roles::tools::{Request, Response, ToolCall};
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within the hang guard"))
}

async fn fetch(sup: &Supervisor, port: u16) -> String {
    let command = format!(
        "export NO_PROXY= no_proxy=; curl -sS --max-time 20 http://127.0.0.1:{port}/index.txt"
    );
    let call = ToolCall {
        id: "f".into(),
        name: "bash".into(),
        input: serde_json::json!({ "command": command }).to_string(),
    };
    match within("bash", sup.tools.call(Request::Run(call))).await {
        Ok(Response::Result(r)) => r.output,
        other => panic!("unexpected {other:?}"),
    }
}

async fn next_allowed(rx: &mut tokio::sync::mpsc::UnboundedReceiver<EgressRecord>) -> EgressRecord {
    loop {
        let r = within("an egress record", rx.recv())
            .await
            .expect("records channel open");
        if matches!(r.outcome, EgressOutcome::Allowed { .. }) {
            return r;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_tools_worker_restarts_the_new_broker_serves_the_new_forwarder() {
    if let Err(why) = hanzo_sandbox::doctor::probe_kernel().tier_b() {
        panic!("this test needs tier B (user namespaces), which this machine lacks: {why}");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let www = dir.path().join("www");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&www).expect("mkdir");
    std::fs::create_dir_all(&ws).expect("mkdir");
    std::fs::write(www.join("index.txt"), "hello-after-restart\n").expect("index");
    let server = StaticSite::serve(&www);
    let vars: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k == "PATH" || k == "HOME" || k == "LANG")
        .collect();
    let abi = hanzo_sandbox::doctor::probe_kernel().landlock_abi;
    let (mut cfg, _run_dir) =
        supervisor_config(Some(ws.clone()), &StartEnv { vars }, abi).expect("config");
    cfg.exe = PathBuf::from(env!("CARGO_BIN_EXE_hanzo-dev"));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    cfg.egress_records = Some(tx);
    let sup = within("start", Supervisor::start(cfg))
        .await
        .expect("supervisor");
    within("ready", sup.wait_ready()).await.expect("workers");
    let allow = vec![format!("127.0.0.1:{}", server.port)];
    let first = within("configure", hanzo_dev::egress::configure_run(&sup, &allow))
        .await
        .expect("configured");
    let generations = hanzo_dev::egress::generations(&sup);
    let keep = hanzo_dev::egress::keep_configured(&sup, &allow, generations);
    let body = async {
        assert!(fetch(&sup, server.port)
            .await
            .contains("hello-after-restart"));
        assert_eq!(next_allowed(&mut rx).await.port, server.port);

        let tools = sup.tools.info().expect("tools running");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(tools.pid).expect("pid")),
            nix::sys::signal::SIGKILL,
        )
        .expect("kill the tools worker");
        let again = within("tools restart", sup.tools.next_ready(tools.generation))
            .await
            .expect("restarted");
        // The pair was remade: the broker restarted with the tools worker.
        within("broker restart", sup.broker.next_ready(generations.1))
            .await
            .expect("broker restarted");
        let forwarder = hanzo_dev::egress::forwarder_pid(again.pid).expect("a new forwarder");
        assert_ne!(forwarder, first);
        // Connections made before the new broker is configured wait in the control socket and
        // are served once it is (they carry the forwarder's credentials from the start).
        assert!(
            fetch(&sup, server.port)
                .await
                .contains("hello-after-restart"),
            "not served after the restart"
        );
        let r = next_allowed(&mut rx).await;
        assert_eq!(r.port, server.port);
        // The new channel numbers its records from 0 again.
        assert_eq!(r.id, 0);
    };
    tokio::select! {
        never = keep => match never {},
        () = body => {}
    }
    within("shutdown", sup.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_started_without_a_control_socket_refuses_to_serve_egress() {
    let ws = tempfile::tempdir().expect("ws");
    let vars: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k == "PATH" || k == "HOME" || k == "LANG")
        .collect();
    let abi = hanzo_sandbox::doctor::probe_kernel().landlock_abi;
    let (mut cfg, _run_dir) =
        supervisor_config(Some(ws.path().to_path_buf()), &StartEnv { vars }, abi).expect("config");
    cfg.exe = PathBuf::from(env!("CARGO_BIN_EXE_hanzo-dev"));
    // No `egress_records`: no pair, no fd 6 in either worker.
    let sup = within("start", Supervisor::start(cfg))
        .await
        .expect("supervisor");
    within("ready", sup.wait_ready()).await.expect("workers");
    let e = within(
        "configure",
        hanzo_dev::egress::configure_run(&sup, &["pypi.org".to_string()]),
    )
    .await
    .expect_err("nothing to serve");
    // Without a control end the tools worker started no forwarder (its pid 2 is then the command
    // launcher): whatever pid the supervisor names, the broker has no socket to serve.
    assert!(e.to_string().contains("no egress control socket"), "{e}");
    let reply = within(
        "configure the broker directly",
        sup.broker
            .call(hanzo_ipc::roles::broker::Request::ConfigureEgress(
                hanzo_ipc::roles::broker::EgressSettings {
                    allow: vec!["pypi.org".into()],
                    forwarder_pid: 1,
                    ..Default::default()
                },
            )),
    )
    .await;
    let err = reply.expect_err("refused").to_string();
    assert!(err.contains("no egress control socket"), "{err}");
    within("shutdown", sup.shutdown()).await;
}
