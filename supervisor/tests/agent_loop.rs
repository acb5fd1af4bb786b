//! The agent loop against scripted seams (HIP-0301 §2: "tests pass mocks"): a scripted model, a
//! tool executor that records what it was asked, real policy and a real SQLite store. Each test
//! checks what the model was shown next and what the record holds.

use hanzo_dev::agent::approval::{ApprovalMode, Unattended};
use hanzo_dev::agent::defs;
use hanzo_dev::agent::events::{CollectEvents, RunEvent};
use hanzo_dev::agent::run::{AgentLoop, Limits, LoopConfig, RunSpec};
use hanzo_dev::agent::traits::{
    ApiClient, PermissionDecision, PermissionPrompter, ToolExecutor, ToolInvocation, TurnEnd,
    TurnError, TurnRequest,
};
use hanzo_ipc::roles::model::{
    ContentBlock, Message, MessageRole, StopReason, StreamErrorKind, StreamEvent, ToolDef, Usage,
};
use hanzo_ipc::roles::tools::{PreHookReply, ToolResult};
use hanzo_policy::hooks::{HookConfig, HookEvent};
use hanzo_policy::permission::{PermissionMode, PermissionRule, RuleList, ScopedPolicy};
use hanzo_store::{AgentDef, CallStatus, DecidedBy, HookResult, RunStatus, RunStore, SecretValues};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

// ---------- scripted model ----------

#[derive(Clone)]
enum Turn {
    Reply {
        text: String,
        tools: Vec<(String, String, Value)>,
        input_tokens: u64,
    },
    Fail(StreamErrorKind, String),
    /// Never answers (for cancellation and timeouts).
    Hang,
}

fn say(text: &str) -> Turn {
    Turn::Reply {
        text: text.into(),
        tools: vec![],
        input_tokens: 10,
    }
}

fn call(text: &str, tools: &[(&str, &str, Value)]) -> Turn {
    Turn::Reply {
        text: text.into(),
        tools: tools
            .iter()
            .map(|(id, n, v)| (id.to_string(), n.to_string(), v.clone()))
            .collect(),
        input_tokens: 10,
    }
}

/// One request as the model saw it: system prompt, messages, offered tool names.
type Seen = (String, Vec<Message>, Vec<String>);

#[derive(Default)]
struct ScriptedModel {
    turns: Mutex<VecDeque<Turn>>,
    /// Every request: (system, messages, tool names).
    seen: Mutex<Vec<Seen>>,
}

impl ScriptedModel {
    fn new(turns: Vec<Turn>) -> Self {
        ScriptedModel {
            turns: Mutex::new(turns.into()),
            seen: Mutex::new(Vec::new()),
        }
    }

    fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl ApiClient for ScriptedModel {
    async fn send_message(
        &self,
        request: TurnRequest<'_>,
        on_event: &mut dyn FnMut(&StreamEvent),
    ) -> Result<TurnEnd, TurnError> {
        self.seen.lock().unwrap().push((
            request.system.to_string(),
            request.messages.to_vec(),
            request.tools.iter().map(|t| t.name.clone()).collect(),
        ));
        let turn = self.turns.lock().unwrap().pop_front();
        match turn {
            None => Err(TurnError {
                kind: Some(StreamErrorKind::Cassette),
                message: "script exhausted".into(),
            }),
            Some(Turn::Hang) => {
                std::future::pending::<()>().await;
                unreachable!()
            }
            Some(Turn::Fail(kind, message)) => {
                on_event(&StreamEvent::Error {
                    kind,
                    message: message.clone(),
                });
                Err(TurnError {
                    kind: Some(kind),
                    message,
                })
            }
            Some(Turn::Reply {
                text,
                tools,
                input_tokens,
            }) => {
                if !text.is_empty() {
                    for piece in text.split_inclusive(' ') {
                        on_event(&StreamEvent::ContentDelta { text: piece.into() });
                    }
                }
                for (id, name, input) in &tools {
                    on_event(&StreamEvent::ToolUse {
                        id: id.clone(),
                        name: name.clone(),
                        input_json: input.to_string(),
                    });
                }
                Ok(TurnEnd {
                    stop_reason: if tools.is_empty() {
                        StopReason::EndTurn
                    } else {
                        StopReason::ToolUse
                    },
                    usage: Usage {
                        input_tokens,
                        output_tokens: 5,
                    },
                })
            }
        }
    }
}

// ---------- recording tool executor ----------

#[derive(Default)]
struct FakeTools {
    executed: Mutex<Vec<(String, Value)>>,
    pre_hook_calls: Mutex<Vec<String>>,
    post_hook_calls: Mutex<Vec<String>>,
    /// Pre-hook verdict for a tool name.
    deny_by_hook: Option<(String, String)>,
    /// Output for every call, by tool name (default "ok:<name>").
    outputs: Vec<(String, String)>,
    hang: Option<String>,
    /// `bash` prints what follows `echo ` in its command, as a shell would.
    echo: bool,
    /// Read the run store at this data directory while a call executes, noting the call's
    /// recorded status (it must already be on record as started).
    watch_store: Option<std::path::PathBuf>,
    seen_status: Mutex<Vec<Option<CallStatus>>>,
    /// After this many executed calls, close the run behind the loop's back (the store then
    /// refuses every write for it).
    sabotage_after: Option<(std::path::PathBuf, usize)>,
}

impl FakeTools {
    fn observe(&self, call: &ToolInvocation) {
        if let Some(dir) = &self.watch_store {
            let reader = RunStore::open(dir, "local").unwrap();
            let run = reader.list_runs(1).unwrap()[0].id;
            let rec = reader.load_run(run).unwrap();
            let status = rec
                .steps
                .iter()
                .flat_map(|s| &s.tool_calls)
                .find(|c| c.call.tool_use_id.as_deref() == Some(call.id.as_str()))
                .map(|c| c.status);
            self.seen_status.lock().unwrap().push(status);
        }
        if let Some((dir, after)) = &self.sabotage_after {
            if self.executed.lock().unwrap().len() == *after {
                let mut other = RunStore::open(dir, "local").unwrap();
                let run = other.list_runs(1).unwrap()[0].id;
                other
                    .finish_run(
                        run,
                        RunStatus::Failed,
                        Some("closed elsewhere"),
                        Default::default(),
                    )
                    .unwrap();
            }
        }
    }
}

impl ToolExecutor for FakeTools {
    async fn definitions(&self) -> Result<Vec<ToolDef>, String> {
        Ok(hanzo_tools::defs::definitions()
            .into_iter()
            .map(|d| ToolDef {
                name: d.name,
                description: d.description,
                input_schema_json: d.input_schema,
            })
            // As the production executor offers them when the lsp worker runs.
            .chain(hanzo_dev::agent::lsp::tool_defs())
            .collect())
    }

