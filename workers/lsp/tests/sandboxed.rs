//! Language servers started as the lsp worker starts them: through the one command runner
//! (`hanzo_tools::runner::Runner`, here a local runner confining each server with its complete
//! profile — the launcher nests the same profile in its own), under [`server_profile`]. Real
//! pyright, and a hostile "language server" configured like any `lsp_servers` entry that tries to
//! read a secret, write, open sockets, flood and hang.

mod common;

use common::{eventually, link_tree, quick_restarts, registry, test_client_options, write, Events};
use hanzo_ipc::Role;
use hanzo_lsp::{
    LanguageServers, LanguageServersConfig, LspError, LspServerEntry, Position, Registry,
    RunnerSpawner, Severity,
};
use hanzo_policy::profile::ProfileContext;
use hanzo_tools::runner::Runner;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const CANARY: &str = "canary-7f3a91-must-not-leak";

/// A workspace, a run directory and a directory outside both with a secret in it.
struct Sandbox {
    _root: tempfile::TempDir,
    ws: PathBuf,
    run: PathBuf,
    outside: PathBuf,
}

impl Sandbox {
    fn new() -> Sandbox {
        let root = tempfile::Builder::new()
            .prefix("hanzo-lsp-sandboxed")
            .tempdir()
            .expect("tempdir");
        let ws = root.path().join("ws");
        let run = root.path().join("run");
        let outside = root.path().join("outside");
        for d in [&ws, &run, &outside] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        std::fs::write(outside.join("secret.txt"), CANARY).expect("canary");
        let ws = ws.canonicalize().expect("ws");
        Sandbox {
            _root: root,
            ws,
            run: run.canonicalize().expect("run"),
            outside: outside.canonicalize().expect("outside"),
        }
    }

    fn ctx(&self) -> ProfileContext {
        ProfileContext {
            workspace: Some(self.ws.clone()),
            run_dir: Some(self.run.clone()),
            ..ProfileContext::default()
        }
    }

    fn servers(
        &self,
        registry: Registry,
        events: &Events,
        tune: impl FnOnce(&mut LanguageServersConfig),
    ) -> LanguageServers {
        let runner = Arc::new(Runner::local(Role::Lsp, self.ctx()));
        let spawner = RunnerSpawner::new(runner, &self.run, None);
        let mut config = LanguageServersConfig::new(&self.ws);
        config.registry = registry;
        config.client = test_client_options();
        config.restart = quick_restarts();
        tune(&mut config);
        LanguageServers::new(config, Arc::new(spawner), events.sink()).expect("servers")
    }
}

fn hostile(sb: &Sandbox, mode: &str) -> Registry {
    // The script is part of the workspace (what the server may read); the interpreter is the
    // system's.
    let script = sb.ws.join("hostile_lsp.py");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hostile_lsp.py"),
        &script,
    )
    .expect("copy the hostile server");
    registry(vec![(
        "hostile",
        LspServerEntry {
            command: Some("/usr/bin/python3".into()),
            args: Some(vec![
                script.display().to_string(),
                mode.into(),
                sb.outside.join("secret.txt").display().to_string(),
                sb.outside.display().to_string(),
            ]),
            files: Some(vec!["**/*.evil".into()]),
            ..LspServerEntry::default()
        },
    )])
}

#[tokio::test]
async fn a_hostile_server_cannot_read_a_secret_write_or_open_a_socket() {
    let sb = Sandbox::new();
    let events = Events::default();
    let servers = sb.servers(hostile(&sb, "probe"), &events, |_| {});
    let file = write(&sb.ws, "a.evil", "x\n");
    let d = servers.diagnostics(&file).await.expect("diagnostics");
    let said: Vec<&str> = d.diagnostics.iter().map(|d| d.message.as_str()).collect();
    let outcome = |what: &str| {
        said.iter()
            .find(|m| m.starts_with(&format!("{what}: ")))
            .unwrap_or_else(|| panic!("no {what} probe in {said:?}"))
            .to_string()
    };
    assert!(outcome("read").starts_with("read: denied"), "{said:?}");
    assert!(!said.iter().any(|m| m.contains(CANARY)), "{said:?}");
    assert!(
        outcome("write-workspace").starts_with("write-workspace: denied"),
        "{said:?}"
    );
    assert!(
        outcome("write-outside").starts_with("write-outside: denied"),
        "{said:?}"
    );
    assert!(outcome("inet").starts_with("inet: denied"), "{said:?}");
    assert!(outcome("unix").starts_with("unix: denied"), "{said:?}");
    // Its environment is the four variables the spawner sets, nothing of ours.
    assert_eq!(outcome("env"), "env: HOME,LANG,PATH,TMPDIR", "{said:?}");
    assert!(!sb.ws.join("pwned.txt").exists());
    assert!(!sb.outside.join("pwned.txt").exists());
    servers.shutdown().await;
}

#[tokio::test]
async fn a_sandboxed_server_flooding_output_is_cut_off_and_restarted() {
    let sb = Sandbox::new();
    let events = Events::default();
    let servers = sb.servers(hostile(&sb, "flood"), &events, |c| {
        c.client.conn.flood = hanzo_lsp::conn::FloodLimits {
            burst_bytes: 256 << 10,
            bytes_per_second: 16 << 10,
        };
    });
    let file = write(&sb.ws, "f.evil", "x\n");
    let err = servers
        .hover(&file, Position::new(1, 1))
        .await
        .expect_err("flooded");
    assert!(
        matches!(&err, LspError::Flooded { .. } | LspError::Protocol { .. }),
        "{err}"
    );
    // The next call starts it again (and it floods again).
    let again = servers.hover(&file, Position::new(1, 1)).await;
    assert!(again.is_err());
    eventually("a second start", || servers.status()[0].starts >= 2).await;
    servers.shutdown().await;
}

