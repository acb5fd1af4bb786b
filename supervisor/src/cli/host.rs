//! The session host: what `run`, `chat` and `acp` share to turn a workspace into a worker tree
//! ready for turns. One definition of the refusals before anything starts ([`prepare`]), of the
//! tree's start ([`Host::start`]), of the checks once it is up and the run's provider, MCP
//! servers and language servers ([`Host::ready`]), and of one turn of a session ([`Host::turn`]).
//!
//! `run` drives one [`AgentLoop`] itself (its egress keeper races the loop); `chat` and `acp`
//! call [`Host::turn`] per message (and the next turn starts from the session's newest `/compact`
//! summary), so both get the same LSP diagnostics and `--record` as `run`.

use super::exit::{self, failed, usage};
use super::provider::{self, parse_provider};
use super::run::{demo_policy, model_name, resolve_agent, write_cassette, Args};
use crate::agent::deadline::Deadlines;
use crate::agent::defs;
use crate::agent::events::EventSink;
use crate::agent::lsp::LspLink;
use crate::agent::run::{AgentLoop, Continuation, Limits, LoopConfig, RunReport, RunSpec};
use crate::agent::session::context_messages;
use crate::agent::traits::PermissionPrompter;
use crate::agent::workers::{McpTools, WorkerApi, WorkerTools};
use crate::secrets::StartEnv;
use crate::startup::{supervisor_config, RunDir};
use crate::tree::Supervisor;
use anyhow::Context;
use hanzo_ipc::roles::model::{ProviderConfig, ProviderId, RetryPolicy};
use hanzo_policy::hooks::HookConfig;
use hanzo_policy::isolation::{IsolationMode, Tier};
use hanzo_policy::permission::ScopedPolicy;
use hanzo_policy::settings::{load, CliOverrides, Config, LoadedSettings, SettingsSources};
use hanzo_store::{AgentDef, RunStore, SecretValues, SessionId};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::watch;

/// What `run` settled before starting any worker.
pub(super) struct Prepared {
    pub(super) workspace: PathBuf,
    pub(super) task: String,
    pub(super) cassette: Option<String>,
    pub(super) provider: Option<ProviderId>,
    pub(super) loaded: LoadedSettings,
    pub(super) policy: ScopedPolicy,
    pub(super) hooks: Vec<HookConfig>,
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

/// Everything that can be refused before a worker starts. `Err(code)` when `run` must end here
/// with that code (the reason already printed). One step per concern, in the order a user meets
/// the refusals: the workspace and task, the provider and store location, a dangerous workspace,
/// the settings, the isolation and network the machine can give, then the store and the agent.
pub(super) fn prepare(
    args: &Args,
    env: &StartEnv,
    demo: Option<&Path>,
) -> anyhow::Result<Result<Prepared, i32>> {
    let workspace = workspace_dir(args, demo)?;
    let (task, cassette) = task_and_cassette(args, demo)?;
    let provider = args.provider.as_deref().map(parse_provider).transpose()?;
    let store_path = super::store::store_file(args.org.as_deref(), env)?;
    let dangerous = refuse_dangerous_workspace(args, env, &workspace, &store_path)?;
    let loaded = load_settings(args, env, &workspace)?;
    let config = &loaded.merged.config;
    let (policy, hooks, hooks_time) = policy_and_hooks(config, demo, &workspace)?;
    let isolation = args.isolation.unwrap_or(config.sandbox.isolation);
    let (kernel_landlock_abi, network) = match check_isolation(isolation, config) {
        Ok(settled) => settled,
        Err(code) => return Ok(Err(code)),
    };
    let (store, secrets) = open_store(args, env, &loaded, &workspace)?;
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
        hooks,
        hooks_time,
        isolation,
        kernel_landlock_abi,
        store,
        secrets,
        agent_name,
        stages,
        dangerous,
        network_allow: network.entries(),
    }))
}

