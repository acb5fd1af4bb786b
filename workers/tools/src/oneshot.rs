//! One command under the tools confinement, without a supervisor or a worker: what
//! `hanzo-dev sandbox -- CMD ARGS…` runs, with the same environment allow-list and limits as the
//! `bash` tool. Nothing is re-executed, and the calling process itself stays unconfined, so that
//! it can remove the command's private directory afterwards (Landlock would refuse that: the
//! directory sits in the host's `/tmp`):
//!
//! - tier A: the command's process confines itself between `fork` and `exec` (Landlock, seccomp;
//!   the caller is single-threaded, so the child may allocate), and the caller waits for it;
//! - tier B: the caller enters the namespaces (`namespaces::enter` forks pid 1, which forks pid
//!   2); pid 2 confines itself and *becomes* the command (`exec`, no further fork), and the
//!   original process waits for pid 1, then removes the private directory.
//!
//! Confining costs a Landlock ruleset and a few seccomp programs.

use crate::exec::ExecConfig;
use crate::limits::Limits;
use hanzo_ipc::attest::LandlockStatus;
use hanzo_ipc::Role;
use hanzo_policy::isolation::{IsolationMode, Tier};
use hanzo_policy::profile::{profile_for, FsAccess, PathGrant, ProfileContext, SandboxProfile};
use hanzo_sandbox::namespaces::{self, NamespaceError, Side, TierB};
use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Command;

pub use hanzo_policy::profile::COMMAND_DEVICES;

