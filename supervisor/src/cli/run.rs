//! `hanzo-dev run "task"`: run an agent to completion under policy and isolation, and keep the
//! run. `--demo` runs the bundled example project against a recorded model, offline.
//!
//! The path: [`prepare`] (everything that can be refused before a worker starts: the flags, the
//! workspace, the settings, the store, the agent) → the worker tree → [`drive`] (the provider,
//! the loop, the cassette) → the exit code (`cli/exit.rs`). The live view is `cli/view.rs`.

use super::exit::{self, failed, not_found, usage, Exit};
use super::provider::{self, default_model, parse_provider, Wire};
use super::view::{JsonLines, TerminalView};
use crate::agent::approval::{approval_parser, ApprovalMode, Prompter};
use crate::agent::deadline::Deadlines;
use crate::agent::defs::{self, AUTO_STAGES};
use crate::agent::events::EventSink;
use crate::agent::run::{
    AgentLoop, Limits, LoopConfig, RunReport, RunSpec, DEFAULT_MAX_CALLS,
    DEFAULT_MAX_CALLS_PER_TURN,
};
use crate::agent::workers::{McpTools, WorkerApi, WorkerTools};
use crate::secrets::StartEnv;
use crate::startup::supervisor_config;
use crate::tree::Supervisor;
use crate::userfile::{write_user_file, PRIVATE};
use anyhow::Context;
use hanzo_ipc::roles::model::{ProviderConfig, ProviderId, RetryPolicy};
use hanzo_policy::isolation::{IsolationMode, Tier};
use hanzo_policy::permission::{PermissionMode, PermissionRule, RuleList, TieredPolicy};
use hanzo_policy::settings::{load, CliOverrides, LoadedSettings, SettingsSources, Source};
use hanzo_store::{AgentDef, RunStatus, RunStore, SecretValues};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// Exit code of a cancelled run (128 + SIGINT, as shells report it).
pub const CANCELLED: i32 = exit::CANCELLED;

/// A whole number of at least 1 (`--max-steps 0` would end every run before it starts).
fn at_least_one(s: &str) -> Result<u64, String> {
    match s.trim().parse::<i128>() {
        Ok(n) if n >= 1 => u64::try_from(n).map_err(|_| format!("{s} is too large")),
        Ok(n) => Err(format!("must be at least 1, got {n}")),
        Err(_) => Err(format!("expected a whole number, got {s:?}")),
    }
}

