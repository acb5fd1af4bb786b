//! Every file in `test-vectors/` runs through the real `hanzo-dev vectors` command, and the runner
//! itself keeps its contract (exit codes, the closing line, `--json`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../test-vectors")
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hanzo-dev"))
        .arg("vectors")
        .args(args)
        .output()
        .expect("run hanzo-dev vectors");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn all_project_vectors_pass() {
    let dir = vectors_dir();
    let (code, out, err) = run(&[dir.to_str().expect("utf-8 path")]);
    let last = out.lines().last().unwrap_or_default().to_string();
    assert_eq!(code, 0, "{out}{err}");
    assert!(last.ends_with(" passed, 0 failed"), "{last}");
    let passed: usize = last
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("count");
    assert!(passed >= 25, "only {passed} cases ran");
}

#[test]
fn each_domain_file_has_its_cases() {
    for (file, min) in [
        ("ipc-frames.json", 25),
        ("backoff-timing.json", 20),
        ("sse-frames.json", 50),
        ("permission-policy.json", 60),
        ("config-merge.json", 30),
        ("session-compaction.json", 20),
        ("oauth-pkce.json", 20),
        ("mcp-normalization.json", 30),
    ] {
        let path = vectors_dir().join(file);
        let (code, out, err) = run(&["--json", path.to_str().expect("utf-8")]);
        assert_eq!(code, 0, "{file}: {err}");
        let cases = out.lines().filter(|l| l.starts_with('{')).count();
        assert!(cases >= min, "{file}: {cases} cases, want at least {min}");
        for line in out.lines().filter(|l| l.starts_with('{')) {
            let v: serde_json::Value = serde_json::from_str(line).expect("json");
            for key in ["domain", "name", "pass", "detail"] {
                assert!(v.get(key).is_some(), "{file}: missing {key} in {line}");
            }
        }
    }
}

#[test]
fn a_failing_case_is_reported_and_exits_1() {
    let dir = tempfile::tempdir().expect("tmp");
    let f = dir.path().join("bad.json");
    std::fs::write(
        &f,
        r#"{"domain":"ipc-frames","version":1,"extra":"ignored","cases":[
            {"name":"right","bytes_hex":"0000000101","frames":[{"type":1,"payload_hex":""}],"error":null,"note":"ignored"},
            {"name":"wrong","bytes_hex":"00000000","frames":[],"error":"truncated"}]}"#,
    )
    .expect("write");
    let (code, out, _) = run(&[f.to_str().expect("utf-8")]);
    assert_eq!(code, 1);
    assert!(out.contains("FAIL ipc-frames / wrong"), "{out}");
    assert!(out.contains("zero_length"), "{out}");
    assert_eq!(out.lines().last(), Some("1 passed, 1 failed"));
}

/// The contract's `"tiers"` and `"matched": {"tier"}` keep working; `"scopes"` and
/// `"matched": {"scope"}` are read the same way, a wrong scope in either spelling fails, and a case
/// giving both lists is malformed.
#[test]
fn permission_cases_name_settings_scopes_as_tiers_or_scopes() {
    let dir = tempfile::tempdir().expect("tmp");
    let f = dir.path().join("scopes.json");
    let lists = r#"{"user": [{"tool_pattern": "bash(rm *)", "mode": "deny"}],
                    "local": [{"tool_pattern": "bash", "mode": "allow"}]}"#;
    let case = |name: &str, lists_key: &str, matched: &str| {
        format!(
            r#"{{"name": "{name}", "{lists_key}": {lists}, "trusted": true, "tool": "bash",
                "input": {{"command": "rm -rf x"}}, "expect": "deny", "matched": {matched}}}"#
        )
    };
    let cases = [
        case("tiers+tier", "tiers", r#"{"tier": "user", "index": 0}"#),
        case("scopes+scope", "scopes", r#"{"scope": "user", "index": 0}"#),
        case("tiers+scope", "tiers", r#"{"scope": "user", "index": 0}"#),
        case("wrong tier", "tiers", r#"{"tier": "local", "index": 0}"#),
        case("wrong scope", "scopes", r#"{"scope": "local", "index": 0}"#),
        format!(
            r#"{{"name": "both", "tiers": {lists}, "scopes": {lists}, "trusted": true,
                "tool": "bash", "input": {{"command": "ls"}}, "expect": "allow"}}"#
        ),
    ];
    std::fs::write(
        &f,
        format!(
            r#"{{"domain": "permission-policy", "version": 1, "cases": [{}]}}"#,
            cases.join(",")
        ),
    )
    .expect("write");
    let (code, out, err) = run(&["--json", f.to_str().expect("utf-8")]);
    assert_eq!(code, 1, "{out}{err}");
    let verdicts: Vec<(String, bool, String)> = out
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("json");
            (
                v["name"].as_str().expect("name").to_string(),
                v["pass"].as_bool().expect("pass"),
                v["detail"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let pass: Vec<(&str, bool)> = verdicts.iter().map(|(n, p, _)| (n.as_str(), *p)).collect();
    assert_eq!(
        pass,
        vec![
            ("tiers+tier", true),
            ("scopes+scope", true),
            ("tiers+scope", true),
            ("wrong tier", false),
            ("wrong scope", false),
            ("both", false),
        ]
    );
    assert!(
        verdicts[3].2.contains(r#""tier":"user""#),
        "{:?}",
        verdicts[3]
    );
    assert!(
        verdicts[4].2.contains(r#""scope":"user""#),
        "{:?}",
        verdicts[4]
    );
    assert!(verdicts[5].2.contains("not both"), "{:?}", verdicts[5]);
}

#[test]
fn unreadable_malformed_and_unknown_domain_files_exit_2() {
    let dir = tempfile::tempdir().expect("tmp");
    let missing = dir.path().join("missing.json");
    let malformed = dir.path().join("malformed.json");
    std::fs::write(&malformed, "{ not json").expect("write");
    let unknown = dir.path().join("unknown.json");
    std::fs::write(&unknown, r#"{"domain":"telepathy","cases":[]}"#).expect("write");
    for (f, needle) in [
        (&missing, "cannot read"),
        (&malformed, "not valid JSON"),
        (&unknown, "unknown domain \"telepathy\""),
    ] {
        let (code, _, err) = run(&[f.to_str().expect("utf-8")]);
        assert_eq!(code, 2, "{}", f.display());
        assert!(err.contains(needle), "{err}");
    }
}
