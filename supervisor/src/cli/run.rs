//! `hanzo-dev run "task"`: run an agent to completion under policy and isolation, and keep the
//! run. `--demo` runs the bundled example project against a recorded model, offline.
//!
//! Exit codes: 0 the run succeeded; 1 it failed (the model failed, a limit was reached); 2 bad
//! usage or configuration; 3 `--isolation strict` cannot be honoured; 130 cancelled (Ctrl-C).

use super::exit;
use super::provider::{self, default_model, usage, UsageError, Wire};
use crate::agent::approval::{summarize_input, ApprovalMode, Prompter};
use crate::agent::defs::{self, AUTO_STAGES};
use crate::agent::events::{EventSink, RunEvent};
use crate::agent::run::{AgentLoop, Limits, LoopConfig, RunReport, RunSpec};
use crate::agent::workers::{WorkerApi, WorkerTools};
use crate::secrets::StartEnv;
use crate::startup::supervisor_config;
use crate::tree::Supervisor;
use anyhow::Context;
use hanzo_ipc::roles::model::{ProviderConfig, ProviderId, RetryPolicy};
use hanzo_policy::isolation::{IsolationMode, Tier};
use hanzo_policy::permission::{PermissionMode, PermissionRule, RuleList, TieredPolicy};
use hanzo_policy::settings::{load, CliOverrides, SettingsSources};
use hanzo_store::{AgentDef, RunStatus, RunStore};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Exit code of a cancelled run (128 + SIGINT, as shells report it).
pub const CANCELLED: i32 = 130;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The task for the agent.
    #[arg(required_unless_present = "demo")]
    pub task: Option<String>,
    /// Run the bundled demo offline: an example project copied to a temporary directory and a
    /// recorded model (no credentials, no network).
    #[arg(long, conflicts_with_all = ["task", "replay", "record", "agent", "workspace"])]
    pub demo: bool,
    /// Agent: a built-in (`plan`, `solve`, `code`, `review`, `auto`) or one made with
    /// `hanzo-dev agents create` [default: code].
    #[arg(long)]
    pub agent: Option<String>,
    /// Model name (default: the agent's, else settings, else the provider's default).
    #[arg(long)]
    pub model: Option<String>,
    /// Whose credential to use: hanzo, anthropic or openai (default: the first found).
    #[arg(long)]
    pub provider: Option<String>,
    /// Endpoint base URL; added to the broker's allow-list for this run (plain http: loopback
    /// only).
    #[arg(long)]
    pub base_url: Option<String>,
    /// Wire protocol of the endpoint (default: anthropic for the anthropic provider, else
    /// openai).
    #[arg(long, value_enum)]
    pub wire: Option<Wire>,
    /// What to do when a call needs approval [default: prompt on a terminal, deny otherwise].
    #[arg(long, value_enum)]
    pub approval: Option<ApprovalMode>,
    /// How much isolation to insist on (settings `sandbox.isolation` when not given).
    #[arg(long, value_parser = super::isolation_parser())]
    pub isolation: Option<IsolationMode>,
    /// Stop after this many model turns.
    #[arg(long, default_value_t = 50)]
    pub max_steps: u32,
    /// Stop once the run has used this many tokens (input + output).
    #[arg(long, value_name = "TOKENS")]
    pub max_tokens: Option<u64>,
    /// Stop after this many seconds of wall-clock time.
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<u64>,
    /// The model's context window in tokens; the conversation is compacted above 90 % of it.
    #[arg(long, default_value_t = 200_000, value_name = "TOKENS")]
    pub max_context: u64,
    /// Output tokens per model turn.
    #[arg(long, default_value_t = 4096)]
    pub max_output: u32,
    /// The workspace (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// The org whose store keeps the run (default: `HANZO_ORG`, else `local`).
    #[arg(long)]
    pub org: Option<String>,
    /// Play a cassette instead of calling a provider (offline).
    #[arg(long, value_name = "FILE", conflicts_with = "record")]
    pub replay: Option<PathBuf>,
    /// Write every model exchange to FILE as a cassette.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// One JSON event per line on stdout (schema: docs/run-events.md).
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: &Args, env: StartEnv) -> anyhow::Result<i32> {
    match run_inner(args, env).await {
        Ok(code) => Ok(code),
        Err(e) => match e.downcast::<UsageError>() {
            Ok(u) => {
                eprintln!("error: {}", u.0);
                Ok(exit::USAGE)
            }
            Err(e) => Err(e),
        },
    }
}

