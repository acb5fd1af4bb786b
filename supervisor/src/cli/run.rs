//! `hanzo-dev run "task"`: run an agent to completion under policy and isolation, and keep the
//! run. `--demo` runs the bundled example project against a recorded model, offline.
//!
//! The path: [`prepare`] (everything that can be refused before a worker starts: the flags, the
//! workspace, the settings, the store, the agent) → the worker tree → [`drive`] (the provider,
//! the loop, the cassette) → the exit code (`cli/exit.rs`). The live view is `cli/view.rs`.

use super::exit::{self, failed, not_found, Exit};
use super::host::{self, prepare, Host, Prepared};
use super::provider::{default_model, Wire};
use super::view::{JsonLines, TerminalView};
use crate::agent::approval::{approval_parser, ApprovalMode, Prompter};
use crate::agent::defs::{self, AUTO_STAGES};
use crate::agent::events::EventSink;
use crate::agent::run::{AgentLoop, RunReport, DEFAULT_MAX_CALLS, DEFAULT_MAX_CALLS_PER_TURN};
use crate::secrets::StartEnv;
use crate::userfile::{write_user_file, PRIVATE};
use anyhow::Context;
use hanzo_ipc::roles::model::ProviderConfig;
use hanzo_policy::isolation::IsolationMode;
use hanzo_policy::permission::{PermissionMode, PermissionRule, RuleList, ScopedPolicy};
use hanzo_policy::settings::Source;
use hanzo_store::{AgentDef, RunStatus, RunStore};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

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

/// Model turns of a run, and of each session turn, unless `--max-steps` says otherwise.
pub const DEFAULT_MAX_STEPS: u32 = 50;
/// The model's context window assumed unless `--max-context` says otherwise, in tokens.
pub const DEFAULT_MAX_CONTEXT: u64 = 200_000;
/// How long the model may be silent in a turn, in seconds, unless `--model-timeout` says otherwise.
pub const DEFAULT_MODEL_TIMEOUT: u64 = 300;
/// Output tokens per model turn unless `--max-output` says otherwise.
pub const DEFAULT_MAX_OUTPUT: u32 = 4096;

/// What `hanzo-dev run` takes.
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
    #[arg(long, default_value_t = DEFAULT_MAX_STEPS, value_parser = positive_u32,
          allow_negative_numbers = true)]
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
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_MODEL_TIMEOUT,
          value_parser = at_least_one, allow_negative_numbers = true)]
    pub model_timeout: u64,
    /// The model's context window in tokens; the conversation is compacted above 90 % of it.
    #[arg(long, default_value_t = DEFAULT_MAX_CONTEXT, value_name = "TOKENS",
          value_parser = at_least_one)]
    pub max_context: u64,
    /// Output tokens per model turn.
    #[arg(long, default_value_t = DEFAULT_MAX_OUTPUT, value_parser = positive_u32)]
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

/// The `run` flags a session surface (`chat`, `acp`) also takes, with the same meaning; each
/// surface flattens them into its own flags so the two cannot drift apart.
#[derive(Debug, clap::Args)]
pub struct SessionFlags {
    /// Model name (default: the agent's, else settings, else the provider's default).
    #[arg(long)]
    pub model: Option<String>,
    /// Whose credential to use: hanzo, anthropic or openai (default: the first found).
    #[arg(long)]
    pub provider: Option<String>,
    /// Endpoint base URL; added to the broker's allow-list (plain http: loopback only).
    #[arg(long)]
    pub base_url: Option<String>,
    /// How much isolation to insist on (settings `sandbox.isolation` when not given).
    #[arg(long, value_parser = super::isolation_parser())]
    pub isolation: Option<IsolationMode>,
    /// Stop a turn after this many model steps.
    #[arg(long, default_value_t = DEFAULT_MAX_STEPS)]
    pub max_steps: u32,
    /// The model's context window in tokens; the conversation is compacted above 90 % of it.
    #[arg(long, default_value_t = DEFAULT_MAX_CONTEXT, value_name = "TOKENS")]
    pub max_context: u64,
    /// As `run --allow-dangerous-workspace`, for the session's workspace.
    #[arg(long)]
    pub allow_dangerous_workspace: bool,
    /// The org whose store keeps the sessions (default: `HANZO_ORG`, else `local`).
    #[arg(long)]
    pub org: Option<String>,
}

impl Default for SessionFlags {
    /// What clap fills in when no flag is given.
    fn default() -> SessionFlags {
        SessionFlags {
            model: None,
            provider: None,
            base_url: None,
            isolation: None,
            max_steps: DEFAULT_MAX_STEPS,
            max_context: DEFAULT_MAX_CONTEXT,
            allow_dangerous_workspace: false,
            org: None,
        }
    }
}

impl Args {
    /// The arguments of one turn of a session (`chat`, `acp`): the session's flags, and `run`'s
    /// defaults for everything a session does not set, so that a turn meets the same refusals
    /// and limits as `hanzo-dev run`. `task` names the surface in the run record. The caller
    /// sets what differs per surface: agent, approval, demo, workspace, cassettes.
    pub(super) fn for_session(task: &str, flags: &SessionFlags) -> Args {
        Args {
            task: Some(task.to_owned()),
            demo: false,
            keep: false,
            agent: None,
            model: flags.model.clone(),
            provider: flags.provider.clone(),
            base_url: flags.base_url.clone(),
            wire: None,
            approval: None,
            isolation: flags.isolation,
            network_allow: Vec::new(),
            // The session flags take 0 (clap does not refuse it there); a turn needs a step.
            max_steps: flags.max_steps.max(1),
            max_tokens: None,
            timeout: None,
            max_tool_calls_per_turn: DEFAULT_MAX_CALLS_PER_TURN,
            max_tool_calls: DEFAULT_MAX_CALLS,
            max_record_bytes: crate::agent::record::DEFAULT_RECORD_BYTES,
            model_timeout: DEFAULT_MODEL_TIMEOUT,
            max_context: flags.max_context.max(1),
            max_output: DEFAULT_MAX_OUTPUT,
            workspace: None,
            allow_dangerous_workspace: flags.allow_dangerous_workspace,
            org: flags.org.clone(),
            replay: None,
            record: None,
            json: false,
        }
    }
}

