//! `hanzo-dev doctor`: what the kernel offers, which sandbox tier is available (and why not the
//! other), then every worker started, attested and probed from the inside, with a round trip.

use super::exit;
use crate::secrets::StartEnv;
use crate::startup::supervisor_config;
use crate::tree::Supervisor;
use crate::worker::{WorkerHandle, WorkerInfo};
use hanzo_ipc::probe::{Probe, ProbeOutcome, SocketFamily, SocketKind};
use hanzo_ipc::roles::{CommonRequest, CommonResponse, HasCommon};
use hanzo_ipc::Role;
use hanzo_policy::profile::{profile_for, ProfileContext};
use hanzo_sandbox::doctor::KernelReport;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What `hanzo-dev doctor` takes.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
    /// The workspace to start the workers for (default: the current directory).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
}

/// One probe, what the profile says should happen, and what did.
struct ProbeCheck {
    name: String,
    expect_success: bool,
    outcome: Result<ProbeOutcome, String>,
}

impl ProbeCheck {
    fn ok(&self) -> bool {
        matches!(&self.outcome, Ok(o) if o.succeeded == self.expect_success)
    }
}

struct WorkerReport {
    info: Arc<WorkerInfo>,
    round_trip: Result<Duration, String>,
    probes: Vec<ProbeCheck>,
}

/// The probes that tell whether `role` is confined as its profile says, with the expected result.
fn probes_for(role: Role, ctx: &ProfileContext, home: Option<&Path>) -> Vec<(String, Probe, bool)> {
    let profile = profile_for(role, ctx);
    let mut out = vec![
        (
            "ptrace the supervisor".to_string(),
            Probe::PtraceAttach { pid: 0 },
            false,
        ),
        (
            "read the supervisor's memory".to_string(),
            Probe::ProcessVmRead { pid: 0 },
            false,
        ),
        (
            "create a user namespace".to_string(),
            Probe::UnshareUser,
            false,
        ),
        (
            "open an inet socket".to_string(),
            Probe::Socket {
                family: SocketFamily::Inet,
                kind: SocketKind::Stream,
            },
            profile.sockets == hanzo_ipc::attest::SocketPolicy::Any,
        ),
    ];
    if let Some(home) = home.filter(|h| h.is_dir()) {
        let granted = profile.fs.iter().any(|g| home.starts_with(&g.path));
        out.push((
            format!("list {}", home.display()),
            Probe::OpenRead {
                path: home.display().to_string(),
            },
            granted,
        ));
    }
    out
}

async fn check_worker<P: HasCommon>(
    handle: &WorkerHandle<P>,
    ctx: &ProfileContext,
    home: Option<&Path>,
) -> Result<WorkerReport, String> {
    let (_, info) = handle.ready().await.map_err(|e| e.to_string())?;
    let t = Instant::now();
    let status = handle.call(P::common_request(CommonRequest::Status)).await;
    let round_trip = match status.map(P::into_common_response) {
        Ok(Some(CommonResponse::Status(s))) if s.role == P::ROLE => Ok(t.elapsed()),
        Ok(other) => Err(format!("unexpected status reply {other:?}")),
        Err(e) => Err(e.to_string()),
    };
    let mut probes = Vec::new();
    for (name, probe, expect_success) in probes_for(P::ROLE, ctx, home) {
        let outcome = match handle
            .call(P::common_request(CommonRequest::Probe(probe)))
            .await
            .map(P::into_common_response)
        {
            Ok(Some(CommonResponse::Probe(o))) => Ok(o),
            Ok(other) => Err(format!("unexpected reply {other:?}")),
            Err(e) => Err(e.to_string()),
        };
        probes.push(ProbeCheck {
            name,
            expect_success,
            outcome,
        });
    }
    Ok(WorkerReport {
        info,
        round_trip,
        probes,
    })
}

