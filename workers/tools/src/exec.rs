//! Command execution (`bash`): `/bin/sh -c COMMAND` in the workspace, through the runner
//! ([`crate::runner`]: a new session, fds closed, an environment built from an allow-list, the
//! profile's rlimits, a keeper, the command's own confinement — the workspace read-write and, in
//! tier B, the namespace's loopback), stdin closed, stdout and stderr combined into one pipe (so
//! their order is kept), a hard timeout, and output capped, keeping its head and its tail.
//!
//! Every process the command starts is killed at the timeout, when the request is cancelled (the
//! future is dropped), and after the command exits — also those that left its process group or
//! session: `run` returns only after the keeper has swept, i.e. after every process of the
//! command is gone.

use crate::runner::{Outcome, RunError, Runner, Spawn};
use hanzo_policy::isolation::Tier;
use hanzo_policy::profile::{is_secret_env, CommandProfile, NetAccess, Rlimits};
use std::path::PathBuf;
use std::time::Duration;

pub use crate::runner::{Capture, Exit};

/// How long a `bash` command may run when the call names no timeout: 120 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// The longest timeout a `bash` call may ask for: 600 s (longer requests are cut to it).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);
/// Combined output kept per command (head and tail halves).
pub const DEFAULT_OUTPUT_CAP: usize = 64 * 1024;

/// Whether this kernel gives commands a keeper that reaches every process they start (Landlock
/// signal scoping, ABI 6), or why not (then only their process group is killed).
pub fn keeper() -> Result<(), &'static str> {
    static SCOPED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    SCOPED
        .get_or_init(|| {
            hanzo_sandbox::keeper::Keeper::new()
                .map(drop)
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map(|_| ())
        .map_err(String::as_str)
}

/// The fixed part of every command's environment and profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecConfig {
    /// The shell commands run with (`/bin/sh -c`).
    pub shell: PathBuf,
    /// The command's working directory: the workspace.
    pub cwd: PathBuf,
    /// The run's private directory: `HOME` is `<run>/home`; in tier A `TMPDIR` is `<run>/tmp`
    /// (tier B's `/tmp` is private already).
    pub run_dir: PathBuf,
    /// The tier the commands run in (it decides their network and `TMPDIR`).
    pub tier: Tier,
    /// Extra variables from the configuration (never a secret: those are dropped).
    pub extra_env: Vec<(String, String)>,
    /// `PATH`, `LANG`, `TERM` as the worker received them (from the supervisor's allow-list).
    pub inherited: Vec<(String, String)>,
    /// Resource limits each command starts with.
    pub rlimits: Rlimits,
    /// Combined output kept per command, in bytes (head and tail halves; see
    /// [`DEFAULT_OUTPUT_CAP`]).
    pub output_cap: usize,
    /// The egress forwarder's port on tier B's loopback, when the run allows network: `bash`
    /// commands then get [`NetAccess::Egress`] and the proxy environment
    /// ([`crate::egress_forward::proxy_env`]). Hooks and the `git` tool never do.
    pub egress_port: Option<u16>,
}

/// Names taken from the worker's own environment when present.
pub const INHERITED_ENV: &[&str] = &["PATH", "LANG", "LC_ALL", "TERM", "TZ"];
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

impl ExecConfig {
    /// Commands in `cwd` with the private directory `run_dir`, in tier A, `/bin/sh`, the default
    /// output cap, no egress, and [`INHERITED_ENV`] taken from this process's environment.
    pub fn new(cwd: PathBuf, run_dir: PathBuf, rlimits: Rlimits) -> ExecConfig {
        let inherited = std::env::vars()
            .filter(|(k, _)| INHERITED_ENV.contains(&k.as_str()))
            .collect();
        ExecConfig {
            shell: PathBuf::from("/bin/sh"),
            cwd,
            run_dir,
            tier: Tier::A,
            extra_env: Vec::new(),
            inherited,
            rlimits,
            output_cap: DEFAULT_OUTPUT_CAP,
            egress_port: None,
        }
    }

    /// The commands' `HOME`: `<run_dir>/home`.
    pub fn home(&self) -> PathBuf {
        self.run_dir.join("home")
    }

    /// The commands' `TMPDIR`: `<run_dir>/tmp` in tier A, the private `/tmp` in tier B.
    pub fn tmp(&self) -> PathBuf {
        match self.tier {
            Tier::A => self.run_dir.join("tmp"),
            Tier::B => PathBuf::from("/tmp"),
        }
    }

