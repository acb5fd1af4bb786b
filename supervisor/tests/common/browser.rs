//! The user's side of a login the CLI drives (the URL it prints for a browser), and the places a
//! token must never reach but the broker's `credentials.json`: files, process environments and
//! command lines.

use super::env::TestHome;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running login command (`hanzo-dev login`, `hanzo-dev mcp login`), its stderr read line by
/// line.
pub struct LoginRun {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
    reader: std::thread::JoinHandle<String>,
}

impl LoginRun {
    /// Starts `cmd` with stdout and stderr piped.
    pub fn start(mut cmd: Command) -> LoginRun {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the login command starts");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, lines) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut all = String::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                all.push_str(&line);
                all.push('\n');
                let _ = tx.send(line);
            }
            all
        });
        LoginRun {
            child,
            lines,
            reader,
        }
    }

    /// The first line that starts with `http` after a line containing `marker`: the URL the
    /// CLI asks the user to open.
    pub fn url_after(&self, marker: &str) -> String {
        let mut armed = false;
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .expect("the CLI prints a URL");
            if line.contains(marker) {
                armed = true;
            } else if armed && line.trim_start().starts_with("http") {
                return line.trim().to_string();
            }
        }
    }

    /// Waits for the end: exit code, stdout, all of stderr.
    pub fn finish(self) -> (i32, String, String) {
        let out = self.child.wait_with_output().expect("login ends");
        let err = self.reader.join().expect("reader");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            err,
        )
    }
}

/// Every file under `dir`, recursively, into `out`.
pub fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// The stored credentials (`credentials.json` of the private user), or null when there are none.
pub fn credentials(home: &TestHome) -> Value {
    std::fs::read_to_string(home.path("config/hanzo/credentials.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null)
}

/// (name, text) of every file under `dirs` but `credentials.json`: where a token must not be.
pub fn file_texts(dirs: &[PathBuf]) -> Vec<(String, String)> {
    let mut all = Vec::new();
    for d in dirs {
        files(d, &mut all);
    }
    all.into_iter()
        .filter(|f| !f.ends_with("hanzo/credentials.json"))
        .map(|f| {
            let bytes = std::fs::read(&f).unwrap_or_default();
            (
                f.display().to_string(),
                String::from_utf8_lossy(&bytes).into_owned(),
            )
        })
        .collect()
}

/// (name, text) of the environment and command line of every process of a whole worker tree
/// (`hanzo-dev workers --json`, held up until all its workers are ready): where a token must not
/// be either.
pub fn tree_texts(home: &TestHome) -> Vec<(String, String)> {
    let mut workers = home
        .command(&["workers", "--json"])
        .stdin(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("workers");
    let stdout = workers.stdout.take().expect("stdout");
    let mut pids = vec![workers.id()];
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        let v: Value = serde_json::from_str(&line).expect("json line");
        if let Some(p) = v["pid"].as_u64() {
            pids.push(u32::try_from(p).expect("pid"));
        }
        if v["ready"] == true {
            break;
        }
    }
    assert!(pids.len() >= 6, "{pids:?}");
    let mut seen = Vec::new();
    for pid in &pids {
        for f in ["environ", "cmdline"] {
            let bytes = std::fs::read(format!("/proc/{pid}/{f}")).unwrap_or_default();
            seen.push((
                format!("/proc/{pid}/{f}"),
                String::from_utf8_lossy(&bytes).into_owned(),
            ));
        }
    }
    drop(workers.stdin.take());
    let _ = workers.wait();
    seen
}
