//! `hanzo-dev agents …` and `hanzo-dev runs …` through the real binary against a run store in a
//! temporary data directory. Runs are written with `hanzo_store::RunStore` exactly as the agent
//! loop writes them, then read back through the command line; every check is on values.
//!
//! A run "left running by a dead process" needs a process that dies: the test re-executes its own
//! binary with `CHILD_ENV` set, and that copy begins a run and exits without finishing it.

use hanzo_policy::{AuditRecord, PermissionMode, RuleRef, Scope};
use hanzo_store::{
    NewRun, RunId, RunRecord, RunStatus, RunStore, StepEnd, TokenUsage, ToolCall, DEFAULT_ORG,
};
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Output};

const CHILD_ENV: &str = "HANZO_STORE_CLI_CHILD_DATA_DIR";
const CHILD_TEST: &str = "child_begins_a_run_and_exits";
const CANARY: &str = "sk-canary-store-cli-5d1e";

/// Run `hanzo-dev` with `XDG_DATA_HOME` = `data`, no org from the environment.
fn hanzo(data: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hanzo-dev"))
        .args(args)
        .env("XDG_DATA_HOME", data)
        .env_remove("HANZO_ORG")
        .env("STORE_CLI_API_KEY", CANARY)
        .output()
        .expect("run hanzo-dev")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf-8 stdout")
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("utf-8 stderr")
}

/// The exit code, with both streams in the message when it is not `want`.
#[track_caller]
fn expect_code(o: &Output, want: i32) {
    assert_eq!(
        o.status.code(),
        Some(want),
        "stdout:\n{}\nstderr:\n{}",
        stdout(o),
        stderr(o)
    );
}

fn json_of(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).expect("stdout is JSON")
}

/// The store the binary opens: `$XDG_DATA_HOME/hanzo/orgs/{org}/agents.db`.
fn open_store(data: &Path, org: &str) -> RunStore {
    RunStore::open(&data.join("hanzo"), org).expect("open the store")
}

// ---- agents ----