    /// The complete environment of a command: nothing else reaches it.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = Vec::new();
        let mut set = |k: &str, v: String| {
            env.retain(|(name, _)| name != k);
            env.push((k.to_string(), v));
        };
        set("PATH", DEFAULT_PATH.to_string());
        set("LANG", "C.UTF-8".to_string());
        set("TERM", "dumb".to_string());
        for (k, v) in &self.inherited {
            if INHERITED_ENV.contains(&k.as_str()) {
                set(k, v.clone());
            }
        }
        set("HOME", self.home().display().to_string());
        set("TMPDIR", self.tmp().display().to_string());
        for (k, v) in &self.extra_env {
            if !is_secret_env(k, &[]) && k != "HOME" && k != "TMPDIR" {
                set(k, v.clone());
            }
        }
        env
    }

    /// Create `HOME` (and tier A's `TMPDIR`) inside the run directory.
    pub fn prepare_dirs(&self) -> std::io::Result<()> {
        std::fs::create_dir_all(self.home())?;
        std::fs::create_dir_all(self.tmp())
    }

    /// The spawn of `command` under this configuration.
    pub fn spawn(&self, command: &str) -> Spawn {
        let mut env = self.env();
        let mut profile = CommandProfile::bash(self.tier);
        if let (Some(port), Tier::B) = (self.egress_port, self.tier) {
            for (k, v) in crate::egress_forward::proxy_env(port) {
                env.retain(|(name, _)| *name != k);
                env.push((k, v));
            }
            profile.network = NetAccess::Egress;
        }
        Spawn::shell(&self.shell, command, env, &self.cwd, self.rlimits, profile)
    }
}

/// Run `command` under `cfg` through `runner`. `on_chunk` sees output as it arrives (for
/// streaming).
pub async fn run(
    runner: &Runner,
    cfg: &ExecConfig,
    command: &str,
    timeout: Duration,
    on_chunk: impl FnMut(&[u8]),
) -> Result<Outcome, RunError> {
    runner
        .run(cfg.spawn(command), timeout, cfg.output_cap, on_chunk)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_is_built_from_the_allow_list_only() {
        let mut cfg = ExecConfig::new(
            "/w".into(),
            "/r".into(),
            Rlimits {
                core: 0,
                nofile: 256,
                fsize: None,
            },
        );
        cfg.inherited = vec![
            ("PATH".into(), "/p".into()),
            ("SECRET_API_KEY".into(), "x".into()),
            ("HOME".into(), "/root".into()),
        ];
        cfg.extra_env = vec![
            ("CARGO_TERM_COLOR".into(), "never".into()),
            ("GITHUB_TOKEN".into(), "ghp".into()),
            ("HOME".into(), "/root".into()),
        ];
        let env = cfg.env();
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            ["LANG", "TERM", "PATH", "HOME", "TMPDIR", "CARGO_TERM_COLOR"]
        );
        assert!(env.contains(&("HOME".into(), "/r/home".into())));
        assert!(env.contains(&("TMPDIR".into(), "/r/tmp".into())));
        assert!(env.contains(&("PATH".into(), "/p".into())));
        cfg.tier = Tier::B;
        assert!(cfg.env().contains(&("TMPDIR".into(), "/tmp".into())));
    }

    #[test]
    fn only_bash_in_tier_b_gets_the_proxy_and_egress() {
        let rl = Rlimits {
            core: 0,
            nofile: 256,
            fsize: None,
        };
        let mut cfg = ExecConfig::new("/w".into(), "/r".into(), rl);
        cfg.egress_port = Some(4711);
        cfg.extra_env = vec![("HTTPS_PROXY".into(), "http://evil.example:1".into())];
        // Tier A has no namespace to put the forwarder in: no proxy, no network.
        let a = cfg.spawn("true");
        assert_eq!(a.profile.network, NetAccess::None);
        assert!(!a.env.iter().any(|(k, _)| k == "ALL_PROXY"));
        cfg.tier = Tier::B;
        let b = cfg.spawn("true");
        assert_eq!(b.profile.network, NetAccess::Egress);
        let get = |k: &str| {
            b.env
                .iter()
                .filter(|(n, _)| n == k)
                .map(|(_, v)| v.as_str())
                .collect::<Vec<_>>()
        };
        // The configured variable cannot redirect the proxy: ours replaces it.
        assert_eq!(get("HTTPS_PROXY"), ["http://127.0.0.1:4711"]);
        assert_eq!(get("all_proxy"), ["socks5h://127.0.0.1:4711"]);
        // The git tool and hooks build on `env()`, which never carries the proxy.
        assert!(!cfg.env().iter().any(|(k, _)| k == "http_proxy"));
        cfg.egress_port = None;
        assert_eq!(cfg.spawn("true").profile.network, NetAccess::Loopback);
    }
}
