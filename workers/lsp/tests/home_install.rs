//! Language servers installed under the user's home (issue 15): the sandbox opens their
//! installation prefix read-only, nothing else of `$HOME`, and refuses a server whose prefix
//! would be `$HOME` itself. Real processes under the real sandbox (a local runner confining
//! each server with its complete profile), in a fake home with secrets in it.

mod common;

use common::{link_tree, registry, test_client_options, write, Events};
use hanzo_ipc::Role;
use hanzo_lsp::prefix::{grants_for, PrefixRules};
use hanzo_lsp::{
    LanguageServers, LanguageServersConfig, LspError, LspServerEntry, Registry, RunnerSpawner,
    ServerEvent, Severity,
};
use hanzo_policy::profile::ProfileContext;
use hanzo_tools::runner::Runner;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const CANARY: &str = "canary-home-5d2e-must-not-leak";

/// A fake `$HOME` with secrets (`.ssh/id_rsa`, `.aws/credentials`), a workspace inside it and a
/// run directory beside it.
struct Home {
    _root: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
    run: PathBuf,
}

impl Home {
    fn new() -> Home {
        let root = tempfile::Builder::new()
            .prefix("hanzo-lsp-home")
            .tempdir()
            .expect("tempdir");
        let home = root.path().join("home");
        let ws = home.join("src/project");
        let run = root.path().join("run");
        for d in [&ws, &run, &home.join(".ssh"), &home.join(".aws")] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        std::fs::write(home.join(".ssh/id_rsa"), CANARY).expect("key");
        std::fs::write(home.join(".aws/credentials"), CANARY).expect("credentials");
        Home {
            home: home.canonicalize().expect("home"),
            ws: ws.canonicalize().expect("ws"),
            run: run.canonicalize().expect("run"),
            _root: root,
        }
    }

    fn search_path(&self) -> Vec<PathBuf> {
        vec![
            self.home.join(".local/bin"),
            self.home.join(".npm-global/bin"),
            "/usr/bin".into(),
            "/bin".into(),
        ]
    }

    fn rules(&self) -> PrefixRules {
        PrefixRules {
            home: Some(self.home.clone()),
            workspace: self.ws.clone(),
            hidden: vec![self.home.join(".config/hanzo")],
            search_path: self.search_path(),
        }
    }

    /// What `hanzo-dev` does: the prefixes of the table's servers are granted to the lsp role
    /// (its launcher nests every server's profile in one with the same grants), and the servers
    /// start through the sandboxed runner.
    fn servers(&self, registry: Registry, events: &Events) -> (LanguageServers, Vec<PathBuf>) {
        let (granted, _) = grants_for(&registry, &self.rules());
        let ctx = ProfileContext {
            workspace: Some(self.ws.clone()),
            run_dir: Some(self.run.clone()),
            hidden: vec![self.home.join(".config/hanzo")],
            toolchains: granted.clone(),
            ..ProfileContext::default()
        };
        let path = std::env::join_paths(self.search_path())
            .expect("PATH")
            .to_string_lossy()
            .into_owned();
        let runner = Arc::new(Runner::local(Role::Lsp, ctx.clone()));
        let spawner =
            RunnerSpawner::new(runner, &self.run, Some(path)).with_prefixes(granted.clone());
        let mut config = LanguageServersConfig::new(&self.ws);
        config.registry = registry;
        config.client = test_client_options();
        config.search_path = self.search_path();
        config.granted_prefixes = Some(granted.clone());
        config.hidden = ctx.hidden.clone();
        let servers =
            LanguageServers::new(config, Arc::new(spawner), events.sink()).expect("servers");
        (servers, granted)
    }

    /// The hostile probe server installed as a package of its own under `rel` (a directory in
    /// the home), reached through `~/.local/bin/hostile-lsp` (a link into it).
    fn install_hostile(&self, rel: &str) -> PathBuf {
        let dir = self.home.join(rel);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let script = dir.join("hostile_lsp.py");
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hostile_lsp.py"),
            &script,
        )
        .expect("copy the server");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        script
    }

    fn hostile_registry(&self, command: &str) -> Registry {
        registry(vec![(
            "hostile",
            LspServerEntry {
                command: Some(command.into()),
                args: Some(vec![
                    "probe".into(),
                    self.home.join(".ssh/id_rsa").display().to_string(),
                    self.home.join(".aws").display().to_string(),
                ]),
                files: Some(vec!["**/*.evil".into()]),
                ..LspServerEntry::default()
            },
        )])
    }
}