#[test]
fn agents_create_list_show_delete() {
    let data = tempfile::tempdir().expect("tempdir");
    let d = data.path();

    let o = hanzo(
        d,
        &[
            "agents",
            "create",
            "reviewer",
            "--system-prompt",
            "Review carefully.\nCite lines.",
            "--tools",
            "read_file,grep",
            "--model",
            "claude-test",
        ],
    );
    expect_code(&o, 0);
    assert_eq!(
        stdout(&o),
        "created agent reviewer in org local (2 tools)\n"
    );

    // From a file, in another org, with `--org` after the subcommand.
    let prompt_file = d.join("prompt.txt");
    std::fs::write(&prompt_file, "Only look.\n").expect("write prompt");
    let o = hanzo(
        d,
        &[
            "agents",
            "create",
            "looker",
            "--system-prompt-file",
            prompt_file.to_str().expect("utf-8 path"),
            "--tools",
            "",
            "--org",
            "acme",
        ],
    );
    expect_code(&o, 0);
    assert_eq!(stdout(&o), "created agent looker in org acme (0 tools)\n");

    // The table: built-ins marked, the stored agent with model, tool count and creation time.
    let o = hanzo(d, &["agents", "list"]);
    expect_code(&o, 0);
    let text = stdout(&o);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        ["NAME", "KIND", "MODEL", "TOOLS", "CREATED"],
        "{text}"
    );
    let names: Vec<&str> = rows[1..].iter().map(|r| r[0]).collect();
    assert_eq!(
        names,
        ["plan", "solve", "code", "review", "auto", "reviewer"],
        "{text}"
    );
    for r in &rows[1..6] {
        assert_eq!(r[1], "built-in", "{text}");
    }
    let reviewer = &rows[6];
    assert_eq!(reviewer[1..4], ["stored", "claude-test", "2"], "{text}");
    assert!(
        reviewer[4].len() == 20 && reviewer[4].ends_with('Z'),
        "ISO creation time: {text}"
    );
    assert!(!text.contains("looker"), "orgs are separate stores: {text}");

    let o = hanzo(d, &["agents", "--org", "acme", "list", "--json"]);
    expect_code(&o, 0);
    let list = json_of(&o);
    let list = list.as_array().expect("array");
    assert_eq!(list.len(), 6);
    let looker = list
        .iter()
        .find(|a| a["name"] == "looker")
        .expect("looker listed in acme");
    assert_eq!(looker["builtin"], false);
    assert_eq!(looker["tools"], json!([]));
    assert_eq!(looker["system_prompt"], "Only look.\n");
    assert!(looker["created_ms"].as_u64().expect("created_ms") > 0);
    let code = list.iter().find(|a| a["name"] == "code").expect("code");
    assert_eq!(code["builtin"], true);
    assert_eq!(code["created_ms"], Value::Null);

    let o = hanzo(d, &["agents", "show", "reviewer"]);
    expect_code(&o, 0);
    let text = stdout(&o);
    assert!(
        text.starts_with("name:    reviewer\nkind:    stored, created "),
        "{text}"
    );
    assert!(text.contains("\nmodel:   claude-test\n"), "{text}");
    assert!(text.contains("\ntools:   read_file, grep\n"), "{text}");
    assert!(
        text.ends_with("system prompt:\n  Review carefully.\n  Cite lines.\n"),
        "{text}"
    );

    let o = hanzo(d, &["agents", "show", "reviewer", "--json"]);
    expect_code(&o, 0);
    let v = json_of(&o);
    assert_eq!(v["name"], "reviewer");
    assert_eq!(v["model"], "claude-test");
    assert_eq!(v["system_prompt"], "Review carefully.\nCite lines.");
    assert_eq!(v["tools"], json!(["read_file", "grep"]));
    // The store holds exactly what the command line shows.
    let stored = open_store(d, DEFAULT_ORG)
        .get_agent("reviewer")
        .expect("read")
        .expect("stored");
    assert_eq!(v["created_ms"], json!(stored.created_ms));
    assert_eq!(stored.def.tools, ["read_file", "grep"]);

    // Built-ins are shown too.
    let o = hanzo(d, &["agents", "show", "solve", "--json"]);
    expect_code(&o, 0);
    let v = json_of(&o);
    assert_eq!(v["builtin"], true);
    assert_eq!(v["tools"], json!(hanzo_dev::agent::defs::READ_ONLY_TOOLS));
    let o = hanzo(d, &["agents", "show", "auto", "--json"]);
    expect_code(&o, 0);
    assert_eq!(json_of(&o)["stages"], json!(["plan", "code", "review"]));
    let o = hanzo(d, &["agents", "show", "plan"]);
    expect_code(&o, 0);
    assert!(stdout(&o).contains("kind:    built-in\n"), "{}", stdout(&o));

    let o = hanzo(d, &["agents", "delete", "reviewer"]);
    expect_code(&o, 0);
    assert_eq!(
        stdout(&o),
        "deleted agent reviewer from org local (its past runs stay on record)\n"
    );
    let o = hanzo(d, &["agents", "show", "reviewer"]);
    expect_code(&o, 4);
    assert!(
        stderr(&o).contains(r#"no agent named "reviewer" in org local"#),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        open_store(d, DEFAULT_ORG)
            .get_agent("reviewer")
            .expect("read"),
        None
    );
}

