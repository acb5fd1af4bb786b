//! One command under the tools confinement, without a supervisor or a worker: what
//! `hanzo-dev sandbox -- CMD ARGS…` runs, through the same runner ([`crate::runner::command`]) as
//! the `bash` tool — a new session, every fd above 2 closed, the allow-listed environment, the
//! limits, a cgroup (processes and memory), and the command's own confinement. The calling
//! process itself stays unconfined (it removes the command's cgroup and private directory
//! afterwards) and forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT to the command, which has no
//! controlling terminal:
//!
//! - **tier B**: the caller enters the namespaces (`namespaces::enter_with` clones pid 1, which
//!   joins the command's cgroup and forks pid 2); pid 2 confines itself and *becomes* the
//!   command (`exec`, no further fork). When pid 1 ends, the pid namespace ends, and every
//!   process left in it with it. `/tmp` is a private, size-limited tmpfs and the host
//!   filesystem is read-only;
//! - **tier A**: the command runs under a keeper (its processes' own Landlock domain, which the
//!   keeper sweeps with `kill(-1)` when the command exits, so a double-forked daemon does not
//!   outlive it), in the cgroup; `HOME` and `TMPDIR` are in a private directory the caller
//!   removes, on a memory filesystem (`/dev/shm`) unless the caller has a `TMPDIR`.
//!
//! With `auto`, a failure to set up tier B (no user namespaces, a refused mount) falls back to
//! tier A with the reason on stderr; with `strict` it is an error.

use crate::exec::ExecConfig;
use crate::runner::{command, ChildStdio, Spawn};
use hanzo_ipc::Role;
use hanzo_policy::isolation::{IsolationMode, Tier};
use hanzo_policy::profile::CommandLimits;
use hanzo_policy::profile::{
    command_profile, CommandProfile, FsScope, NetAccess, ProfileContext, COMMAND_ETC,
};
use hanzo_sandbox::cgroup::Cgroup;
use hanzo_sandbox::keeper::Keeper;
use hanzo_sandbox::namespaces::{self, Side, TierB, WaitAs};
use hanzo_sandbox::spawn::CommandConfinement;
use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use hanzo_policy::profile::COMMAND_DEVICES;

/// Why `hanzo-dev sandbox` could not run its command (the command's own failure is its exit
/// status, not an error).
#[derive(Debug, thiserror::Error)]
pub enum OneShotError {
    /// No command was given.
    #[error("nothing to run: give a command after `--`")]
    NoCommand,
    /// The workspace cannot be opened or resolved.
    #[error("workspace {path}: {source}")]
    Workspace {
        /// The workspace path as given.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// An `--allow-read` or `--allow-write` path cannot be opened or resolved.
    #[error("--allow-write/--allow-read {path}: {source}")]
    Grant {
        /// The path as given.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The private directory (tier A's `HOME` and `TMPDIR`) could not be created.
    #[error("cannot create the private directory: {0}")]
    RunDir(#[source] std::io::Error),
    /// A resource limit could not be set on this process.
    #[error("cannot set resource limits: {0}")]
    Limits(#[from] nix::Error),
    /// The workspace holds one of hanzo's own directories, which a tier A grant cannot exclude.
    #[error(
        "the workspace {workspace} contains {hidden}, which tier A cannot keep out of the \
         command's reach (a Landlock grant cannot have a hole); use tier B (--isolation auto or \
         strict, where user namespaces work), choose another workspace, or pass \
         --allow-dangerous-workspace to run anyway"
    )]
    DangerousWorkspace {
        /// The workspace.
        workspace: PathBuf,
        /// The hidden directory inside it.
        hidden: String,
    },
    /// Landlock or seccomp could not be applied; the command is never run unconfined.
    #[error(
        "the sandbox could not be applied ({0}); refusing to run the command unconfined. \
         `hanzo-dev doctor` says what the kernel lacks"
    )]
    NotConfined(String),
    /// Tier B's namespaces could not be entered.
    #[error("cannot enter tier B: {0}")]
    Namespaces(#[source] hanzo_sandbox::namespaces::NamespaceError),
    /// Network was asked for, but tier B (where egress is served) is unavailable.
    #[error(
        "network was asked for ({hosts}), but commands get network only in tier B, through the \
         broker's proxy in its namespace, and tier B is unavailable here ({why}); refusing to run \
         the command. Run where user namespaces work (`hanzo-dev doctor` says what is missing), \
         or drop --network-allow / sandbox.network_allow"
    )]
    EgressNeedsTierB {
        /// The allow-list's entries, joined.
        hosts: String,
        /// Why tier B is unavailable.
        why: String,
    },
    /// The egress set-up failed (control socket, forwarder, proxy).
    #[error("egress: {0}")]
    Egress(String),
    /// The command could not be started.
    #[error("cannot run {program}: {source}")]
    Spawn {
        /// The program as given.
        program: String,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
}

