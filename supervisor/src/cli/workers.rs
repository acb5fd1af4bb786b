//! `hanzo-dev workers`: start every worker, print each one's pid and attested confinement, and keep
//! them running until standard input closes or the process is interrupted. A diagnostic for
//! watching the process tree (`ps`, `/proc`) and for tests that kill the supervisor.

use super::exit;
use crate::secrets::StartEnv;
use crate::startup::supervisor_config;
use crate::tree::Supervisor;
use serde_json::json;
use std::path::PathBuf;
use tokio::io::AsyncReadExt;

/// What `hanzo-dev workers` takes.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// One JSON object per worker, then `{"ready": true}`.
    #[arg(long)]
    pub json: bool,
    /// The workspace to start the workers for (default: the current directory).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
}

/// Runs `hanzo-dev workers`: starts every worker, prints each one's pid and attestation, and
/// keeps them running until stdin closes; returns the exit code.
pub async fn run(args: &Args, env: StartEnv) -> anyhow::Result<i32> {
    let kernel = hanzo_sandbox::doctor::probe_kernel();
    let (cfg, _run_dir) = supervisor_config(args.workspace.clone(), &env, kernel.landlock_abi)?;
    let sup = Supervisor::start(cfg).await?;
    let infos = match sup.wait_ready().await {
        Ok(i) => i,
        Err(e) => {
            eprintln!("error: {e}");
            sup.shutdown().await;
            return Ok(exit::FAILED);
        }
    };
    for info in &infos {
        if args.json {
            println!(
                "{}",
                json!({"role": info.role.as_str(), "pid": info.pid, "attestation": info.attestation})
            );
        } else {
            println!("{:<7} pid {}", info.role, info.pid);
        }
    }
    if args.json {
        println!(
            "{}",
            json!({"ready": true, "supervisor_pid": std::process::id()})
        );
    } else {
        println!("all workers ready; close standard input (Ctrl-D) or press Ctrl-C to stop");
    }
    let mut stdin = tokio::io::stdin();
    let mut buf = [0u8; 256];
    tokio::select! {
        _ = async { while matches!(stdin.read(&mut buf).await, Ok(n) if n > 0) {} } => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    sup.shutdown().await;
    Ok(exit::OK)
}