fn positive_u32(s: &str) -> Result<u32, String> {
    at_least_one(s).and_then(|n| u32::try_from(n).map_err(|_| format!("{s} is too large")))
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The task for the agent.
    #[arg(required_unless_present = "demo")]
    pub task: Option<String>,
    /// Run the bundled demo offline: an example project copied to a temporary directory and a
    /// recorded model (no credentials, no network). The directory is removed afterwards unless
    /// --keep is given.
    #[arg(long, conflicts_with_all = ["task", "replay", "record", "agent", "workspace"])]
    pub demo: bool,
    /// With --demo: keep the demo's workspace and print where it is.
    #[arg(long, requires = "demo")]
    pub keep: bool,
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
    /// Wire protocol of the endpoint (default: the provider's).
    #[arg(long, value_enum)]
    pub wire: Option<Wire>,
    /// What to do when a call needs approval [default: prompt on a terminal, deny otherwise].
    #[arg(long, value_parser = approval_parser())]
    pub approval: Option<ApprovalMode>,
    /// How much isolation to insist on (settings `sandbox.isolation` when not given).
    #[arg(long, value_parser = super::isolation_parser())]
    pub isolation: Option<IsolationMode>,
    /// Let commands reach HOST (`host`, `*.host`, `host:port`, an IP literal) for this run
    /// (repeatable; adds to `sandbox.network_allow`). Network needs tier B.
    #[arg(long = "network-allow", value_name = "HOST")]
    pub network_allow: Vec<String>,
    /// Stop after this many model turns (at least 1).
    #[arg(long, default_value_t = 50, value_parser = positive_u32, allow_negative_numbers = true)]
    pub max_steps: u32,
    /// Stop once the run has used this many tokens (input + output).
    #[arg(long, value_name = "TOKENS", value_parser = at_least_one, allow_negative_numbers = true)]
    pub max_tokens: Option<u64>,
    /// Stop after this many seconds of wall-clock time (at least 1).
    #[arg(long, value_name = "SECONDS", value_parser = at_least_one, allow_negative_numbers = true)]
    pub timeout: Option<u64>,
    /// Tool calls run from one model turn; the turn's further calls are refused (the model is
    /// told).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CALLS_PER_TURN,
          value_parser = positive_u32, allow_negative_numbers = true)]
    pub max_tool_calls_per_turn: u32,
    /// Tool calls run over the whole run; later calls are refused (the model is told).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CALLS,
          value_parser = positive_u32, allow_negative_numbers = true)]
    pub max_tool_calls: u32,
    /// Bytes of tool inputs and outputs the run may write to the store; the run fails when they
    /// are used up.
    #[arg(long, value_name = "BYTES", default_value_t = crate::agent::record::DEFAULT_RECORD_BYTES,
          value_parser = at_least_one, allow_negative_numbers = true)]
    pub max_record_bytes: u64,
    /// The longest the model may be silent during a turn, in seconds, before the turn fails.
    #[arg(long, value_name = "SECONDS", default_value_t = 300, value_parser = at_least_one,
          allow_negative_numbers = true)]
    pub model_timeout: u64,
    /// The model's context window in tokens; the conversation is compacted above 90 % of it.
    #[arg(long, default_value_t = 200_000, value_name = "TOKENS", value_parser = at_least_one)]
    pub max_context: u64,
    /// Output tokens per model turn.
    #[arg(long, default_value_t = 4096, value_parser = positive_u32)]
    pub max_output: u32,
    /// The workspace (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Run even in a workspace that is `/`, your home directory, or holds hanzo-dev's
    /// configuration or data (a model could then read your keys and rewrite your settings).
    /// The run records that it was allowed.
    #[arg(long)]
    pub allow_dangerous_workspace: bool,
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
    let demo = if args.demo {
        Some(DemoDir::create()?)
    } else {
        None
    };
    let result = run_in(args, &env, demo.as_ref().map(DemoDir::path)).await;
    if let Some(d) = demo {
        d.finish(args.keep);
    }
    result
}

/// The demo's temporary workspace: removed when the run ends, unless `--keep`.
pub(super) struct DemoDir(PathBuf);

impl DemoDir {
    pub(super) fn create() -> anyhow::Result<DemoDir> {
        let dir = tempfile::Builder::new()
            .prefix("hanzo-demo-")
            .tempdir()
            .context("cannot create the demo's workspace")?
            .keep();
        crate::demo::write_project(&dir)
            .with_context(|| format!("cannot write the demo project to {}", dir.display()))?;
        Ok(DemoDir(dir))
    }

    pub(super) fn path(&self) -> &Path {
        &self.0
    }

    pub(super) fn finish(self, keep: bool) {
        if keep {
            eprintln!(
                "The demo's workspace is kept at {} (remove it with `rm -r {}`).",
                self.0.display(),
                self.0.display()
            );
        } else if let Err(e) = std::fs::remove_dir_all(&self.0) {
            eprintln!(
                "warning: cannot remove the demo's workspace {}: {e}",
                self.0.display()
            );
        }
    }
}

