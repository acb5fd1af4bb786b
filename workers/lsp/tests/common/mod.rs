//! Set-up shared by the integration tests: the real servers from `test-deps/lsp`, the scripted
//! fake server, a workspace in a temp directory, and an event recorder.
#![allow(dead_code)]

use hanzo_lsp::{
    ClientOptions, DiagnosticsWait, LanguageServers, LanguageServersConfig, LspServerEntry,
    Registry, RestartPolicy, ServerEvent, TokioSpawner,
};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `test-deps/lsp/node_modules/.bin`, which must exist: the tests use the real servers.
pub fn lsp_bin_dir() -> PathBuf {
    let dir = repo_root().join("test-deps/lsp/node_modules/.bin");
    for exe in ["pyright-langserver", "typescript-language-server"] {
        assert!(
            dir.join(exe).exists(),
            "{} is missing: run ./scripts/setup.sh to install the language servers of test-deps/lsp",
            dir.join(exe).display()
        );
    }
    dir
}

pub fn fake_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake_lsp.py")
}

/// Records every event except logs (which are kept apart).
#[derive(Clone, Default)]
pub struct Events {
    pub all: Arc<Mutex<Vec<ServerEvent>>>,
    pub logs: Arc<Mutex<Vec<hanzo_lsp::ServerLog>>>,
}

impl Events {
    pub fn sink(&self) -> hanzo_lsp::EventSink {
        let me = self.clone();
        Arc::new(move |e| match e {
            ServerEvent::Log(l) => me.logs.lock().expect("logs").push(l),
            other => me.all.lock().expect("events").push(other),
        })
    }

    pub fn list(&self) -> Vec<ServerEvent> {
        self.all.lock().expect("events").clone()
    }

    pub fn count(&self, pred: impl Fn(&ServerEvent) -> bool) -> usize {
        self.list().iter().filter(|e| pred(e)).count()
    }
}

/// Options short enough for tests, but no test depends on them being short.
pub fn test_client_options() -> ClientOptions {
    ClientOptions {
        request_timeout: Duration::from_secs(60),
        wait: DiagnosticsWait {
            max_wait: Duration::from_secs(60),
            settle_min: Duration::from_millis(300),
            settle_max: Duration::from_secs(10),
            quiet_min: Duration::from_millis(500),
        },
        ..ClientOptions::default()
    }
}

pub fn quick_restarts() -> RestartPolicy {
    RestartPolicy {
        base: Duration::from_millis(10),
        max: Duration::from_millis(50),
        ..RestartPolicy::default()
    }
}

/// Language servers over `root` with the real servers of test-deps first on the search path.
pub fn real_servers(root: &Path, events: &Events) -> LanguageServers {
    let mut config = LanguageServersConfig::new(root);
    config.search_path.insert(0, lsp_bin_dir());
    config.client = test_client_options();
    config.restart = quick_restarts();
    LanguageServers::new(config, Arc::new(TokioSpawner::new()), events.sink())
        .expect("language servers")
}

/// A registry whose only server is the fake one, for `*.fake` files.
pub fn fake_registry(mode: &str, delay_ms: u64, settings: Option<Value>) -> Registry {
    let mut entries = BTreeMap::new();
    entries.insert(
        "fake".to_string(),
        LspServerEntry {
            command: Some("python3".into()),
            args: Some(vec![
                fake_script().to_string_lossy().into_owned(),
                mode.into(),
                delay_ms.to_string(),
            ]),
            files: Some(vec!["**/*.fake".into()]),
            language_id: Some("fake".into()),
            settings,
            ..LspServerEntry::default()
        },
    );
    for builtin in ["pyright", "typescript", "rust-analyzer"] {
        entries.insert(
            builtin.to_string(),
            LspServerEntry {
                disabled: Some(true),
                ..LspServerEntry::default()
            },
        );
    }
    Registry::with_settings(&entries).expect("registry")
}

pub fn fake_config(root: &Path, mode: &str, delay_ms: u64) -> LanguageServersConfig {
    let mut config = LanguageServersConfig::new(root);
    config.registry = fake_registry(mode, delay_ms, None);
    config.client = test_client_options();
    config.restart = quick_restarts();
    config
}

pub fn start(config: LanguageServersConfig, events: &Events) -> LanguageServers {
    LanguageServers::new(config, Arc::new(TokioSpawner::new()), events.sink())
        .expect("language servers")
}

pub fn write(root: &Path, rel: &str, text: &str) -> PathBuf {
    let p = root.join(rel);
    if let Some(dir) = p.parent() {
        std::fs::create_dir_all(dir).expect("mkdir");
    }
    std::fs::write(&p, text).expect("write");
    p
}

pub fn workspace() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("hanzo-lsp-test")
        .tempdir()
        .expect("tempdir")
}

/// Waits (bounded) until `cond` holds; panics with `what` otherwise. For states reached by
/// another process, never for timing.
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..2000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never happened: {what}");
}

pub fn signal(pid: u32, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid).expect("a pid fits pid_t")),
        sig,
    )
    .expect("signal");
}

pub fn process_exists(pid: u32) -> bool {
    // A zombie still "exists" for kill(0); read its state instead.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

/// Only the named entries; the built-in servers off.
pub fn registry(entries: Vec<(&str, LspServerEntry)>) -> Registry {
    let mut map: BTreeMap<String, LspServerEntry> = entries
        .into_iter()
        .map(|(n, e)| (n.to_string(), e))
        .collect();
    for builtin in ["pyright", "typescript", "rust-analyzer"] {
        map.entry(builtin.to_string()).or_insert(LspServerEntry {
            disabled: Some(true),
            ..LspServerEntry::default()
        });
    }
    Registry::with_settings(&map).expect("registry")
}

/// A copy of the tree `src` at `dst`: files hard-linked (copied across filesystems), links kept.
pub fn link_tree(src: &Path, dst: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dst)?;
    for entry in std::fs::read_dir(src)? {
        let entry = entry?;
        let (from, to) = (entry.path(), dst.join(entry.file_name()));
        let ty = entry.file_type()?;
        if ty.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&from)?, &to)?;
        } else if ty.is_dir() {
            link_tree(&from, &to)?;
        } else if std::fs::hard_link(&from, &to).is_err() {
            std::fs::copy(&from, &to)?;
        }
    }
    Ok(())
}
