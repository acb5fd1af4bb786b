//! No worker outlives its supervisor: not after a clean stop, not after `kill -9`.
//!
//! The supervisor here is the real `hanzo-dev workers --json` process; the pids it prints are
//! checked in `/proc` afterwards. A bounded wait only keeps a broken build from hanging.

mod common;

use common::procs::alive;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn start_supervisor() -> (Child, Vec<u32>, BufReader<std::process::ChildStdout>) {
    let ws = std::env::temp_dir();
    let mut child = Command::new(env!("CARGO_BIN_EXE_hanzo-dev"))
        .args(["workers", "--json", "--workspace"])
        .arg(&ws)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn hanzo-dev");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut pids = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        let n = out.read_line(&mut line).expect("read");
        assert!(n > 0, "hanzo-dev workers ended before reporting ready");
        let v: serde_json::Value = serde_json::from_str(&line).expect("json line");
        if v.get("ready").is_some() {
            break;
        }
        pids.push(u32::try_from(v["pid"].as_u64().expect("pid")).expect("pid"));
    }
    assert_eq!(pids.len(), 5, "five workers");
    (child, pids, out)
}

fn wait_all_gone(pids: &[u32]) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(|p| alive(*p)).collect();
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn kill_9_of_the_supervisor_leaves_no_worker_behind() {
    let (mut sup, pids, _out) = start_supervisor();
    for p in &pids {
        assert!(alive(*p), "worker {p} running before the kill");
    }
    sup.kill().expect("SIGKILL the supervisor");
    sup.wait().expect("reap the supervisor");
    let left = wait_all_gone(&pids);
    assert!(left.is_empty(), "workers survived the supervisor: {left:?}");
}

#[test]
fn a_clean_stop_reaps_every_worker() {
    let (mut sup, pids, _out) = start_supervisor();
    drop(sup.stdin.take()); // EOF on stdin: `workers` stops
    let status = sup.wait().expect("wait");
    assert!(status.success(), "{status}");
    let left = wait_all_gone(&pids);
    assert!(left.is_empty(), "workers left after a clean stop: {left:?}");
}

#[test]
fn the_supervisor_wipes_secrets_from_its_own_environ() {
    let canary = "sk-canary-environ-5b1d";
    let ws = std::env::temp_dir();
    let mut child = Command::new(env!("CARGO_BIN_EXE_hanzo-dev"))
        .args(["workers", "--json", "--workspace"])
        .arg(&ws)
        .env("HANZO_CANARY_API_KEY", canary)
        .env("SOME_PASSWORD_FILE", canary)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    let mut sup_pid = None;
    while out.read_line(&mut line).expect("read") > 0 {
        let v: serde_json::Value = serde_json::from_str(&line).expect("json");
        if v.get("ready").is_some() {
            sup_pid = v["supervisor_pid"].as_u64();
            break;
        }
        line.clear();
    }
    let pid = u32::try_from(sup_pid.expect("supervisor pid")).expect("pid");
    assert_eq!(pid, child.id());
    // /proc/<pid>/environ shows the initial environment block, not what unsetenv left.
    let environ =
        std::fs::read(format!("/proc/{pid}/environ")).expect("read environ (as root or owner)");
    assert!(
        !String::from_utf8_lossy(&environ).contains(canary),
        "secret still visible in the supervisor's /proc/<pid>/environ"
    );
    drop(child.stdin.take());
    let st = child.wait().expect("wait");
    assert!(st.success());
}
