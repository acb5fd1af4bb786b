//! The command line. Each subcommand lives in its own module; this one parses and dispatches.

pub mod acp;
pub mod agents;
pub mod ask;
pub mod auth;
pub mod bridge;
pub mod chat;
pub mod completions;
pub mod config;
pub mod doctor;
pub mod exit;
mod host;
pub mod login;
pub mod lsp;
pub mod mcp;
pub mod mcp_conformance;
pub mod mcp_login;
pub mod provider;
pub mod run;
pub mod runs;
pub mod sandbox;
pub mod serve;
pub mod store;
pub mod trust;
pub mod vectors;
pub mod view;
pub mod workers;

use crate::secrets::StartEnv;
use clap::builder::TypedValueParser as _;
use clap::{Args, Parser, Subcommand, ValueEnum};
use hanzo_policy::isolation::IsolationMode;

/// The whole command line.
#[derive(Debug, Parser)]
#[command(
    name = "hanzo-dev",
    version,
    long_version = LONG_VERSION,
    about = "A hardened runtime for AI coding agents: every tool call under policy and OS isolation, every decision on record."
)]
pub struct Cli {
    /// The options every command takes.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// None: `chat` on a terminal, the help otherwise.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Options every command takes (logging).
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Log format on stderr: `text`, or `json` (one object per line).
    // The values' own docs would switch every command's `--help` to the long layout; the
    // sentence above names them instead.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t = LogFormat::Text,
        hide_possible_values = true
    )]
    pub log_format: LogFormat,
    /// More logging (-v info, -vv debug). `RUST_LOG` overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

/// How log lines on stderr are written.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines, coloured only on a terminal and never with `NO_COLOR`.
    Text,
    /// One JSON object per line, with the fields of the spans it happened in.
    Json,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run an agent on a task, under policy and isolation, and keep the run (`--demo` for the
    /// offline demo).
    Run(run::Args),
    /// An interactive session with an agent (the default on a terminal): streaming replies,
    /// tool calls and approvals on screen, slash commands; each message a run of the session.
    Chat(chat::Args),
    /// Create, list, show and delete agent definitions.
    Agents(agents::Args),
    /// List, show and export recorded runs.
    Runs(runs::Args),
    /// Report what this machine's kernel offers, start every worker, and show each one's
    /// attested confinement, checked from inside with probes.
    Doctor(doctor::Args),
    /// One model turn through the real broker and model workers (no tools); `--record` writes a
    /// cassette, `--replay` plays one offline.
    Ask(ask::Args),
    /// Run one command under the tools sandbox (tier B when available) and exit with its status.
    Sandbox(sandbox::Args),
    /// Run test-vector files against this build.
    Vectors(vectors::Args),
    /// Show the merged configuration.
    Config(config::Args),
    /// Start every worker, print its pid and attestation, keep them running until stdin closes.
    Workers(workers::Args),
    /// Trust (or revoke) this workspace's hooks, MCP server commands and allow rules.
    Trust(trust::Args),
    /// Log in with OAuth (browser and loopback redirect, or `--device`); the tokens stay in the
    /// broker and `credentials.json`.
    Login(login::LoginArgs),
    /// Remove a provider's stored credential.
    Logout(login::LogoutArgs),
    /// Credentials the broker holds (`auth status`), never their values.
    Auth(auth::Args),
    /// Print a shell completion script (bash, zsh or fish) generated from this command line.
    Completions(completions::CompletionsArgs),
    /// Print the man page, or write one page per subcommand with `--dir`.
    Man(completions::ManArgs),
    /// The configured MCP servers, their tools, and one call through the policy.
    Mcp(mcp::Args),
    /// Language servers outside a run: `lsp check [PATH…] [--json]` prints diagnostics and exits
    /// 1 when there are errors.
    Lsp(lsp::Args),
    /// The local agents API over a unix socket (or a loopback port), and its bearer tokens
    /// (`serve token create --org ORG`).
    Serve(serve::Args),
    /// The Agent Client Protocol over stdio, for editors (Zed, JetBrains IDEs, Neovim): each
    /// session a store session in its cwd, on the same workers, policy and sandbox as `run`.
    Acp(acp::Args),
    /// The agents API as JSON-RPC over a WebSocket for browser pages (the DevBridge): Origin
    /// allow-list, JWT (or `serve` token) in the subprotocol, run events streamed back.
    Bridge(bridge::Args),
}