async fn run_inner(args: &Args, env: StartEnv) -> anyhow::Result<i32> {
    // ---- what to run, where ----
    let demo_dir = if args.demo {
        let dir = tempfile::Builder::new()
            .prefix("hanzo-demo-")
            .tempdir()
            .context("cannot create the demo's workspace")?
            .keep();
        crate::demo::write_project(&dir)
            .with_context(|| format!("cannot write the demo project to {}", dir.display()))?;
        Some(dir)
    } else {
        None
    };
    let workspace = match (&demo_dir, &args.workspace) {
        (Some(d), _) => d.clone(),
        (None, Some(w)) => w.clone(),
        (None, None) => {
            std::env::current_dir().context("cannot determine the current directory")?
        }
    };
    let workspace = workspace
        .canonicalize()
        .map_err(|e| usage(format!("workspace {}: {e}", workspace.display())))?;
    let task = match (&args.task, args.demo) {
        (_, true) => crate::demo::TASK.to_string(),
        (Some(t), false) if !t.trim().is_empty() => t.clone(),
        _ => return Err(usage("the task is empty")),
    };
    let cassette = match (&args.replay, args.demo) {
        (_, true) => Some(crate::demo::CASSETTE.to_string()),
        (Some(p), false) => Some(
            std::fs::read_to_string(p)
                .map_err(|e| usage(format!("cannot read cassette {}: {e}", p.display())))?,
        ),
        (None, false) => None,
    };
    let provider_flag = match &args.provider {
        Some(p) => Some(ProviderId::parse(p).ok_or_else(|| {
            usage(format!(
                "unknown provider {p:?} (expected hanzo, anthropic or openai)"
            ))
        })?),
        None => None,
    };

    // ---- settings: policy, hooks, isolation ----
    let src = SettingsSources::resolve(
        &workspace,
        env.vars.iter().cloned().collect(),
        CliOverrides {
            model: args.model.clone(),
            ..CliOverrides::default()
        },
    );
    let loaded = load(&src).map_err(|e| usage(e.to_string()))?;
    let quiet = args.json;
    for w in loaded.warnings() {
        if !quiet {
            eprintln!("warning: {w}");
        }
    }
    let config = &loaded.merged.config;
    let policy = if args.demo {
        demo_policy()?
    } else {
        config
            .permission_policy()
            .map_err(|e| usage(format!("permission rules: {e}")))?
    }
    .with_workspace(&workspace);
    let hooks: Vec<_> = config.hooks.iter().map(|h| h.hook.clone()).collect();
    let hooks_json = if hooks.is_empty() || args.demo {
        None
    } else {
        Some(serde_json::to_string(&hooks).context("hooks")?)
    };
    let isolation = args.isolation.unwrap_or(config.sandbox.isolation);
    let kernel = hanzo_sandbox::doctor::probe_kernel();
    if isolation == IsolationMode::Strict {
        if let Err(why) = kernel.tier_b() {
            eprintln!(
                "error: --isolation strict needs tier B (namespaces), which this machine cannot \
                 give: {why}. Run `hanzo-dev doctor` for details, or use --isolation auto."
            );
            return Ok(exit::ISOLATION_UNAVAILABLE);
        }
    }

    // ---- the run store ----
    let mut store =
        super::store::open(args.org.as_deref(), &env).map_err(|e| usage(format!("{e:#}")))?;
    let configured = env.extra_secret_names();
    let secrets: Vec<String> = env
        .vars
        .iter()
        .filter(|(k, v)| !v.is_empty() && hanzo_policy::profile::is_secret_env(k, &configured))
        .map(|(_, v)| v.clone())
        .collect();
    store.set_known_secrets(secrets.iter().cloned());

    // ---- the agent ----
    let agent_name = args
        .agent
        .clone()
        .unwrap_or_else(|| defs::DEFAULT_AGENT.to_string());
    let stages = resolve_agent(&agent_name, &store)?;

    // ---- the workers ----
    let (mut cfg, _run_dir) =
        supervisor_config(Some(workspace.clone()), &env, kernel.landlock_abi)?;
    cfg.isolation = isolation;
    let sup = Supervisor::start(cfg).await?;
    let result = async {
        let infos = sup
            .wait_ready()
            .await
            .context("the workers did not start")?;
        let tier = infos
            .iter()
            .find(|i| i.role == hanzo_ipc::Role::Tools)
            .map(|i| Tier::of(&i.attestation))
            .unwrap_or(Tier::A);
        if !isolation.accepts(tier) {
            eprintln!(
                "error: --isolation strict: the tools worker came up without namespaces (tier \
                 {tier}). Run `hanzo-dev doctor` for details."
            );
            return Ok(exit::ISOLATION_UNAVAILABLE);
        }
        let replay = cassette.is_some();
        let provider = provider::resolve(
            &sup,
            cassette,
            provider_flag,
            args.wire.map(Into::into),
            args.base_url.as_deref(),
        )
        .await?;
        let wire = match &provider {
            ProviderConfig::Http { wire, .. } | ProviderConfig::Replay { wire } => *wire,
        };
        let stage_model = stages
            .iter()
            .map(|s| s.model.clone())
            .find(|m| !m.is_empty());
        let model_name = args
            .model
            .clone()
            .or(stage_model)
            .or_else(|| {
                loaded
                    .merged
                    .sources
                    .contains_key("model")
                    .then(|| config.model.clone())
            })
            .unwrap_or_else(|| default_model(wire).to_string());
        let approval = args.approval.unwrap_or_else(|| {
            if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() && !args.json {
                ApprovalMode::Prompt
            } else {
                ApprovalMode::Deny
            }
        });
        let api = WorkerApi {
            model: &sup.model,
            provider,
            model_name: model_name.clone(),
            max_output_tokens: args.max_output,
            retry: RetryPolicy::default(),
            recorded: args.record.as_ref().map(|_| Mutex::new(Vec::new())),
        };
        let tools = WorkerTools { tools: &sup.tools };
        let prompter = Prompter::for_mode(approval);
        let sink: Box<dyn EventSink> = if args.json {
            Box::new(JsonLines)
        } else {
            Box::new(TerminalView::new())
        };
        if args.demo && !args.json {
            eprintln!(
                "hanzo-dev demo: the model is a RECORDING (a replayed cassette, offline; no \
                 credentials, no network).\nEverything else is real: the workers, the sandbox \
                 (tier {tier}), the permission policy and the run store.\nWorkspace: {}\n",
                workspace.display()
            );
        }
        let (cancel_tx, cancel_rx) = tokio::sync::watch::channel(false);
        let ctrl_c = tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                let _ = cancel_tx.send(true);
            }
        });
        let spec = RunSpec {
            task,
            agent_name: agent_name.clone(),
            stages,
            model: model_name,
            isolation: tier,
            workspace: workspace.display().to_string(),
            replay,
        };
        let mut agent_loop = AgentLoop {
            api: &api,
            tools: &tools,
            prompter: &prompter,
            policy: &policy,
            store: &mut store,
            events: sink.as_ref(),
            config: LoopConfig {
                max_context_tokens: args.max_context,
                reserve_recent: 3,
                limits: Limits {
                    max_steps: args.max_steps,
                    max_total_tokens: args.max_tokens,
                    timeout: args.timeout.map(Duration::from_secs),
                },
                hooks_json,
                known_secrets: secrets,
            },
            cancel: cancel_rx,
        };
        let report = agent_loop.run(&spec).await;
        ctrl_c.abort();
        if let Some(path) = &args.record {
            let mut text = api.take_recorded().join("\n");
            text.push('\n');
            std::fs::write(path, text)
                .with_context(|| format!("cannot write cassette {}", path.display()))?;
        }
        let report = report?;
        Ok(exit_code(&report))
    }
    .await;
    sup.shutdown().await;
    result
}