/// The variable that tells a command which tier it runs under (`A` or `B`).
pub const TIER_ENV: &str = "HANZO_SANDBOX_TIER";

/// What to run and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OneShot {
    /// The directory the command works in and may write.
    pub workspace: PathBuf,
    /// Extra read-write roots (`--allow-write`).
    pub allow_write: Vec<PathBuf>,
    /// Extra read-only roots (`--allow-read`), e.g. a toolchain outside the system directories.
    pub allow_read: Vec<PathBuf>,
    /// Extra environment variables for the command (secrets are dropped).
    pub extra_env: Vec<(String, String)>,
    /// Resource limits for the command and its tree.
    pub limits: CommandLimits,
    /// The isolation the user asked for (`auto` picks tier B where it works).
    pub isolation: IsolationMode,
    /// hanzo's configuration and data directories: never reachable (see
    /// `ProfileContext::hidden`).
    pub hidden: Vec<PathBuf>,
    /// Run in tier A even when the workspace contains a hidden path.
    pub allow_dangerous_workspace: bool,
    /// The program and its arguments.
    pub command: Vec<OsString>,
}

/// The proxy side of a one-shot command's egress, run by the caller (outside the namespaces):
/// called once tier B is set up, with the proxy's end of the control pair (`SO_PASSCRED` already
/// set) and the forwarder's pid as the caller sees it. It starts serving on threads of its own
/// and returns a guard, dropped after the command ended (which ends the serving and flushes the
/// records).
pub type EgressServe =
    Box<dyn FnOnce(std::os::fd::OwnedFd, u32) -> Result<Box<dyn std::any::Any>, String>>;

/// Network for a one-shot command: the entries (for messages) and who serves the proxy.
pub struct OneShotEgress {
    /// The allow-list's entries (not empty).
    pub hosts: Vec<String>,
    /// Starts the proxy side once the namespaces exist.
    pub serve: EgressServe,
}

/// How long the caller looks for the forwarder pid 1 forks (bounds a broken set-up; never a
/// measurement).
const FORWARDER_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// A private directory for one command in tier A (`HOME`, `TMPDIR`), removed when dropped.
struct RunDir(PathBuf);