/// What `run` settled before starting any worker.
pub(super) struct Prepared {
    pub(super) workspace: PathBuf,
    pub(super) task: String,
    pub(super) cassette: Option<String>,
    pub(super) provider: Option<ProviderId>,
    pub(super) loaded: LoadedSettings,
    pub(super) policy: TieredPolicy,
    pub(super) hooks_json: Option<String>,
    pub(super) hooks_time: Duration,
    pub(super) isolation: IsolationMode,
    pub(super) kernel_landlock_abi: u32,
    pub(super) store: RunStore,
    pub(super) secrets: SecretValues,
    pub(super) agent_name: String,
    pub(super) stages: Vec<AgentDef>,
    pub(super) dangerous: Vec<String>,
    /// The run's network allow-list (entries; empty: no network).
    pub(super) network_allow: Vec<String>,
}

async fn run_in(args: &Args, env: &StartEnv, demo: Option<&Path>) -> anyhow::Result<i32> {
    let mut prep = match prepare(args, env, demo)? {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let (mut cfg, _run_dir) =
        supervisor_config(Some(prep.workspace.clone()), env, prep.kernel_landlock_abi)?;
    cfg.isolation = prep.isolation;
    cfg.secret_names = env.secret_names();
    crate::agent::lsp::grant_server_prefixes(
        &mut cfg.ctx,
        &serde_json::to_string(&prep.loaded.merged.config.lsp_servers).context("lsp_servers")?,
        env,
    );
    // Network for commands: the broker and the tools worker get the egress control socket, and
    // the broker's records come here, to be stored (on a store connection of their own).
    let egress = if prep.network_allow.is_empty() {
        None
    } else {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        cfg.egress_records = Some(tx);
        let mut store =
            super::store::open(args.org.as_deref(), env).map_err(|e| usage(format!("{e:#}")))?;
        store.set_secret_values(prep.secrets.clone());
        Some((rx, store))
    };
    let sup = Supervisor::start(cfg).await?;
    let result = drive(args, &mut prep, &sup, demo.is_some(), egress).await;
    sup.shutdown().await;
    result
}

/// Everything that can be refused before a worker starts. `Err(code)` when `run` must end here
/// with that code (the reason already printed).
pub(super) fn prepare(
    args: &Args,
    env: &StartEnv,
    demo: Option<&Path>,
) -> anyhow::Result<Result<Prepared, i32>> {
    let workspace = match (demo, &args.workspace) {
        (Some(d), _) => d.to_path_buf(),
        (None, Some(w)) => w.clone(),
        (None, None) => {
            std::env::current_dir().context("cannot determine the current directory")?
        }
    };
    let workspace = workspace
        .canonicalize()
        .map_err(|e| usage(format!("workspace {}: {e}", workspace.display())))?;
    let task = match (&args.task, demo.is_some()) {
        (_, true) => crate::demo::TASK.to_string(),
        (Some(t), false) if !t.trim().is_empty() => t.clone(),
        _ => return Err(usage("the task is empty")),
    };
    let cassette = match (&args.replay, demo.is_some()) {
        (_, true) => Some(crate::demo::CASSETTE.to_string()),
        (Some(p), false) => Some(
            std::fs::read_to_string(p)
                .map_err(|e| usage(format!("cannot read cassette {}: {e}", p.display())))?,
        ),
        (None, false) => None,
    };
    let provider = args.provider.as_deref().map(parse_provider).transpose()?;
    let store_path = super::store::store_file(args.org.as_deref(), env)?;
    let dangers = crate::workspace::dangers(&workspace, env, Some(&store_path));
    if !dangers.is_empty() {
        if !args.allow_dangerous_workspace {
            return Err(usage(format!(
                "refusing to run in {}: {dangers}. A model could read or change those through \
                 its tools. Run in a project directory (or pass --workspace DIR); \
                 --allow-dangerous-workspace runs anyway and records that it did.",
                workspace.display()
            )));
        }
        eprintln!(
            "warning: running in a dangerous workspace {} because of \
             --allow-dangerous-workspace: {dangers}. The run records this.",
            workspace.display()
        );
    }

    // ---- settings: policy, hooks, isolation ----
    let src = SettingsSources::resolve(
        &workspace,
        env.vars.iter().cloned().collect(),
        CliOverrides {
            model: args.model.clone(),
            network_allow: args.network_allow.clone(),
            ..CliOverrides::default()
        },
    );
    for entry in &args.network_allow {
        hanzo_policy::network::parse_entry(entry)
            .map_err(|e| usage(format!("--network-allow {entry:?}: {e}")))?;
    }
    let loaded = load(&src).map_err(|e| usage(e.to_string()))?;
    if !args.json {
        for w in loaded.warnings() {
            eprintln!("warning: {w}");
        }
    }
    // On stderr in every mode: a CI job running as root with --json should see it too.
    if let Some(w) = super::sandbox::root_warning() {
        eprintln!("warning: {w}");
    }
    let config = &loaded.merged.config;
    let policy = if demo.is_some() {
        demo_policy()?
    } else {
        config
            .permission_policy()
            .map_err(|e| usage(format!("permission rules: {e}")))?
    }
    .with_workspace(&workspace);
    let hooks: Vec<_> = config.hooks.iter().map(|h| h.hook.clone()).collect();
    let hooks_time = Duration::from_millis(hooks.iter().map(|h| h.timeout_ms).sum());
    let hooks_json = if hooks.is_empty() || demo.is_some() {
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
            return Ok(Err(exit::ISOLATION_UNAVAILABLE));
        }
    }
    // Network for commands needs tier B: fail closed before anything starts.
    let network = config.sandbox.allow_list();
    if let Err(e) = crate::egress::require_egress_tier(&network, isolation, kernel.tier_b()) {
        eprintln!("error: {e}");
        return Ok(Err(exit::ISOLATION_UNAVAILABLE));
    }
    // ---- the run store and the agent ----
    let mut store =
        super::store::open(args.org.as_deref(), env).map_err(|e| usage(format!("{e:#}")))?;
    let secrets = env.secret_values();
    store.set_secret_values(secrets.clone());
    let agent_name = args
        .agent
        .clone()
        .unwrap_or_else(|| defs::DEFAULT_AGENT.to_string());
    let stages = resolve_agent(&agent_name, &store)?;
    Ok(Ok(Prepared {
        workspace,
        task,
        cassette,
        provider,
        loaded,
        policy,
        hooks_json,
        hooks_time,
        isolation,
        kernel_landlock_abi: kernel.landlock_abi,
        store,
        secrets,
        agent_name,
        stages,
        dangerous: dangers.0,
        network_allow: network.entries(),
    }))
}