    async fn execute(&self, call: &ToolInvocation, _session: &str) -> ToolResult {
        let input: Value = serde_json::from_str(&call.input_json).unwrap();
        self.executed
            .lock()
            .unwrap()
            .push((call.name.clone(), input));
        self.observe(call);
        if self.hang.as_deref() == Some(call.name.as_str()) {
            std::future::pending::<()>().await;
        }
        if self.echo && call.name == "bash" {
            let input: Value = serde_json::from_str(&call.input_json).unwrap();
            let command = input["command"].as_str().unwrap_or("");
            return ToolResult::ok(format!(
                "{}\n",
                command.strip_prefix("echo ").unwrap_or(command)
            ));
        }
        let out = self
            .outputs
            .iter()
            .find(|(n, _)| *n == call.name)
            .map(|(_, o)| o.clone())
            .unwrap_or_else(|| format!("ok:{}", call.name));
        ToolResult::ok(out)
    }

    async fn pre_hooks(
        &self,
        _hooks: &[HookConfig],
        call: &ToolInvocation,
        _s: &str,
    ) -> PreHookReply {
        self.pre_hook_calls.lock().unwrap().push(call.name.clone());
        match &self.deny_by_hook {
            Some((tool, why)) if *tool == call.name => PreHookReply {
                allowed: false,
                reason: Some(why.clone()),
                decided_by: Some("./check.sh".into()),
                failed: false,
            },
            _ => PreHookReply {
                allowed: true,
                reason: None,
                decided_by: None,
                failed: false,
            },
        }
    }

    async fn post_hooks(
        &self,
        _hooks: &[HookConfig],
        call: &ToolInvocation,
        _s: &str,
        _r: &ToolResult,
    ) -> Vec<String> {
        self.post_hook_calls.lock().unwrap().push(call.name.clone());
        Vec::new()
    }
}

// ---------- harness ----------

struct Harness {
    _dir: tempfile::TempDir,
    store: RunStore,
    policy: ScopedPolicy,
    config: LoopConfig,
    events: CollectEvents,
}

fn rules(list: &[(&str, PermissionMode)]) -> RuleList {
    RuleList::new(
        list.iter()
            .map(|(p, m)| PermissionRule::new(*p, *m))
            .collect(),
    )
    .unwrap()
}

impl Harness {
    fn new(user_rules: &[(&str, PermissionMode)]) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let store = RunStore::open(dir.path(), "local").unwrap();
        Harness {
            policy: ScopedPolicy::new(
                rules(user_rules),
                RuleList::default(),
                RuleList::default(),
                false,
            ),
            store,
            _dir: dir,
            config: LoopConfig {
                limits: Limits {
                    max_steps: 20,
                    ..Limits::default()
                },
                ..LoopConfig::default()
            },
            events: CollectEvents::default(),
        }
    }

    async fn run<P: PermissionPrompter>(
        &mut self,
        model: &ScriptedModel,
        tools: &FakeTools,
        prompter: &P,
        stages: Vec<AgentDef>,
        cancel: tokio::sync::watch::Receiver<bool>,
    ) -> hanzo_dev::agent::run::RunReport {
        let mut lp = AgentLoop {
            api: model,
            tools,
            prompter,
            policy: &self.policy,
            store: &mut self.store,
            events: &self.events,
            config: self.config.clone(),
            cancel,
        };
        lp.run(&RunSpec {
            task: "fix the bug".into(),
            agent_name: stages.first().map(|a| a.name.clone()).unwrap_or_default(),
            stages,
            model: "test-model".into(),
            isolation: hanzo_policy::Tier::B,
            workspace: "/ws".into(),
            replay: true,
            dangerous_workspace: Vec::new(),
        })
        .await
        .expect("the store works")
    }

    async fn run_code(
        &mut self,
        model: &ScriptedModel,
        tools: &FakeTools,
    ) -> hanzo_dev::agent::run::RunReport {
        let (_tx, rx) = tokio::sync::watch::channel(false);
        self.run(
            model,
            tools,
            &Unattended(ApprovalMode::Deny),
            vec![defs::builtin("code").unwrap()],
            rx,
        )
        .await
    }
}