/// Runs `hanzo-dev doctor`; returns the exit code (1 when a worker is not confined as its
/// profile says).
pub async fn run(args: &Args, env: StartEnv) -> anyhow::Result<i32> {
    let kernel = hanzo_sandbox::doctor::probe_kernel();
    let (cfg, _run_dir) = supervisor_config(args.workspace.clone(), &env, kernel.landlock_abi)?;
    let ctx = cfg.ctx.clone();
    let home = env
        .vars
        .iter()
        .find(|(k, _)| k == "HOME")
        .map(|(_, v)| PathBuf::from(v));
    let started = Instant::now();
    let sup = Supervisor::start(cfg).await?;
    let ready = sup.wait_ready().await;
    let cold_start = started.elapsed();
    let h = home.as_deref();
    // Every role of the table, in its order (a new role is checked without a line here).
    macro_rules! check_every_role {
        ($($(#[$doc:meta])* $variant:ident($name:literal, $module:ident, $proto:ident)),* $(,)?) => {
            vec![$((Role::$variant, check_worker(&sup.$module, &ctx, h).await)),*]
        };
    }
    let reports: Vec<(Role, Result<WorkerReport, String>)> =
        hanzo_ipc::with_roles!(check_every_role);
    sup.shutdown().await;
    let commands = CommandsReport::probe(&kernel);

    let all_ok = ready.is_ok()
        && kernel.tier_a().is_ok()
        && reports.iter().all(|(_, r)| {
            r.as_ref()
                .is_ok_and(|w| w.round_trip.is_ok() && w.probes.iter().all(ProbeCheck::ok))
        });
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json_report(
                &kernel, &commands, &reports, cold_start, all_ok
            ))?
        );
    } else {
        print_report(&kernel, &commands, &reports, cold_start, all_ok);
    }
    Ok(if all_ok { exit::OK } else { exit::FAILED })
}

fn errno_name(errno: Option<i32>) -> String {
    match errno {
        Some(libc::EPERM) => "EPERM".into(),
        Some(libc::EACCES) => "EACCES".into(),
        Some(libc::EAFNOSUPPORT) => "EAFNOSUPPORT".into(),
        Some(libc::ENOSYS) => "ENOSYS".into(),
        Some(libc::EINVAL) => "EINVAL".into(),
        Some(e) => format!("errno {e}"),
        None => "no errno".into(),
    }
}

fn tier_json(t: Result<(), String>) -> serde_json::Value {
    match t {
        Ok(()) => json!({"available": true}),
        Err(why) => json!({"available": false, "reason": why}),
    }
}

/// What doctor says about the commands the tools worker (and `hanzo-dev sandbox`) will run: as
/// which user, under which cgroup bounds, with which network per tier.
struct CommandsReport {
    root_warning: Option<String>,
    cgroup: hanzo_sandbox::cgroup::Support,
    egress: Vec<(&'static str, String)>,
}

impl CommandsReport {
    fn probe(kernel: &KernelReport) -> CommandsReport {
        let b = match kernel.tier_b() {
            Ok(()) => "a private loopback (`lo` of its own network namespace); no route out; \
                       with sandbox.network_allow or --network-allow, exactly the listed hosts \
                       through the egress proxy (`hanzo-dev sandbox`; not yet in `run`)"
                .to_string(),
            Err(why) => format!("tier B unavailable ({why})"),
        };
        CommandsReport {
            root_warning: hanzo_sandbox::doctor::root_warning(),
            cgroup: hanzo_sandbox::cgroup::probe(),
            egress: vec![
                (
                    "A",
                    "no sockets at all; no egress: a run or sandbox asking for network fails \
                     closed"
                        .to_string(),
                ),
                ("B", b),
            ],
        }
    }

    fn cgroup_version(&self) -> &'static str {
        match self.cgroup.version {
            Some(hanzo_sandbox::cgroup::Version::V1) => "v1",
            Some(hanzo_sandbox::cgroup::Version::V2) => "v2",
            None => "none",
        }
    }
}

fn json_report(
    kernel: &KernelReport,
    commands: &CommandsReport,
    reports: &[(Role, Result<WorkerReport, String>)],
    cold_start: Duration,
    ok: bool,
) -> serde_json::Value {
    let workers: Vec<_> = reports
        .iter()
        .map(|(role, r)| match r {
            Ok(w) => json!({
                "role": role.as_str(),
                "pid": w.info.pid,
                "generation": w.info.generation,
                "start_ms": w.info.start_time.as_secs_f64() * 1e3,
                "attestation": w.info.attestation,
                "pids_cgroup": w.info.pids_cgroup,
                "round_trip_us": w.round_trip.as_ref().ok().map(|d| d.as_secs_f64() * 1e6),
                "round_trip_error": w.round_trip.as_ref().err(),
                "probes": w.probes.iter().map(|p| json!({
                    "name": p.name,
                    "expected": if p.expect_success { "allowed" } else { "denied" },
                    "succeeded": p.outcome.as_ref().ok().map(|o| o.succeeded),
                    "errno": p.outcome.as_ref().ok().and_then(|o| o.errno),
                    "error": p.outcome.as_ref().err(),
                    "ok": p.ok(),
                })).collect::<Vec<_>>(),
            }),
            Err(e) => json!({"role": role.as_str(), "error": e}),
        })
        .collect();
    json!({
        "ok": ok,
        "kernel": kernel,
        "tiers": {
            "a": tier_json(kernel.tier_a()),
            "b": tier_json(kernel.tier_b()),
        },
        "best_available_tier": if kernel.tier_b().is_ok() { "b" } else if kernel.tier_a().is_ok() { "a" } else { "none" },
        "cold_start_ms": cold_start.as_secs_f64() * 1e3,
        "commands": {
            "root_warning": commands.root_warning,
            "cgroup": commands.cgroup,
            "network": commands.egress.iter().map(|(t, n)| json!({"tier": t, "network": n})).collect::<Vec<_>>(),
        },
        "workers": workers,
    })
}

