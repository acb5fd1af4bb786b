//! The sandbox profile of every worker role, declared as data in one place so that two roles can be
//! compared side by side. `hanzo-sandbox` enforces these; it decides nothing itself.
//!
//! Every profile starts from the same restrictive base — no filesystem, unix sockets only, the
//! base syscall deny list, no namespace creation, core dumps off — and adds only what its role
//! needs.

use hanzo_ipc::attest::SocketPolicy;
use hanzo_ipc::Role;
use std::path::{Path, PathBuf};

/// Syscalls no worker (and nothing a worker runs) may make. Names as in `<asm/unistd_64.h>`.
///
/// Process inspection (`ptrace`, `process_vm_*`) would let a compromised worker read another
/// process's secrets; the rest change the kernel's view of the world (mounts, namespaces, modules,
/// BPF) or are large attack surfaces with no use here (io_uring, userfaultfd, keyrings).
pub const BASE_DENIED_SYSCALLS: &[&str] = &[
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "bpf",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "userfaultfd",
    "perf_event_open",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "keyctl",
    "add_key",
    "request_key",
    "open_by_handle_at",
    "name_to_handle_at",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "swapon",
    "swapoff",
    "reboot",
    "acct",
    "quotactl",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsAccess {
    /// Read files and list directories; execute files (a worker that runs programs needs it).
    ReadExec,
    /// Read, write, create, remove, rename within the tree.
    ReadWrite,
}

impl FsAccess {
    pub fn short(self) -> &'static str {
        match self {
            FsAccess::ReadExec => "ro",
            FsAccess::ReadWrite => "rw",
        }
    }
}

/// One path a role may reach beneath, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathGrant {
    pub path: PathBuf,
    pub access: FsAccess,
    pub why: &'static str,
}

/// Resource limits applied before exec (`setrlimit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rlimits {
    /// Always 0: a worker's core dump would hold whatever it held (for the broker: every secret).
    pub core: u64,
    pub nofile: u64,
    /// Largest file the process may write, in bytes (`None`: unlimited).
    pub fsize: Option<u64>,
}

/// What the supervisor insists on seeing in a worker's attestation before it uses the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Requirement {
    pub no_new_privs: bool,
    pub non_dumpable: bool,
    /// Effective, permitted, inheritable and ambient sets empty. (The bounding set can only be
    /// emptied by a process that holds `CAP_SETPCAP`; with `no_new_privs` it cannot be used.)
    pub caps_cleared: bool,
    pub seccomp: bool,
    /// Landlock fully enforced whenever the running kernel supports it.
    pub landlock_when_supported: bool,
}

/// A role's complete confinement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxProfile {
    pub role: Role,
    /// Landlock grants; everything not listed is out of reach.
    pub fs: Vec<PathGrant>,
    pub sockets: SocketPolicy,
    pub denied_syscalls: &'static [&'static str],
    pub deny_namespace_creation: bool,
    pub rlimits: Rlimits,
    pub requires: Requirement,
    /// Environment variables (beyond the base allow-list) the role receives.
    pub env_allow: &'static [&'static str],
    /// Most processes (the worker and everything it runs) at once, enforced by a pids cgroup
    /// where the host offers one. `RLIMIT_NPROC` cannot do this for uid 0: the kernel exempts it.
    pub max_pids: Option<u64>,
}

/// Paths a profile is computed from. Everything is absolute.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProfileContext {
    /// The workspace the agent works in, if any.
    pub workspace: Option<PathBuf>,
    /// `$XDG_CONFIG_HOME/hanzo`: the broker's credential file lives here.
    pub config_dir: Option<PathBuf>,
    /// The run's private temporary directory.
    pub run_dir: Option<PathBuf>,
}

/// System directories that programs run by a worker need to read and execute.
pub const SYSTEM_READ_PATHS: &[&str] = &["/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/opt"];

/// The tools worker's process budget: its commands' builds and test runners fit; a fork bomb
/// stops here.
pub const TOOLS_MAX_PIDS: u64 = 512;

