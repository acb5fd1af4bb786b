//! Turning the command line and environment into a [`SupervisorConfig`].

use crate::secrets::StartEnv;
use crate::tree::SupervisorConfig;
use crate::worker::RestartPolicy;
use anyhow::Context;
#[cfg(feature = "test-support")]
use hanzo_ipc::Role;
use hanzo_policy::profile::ProfileContext;
#[cfg(feature = "test-support")]
use hanzo_worker::Fault;
#[cfg(feature = "test-support")]
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Names a test may set to inject worker faults: `HANZO_DEV_TEST_FAULT=tools:crash-at-start,…`.
/// A fault can only make a worker misbehave; it never weakens confinement. Only builds with the
/// `test-support` feature read it; a release build has no fault injection at all.
#[cfg(feature = "test-support")]
pub const FAULT_ENV: &str = "HANZO_DEV_TEST_FAULT";

/// Run directories are `{tmp}/hanzo-run-{pid}-XXXXXX`: the pid lets a later start remove the
/// ones a supervisor killed with `-9` could not.
pub const RUN_DIR_PREFIX: &str = "hanzo-run-";

/// Remove the run directories under `tmp` of supervisors that are gone: ours (same owner),
/// named with a pid that no longer exists. A directory whose pid is alive — another
/// `hanzo-dev`, or a reused pid — is left alone. Links are never followed.
pub fn sweep_stale_run_dirs(tmp: &Path) -> usize {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return 0;
    };
    let me = std::fs::metadata("/proc/self").map(|m| m.uid()).ok();
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(RUN_DIR_PREFIX))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(p, _)| p.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(md) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        if !md.is_dir() || Some(md.uid()) != me || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if std::fs::remove_dir_all(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// The run's private directory (removed on drop).
pub struct RunDir(tempfile::TempDir);

impl RunDir {
    /// Where the directory is; it exists until the `RunDir` is dropped.
    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

fn lookup<'a>(env: &'a StartEnv, name: &str) -> Option<&'a str> {
    env.vars
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// `$XDG_CONFIG_HOME/hanzo`, else `$HOME/.config/hanzo`.
pub fn config_dir(env: &StartEnv) -> Option<PathBuf> {
    // The XDG rule: a relative value is ignored.
    if let Some(x) = lookup(env, "XDG_CONFIG_HOME").filter(|v| Path::new(v).is_absolute()) {
        return Some(PathBuf::from(x).join("hanzo"));
    }
    lookup(env, "HOME").map(|h| PathBuf::from(h).join(".config").join("hanzo"))
}

/// The paths no sandbox may reach whatever the workspace is (`ProfileContext::hidden`):
/// hanzo's configuration directory (settings, credentials) and data directory (the run store,
/// the trust store), as this environment names them, canonical where they exist.
pub fn hidden_paths(env: &StartEnv) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = config_dir(env)
        .into_iter()
        .chain(crate::cli::store::data_dir(env).ok())
        .map(|p| p.canonicalize().unwrap_or(p))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Parse a [`FAULT_ENV`] value: `role:fault` pairs separated by commas.
#[cfg(feature = "test-support")]
pub fn parse_faults(spec: &str) -> anyhow::Result<HashMap<Role, Fault>> {
    let mut out = HashMap::new();
    for part in spec.split(',').filter(|p| !p.trim().is_empty()) {
        let (role, fault) = part
            .split_once(':')
            .with_context(|| format!("{FAULT_ENV}: expected role:fault, got {part:?}"))?;
        let role = Role::parse(role.trim())
            .with_context(|| format!("{FAULT_ENV}: unknown role {role:?}"))?;
        let fault = Fault::parse(fault.trim())
            .with_context(|| format!("{FAULT_ENV}: unknown fault {fault:?}"))?;
        out.insert(role, fault);
    }
    Ok(out)
}

/// Build the supervisor's configuration for a workspace.
pub fn supervisor_config(
    workspace: Option<PathBuf>,
    env: &StartEnv,
    kernel_landlock_abi: u32,
) -> anyhow::Result<(SupervisorConfig, RunDir)> {
    let workspace = match workspace {
        Some(w) => w,
        None => std::env::current_dir().context("cannot determine the current directory")?,
    };
    let workspace = workspace
        .canonicalize()
        .with_context(|| format!("workspace {}", workspace.display()))?;
    sweep_stale_run_dirs(&std::env::temp_dir());
    let run_dir = tempfile::Builder::new()
        .prefix(&format!("{RUN_DIR_PREFIX}{}-", std::process::id()))
        .tempdir()
        .context("cannot create the run's private directory")?;
    #[cfg(feature = "test-support")]
    let faults = match lookup(env, FAULT_ENV) {
        Some(spec) => parse_faults(spec)?,
        None => HashMap::new(),
    };
    let cfg = SupervisorConfig {
        exe: std::env::current_exe().context("cannot find our own executable")?,
        ctx: ProfileContext {
            workspace: Some(workspace),
            config_dir: config_dir(env),
            run_dir: Some(run_dir.path().to_path_buf()),
            hidden: hidden_paths(env),
            allow_dangerous_workspace: false,
            toolchains: Vec::new(),
            mcp_workspace_write: false,
            mcp_extra_read: Vec::new(),
        },
        env: env.vars.clone(),
        secret_names: env.extra_secret_names(),
        restart: RestartPolicy::default(),
        #[cfg(feature = "test-support")]
        faults,
        kernel_landlock_abi,
        max_in_flight: 64,
        isolation: Default::default(),
        roles: None,
        egress_records: None,
        mcp_egress: false,
    };
    Ok((cfg, RunDir(run_dir)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_dirs_of_dead_supervisors_are_swept_and_live_ones_kept() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dead = tmp
            .path()
            .join(format!("{RUN_DIR_PREFIX}{}-abc", u32::MAX - 7));
        let live = tmp
            .path()
            .join(format!("{RUN_DIR_PREFIX}{}-def", std::process::id()));
        let other = tmp.path().join("hanzo-run-notapid");
        // The form without a pid (older builds) is never taken for one.
        let old = tmp.path().join("hanzo-run-424242");
        for d in [&dead, &live, &other, &old] {
            std::fs::create_dir_all(d.join("sub")).expect("mkdir");
        }
        // A link named like a run directory is not followed (nor removed through).
        let target = tmp.path().join("keep");
        std::fs::create_dir(&target).expect("mkdir");
        std::os::unix::fs::symlink(
            &target,
            tmp.path()
                .join(format!("{RUN_DIR_PREFIX}{}-lnk", u32::MAX - 8)),
        )
        .expect("link");
        assert_eq!(sweep_stale_run_dirs(tmp.path()), 1);
        assert!(!dead.exists());
        assert!(live.exists() && other.exists() && old.exists() && target.exists());
    }
}
