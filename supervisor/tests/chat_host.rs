//! What `chat` gained from the session host (`cli/host.rs`), through a real terminal (a tmux
//! pane): `--record` of a session against a live provider (a local server speaking Anthropic's
//! SSE) that `--replay` plays back offline, and the language servers' diagnostics on an edit,
//! as `run` has them. Every wait polls the screen against a deadline; nothing asserts on time.

#[path = "../../workers/model/tests/fixtures/mod.rs"]
mod fixtures;

use fixtures::server::{Reply, Server};
use hanzo_model::script::{anthropic_cassette, anthropic_events, ScriptTurn};
use hanzo_store::{RunStatus, RunStore};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const EXE: &str = env!("CARGO_BIN_EXE_hanzo-dev");
/// A guard against hangs, not a speed assertion.
const HANG_GUARD: Duration = Duration::from_secs(90);

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A private tmux server (its own socket) running `hanzo-dev chat` in a workspace of its own.
struct Pane {
    /// The tmux server's socket name: a new one for each `start`, so a server still exiting
    /// cannot take the next session with it.
    socket: std::sync::Mutex<String>,
    root: tempfile::TempDir,
}

fn socket_name() -> String {
    format!(
        "hanzo-chat-host-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    )
}

impl Pane {
    fn new() -> Pane {
        let root = tempfile::tempdir().expect("tempdir");
        for d in ["home", "data", "config/hanzo", "ws", "tmp"] {
            std::fs::create_dir_all(root.path().join(d)).expect("mkdir");
        }
        Pane {
            socket: std::sync::Mutex::new(socket_name()),
            root,
        }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.root.path().join(p)
    }

    fn tmux(&self, args: &[&str]) -> Output {
        let socket = self.socket.lock().expect("socket").clone();
        Command::new("tmux")
            .args(["-L", &socket, "-f", "/dev/null"])
            .args(args)
            .output()
            .expect("tmux (scripts/setup.sh installs it)")
    }

    /// `hanzo-dev chat ARGS` in a fresh 100×30 pane; the pane stays after the program exits,
    /// its status on the last line.
    fn start(&self, args: &[&str], extra: &[(&str, &str)]) {
        let _ = self.tmux(&["kill-server"]);
        *self.socket.lock().expect("socket") = socket_name();
        let mut env = vec![
            format!("PATH={}", std::env::var("PATH").unwrap_or_default()),
            format!("HOME={}", self.path("home").display()),
            format!("XDG_DATA_HOME={}", self.path("data").display()),
            format!("XDG_CONFIG_HOME={}", self.path("config").display()),
            format!("TMPDIR={}", self.path("tmp").display()),
            "TERM=xterm-256color".to_string(),
        ];
        env.extend(extra.iter().map(|(k, v)| format!("{k}={v}")));
        let quote = |a: &str| format!("'{}'", a.replace('\'', "'\\''"));
        let argv: Vec<String> = [EXE, "chat"]
            .iter()
            .copied()
            .chain(args.iter().copied())
            .map(quote)
            .collect();
        let script = format!(
            "cd {} && env -i {} {}; echo \"[chat exited $?]\"; exec cat",
            quote(&self.path("ws").display().to_string()),
            env.iter().map(|e| quote(e)).collect::<Vec<_>>().join(" "),
            argv.join(" ")
        );
        let out = self.tmux(&[
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            "100",
            "-y",
            "30",
            "sh",
            "-c",
            &script,
        ]);
        assert!(out.status.success(), "tmux new-session: {out:?}");
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "t"];
        args.extend_from_slice(keys);
        assert!(self.tmux(&args).status.success(), "send-keys {keys:?}");
    }

    fn type_line(&self, text: &str) {
        assert!(self
            .tmux(&["send-keys", "-t", "t", "-l", text])
            .status
            .success());
        self.keys(&["Enter"]);
    }

    fn wait_text(&self, text: &str) -> String {
        let deadline = Instant::now() + HANG_GUARD;
        loop {
            let s = String::from_utf8_lossy(&self.tmux(&["capture-pane", "-p", "-t", "t"]).stdout)
                .into_owned();
            if s.contains(text) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "waited for {text:?}; the screen:\n{s}"
            );
            // A terminal we do not control has no event to wait on: look again shortly.
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn store(&self) -> RunStore {
        RunStore::open(&self.path("data/hanzo"), "local").expect("store")
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_recorded_against_a_live_provider_replays_offline() {
    let turn = ScriptTurn::text("Recorded reply: **gamma**.");
    let server = Server::start(vec![Reply::sse(&anthropic_events(0, &turn).concat(), 64)]).await;
    let base = server.base.clone();
    let p = tokio::task::spawn_blocking(move || {
        let p = Pane::new();
        let cassette = p.path("chat.jsonl").display().to_string();
        p.start(
            &[
                "--provider",
                "anthropic",
                "--base-url",
                &base,
                "--record",
                &cassette,
            ],
            &[("ANTHROPIC_API_KEY", "sk-ant-test-key-for-the-fake-server")],
        );
        p.wait_text("/help lists commands");
        p.type_line("say gamma");
        p.wait_text("Recorded reply: gamma.");
        p.keys(&["C-d"]);
        p.wait_text("[chat exited 0]");
        let lines = std::fs::read_to_string(&cassette).expect("the cassette was written");
        assert_eq!(lines.lines().count(), 1, "one model exchange: {lines}");
        // Offline, from the recording: the same reply, and nothing sent to the server.
        p.start(&["--replay", &cassette], &[]);
        p.wait_text("/help lists commands");
        p.type_line("say gamma");
        p.wait_text("Recorded reply: gamma.");
        p.keys(&["C-d"]);
        p.wait_text("[chat exited 0]");
        p
    })
    .await
    .expect("the chat sessions");
    assert_eq!(server.received().len(), 1, "the replay reached the server");
    let sessions = p.store().list_sessions(None, 10).expect("sessions");
    assert_eq!(sessions.len(), 2);
}

fn link_tree(src: &Path, dst: &Path) -> std::io::Result<()> {
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

#[test]
fn a_chat_edit_gets_pyright_diagnostics_back() {
    let p = Pane::new();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../test-deps/lsp/node_modules");
    assert!(
        src.join(".bin/pyright-langserver").exists(),
        "pyright is missing from test-deps/lsp: run ./scripts/setup.sh"
    );
    link_tree(&src, &p.path("ws/node_modules")).expect("install pyright into the workspace");
    std::fs::write(
        p.path("ws/lib.py"),
        "def double(x: int) -> int:\n    return x * 2\n",
    )
    .unwrap();
    std::fs::write(
        p.path("ws/app.py"),
        "from lib import double\n\nprint(double(2))\n",
    )
    .unwrap();
    std::fs::write(
        p.path("config/hanzo/settings.json"),
        json!({
            "lsp_servers": {"pyright": {"command": "node_modules/.bin/pyright-langserver"}},
            "permissions": {"edit_file": "allow", "read_file": "allow"},
        })
        .to_string(),
    )
    .unwrap();
    let cassette = p.path("lsp.jsonl");
    std::fs::write(
        &cassette,
        anthropic_cassette(&[
            ScriptTurn::tool("t0", "read_file", json!({"path": "app.py"})),
            ScriptTurn::tool(
                "t1",
                "edit_file",
                json!({"path": "app.py", "old_string": "double(2)", "new_string": "double(\"two\")"}),
            ),
            ScriptTurn::text("I broke the types."),
        ]),
    )
    .unwrap();
    p.start(&["--replay", &cassette.display().to_string()], &[]);
    p.wait_text("/help lists commands");
    p.type_line("change the call");
    p.wait_text("I broke the types.");
    p.keys(&["C-d"]);
    p.wait_text("[chat exited 0]");
    let store = p.store();
    let session = store.list_sessions(None, 1).expect("sessions")[0].id;
    let runs = store.list_session_runs(session).expect("runs");
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, RunStatus::Succeeded);
    let rec = store.load_run(runs[0].id).expect("run");
    let edit = rec
        .steps
        .iter()
        .flat_map(|s| &s.tool_calls)
        .find(|c| c.call.name == "edit_file")
        .expect("the edit");
    let out = edit.call.output.as_deref().unwrap_or("");
    assert!(out.contains("<diagnostics"), "{out}");
    assert!(
        out.contains("app.py:3:14 error [reportArgumentType]"),
        "{out}"
    );
}