/// Where a run's egress records arrive, and the store connection they are written with.
type EgressParts = (
    tokio::sync::mpsc::UnboundedReceiver<hanzo_ipc::roles::broker::EgressRecord>,
    RunStore,
);

/// With the workers up: the provider, the loop, the cassette, the exit code.
async fn drive(
    args: &Args,
    prep: &mut Prepared,
    sup: &Supervisor,
    demo: bool,
    egress: Option<EgressParts>,
) -> anyhow::Result<i32> {
    let infos = sup.wait_ready().await.map_err(|e| {
        failed(format!(
            "the workers did not start: {e}. `hanzo-dev doctor` shows why"
        ))
    })?;
    let tier = infos
        .iter()
        .find(|i| i.role == hanzo_ipc::Role::Tools)
        .map(|i| Tier::of(&i.attestation))
        .unwrap_or(Tier::A);
    if !prep.isolation.accepts(tier) {
        eprintln!(
            "error: --isolation strict: the tools worker came up without namespaces (tier \
             {tier}). Run `hanzo-dev doctor` for details."
        );
        return Ok(exit::ISOLATION_UNAVAILABLE);
    }
    if tier == Tier::A && !prep.network_allow.is_empty() {
        // `auto` fell back to tier A after all: no network, and no run either.
        eprintln!(
            "error: the settings allow network for commands ({}), but the tools worker came up \
             in tier A, which has no egress. Run `hanzo-dev doctor` for details, or remove the \
             entries to run without network.",
            prep.network_allow.join(", ")
        );
        return Ok(exit::ISOLATION_UNAVAILABLE);
    }
    let mut egress_generations = None;
    if !prep.network_allow.is_empty() {
        egress_generations = Some(crate::egress::generations(sup));
        // The commands get the proxy environment: without a broker serving it, refuse the run
        // rather than let them find out one connection at a time.
        match crate::egress::configure_run(sup, &prep.network_allow).await {
            Ok(forwarder) => tracing::info!(
                forwarder,
                hosts = %prep.network_allow.join(", "),
                "egress for commands is served by the broker"
            ),
            Err(e) => {
                eprintln!(
                    "error: the settings allow network for commands ({}), but the egress proxy \
                     could not be set up: {e}. Run `hanzo-dev doctor` for details, or remove the \
                     entries to run without network.",
                    prep.network_allow.join(", ")
                );
                return Ok(exit::ISOLATION_UNAVAILABLE);
            }
        }
    }
    let replay = prep.cassette.is_some();
    let provider = provider::resolve(
        sup,
        prep.cassette.take(),
        prep.provider,
        args.wire.map(Into::into),
        args.base_url.as_deref(),
    )
    .await?;
    let model_name = model_name(args, prep, &provider);
    let approval = args.approval.unwrap_or_else(|| {
        if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() && !args.json {
            ApprovalMode::Prompt
        } else {
            ApprovalMode::Deny
        }
    });
    let plain: Box<dyn EventSink> = if args.json {
        Box::new(JsonLines)
    } else {
        Box::new(TerminalView::new())
    };
    let recorder =
        egress.map(|(rx, store)| crate::egress::EgressRecorder::new(plain.as_ref(), rx, store));
    let sink: &dyn EventSink = match &recorder {
        Some(r) => r,
        None => plain.as_ref(),
    };
    let deadlines = Deadlines {
        model_idle: Duration::from_secs(args.model_timeout),
        ..Deadlines::default()
    };
    let api = WorkerApi {
        model: &sup.model,
        provider,
        model_name: model_name.clone(),
        max_output_tokens: args.max_output,
        retry: RetryPolicy::default(),
        recorded: args.record.as_ref().map(|_| Mutex::new(Vec::new())),
        deadlines,
        notices: Some((sink, prep.secrets.clone())),
    };
    let mcp = crate::mcp::start_for_run(sup, &prep.loaded, &prep.workspace).await;
    // The language servers of `lsp_servers`; without a working lsp worker the run goes on
    // without lsp tools or diagnostics.
    let lsp_servers =
        serde_json::to_string(&prep.loaded.merged.config.lsp_servers).context("lsp_servers")?;
    let lsp = crate::agent::lsp::LspLink::new(&sup.lsp, lsp_servers);
    let lsp = match lsp.configure(&deadlines).await {
        Ok(()) => Some(lsp),
        Err(e) => {
            eprintln!(
                "warning: no language servers in this run: {}",
                crate::term::sanitize_line_for_terminal(&e.to_string())
            );
            None
        }
    };
    let tools = WorkerTools {
        tools: &sup.tools,
        deadlines,
        hooks_time: prep.hooks_time,
        mcp: mcp.map(|limit| McpTools::new(&sup.mcp, limit)),
        lsp,
    };
    let prompter = Prompter::for_mode(approval);
    if demo && !args.json {
        eprintln!(
            "hanzo-dev demo: the model is a RECORDING (a replayed cassette, offline; no \
             credentials, no network).\nEverything else is real: the workers, the sandbox \
             (tier {tier}), the permission policy and the run store.\nWorkspace: {}\n",
            prep.workspace.display()
        );
    }
    let (cancel_tx, cancel_rx) = tokio::sync::watch::channel(false);
    let ctrl_c = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            let _ = cancel_tx.send(true);
        }
    });
    let spec = RunSpec {
        task: prep.task.clone(),
        agent_name: prep.agent_name.clone(),
        stages: prep.stages.clone(),
        model: model_name,
        isolation: tier,
        workspace: prep.workspace.display().to_string(),
        replay,
        dangerous_workspace: prep.dangerous.clone(),
    };
    let mut agent_loop = AgentLoop {
        api: &api,
        tools: &tools,
        prompter: &prompter,
        policy: &prep.policy,
        store: &mut prep.store,
        events: sink,
        config: LoopConfig {
            max_context_tokens: args.max_context,
            reserve_recent: 3,
            limits: Limits {
                max_steps: args.max_steps,
                max_total_tokens: args.max_tokens,
                timeout: args.timeout.map(Duration::from_secs),
                max_calls_per_turn: args.max_tool_calls_per_turn,
                max_calls: args.max_tool_calls,
                max_record_bytes: args.max_record_bytes,
            },
            hooks_json: prep.hooks_json.clone(),
            secrets: prep.secrets.clone(),
        },
        cancel: cancel_rx,
    };
    let report = match egress_generations {
        Some(generations) => {
            let allow = prep.network_allow.clone();
            let keep = crate::egress::keep_configured(sup, &allow, generations);
            tokio::select! {
                r = agent_loop.run(&spec) => r,
                never = keep => match never {},
            }
        }
        None => agent_loop.run(&spec).await,
    };
    ctrl_c.abort();
    if let Some(r) = &recorder {
        r.finish(sup).await;
    }
    if let Some(path) = &args.record {
        write_cassette(path, &api.take_recorded(), &prep.workspace)?;
    }
    let report = report.map_err(|e| {
        failed(format!(
            "the run store could not be written, so the run stopped before its next call: \
             {e:#}. Check the disk and the permissions of the data directory."
        ))
    })?;
    Ok(exit_code(&report))
}

