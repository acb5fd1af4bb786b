//! The agent loop's link to the lsp worker (`LspLink`) against a real supervisor, lsp worker and
//! sandboxed scripted server: the `lsp_servers` table is sent once to each worker process, and a
//! worker killed and restarted gets it again before it is asked anything (answered from its
//! default table, a `.fake` file would have no server). And the end of a run: the tree's stop
//! reaches the server as `shutdown` and `exit`, not as a kill.
//!
//! Bounds (`within`) only keep a broken build from hanging the suite; no test asserts on time.

use hanzo_dev::agent::deadline::Deadlines;
use hanzo_dev::agent::lsp::LspLink;
use hanzo_dev::secrets::StartEnv;
use hanzo_dev::startup::supervisor_config;
use hanzo_dev::tree::Supervisor;
use hanzo_ipc::Role;
use serde_json::json;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within the hang guard"))
}

/// The table: the tests' scripted server (a static pull provider) for `*.fake`, and nothing else.
fn table(root: &Path) -> String {
    table_with(root, &[])
}

/// [`table`], the server given `extra` arguments after its mode.
fn table_with(root: &Path, extra: &[&str]) -> String {
    let script = root.join("fake_lsp.py");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../workers/lsp/tests/fixtures/fake_lsp.py"),
        &script,
    )
    .expect("copy the scripted server");
    let mut args = vec![script.display().to_string(), "pull".to_string()];
    args.extend(extra.iter().map(|a| a.to_string()));
    json!({"fake": {
        "command": "/usr/bin/python3",
        "args": args,
        "files": ["**/*.fake"],
        "language_id": "fake",
    }})
    .to_string()
}

/// A tree with the lsp worker alone, over `root`; the run directory is kept for the caller.
async fn lsp_tree(root: &Path) -> (Supervisor, hanzo_dev::startup::RunDir) {
    let env = StartEnv {
        vars: std::env::vars()
            .filter(|(k, _)| k == "PATH" || k == "HOME")
            .collect(),
    };
    let abi = hanzo_sandbox::doctor::probe_kernel().landlock_abi;
    let (mut cfg, run) = supervisor_config(Some(root.to_path_buf()), &env, abi).expect("config");
    cfg.exe = PathBuf::from(env!("CARGO_BIN_EXE_hanzo-dev"));
    cfg.roles = Some(vec![Role::Lsp]);
    let sup = within("start", Supervisor::start(cfg))
        .await
        .expect("start");
    within("ready", sup.wait_ready()).await.expect("ready");
    (sup, run)
}

/// Every file called `name` under `dir`.
fn find(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(find(&path, name));
        } else if entry.file_name() == name {
            found.push(path);
        }
    }
    found
}

/// The end of a run stops the tree: the lsp worker's channel ends, the worker asks each server
/// to `shutdown` and then `exit` (LSP's own end of a session) and exits. It used to be killed
/// with its servers, which never heard either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_tree_sends_each_language_server_shutdown_and_exit() {
    let ws = tempfile::tempdir().expect("workspace");
    let root = ws.path().canonicalize().expect("root");
    std::fs::write(root.join("app.fake"), "x = 1\ny = ERR\n").expect("write");
    let (sup, run) = lsp_tree(&root).await;
    let link = LspLink::new(&sup.lsp, table_with(&root, &["0", "lifecycle"]));
    let first = within(
        "diagnostics",
        link.call_tool("lsp_diagnostics", r#"{"path": "app.fake"}"#),
    )
    .await;
    assert!(first.output.contains("ERR"), "{}", first.output);
    let worker = sup.lsp.info().expect("running").pid;
    // The server runs and has heard nothing of an end yet.
    let logs = find(run.path(), "lifecycle.log");
    assert!(logs.is_empty(), "{logs:?}");

    within("shutdown", sup.shutdown()).await;
    let logs = find(run.path(), "lifecycle.log");
    assert_eq!(logs.len(), 1, "one server, one log: {logs:?}");
    let heard = std::fs::read_to_string(&logs[0]).expect("read the log");
    assert_eq!(heard, "shutdown\nexit\n");
    // And the worker exited by itself (reaped by the tree, not left behind).
    assert!(
        !Path::new(&format!("/proc/{worker}")).exists(),
        "the lsp worker {worker} is still running"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_table_reaches_each_worker_process_once_and_a_restarted_one_again() {
    let ws = tempfile::tempdir().expect("workspace");
    let root = ws.path().canonicalize().expect("root");
    std::fs::write(root.join("app.fake"), "x = 1\ny = ERR\n").expect("write");
    let (sup, _run) = lsp_tree(&root).await;
    let link = LspLink::new(&sup.lsp, table(&root));
    assert_eq!(link.configured_generation(), 0);

    let diagnostics = r#"{"path": "app.fake"}"#;
    let first = within("first call", link.call_tool("lsp_diagnostics", diagnostics)).await;
    assert!(!first.is_error, "{first:?}");
    assert!(first.output.contains("ERR"), "{}", first.output);
    let before = sup.lsp.info().expect("running");
    assert_eq!(link.configured_generation(), before.generation);
    // More calls to the same process: it stays the configured one.
    within("configure", link.configure(&Deadlines::default()))
        .await
        .expect("configure");
    let again = within(
        "second call",
        link.call_tool("lsp_diagnostics", diagnostics),
    )
    .await;
    assert_eq!(again.output, first.output);
    assert_eq!(link.configured_generation(), before.generation);

    let rc = std::process::Command::new("kill")
        .args(["-9", &before.pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(rc.success());
    within("restart", sup.lsp.next_ready(before.generation))
        .await
        .expect("a new lsp worker");
    std::fs::write(root.join("app.fake"), "x = 1\ny = 2\nz = ERR\n").expect("write");
    let after = within(
        "call after restart",
        link.call_tool("lsp_diagnostics", diagnostics),
    )
    .await;
    assert!(!after.is_error, "{after:?}");
    assert!(after.output.contains("ERR"), "{}", after.output);
    let now = sup.lsp.info().expect("running again");
    assert_ne!(now.pid, before.pid);
    assert_eq!(link.configured_generation(), now.generation);
    within("shutdown", sup.shutdown()).await;
}
