//! A test's own user: a temporary directory standing in for `$HOME`, the XDG data and config
//! directories, `$TMPDIR` and the workspace, and `hanzo-dev` commands that see nothing else.

use hanzo_model::script::{anthropic_cassette, ScriptTurn};
use hanzo_store::RunStore;
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// The built binary under test.
pub const EXE: &str = env!("CARGO_BIN_EXE_hanzo-dev");

/// `home`, `data`, `config/hanzo`, `ws` and `tmp` under one temporary directory, removed when
/// dropped.
pub struct TestHome {
    pub root: tempfile::TempDir,
}

impl TestHome {
    pub fn new() -> TestHome {
        let root = tempfile::tempdir().expect("tempdir");
        for d in ["home", "data", "config/hanzo", "ws", "tmp"] {
            std::fs::create_dir_all(root.path().join(d)).expect("mkdir");
        }
        TestHome { root }
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.root.path().join(p)
    }

    /// The workspace: the commands' working directory.
    pub fn ws(&self) -> PathBuf {
        self.path("ws")
    }

    /// User settings (`$XDG_CONFIG_HOME/hanzo/settings.json`).
    pub fn settings(&self, v: Value) {
        std::fs::write(self.path("config/hanzo/settings.json"), v.to_string()).expect("settings");
    }

    /// `turns` as an Anthropic cassette in the file `name`; its path, for `--replay`.
    pub fn cassette(&self, name: &str, turns: &[ScriptTurn]) -> String {
        let p = self.path(name);
        std::fs::write(&p, anthropic_cassette(turns)).expect("cassette");
        p.display().to_string()
    }

    /// The store `hanzo-dev` writes for the `local` org.
    pub fn store(&self) -> RunStore {
        RunStore::open(&self.path("data/hanzo"), "local").expect("store")
    }

    /// `hanzo-dev ARGS` in the workspace with only `PATH` and this user's directories in its
    /// environment (run directories, and those a supervisor killed with -9 leaves behind, stay
    /// inside the test's directory); stdin empty, stdout and stderr piped.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(EXE);
        c.args(args)
            .current_dir(self.ws())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.path("home"))
            .env("XDG_DATA_HOME", self.path("data"))
            .env("XDG_CONFIG_HOME", self.path("config"))
            .env("TMPDIR", self.path("tmp"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// [`TestHome::command`] run to its end: exit code (-1 for a signal), stdout, stderr.
    pub fn run(&self, args: &[&str]) -> (i32, String, String) {
        let out = self.output(args);
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// [`TestHome::command`], run to its end.
    pub fn output(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run hanzo-dev")
    }
}