/// Device nodes (besides `/dev/null`) that ordinary commands open: randomness, zeros, a full
/// device for error tests, and the controlling terminal.
pub const COMMAND_DEVICES: &[&str] = &[
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// The base environment allow-list: the only variables any worker receives from the supervisor.
pub const BASE_ENV_ALLOW: &[&str] = &["PATH", "LANG", "LC_ALL", "TERM", "TZ", "RUST_LOG"];

const STRICT: Requirement = Requirement {
    no_new_privs: true,
    non_dumpable: true,
    caps_cleared: true,
    seccomp: true,
    landlock_when_supported: true,
};

/// The broker's descriptor budget: each egress tunnel holds two sockets and two pipes (six
/// descriptors), so the default cap of 256 tunnels per run needs 1536 beside the broker's own.
pub const BROKER_NOFILE: u64 = 4096;

const BASE_RLIMITS: Rlimits = Rlimits {
    core: 0,
    nofile: 1024,
    fsize: None,
};

fn system_grants(why: &'static str) -> impl Iterator<Item = PathGrant> {
    SYSTEM_READ_PATHS
        .iter()
        .filter(|p| Path::new(p).exists())
        .map(move |p| PathGrant {
            path: PathBuf::from(p),
            access: FsAccess::ReadExec,
            why,
        })
}

/// The profile of the *commands* the tools role runs in tier B: the tools profile with any socket
/// family at the profile level (no inet `socket` filter, no Landlock TCP rules), because tier B's
/// commands live in a private network namespace whose only interface is `lo`: loopback servers
/// and clients (test suites, dev servers) work, and nothing outside the namespace is reachable.
/// Enforcement narrows it again: only `AF_INET`/`AF_INET6` may be created (unix sockets would
/// reach host sockets by path). Only a process that is inside that namespace gets this profile —
/// the one-shot sandbox after entering tier B, and the tools worker's command launcher; the tools
/// worker itself keeps [`profile_for`]`(Role::Tools, …)`, unix only, and refuses every `socket`.
pub fn tools_tier_b_commands(ctx: &ProfileContext) -> SandboxProfile {
    SandboxProfile {
        sockets: SocketPolicy::Any,
        ..profile_for(Role::Tools, ctx)
    }
}

/// The profile of tier B's egress forwarder (`hanzo_tools::egress_forward`), the one process in
/// the tools worker's network namespace that reaches the broker's egress proxy: no file at all,
/// unix sockets only at the profile level — and enforcement adds a filter refusing `socket(2)`
/// altogether (`hanzo_tools::nosocket::deny_socket_creation`), because the forwarder creates
/// none: it accepts on the listener made for it and passes what it accepts over the control
/// socket it was given (`accept4`, `sendmsg`, `close`).
pub fn egress_forwarder() -> SandboxProfile {
    SandboxProfile {
        role: Role::Tools,
        fs: Vec::new(),
        max_pids: None,
        ..profile_for(Role::Model, &ProfileContext::default())
    }
}

/// The profile of `role` in `ctx`.
pub fn profile_for(role: Role, ctx: &ProfileContext) -> SandboxProfile {
    let base = SandboxProfile {
        role,
        fs: Vec::new(),
        sockets: SocketPolicy::UnixOnly,
        denied_syscalls: BASE_DENIED_SYSCALLS,
        deny_namespace_creation: true,
        rlimits: BASE_RLIMITS,
        requires: STRICT,
        env_allow: &[],
        max_pids: None,
    };
    match role {
        // Parses untrusted model output: no files, no network. Talks HTTP through the broker.
        Role::Model => base,
        // Holds secrets and speaks HTTPS: any socket family, its credential directory, and the
        // read-only system files TLS and name resolution need (/etc for resolv.conf and hosts).
        Role::Broker => {
            let mut fs: Vec<PathGrant> = ["/etc", "/usr/share/ca-certificates"]
                .iter()
                .filter(|p| Path::new(p).exists())
                .map(|p| PathGrant {
                    path: PathBuf::from(p),
                    access: FsAccess::ReadExec,
                    why: "name resolution and TLS roots",
                })
                .collect();
            if let Some(dir) = &ctx.config_dir {
                fs.push(PathGrant {
                    path: dir.clone(),
                    access: FsAccess::ReadWrite,
                    why: "credential file",
                });
            }
            SandboxProfile {
                fs,
                sockets: SocketPolicy::Any,
                env_allow: &["SSL_CERT_FILE", "SSL_CERT_DIR"],
                rlimits: Rlimits {
                    nofile: BROKER_NOFILE,
                    ..BASE_RLIMITS
                },
                ..base
            }
        }
        // Runs every file tool and every command: the workspace read-write, the system read-only,
        // its private run directory read-write, and /dev/null.
        Role::Tools => {
            let mut fs: Vec<PathGrant> = system_grants("programs and libraries").collect();
            fs.push(PathGrant {
                path: PathBuf::from("/dev/null"),
                access: FsAccess::ReadWrite,
                why: "commands redirect to it",
            });
            fs.extend(
                COMMAND_DEVICES
                    .iter()
                    .filter(|d| Path::new(d).exists())
                    .map(|d| PathGrant {
                        path: PathBuf::from(d),
                        access: FsAccess::ReadWrite,
                        why: "device nodes ordinary commands use",
                    }),
            );
            if let Some(ws) = &ctx.workspace {
                fs.push(PathGrant {
                    path: ws.clone(),
                    access: FsAccess::ReadWrite,
                    why: "the workspace",
                });
            }
            if let Some(run) = &ctx.run_dir {
                fs.push(PathGrant {
                    path: run.clone(),
                    access: FsAccess::ReadWrite,
                    why: "private temporary directory",
                });
            }
            SandboxProfile {
                fs,
                max_pids: Some(TOOLS_MAX_PIDS),
                ..base
            }
        }
        // Spawns MCP servers (node, python): the system read-only, the workspace read-only, its run
        // directory for server state. Per-server network profiles come with the MCP issue.
        Role::Mcp => {
            let mut fs: Vec<PathGrant> = system_grants("server programs").collect();
            fs.push(PathGrant {
                path: PathBuf::from("/dev/null"),
                access: FsAccess::ReadWrite,
                why: "servers redirect to it",
            });
            if let Some(ws) = &ctx.workspace {
                fs.push(PathGrant {
                    path: ws.clone(),
                    access: FsAccess::ReadExec,
                    why: "the workspace, read-only",
                });
            }
            if let Some(run) = &ctx.run_dir {
                fs.push(PathGrant {
                    path: run.clone(),
                    access: FsAccess::ReadWrite,
                    why: "private temporary directory",
                });
            }
            SandboxProfile { fs, ..base }
        }
        // Language servers read the workspace and the toolchains; they never write or connect out.
        Role::Lsp => {
            let mut fs: Vec<PathGrant> = system_grants("language servers and toolchains").collect();
            fs.push(PathGrant {
                path: PathBuf::from("/dev/null"),
                access: FsAccess::ReadWrite,
                why: "servers redirect to it",
            });
            if let Some(ws) = &ctx.workspace {
                fs.push(PathGrant {
                    path: ws.clone(),
                    access: FsAccess::ReadExec,
                    why: "the workspace, read-only",
                });
            }
            if let Some(run) = &ctx.run_dir {
                fs.push(PathGrant {
                    path: run.clone(),
                    access: FsAccess::ReadWrite,
                    why: "private temporary directory",
                });
            }
            SandboxProfile { fs, ..base }
        }
    }
}

/// Secret variable names (moved to [`crate::secret_names`]; re-exported so callers keep working).
pub use crate::secret_names::is_secret_env;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_profile_has_no_filesystem_and_no_network() {
        let p = profile_for(Role::Model, &ProfileContext::default());
        assert!(p.fs.is_empty());
        assert_eq!(p.sockets, SocketPolicy::UnixOnly);
        assert!(p.denied_syscalls.contains(&"ptrace"));
    }

    #[test]
    fn only_the_broker_may_open_network_sockets() {
        for role in Role::ALL {
            let p = profile_for(role, &ProfileContext::default());
            assert_eq!(
                p.sockets == SocketPolicy::Any,
                role == Role::Broker,
                "{role}"
            );
        }
    }

    #[test]
    fn tools_writes_only_workspace_run_dir_and_device_nodes() {
        let ctx = ProfileContext {
            workspace: Some("/w".into()),
            config_dir: Some("/home/u/.config/hanzo".into()),
            run_dir: Some("/tmp/run".into()),
        };
        let p = profile_for(Role::Tools, &ctx);
        let (devices, rw): (Vec<_>, Vec<_>) =
            p.fs.iter()
                .filter(|g| g.access == FsAccess::ReadWrite)
                .map(|g| g.path.clone())
                .partition(|path| path.starts_with("/dev"));
        assert_eq!(rw, vec![PathBuf::from("/w"), PathBuf::from("/tmp/run")]);
        for d in devices {
            let d = d.to_str().expect("utf-8");
            assert!(d == "/dev/null" || COMMAND_DEVICES.contains(&d), "{d}");
        }
        assert!(!p.fs.iter().any(|g| g.path.starts_with("/home")));
    }

    #[test]
    fn secret_names_are_recognised() {
        for n in [
            "ANTHROPIC_API_KEY",
            "GITHUB_TOKEN",
            "AWS_SECRET",
            "DB_PASSWORD",
            "my_password_file",
        ] {
            assert!(is_secret_env(n, &[]), "{n}");
        }
        for n in ["PATH", "HOME", "TOKENIZER_PATH"] {
            assert!(!is_secret_env(n, &[]), "{n}");
        }
        assert!(is_secret_env("CORP_KEY", &["CORP_KEY".to_string()]));
    }

    #[test]
    fn tier_b_commands_differ_from_the_tools_worker_in_sockets_only() {
        let ctx = ProfileContext {
            workspace: Some(PathBuf::from("/w")),
            config_dir: None,
            run_dir: Some(PathBuf::from("/r")),
        };
        let worker = profile_for(Role::Tools, &ctx);
        let commands = tools_tier_b_commands(&ctx);
        assert_eq!(worker.sockets, SocketPolicy::UnixOnly);
        assert_eq!(commands.sockets, SocketPolicy::Any);
        assert_eq!(
            SandboxProfile {
                sockets: SocketPolicy::UnixOnly,
                ..commands
            },
            worker
        );
    }
}