fn exit_code(r: &RunReport) -> i32 {
    match r.status {
        RunStatus::Succeeded => exit::OK,
        RunStatus::Cancelled => CANCELLED,
        _ => exit::FAILED,
    }
}

/// The demo's own permission rules (the user tier of its policy): reading and searching, editing
/// files, and running the project's tests are allowed; anything else goes to the approval mode.
pub fn demo_policy() -> anyhow::Result<TieredPolicy> {
    let allow = |p: &str| PermissionRule::new(p, PermissionMode::Allow);
    let rules = vec![
        allow("read_file"),
        allow("list_dir"),
        allow("glob"),
        allow("grep"),
        allow("edit_file"),
        allow("bash(python3 -m unittest*)"),
    ];
    let user = RuleList::new(rules).map_err(|e| anyhow::anyhow!("demo rules: {e}"))?;
    Ok(TieredPolicy::new(
        user,
        RuleList::default(),
        RuleList::default(),
        false,
    ))
}

/// A built-in agent, `auto`'s stages, or a stored agent.
fn resolve_agent(name: &str, store: &RunStore) -> anyhow::Result<Vec<AgentDef>> {
    if name == "auto" {
        return Ok(AUTO_STAGES
            .iter()
            .filter_map(|s| defs::builtin(s))
            .collect());
    }
    if let Some(a) = defs::builtin(name) {
        return Ok(vec![a]);
    }
    match store.get_agent(name)? {
        Some(a) => Ok(vec![a.def]),
        None => Err(usage(format!(
            "no agent named {name:?}: the built-ins are {}, and `hanzo-dev agents list` shows \
             the stored ones",
            defs::BUILTIN_NAMES.join(", ")
        ))),
    }
}