#[test]
fn agents_error_paths() {
    let data = tempfile::tempdir().expect("tempdir");
    let d = data.path();
    let create = |name: &str, tools: &str| {
        hanzo(
            d,
            &[
                "agents",
                "create",
                name,
                "--system-prompt",
                "Do it.",
                "--tools",
                tools,
            ],
        )
    };

    // Unknown tools: a usage error naming each and every valid tool; nothing stored.
    let o = create("x", "read_file,curl,netcat");
    expect_code(&o, 2);
    let err = stderr(&o);
    assert!(
        err.contains(r#"unknown tools "curl", "netcat"; valid tools: read_file, write_file, edit_file, list_dir, glob, grep, bash, apply_patch"#),
        "{err}"
    );
    assert_eq!(
        open_store(d, DEFAULT_ORG).list_agents().expect("list"),
        vec![]
    );

    // Every built-in name is refused.
    for name in ["plan", "solve", "code", "review", "auto"] {
        let o = create(name, "grep");
        expect_code(&o, 2);
        assert!(
            stderr(&o).contains(&format!("{name:?} is the name of a built-in agent")),
            "{}",
            stderr(&o)
        );
    }

    // A duplicate: exit 1, the first definition untouched.
    expect_code(&create("dup", "grep"), 0);
    let o = create("dup", "bash");
    expect_code(&o, 1);
    assert!(
        stderr(&o).contains(r#"an agent named "dup" already exists in org local"#),
        "{}",
        stderr(&o)
    );
    let dup = open_store(d, DEFAULT_ORG)
        .get_agent("dup")
        .expect("read")
        .expect("dup");
    assert_eq!(dup.def.tools, ["grep"]);

    // The prompt: required, one source only, readable, not empty, never holding a secret.
    let o = hanzo(d, &["agents", "create", "np", "--tools", "grep"]);
    expect_code(&o, 2);
    let o = hanzo(
        d,
        &[
            "agents",
            "create",
            "both",
            "--system-prompt",
            "a",
            "--system-prompt-file",
            "/etc/hostname",
            "--tools",
            "grep",
        ],
    );
    expect_code(&o, 2);
    let missing = d.join("no-such-prompt.txt");
    let o = hanzo(
        d,
        &[
            "agents",
            "create",
            "nofile",
            "--system-prompt-file",
            missing.to_str().expect("utf-8"),
            "--tools",
            "grep",
        ],
    );
    expect_code(&o, 2);
    assert!(
        stderr(&o).contains("cannot read the system prompt file"),
        "{}",
        stderr(&o)
    );
    let o = hanzo(
        d,
        &[
            "agents",
            "create",
            "blank",
            "--system-prompt",
            "  ",
            "--tools",
            "grep",
        ],
    );
    expect_code(&o, 2);
    assert!(
        stderr(&o).contains("the system prompt is empty"),
        "{}",
        stderr(&o)
    );
    let o = hanzo(
        d,
        &[
            "agents",
            "create",
            "leaky",
            "--system-prompt",
            &format!("use {CANARY} for the API"),
            "--tools",
            "grep",
        ],
    );
    expect_code(&o, 2);
    assert!(stderr(&o).contains("secret"), "{}", stderr(&o));
    assert!(
        !stderr(&o).contains(CANARY),
        "the refusal must not echo the secret"
    );
    // --tools is required (`--tools ''` for none).
    let o = hanzo(d, &["agents", "create", "nt", "--system-prompt", "a"]);
    expect_code(&o, 2);
    // A name the store refuses.
    let o = create("bad\u{7}name", "grep");
    expect_code(&o, 2);
    assert!(stderr(&o).contains("invalid agent name"), "{}", stderr(&o));

    // Delete: built-ins never, unknown names fail.
    let o = hanzo(d, &["agents", "delete", "code"]);
    expect_code(&o, 2);
    assert!(
        stderr(&o).contains(r#""code" is a built-in agent and cannot be deleted"#),
        "{}",
        stderr(&o)
    );
    let o = hanzo(d, &["agents", "delete", "ghost"]);
    expect_code(&o, 4);
    assert!(
        stderr(&o).contains(r#"no agent named "ghost" in org local"#),
        "{}",
        stderr(&o)
    );
    let o = hanzo(d, &["agents", "show", "ghost", "--json"]);
    expect_code(&o, 4);
    assert!(o.stdout.is_empty());

    // An org that would escape the data directory.
    let o = hanzo(d, &["agents", "list", "--org", "../evil"]);
    expect_code(&o, 2);
    assert!(stderr(&o).contains("invalid org name"), "{}", stderr(&o));

    // After all that, only `dup` was stored.
    let names: Vec<String> = open_store(d, DEFAULT_ORG)
        .list_agents()
        .expect("list")
        .into_iter()
        .map(|a| a.def.name)
        .collect();
    assert_eq!(names, ["dup"]);
}

// ---- runs ----

/// Not a test on its own: in the copy started with `CHILD_ENV`, begin a run and exit, leaving it
/// `running` with a pid that is gone.
#[test]
fn child_begins_a_run_and_exits() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let mut s = RunStore::open(Path::new(&dir), DEFAULT_ORG).expect("child open");
    let run = s
        .begin_run(&NewRun {
            agent: Some("solve".into()),
            input: "abandoned task".into(),
            model: "claude-test".into(),
            isolation: hanzo_policy::Tier::A,
        })
        .expect("begin run");
    s.begin_step(run).expect("step in progress");
    std::process::exit(0);
}

fn tool_call(
    name: &str,
    input: Value,
    permission: PermissionMode,
    rule: Option<RuleRef>,
    allowed: bool,
    reason: &str,
) -> ToolCall {
    ToolCall {
        tool_use_id: Some(format!("toolu_{name}")),
        name: name.into(),
        input,
        permission,
        rule,
        allowed,
        decision_reason: reason.into(),
        decided_by: hanzo_store::DecidedBy::Default,
        hook_results: vec![],
        output: None,
        error: None,
        duration_ms: 7,
    }
}

/// A finished run with two steps: a read (allowed, long output), a denied `bash`, an edit that
/// failed, audit records and events. Returns its id.
fn populate_finished_run(s: &mut RunStore) -> RunId {
    let run = s
        .begin_run(&NewRun {
            agent: Some("code".into()),
            input: "fix the failing test\nand keep the API".into(),
            model: "claude-test".into(),
            isolation: hanzo_policy::Tier::B,
        })
        .expect("begin run");
    let step1 = s.begin_step(run).expect("step 1");
    let mut read = tool_call(
        "read_file",
        json!({"path": "src/lib.rs", "pad": "p".repeat(300)}),
        PermissionMode::Allow,
        Some(RuleRef {
            scope: Some(Scope::Project),
            index: 0,
            pattern: "read_file".into(),
        }),
        true,
        "allowed by rule",
    );
    read.decided_by = hanzo_store::DecidedBy::Rule;
    read.output = Some((1..=30).map(|i| format!("{i}\tline {i}\n")).collect());
    s.record_tool_call(step1, &read).expect("read");
    let mut bash = tool_call(
        "bash",
        json!({"command": "curl https://example.com"}),
        PermissionMode::Deny,
        Some(RuleRef {
            scope: Some(Scope::User),
            index: 3,
            pattern: "bash(curl *)".into(),
        }),
        false,
        "network access is denied",
    );
    bash.decided_by = hanzo_store::DecidedBy::Rule;
    bash.hook_results = vec![hanzo_store::HookResult::Pre {
        allowed: true,
        failed: false,
        reason: None,
        decided_by: Some("audit.sh".into()),
    }];
    bash.error = Some("denied: network access is denied".into());
    bash.duration_ms = 0;
    s.record_tool_call(step1, &bash).expect("bash");
    for (tool, mode, reason) in [
        ("read_file", PermissionMode::Allow, "allowed by rule"),
        ("bash", PermissionMode::Deny, "network access is denied"),
    ] {
        s.record_audit(
            Some(run),
            &AuditRecord {
                timestamp: 1_700_000_000_000,
                session_id: run.to_string(),
                tool_name: tool.into(),
                input_digest: "sha256:00112233445566778899aabbccddeeff".into(),
                mode,
                rule_matched: None,
                reason: reason.into(),
            },
        )
        .expect("audit");
    }
    s.finish_step(
        step1,
        &StepEnd {
            text: Some("Reading the code first.".into()),
            usage: TokenUsage {
                input: 1000,
                output: 100,
            },
        },
    )
    .expect("finish step 1");
    s.record_event(run, Some(step1), "compaction", &json!({"dropped_turns": 4}))
        .expect("event");
    let step2 = s.begin_step(run).expect("step 2");
    let mut edit = tool_call(
        "edit_file",
        json!({"path": "src/lib.rs", "old": "a", "new": "b"}),
        PermissionMode::Prompt,
        None,
        true,
        "approved (allow-listed)",
    );
    edit.decided_by = hanzo_store::DecidedBy::Approval(hanzo_store::ApprovalMode::AllowListed);
    edit.error = Some("old text not found in src/lib.rs".into());
    s.record_tool_call(step2, &edit).expect("edit");
    s.finish_step(
        step2,
        &StepEnd {
            text: Some("Done: the test passes.".into()),
            usage: TokenUsage {
                input: 500,
                output: 200,
            },
        },
    )
    .expect("finish step 2");
    s.record_event(run, None, "budget", &json!({"tokens": 1800}))
        .expect("event");
    s.finish_run(
        run,
        RunStatus::Succeeded,
        Some("fixed the test"),
        TokenUsage {
            input: 1500,
            output: 300,
        },
    )
    .expect("finish run");
    run
}

#[test]
fn runs_list_show_export_and_interrupted_runs() {
    let data = tempfile::tempdir().expect("tempdir");
    let d = data.path();
    let mut s = open_store(d, DEFAULT_ORG);
    let finished = populate_finished_run(&mut s);
    // Owned by this (live) test process: must stay `running`.
    let live = s
        .begin_run(&NewRun {
            agent: None,
            input: "still going".into(),
            model: "claude-test".into(),
            isolation: hanzo_policy::Tier::B,
        })
        .expect("live run");
    // Owned by a process that exits without finishing it.
    let status = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", CHILD_TEST, "--nocapture"])
        .env(CHILD_ENV, d.join("hanzo"))
        .status()
        .expect("start the child");
    assert!(status.success(), "child: {status}");
    let dead = RunId(live.0 + 1);
    assert_eq!(
        s.get_run(dead).expect("the child's run").status,
        RunStatus::Running,
        "nothing has marked it yet"
    );

    // ---- list ----
    let o = hanzo(d, &["runs", "list"]);
    expect_code(&o, 0);
    let text = stdout(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        [
            "ID",
            "STATUS",
            "AGENT",
            "MODEL",
            "ISOLATION",
            "STARTED",
            "DURATION",
            "TOKENS(IN/OUT)",
            "INPUT"
        ]
    );
    let row = |id: RunId| -> Vec<&str> {
        lines[1..]
            .iter()
            .map(|l| l.split_whitespace().collect::<Vec<&str>>())
            .find(|r| r[0] == id.to_string())
            .unwrap_or_else(|| panic!("run {id} in {text}"))
    };
    // Newest first.
    assert!(lines[1].starts_with(&dead.to_string()), "{text}");
    assert_eq!(
        row(dead)[..4],
        [
            dead.to_string().as_str(),
            "interrupted",
            "solve",
            "claude-test"
        ]
    );
    let r = row(live);
    assert_eq!(r[1..3], ["running", "-"], "{text}");
    assert_eq!(r[6], "-", "a running run has no duration yet: {text}");
    let r = row(finished);
    assert_eq!(r[1..4], ["succeeded", "code", "claude-test"], "{text}");
    assert_eq!(r[4], "B", "{text}");
    assert!(r[5].ends_with('Z'), "{text}");
    assert_eq!(r[7], "1500/300", "{text}");
    assert!(lines[3].ends_with("fix the failing test…"), "{text}");

    let o = hanzo(d, &["runs", "list", "--json"]);
    expect_code(&o, 0);
    let list = json_of(&o);
    let ids: Vec<i64> = list
        .as_array()
        .expect("array")
        .iter()
        .map(|r| r["id"].as_i64().expect("id"))
        .collect();
    assert_eq!(ids, [dead.0, live.0, finished.0]);
    assert_eq!(list[0]["status"], "interrupted");
    assert_eq!(
        list[0]["outcome"],
        "the process running it stopped before the run finished"
    );
    assert_eq!(list[1]["status"], "running");
    assert_eq!(list[2]["usage"], json!({"input": 1500, "output": 300}));
    let o = hanzo(d, &["runs", "list", "--limit", "1", "--json"]);
    expect_code(&o, 0);
    assert_eq!(json_of(&o).as_array().expect("array").len(), 1);

    // The store agrees: the dead process's run was closed, the live one was not.
    assert_eq!(
        s.get_run(dead).expect("dead").status,
        RunStatus::Interrupted
    );
    assert_eq!(s.get_run(live).expect("live").status, RunStatus::Running);

    // ---- show (human) ----
    let id = finished.to_string();
    let o = hanzo(d, &["runs", "show", &id]);
    expect_code(&o, 0);
    let text = stdout(&o);
    assert!(
        text.starts_with(&format!("run {id}  succeeded\n")),
        "{text}"
    );
    for want in [
        "  input:     fix the failing test…\n",
        "  agent:     code\n",
        "  model:     claude-test\n",
        "  isolation: B\n",
        "  status:    succeeded\n",
        "  outcome:   fixed the test\n",
        "  tokens:    1500 in, 300 out\n",
        "  full input:\n    fix the failing test\n    and keep the API\n",
        "tokens 1000 in, 100 out\n  text:\n    Reading the code first.\n",
        "  tool read_file  allowed  7ms  [toolu_read_file]\n",
        "    decision:  allow (rule #0 \"read_file\", project settings) → allowed by rule: allowed by rule\n",
        "      1\tline 1\n",
        "      8\tline 8\n",
        "      [… 22 more lines cut; `hanzo-dev runs show 1 --json` has all]\n",
        "  tool bash  DENIED  0ms  [toolu_bash]\n",
        "    input:     {\"command\":\"curl https://example.com\"}\n",
        "    decision:  deny (rule #3 \"bash(curl *)\", user settings) → DENIED by rule: network access is denied\n",
        "    hooks:     [{\"phase\":\"pre\",\"allowed\":true,\"failed\":false,\"reason\":null,\"decided_by\":\"audit.sh\"}]\n",
        "    error:\n      denied: network access is denied\n",
        "    decision:  prompt (no rule matched: policy default) → allowed by approval:allow-listed: approved (allow-listed)\n",
        "    error:\n      old text not found in src/lib.rs\n",
        "    Done: the test passes.\n",
        "\naudit (2)\n",
        "  2023-11-14T22:13:20Z  bash  deny (no rule matched: policy default)  sha256:001122334455…  network access is denied\n",
        "\nevents (2)\n",
        "  step 1  compaction  {\"dropped_turns\":4}\n",
        "  budget  {\"tokens\":1800}\n",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    // Cut for reading: the long input value and the lines after the eighth are not shown.
    assert!(!text.contains(&"p".repeat(100)), "{text}");
    assert!(!text.contains("line 9\n"), "{text}");
    // Steps in order.
    let step1 = text.find("\nstep 1  ").expect("step 1");
    let step2 = text.find("\nstep 2  ").expect("step 2");
    assert!(step1 < step2, "{text}");

    // ---- show --json: the whole record, nothing cut ----
    let o = hanzo(d, &["runs", "show", &id, "--json"]);
    expect_code(&o, 0);
    let shown: RunRecord = serde_json::from_slice(&o.stdout).expect("a RunRecord");
    assert_eq!(shown, s.load_run(finished).expect("load"));
    assert_eq!(shown.steps.len(), 2);
    let calls = &shown.steps[0].tool_calls;
    assert_eq!(calls.len(), 2);
    assert!(!calls[1].call.allowed);
    assert_eq!(calls[1].call.permission, PermissionMode::Deny);
    assert_eq!(
        calls[0].call.output.as_deref().map(|o| o.lines().count()),
        Some(30)
    );
    assert_eq!(calls[0].call.input["pad"], "p".repeat(300));
    assert_eq!(shown.audit.len(), 2);
    assert_eq!(shown.events.len(), 2);

    // The interrupted run shows its status and the step it was in.
    let o = hanzo(d, &["runs", "show", &dead.to_string()]);
    expect_code(&o, 0);
    let text = stdout(&o);
    assert!(
        text.starts_with(&format!("run {dead}  interrupted\n")),
        "{text}"
    );
    assert!(text.contains("\nstep 1  not finished  "), "{text}");

    // ---- export ----
    let o = hanzo(d, &["runs", "export", &id]);
    expect_code(&o, 0);
    let exported = json_of(&o);
    assert_eq!(exported, s.export_run(finished).expect("export"));
    assert_eq!(exported["format"], "hanzo-run");
    assert_eq!(exported["version"], 1);
    assert_eq!(exported["run"]["status"], "succeeded");
    let file = d.join("run.json");
    let o = hanzo(
        d,
        &[
            "runs",
            "export",
            &id,
            "--output",
            file.to_str().expect("utf-8"),
        ],
    );
    expect_code(&o, 0);
    assert!(o.stdout.is_empty());
    let from_file: Value =
        serde_json::from_slice(&std::fs::read(&file).expect("read export")).expect("JSON");
    assert_eq!(from_file, exported);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "exports hold task data: owner-only");
    }

    // ---- errors ----
    for args in [
        vec!["runs", "show", "99"],
        vec!["runs", "show", "99", "--json"],
        vec!["runs", "export", "99"],
    ] {
        let o = hanzo(d, &args);
        expect_code(&o, 4);
        assert!(
            stderr(&o).contains("no run 99 in org local"),
            "{}",
            stderr(&o)
        );
        assert!(o.stdout.is_empty());
    }
    let o = hanzo(d, &["runs", "show", &id, "--org", "other"]);
    expect_code(&o, 4);
    assert!(
        stderr(&o).contains(&format!("no run {id} in org other")),
        "{}",
        stderr(&o)
    );
    for bad in ["abc", "0", "1.5"] {
        let o = hanzo(d, &["runs", "show", bad]);
        expect_code(&o, 2);
        assert!(stderr(&o).contains("malformed run id"), "{}", stderr(&o));
        let o = hanzo(d, &["runs", "export", bad]);
        expect_code(&o, 2);
    }
    let o = hanzo(d, &["runs", "list", "--org", "Not An Org"]);
    expect_code(&o, 2);
}

#[test]
fn runs_list_of_an_empty_org() {
    let data = tempfile::tempdir().expect("tempdir");
    let o = hanzo(data.path(), &["runs", "--org", "fresh", "list"]);
    expect_code(&o, 0);
    assert_eq!(stdout(&o), "no runs in org fresh\n");
    let o = hanzo(data.path(), &["runs", "list", "--json"]);
    expect_code(&o, 0);
    assert_eq!(json_of(&o), json!([]));
}