/// Bytes without a newline, never ending: the framing's garbage budget ends the connection while
/// the server is still writing, a protocol error rather than the request's timeout.
#[tokio::test]
async fn a_sandboxed_server_writing_without_newlines_is_cut_off() {
    let sb = Sandbox::new();
    let events = Events::default();
    let servers = sb.servers(hostile(&sb, "rawflood"), &events, |_| {});
    let file = write(&sb.ws, "f.evil", "x\n");
    let err = servers
        .hover(&file, Position::new(1, 1))
        .await
        .expect_err("cut off");
    assert!(
        matches!(&err, LspError::Protocol { detail, .. } if detail.contains("not a message")),
        "{err}"
    );
    servers.shutdown().await;
}

#[tokio::test]
async fn a_sandboxed_server_that_hangs_times_out_and_is_replaced() {
    let sb = Sandbox::new();
    let events = Events::default();
    let servers = sb.servers(hostile(&sb, "hang"), &events, |c| {
        c.client.request_timeout = Duration::from_millis(300);
    });
    let file = write(&sb.ws, "h.evil", "x\n");
    for _ in 0..3 {
        let err = servers
            .hover(&file, Position::new(1, 1))
            .await
            .expect_err("hangs");
        assert!(matches!(err, LspError::Timeout { .. }), "{err}");
    }
    eventually("killed after three timeouts", || {
        !matches!(servers.status()[0].state, hanzo_lsp::ServerState::Running)
    })
    .await;
    // A new server answers the next request (and hangs again).
    let err = servers
        .hover(&file, Position::new(1, 1))
        .await
        .expect_err("hangs again");
    assert!(matches!(err, LspError::Timeout { .. }), "{err}");
    assert_eq!(servers.status()[0].starts, 2);
    servers.shutdown().await;
}

/// The pids of the processes whose command line contains every one of `needles`.
fn pids_with_cmdline(needles: &[&str]) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let line = String::from_utf8_lossy(&raw).replace('\0', " ");
        if needles.iter().all(|n| line.contains(n)) {
            found.push(pid);
        }
    }
    found
}

/// A sandboxed server killed with SIGKILL while a request is in flight (found the way an
/// operator would: by its command line, since the worker signals only through the keeper): the
/// request fails with a typed error naming the signal, and the next request starts a new server,
/// which answers.
#[tokio::test]
async fn a_sandboxed_server_killed_mid_request_is_replaced() {
    let sb = Sandbox::new();
    let events = Events::default();
    let servers = Arc::new(sb.servers(hostile(&sb, "hang"), &events, |_| {}));
    let file = write(&sb.ws, "f.evil", "x\n");
    let s = servers.clone();
    let (f, p) = (file.clone(), Position::new(1, 1));
    let request = tokio::spawn(async move { s.hover(&f, p).await });
    eventually("the hover is in flight", || {
        servers.status().iter().any(|s| s.pending_requests > 0)
    })
    .await;
    let marker = sb.outside.join("secret.txt").display().to_string();
    let pids = pids_with_cmdline(&["hostile_lsp.py", "hang", &marker]);
    assert_eq!(pids.len(), 1, "one server process: {pids:?}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pids[0]),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill -9");
    let err = request.await.expect("task").expect_err("the server died");
    assert!(
        matches!(&err, LspError::ServerExited { server, detail } if server == "hostile" && detail.contains("signal 9")),
        "{err}"
    );
    // The hanging server answers everything but hovers: a definition request gets an answer
    // from a new process.
    let defs = servers
        .definition(&file, Position::new(1, 1))
        .await
        .expect("a new server answers");
    assert!(defs.is_empty(), "{defs:?}");
    assert_eq!(servers.status()[0].starts, 2);
    let now = pids_with_cmdline(&["hostile_lsp.py", "hang", &marker]);
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(now[0], pids[0]);
    servers.shutdown().await;
}

/// `test-deps/lsp/node_modules` inside the workspace (hard links where the filesystem allows,
/// else copies): a project with its language servers installed locally, the layout a sandboxed
/// server can read (the workspace and the system directories only).
pub fn install_servers_into(ws: &Path) {
    let src = common::repo_root().join("test-deps/lsp/node_modules");
    common::lsp_bin_dir();
    link_tree(&src, &ws.join("node_modules")).expect("link node_modules into the workspace");
}

#[tokio::test]
async fn real_pyright_in_the_sandbox_diagnoses_and_sees_the_fix() {
    let sb = Sandbox::new();
    install_servers_into(&sb.ws);
    let events = Events::default();
    let servers = sb.servers(
        registry(vec![(
            "pyright",
            LspServerEntry {
                command: Some("node_modules/.bin/pyright-langserver".into()),
                ..LspServerEntry::default()
            },
        )]),
        &events,
        |_| {},
    );
    let app = write(
        &sb.ws,
        "app.py",
        "def f(x: int) -> int:\n    return x\n\n\nf(\"no\")\n",
    );
    let d = servers.diagnostics(&app).await.expect("diagnostics");
    let errors: Vec<_> = d
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .collect();
    assert_eq!(errors.len(), 1, "{d:?}");
    assert_eq!(errors[0].code.as_deref(), Some("reportArgumentType"));
    assert_eq!(errors[0].range.start, Position::new(5, 3));
    std::fs::write(&app, "def f(x: int) -> int:\n    return x\n\n\nf(1)\n").expect("fix");
    servers.file_changed(&app).await.expect("changed");
    let d = servers.diagnostics(&app).await.expect("after the fix");
    assert!(
        d.diagnostics.iter().all(|d| d.severity != Severity::Error),
        "{d:?}"
    );
    servers.shutdown().await;
}
