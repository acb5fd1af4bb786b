//! Language servers in `hanzo-dev run` end to end: the real binary, the real lsp worker (its
//! launcher and sandbox), real pyright from `test-deps/lsp`
//! installed in the workspace as a project installs them, a real store, and the model replayed
//! from a cassette. The model's edit introduces a type error; the diagnostics block comes back in
//! the edit's result, which is what the model's next request carries and what the record keeps.

mod common;

use common::env::TestHome;
use common::servers::{install_into, repo_root};
use hanzo_model::script::{anthropic_cassette, ScriptTurn};
use hanzo_store::RunId;
use serde_json::{json, Value};

fn events_of(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn lsp_settings() -> Value {
    json!({
        "lsp_servers": {
            "pyright": {"command": "node_modules/.bin/pyright-langserver"},
            "typescript": {"command": "node_modules/.bin/typescript-language-server"},
        },
        "permissions": {"edit_file": "allow", "write_file": "allow"},
    })
}

#[test]
fn an_edit_that_breaks_types_returns_the_diagnostics_and_the_lsp_tools_answer() {
    let env = TestHome::new();
    install_into(
        &env.ws(),
        &["pyright-langserver", "typescript-language-server"],
    );
    std::fs::write(
        env.ws().join("lib.py"),
        "def double(x: int) -> int:\n    return x * 2\n",
    )
    .expect("lib");
    std::fs::write(
        env.ws().join("app.py"),
        "from lib import double\n\nprint(double(2))\n",
    )
    .expect("app");
    env.settings(lsp_settings());
    let cassette = env.path("model.jsonl");
    std::fs::write(
        &cassette,
        anthropic_cassette(&[
            // The read warms pyright up (started in the background, the read not held up).
            ScriptTurn::tool("t0", "read_file", json!({"path": "app.py"})),
            ScriptTurn::tool(
                "t1",
                "edit_file",
                json!({"path": "app.py", "old_string": "double(2)", "new_string": "double(\"two\")"}),
            ),
            ScriptTurn::tool(
                "t2",
                "lsp_definition",
                json!({"path": "app.py", "line": 3, "column": 8}),
            )
            .and_tool("t3", "lsp_hover", json!({"path": "app.py", "line": 3, "column": 8}))
            .and_tool("t4", "lsp_diagnostics", json!({"path": "app.py"})),
            ScriptTurn::text("I broke the types."),
        ]),
    )
    .expect("cassette");
    let out = env
        .command(&[
            "run",
            "--json",
            "--approval",
            "allow-listed",
            "--replay",
            &cassette.display().to_string(),
            "change the call",
        ])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let events = events_of(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{events:#?}");
    let run_id = RunId(
        events
            .iter()
            .find(|e| e["type"] == "run_started")
            .expect("run_started")["run_id"]
            .as_i64()
            .expect("id"),
    );
    let rec = env.store().load_run(run_id).expect("run");
    let calls: Vec<_> = rec.steps.iter().flat_map(|s| &s.tool_calls).collect();
    let by = |name: &str| {
        calls
            .iter()
            .find(|c| c.call.name == name)
            .unwrap_or_else(|| panic!("no {name} call in {calls:#?}"))
    };
    // A read's result is the file, with no block: only edits are diagnosed.
    let read = by("read_file");
    let text = read.call.output.as_deref().unwrap_or("");
    assert!(text.contains("print(double(2))"), "{read:?}");
    assert!(!text.contains("<diagnostics"), "{text}");
    // The edit's result carries the block: the model's next request has it, and so does the record.
    let edit = by("edit_file");
    let output = edit.call.output.as_deref().unwrap_or("");
    assert!(output.contains("<diagnostics"), "{output}");
    assert!(
        output.contains("app.py:3:14 error [reportArgumentType]"),
        "{output}"
    );
    assert!(output.trim_end().ends_with("</diagnostics>"), "{output}");
    // The lsp tools ran as read-only calls under --approval allow-listed.
    let def = by("lsp_definition");
    assert!(def.call.allowed, "{def:?}");
    assert_eq!(def.call.output.as_deref(), Some("lib.py:1:5"), "{def:?}");
    let hover = by("lsp_hover");
    assert!(
        hover
            .call
            .output
            .as_deref()
            .unwrap_or("")
            .contains("(x: int) -> int"),
        "{hover:?}"
    );
    let diags = by("lsp_diagnostics");
    assert!(
        diags
            .call
            .output
            .as_deref()
            .unwrap_or("")
            .contains("error [reportArgumentType]"),
        "{diags:?}"
    );
}

#[test]
fn lsp_check_reports_errors_and_exits_1_then_0_once_fixed() {
    let env = TestHome::new();
    install_into(
        &env.ws(),
        &["pyright-langserver", "typescript-language-server"],
    );
    env.settings(lsp_settings());
    std::fs::write(
        env.ws().join("bad.py"),
        "def f(x: int) -> int:\n    return x\n\n\nf(\"no\")\n",
    )
    .expect("py");
    let out = env
        .command(&["lsp", "check", "--json", "bad.py"])
        .output()
        .expect("check");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("json report");
    let diags = &report["files"][0]["diagnostics"];
    assert_eq!(report["files"][0]["path"], "bad.py", "{report:#}");
    assert_eq!(report["files"][0]["server"], "pyright", "{report:#}");
    assert_eq!(diags[0]["severity"], "error", "{report:#}");
    assert_eq!(diags[0]["code"], "reportArgumentType", "{report:#}");
    assert_eq!(
        diags[0]["range"]["start"],
        json!({"line": 5, "column": 3}),
        "{report:#}"
    );
    std::fs::write(
        env.ws().join("bad.py"),
        "def f(x: int) -> int:\n    return x\n\n\nf(1)\n",
    )
    .expect("fix");
    let out = env
        .command(&["lsp", "check", "bad.py"])
        .output()
        .expect("check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("0 errors"), "{stdout}");
}

/// A hostile "language server" configured in the user's `lsp_servers`, started by the real lsp
/// worker's launcher: what it could reach comes back as its diagnostics.
#[test]
fn a_hostile_configured_server_cannot_read_a_secret_write_or_open_a_socket() {
    let env = TestHome::new();
    let secret_dir = env.path("home/secret");
    std::fs::create_dir_all(&secret_dir).expect("mkdir");
    let canary = "canary-91be-must-not-leak";
    std::fs::write(secret_dir.join("key.txt"), canary).expect("canary");
    let script = env.ws().join("hostile_lsp.py");
    std::fs::copy(
        repo_root().join("workers/lsp/tests/fixtures/hostile_lsp.py"),
        &script,
    )
    .expect("copy the hostile server");
    std::fs::write(env.ws().join("a.evil"), "x\n").expect("file");
    env.settings(json!({
        "lsp_servers": {
            "hostile": {
                "command": "/usr/bin/python3",
                "args": [
                    script.display().to_string(),
                    "probe",
                    secret_dir.join("key.txt").display().to_string(),
                    secret_dir.display().to_string(),
                ],
                "files": ["**/*.evil"],
            },
        },
    }));
    let out = env
        .command(&["lsp", "check", "--json", "a.evil"])
        .output()
        .expect("check");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON report ({e}): {stderr}"));
    let said: Vec<String> = report["files"][0]["diagnostics"]
        .as_array()
        .unwrap_or_else(|| panic!("no diagnostics: {report:#}\n{stderr}"))
        .iter()
        .map(|d| d["message"].as_str().unwrap_or("").to_string())
        .collect();
    let outcome = |what: &str| {
        said.iter()
            .find(|m| m.starts_with(&format!("{what}: ")))
            .unwrap_or_else(|| panic!("no {what} probe in {said:?}"))
            .clone()
    };
    for probe in ["read", "write-workspace", "write-outside", "inet", "unix"] {
        assert!(
            outcome(probe).starts_with(&format!("{probe}: denied")),
            "{said:?}"
        );
    }
    assert!(!said.iter().any(|m| m.contains(canary)), "{said:?}");
    assert_eq!(outcome("env"), "env: HOME,LANG,PATH,TMPDIR", "{said:?}");
    assert!(!env.ws().join("pwned.txt").exists());
    assert!(!secret_dir.join("pwned.txt").exists());
    // The probes are errors: the check fails.
    assert_eq!(out.status.code(), Some(1), "{stderr}");
}

/// A server installed under `$HOME` (issue 15), through the real worker and launcher: its
/// installation prefix (`~/.local/lib/hostile-lsp`, reached through a link in `~/.local/bin`) is
/// granted to the lsp role, the server runs and answers, and the home's secrets stay out of reach.
/// One placed directly in `$HOME` is refused, naming the path.
#[test]
fn a_server_installed_under_home_reads_its_prefix_and_nothing_else_of_home() {
    let env = TestHome::new();
    let home = env.path("home").canonicalize().expect("home");
    let canary = "canary-home-e2e-must-not-leak";
    std::fs::create_dir_all(home.join(".ssh")).expect("ssh");
    std::fs::write(home.join(".ssh/id_rsa"), canary).expect("key");
    let pkg = home.join(".local/lib/hostile-lsp");
    let bin = home.join(".local/bin");
    std::fs::create_dir_all(&pkg).expect("pkg");
    std::fs::create_dir_all(&bin).expect("bin");
    for dir in [&pkg, &home] {
        let script = dir.join("hostile_lsp.py");
        std::fs::copy(
            repo_root().join("workers/lsp/tests/fixtures/hostile_lsp.py"),
            &script,
        )
        .expect("copy the hostile server");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    std::os::unix::fs::symlink(pkg.join("hostile_lsp.py"), bin.join("hostile-lsp")).expect("link");
    std::fs::write(env.ws().join("a.evil"), "x\n").expect("file");
    std::fs::write(env.ws().join("a.bad"), "x\n").expect("file");
    let probe_args = json!([
        "probe",
        home.join(".ssh/id_rsa").display().to_string(),
        home.join(".ssh").display().to_string(),
    ]);
    env.settings(json!({
        "lsp_servers": {
            "hostile": {"command": "hostile-lsp", "args": probe_args, "files": ["**/*.evil"]},
            "inhome": {
                "command": home.join("hostile_lsp.py").display().to_string(),
                "args": probe_args,
                "files": ["**/*.bad"],
            },
        },
    }));
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let out = env
        .command(&["lsp", "check", "--json", "a.evil", "a.bad"])
        .env("PATH", &path)
        .output()
        .expect("check");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON report ({e}): {stderr}"));
    let files = report["files"].as_array().expect("files");
    let evil = files
        .iter()
        .find(|f| f["path"] == "a.evil")
        .unwrap_or_else(|| panic!("{report:#}\n{stderr}"));
    let said: Vec<String> = evil["diagnostics"]
        .as_array()
        .unwrap_or_else(|| panic!("no diagnostics: {report:#}\n{stderr}"))
        .iter()
        .map(|d| d["message"].as_str().unwrap_or("").to_string())
        .collect();
    let read = said
        .iter()
        .find(|m| m.starts_with("read: "))
        .unwrap_or_else(|| panic!("no read probe in {said:?}\n{stderr}"));
    assert!(read.starts_with("read: denied"), "{said:?}");
    assert!(!said.iter().any(|m| m.contains(canary)), "{said:?}");
    assert!(!home.join(".ssh/pwned.txt").exists());
    // The server in $HOME itself: a warning at the start and a failure for its file, both
    // naming the path.
    assert!(
        stderr.contains("inhome") && stderr.contains("is the home directory itself"),
        "{stderr}"
    );
    let text = format!("{report}");
    assert!(
        text.contains(&format!("installed under {}", home.display())),
        "{report:#}"
    );
    assert!(!text.contains(canary));
}

/// The refusal of a server in `$HOME` names its path, and a path full of terminal escapes (a file
/// name or a link target the repository or an installer chose) reaches the terminal inert.
#[test]
fn a_refused_server_s_hostile_path_is_printed_without_its_escapes() {
    let env = TestHome::new();
    let home = env.path("home").canonicalize().expect("home");
    let name = "evil\u{1b}]0;pwned\u{7}\u{1b}[2J.py";
    let script = home.join(name);
    std::fs::copy(
        repo_root().join("workers/lsp/tests/fixtures/hostile_lsp.py"),
        &script,
    )
    .expect("copy the hostile server");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::write(env.ws().join("a.bad"), "x\n").expect("file");
    env.settings(json!({
        "lsp_servers": {
            "inhome": {"command": script.display().to_string(), "files": ["**/*.bad"]},
        },
    }));
    let out = env
        .command(&["lsp", "check", "a.bad"])
        .env("PATH", "/usr/bin:/bin")
        .output()
        .expect("check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is the home directory itself"), "{stderr}");
    for (what, text) in [("stdout", &stdout), ("stderr", &stderr)] {
        assert!(
            !text.chars().any(|c| c == '\u{1b}' || c == '\u{7}'),
            "{what} carries a raw escape: {text:?}"
        );
    }
    assert!(stderr.contains("evil"), "{stderr}");
}