/// `--model`, else the first stage's model, else a model set in the settings (a file, the
/// environment), else the provider's default.
pub(super) fn model_name(args: &Args, prep: &Prepared, provider: &ProviderConfig) -> String {
    let configured = prep.loaded.merged.sources.get("model") != Some(&Source::Default);
    args.model
        .clone()
        .or_else(|| {
            prep.stages
                .iter()
                .map(|s| s.model.clone())
                .find(|m| !m.is_empty())
        })
        .or_else(|| configured.then(|| prep.loaded.merged.config.model.clone()))
        .unwrap_or_else(|| default_model(provider).to_string())
}

/// The recorded exchanges as a cassette, written without following a planted link.
fn write_cassette(path: &Path, lines: &[String], workspace: &Path) -> anyhow::Result<()> {
    let mut text = lines.join("\n");
    text.push('\n');
    write_user_file(path, text.as_bytes(), PRIVATE, Some(workspace))
        .map_err(|e| failed(format!("cannot write the cassette: {e}")))
}

fn exit_code(r: &RunReport) -> i32 {
    match r.status {
        RunStatus::Succeeded => Exit::Ok.code(),
        RunStatus::Cancelled => Exit::Cancelled.code(),
        _ => Exit::Failed.code(),
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
pub(super) fn resolve_agent(name: &str, store: &RunStore) -> anyhow::Result<Vec<AgentDef>> {
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
        None => Err(not_found(format!(
            "no agent named {name:?}: the built-ins are {}, and `hanzo-dev agents list` shows \
             the stored ones",
            defs::BUILTIN_NAMES.join(", ")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_must_be_whole_and_at_least_one() {
        assert_eq!(at_least_one("3"), Ok(3));
        assert!(at_least_one("0").unwrap_err().contains("at least 1"));
        assert!(at_least_one("-1")
            .unwrap_err()
            .contains("at least 1, got -1"));
        assert!(at_least_one("1.5").unwrap_err().contains("whole number"));
        assert!(positive_u32("5000000000")
            .unwrap_err()
            .contains("too large"));
    }
}