/// `--json`: one event per line on stdout.
struct JsonLines;

impl EventSink for JsonLines {
    fn emit(&self, event: &RunEvent) {
        let line = serde_json::to_string(event).expect("run events always serialize");
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

/// The live view on a terminal: the model's text on stdout as it streams; tool calls, decisions
/// and a spinner on stderr; a summary at the end.
struct TerminalView {
    spinner: Option<Spinner>,
    names: Mutex<std::collections::HashMap<String, String>>,
    /// The model's text on stdout does not end in a newline yet.
    mid_line: AtomicBool,
}

impl TerminalView {
    fn new() -> TerminalView {
        TerminalView {
            spinner: std::io::stderr().is_terminal().then(Spinner::start),
            names: Mutex::new(Default::default()),
            mid_line: AtomicBool::new(false),
        }
    }

    /// End the model's text line before anything else is shown.
    fn end_text_line(&self) {
        if self.mid_line.swap(false, Ordering::Relaxed) {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(b"\n");
            let _ = out.flush();
        }
    }

    fn spin(&self, label: Option<String>) {
        if let Some(s) = &self.spinner {
            s.set(label);
        }
    }
}

impl EventSink for TerminalView {
    fn emit(&self, event: &RunEvent) {
        if !matches!(event, RunEvent::Text { .. } | RunEvent::StepFinished { .. }) {
            self.end_text_line();
        }
        let mut err = std::io::stderr().lock();
        match event {
            RunEvent::RunStarted {
                run_id,
                agent,
                model,
                isolation,
                approval,
                ..
            } => {
                let _ = writeln!(
                    err,
                    "run {run_id}: agent {agent}, model {model}, isolation tier {isolation}, \
                     approval {approval}"
                );
            }
            RunEvent::StageStarted { stage } => {
                let _ = writeln!(err, "\n== stage: {stage} ==");
            }
            RunEvent::StepStarted { .. } => self.spin(Some("thinking".into())),
            RunEvent::Text { text } => {
                self.spin(None);
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(text.as_bytes());
                let _ = out.flush();
                self.mid_line
                    .store(!text.ends_with('\n'), Ordering::Relaxed);
            }
            RunEvent::ToolCall { id, name, input } => {
                self.spin(None);
                self.names
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(id.clone(), name.clone());
                let _ = writeln!(err, "\n● {name}  {}", summarize_input(name, input));
            }
            RunEvent::ToolDecision {
                id,
                allowed,
                decided_by,
                reason,
            } => {
                if *allowed {
                    let name = self
                        .names
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get(id)
                        .cloned()
                        .unwrap_or_default();
                    self.spin(Some(format!("running {name}")));
                } else {
                    let _ = writeln!(err, "  ✗ denied ({decided_by}): {reason}");
                }
            }
            RunEvent::ToolResult {
                is_error,
                preview,
                duration_ms,
                ..
            } => {
                self.spin(Some("thinking".into()));
                let first = preview.lines().next().unwrap_or("");
                let mark = if *is_error { "✗" } else { "✓" };
                let lines = preview.lines().count();
                let _ = writeln!(
                    err,
                    "  {mark} {duration_ms} ms, {lines} line{}{}",
                    if lines == 1 { "" } else { "s" },
                    if *is_error && !first.is_empty() {
                        format!(": {first}")
                    } else {
                        String::new()
                    }
                );
            }
            RunEvent::Compacted {
                dropped_messages,
                summarized,
                tokens_before,
                tokens_after,
            } => {
                let _ = writeln!(
                    err,
                    "\n(compacted {dropped_messages} messages, {} : {tokens_before} → \
                     {tokens_after} tokens)",
                    if *summarized {
                        "summarized"
                    } else {
                        "truncated"
                    }
                );
            }
            RunEvent::StepFinished { .. } => {}
            RunEvent::RunFinished {
                run_id,
                status,
                outcome,
                steps,
                input_tokens,
                output_tokens,
                duration_ms,
            } => {
                self.spin(None);
                let _ = writeln!(
                    err,
                    "\n\nrun {run_id} {status}: {outcome}\n{steps} steps, {input_tokens} tokens \
                     in / {output_tokens} out, {:.1} s. The record: hanzo-dev runs show {run_id}",
                    *duration_ms as f64 / 1000.0
                );
            }
        }
    }
}

/// A one-line spinner on stderr, drawn by its own thread while a label is set.
struct Spinner {
    label: Arc<Mutex<Option<String>>>,
    stop: Arc<AtomicBool>,
}

impl Spinner {
    fn start() -> Spinner {
        let label: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let (l, s) = (label.clone(), stop.clone());
        std::thread::spawn(move || {
            const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
            let mut i = 0usize;
            while !s.load(Ordering::Relaxed) {
                if let Some(text) = l.lock().unwrap_or_else(|p| p.into_inner()).as_deref() {
                    let mut err = std::io::stderr().lock();
                    let _ = write!(err, "\r{} {text}\x1b[K", FRAMES[i % FRAMES.len()]);
                    let _ = err.flush();
                }
                i += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Spinner { label, stop }
    }

    fn set(&self, label: Option<String>) {
        let mut l = self.label.lock().unwrap_or_else(|p| p.into_inner());
        if l.is_some() && label.is_none() {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
        *l = label;
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.set(None);
        self.stop.store(true, Ordering::Relaxed);
    }
}
