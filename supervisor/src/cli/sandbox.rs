//! `hanzo-dev sandbox [--isolation tier-a|auto|strict] [--workspace DIR] [--allow-write PATH]…
//! [--allow-read PATH]… [--allow-dangerous-workspace] [--network-allow HOST]… -- CMD ARGS…`: run
//! one command under the tools confinement and exit with its status.
//!
//! Network: the settings' `sandbox.network_allow` (user scope grants, workspace scopes narrow, an
//! untrusted workspace gets none) plus `--network-allow` entries. When the list is not empty the
//! command runs in tier B with the egress forwarder in its namespace and the proxy environment;
//! this process serves the proxy (`crate::egress::SandboxProxy`) and prints one line per
//! connection attempt on stderr (`hanzo-dev sandbox: egress: …`). Tier A fails closed (exit 3).
//!
//! No supervisor and no worker are started: this process (still single-threaded — the dispatch
//! must not start a runtime first) enters tier B's namespaces when it can (`auto`) or must
//! (`strict`) and runs the command through the same runner as the `bash` tool — its own session
//! (no controlling terminal; this process forwards ^C and the other terminal signals), every fd
//! above 2 closed, a cgroup, a keeper, its own confinement — so the cost over a plain fork+exec
//! is a Landlock ruleset, a few seccomp programs and, in tier B, the namespaces and their mounts
//! (see `hanzo_tools::oneshot`). As root it warns first: commands then run as uid 0.

use crate::secrets::StartEnv;
use anyhow::Context;
use hanzo_policy::isolation::IsolationMode;
use hanzo_policy::profile::CommandLimits;
use hanzo_tools::oneshot::{self, OneShot, OneShotError};
use std::ffi::OsString;
use std::path::PathBuf;

/// Exit code when `--isolation strict` cannot be honoured (as `cli::exit::ISOLATION_UNAVAILABLE`).
pub const ISOLATION_UNAVAILABLE: i32 = 3;

/// What `hanzo-dev sandbox` takes.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// How much isolation to insist on.
    #[arg(long, value_parser = super::isolation_parser(), default_value = "auto")]
    pub isolation: IsolationMode,
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
    /// Run even when the workspace contains hanzo's configuration or data directory (tier B
    /// still hides them from the command; tier A cannot, and refuses without this).
    #[arg(long = "allow-dangerous-workspace")]
    pub allow_dangerous_workspace: bool,
    /// Let the command reach HOST (`host`, `*.host`, `host:port`, an IP literal) through the
    /// egress proxy, for this invocation (repeatable; adds to `sandbox.network_allow`).
    #[arg(long = "network-allow", value_name = "HOST")]
    pub network_allow: Vec<String>,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// The message for `--isolation strict` when tier B could not be set up: what failed, why the
/// kernel refuses (from `doctor`'s probe), and what to do.
pub fn strict_unavailable(
    error: &dyn std::fmt::Display,
    kernel: impl FnOnce() -> hanzo_sandbox::doctor::KernelReport,
) -> String {
    let why = match kernel().tier_b() {
        Err(why) => why,
        Ok(()) => "the kernel offers user namespaces, but setting them up failed".to_string(),
    };
    format!(
        "--isolation strict needs tier B (namespaces), which is unavailable: {error} ({why}). \
         Run `hanzo-dev doctor` for details, or use --isolation auto to run under tier A \
         (Landlock, seccomp, no capabilities)."
    )
}

/// The one-shot run the arguments describe, with the command's extra environment taken from
/// nothing: the command gets the allow-listed variables only.
pub fn one_shot(args: &Args, env: &StartEnv) -> anyhow::Result<OneShot> {
    let workspace = match &args.workspace {
        Some(w) => w.clone(),
        None => std::env::current_dir().context("cannot determine the current directory")?,
    };
    Ok(OneShot {
        isolation: args.isolation,
        workspace,
        allow_write: args.allow_write.clone(),
        allow_read: args.allow_read.clone(),
        extra_env: Vec::new(),
        limits: CommandLimits::default(),
        hidden: crate::startup::hidden_paths(env),
        allow_dangerous_workspace: args.allow_dangerous_workspace,
        command: args.command.clone(),
    })
}

/// The warning `hanzo-dev sandbox` (and `run`, `doctor`) prints when commands will run as uid 0,
/// or `None`.
pub fn root_warning() -> Option<String> {
    hanzo_sandbox::doctor::root_warning()
}

/// Run the command; returns its exit code (128 + signal when it was killed). The command sees
/// the tier it got in `HANZO_SANDBOX_TIER` (`A` or `B`).
pub fn run(args: &Args, env: StartEnv) -> anyhow::Result<i32> {
    let spec = one_shot(args, &env)?;
    let allow = network_allow(args, &spec.workspace, &env)?;
    // The secrets kept for a broker are of no use here; nothing forked from now on copies them.
    drop(env);
    if let Some(w) = root_warning() {
        eprintln!("hanzo-dev sandbox: warning: {w}");
    }
    let egress = if allow.is_empty() {
        None
    } else {
        if let Err(e) = crate::egress::require_egress_tier(
            &allow,
            args.isolation,
            hanzo_sandbox::doctor::probe_kernel().tier_b(),
        ) {
            eprintln!("hanzo-dev sandbox: {e}");
            return Ok(ISOLATION_UNAVAILABLE);
        }
        let list = allow.clone();
        Some(oneshot::OneShotEgress {
            hosts: allow.entries(),
            serve: Box::new(move |control, forwarder| {
                let proxy = crate::egress::SandboxProxy::start(
                    &list,
                    control,
                    forwarder,
                    "hanzo-dev sandbox",
                )?;
                Ok(Box::new(proxy) as Box<dyn std::any::Any>)
            }),
        })
    };
    match oneshot::run_with_egress(&spec, egress) {
        Ok(code) => Ok(code),
        Err(OneShotError::Namespaces(e)) if args.isolation == IsolationMode::Strict => {
            eprintln!(
                "hanzo-dev sandbox: {}",
                strict_unavailable(&e, hanzo_sandbox::doctor::probe_kernel)
            );
            Ok(ISOLATION_UNAVAILABLE)
        }
        Err(e @ OneShotError::EgressNeedsTierB { .. }) => {
            eprintln!("hanzo-dev sandbox: {e}");
            Ok(ISOLATION_UNAVAILABLE)
        }
        Err(e) => Err(e.into()),
    }
}

/// The allow-list for this command: the settings of `workspace` (scopes combined; warnings on
/// stderr) plus `--network-allow`. An entry given on the command line that does not parse is an
/// error; one in a settings file is a warning.
fn network_allow(
    args: &Args,
    workspace: &std::path::Path,
    env: &StartEnv,
) -> anyhow::Result<hanzo_policy::network::AllowList> {
    use hanzo_policy::settings::load::{load, SettingsSources};
    use hanzo_policy::settings::CliOverrides;
    for entry in &args.network_allow {
        hanzo_policy::network::parse_entry(entry)
            .map_err(|e| anyhow::anyhow!("--network-allow {entry:?}: {e}"))?;
    }
    let src = SettingsSources::resolve(
        workspace,
        env.vars.iter().cloned().collect(),
        CliOverrides {
            network_allow: args.network_allow.clone(),
            ..CliOverrides::default()
        },
    );
    let loaded = load(&src).context("settings")?;
    for w in loaded.warnings() {
        if w.message.contains("network") {
            eprintln!("hanzo-dev sandbox: warning: {w}");
        }
    }
    Ok(loaded.merged.config.sandbox.allow_list())
}