#[tokio::test]
async fn a_server_under_home_runs_from_its_prefix_and_cannot_read_the_homes_secrets() {
    let h = Home::new();
    let script = h.install_hostile(".local/lib/hostile-lsp");
    std::fs::create_dir_all(h.home.join(".local/bin")).expect("bin");
    std::os::unix::fs::symlink(&script, h.home.join(".local/bin/hostile-lsp")).expect("link");
    let events = Events::default();
    let (servers, granted) = h.servers(h.hostile_registry("hostile-lsp"), &events);
    // The link is followed: the package directory is opened, not `~/.local/bin`, not `$HOME`.
    assert_eq!(granted, vec![h.home.join(".local/lib/hostile-lsp")]);
    let file = write(&h.ws, "a.evil", "x\n");
    let d = servers
        .diagnostics(&file)
        .await
        .expect("it starts and answers");
    let said: Vec<&str> = d.diagnostics.iter().map(|d| d.message.as_str()).collect();
    let outcome = |what: &str| {
        said.iter()
            .find(|m| m.starts_with(&format!("{what}: ")))
            .unwrap_or_else(|| panic!("no {what} probe in {said:?}"))
            .to_string()
    };
    assert!(outcome("read").starts_with("read: denied"), "{said:?}");
    assert!(
        outcome("write-outside").starts_with("write-outside: denied"),
        "{said:?}"
    );
    assert!(!said.iter().any(|m| m.contains(CANARY)), "{said:?}");
    assert!(!h.home.join(".aws/pwned.txt").exists());
    // The start records the prefix it was given.
    let started: Vec<Vec<PathBuf>> = events
        .list()
        .into_iter()
        .filter_map(|e| match e {
            ServerEvent::Started { prefixes, .. } => Some(prefixes),
            _ => None,
        })
        .collect();
    assert_eq!(started, vec![granted]);
    servers.shutdown().await;
}

#[tokio::test]
async fn a_server_placed_directly_in_home_is_refused_naming_the_path() {
    let h = Home::new();
    let script = h.install_hostile("");
    let registry = h.hostile_registry(&script.display().to_string());
    let (granted, refused) = grants_for(&registry, &h.rules());
    assert!(granted.is_empty(), "{granted:?}");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].1.prefix, h.home);
    assert_eq!(refused[0].1.why, "is the home directory itself");
    // The worker (which is not told HOME) refuses it too, before it runs anything.
    let events = Events::default();
    let (servers, _) = h.servers(registry, &events);
    let file = write(&h.ws, "a.evil", "x\n");
    match servers.diagnostics(&file).await {
        Err(LspError::Refused { server, detail }) => {
            assert_eq!(server, "hostile");
            assert!(detail.contains(&h.home.display().to_string()), "{detail}");
            assert!(detail.contains(".ssh"), "{detail}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(
        events.count(|e| matches!(e, ServerEvent::Started { .. })),
        0
    );
    // Later calls get the same verdict without a start.
    let again = servers.diagnostics(&file).await.expect_err("still refused");
    assert!(
        again.to_string().contains(&h.home.display().to_string()),
        "{again}"
    );
    servers.shutdown().await;
}

#[tokio::test]
async fn a_prefix_not_granted_at_the_start_is_refused() {
    let h = Home::new();
    let script = h.install_hostile(".local/lib/hostile-lsp");
    let events = Events::default();
    // Granted for another table: nothing under the home.
    let (servers, granted) = {
        let (s, g) = h.servers(registry(vec![]), &events);
        drop(s);
        let mut config = LanguageServersConfig::new(&h.ws);
        config.registry = h.hostile_registry(&script.display().to_string());
        config.client = test_client_options();
        config.granted_prefixes = Some(g.clone());
        let runner = Arc::new(Runner::local(
            Role::Lsp,
            ProfileContext {
                workspace: Some(h.ws.clone()),
                run_dir: Some(h.run.clone()),
                ..ProfileContext::default()
            },
        ));
        let spawner = RunnerSpawner::new(runner, &h.run, None);
        (
            LanguageServers::new(config, Arc::new(spawner), events.sink()).expect("servers"),
            g,
        )
    };
    assert!(granted.is_empty());
    let file = write(&h.ws, "a.evil", "x\n");
    let err = servers.diagnostics(&file).await.expect_err("refused");
    let text = err.to_string();
    assert!(
        text.contains(&h.home.join(".local/lib/hostile-lsp").display().to_string())
            && text.contains("not opened"),
        "{text}"
    );
    servers.shutdown().await;
}

/// `test-deps/lsp/node_modules` as an npm prefix in the home (`npm install -g --prefix
/// ~/.npm-global`): packages under `lib/node_modules`, the command a link in `bin`.
fn install_pyright_globally(home: &Path) -> PathBuf {
    let src = common::repo_root().join("test-deps/lsp/node_modules");
    common::lsp_bin_dir();
    let modules = home.join(".npm-global/lib/node_modules");
    link_tree(&src, &modules).expect("link the packages");
    let bin = home.join(".npm-global/bin");
    std::fs::create_dir_all(&bin).expect("bin");
    std::os::unix::fs::symlink(
        "../lib/node_modules/pyright/langserver.index.js",
        bin.join("pyright-langserver"),
    )
    .expect("link the command");
    modules
}

#[tokio::test]
async fn real_pyright_installed_under_home_diagnoses_through_the_sandbox() {
    let h = Home::new();
    let modules = install_pyright_globally(&h.home);
    let events = Events::default();
    let (servers, granted) = h.servers(
        registry(vec![(
            "pyright",
            LspServerEntry {
                disabled: Some(false),
                ..LspServerEntry::default()
            },
        )]),
        &events,
    );
    assert_eq!(granted, vec![modules]);
    let app = write(
        &h.ws,
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
    servers.shutdown().await;
}

/// The probe server's report on a file of its language: one line per probe.
async fn probe(servers: &LanguageServers, ws: &Path) -> Vec<String> {
    let file = write(ws, "a.evil", "x\n");
    let d = servers
        .diagnostics(&file)
        .await
        .expect("it starts and answers");
    d.diagnostics.into_iter().map(|d| d.message).collect()
}

fn line<'a>(said: &'a [String], what: &str) -> &'a str {
    said.iter()
        .find(|m| m.starts_with(&format!("{what}: ")))
        .unwrap_or_else(|| panic!("no {what} probe in {said:?}"))
}

