//! `hanzo-dev sandbox [--isolation auto|strict] [--workspace DIR] [--allow-write PATH]… -- CMD
//! ARGS…`: run one command under the tools worker's confinement and exit with its status.
//!
//! No supervisor and no worker are started: this process (still single-threaded — the dispatch
//! must not start a runtime first) confines itself with the tools profile and runs the command
//! as its child, so the cost over a plain fork+exec is a Landlock ruleset and a few seccomp
//! programs (see `hanzo_tools::oneshot`).

use crate::secrets::StartEnv;
use anyhow::Context;
use hanzo_tools::limits::Limits;
use hanzo_tools::oneshot::{self, OneShot};
use std::ffi::OsString;
use std::path::PathBuf;

/// Exit code when `--isolation strict` cannot be honoured (as `cli::exit::ISOLATION_UNAVAILABLE`).
pub const ISOLATION_UNAVAILABLE: i32 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Isolation {
    /// The best tier this machine offers (tier A at least).
    Auto,
    /// Tier B (namespaces) or nothing: fail closed when it is unavailable.
    Strict,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// How much isolation to insist on.
    #[arg(long, value_enum, default_value_t = Isolation::Auto)]
    pub isolation: Isolation,
    /// The workspace the command may write (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Another directory the command may write (repeatable).
    #[arg(long = "allow-write", value_name = "PATH")]
    pub allow_write: Vec<PathBuf>,
    /// Another directory the command may read and execute from, e.g. a toolchain outside the
    /// system directories (repeatable).
    #[arg(long = "allow-read", value_name = "PATH")]
    pub allow_read: Vec<PathBuf>,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// Whether `isolation` can be honoured. `auto` needs no probe (the one-shot run itself refuses
/// to go on when Landlock or seccomp could not be applied); `strict` needs tier B, which
/// `hanzo-dev sandbox` does not set up in this build, so it fails closed with advice either way.
pub fn check_isolation(
    isolation: Isolation,
    kernel: impl FnOnce() -> hanzo_sandbox::doctor::KernelReport,
) -> Result<(), String> {
    match isolation {
        Isolation::Auto => Ok(()),
        Isolation::Strict => Err(match kernel().tier_b() {
            Ok(()) => "--isolation strict: this machine supports tier B (namespaces), but this \
                       build of `hanzo-dev sandbox` runs commands under tier A (Landlock, seccomp, \
                       no capabilities) only; use --isolation auto"
                .to_string(),
            Err(why) => format!(
                "--isolation strict needs tier B, which is unavailable: {why}. Run \
                 `hanzo-dev doctor` for details, or use --isolation auto (tier A)."
            ),
        }),
    }
}

/// The one-shot run the arguments describe, with the command's extra environment taken from
/// nothing: the command gets the allow-listed variables only.
pub fn one_shot(args: &Args, env: &StartEnv) -> anyhow::Result<OneShot> {
    let workspace = match &args.workspace {
        Some(w) => w.clone(),
        None => std::env::current_dir().context("cannot determine the current directory")?,
    };
    let _ = env;
    Ok(OneShot {
        workspace,
        allow_write: args.allow_write.clone(),
        allow_read: args.allow_read.clone(),
        extra_env: Vec::new(),
        limits: Limits::default(),
        command: args.command.clone(),
    })
}

/// Run the command; returns its exit code (128 + signal when it was killed).
pub fn run(args: &Args, env: StartEnv) -> anyhow::Result<i32> {
    if let Err(why) = check_isolation(args.isolation, hanzo_sandbox::doctor::probe_kernel) {
        eprintln!("hanzo-dev sandbox: {why}");
        return Ok(ISOLATION_UNAVAILABLE);
    }
    let spec = one_shot(args, &env)?;
    Ok(oneshot::run(&spec)?)
}