#[derive(Debug, thiserror::Error)]
pub enum OneShotError {
    #[error("nothing to run: give a command after `--`")]
    NoCommand,
    #[error("workspace {path}: {source}")]
    Workspace {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--allow-write/--allow-read {path}: {source}")]
    Grant {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot create the private directory: {0}")]
    RunDir(#[source] std::io::Error),
    #[error("cannot set resource limits: {0}")]
    Limits(#[from] nix::Error),
    #[error("cannot confine: {0}")]
    Confine(#[from] hanzo_sandbox::confine::ConfineError),
    #[error(
        "the sandbox could not be fully applied ({0}); refusing to run the command \
         unconfined. `hanzo-dev doctor` says what the kernel lacks"
    )]
    NotConfined(String),
    #[error("cannot enter tier B: {0}")]
    Namespaces(#[source] hanzo_sandbox::namespaces::NamespaceError),
    #[error(transparent)]
    NoSocket(#[from] crate::nosocket::NoSocketError),
    #[error("cannot run {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
}

/// The variable that tells a command which tier it runs under (`A` or `B`).
pub const TIER_ENV: &str = "HANZO_SANDBOX_TIER";

/// What to run and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OneShot {
    pub workspace: PathBuf,
    /// Extra read-write roots (`--allow-write`).
    pub allow_write: Vec<PathBuf>,
    /// Extra read-only roots (`--allow-read`), e.g. a toolchain outside the system directories.
    pub allow_read: Vec<PathBuf>,
    /// Extra environment variables for the command (secrets are dropped).
    pub extra_env: Vec<(String, String)>,
    pub limits: Limits,
    pub isolation: IsolationMode,
    pub command: Vec<OsString>,
}

/// The tools role's profile for `ctx`, with the device nodes commands need and extra roots.
pub fn tools_profile(
    ctx: &ProfileContext,
    allow_write: &[PathBuf],
    allow_read: &[PathBuf],
) -> SandboxProfile {
    let mut p = profile_for(Role::Tools, ctx);
    for dev in COMMAND_DEVICES {
        if Path::new(dev).exists() && !p.fs.iter().any(|g| g.path == Path::new(dev)) {
            p.fs.push(PathGrant {
                path: PathBuf::from(dev),
                access: FsAccess::ReadWrite,
                why: "device nodes commands use",
            });
        }
    }
    for path in allow_write {
        p.fs.push(PathGrant {
            path: path.clone(),
            access: FsAccess::ReadWrite,
            why: "allowed with --allow-write",
        });
    }
    for path in allow_read {
        p.fs.push(PathGrant {
            path: path.clone(),
            access: FsAccess::ReadExec,
            why: "allowed with --allow-read",
        });
    }
    p
}

/// A private directory for one command (and its parent, opened), removed when dropped.
struct RunDir(PathBuf, Option<std::fs::File>);

impl RunDir {
    fn create() -> std::io::Result<RunDir> {
        let base = std::env::temp_dir();
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
                Ok(()) => return Ok(RunDir(p, std::fs::File::open(&base).ok())),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other(
            "no free name for the private directory",
        ))
    }
}

use std::os::unix::fs::DirBuilderExt;

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        // In tier B the original process shares the new mount namespace, where the directory is
        // a mount point (bound back over the hidden `/tmp`): `rmdir` by path says EBUSY. The
        // directory opened before the namespaces reaches the host's entry, which is not.
        if let (Some(base), Some(name)) = (&self.1, self.0.file_name()) {
            let _ = nix::unistd::unlinkat(base, name, nix::unistd::UnlinkatFlags::RemoveDir);
        }
    }
}

fn canon(p: &Path) -> Result<PathBuf, OneShotError> {
    p.canonicalize().map_err(|source| OneShotError::Grant {
        path: p.to_path_buf(),
        source,
    })
}

/// Run `spec.command` confined; returns its exit code (128 + signal number when killed).
///
/// Confines the *calling process* first, irreversibly: call it from a process that has nothing
/// else to do (the `sandbox` subcommand, a test's child). It must still be single-threaded.
pub fn run(spec: &OneShot) -> Result<i32, OneShotError> {
    let (program, args) = spec.command.split_first().ok_or(OneShotError::NoCommand)?;
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
    let run_dir = RunDir::create().map_err(OneShotError::RunDir)?;
    let ctx = ProfileContext {
        workspace: Some(workspace.clone()),
        config_dir: None,
        run_dir: Some(run_dir.0.clone()),
    };
    let profile = tools_profile(&ctx, &allow_write, &allow_read);
    spec.limits.apply_all_process_wide()?;
    let tier_b = match spec.isolation {
        IsolationMode::TierA => false,
        IsolationMode::Strict | IsolationMode::Auto => {
            let kept: Vec<PathBuf> = allow_write.iter().chain(&allow_read).cloned().collect();
            let mut cfg = TierB::for_workspace(&workspace, Some(&run_dir.0), &kept);
            // The waiting original process removes the private directory through this fd.
            cfg.parent_keeps = run_dir.1.as_ref().map(|f| f.as_raw_fd());
            match namespaces::enter(&cfg) {
                // The original process: the command ran in the child; clean up, pass its status.
                Ok(Side::Parent { status }) => return Ok(status),
                Ok(Side::Child) => true,
                // `unshare` failing changes nothing: auto goes on with tier A.
                Err(NamespaceError::Unshare(_)) if spec.isolation == IsolationMode::Auto => false,
                Err(e) => return Err(OneShotError::Namespaces(e)),
            }
        }
    };
    // In tier B this process and the command are inside the private network namespace (only
    // `lo`, brought up by `enter`): inet sockets are allowed there, every other family refused.
    let profile = if tier_b {
        SandboxProfile {
            sockets: hanzo_ipc::attest::SocketPolicy::Any,
            ..profile
        }
    } else {
        profile
    };

    let mut exec = ExecConfig::new(
        workspace.clone(),
        run_dir.0.clone(),
        spec.limits.command_rlimits(),
    );
    exec.extra_env = spec.extra_env.clone();
    exec.extra_env.push((
        TIER_ENV.to_string(),
        if tier_b { Tier::B } else { Tier::A }.to_string(),
    ));
    exec.prepare_dirs().map_err(OneShotError::RunDir)?;
    // The caller's directory when it is inside the workspace, else the workspace.
    let cwd = std::env::current_dir()
        .ok()
        .filter(|d| d.starts_with(&workspace))
        .unwrap_or(workspace);
    let mut cmd = Command::new(program);
    cmd.args(args).env_clear().envs(exec.env()).current_dir(cwd);
    // The limits are this process's own (set above) and `no_new_privs`, Landlock and seccomp are
    // applied to the command's own process; it stays in the terminal's foreground group so ^C
    // and job control work as usual. (There is no parent-death signal: like `env CMD`, the
    // command outlives a killed `hanzo-dev sandbox`; in tier B the pid namespace ends it.)
    let spawn_error = |source| OneShotError::Spawn {
        program: program.to_string_lossy().into_owned(),
        source,
    };
    if tier_b {
        // Pid 2 of the namespace: confine, then become the command. Pid 1 and the original
        // process wait; the original removes the private directory.
        confine(&profile, true)?;
        let e = cmd.exec();
        return Err(spawn_error(e));
    }
    // Tier A: the child confines itself. Why it failed, if it did, comes back through a pipe.
    let (mut why_read, why_write) = std::io::pipe().map_err(OneShotError::RunDir)?;
    let mut why_write = Some(why_write);
    hanzo_sandbox::spawn::in_child_of_single_threaded(&mut cmd, move || {
        confine(&profile, false).map_err(|e| {
            if let Some(w) = why_write.as_mut() {
                let _ = std::io::Write::write_all(w, e.to_string().as_bytes());
            }
            std::io::Error::from_raw_os_error(libc::EPERM)
        })
    })
    .map_err(spawn_error)?;
    let spawned = cmd.spawn();
    // Our copy of the pipe's write end lives in the hook: dropping the command closes it.
    drop(cmd);
    let status = match spawned {
        Ok(mut child) => child.wait().map_err(spawn_error)?,
        Err(e) => {
            let mut why = String::new();
            let _ = std::io::Read::read_to_string(&mut why_read, &mut why);
            return Err(if why.is_empty() {
                spawn_error(e)
            } else {
                OneShotError::NotConfined(why)
            });
        }
    };
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

/// Confine the calling process for its command: the tools profile (Landlock, seccomp, no
/// capabilities), refusing to go on when Landlock or seccomp did not take, and the socket
/// filter of its tier.
fn confine(profile: &SandboxProfile, tier_b: bool) -> Result<(), OneShotError> {
    let attestation = hanzo_sandbox::confine::confine_current_process(profile)?;
    // Tier A is Landlock plus seccomp: without Landlock the command would reach every file.
    if attestation.landlock.status == LandlockStatus::NotEnforced
        || attestation.landlock.status == LandlockStatus::Unsupported
        || !attestation.seccomp.installed
    {
        return Err(OneShotError::NotConfined(attestation.notes.join("; ")));
    }
    if tier_b {
        crate::nosocket::deny_non_inet_sockets()?;
    } else {
        crate::nosocket::deny_socket_creation()?;
    }
    Ok(())
}
