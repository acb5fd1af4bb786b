//! The terminal driver the chat tests share (`chat_tmux`, `chat_host`, `chat_git`): the real
//! `hanzo-dev chat` in a pane of a private tmux server (a pseudo-terminal), keys sent with
//! `send-keys`, the screen read with `capture-pane`, and the store and git repositories the
//! tests look at afterwards. Every wait polls against [`HANG_GUARD`]; nothing asserts on time.
//!
//! Included with `#[path = "common/tmux.rs"] mod tmux;` by each test that drives a terminal.

// Each test binary uses only part of it.
#![allow(dead_code)]

use hanzo_model::script::{anthropic_cassette, ScriptTurn};
use hanzo_store::RunStore;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const EXE: &str = env!("CARGO_BIN_EXE_hanzo-dev");
/// A guard against hangs, not a speed assertion.
pub const HANG_GUARD: Duration = Duration::from_secs(90);

static NEXT: AtomicUsize = AtomicUsize::new(0);

fn socket_name() -> String {
    format!(
        "hanzo-chat-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    )
}

pub fn tmux_ok() -> bool {
    Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A private tmux server (its own socket) running `hanzo-dev chat`, under a root directory
/// with `home`, `data`, `config/hanzo`, `ws` (the workspace) and `tmp`.
pub struct Pane {
    /// The tmux server's socket name: a new one for each start, so a server still exiting
    /// cannot take the next session with it.
    socket: Mutex<String>,
    pub root: tempfile::TempDir,
}

impl Pane {
    pub fn new() -> Pane {
        assert!(tmux_ok(), "tmux is missing: scripts/setup.sh installs it");
        let root = tempfile::tempdir().expect("tempdir");
        for d in ["home", "data", "config/hanzo", "ws", "tmp"] {
            std::fs::create_dir_all(root.path().join(d)).expect("mkdir");
        }
        Pane {
            socket: Mutex::new(socket_name()),
            root,
        }
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.root.path().join(p)
    }

    /// Write `turns` as an Anthropic cassette named `name` under the root; its path.
    pub fn cassette(&self, name: &str, turns: &[ScriptTurn]) -> String {
        let p = self.path(name);
        std::fs::write(&p, anthropic_cassette(turns)).expect("cassette");
        p.display().to_string()
    }

    pub fn write(&self, rel: &str, contents: &str) {
        let p = self.path(rel);
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir).expect("mkdir");
        }
        std::fs::write(p, contents).expect("write");
    }

    pub fn tmux(&self, args: &[&str]) -> Output {
        let socket = self.socket.lock().expect("socket").clone();
        Command::new("tmux")
            .args(["-L", &socket, "-f", "/dev/null"])
            .args(args)
            .output()
            .expect("run tmux")
    }

    /// `hanzo-dev chat ARGS` in the workspace, in a fresh 80×24 pane, with `extra` in its
    /// environment.
    pub fn start(&self, args: &[&str], extra: &[(&str, &str)]) {
        self.start_in("ws", (80, 24), args, extra);
    }

    /// [`Pane::start`] in the directory `cwd` (under the root), in a pane of `size` columns
    /// and rows, on a new tmux server (the previous one is ended). `PATH` is the test's unless
    /// `extra` sets it. The pane keeps showing the screen after the program exits (`cat` holds
    /// it open), with the exit status on the last line.
    pub fn start_in(&self, cwd: &str, size: (u16, u16), args: &[&str], extra: &[(&str, &str)]) {
        let argv: Vec<&str> = ["chat"].into_iter().chain(args.iter().copied()).collect();
        self.launch(cwd, size, &argv, extra);
    }

    /// `hanzo-dev ARGS` (any command) in the workspace, as [`Pane::start_in`] runs `chat`.
    pub fn start_command(&self, args: &[&str], extra: &[(&str, &str)]) {
        self.launch("ws", (80, 24), args, extra);
    }

    fn launch(&self, cwd: &str, size: (u16, u16), args: &[&str], extra: &[(&str, &str)]) {
        let _ = self.tmux(&["kill-server"]);
        *self.socket.lock().expect("socket") = socket_name();
        let path = extra.iter().find(|(k, _)| *k == "PATH").map_or_else(
            || std::env::var("PATH").unwrap_or_default(),
            |(_, v)| v.to_string(),
        );
        let mut env = vec![
            format!("PATH={path}"),
            format!("HOME={}", self.path("home").display()),
            format!("XDG_DATA_HOME={}", self.path("data").display()),
            format!("XDG_CONFIG_HOME={}", self.path("config").display()),
            format!("TMPDIR={}", self.path("tmp").display()),
            "TERM=xterm-256color".to_string(),
        ];
        env.extend(
            extra
                .iter()
                .filter(|(k, _)| *k != "PATH")
                .map(|(k, v)| format!("{k}={v}")),
        );
        let quote = |a: &str| format!("'{}'", a.replace('\'', "'\\''"));
        let argv: Vec<String> = [EXE]
            .iter()
            .copied()
            .chain(args.iter().copied())
            .map(quote)
            .collect();
        let script = format!(
            "cd {} && env -i {} {}; echo \"[chat exited $?]\"; exec cat",
            quote(&self.path(cwd).display().to_string()),
            env.iter().map(|e| quote(e)).collect::<Vec<_>>().join(" "),
            argv.join(" ")
        );
        let (w, h) = (size.0.to_string(), size.1.to_string());
        let out = self.tmux(&[
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            &w,
            "-y",
            &h,
            "sh",
            "-c",
            &script,
        ]);
        assert!(out.status.success(), "tmux new-session: {out:?}");
    }

    pub fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "t"];
        args.extend_from_slice(keys);
        let out = self.tmux(&args);
        assert!(out.status.success(), "send-keys {keys:?}: {out:?}");
    }

    /// Type text literally (no key names).
    pub fn type_text(&self, text: &str) {
        let out = self.tmux(&["send-keys", "-t", "t", "-l", text]);
        assert!(out.status.success(), "send-keys -l: {out:?}");
    }

    /// Type `text`, then Enter.
    pub fn type_line(&self, text: &str) {
        self.type_text(text);
        self.keys(&["Enter"]);
    }

    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.tmux(&["capture-pane", "-p", "-t", "t"]).stdout).into_owned()
    }

    /// The screen with its attributes as escape sequences (`capture-pane -e`).
    pub fn screen_styled(&self) -> String {
        String::from_utf8_lossy(&self.tmux(&["capture-pane", "-p", "-e", "-t", "t"]).stdout)
            .into_owned()
    }

    /// The whole scrollback and screen with attributes as escape sequences.
    pub fn history_styled(&self) -> String {
        String::from_utf8_lossy(
            &self
                .tmux(&["capture-pane", "-p", "-e", "-S", "-", "-t", "t"])
                .stdout,
        )
        .into_owned()
    }

    /// The terminal cursor's (column, row), 0-based, as tmux has it.
    pub fn cursor(&self) -> (u16, u16) {
        let out = self.tmux(&[
            "display-message",
            "-p",
            "-t",
            "t",
            "#{cursor_x} #{cursor_y}",
        ]);
        let text = String::from_utf8_lossy(&out.stdout);
        let mut it = text
            .split_whitespace()
            .map(|n| n.parse().expect("a number"));
        (it.next().expect("x"), it.next().expect("y"))
    }

    /// The pane's title as tmux keeps it: an OSC 2 that reached the terminal would set it.
    pub fn title(&self) -> String {
        let out = self.tmux(&["display-message", "-p", "-t", "t", "#{pane_title}"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Poll the screen until `pred` holds; fail with the last screen after the hang guard.
    pub fn wait_for(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + HANG_GUARD;
        loop {
            let s = self.screen();
            if pred(&s) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "waited for {what}; the screen:\n{s}"
            );
            // Polling a terminal we do not control: there is no event to wait on, so look
            // again shortly. Only the hang guard above bounds the wait.
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn wait_text(&self, text: &str) -> String {
        self.wait_for(text, |s| s.contains(text))
    }

    /// Wait until the input box's first row is `want`; that row.
    pub fn wait_input(&self, want: &str) -> String {
        let s = self.wait_for(&format!("the input box to hold {want:?}"), |s| {
            input_line_of(s) == want
        });
        input_line_of(&s)
    }

    /// The store the chat wrote (`data/hanzo`, org `local`).
    pub fn store(&self) -> RunStore {
        RunStore::open(&self.path("data/hanzo"), "local").expect("store")
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        // Our own tmux server, on our own socket: ending it ends the chat if still running.
        let _ = self.tmux(&["kill-server"]);
    }
}

/// The rows of the input box: what lies between `│` and `│` on the rows between its borders
/// (the box is the one whose top border is the last `┌` on the screen), right-trimmed.
pub fn input_rows_of(screen: &str) -> Vec<String> {
    let lines: Vec<&str> = screen.lines().collect();
    let Some(top) = lines.iter().rposition(|l| l.starts_with('┌')) else {
        return Vec::new();
    };
    lines[top + 1..]
        .iter()
        .take_while(|l| !l.starts_with('└'))
        .map(|l| {
            l.strip_prefix('│')
                .unwrap_or(l)
                .trim_end()
                .trim_end_matches('│')
                .trim_end()
                .to_string()
        })
        .collect()
}

/// The input box's first row.
pub fn input_line_of(screen: &str) -> String {
    input_rows_of(screen).into_iter().next().unwrap_or_default()
}

/// `git ARGS` in `dir`, which must succeed; its standard output.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run git");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `dir` as a repository on `main` with one commit of `a.txt` ("one").
pub fn init_repo(dir: &Path) {
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["config", "user.name", "Test User"]);
    git(dir, &["config", "user.email", "test@example.invalid"]);
    git(dir, &["config", "commit.gpgsign", "false"]);
    std::fs::write(dir.join("a.txt"), "one\n").expect("write");
    git(dir, &["add", "a.txt"]);
    git(dir, &["commit", "-q", "-m", "initial"]);
}