/// The workspace, canonical: the demo's project, `--workspace`, or the current directory. Made
/// canonical first because every later check (dangers, settings, trust) compares real paths.
fn workspace_dir(args: &Args, demo: Option<&Path>) -> anyhow::Result<PathBuf> {
    let workspace = match (demo, &args.workspace) {
        (Some(d), _) => d.to_path_buf(),
        (None, Some(w)) => w.clone(),
        (None, None) => {
            std::env::current_dir().context("cannot determine the current directory")?
        }
    };
    workspace
        .canonicalize()
        .map_err(|e| usage(format!("workspace {}: {e}", workspace.display())))
}

/// The task and the recorded model answers to replay, if any: the demo brings both; otherwise an
/// empty task is a usage error before a cassette file is even read.
fn task_and_cassette(args: &Args, demo: Option<&Path>) -> anyhow::Result<(String, Option<String>)> {
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
    Ok((task, cassette))
}

/// What makes `workspace` dangerous to hand to a model (`/`, or a directory containing the home
/// directory, hanzo's configuration or data, the trust store or this run's store): a refusal
/// unless `--allow-dangerous-workspace`, which is warned about and returned so the run records it.
fn refuse_dangerous_workspace(
    args: &Args,
    env: &StartEnv,
    workspace: &Path,
    store_path: &Path,
) -> anyhow::Result<Vec<String>> {
    let dangers = crate::workspace::dangers(workspace, env, Some(store_path));
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
    Ok(dangers.0)
}