/// Runs `hanzo-dev run`: one run of the agent on the task, recorded in the store; returns the
/// exit code.
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

async fn run_in(args: &Args, env: &StartEnv, demo: Option<&Path>) -> anyhow::Result<i32> {
    let prep = match prepare(args, env, demo)? {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let mut host = Host::start(prep, args, env).await?;
    let result = drive(args, &mut host, demo.is_some()).await;
    host.shutdown().await;
    result
}

/// With the workers up: the provider, the loop, the cassette, the exit code.
async fn drive(args: &Args, host: &mut Host, demo: bool) -> anyhow::Result<i32> {
    let ready = match host.ready(args, Default::default()).await? {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let Host {
        prep, sup, egress, ..
    } = host;
    let sup = &*sup;
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
    let recorder = egress
        .take()
        .map(|(rx, store)| crate::egress::EgressRecorder::new(plain.as_ref(), rx, store));
    let sink: &dyn EventSink = match &recorder {
        Some(r) => r,
        None => plain.as_ref(),
    };
    let api = host::worker_api(sup, prep, &ready, args, sink);
    let tools = host::worker_tools(sup, prep, &ready, args, sink);
    let prompter = Prompter::for_mode(approval);
    if demo && !args.json {
        eprintln!(
            "hanzo-dev demo: the model is a RECORDING (a replayed cassette, offline; no \
             credentials, no network).\nEverything else is real: the workers, the sandbox \
             (tier {}), the permission policy and the run store.\nWorkspace: {}\n",
            ready.tier,
            prep.workspace.display()
        );
    }
    let (cancel_tx, cancel_rx) = tokio::sync::watch::channel(false);
    let ctrl_c = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            let _ = cancel_tx.send(true);
        }
    });
    let spec = host::run_spec(prep, &ready, &prep.task);
    let config = host::loop_config(prep, args);
    let mut agent_loop = AgentLoop {
        api: &api,
        tools: &tools,
        prompter: &prompter,
        policy: &prep.policy,
        store: &mut prep.store,
        events: sink,
        config,
        cancel: cancel_rx,
    };
    let report = match ready.egress_generations {
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
pub(super) fn write_cassette(
    path: &Path,
    lines: &[String],
    workspace: &Path,
) -> anyhow::Result<()> {
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

/// The demo's own permission rules (the user scope of its policy): reading and searching, editing
/// files, and running the project's tests are allowed; anything else goes to the approval mode.
pub fn demo_policy() -> anyhow::Result<ScopedPolicy> {
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
    Ok(ScopedPolicy::new(
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

    fn parse(argv: &[&str]) -> super::super::Command {
        use clap::Parser as _;
        let cli = super::super::Cli::try_parse_from(argv).expect("the flags parse");
        cli.command.expect("a subcommand")
    }

    /// A session's turn and `hanzo-dev run TASK` with no flags get the same limits.
    #[test]
    fn a_session_turn_has_runs_defaults() {
        let super::super::Command::Run(run) = parse(&["hanzo-dev", "run", "t"]) else {
            panic!("not run")
        };
        let super::super::Command::Chat(chat) = parse(&["hanzo-dev", "chat"]) else {
            panic!("not chat")
        };
        let turn = Args::for_session("(chat)", &chat.session);
        assert_eq!(turn.task.as_deref(), Some("(chat)"));
        let limits = |a: &Args| {
            (
                a.max_steps,
                a.max_tokens,
                a.timeout,
                a.max_tool_calls_per_turn,
                a.max_tool_calls,
                a.max_record_bytes,
                a.model_timeout,
                a.max_context,
                a.max_output,
            )
        };
        assert_eq!(limits(&turn), limits(&run));
        // `hanzo-dev` alone is `chat` with no flags.
        let bare = super::super::chat::Args::default_for_terminal();
        assert_eq!(
            limits(&Args::for_session("(chat)", &bare.session)),
            limits(&run)
        );
    }

    /// The flags shared with `run` reach the turn; a 0 that clap lets through becomes 1.
    #[test]
    fn session_flags_reach_the_turn() {
        let super::super::Command::Acp(acp) = parse(&[
            "hanzo-dev",
            "acp",
            "--model",
            "m",
            "--provider",
            "openai",
            "--base-url",
            "http://127.0.0.1:9",
            "--max-steps",
            "0",
            "--max-context",
            "7",
            "--org",
            "o",
            "--allow-dangerous-workspace",
        ]) else {
            panic!("not acp")
        };
        let turn = Args::for_session("(acp)", &acp.session);
        assert_eq!(turn.model.as_deref(), Some("m"));
        assert_eq!(turn.provider.as_deref(), Some("openai"));
        assert_eq!(turn.base_url.as_deref(), Some("http://127.0.0.1:9"));
        assert_eq!((turn.max_steps, turn.max_context), (1, 7));
        assert_eq!(turn.org.as_deref(), Some("o"));
        assert!(turn.allow_dangerous_workspace);
        assert!(!turn.demo && !turn.json && turn.workspace.is_none());
    }
}
