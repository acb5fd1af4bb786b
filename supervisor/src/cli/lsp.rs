//! `hanzo-dev lsp check [PATH…] [--json]`: start the lsp worker alone (sandboxed, as in a run),
//! have the right language servers check the files, print their diagnostics, and exit 1 when
//! there are errors (2 when a path could not be checked) — useful in CI on its own.

use super::exit;
use crate::secrets::StartEnv;
use crate::startup::supervisor_config;
use crate::tree::Supervisor;
use anyhow::Context;
use hanzo_ipc::roles::lsp::{self, Response};
use hanzo_ipc::Role;
use hanzo_policy::settings::{load, CliOverrides, SettingsSources};
use std::path::PathBuf;
use std::time::Duration;

/// What `hanzo-dev lsp` takes.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Which `lsp` command to run.
    #[command(subcommand)]
    pub command: LspCommand,
}

/// The `lsp` commands.
#[derive(Debug, clap::Subcommand)]
pub enum LspCommand {
    /// Check files or directories (default: the whole workspace) with their language servers;
    /// exit 1 when there are errors.
    Check(CheckArgs),
}

/// What `hanzo-dev lsp check` takes.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// Files or directories, relative to the workspace; none checks the whole workspace.
    pub paths: Vec<String>,
    /// Print the report as JSON (`files`, `failures`, `left_out`).
    #[arg(long)]
    pub json: bool,
    /// The workspace (default: the current directory).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
}

/// How long the whole check may take (servers index the project first).
const CHECK_DEADLINE: Duration = Duration::from_secs(600);

/// Runs `hanzo-dev lsp …`; returns the exit code (1 when a file has errors).
pub async fn run(args: &Args, env: StartEnv) -> anyhow::Result<i32> {
    match &args.command {
        LspCommand::Check(a) => check(a, env).await,
    }
}

async fn check(args: &CheckArgs, env: StartEnv) -> anyhow::Result<i32> {
    let workspace = match &args.workspace {
        Some(w) => w.clone(),
        None => std::env::current_dir().context("cannot determine the current directory")?,
    };
    let workspace = workspace
        .canonicalize()
        .with_context(|| format!("workspace {}", workspace.display()))?;
    let src = SettingsSources::resolve(
        &workspace,
        env.vars.iter().cloned().collect(),
        CliOverrides::default(),
    );
    let loaded = load(&src).map_err(|e| exit::usage(e.to_string()))?;
    for w in loaded.warnings() {
        eprintln!("warning: {w}");
    }
    let servers_json =
        serde_json::to_string(&loaded.merged.config.lsp_servers).context("lsp_servers")?;
    let kernel = hanzo_sandbox::doctor::probe_kernel();
    let (mut cfg, _run_dir) = supervisor_config(Some(workspace), &env, kernel.landlock_abi)?;
    cfg.roles = Some(vec![Role::Lsp]);
    let servers_json = crate::agent::lsp::prepare_servers(&mut cfg.ctx, &servers_json, &env);
    let sup = Supervisor::start(cfg).await?;
    let result = async {
        sup.wait_ready()
            .await
            .map_err(|e| exit::failed(format!("the lsp worker did not start: {e}")))?;
        match sup.lsp.call(lsp::Request::Configure { servers_json }).await {
            Ok(Response::Done) => {}
            Ok(other) => return Err(exit::failed(format!("unexpected reply: {other:?}"))),
            Err(e) => return Err(exit::failed(e.to_string())),
        }
        let reply = sup
            .lsp
            .call_within(
                lsp::Request::Check {
                    paths: args.paths.clone(),
                },
                CHECK_DEADLINE,
            )
            .await;
        match reply {
            Ok(Response::Check(report)) => Ok(report),
            Ok(Response::Failed(f)) => Err(exit::failed(f.message)),
            Ok(other) => Err(exit::failed(format!("unexpected reply: {other:?}"))),
            Err(e) => Err(exit::failed(format!("the check failed: {e}"))),
        }
    }
    .await;
    sup.shutdown().await;
    let report = result?;
    if args.json {
        println!("{}", serde_json::to_string(&report).context("report")?);
    } else {
        // Paths and messages come from servers and the filesystem: the text reaches the
        // terminal without their control characters (line breaks kept).
        let text = hanzo_lsp::check::to_text(&report);
        let text = crate::term::sanitize_for_terminal(&text);
        print!("{text}");
        if !text.ends_with('\n') {
            println!();
        }
    }
    Ok(hanzo_lsp::check::exit_code(&report))
}
