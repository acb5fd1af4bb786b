//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned 0.1.16 in
//! `test-deps/mcp`, run with the Node 22 from the same lock) against the product:
//! `hanzo-dev mcp conformance-client`, which goes through the supervisor, the broker (with its
//! MCP authorization flow for the `auth/*` scenarios) and the sandboxed mcp worker. One test per
//! client scenario that passes; the harness's whole output is kept in a file per scenario,
//! `$CARGO_TARGET_TMPDIR/mcp-conformance/<scenario>.log` (`auth/x` as `auth-x.log`). The
//! scenarios that cannot pass are listed in [`NOT_PASSING`] with the reason, and a test checks
//! that every client scenario of the pin is in exactly one of the two lists.

use std::path::PathBuf;
use std::process::Command;

fn node_modules() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repository root")
        .join("test-deps/mcp/node_modules");
    assert!(
        dir.join("@modelcontextprotocol/conformance/dist/index.js")
            .is_file()
            && dir.join("node/bin/node").is_file(),
        "the MCP test peers are missing under {}: run ./scripts/setup.sh",
        dir.display()
    );
    dir
}

fn harness(args: &[&str]) -> (bool, String) {
    let modules = node_modules();
    let cwd = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(modules.join("node/bin/node"))
        .arg(modules.join("@modelcontextprotocol/conformance/dist/index.js"))
        .args(args)
        .current_dir(cwd.path())
        .env("NO_COLOR", "1")
        // The client's own settings and credentials stay out of it.
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("XDG_DATA_HOME", home.path().join("data"))
        .output()
        .expect("run the conformance harness");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Keep the harness's output for scenario `name` in its file under the target directory (the
/// scenario, the harness's exit status, then its stdout and stderr); the file's path and what
/// was read back from it.
fn keep_output(name: &str, ok: bool, output: &str) -> (PathBuf, String) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("mcp-conformance");
    std::fs::create_dir_all(&dir).expect("the conformance output directory");
    let path = dir.join(format!("{}.log", name.replace('/', "-")));
    let status = if ok { "succeeded" } else { "failed" };
    std::fs::write(
        &path,
        format!(
            "scenario: {name}
harness: {status}

{output}"
        ),
    )
    .expect("keep the harness output");
    let kept = std::fs::read_to_string(&path).expect("read the kept harness output");
    (path, kept)
}

fn scenario(name: &str) {
    // The harness's context can carry a client secret (`auth/pre-registration`): named a secret,
    // it reaches the broker's environment only (the harness runs the command with a shell).
    let command = format!(
        "HANZO_SECRET_ENV=MCP_CONFORMANCE_CONTEXT {} mcp conformance-client",
        env!("CARGO_BIN_EXE_hanzo-dev")
    );
    let (ok, output) = harness(&["client", "--command", &command, "--scenario", name]);
    let (path, kept) = keep_output(name, ok, &output);
    eprintln!(
        "conformance harness, scenario {name}: output kept in {}",
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
    assert!(
        ok,
        "the harness failed scenario {name} (see {})",
        path.display()
    );
}

/// Every client scenario of the pin that passes through the product.
const PASSING: &[&str] = &[
    "initialize",
    "tools_call",
    "elicitation-sep1034-client-defaults",
    "sse-retry",
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/2025-03-26-oauth-metadata-backcompat",
    "auth/2025-03-26-oauth-endpoint-fallback",
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    "auth/basic-cimd",
    "auth/pre-registration",
    "auth/client-credentials-basic",
];

/// The client scenarios of the pin that do not pass, and why.
const NOT_PASSING: &[(&str, &str)] = &[
    (
        "auth/client-credentials-jwt",
        "extension (SEP-1046): the client-credentials grant is built, but client authentication \
         with a private_key_jwt assertion (ES256) is not: no ECDSA signer is in the broker",
    ),
    (
        "auth/cross-app-access-complete-flow",
        "extension (SEP-990): token exchange for an ID-JAG is not built",
    ),
];

macro_rules! scenarios {
    ($($test:ident => $name:literal),* $(,)?) => {$(
        #[test]
        fn $test() {
            scenario($name);
        }
    )*};
}

scenarios! {
    conformance_initialize => "initialize",
    conformance_tools_call => "tools_call",
    conformance_elicitation_sep1034_client_defaults => "elicitation-sep1034-client-defaults",
    conformance_sse_retry => "sse-retry",
    conformance_auth_metadata_default => "auth/metadata-default",
    conformance_auth_metadata_var1 => "auth/metadata-var1",
    conformance_auth_metadata_var2 => "auth/metadata-var2",
    conformance_auth_metadata_var3 => "auth/metadata-var3",
    conformance_auth_scope_from_www_authenticate => "auth/scope-from-www-authenticate",
    conformance_auth_scope_from_scopes_supported => "auth/scope-from-scopes-supported",
    conformance_auth_scope_omitted_when_undefined => "auth/scope-omitted-when-undefined",
    conformance_auth_scope_step_up => "auth/scope-step-up",
    conformance_auth_scope_retry_limit => "auth/scope-retry-limit",
    conformance_auth_token_endpoint_auth_basic => "auth/token-endpoint-auth-basic",
    conformance_auth_token_endpoint_auth_post => "auth/token-endpoint-auth-post",
    conformance_auth_token_endpoint_auth_none => "auth/token-endpoint-auth-none",
    conformance_auth_2025_03_26_metadata_backcompat => "auth/2025-03-26-oauth-metadata-backcompat",
    conformance_auth_2025_03_26_endpoint_fallback => "auth/2025-03-26-oauth-endpoint-fallback",
    conformance_auth_resource_mismatch => "auth/resource-mismatch",
    conformance_auth_offline_access_scope => "auth/offline-access-scope",
    conformance_auth_offline_access_not_supported => "auth/offline-access-not-supported",
    conformance_auth_basic_cimd => "auth/basic-cimd",
    conformance_auth_pre_registration => "auth/pre-registration",
    conformance_auth_client_credentials_basic => "auth/client-credentials-basic",
}

/// Every client scenario of the pin is either passing (and has its test above) or listed with
/// its reason, so a new scenario in a later pin cannot go unnoticed.
#[test]
fn every_client_scenario_of_the_pin_is_accounted_for() {
    let (ok, output) = harness(&["list"]);
    assert!(ok, "{output}");
    let client_part = output
        .split("Client scenarios")
        .nth(1)
        .expect("a client section");
    let mut names: Vec<&str> = client_part
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    names.sort_unstable();
    let mut ours: Vec<&str> = PASSING
        .iter()
        .copied()
        .chain(NOT_PASSING.iter().map(|(n, _)| *n))
        .collect();
    ours.sort_unstable();
    assert_eq!(names, ours);
    let source = include_str!("mcp_conformance.rs");
    for name in PASSING {
        assert!(
            source.contains(&format!("=> \"{name}\"")),
            "{name} has no test"
        );
    }
}

/// An unknown scenario is a usage error, not a pass.
#[test]
fn an_unknown_scenario_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_hanzo-dev"))
        .args(["mcp", "conformance-client", "http://127.0.0.1:9/mcp"])
        .env("MCP_CONFORMANCE_SCENARIO", "nosuch")
        .output()
        .expect("hanzo-dev");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown scenario"));
}