/// The tool results the model was shown in request `n`'s last message.
fn results_in(req: &Seen) -> Vec<(String, String, bool)> {
    let last = req.1.last().expect("a message");
    assert_eq!(last.role, MessageRole::User);
    last.content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => Some((tool_use_id.clone(), content.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

const ALLOW_ALL: &[(&str, PermissionMode)] = &[
    ("read_file", PermissionMode::Allow),
    ("edit_file", PermissionMode::Allow),
    ("bash", PermissionMode::Allow),
];

// ---------- tests ----------

#[tokio::test]
async fn a_multi_step_run_executes_feeds_back_and_records_everything() {
    let mut h = Harness::new(ALLOW_ALL);
    let model = ScriptedModel::new(vec![
        call(
            "Reading.",
            &[("t1", "read_file", json!({"path": "src/a.py"}))],
        ),
        call(
            "Fixing and testing.",
            &[
                (
                    "t2",
                    "edit_file",
                    json!({"path": "src/a.py", "old_string": "x", "new_string": "y"}),
                ),
                ("t3", "bash", json!({"command": "python3 -m unittest"})),
            ],
        ),
        say("Fixed the bug; tests pass."),
    ]);
    let tools = FakeTools::default();
    let report = h.run_code(&model, &tools).await;
    assert_eq!(report.status, RunStatus::Succeeded);
    assert_eq!(report.steps, 3);
    assert_eq!(report.final_text, "Fixed the bug; tests pass.");
    assert_eq!(report.outcome, "Fixed the bug; tests pass.");
    assert_eq!(report.usage.input, 30);
    assert_eq!(report.usage.output, 15);

    let executed: Vec<String> = tools
        .executed
        .lock()
        .unwrap()
        .iter()
        .map(|(n, _)| n.clone())
        .collect();
    assert_eq!(executed, ["read_file", "edit_file", "bash"]);

    let reqs = model.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(reqs[0].1.len(), 1, "the first request is the task alone");
    assert_eq!(
        reqs[0].2.len(),
        defs::ALL_TOOLS.len(),
        "code offers every tool"
    );
    assert_eq!(
        results_in(&reqs[1]),
        [("t1".into(), "ok:read_file".into(), false)]
    );
    assert_eq!(
        results_in(&reqs[2]),
        [
            ("t2".into(), "ok:edit_file".into(), false),
            ("t3".into(), "ok:bash".into(), false)
        ]
    );
    // The assistant turn with both calls precedes their results.
    let asst = &reqs[2].1[reqs[2].1.len() - 2];
    assert_eq!(asst.role, MessageRole::Assistant);
    assert_eq!(asst.content.len(), 3, "text + two tool uses");

    let rec = h.store.load_run(report.run_id).unwrap();
    assert_eq!(rec.run.status, RunStatus::Succeeded);
    assert_eq!(rec.run.isolation, hanzo_policy::Tier::B);
    assert_eq!(rec.steps.len(), 3);
    assert!(rec.steps.iter().all(|s| s.ended_ms.is_some()));
    assert_eq!(rec.steps[1].tool_calls.len(), 2);
    let bash = &rec.steps[1].tool_calls[1].call;
    assert_eq!(bash.name, "bash");
    assert!(bash.allowed);
    assert_eq!(bash.permission, PermissionMode::Allow);
    assert_eq!(bash.rule.as_ref().unwrap().pattern, "bash");
    assert_eq!(bash.output.as_deref(), Some("ok:bash"));
    assert_eq!(rec.audit.len(), 3, "one audit record per evaluated call");
    assert_eq!(
        rec.steps[2].text.as_deref(),
        Some("Fixed the bug; tests pass.")
    );
    // Events: started first, finished last.
    let ev = h.events.0.lock().unwrap();
    assert!(matches!(ev.first(), Some(RunEvent::RunStarted { .. })));
    assert!(
        matches!(ev.last(), Some(RunEvent::RunFinished { status, .. }) if status == "succeeded")
    );
}

#[tokio::test]
async fn a_deny_rule_is_a_result_the_model_sees_and_nothing_runs() {
    let mut h = Harness::new(&[
        ("bash(rm *)", PermissionMode::Deny),
        ("bash", PermissionMode::Allow),
    ]);
    let model = ScriptedModel::new(vec![
        call("", &[("t1", "bash", json!({"command": "rm -rf build"}))]),
        say("I was not allowed to delete it."),
    ]);
    let tools = FakeTools::default();
    let report = h.run_code(&model, &tools).await;
    // Its only call was denied: whatever the model says, the task was not done.
    assert_eq!(report.status, RunStatus::Failed);
    assert_eq!(
        report.outcome,
        "every tool call was denied (1 of 1); the model's last words: I was not allowed to \
         delete it."
    );
    assert_eq!((report.tool_calls, report.denied_calls), (1, 1));
    assert!(tools.executed.lock().unwrap().is_empty());
    let res = results_in(&model.requests()[1]);
    assert!(res[0].2, "is_error");
    assert!(res[0].1.starts_with("permission denied"), "{}", res[0].1);
    let rec = h.store.load_run(report.run_id).unwrap();
    let c = &rec.steps[0].tool_calls[0].call;
    assert!(!c.allowed);
    assert_eq!(c.permission, PermissionMode::Deny);
    assert_eq!(c.rule.as_ref().unwrap().pattern, "bash(rm *)");
    assert!(c.error.as_deref().unwrap().contains("permission denied"));
}

#[tokio::test]
async fn the_approval_mode_decides_prompts() {
    for (mode, allowed_tools) in [
        (ApprovalMode::Deny, vec![]),
        (ApprovalMode::AllowListed, vec!["read_file"]),
        (ApprovalMode::Allow, vec!["read_file", "bash"]),
    ] {
        let mut h = Harness::new(&[]);
        let model = ScriptedModel::new(vec![
            call(
                "",
                &[
                    ("t1", "read_file", json!({"path": "a"})),
                    ("t2", "bash", json!({"command": "make"})),
                ],
            ),
            say("done"),
        ]);
        let tools = FakeTools::default();
        let (_tx, rx) = tokio::sync::watch::channel(false);
        let report = h
            .run(
                &model,
                &tools,
                &Unattended(mode),
                vec![defs::builtin("code").unwrap()],
                rx,
            )
            .await;
        let ran: Vec<String> = tools
            .executed
            .lock()
            .unwrap()
            .iter()
            .map(|(n, _)| n.clone())
            .collect();
        assert_eq!(ran, allowed_tools, "{mode:?}");
        let res = results_in(&model.requests()[1]);
        for (id, content, is_error) in res {
            let name = if id == "t1" { "read_file" } else { "bash" };
            let should_run = allowed_tools.contains(&name);
            assert_eq!(!is_error, should_run, "{mode:?} {name}: {content}");
            if !should_run {
                assert!(content.contains("non-interactive"), "{content}");
            }
        }
        let rec = h.store.load_run(report.run_id).unwrap();
        for c in &rec.steps[0].tool_calls {
            assert_eq!(c.call.permission, PermissionMode::Prompt);
            assert!(c.call.rule.is_none());
        }
    }
}

struct Asking(Mutex<Vec<String>>, PermissionDecision);

impl PermissionPrompter for Asking {
    async fn request_permission(&self, tool: &str, _i: &Value, why: &str) -> PermissionDecision {
        self.0.lock().unwrap().push(format!("{tool}: {why}"));
        self.1.clone()
    }
    fn mode(&self) -> ApprovalMode {
        ApprovalMode::Prompt
    }
}

#[tokio::test]
async fn the_prompter_is_asked_only_when_the_policy_says_prompt() {
    let mut h = Harness::new(&[
        ("read_file", PermissionMode::Allow),
        ("grep", PermissionMode::Deny),
    ]);
    let model = ScriptedModel::new(vec![
        call(
            "",
            &[
                ("t1", "read_file", json!({"path": "a"})),
                ("t2", "grep", json!({"pattern": "x"})),
                ("t3", "bash", json!({"command": "ls"})),
                ("t4", "list_dir", json!({"path": "."})),
            ],
        ),
        say("ok"),
    ]);
    let tools = FakeTools::default();
    let asking = Asking(Mutex::new(vec![]), PermissionDecision::Escalate);
    let (_tx, rx) = tokio::sync::watch::channel(false);
    h.run(
        &model,
        &tools,
        &asking,
        vec![defs::builtin("code").unwrap()],
        rx,
    )
    .await;
    let asked = asking.0.lock().unwrap().clone();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(asked[0].starts_with("bash:") && asked[1].starts_with("list_dir:"));
    let res = results_in(&model.requests()[1]);
    assert!(res[2].1.contains("escalated"), "{}", res[2].1);
    assert_eq!(
        tools.executed.lock().unwrap().len(),
        1,
        "only read_file ran"
    );
}

#[tokio::test]
async fn a_pre_hook_denial_blocks_the_call_and_post_hooks_run_after_execution() {
    let mut h = Harness::new(ALLOW_ALL);
    // One configured hook makes the loop ask the executor; the fake decides without running it.
    h.config.hooks = vec![HookConfig {
        event: HookEvent::PreToolUse,
        command: "./check.sh".into(),
        tool_pattern: "*".into(),
        timeout_ms: 5000,
    }];
    let model = ScriptedModel::new(vec![
        call(
            "",
            &[
                ("t1", "bash", json!({"command": "git push"})),
                ("t2", "read_file", json!({"path": "a"})),
            ],
        ),
        say("ok"),
    ]);
    let tools = FakeTools {
        deny_by_hook: Some(("bash".into(), "pushing is not allowed here".into())),
        ..FakeTools::default()
    };
    let report = h.run_code(&model, &tools).await;
    let ran: Vec<String> = tools
        .executed
        .lock()
        .unwrap()
        .iter()
        .map(|(n, _)| n.clone())
        .collect();
    assert_eq!(ran, ["read_file"]);
    assert_eq!(*tools.pre_hook_calls.lock().unwrap(), ["bash", "read_file"]);
    assert_eq!(
        *tools.post_hook_calls.lock().unwrap(),
        ["read_file"],
        "post hooks only after a run"
    );
    let res = results_in(&model.requests()[1]);
    assert!(
        res[0].2 && res[0].1.contains("pushing is not allowed here"),
        "{}",
        res[0].1
    );
    let rec = h.store.load_run(report.run_id).unwrap();
    let c = &rec.steps[0].tool_calls[0].call;
    assert!(!c.allowed);
    assert_eq!(
        c.permission,
        PermissionMode::Allow,
        "the policy allowed; the hook denied"
    );
    assert_eq!(
        c.hook_results[0],
        HookResult::Pre {
            allowed: false,
            failed: false,
            reason: Some("pushing is not allowed here".into()),
            decided_by: Some("./check.sh".into()),
        }
    );
    assert_eq!(c.decided_by, DecidedBy::Hook);
    let r = &rec.steps[0].tool_calls[1].call;
    assert_eq!(r.hook_results.len(), 2, "pre and post");
    assert!(matches!(r.hook_results[1], HookResult::Post { .. }));
}

#[tokio::test]
async fn tools_outside_the_agents_list_and_mcp_tools_are_refused() {
    let mut h = Harness::new(ALLOW_ALL);
    let model = ScriptedModel::new(vec![
        call(
            "",
            &[
                ("t1", "bash", json!({"command": "ls"})),
                ("t2", "mcp__github__create_issue", json!({"title": "x"})),
                ("t3", "read_file", json!({"path": "a"})),
            ],
        ),
        say("ok"),
    ]);
    let tools = FakeTools::default();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    h.run(
        &model,
        &tools,
        &Unattended(ApprovalMode::Allow),
        vec![defs::builtin("solve").unwrap()],
        rx,
    )
    .await;
    assert_eq!(
        model.requests()[0].2,
        defs::READ_ONLY_TOOLS,
        "solve is offered read-only tools"
    );
    let res = results_in(&model.requests()[1]);
    assert!(
        res[0].1.contains("has no tool named \"bash\""),
        "{}",
        res[0].1
    );
    assert!(
        res[1].1.contains("MCP tools are not available"),
        "{}",
        res[1].1
    );
    assert!(!res[2].2);
    assert_eq!(tools.executed.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn the_plan_agent_is_offered_no_tools() {
    let mut h = Harness::new(&[]);
    let model = ScriptedModel::new(vec![say("1. read 2. fix")]);
    let tools = FakeTools::default();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let r = h
        .run(
            &model,
            &tools,
            &Unattended(ApprovalMode::Deny),
            vec![defs::builtin("plan").unwrap()],
            rx,
        )
        .await;
    assert_eq!(r.status, RunStatus::Succeeded);
    assert!(model.requests()[0].2.is_empty());
}

#[tokio::test]
async fn auto_passes_each_stages_output_to_the_next() {
    let mut h = Harness::new(ALLOW_ALL);
    let model = ScriptedModel::new(vec![
        say("PLAN: edit a.py"),
        call(
            "",
            &[(
                "t1",
                "edit_file",
                json!({"path": "a.py", "old_string": "1", "new_string": "2"}),
            )],
        ),
        say("CODE: changed a.py"),
        say("REVIEW: looks good"),
    ]);
    let tools = FakeTools::default();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let stages = defs::AUTO_STAGES
        .iter()
        .map(|s| defs::builtin(s).unwrap())
        .collect();
    let r = h
        .run(&model, &tools, &Unattended(ApprovalMode::Deny), stages, rx)
        .await;
    assert_eq!(r.status, RunStatus::Succeeded);
    assert_eq!(r.final_text, "REVIEW: looks good");
    let reqs = model.requests();
    assert_eq!(reqs.len(), 4);
    let first_user = |i: usize| match &reqs[i].1[0].content[0] {
        ContentBlock::Text { text } => text.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(first_user(0), "fix the bug");
    assert!(first_user(1).contains("PLAN: edit a.py"));
    assert!(first_user(3).contains("CODE: changed a.py"));
    assert!(reqs[0].2.is_empty(), "plan has no tools");
    assert!(
        !reqs[3].2.contains(&"edit_file".to_string()),
        "review only reads"
    );
    let rec = h.store.load_run(r.run_id).unwrap();
    let stages: Vec<String> = rec
        .events
        .iter()
        .filter(|e| e.kind == "stage_started")
        .map(|e| e.data["stage"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(stages, ["plan", "code", "review"]);
}

#[tokio::test]
async fn the_step_limit_ends_the_run_as_failed() {
    let mut h = Harness::new(ALLOW_ALL);
    h.config.limits.max_steps = 2;
    let model = ScriptedModel::new(
        (0..5)
            .map(|i| call("", &[(&format!("t{i}"), "read_file", json!({"path": "a"}))]))
            .collect(),
    );
    let tools = FakeTools::default();
    let r = h.run_code(&model, &tools).await;
    assert_eq!(r.status, RunStatus::Failed);
    assert!(
        r.outcome.contains("step limit reached (2 steps"),
        "{}",
        r.outcome
    );
    assert_eq!(model.requests().len(), 2);
    assert_eq!(h.store.load_run(r.run_id).unwrap().steps.len(), 2);
}

#[tokio::test]
async fn the_token_budget_ends_the_run() {
    let mut h = Harness::new(ALLOW_ALL);
    h.config.limits.max_total_tokens = Some(25);
    let model = ScriptedModel::new(
        (0..5)
            .map(|i| call("", &[(&format!("t{i}"), "read_file", json!({"path": "a"}))]))
            .collect(),
    );
    let r = h.run_code(&model, &FakeTools::default()).await;
    assert_eq!(r.status, RunStatus::Failed);
    assert!(
        r.outcome.contains("token budget exhausted (30 of 25"),
        "{}",
        r.outcome
    );
    assert_eq!(r.steps, 2);
}

#[tokio::test]
async fn a_model_error_fails_the_run_with_its_message_on_record() {
    let mut h = Harness::new(ALLOW_ALL);
    let model = ScriptedModel::new(vec![Turn::Fail(
        StreamErrorKind::Auth,
        "401: invalid x-api-key".into(),
    )]);
    let r = h.run_code(&model, &FakeTools::default()).await;
    assert_eq!(r.status, RunStatus::Failed);
    assert!(
        r.outcome.contains("401: invalid x-api-key"),
        "{}",
        r.outcome
    );
    let rec = h.store.load_run(r.run_id).unwrap();
    assert_eq!(rec.steps.len(), 1);
    assert!(rec.steps[0].ended_ms.is_some());
    let e = rec.events.iter().find(|e| e.kind == "model_error").unwrap();
    assert_eq!(e.data["kind"], "Auth");
}

#[tokio::test]
async fn cancelling_during_a_tool_stops_it_and_records_cancelled() {
    let mut h = Harness::new(ALLOW_ALL);
    let model = ScriptedModel::new(vec![
        call(
            "",
            &[
                ("t1", "bash", json!({"command": "sleep 600"})),
                ("t2", "read_file", json!({"path": "a"})),
            ],
        ),
        say("never reached"),
    ]);
    let tools = FakeTools {
        hang: Some("bash".into()),
        ..FakeTools::default()
    };
    let (tx, rx) = tokio::sync::watch::channel(false);
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        tx.send(true).unwrap();
        tx
    });
    let r = h
        .run(
            &model,
            &tools,
            &Unattended(ApprovalMode::Deny),
            vec![defs::builtin("code").unwrap()],
            rx,
        )
        .await;
    let _tx = canceller.await.unwrap();
    assert_eq!(r.status, RunStatus::Cancelled);
    assert_eq!(model.requests().len(), 1, "no model turn after the cancel");
    let rec = h.store.load_run(r.run_id).unwrap();
    assert_eq!(rec.run.status, RunStatus::Cancelled);
    let calls = &rec.steps[0].tool_calls;
    assert_eq!(calls.len(), 2, "the unrun call is on record too");
    assert!(calls[0]
        .call
        .error
        .as_deref()
        .unwrap()
        .starts_with("cancelled"));
    assert!(!calls[1].call.allowed);
    assert_eq!(
        tools.executed.lock().unwrap().len(),
        1,
        "read_file never ran"
    );
}

#[tokio::test]
async fn the_wall_clock_limit_interrupts_a_hanging_model() {
    let mut h = Harness::new(ALLOW_ALL);
    h.config.limits.timeout = Some(Duration::from_millis(100));
    let model = ScriptedModel::new(vec![Turn::Hang]);
    let r = h.run_code(&model, &FakeTools::default()).await;
    assert_eq!(r.status, RunStatus::Failed);
    assert!(r.outcome.contains("wall-clock limit"), "{}", r.outcome);
    let rec = h.store.load_run(r.run_id).unwrap();
    assert!(rec.steps[0].ended_ms.is_some());
}

#[tokio::test]
async fn known_secrets_never_reach_the_record_or_the_events_and_the_model_sees_what_ran() {
    const CANARY: &str = "sk-canary-5f2e9d1c";
    let mut h = Harness::new(ALLOW_ALL);
    h.config.secrets = SecretValues::new([CANARY]);
    h.store.set_known_secrets([CANARY]);
    let model = ScriptedModel::new(vec![
        call(
            &format!("I will print {CANARY}"),
            &[("t1", "bash", json!({"command": format!("echo {CANARY}")}))],
        ),
        say("done"),
    ]);
    let tools = FakeTools {
        outputs: vec![("bash".into(), format!("key={CANARY}\n"))],
        ..FakeTools::default()
    };
    let r = h.run_code(&model, &tools).await;
    assert_eq!(r.status, RunStatus::Succeeded, "{}", r.outcome);
    // The model is shown exactly what its call produced and what it said itself: redacting it
    // there would tell it which of its guesses was a secret.
    let second = format!("{:?}", model.requests()[1].1);
    assert!(second.contains(&format!("key={CANARY}")), "{second}");
    assert!(
        second.contains(&format!("I will print {CANARY}")),
        "{second}"
    );
    // Nothing that leaves the loop holds it.
    let export = h.store.export_run(r.run_id).unwrap().to_string();
    assert!(!export.contains(CANARY));
    assert!(export.contains("key=[redacted]"), "{export}");
    let events = format!("{:?}", h.events.0.lock().unwrap());
    assert!(!events.contains(CANARY), "{events}");
    assert!(events.contains("[redacted]"));
}

/// The oracle attack: a short password sits in the supervisor's environment, and the model
/// guesses it by echoing candidates through a tool. If what the model is shown for the right
/// guess differed in any way from a wrong one (a `[redacted]`, a withheld output, an error, a
/// failed run), it would learn the password. It must see every guess treated alike.
#[tokio::test]
async fn scrubbing_is_not_an_oracle_for_a_guessed_password() {
    const PASSWORD: &str = "hunter2";
    let guesses = ["letmein", "hunter1", PASSWORD, "hunter3", "123456"];
    let mut h = Harness::new(ALLOW_ALL);
    h.config.secrets = SecretValues::new([PASSWORD]);
    h.store.set_known_secrets([PASSWORD]);
    let calls: Vec<(String, Value)> = guesses
        .iter()
        .enumerate()
        .map(|(i, g)| (format!("t{i}"), json!({"command": format!("echo {g}")})))
        .collect();
    let calls: Vec<(&str, &str, Value)> = calls
        .iter()
        .map(|(id, v)| (id.as_str(), "bash", v.clone()))
        .collect();
    let model = ScriptedModel::new(vec![call("", &calls), say("no luck")]);
    let tools = FakeTools {
        echo: true,
        ..FakeTools::default()
    };
    let r = h.run_code(&model, &tools).await;
    assert_eq!(r.status, RunStatus::Succeeded, "{}", r.outcome);
    let seen = model.requests();
    let results = results_in(&seen[1]);
    assert_eq!(results.len(), guesses.len());
    for ((_, content, is_error), guess) in results.iter().zip(guesses) {
        // The same function of the input for every guess: the echo, nothing else.
        assert_eq!(content, &format!("{guess}\n"));
        assert!(!is_error);
    }
    // Its own calls come back to it as it made them.
    let assistant = &seen[1].1[1];
    for (block, guess) in assistant.content.iter().zip(guesses) {
        let ContentBlock::ToolUse { input_json, .. } = block else {
            panic!("a tool use: {block:?}");
        };
        assert!(
            input_json.contains(&format!("echo {guess}")),
            "{input_json}"
        );
    }
    // The record never holds the password, yet the run neither failed nor stopped.
    let export = h.store.export_run(r.run_id).unwrap().to_string();
    assert!(!export.contains(PASSWORD), "{export}");
    assert_eq!(r.tool_calls, 5);
}

#[tokio::test]
async fn five_thousand_calls_in_one_turn_run_up_to_the_cap_and_the_rest_are_refused_on_record() {
    let mut h = Harness::new(ALLOW_ALL);
    let calls: Vec<(String, Value)> = (0..5000)
        .map(|i| (format!("t{i}"), json!({"path": format!("f{i}")})))
        .collect();
    let calls: Vec<(&str, &str, Value)> = calls
        .iter()
        .map(|(id, v)| (id.as_str(), "read_file", v.clone()))
        .collect();
    let model = ScriptedModel::new(vec![call("", &calls), say("done")]);
    let tools = FakeTools::default();
    let r = h.run_code(&model, &tools).await;
    assert_eq!(r.status, RunStatus::Succeeded, "{}", r.outcome);
    assert_eq!(
        tools.executed.lock().unwrap().len(),
        64,
        "the default per-turn cap"
    );
    assert_eq!((r.tool_calls, r.denied_calls), (5000, 4936));
    let results = results_in(&model.requests()[1]);
    assert_eq!(results.len(), 5000, "every call has a result");
    assert!(
        results[64].1.contains("at most 64 run per turn"),
        "{}",
        results[64].1
    );
    assert!(results[64].2);
    let rec = h.store.load_run(r.run_id).unwrap();
    let recorded = &rec.steps[0].tool_calls;
    assert_eq!(recorded.len(), 5000);
    assert!(recorded[..64].iter().all(|c| c.call.allowed));
    assert!(recorded[64..]
        .iter()
        .all(|c| !c.call.allowed && c.call.decided_by == DecidedBy::Limit));
    // Every call has its decision and result in the event stream.
    let events = h.events.0.lock().unwrap();
    let decisions = events
        .iter()
        .filter(|e| matches!(e, RunEvent::ToolDecision { .. }))
        .count();
    assert_eq!(decisions, 5000);
}

#[tokio::test]
async fn the_run_wide_call_cap_refuses_later_calls() {
    let mut h = Harness::new(ALLOW_ALL);
    h.config.limits.max_calls = 4;
    h.config.limits.max_calls_per_turn = 3;
    let three = |p: &str| -> Turn {
        call(
            "",
            &[
                (&format!("{p}1"), "read_file", json!({"path": "a"})),
                (&format!("{p}2"), "read_file", json!({"path": "b"})),
                (&format!("{p}3"), "read_file", json!({"path": "c"})),
            ],
        )
    };
    let model = ScriptedModel::new(vec![three("a"), three("b"), say("done")]);
    let tools = FakeTools::default();
    let r = h.run_code(&model, &tools).await;
    assert_eq!(tools.executed.lock().unwrap().len(), 4);
    let second = results_in(&model.requests()[2]);
    assert!(!second[0].2);
    assert!(
        second[1].1.contains("this run has made 4 tool calls"),
        "{}",
        second[1].1
    );
    assert_eq!((r.tool_calls, r.denied_calls), (6, 2));
}

#[tokio::test]
async fn every_call_is_on_record_as_started_while_it_runs() {
    let mut h = Harness::new(ALLOW_ALL);
    let model = ScriptedModel::new(vec![
        call(
            "",
            &[
                ("t1", "read_file", json!({"path": "a"})),
                ("t2", "bash", json!({"command": "ls"})),
            ],
        ),
        say("done"),
    ]);
    let tools = FakeTools {
        watch_store: Some(h._dir.path().to_path_buf()),
        ..FakeTools::default()
    };
    let r = h.run_code(&model, &tools).await;
    assert_eq!(r.status, RunStatus::Succeeded, "{}", r.outcome);
    assert_eq!(
        *tools.seen_status.lock().unwrap(),
        [Some(CallStatus::Started), Some(CallStatus::Started)]
    );
    let rec = h.store.load_run(r.run_id).unwrap();
    assert!(rec.steps[0]
        .tool_calls
        .iter()
        .all(|c| c.status == CallStatus::Finished));
    assert_eq!(
        rec.audit.len(),
        2,
        "the audit record is written with the call"
    );
}

#[tokio::test]
async fn a_failed_store_write_stops_the_run_before_the_next_call() {
    let mut h = Harness::new(ALLOW_ALL);
    let model = ScriptedModel::new(vec![
        call(
            "",
            &[
                ("t1", "bash", json!({"command": "one"})),
                ("t2", "bash", json!({"command": "two"})),
                ("t3", "bash", json!({"command": "three"})),
            ],
        ),
        say("done"),
    ]);
    let tools = FakeTools {
        sabotage_after: Some((h._dir.path().to_path_buf(), 1)),
        ..FakeTools::default()
    };
    let mut lp = AgentLoop {
        api: &model,
        tools: &tools,
        prompter: &Unattended(ApprovalMode::Deny),
        policy: &h.policy,
        store: &mut h.store,
        events: &h.events,
        config: h.config.clone(),
        cancel: tokio::sync::watch::channel(false).1,
    };
    let err = lp
        .run(&RunSpec {
            task: "t".into(),
            agent_name: "code".into(),
            stages: vec![defs::builtin("code").unwrap()],
            model: "m".into(),
            isolation: hanzo_policy::Tier::A,
            workspace: "/ws".into(),
            replay: true,
            dangerous_workspace: Vec::new(),
        })
        .await
        .expect_err("the store refused the call's record");
    assert!(
        err.to_string()
            .contains("only a running run can be changed"),
        "{err}"
    );
    let ran: Vec<Value> = tools
        .executed
        .lock()
        .unwrap()
        .iter()
        .map(|(_, v)| v.clone())
        .collect();
    assert_eq!(
        ran,
        [json!({"command": "one"})],
        "nothing ran after the failed write"
    );
    assert_eq!(model.requests().len(), 1, "and no further model turn");
}

#[tokio::test]
async fn oversize_inputs_are_stored_cut_and_the_record_budget_ends_the_run() {
    let mut h = Harness::new(ALLOW_ALL);
    // Room for one cut field (128 KiB) but not two.
    h.config.limits.max_record_bytes = 200_000;
    let content = "y".repeat(200_000);
    let model = ScriptedModel::new(vec![
        call(
            "",
            &[(
                "t1",
                "edit_file",
                json!({"path": "a", "old_string": "x", "new_string": content}),
            )],
        ),
        call(
            "",
            &[
                ("t2", "read_file", json!({"path": "big"})),
                ("t3", "read_file", json!({"path": "after"})),
            ],
        ),
        say("done"),
    ]);
    let tools = FakeTools {
        outputs: vec![("read_file".into(), "z".repeat(200_000))],
        ..FakeTools::default()
    };
    let r = h.run_code(&model, &tools).await;
    // The full input ran; the record kept a marked cut of it.
    let ran = tools.executed.lock().unwrap().clone();
    assert_eq!(ran[0].1["new_string"].as_str().unwrap().len(), 200_000);
    let rec = h.store.load_run(r.run_id).unwrap();
    let stored = &rec.steps[0].tool_calls[0].call.input;
    assert_eq!(stored["original_bytes"], 200_000 + 45);
    assert!(stored["truncated_input"].as_str().unwrap().len() <= 128 * 1024);
    // The second turn's first output did not fit the budget: the run stops, the next call
    // does not run, and the outcome says why.
    assert_eq!(ran.len(), 2, "the call after the exhausted budget ran");
    assert_eq!(r.status, RunStatus::Failed);
    assert!(
        r.outcome.contains("record budget is used up"),
        "{}",
        r.outcome
    );
    let calls = &rec.steps[1].tool_calls;
    assert!(calls[0]
        .call
        .output
        .as_deref()
        .unwrap()
        .starts_with("[not recorded"));
    assert_eq!(calls[1].call.decided_by, DecidedBy::NotRun);
}

fn big(n: usize) -> String {
    "x".repeat(n)
}

#[tokio::test]
async fn compaction_summarizes_the_middle_and_keeps_calls_with_their_results() {
    let mut h = Harness::new(ALLOW_ALL);
    // Each result is ~1000 tokens (4000 bytes); the window is 3000 tokens.
    h.config.max_context_tokens = 3000;
    h.config.reserve_recent = 2;
    let model = ScriptedModel::new(vec![
        call("", &[("t1", "read_file", json!({"path": "a"}))]),
        call("", &[("t2", "read_file", json!({"path": "b"}))]),
        call("", &[("t3", "read_file", json!({"path": "c"}))]),
        // The summarizing call.
        say("SUMMARY: read a, b and c"),
        say("done"),
    ]);
    let tools = FakeTools {
        outputs: vec![("read_file".into(), big(4000))],
        ..FakeTools::default()
    };
    let r = h.run_code(&model, &tools).await;
    assert_eq!(r.status, RunStatus::Succeeded, "{}", r.outcome);
    let reqs = model.requests();
    assert_eq!(reqs.len(), 5);
    // Request 3 is the summary request: no tools, the transcript with results compacted.
    assert!(reqs[3].2.is_empty());
    let ask = format!("{:?}", reqs[3].1);
    assert!(
        ask.contains("[compacted]"),
        "tool results are not sent to the summarizer"
    );
    // The next real request starts with the summary and still pairs every result with its call.
    let msgs = &reqs[4].1;
    assert_eq!(msgs[0].role, MessageRole::User);
    let first = format!("{:?}", msgs[0].content[0]);
    assert!(first.contains("SUMMARY: read a, b and c"), "{first}");
    let uses: Vec<String> = msgs
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|b| match b {
            ContentBlock::ToolUse { id, .. } => Some(id.clone()),
            _ => None,
        })
        .collect();
    for m in msgs {
        for b in &m.content {
            if let ContentBlock::ToolResult { tool_use_id, .. } = b {
                assert!(
                    uses.contains(tool_use_id),
                    "result {tool_use_id} lost its call"
                );
            }
        }
    }
    assert!(msgs.len() < reqs[2].1.len() + 2, "the conversation shrank");
    let rec = h.store.load_run(r.run_id).unwrap();
    let c = rec
        .events
        .iter()
        .find(|e| e.kind == "compacted")
        .expect("compaction on record");
    assert_eq!(c.data["summarized"], true);
    assert!(c.data["tokens_after"].as_u64() < c.data["tokens_before"].as_u64());
}

#[tokio::test]
async fn compaction_falls_back_to_truncation_when_the_summary_fails() {
    let mut h = Harness::new(ALLOW_ALL);
    h.config.max_context_tokens = 3000;
    h.config.reserve_recent = 2;
    let model = ScriptedModel::new(vec![
        call("", &[("t1", "read_file", json!({"path": "a"}))]),
        call("", &[("t2", "read_file", json!({"path": "b"}))]),
        call("", &[("t3", "read_file", json!({"path": "c"}))]),
        Turn::Fail(StreamErrorKind::Unavailable, "overloaded".into()),
        say("done"),
    ]);
    let tools = FakeTools {
        outputs: vec![("read_file".into(), big(4000))],
        ..FakeTools::default()
    };
    let r = h.run_code(&model, &tools).await;
    assert_eq!(r.status, RunStatus::Succeeded, "{}", r.outcome);
    let first = format!("{:?}", model.requests()[4].1[0].content[0]);
    assert!(first.contains("earlier messages were removed"), "{first}");
    let rec = h.store.load_run(r.run_id).unwrap();
    let c = rec.events.iter().find(|e| e.kind == "compacted").unwrap();
    assert_eq!(c.data["summarized"], false);
}

#[tokio::test]
async fn malformed_tool_input_is_an_error_result_not_a_crash() {
    let mut h = Harness::new(ALLOW_ALL);
    struct Raw(ScriptedModel);
    impl ApiClient for Raw {
        async fn send_message(
            &self,
            request: TurnRequest<'_>,
            on_event: &mut dyn FnMut(&StreamEvent),
        ) -> Result<TurnEnd, TurnError> {
            if self.0.requests().is_empty() {
                self.0.seen.lock().unwrap().push(Default::default());
                on_event(&StreamEvent::ToolUse {
                    id: "t1".into(),
                    name: "bash".into(),
                    input_json: "{not json".into(),
                });
                return Ok(TurnEnd {
                    stop_reason: StopReason::ToolUse,
                    usage: Usage::default(),
                });
            }
            self.0.send_message(request, on_event).await
        }
    }
    let model = Raw(ScriptedModel::new(vec![say("ok")]));
    let tools = FakeTools::default();
    let mut lp = AgentLoop {
        api: &model,
        tools: &tools,
        prompter: &Unattended(ApprovalMode::Allow),
        policy: &h.policy,
        store: &mut h.store,
        events: &h.events,
        config: h.config.clone(),
        cancel: tokio::sync::watch::channel(false).1,
    };
    let r = lp
        .run(&RunSpec {
            task: "t".into(),
            agent_name: "code".into(),
            stages: vec![defs::builtin("code").unwrap()],
            model: "m".into(),
            isolation: hanzo_policy::Tier::A,
            workspace: "/ws".into(),
            replay: false,
            dangerous_workspace: Vec::new(),
        })
        .await
        .unwrap();
    assert_eq!(r.status, RunStatus::Succeeded);
    assert!(tools.executed.lock().unwrap().is_empty());
    let res = results_in(&model.0.requests()[1]);
    assert!(
        res[0].2 && res[0].1.contains("not valid JSON"),
        "{}",
        res[0].1
    );
}

/// A session's second turn: recorded under the session, and the model sees the first turn's
/// user text and final answer (read back from the store) before the new task.
#[tokio::test]
async fn a_session_turn_continues_the_conversation_from_the_record() {
    use hanzo_dev::agent::run::Continuation;
    use hanzo_dev::agent::session::prior_messages;
    let mut h = Harness::new(&[]);
    let session = h
        .store
        .create_session(&hanzo_store::NewSession {
            agent: "code".into(),
            workspace: "/ws".into(),
            title: None,
        })
        .unwrap()
        .id;
    let model = ScriptedModel::new(vec![say("first answer"), say("second answer")]);
    let tools = FakeTools::default();
    let code = vec![defs::builtin("code").unwrap()];
    for task in ["what is this?", "and now?"] {
        let prior = prior_messages(&h.store.session_turns(session).unwrap());
        let (_tx, rx) = tokio::sync::watch::channel(false);
        let mut lp = AgentLoop {
            api: &model,
            tools: &tools,
            prompter: &Unattended(ApprovalMode::Deny),
            policy: &h.policy,
            store: &mut h.store,
            events: &h.events,
            config: h.config.clone(),
            cancel: rx,
        };
        let spec = RunSpec {
            task: task.into(),
            agent_name: "code".into(),
            stages: code.clone(),
            model: "test-model".into(),
            isolation: hanzo_policy::Tier::B,
            workspace: "/ws".into(),
            replay: true,
            dangerous_workspace: Vec::new(),
        };
        let report = lp
            .run_continuing(
                &spec,
                &Continuation {
                    session: Some(session),
                    prior,
                },
            )
            .await
            .unwrap();
        assert_eq!(report.status, RunStatus::Succeeded);
    }
    let seen = model.requests();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].1.len(), 1, "the first turn has no history");
    let second: Vec<(MessageRole, String)> = seen[1]
        .1
        .iter()
        .map(|m| {
            let text = m
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::Text { text } => Some(text.clone()),
                    _ => None,
                })
                .collect::<String>();
            (m.role, text)
        })
        .collect();
    assert_eq!(
        second,
        [
            (MessageRole::User, "what is this?".to_string()),
            (MessageRole::Assistant, "first answer".to_string()),
            (MessageRole::User, "and now?".to_string()),
        ]
    );
    let runs = h.store.list_session_runs(session).unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(h.store.run_session(runs[1].id).unwrap(), Some(session));
}
