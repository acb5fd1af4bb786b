//! `hanzo-dev doctor` and `hanzo-dev --version`, run as the installed binary is (the packages'
//! smoke test in `scripts/test-dist.sh` runs the same two): every worker starts, is attested,
//! answers its status round trip and passes its confinement probes; `--version` names the commit,
//! the build date, the target and the sandbox tiers.
//!
//! The status round trip once read `/proc/self/status` with a fresh `openat` inside the worker,
//! which the model, mcp and lsp allow-lists refuse: those workers died with SIGSYS and doctor
//! failed. This test is what keeps that from coming back.

use std::process::Command;

fn hanzo_dev(args: &[&str]) -> std::process::Output {
    let home = tempfile::tempdir().expect("home");
    let workspace = tempfile::tempdir().expect("workspace");
    Command::new(env!("CARGO_BIN_EXE_hanzo-dev"))
        .args(args)
        .current_dir(workspace.path())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("XDG_DATA_HOME", home.path().join("data"))
        .output()
        .expect("hanzo-dev runs")
}

#[test]
fn doctor_attests_every_worker_and_each_answers_its_round_trip() {
    let out = hanzo_dev(&["doctor", "--json"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("doctor --json is JSON ({e}): {stdout}\nstderr: {stderr}"));
    let workers = report["workers"].as_array().expect("workers listed");
    let roles: Vec<&str> = workers.iter().filter_map(|w| w["role"].as_str()).collect();
    for role in ["broker", "model", "tools", "mcp", "lsp"] {
        assert!(roles.contains(&role), "{role} missing from {roles:?}");
    }
    for w in workers {
        let role = w["role"].as_str().unwrap_or("?");
        assert!(w["error"].is_null(), "{role}: {}", w["error"]);
        assert!(
            w["round_trip_error"].is_null(),
            "{role} round trip: {}\nstderr: {stderr}",
            w["round_trip_error"]
        );
        assert!(w["round_trip_us"].as_f64().is_some(), "{role}: {w}");
        for p in w["probes"].as_array().expect("probes") {
            assert_eq!(p["ok"], true, "{role} probe {p}\nstderr: {stderr}");
        }
    }
    // No worker was stopped by its allow-list on the way (it would be restarted and the report
    // could still look whole).
    assert!(!stderr.contains("seccomp stopped"), "{stderr}");
    assert_eq!(report["ok"], true, "{stdout}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}

#[test]
fn version_names_commit_date_target_and_tiers() {
    let out = hanzo_dev(&["--version"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.first().copied(),
        Some(concat!("hanzo-dev ", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
    let field = |name: &str| {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .unwrap_or_else(|| panic!("no {name} line in {text}"))
    };
    let commit = field("commit");
    let hex = commit.trim_end_matches("-dirty");
    assert!(
        hex == "unknown" || (hex.len() == 12 && hex.chars().all(|c| c.is_ascii_hexdigit())),
        "{commit}"
    );
    let date = field("build date");
    assert!(
        date == "unknown"
            || date.starts_with('@')
            || (date.len() == 10 && date.as_bytes()[4] == b'-' && date.as_bytes()[7] == b'-'),
        "{date}"
    );
    let target = field("target");
    assert!(
        target.starts_with(std::env::consts::ARCH) && target.contains("-linux-"),
        "{target}"
    );
    let tiers = field("sandbox tiers");
    assert!(tiers.contains("A (") && tiers.contains("B ("), "{tiers}");
}
