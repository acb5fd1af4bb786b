//! What the real binary prints: `doctor --json` has one stable shape (every availability
//! `{"available": bool, "reason"?: string}`, never a serialised `Result`), `-v` logs carry no
//! colour codes when stderr is not a terminal, and an error says its cause once.

use serde_json::Value;
use std::process::{Command, Output};

fn doctor(args: &[&str]) -> Output {
    let ws = tempfile::tempdir().expect("workspace");
    let data = tempfile::tempdir().expect("data");
    Command::new(env!("CARGO_BIN_EXE_hanzo-dev"))
        .args(args)
        .arg("--workspace")
        .arg(ws.path())
        .env("XDG_DATA_HOME", data.path())
        .env("XDG_CONFIG_HOME", data.path())
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .output()
        .expect("run hanzo-dev doctor")
}

#[track_caller]
fn availability(v: &Value, what: &str) -> bool {
    let obj = v
        .as_object()
        .unwrap_or_else(|| panic!("{what}: not an object: {v}"));
    let available = obj["available"]
        .as_bool()
        .unwrap_or_else(|| panic!("{what}: `available` is not a bool: {v}"));
    match obj.get("reason") {
        None => assert!(available, "{what}: unavailable without a reason: {v}"),
        Some(r) => assert!(
            !available && r.as_str().is_some_and(|r| !r.is_empty()),
            "{what}: a reason goes with `available: false` only: {v}"
        ),
    }
    assert!(
        obj.keys().all(|k| k == "available" || k == "reason"),
        "{what}: unexpected keys: {v}"
    );
    available
}

#[test]
fn doctor_json_has_one_stable_shape() {
    let out = doctor(&["doctor", "--json"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("stdout is one JSON document ({e}): {stdout}"));
    assert!(report["ok"].is_boolean(), "{report}");
    assert_eq!(
        out.status.code(),
        Some(if report["ok"] == true { 0 } else { 1 })
    );
    let kernel = &report["kernel"];
    assert!(
        kernel["landlock_abi"].is_u64() && kernel["seccomp"].is_boolean(),
        "{kernel}"
    );
    let userns = availability(&kernel["user_namespaces"], "kernel.user_namespaces");
    let a = availability(&report["tiers"]["a"], "tiers.a");
    let b = availability(&report["tiers"]["b"], "tiers.b");
    assert_eq!(
        b,
        userns && a,
        "tier B needs user namespaces and tier A: {report}"
    );
    let best = report["best_available_tier"].as_str().expect("best tier");
    assert_eq!(
        best,
        if b {
            "b"
        } else if a {
            "a"
        } else {
            "none"
        }
    );
    // Nothing anywhere in the report is a serialised Result.
    fn no_result(v: &Value, path: &str) {
        match v {
            Value::Object(m) => {
                assert!(
                    !(m.len() == 1 && (m.contains_key("Ok") || m.contains_key("Err"))),
                    "{path} is a serialised Result: {v}"
                );
                for (k, x) in m {
                    no_result(x, &format!("{path}.{k}"));
                }
            }
            Value::Array(xs) => xs
                .iter()
                .enumerate()
                .for_each(|(i, x)| no_result(x, &format!("{path}[{i}]"))),
            _ => {}
        }
    }
    no_result(&report, "report");
    for bound in ["pids", "memory"] {
        let b = &report["commands"]["cgroup"][bound];
        match b["available"].as_bool() {
            Some(true) => assert!(b["path"].is_string(), "{bound}: {b}"),
            Some(false) => assert!(b["reason"].is_string(), "{bound}: {b}"),
            None => panic!("commands.cgroup.{bound}: {b}"),
        }
    }
    let workers = report["workers"].as_array().expect("workers");
    let roles: Vec<&str> = workers.iter().filter_map(|w| w["role"].as_str()).collect();
    for role in ["broker", "model", "tools"] {
        assert!(roles.contains(&role), "{role} missing from {roles:?}");
    }
}

#[test]
fn verbose_logs_off_a_terminal_have_no_colour_codes() {
    let out = doctor(&["-vv", "doctor"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("DEBUG") || stderr.contains("INFO"),
        "no logs at -vv: {stderr}"
    );
    assert!(
        !stderr.contains('\x1b'),
        "colour codes in redirected logs: {stderr:?}"
    );
}

#[test]
fn a_command_that_does_not_exist_is_reported_once() {
    let ws = tempfile::tempdir().expect("workspace");
    let out = Command::new(env!("CARGO_BIN_EXE_hanzo-dev"))
        .args(["sandbox", "--workspace"])
        .arg(ws.path())
        .args(["--", "/nonexistent-hanzo-command"])
        .output()
        .expect("run hanzo-dev sandbox");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    let error: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(error.len(), 1, "{stderr}");
    assert!(error[0].contains("/nonexistent-hanzo-command"), "{stderr}");
    assert_eq!(
        error[0].matches("No such file or directory").count(),
        1,
        "{stderr}"
    );
}