/// The merged settings of `workspace` with this invocation's flags (`--model`,
/// `--network-allow`, each entry checked here so a typo is a usage error, not a warning). Their
/// warnings go to stderr unless `--json`; the root warning always does (a CI job running as root
/// with `--json` should see it too).
fn load_settings(args: &Args, env: &StartEnv, workspace: &Path) -> anyhow::Result<LoadedSettings> {
    let src = SettingsSources::resolve(
        workspace,
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
    if let Some(w) = super::sandbox::root_warning() {
        eprintln!("warning: {w}");
    }
    Ok(loaded)
}

/// The permission policy (the demo's own rules, or the settings' scopes, judged against
/// `workspace`), the hooks to run and their summed time budget. The demo runs no hooks the
/// workspace might configure.
fn policy_and_hooks(
    config: &Config,
    demo: Option<&Path>,
    workspace: &Path,
) -> anyhow::Result<(ScopedPolicy, Vec<HookConfig>, Duration)> {
    let policy = if demo.is_some() {
        demo_policy()?
    } else {
        config
            .permission_policy()
            .map_err(|e| usage(format!("permission rules: {e}")))?
    }
    .with_workspace(workspace);
    let hooks: Vec<_> = config.hooks.iter().map(|h| h.hook.clone()).collect();
    let hooks_time = Duration::from_millis(hooks.iter().map(|h| h.timeout_ms).sum());
    let hooks = if demo.is_some() { Vec::new() } else { hooks };
    Ok((policy, hooks, hooks_time))
}

/// Fail closed, before anything starts, when the machine cannot give what was asked: tier B for
/// `--isolation strict`, and tier B for any network for commands. Gives the kernel's Landlock ABI
/// and the run's network allow-list, or the exit code (the reason printed).
fn check_isolation(
    isolation: IsolationMode,
    config: &Config,
) -> Result<(u32, hanzo_policy::network::AllowList), i32> {
    let kernel = hanzo_sandbox::doctor::probe_kernel();
    if isolation == IsolationMode::Strict {
        if let Err(why) = kernel.tier_b() {
            eprintln!(
                "error: --isolation strict needs tier B (namespaces), which this machine cannot \
                 give: {why}. Run `hanzo-dev doctor` for details, or use --isolation auto."
            );
            return Err(exit::ISOLATION_UNAVAILABLE);
        }
    }
    let network = config.sandbox.allow_list();
    if let Err(e) = crate::egress::require_egress_tier(&network, isolation, kernel.tier_b()) {
        eprintln!("error: {e}");
        return Err(exit::ISOLATION_UNAVAILABLE);
    }
    Ok((kernel.landlock_abi, network))
}

/// The run store, told every secret value it must never write: the environment's, and the ones
/// the workspace's MCP servers are given (secrets whatever their names).
fn open_store(
    args: &Args,
    env: &StartEnv,
    loaded: &LoadedSettings,
    workspace: &Path,
) -> anyhow::Result<(RunStore, SecretValues)> {
    let mut store =
        super::store::open(args.org.as_deref(), env).map_err(|e| usage(format!("{e:#}")))?;
    let secrets = env.secret_values_with(&crate::mcp::secret_names(loaded, workspace));
    store.set_secret_values(secrets.clone());
    Ok((store, secrets))
}

/// Where a run's egress records arrive, and the store connection they are written with.
pub(super) type EgressParts = (
    tokio::sync::mpsc::UnboundedReceiver<hanzo_ipc::roles::broker::EgressRecord>,
    RunStore,
);

/// A worker tree for one workspace, with what [`prepare`] settled.
pub(super) struct Host {
    pub(super) prep: Prepared,
    pub(super) sup: Supervisor,
    /// The `lsp_servers` table the lsp worker is configured with (version managers' stand-ins
    /// resolved: `agent::lsp::prepare_servers`).
    lsp_table: String,
    _run_dir: RunDir,
    /// The broker's egress records, when the run allows network for commands (`run` stores
    /// them).
    pub(super) egress: Option<EgressParts>,
    /// `--record`: where the cassette goes, and the exchanges recorded so far (all turns).
    record: Option<(PathBuf, Vec<String>)>,
}

/// What [`Host::ready`] found and set up once the workers were up.
pub(super) struct Ready {
    /// The tools worker's attested tier.
    pub(super) tier: Tier,
    pub(super) replay: bool,
    pub(super) provider: ProviderConfig,
    pub(super) model: String,
    /// `Some(call limit)` when at least one MCP server is ready.
    pub(super) mcp_limit: Option<Duration>,
    /// The `lsp_servers` table the lsp worker took (`None`: no language servers).
    pub(super) lsp_servers: Option<String>,
    /// The egress generations to keep configured (`run` with network only).
    pub(super) egress_generations: Option<(u64, u64)>,
}

impl Host {
    /// Start the worker tree for `prep.workspace`.
    pub(super) async fn start(prep: Prepared, args: &Args, env: &StartEnv) -> anyhow::Result<Host> {
        let (mut cfg, run_dir) =
            supervisor_config(Some(prep.workspace.clone()), env, prep.kernel_landlock_abi)?;
        cfg.isolation = prep.isolation;
        cfg.secret_names = env.secret_names();
        // The secrets MCP servers are given reach the broker alone, whatever their names.
        cfg.secret_names
            .extend(crate::mcp::secret_names(&prep.loaded, &prep.workspace));
        // A `workspace-rw` server needs an mcp worker (and launcher) that may write the workspace.
        cfg.ctx.mcp_workspace_write =
            crate::mcp::wants_workspace_write(&prep.loaded, &prep.workspace);
        // Servers' `read_paths`: the mcp worker (and launcher) must reach them to hand them on.
        cfg.ctx.mcp_extra_read = crate::mcp::extra_reads(&prep.loaded, &prep.workspace);
        let lsp_table = crate::agent::lsp::prepare_servers(
            &mut cfg.ctx,
            &serde_json::to_string(&prep.loaded.merged.config.lsp_servers)
                .context("lsp_servers")?,
            env,
        );
        // Network for commands: the broker and the tools worker get the egress control socket,
        // and the broker's records come here, to be stored (on a store connection of their own).
        let egress = if prep.network_allow.is_empty() {
            None
        } else {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            cfg.egress_records = Some(tx);
            // The MCP stdio servers that get network share the same path: a control socket of
            // their own between the broker and the mcp worker.
            cfg.mcp_egress = crate::mcp::wants_egress(
                &prep.loaded,
                &prep.workspace,
                &prep.loaded.merged.config.sandbox.allow_list(),
            );
            let mut store = super::store::open(args.org.as_deref(), env)
                .map_err(|e| usage(format!("{e:#}")))?;
            store.set_secret_values(prep.secrets.clone());
            Some((rx, store))
        };
        let sup = Supervisor::start(cfg).await?;
        Ok(Host {
            prep,
            sup,
            lsp_table,
            _run_dir: run_dir,
            egress,
            record: args.record.clone().map(|p| (p, Vec::new())),
        })
    }

    /// Stop the workers.
    pub(super) async fn shutdown(self) {
        self.sup.shutdown().await;
    }

    /// Once the workers are up: the isolation and network checks, the provider, the model, the
    /// MCP servers (the settings' and `extra_mcp`) and the language servers. `Err(code)` when
    /// the run must end here (the reason already printed on stderr).
    pub(super) async fn ready(
        &mut self,
        args: &Args,
        extra_mcp: crate::mcp::ExtraServers,
    ) -> anyhow::Result<Result<Ready, i32>> {
        let sup = &self.sup;
        let prep = &mut self.prep;
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
            return Ok(Err(exit::ISOLATION_UNAVAILABLE));
        }
        if tier == Tier::A && !prep.network_allow.is_empty() {
            // `auto` fell back to tier A after all: no network, and no run either.
            eprintln!(
                "error: the settings allow network for commands ({}), but the tools worker came \
                 up in tier A, which has no egress. Run `hanzo-dev doctor` for details, or \
                 remove the entries to run without network.",
                prep.network_allow.join(", ")
            );
            return Ok(Err(exit::ISOLATION_UNAVAILABLE));
        }
        let mut egress_generations = None;
        if !prep.network_allow.is_empty() {
            egress_generations = Some(crate::egress::generations(sup));
            // The commands get the proxy environment: without a broker serving it, refuse the
            // run rather than let them find out one connection at a time.
            match crate::egress::configure_run(sup, &prep.network_allow).await {
                Ok(forwarder) => tracing::info!(
                    forwarder,
                    hosts = %prep.network_allow.join(", "),
                    "egress for commands is served by the broker"
                ),
                Err(e) => {
                    eprintln!(
                        "error: the settings allow network for commands ({}), but the egress \
                         proxy could not be set up: {e}. Run `hanzo-dev doctor` for details, or \
                         remove the entries to run without network.",
                        prep.network_allow.join(", ")
                    );
                    return Ok(Err(exit::ISOLATION_UNAVAILABLE));
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
        let model = model_name(args, prep, &provider);
        let mcp =
            crate::mcp::start_for_run_with(sup, &prep.loaded, &prep.workspace, extra_mcp).await;
        // The language servers of `lsp_servers`; without a working lsp worker the run goes on
        // without lsp tools or diagnostics.
        let lsp_servers = self.lsp_table.clone();
        let lsp = LspLink::new(&sup.lsp, lsp_servers.clone());
        let lsp_servers = match lsp.configure(&deadlines(args)).await {
            Ok(()) => Some(lsp_servers),
            Err(e) => {
                eprintln!(
                    "warning: no language servers in this run: {}",
                    crate::term::sanitize_line_for_terminal(&e.to_string())
                );
                None
            }
        };
        Ok(Ok(Ready {
            tier,
            replay,
            provider,
            model,
            mcp_limit: mcp,
            lsp_servers,
            egress_generations,
        }))
    }

    /// One turn of `session`: a run recorded under it, with the session's earlier turns before
    /// `task`; cancelled when `cancel` becomes true. With `--record`, the cassette is rewritten
    /// after the turn with every exchange so far.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn turn<P: PermissionPrompter>(
        &mut self,
        ready: &Ready,
        args: &Args,
        model: &str,
        sink: &dyn EventSink,
        prompter: &P,
        cancel: watch::Receiver<bool>,
        session: SessionId,
        task: &str,
    ) -> anyhow::Result<RunReport> {
        let Host {
            prep, sup, record, ..
        } = self;
        let prior = context_messages(&prep.store.session_context(session)?);
        let mut spec = run_spec(prep, ready, task);
        spec.model = model.to_string();
        let mut api = worker_api(sup, prep, ready, args, sink);
        api.model_name = model.to_string();
        let tools = worker_tools(sup, prep, ready, args, sink);
        let config = loop_config(prep, args);
        let continuation = Continuation {
            session: Some(session),
            prior,
        };
        let mut agent_loop = AgentLoop {
            api: &api,
            tools: &tools,
            prompter,
            policy: &prep.policy,
            store: &mut prep.store,
            events: sink,
            config,
            cancel,
        };
        let report = agent_loop.run_continuing(&spec, &continuation).await;
        if let Some((path, lines)) = record {
            lines.extend(api.take_recorded());
            write_cassette(path, lines, &prep.workspace)?;
        }
        report
    }

    /// The model worker for one request outside a turn (`chat`'s `/compact`), as `model`;
    /// pass what it recorded to [`Host::keep_recorded`] afterwards.
    pub(super) fn model_api<'a>(
        &'a self,
        ready: &Ready,
        args: &Args,
        model: &str,
        sink: &'a dyn EventSink,
    ) -> WorkerApi<'a> {
        let mut api = worker_api(&self.sup, &self.prep, ready, args, sink);
        api.model_name = model.to_string();
        api
    }

    /// With `--record`, add `lines` (exchanges made outside a turn) to the cassette, in order.
    pub(super) fn keep_recorded(&mut self, lines: Vec<String>) -> anyhow::Result<()> {
        if let Some((path, all)) = &mut self.record {
            all.extend(lines);
            write_cassette(path, all, &self.prep.workspace)?;
        }
        Ok(())
    }
}