/// `hanzo-dev --version`: the version, the commit and date it was built from, the target, and
/// the sandbox tiers this build can apply (`doctor` says which this machine offers).
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\ncommit: ",
    env!("HANZO_BUILD_COMMIT"),
    "\nbuild date: ",
    env!("HANZO_BUILD_DATE"),
    "\ntarget: ",
    env!("HANZO_BUILD_TARGET"),
    "\nsandbox tiers: ",
    env!("HANZO_BUILD_TIERS"),
);

/// The value parser of every `--isolation` flag: the modes of [`IsolationMode`], with their help.
pub fn isolation_parser() -> impl clap::builder::TypedValueParser<Value = IsolationMode> {
    let values = IsolationMode::ALL
        .map(|m| clap::builder::PossibleValue::new(m.as_str()).help(m.describe()));
    clap::builder::PossibleValuesParser::new(values)
        .map(|s| IsolationMode::parse(&s).expect("clap admits only the listed modes"))
}

/// Logging to stderr, and trace export when the start environment `vars` (the whole environment
/// as it was, before [`crate::secrets::scrub_own_environment`]) asks for it.
pub fn init_logging(global: &GlobalArgs, vars: &[(String, String)]) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;
    let default = match global.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colour only on a terminal, and never with NO_COLOR (https://no-color.org).
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    let fmt = match global.log_format {
        LogFormat::Text => fmt.with_filter(filter).boxed(),
        LogFormat::Json => fmt.json().with_filter(filter).boxed(),
    };
    // Trace export keeps the `agent.*` spans whatever the log level (its own filter).
    let otlp = match crate::otlp::layer_from_env(|k| {
        vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }) {
        Ok(layer) => layer,
        Err(e) => {
            eprintln!("warning: trace export is off: {e}");
            None
        }
    };
    let otlp = otlp.map(|l| {
        l.with_filter(tracing_subscriber::filter::filter_fn(|m| {
            m.is_span() && crate::otlp::layer::exported(m.name())
        }))
    });
    tracing_subscriber::registry().with(fmt).with(otlp).init();
}

/// Run a parsed command line; returns the exit code.
pub fn run(cli: Cli, env: StartEnv) -> anyhow::Result<i32> {
    let Some(command) = cli.command else {
        use std::io::IsTerminal as _;
        if std::io::stdin().is_terminal() && std::io::stdout().is_terminal() {
            return runtime()?.block_on(chat::run(&chat::Args::default_for_terminal(), env));
        }
        use clap::CommandFactory as _;
        let _ = Cli::command().print_help();
        return Ok(exit::USAGE);
    };
    match command {
        Command::Chat(args) => runtime()?.block_on(chat::run(&args, env)),
        Command::Vectors(args) => vectors::run(&args),
        Command::Agents(args) => agents::run(&args, &env),
        Command::Runs(args) => runs::run(&args, &env),
        Command::Run(args) => runtime()?.block_on(run::run(&args, env)),
        Command::Mcp(args) => runtime()?.block_on(mcp::run(&args, env)),
        // Confines this very process, so it must run before any runtime (thread) exists.
        Command::Sandbox(args) => sandbox::run(&args, env),
        Command::Config(args) => config::run_with_env(&args, &env.vars, Default::default()),
        Command::Trust(args) => trust::run(&args),
        Command::Completions(args) => completions::run_completions(&args),
        Command::Man(args) => completions::run_man(&args),
        Command::Doctor(args) => runtime()?.block_on(doctor::run(&args, env)),
        Command::Workers(args) => runtime()?.block_on(workers::run(&args, env)),
        Command::Ask(args) => runtime()?.block_on(ask::run(&args, env)),
        Command::Login(args) => runtime()?.block_on(login::login(&args, env)),
        Command::Logout(args) => runtime()?.block_on(login::logout(&args, env)),
        Command::Auth(args) => runtime()?.block_on(auth::run(&args, env)),
        Command::Lsp(args) => runtime()?.block_on(lsp::run(&args, env)),
        Command::Serve(args) => serve::run(&args, env),
        Command::Acp(args) => runtime()?.block_on(acp::run(&args, env)),
        Command::Bridge(args) => bridge::run(&args, env),
    }
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}