fn chmod_x(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

#[tokio::test]
async fn a_program_in_a_shared_bin_directory_is_opened_alone() {
    let h = Home::new();
    // The server copied (not linked) into `~/.local/bin`, beside another program of the user's
    // that holds a secret.
    let script = h.install_hostile(".local/bin");
    let server = h.home.join(".local/bin/hostile-lsp");
    std::fs::rename(&script, &server).expect("rename");
    let neighbour = h.home.join(".local/bin/deploy-tool");
    std::fs::write(&neighbour, format!("#!/bin/sh\nTOKEN={CANARY}\n")).expect("neighbour");
    chmod_x(&neighbour);
    let registry = registry(vec![(
        "hostile",
        LspServerEntry {
            command: Some("hostile-lsp".into()),
            args: Some(vec![
                "probe".into(),
                neighbour.display().to_string(),
                h.home.join(".local/bin").display().to_string(),
            ]),
            files: Some(vec!["**/*.evil".into()]),
            ..LspServerEntry::default()
        },
    )]);
    let events = Events::default();
    let (servers, granted) = h.servers(registry, &events);
    assert_eq!(granted, vec![server.clone()]);
    let said = probe(&servers, &h.ws).await;
    assert!(line(&said, "read").starts_with("read: denied"), "{said:?}");
    assert!(
        line(&said, "write-outside").starts_with("write-outside: denied"),
        "{said:?}"
    );
    assert!(!said.iter().any(|m| m.contains(CANARY)), "{said:?}");
    servers.shutdown().await;
}

#[tokio::test]
async fn a_rustup_proxy_runs_its_toolchains_program_with_that_toolchain_first_on_path() {
    let h = Home::new();
    // rustup's layout: `~/.cargo/bin/<tool>` links to `rustup`; the toolchain has the program.
    let cargo_bin = h.home.join(".cargo/bin");
    std::fs::create_dir_all(&cargo_bin).expect("mkdir");
    std::fs::write(cargo_bin.join("rustup"), "not run").expect("rustup");
    chmod_x(&cargo_bin.join("rustup"));
    std::os::unix::fs::symlink("rustup", cargo_bin.join("hostile-lsp")).expect("proxy");
    let triple = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    let toolchain = h.home.join(format!(".rustup/toolchains/stable-{triple}"));
    let script = h.install_hostile(&format!(".rustup/toolchains/stable-{triple}/bin"));
    std::fs::rename(&script, toolchain.join("bin/hostile-lsp")).expect("rename");
    std::fs::write(
        h.home.join(".rustup/settings.toml"),
        format!("version = \"12\"\ndefault_toolchain = \"stable-{triple}\"\n"),
    )
    .expect("settings");
    std::fs::write(h.home.join(".rustup/settings-secret"), CANARY).expect("canary");
    // What the supervisor does (`prepare_servers`): the proxy found on PATH is resolved to the
    // toolchain's program, and the table sent to the worker names that.
    let mut search = h.search_path();
    search.insert(0, cargo_bin.clone());
    let found =
        hanzo_lsp::registry::resolve_program("hostile-lsp", &search, &h.ws).expect("on PATH");
    let env = hanzo_lsp::shims::ShimEnv {
        home: Some(h.home.clone()),
        search_path: search,
        ..Default::default()
    };
    let resolved = hanzo_lsp::shims::resolve(&found, &h.ws, &env)
        .expect("resolved")
        .expect("a proxy");
    assert_eq!(resolved.program, toolchain.join("bin/hostile-lsp"));
    let registry = h.hostile_registry(&resolved.program.display().to_string());
    let events = Events::default();
    let (servers, granted) = h.servers(registry, &events);
    // The toolchain alone: not `~/.cargo/bin`, not the rest of `~/.rustup`.
    assert_eq!(granted, vec![toolchain.clone()]);
    let said = probe(&servers, &h.ws).await;
    assert!(line(&said, "read").starts_with("read: denied"), "{said:?}");
    let path = line(&said, "path");
    assert!(
        path.starts_with(&format!("path: {}:", toolchain.join("bin").display())),
        "{path}"
    );
    assert!(!said.iter().any(|m| m.contains(CANARY)), "{said:?}");
    servers.shutdown().await;
}