/// The request deadlines of a run.
pub(super) fn deadlines(args: &Args) -> Deadlines {
    Deadlines {
        model_idle: Duration::from_secs(args.model_timeout),
        ..Deadlines::default()
    }
}

/// The model worker as the loop's [`crate::agent::ApiClient`].
pub(super) fn worker_api<'a>(
    sup: &'a Supervisor,
    prep: &Prepared,
    ready: &Ready,
    args: &Args,
    sink: &'a dyn EventSink,
) -> WorkerApi<'a> {
    WorkerApi {
        model: &sup.model,
        provider: ready.provider.clone(),
        model_name: ready.model.clone(),
        max_output_tokens: args.max_output,
        retry: RetryPolicy::default(),
        recorded: args.record.as_ref().map(|_| Mutex::new(Vec::new())),
        deadlines: deadlines(args),
        notices: Some((sink, prep.secrets.clone())),
    }
}

/// The tools, MCP and lsp workers as the loop's [`crate::agent::ToolExecutor`]; MCP calls'
/// progress goes to `sink`.
pub(super) fn worker_tools<'a>(
    sup: &'a Supervisor,
    prep: &Prepared,
    ready: &Ready,
    args: &Args,
    sink: &'a dyn EventSink,
) -> WorkerTools<'a> {
    WorkerTools {
        tools: &sup.tools,
        deadlines: deadlines(args),
        hooks_time: prep.hooks_time,
        mcp: ready
            .mcp_limit
            .map(|limit| McpTools::new(&sup.mcp, limit).with_events(sink)),
        lsp: ready
            .lsp_servers
            .clone()
            .map(|servers| LspLink::new(&sup.lsp, servers)),
        builtin: Default::default(),
    }
}

/// The loop's limits and settings from the command line.
pub(super) fn loop_config(prep: &Prepared, args: &Args) -> LoopConfig {
    LoopConfig {
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
        hooks: prep.hooks.clone(),
        secrets: prep.secrets.clone(),
    }
}

/// What one run (or turn) of `prep`'s agent runs.
pub(super) fn run_spec(prep: &Prepared, ready: &Ready, task: &str) -> RunSpec {
    RunSpec {
        task: task.to_string(),
        agent_name: prep.agent_name.clone(),
        stages: prep.stages.clone(),
        model: ready.model.clone(),
        isolation: ready.tier,
        workspace: prep.workspace.display().to_string(),
        replay: ready.replay,
        dangerous_workspace: prep.dangerous.clone(),
    }
}