fn mark(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "FAIL"
    }
}

fn print_report(
    kernel: &KernelReport,
    commands: &CommandsReport,
    reports: &[(Role, Result<WorkerReport, String>)],
    cold_start: Duration,
    ok: bool,
) {
    println!("kernel");
    println!(
        "  landlock         {}",
        if kernel.landlock_abi > 0 {
            format!("ABI {}", kernel.landlock_abi)
        } else {
            "not available".into()
        }
    );
    println!(
        "  seccomp          {}",
        if kernel.seccomp {
            "available"
        } else {
            "not available"
        }
    );
    println!(
        "  user namespaces  {}",
        match &kernel.user_namespaces {
            Ok(()) => "available".to_string(),
            Err(e) => format!("not available: {e}"),
        }
    );
    println!(
        "  container        {}",
        kernel.container.as_deref().unwrap_or("none detected")
    );
    println!("sandbox tiers");
    for (name, t) in [("A", kernel.tier_a()), ("B", kernel.tier_b())] {
        match t {
            Ok(()) => println!("  tier {name}  available"),
            Err(why) => println!("  tier {name}  unavailable: {why}"),
        }
    }
    println!("commands");
    if let Some(w) = &commands.root_warning {
        println!("  WARNING          {w}");
    }
    println!("  cgroup           {}", commands.cgroup_version());
    for (what, bound) in [
        ("pids", &commands.cgroup.pids),
        ("memory", &commands.cgroup.memory),
    ] {
        match bound {
            Ok(dir) => println!("    {what:<14} bounded under {}", dir.display()),
            Err(why) => println!("    {what:<14} no bound: {why}"),
        }
    }
    for (tier, net) in &commands.egress {
        println!("  network tier {tier}   {net}");
    }
    println!(
        "workers (started and attested in {:.1} ms)",
        cold_start.as_secs_f64() * 1e3
    );
    for (role, r) in reports {
        match r {
            Err(e) => println!("  {role:<7} FAIL: {e}"),
            Ok(w) => {
                let a = &w.info.attestation;
                println!(
                    "  {role:<7} pid {:<7} no_new_privs {}  seccomp {} (sockets: {:?})  capabilities {}  non-dumpable {}",
                    w.info.pid,
                    mark(a.no_new_privs),
                    mark(a.seccomp.installed),
                    a.seccomp.sockets,
                    if a.caps.all_empty() { "none" } else { "SOME LEFT" },
                    mark(a.non_dumpable),
                );
                println!(
                    "          landlock {:?}{}",
                    a.landlock.status,
                    if a.landlock.grants.is_empty() {
                        ": no filesystem".to_string()
                    } else {
                        format!(": {}", a.landlock.grants.join(", "))
                    }
                );
                if let Some(cg) = &w.info.pids_cgroup {
                    println!("          pids cgroup {}", cg.display());
                }
                if !a.namespaces.is_empty() {
                    println!("          namespaces {} (tier B)", a.namespaces.join(", "));
                }
                match &w.round_trip {
                    Ok(d) => println!(
                        "          round trip (64-byte echo) {:.0} µs",
                        d.as_secs_f64() * 1e6
                    ),
                    Err(e) => println!("          round trip FAIL: {e}"),
                }
                for p in &w.probes {
                    let got = match &p.outcome {
                        Ok(o) if o.succeeded => "allowed".to_string(),
                        Ok(o) => format!("denied ({})", errno_name(o.errno)),
                        Err(e) => format!("error: {e}"),
                    };
                    println!("          {:<4} {:<32} {got}", mark(p.ok()), p.name);
                }
            }
        }
    }
    if ok {
        println!("all workers confined as their roles require");
    } else {
        println!("PROBLEMS FOUND: see FAIL lines above");
    }
}