/// Where tier A's private directories go: the caller's `TMPDIR` when set; else `/dev/shm` when it
/// is a memory filesystem whose entries only their owner may remove (sticky, as `/tmp` is), as
/// tier B's private `/tmp` is a memory filesystem too; else `/tmp`. Creating and removing the
/// three directories costs about 20 µs on tmpfs against 350 µs on ext4 here, a tenth of what the
/// one-shot adds to a command. What the command writes there is charged to its memory cgroup.
fn private_base() -> PathBuf {
    if std::env::var_os("TMPDIR").is_some_and(|v| !v.is_empty()) {
        return std::env::temp_dir();
    }
    let shm = Path::new("/dev/shm");
    let on_tmpfs = nix::sys::statfs::statfs(shm)
        .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC);
    let sticky = std::fs::symlink_metadata(shm)
        .is_ok_and(|m| m.is_dir() && m.permissions().mode() & libc::S_ISVTX != 0);
    if on_tmpfs && sticky {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

impl RunDir {
    fn create() -> std::io::Result<RunDir> {
        let base = private_base();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        for attempt in 0..16u32 {
            let p = base.join(format!(
                "hanzo-sandbox-{}-{:x}",
                std::process::id(),
                nanos.wrapping_add(attempt)
            ));
            match std::fs::DirBuilder::new().mode(0o700).create(&p) {
                Ok(()) => return Ok(RunDir(p)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other(
            "no free name for the private directory",
        ))
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn canon(p: &Path) -> Result<PathBuf, OneShotError> {
    p.canonicalize().map_err(|source| OneShotError::Grant {
        path: p.to_path_buf(),
        source,
    })
}

/// The command's profile in `tier`: the workspace read-write, the extra trees, the device nodes,
/// and in tier B the namespace's loopback.
fn one_shot_profile(
    allow_write: &[PathBuf],
    allow_read: &[PathBuf],
    tier: Tier,
    egress: bool,
) -> CommandProfile {
    CommandProfile {
        fs: FsScope::WorkspaceRw,
        extra_read: allow_read.to_vec(),
        extra_write: allow_write.to_vec(),
        network: match (tier, egress) {
            (Tier::B, true) => NetAccess::Egress,
            (Tier::B, false) => NetAccess::Loopback,
            (Tier::A, _) => NetAccess::None,
        },
        devices: true,
    }
}

/// Run `spec.command` confined; returns its exit code (128 + signal number when killed).
///
/// Call it from a process that has nothing else to do (the `sandbox` subcommand, a test's
/// child): it must be single-threaded, and in tier B it forks into the namespaces.
pub fn run(spec: &OneShot) -> Result<i32, OneShotError> {
    run_with_egress(spec, None)
}

/// [`run`], with network for the command when `egress` is given: in tier B, pid 1 starts the
/// forwarder ([`crate::egress_forward::start`]) before it forks the command, the caller serves
/// the proxy (`egress.serve`) on the other end of the control pair, and the command gets the
/// proxy environment and inet sockets (its namespace has nothing but its own `lo`). Tier A has no
/// egress: with `egress` given, a run that would end up in tier A fails closed
/// ([`OneShotError::EgressNeedsTierB`]).
pub fn run_with_egress(spec: &OneShot, egress: Option<OneShotEgress>) -> Result<i32, OneShotError> {
    let (program, _) = spec.command.split_first().ok_or(OneShotError::NoCommand)?;
    // A ^C typed from now on is held and passed to the command once it runs.
    hanzo_sandbox::signals::hold();
    let workspace = spec
        .workspace
        .canonicalize()
        .map_err(|source| OneShotError::Workspace {
            path: spec.workspace.clone(),
            source,
        })?;
    let allow_write = spec
        .allow_write
        .iter()
        .map(|p| canon(p))
        .collect::<Result<Vec<_>, _>>()?;
    let allow_read = spec
        .allow_read
        .iter()
        .map(|p| canon(p))
        .collect::<Result<Vec<_>, _>>()?;
    let hidden: Vec<PathBuf> = spec
        .hidden
        .iter()
        .map(|h| h.canonicalize().unwrap_or_else(|_| h.clone()))
        .collect();
    let dangerous = ProfileContext {
        workspace: Some(workspace.clone()),
        hidden: hidden.clone(),
        ..ProfileContext::default()
    }
    .hidden_in_workspace();
    let refuse_tier_a = || -> Result<(), OneShotError> {
        if dangerous.is_empty() || spec.allow_dangerous_workspace {
            return Ok(());
        }
        Err(OneShotError::DangerousWorkspace {
            workspace: workspace.clone(),
            hidden: dangerous
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        })
    };
    // The tree's bounds: processes and memory. Absent where the host offers no cgroup (said
    // once, on stderr; the command still runs under its rlimits).
    let name = format!("hanzo-sandbox-{}-1", std::process::id());
    let cgroup = match Cgroup::create(&name, spec.limits.cgroup) {
        Ok(cg) => {
            for why in cg.absent() {
                eprintln!("hanzo-dev sandbox: {why}");
            }
            Some(cg)
        }
        Err(e) => {
            eprintln!("hanzo-dev sandbox: no process or memory bound for the command: {e}");
            None
        }
    };
    let cgroup_files = match &cgroup {
        Some(cg) => cg.join_files().map_err(OneShotError::RunDir)?,
        None => Vec::new(),
    };
    let join: Vec<i32> = cgroup_files.iter().map(|f| f.as_raw_fd()).collect();
    hanzo_sandbox::spawn::lower_process_limits(&spec.limits)?;

    if spec.isolation != IsolationMode::TierA {
        let mut keep_rw = vec![workspace.clone()];
        keep_rw.extend(allow_write.iter().cloned());
        let mut cfg = TierB::new(
            keep_rw,
            allow_read.clone(),
            hidden.clone(),
            crate::paths::protected_paths(&workspace),
            COMMAND_ETC,
            spec.limits.tmp_size,
        );
        cfg.join_cgroups = join.clone();
        cfg.forward_signals = true;
        // The control pair: the proxy's end passes credentials from the start, so that every
        // message the forwarder sends carries its pid.
        let pair = match &egress {
            Some(_) => {
                let (proxy_end, forwarder_end) = hanzo_sandbox::fdpass::seqpacket_pair(false)
                    .map_err(|e| OneShotError::Egress(format!("control socket: {e}")))?;
                hanzo_ipc::transport::pass_credentials(proxy_end.as_fd())
                    .map_err(|e| OneShotError::Egress(format!("control socket: {e}")))?;
                Some((proxy_end, forwarder_end))
            }
            None => None,
        };
        let proxy_raw = pair.as_ref().map(|(p, _)| p.as_raw_fd());
        let (proxy_end, forwarder_end) = match pair {
            Some((p, f)) => (Some(p), Some(f)),
            None => (None, None),
        };
        let mut port: Option<Result<u16, String>> = None;
        let entered = namespaces::enter_with(&cfg, |lo_up| {
            // Pid 1: the proxy's end is the caller's; this copy closes (the `OwnedFd` in this
            // process is forgotten below, never closed twice).
            if let Some(raw) = proxy_raw {
                let _ = nix::unistd::close(raw);
            }
            if let Some(control) = forwarder_end {
                port = Some(if lo_up {
                    crate::egress_forward::start(control).map_err(|e| e.to_string())
                } else {
                    Err("the namespace's lo did not come up".to_string())
                });
            }
        });
        match entered {
            Ok(Side::Parent(parent)) => {
                drop(cgroup_files);
                let guard = match (egress, proxy_end) {
                    (Some(egress), Some(proxy_end)) => {
                        match start_proxy(egress, proxy_end, parent.pid1()) {
                            Ok(g) => Some(g),
                            Err(e) => {
                                // The command must not run without the proxy it was promised.
                                let _ = nix::sys::signal::kill(
                                    nix::unistd::Pid::from_raw(parent.pid1()),
                                    nix::sys::signal::SIGKILL,
                                );
                                let _ = parent.wait(WaitAs {
                                    confine: false,
                                    forward_signals: false,
                                });
                                drop(cgroup);
                                return Err(e);
                            }
                        }
                    }
                    _ => None,
                };
                let code = parent.wait(WaitAs {
                    confine: false,
                    forward_signals: true,
                });
                drop(guard);
                drop(cgroup);
                return Ok(code);
            }
            Ok(Side::Child) => {
                std::mem::forget(proxy_end);
                // Pid 2: become the command; only an error comes back.
                let egress_port = match port {
                    None => None,
                    Some(Ok(p)) => Some(p),
                    Some(Err(e)) => return Err(OneShotError::Egress(e)),
                };
                let e = exec_in_tier_b(
                    spec,
                    &workspace,
                    &allow_write,
                    &allow_read,
                    program,
                    egress_port,
                );
                return Err(e);
            }
            Err(e) if spec.isolation == IsolationMode::Auto && e.can_fall_back() => {
                eprintln!("hanzo-dev sandbox: tier B is unavailable ({e}); running in tier A");
            }
            Err(e) => return Err(OneShotError::Namespaces(e)),
        }
    }

    // Tier A: no namespace to put the proxy endpoint in, so no egress at all.
    if let Some(egress) = &egress {
        return Err(OneShotError::EgressNeedsTierB {
            hosts: egress.hosts.join(", "),
            why: match spec.isolation {
                IsolationMode::TierA => "--isolation tier-a".to_string(),
                _ => hanzo_sandbox::doctor::probe_kernel()
                    .tier_b()
                    .err()
                    .unwrap_or_else(|| "setting up the namespaces failed".to_string()),
            },
        });
    }
    refuse_tier_a()?;
    let run_dir = RunDir::create().map_err(OneShotError::RunDir)?;
    let ctx = ProfileContext {
        workspace: Some(workspace.clone()),
        run_dir: Some(run_dir.0.clone()),
        ..ProfileContext::default()
    };
    let mut exec = ExecConfig::new(
        workspace.clone(),
        run_dir.0.clone(),
        spec.limits.command_rlimits(),
    );
    exec.tier = Tier::A;
    let cmd_profile = one_shot_profile(&allow_write, &allow_read, Tier::A, false);
    let spawn = one_shot_spawn(spec, &mut exec, &workspace, cmd_profile.clone())?;
    let profile = command_profile(Role::Tools, &cmd_profile, &ctx, Tier::A)
        .map_err(|e| OneShotError::NotConfined(e.to_string()))?;
    let confinement = Arc::new(
        CommandConfinement::full(&profile).map_err(|e| OneShotError::NotConfined(e.to_string()))?,
    );
    let (keeper, _unscoped) = Keeper::best();
    let (plan, switch) = keeper
        .plan()
        .map_err(|e| OneShotError::NotConfined(e.to_string()))?;
    let mut cmd = command(
        &spawn,
        ChildStdio {
            inherit: true,
            ..ChildStdio::default()
        },
        confinement,
        Some(plan),
        join,
        hanzo_sandbox::own_pid(),
    );
    let spawn_error = |source| OneShotError::Spawn {
        program: program.to_string_lossy().into_owned(),
        source,
    };
    let mut child = cmd.spawn().map_err(spawn_error)?;
    drop(cmd);
    drop(cgroup_files);
    // The keeper leads the command's process group; it ignores these, the command gets them.
    // `Child::id` is the `pid_t` fork returned, widened to a `u32`: `cast_signed` restores it.
    hanzo_sandbox::signals::forward(-child.id().cast_signed());
    let status = child.wait().map_err(spawn_error)?;
    drop(switch);
    // The private directory first: its pages (on a memory filesystem) are charged to the cgroup.
    drop(run_dir);
    drop(cgroup);
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

/// The command's spawn: its environment (the allow-list, the tier, the caller's extras), and
/// the caller's directory when it is inside the workspace, else the workspace.
fn one_shot_spawn(
    spec: &OneShot,
    exec: &mut ExecConfig,
    workspace: &Path,
    profile: CommandProfile,
) -> Result<Spawn, OneShotError> {
    let (program, args) = spec.command.split_first().ok_or(OneShotError::NoCommand)?;
    exec.extra_env.extend(spec.extra_env.iter().cloned());
    exec.extra_env
        .push((TIER_ENV.to_string(), exec.tier.to_string()));
    exec.prepare_dirs().map_err(OneShotError::RunDir)?;
    let cwd = std::env::current_dir()
        .ok()
        .filter(|d| d.starts_with(workspace))
        .unwrap_or_else(|| workspace.to_path_buf());
    Ok(Spawn {
        program: PathBuf::from(program),
        args: args.to_vec(),
        env: exec.env(),
        cwd,
        rlimits: exec.rlimits,
        profile,
    })
}

/// Pid 2 of tier B: confine and become the command (no keeper: the pid namespace ends with it).
fn exec_in_tier_b(
    spec: &OneShot,
    workspace: &Path,
    allow_write: &[PathBuf],
    allow_read: &[PathBuf],
    program: &OsString,
    egress_port: Option<u16>,
) -> OneShotError {
    let spawn_error = |source| OneShotError::Spawn {
        program: program.to_string_lossy().into_owned(),
        source,
    };
    // The private /tmp holds the run directory; nothing on the host to clean up.
    let run_dir = PathBuf::from("/tmp/.hanzo-run");
    let ctx = ProfileContext {
        workspace: Some(workspace.to_path_buf()),
        run_dir: Some(run_dir.clone()),
        ..ProfileContext::default()
    };
    let mut exec = ExecConfig::new(
        workspace.to_path_buf(),
        run_dir,
        spec.limits.command_rlimits(),
    );
    exec.tier = Tier::B;
    let cmd_profile = one_shot_profile(allow_write, allow_read, Tier::B, egress_port.is_some());
    if let Some(port) = egress_port {
        exec.extra_env = crate::egress_forward::proxy_env(port);
    }
    let spawn = match one_shot_spawn(spec, &mut exec, workspace, cmd_profile.clone()) {
        Ok(s) => s,
        Err(e) => return e,
    };
    let profile = match command_profile(Role::Tools, &cmd_profile, &ctx, Tier::B) {
        Ok(p) => p,
        Err(e) => return OneShotError::NotConfined(e.to_string()),
    };
    let confinement = match CommandConfinement::full(&profile) {
        Ok(c) => Arc::new(c),
        Err(e) => return OneShotError::NotConfined(e.to_string()),
    };
    let mut cmd = command(
        &spawn,
        ChildStdio {
            inherit: true,
            ..ChildStdio::default()
        },
        confinement,
        None,
        Vec::new(),
        nix::unistd::getppid().as_raw(),
    );
    spawn_error(cmd.exec())
}

/// In the caller, once tier B is set up: find the forwarder pid 1 forked (its first child, pid
/// [`crate::egress_forward::NS_PID`] inside), and hand the proxy's end to `egress.serve`.
fn start_proxy(
    egress: OneShotEgress,
    proxy_end: std::os::fd::OwnedFd,
    pid1: libc::pid_t,
) -> Result<Box<dyn std::any::Any>, OneShotError> {
    let parent = u32::try_from(pid1)
        .map_err(|_| OneShotError::Egress(format!("tier B's pid 1 is {pid1}, not a process id")))?;
    let deadline = std::time::Instant::now() + FORWARDER_PATIENCE;
    let forwarder = loop {
        if let Some(pid) =
            hanzo_sandbox::procfs::child_with_ns_pid(parent, crate::egress_forward::NS_PID)
        {
            break pid;
        }
        if std::time::Instant::now() >= deadline {
            return Err(OneShotError::Egress(
                "the egress forwarder did not start in tier B's namespace".to_string(),
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    };
    (egress.serve)(proxy_end, forwarder).map_err(OneShotError::Egress)
}
