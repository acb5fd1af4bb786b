//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned 0.1.16 in
//! `test-deps/mcp`, run with the Node 22 from the same lock) against our client logic
//! (`hanzo_mcp::conformance::run`, driven by `examples/conformance_client.rs`), for every client
//! scenario of the pin that needs no OAuth. The harness's whole output is kept in a file per
//! scenario, `$CARGO_TARGET_TMPDIR/mcp-conformance-library/<scenario>.log`. The `auth/*`
//! scenarios need the broker's OAuth flow: they run against the product
//! (`supervisor/tests/mcp_conformance.rs`); this client refuses them, saying so.

mod support;

use std::path::PathBuf;
use std::process::Command;

fn example() -> PathBuf {
    // target/<profile>/deps/<this test> → target/<profile>/examples/conformance_client
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .and_then(|p| p.parent())
        .unwrap()
        .join("examples/conformance_client");
    assert!(
        path.is_file(),
        "{} is missing: build it with `cargo build -p hanzo-mcp --examples` (cargo test and nextest build it)",
        path.display()
    );
    path
}

fn harness(args: &[&str]) -> (bool, String) {
    let modules = support::node_modules();
    let cwd = tempfile::tempdir().unwrap();
    let out = Command::new(support::node())
        .arg(modules.join("@modelcontextprotocol/conformance/dist/index.js"))
        .args(args)
        .current_dir(cwd.path())
        .env("NO_COLOR", "1")
        .output()
        .expect("run the conformance harness");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn scenario(name: &str) {
    let exe = example();
    let (ok, output) = harness(&[
        "client",
        "--command",
        exe.to_str().unwrap(),
        "--scenario",
        name,
    ]);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("mcp-conformance-library");
    std::fs::create_dir_all(&dir).expect("the conformance output directory");
    let path = dir.join(format!("{name}.log"));
    let status = if ok { "succeeded" } else { "failed" };
    std::fs::write(
        &path,
        format!("scenario: {name}\nharness: {status}\n\n{output}"),
    )
    .expect("keep the harness output");
    let kept = std::fs::read_to_string(&path).expect("read the kept harness output");
    eprintln!(
        "conformance harness, scenario {name}: output kept in {}",
        path.display()
    );
    assert!(
        ok,
        "the harness failed scenario {name} (see {})",
        path.display()
    );
    assert!(
        kept.lines().any(|l| l.contains("OVERALL: PASSED")),
        "scenario {name} did not pass (see {})",
        path.display()
    );
    assert!(
        kept.contains(" 0 failed"),
        "scenario {name} has failed checks (see {})",
        path.display()
    );
}

#[test]
fn conformance_initialize() {
    scenario("initialize");
}

#[test]
fn conformance_tools_call() {
    scenario("tools_call");
}

#[test]
fn conformance_elicitation_sep1034_client_defaults() {
    scenario("elicitation-sep1034-client-defaults");
}

#[test]
fn conformance_sse_retry() {
    scenario("sse-retry");
}

/// Every client scenario of the pinned suite is either one we run above or an OAuth one, which
/// this client (no broker, so no OAuth flow) refuses with exit 2, naming the scenario and where
/// it runs instead; so a new scenario in a later pin cannot go unnoticed.
#[test]
fn every_client_scenario_of_the_pin_is_accounted_for() {
    let (ok, output) = harness(&["list"]);
    assert!(ok, "{output}");
    let client_part = output
        .split("Client scenarios")
        .nth(1)
        .expect("a client section");
    let names: Vec<&str> = client_part
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    eprintln!("client scenarios of the pin: {names:?}");
    let ours: Vec<&str> = hanzo_mcp::conformance::SCENARIOS
        .iter()
        .map(|(n, _)| *n)
        .collect();
    let (auth, plain): (Vec<&str>, Vec<&str>) = names.iter().partition(|n| n.starts_with("auth/"));
    assert_eq!(plain, ours);
    assert!(auth.len() >= 20, "{auth:?}");
    let exe = example();
    for a in auth {
        // As the harness would run it; nothing listens on the port: a client that tried the
        // scenario would fail to connect (exit 1), not refuse it.
        let out = Command::new(&exe)
            .arg("http://127.0.0.1:9/mcp")
            .env(hanzo_mcp::conformance::SCENARIO_ENV, a)
            .output()
            .expect("run the example client");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{a}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "scenario {a:?} {}",
                hanzo_mcp::conformance::AUTH_ELSEWHERE
            )),
            "{a}: {stderr}"
        );
    }
}
