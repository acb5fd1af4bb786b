//! Every sandbox, declared as data in one place so that two can be compared side by side: the
//! profile of each worker role ([`profile_for`]), of the command launcher a worker starts before
//! it confines itself ([`launcher_profile`]), of each command or server it starts
//! ([`command_profile`], from a [`CommandProfile`]), and of the processes that only wait
//! ([`reaper_profile`]). `hanzo-sandbox` enforces these; it decides nothing itself.
//!
//! Every profile starts from the same restrictive base — no filesystem, no sockets, the base
//! syscall deny list, no namespace creation, core dumps off — and adds only what it needs.
//! Workers run under a seccomp **allow-list** of their own (`policy/seccomp/<role>.txt`: only what
//! tracing the test suite showed the role needs); commands, which need a general-purpose system,
//! run under the deny list plus the command rules (terminal injection, set-id modes, extended
//! attributes, inode flags).

use hanzo_ipc::Role;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub use hanzo_ipc::attest::SocketPolicy;

/// Syscalls no worker (and nothing a worker runs) may make. Names as in `<asm/unistd_64.h>`.
///
/// Process inspection (`ptrace`, `process_vm_*`) would let a compromised worker read another
/// process's secrets; the rest change the kernel's view of the world (mounts, namespaces, modules,
/// BPF) or are large attack surfaces with no use here (io_uring, userfaultfd, keyrings). No
/// allow-list may name one of these (checked by a test).
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

/// What commands may not do beyond [`BASE_DENIED_SYSCALLS`]: write extended attributes (a file
/// capability in `security.capability`, an ACL, labels) — also on files outside every grant,
/// which Landlock does not cover.
pub const COMMAND_DENIED_SYSCALLS: &[&str] = &[
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
    "setxattr",
    "lsetxattr",
    "fsetxattr",
    "removexattr",
    "lremovexattr",
    "fremovexattr",
    "setxattrat",
    "removexattrat",
];

/// `ioctl` requests no command may make (refused with `EPERM`), by name and number:
/// pushing bytes into a terminal's input (`TIOCSTI`; the caller's shell would run them after the
/// command) or driving the Linux console (`TIOCLINUX`), and setting inode flags (`chattr`:
/// immutable, append-only — a write to metadata).
pub const DENIED_IOCTLS: &[(&str, u64)] = &[
    ("TIOCSTI", 0x5412),
    ("TIOCLINUX", 0x541C),
    ("FS_IOC_SETFLAGS", 0x4008_6602),
    ("FS_IOC32_SETFLAGS", 0x4004_6602),
    ("FS_IOC_FSSETXATTR", 0x401C_5820),
];

/// Syscalls that take a file mode, and the index of that argument: a command may not set
/// `S_ISUID` or `S_ISGID` through them (a set-id file in the workspace, or `chmod u+s` on a file
/// outside every grant — Landlock does not cover `chmod`).
pub const SETID_MODE_ARGS: &[(&str, u8)] = &[
    ("chmod", 1),
    ("fchmod", 1),
    ("fchmodat", 2),
    ("fchmodat2", 2),
    ("open", 2),
    ("openat", 3),
    ("creat", 1),
    ("mknod", 1),
    ("mknodat", 2),
];

/// Syscalls refused to commands with `ENOSYS` ("not implemented here", so callers fall back to
/// an older call a filter can read): `openat2` hides its mode in a struct a filter cannot see.
pub const COMMAND_ENOSYS_SYSCALLS: &[&str] = &["openat2"];

/// `S_ISUID | S_ISGID`.
pub const SETID_BITS: u64 = 0o6000;

/// One libc call that glibc and musl make through different syscalls on x86_64 with the same
/// effect: glibc (the build the allow-lists were traced from) issues `glibc`, the static musl
/// build issues `musl`, usually the legacy twin (`open` for `openat(AT_FDCWD, …)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LibcTwin {
    /// The libc function.
    pub call: &'static str,
    /// The syscall glibc issues for it (the name the allow-lists were traced with).
    pub glibc: &'static str,
    /// The syscall the static musl build issues for it instead.
    pub musl: &'static str,
    /// For each argument of `glibc` that an argument rule may inspect, the index of the same
    /// argument of `musl`, or `None` where `musl` has no such argument because the call fixes
    /// its value (`fork` is `clone(SIGCHLD)`: no `CLONE_NEW*` flag can be passed).
    pub args: &'static [(u8, Option<u8>)],
}

/// Every pair of [`LibcTwin`]s a worker meets. An allow-list that admits a pair's `glibc` call
/// must admit its `musl` call, or the musl build's worker stops where the glibc one runs; an
/// argument rule on one must hold on the other at the mapped index, or the rule is bypassed
/// through the twin (both checked by tests). Since each `musl` call does no more than its
/// `glibc` twin already may, admitting it does not widen a list.
pub const LIBC_TWINS: &[LibcTwin] = &[
    LibcTwin {
        call: "open",
        glibc: "openat",
        musl: "open",
        // openat(dirfd, path, flags, mode) → open(path, flags, mode).
        args: &[(1, Some(0)), (2, Some(1)), (3, Some(2))],
    },
    LibcTwin {
        call: "stat",
        glibc: "newfstatat",
        musl: "stat",
        // newfstatat(AT_FDCWD, path, buf, 0) → stat(path, buf).
        args: &[(1, Some(0)), (2, Some(1)), (3, None)],
    },
    LibcTwin {
        call: "lstat",
        glibc: "newfstatat",
        musl: "lstat",
        // newfstatat(AT_FDCWD, path, buf, AT_SYMLINK_NOFOLLOW) → lstat(path, buf).
        args: &[(1, Some(0)), (2, Some(1)), (3, None)],
    },
    LibcTwin {
        call: "fstat",
        glibc: "newfstatat",
        musl: "fstat",
        // newfstatat(fd, "", buf, AT_EMPTY_PATH) → fstat(fd, buf).
        args: &[(0, Some(0)), (2, Some(1)), (3, None)],
    },
    LibcTwin {
        call: "fork",
        glibc: "clone",
        musl: "fork",
        // clone(flags, …) → fork(): the flags are SIGCHLD alone.
        args: &[(0, None)],
    },
    LibcTwin {
        call: "fork (in the child)",
        glibc: "clone",
        musl: "set_tid_address",
        // clone(CLONE_CHILD_CLEARTID, …, tidptr) → set_tid_address(tidptr) in the child.
        args: &[(0, None)],
    },
    LibcTwin {
        call: "epoll_wait",
        glibc: "epoll_wait",
        musl: "epoll_pwait",
        // epoll_wait(epfd, events, max, timeout) → epoll_pwait(…, NULL): no signal mask.
        args: &[(0, Some(0)), (1, Some(1)), (2, Some(2)), (3, Some(3))],
    },
];

/// Which syscalls a process may make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syscalls {
    /// Everything runs except `denied` (refused with `EPERM`); with `command_rules`, also the
    /// argument rules for commands ([`DENIED_IOCTLS`], [`SETID_MODE_ARGS`],
    /// [`COMMAND_ENOSYS_SYSCALLS`]). For commands and the launcher that starts them.
    DenyList {
        /// The syscalls refused with `EPERM`.
        denied: &'static [&'static str],
        /// Whether the argument rules for commands are in force too.
        command_rules: bool,
    },
    /// Only the listed syscalls run; any other stops the process with `SIGSYS`, after it names
    /// the syscall on stderr. For workers, which run known code.
    AllowList(&'static AllowList),
}

/// A seccomp allow-list: one of the files in `policy/seccomp/`.
#[derive(Debug, PartialEq, Eq)]
pub struct AllowList {
    /// The file's name without `.txt`.
    pub name: &'static str,
    /// `base.txt` and the file's own names, sorted, without duplicates.
    pub syscalls: Vec<&'static str>,
}

impl AllowList {
    /// SHA-256 of the names, one per line, in order (what an attestation reports).
    pub fn digest(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        for name in &self.syscalls {
            h.update(name.as_bytes());
            h.update(b"\n");
        }
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Whether the list admits the syscall `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.syscalls.binary_search(&name).is_ok()
    }

    /// Where the list lives, for messages.
    pub fn file(&self) -> String {
        format!("policy/seccomp/{}.txt", self.name)
    }
}

/// The allow-list files, compiled in. `base` is what every worker needs (a Rust process with a
/// tokio runtime on its channel); each other file adds what its processes need beyond that.
const LIST_FILES: &[(&str, &str)] = &[
    ("base", include_str!("../seccomp/base.txt")),
    ("broker", include_str!("../seccomp/broker.txt")),
    ("model", include_str!("../seccomp/model.txt")),
    ("tools", include_str!("../seccomp/tools.txt")),
    ("mcp", include_str!("../seccomp/mcp.txt")),
    ("lsp", include_str!("../seccomp/lsp.txt")),
    ("reaper", include_str!("../seccomp/reaper.txt")),
];

/// The names in one list file: one per line, `#` starts a comment.
fn parse_list(text: &'static str) -> impl Iterator<Item = &'static str> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
}

fn list_text(name: &str) -> &'static str {
    LIST_FILES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .expect("every allow-list name used in this module has a file")
}

/// The allow-list called `name` (`broker`, `model`, `tools`, `mcp`, `lsp`: `base.txt` plus the
/// role's file; `reaper`: its file alone, for processes that only wait).
pub fn allow_list(name: &'static str) -> &'static AllowList {
    static LISTS: OnceLock<Vec<AllowList>> = OnceLock::new();
    let lists = LISTS.get_or_init(|| {
        LIST_FILES
            .iter()
            .filter(|(n, _)| *n != "base")
            .map(|(n, text)| {
                let mut syscalls: Vec<&'static str> = parse_list(text).collect();
                if *n != "reaper" {
                    syscalls.extend(parse_list(list_text("base")));
                }
                syscalls.sort_unstable();
                syscalls.dedup();
                AllowList { name: n, syscalls }
            })
            .collect()
    });
    lists
        .iter()
        .find(|l| l.name == name)
        .expect("every allow-list name used in this module has a file")
}

/// Every allow-list, for tests and `doctor`.
pub fn allow_lists() -> Vec<&'static AllowList> {
    ["broker", "model", "tools", "mcp", "lsp", "reaper"]
        .into_iter()
        .map(allow_list)
        .collect()
}

/// What a [`PathGrant`] lets a process do beneath its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FsAccess {
    /// Read files and list directories; execute files (a process that runs programs needs it).
    ReadExec,
    /// Read, write, create, remove, rename within the tree.
    ReadWrite,
}

impl FsAccess {
    /// The grant's short form in attestations and `doctor` (`ro`, `rw`).
    pub fn short(self) -> &'static str {
        match self {
            FsAccess::ReadExec => "ro",
            FsAccess::ReadWrite => "rw",
        }
    }
}

/// One path a process may reach beneath, and why.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PathGrant {
    /// The directory or file granted; everything beneath it is included.
    pub path: PathBuf,
    /// What the process may do there.
    pub access: FsAccess,
    /// Why the role needs it, for `doctor` and error messages.
    pub why: &'static str,
}

/// Resource limits applied before exec (`setrlimit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rlimits {
    /// Always 0: a worker's core dump would hold whatever it held (for the broker: every secret).
    pub core: u64,
    /// Most open file descriptors (`RLIMIT_NOFILE`).
    pub nofile: u64,
    /// Largest file the process may write, in bytes (`None`: unlimited).
    pub fsize: Option<u64>,
}

/// Bounds on a whole process tree, enforced by a cgroup where the host offers one.
/// `RLIMIT_NPROC` cannot do this for uid 0: the kernel exempts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CgroupLimits {
    /// Most processes at once (`pids.max`).
    pub max_pids: Option<u64>,
    /// Most memory, bytes (`memory.max`, or `memory.limit_in_bytes` on v1), with swap off
    /// (`memory.swap.max` 0, or `memory.memsw.limit_in_bytes` equal to the limit).
    pub max_memory: Option<u64>,
}

/// What the supervisor insists on seeing in a worker's attestation before it uses the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Requirement {
    /// `no_new_privs` must be set.
    pub no_new_privs: bool,
    /// The process must not be dumpable (no core, no ptrace by the same user).
    pub non_dumpable: bool,
    /// Effective, permitted, inheritable and ambient sets empty. (The bounding set can only be
    /// emptied by a process that holds `CAP_SETPCAP`; with `no_new_privs` it cannot be used.)
    pub caps_cleared: bool,
    /// A seccomp filter must be installed.
    pub seccomp: bool,
    /// Landlock fully enforced whenever the running kernel supports it.
    pub landlock_when_supported: bool,
}

/// A process's complete confinement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxProfile {
    /// The role it serves (a command or launcher serves the role that started it).
    pub role: Role,
    /// Landlock grants; everything not listed is out of reach.
    pub fs: Vec<PathGrant>,
    /// Which `socket(2)` families it may open.
    pub sockets: SocketPolicy,
    /// Which syscalls it may make.
    pub syscalls: Syscalls,
    /// Whether `clone` with a `CLONE_NEW*` flag and `clone3` are refused (no new namespaces).
    pub deny_namespace_creation: bool,
    /// Resource limits set before exec.
    pub rlimits: Rlimits,
    /// What its attestation must show before the supervisor uses it.
    pub requires: Requirement,
    /// Environment variables (beyond the base allow-list) the role receives.
    pub env_allow: &'static [&'static str],
    /// Bounds on the process and everything it runs.
    pub cgroup: CgroupLimits,
    /// The worker starts every command through a launcher it forks before confining itself
    /// (its attestation carries the launcher's among its helpers).
    pub launcher: bool,
}

impl SandboxProfile {
    /// The syscalls the filter must refuse by name: the deny list, or (allow-list) every base
    /// denied syscall, none of which an allow-list names.
    pub fn denied_syscalls(&self) -> &'static [&'static str] {
        match self.syscalls {
            Syscalls::DenyList { denied, .. } => denied,
            Syscalls::AllowList(_) => BASE_DENIED_SYSCALLS,
        }
    }

    /// Whether the command rules are part of the filter.
    pub fn command_rules(&self) -> bool {
        matches!(
            self.syscalls,
            Syscalls::DenyList {
                command_rules: true,
                ..
            }
        )
    }
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
    /// Paths no sandbox may reach whatever the workspace is: hanzo's configuration and data
    /// directories (settings, credentials, the run store, the trust store). Never granted; tier B
    /// also hides them behind an empty mount, also inside the workspace.
    pub hidden: Vec<PathBuf>,
    /// The user insisted on a workspace that contains a hidden path (`--allow-dangerous-workspace`).
    /// Tier B still hides them; tier A cannot (a Landlock grant cannot have a hole), so tier A is
    /// refused for such a workspace unless this is set.
    pub allow_dangerous_workspace: bool,
    /// Installation prefixes of language servers that live outside the system directories and
    /// the workspace (a package tree under `$HOME`, such as `~/.npm-global/lib/node_modules` or
    /// `~/.local/bin`), read-only for the lsp role alone: its worker, its launcher and its
    /// servers. Computed and vetted by `hanzo_lsp::prefix` (never `$HOME` itself, a directory
    /// holding secrets, or one that contains the workspace or a hidden path).
    pub toolchains: Vec<PathBuf>,
    /// A configured MCP stdio server asks for the workspace read-write (`filesystem:
    /// "workspace-rw"`). The mcp worker and its launcher then hold the workspace read-write (each
    /// server narrows it again with its own profile), and in tier B the mcp worker's mount
    /// namespace keeps the workspace writable with the protected paths bound read-only, as the
    /// tools worker's does. `false`: the mcp role reads the workspace only.
    pub mcp_workspace_write: bool,
    /// The paths configured MCP stdio servers may read beyond the workspace (their
    /// `read_paths`, resolved and vetted by the settings loader), read-only for the mcp role
    /// alone: its worker, its launcher (and in tier B its mount namespace); each server's own
    /// profile grants only its own.
    pub mcp_extra_read: Vec<PathBuf>,
}

impl ProfileContext {
    /// The hidden paths inside the workspace (or equal to it, or containing it): what tier A
    /// cannot keep out of reach.
    pub fn hidden_in_workspace(&self) -> Vec<PathBuf> {
        let Some(ws) = &self.workspace else {
            return Vec::new();
        };
        self.hidden
            .iter()
            .filter(|h| h.starts_with(ws) || ws.starts_with(h))
            .cloned()
            .collect()
    }
}

/// Directories under `$HOME` that hold secrets or settings: no grant a configuration asks for
/// (a language server's installation prefix, an MCP server's `read_paths`) lies inside one.
pub const SECRET_HOME_DIRS: &[&str] = &[
    ".ssh",
    ".aws",
    ".gnupg",
    ".config",
    ".kube",
    ".docker",
    ".azure",
    ".password-store",
    ".terraform.d",
];

/// Directories tier B replaces by a private, writable, size-limited tmpfs in every sandbox. A
/// path beneath one cannot be granted to one sandboxed program alone (there, a grant of the
/// private `/tmp` reaches whatever is bound back into it), so no configured read path may lie
/// beneath one.
pub const PRIVATE_TMP_DIRS: &[&str] = &["/tmp", "/var/tmp", "/dev/shm"];

/// System directories that programs need to read and execute. `/etc` is not among them: only
/// the entries in [`COMMAND_ETC`] are granted (root-only files there are secrets).
pub const SYSTEM_READ_PATHS: &[&str] =
    &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/opt"];

/// What programs read under `/etc` (derived from what the test suite's commands and real
/// toolchains open): users and groups, name resolution, TLS roots, the dynamic linker, locale and
/// time zone, shell start-up files, MIME and magic databases, the OS release, and toolchains'
/// system-wide settings. Not `shadow`, `gshadow`, `ssh/` (host keys), `ssl/private`, `sudoers`,
/// `kubernetes/`, `docker/`, database or web server configuration, or anything else.
pub const COMMAND_ETC: &[&str] = &[
    "passwd",
    "group",
    "hosts",
    "host.conf",
    "hostname",
    "resolv.conf",
    "nsswitch.conf",
    "gai.conf",
    "services",
    "protocols",
    "networks",
    "ssl/certs",
    "ssl/openssl.cnf",
    "ca-certificates",
    "ca-certificates.conf",
    "pki/tls/certs",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "locale.alias",
    "locale.conf",
    "localtime",
    "timezone",
    "profile",
    "profile.d",
    "bash.bashrc",
    "environment",
    "inputrc",
    "shells",
    "terminfo",
    "mime.types",
    "magic",
    "magic.mime",
    "os-release",
    "debian_version",
    "lsb-release",
    "gitconfig",
    "gitattributes",
    "python3",
    "python3.11",
    "python3.12",
    "python3.13",
    "perl",
    "npmrc",
    "pip.conf",
    "java-17-openjdk",
    "maven",
    "vim",
    "xdg",
    "fonts",
];

/// What the broker reads under `/etc`: name resolution and TLS roots, nothing else.
pub const BROKER_ETC: &[&str] = &[
    "hosts",
    "host.conf",
    "resolv.conf",
    "nsswitch.conf",
    "gai.conf",
    "services",
    "ssl/certs",
    "ssl/openssl.cnf",
    "ca-certificates",
    "ca-certificates.conf",
    "pki/tls/certs",
];

/// The fixed part of what the file tools refuse to write in a workspace (defined beside the git
/// parsing; the complete set is `hanzo_tools::paths::protected_paths`).
pub use crate::git::PROTECTED_IN_WORKSPACE;

/// The tools worker's process budget: its commands' builds and test runners fit; a fork bomb
/// stops here.
pub const TOOLS_MAX_PIDS: u64 = 512;

/// The tools worker's memory budget (its whole tree, commands and their private `/tmp`
/// included), with swap off.
pub const TOOLS_MAX_MEMORY: u64 = 8 << 30;

/// The size of tier B's private `/tmp` (a tmpfs; its pages count against the memory budget).
pub const PRIVATE_TMP_SIZE: u64 = 1 << 30;

/// The resource limits every command runs under: the `bash` tool's, hooks', MCP and language
/// servers', and the one-shot `sandbox`'s. Declared here with the rest of the confinement and
/// applied by `workers/sandbox`: open files, file size and core dumps in each command's pre-exec
/// step ([`CommandLimits::command_rlimits`]); the number of processes and the address space on
/// the process that forks the commands, hard and soft, before it is confined, so every command
/// inherits them and none can raise them (`hanzo_sandbox::spawn::lower_process_limits`). A run's
/// settings and the `sandbox` flags change fields of the default.
///
/// `RLIMIT_NPROC` counts every process of the user, and the kernel does not apply it to uid 0 in
/// the initial user namespace: a fork bomb is bounded by the tree's pids cgroup ([`CgroupLimits`]),
/// and its memory by the memory cgroup beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandLimits {
    /// Most open file descriptors per command (`RLIMIT_NOFILE`).
    pub open_files: u64,
    /// Largest file a command may write, bytes.
    pub file_size: Option<u64>,
    /// Processes of the user (`RLIMIT_NPROC`).
    pub processes: Option<u64>,
    /// Virtual memory per process, bytes (`RLIMIT_AS`).
    pub address_space: Option<u64>,
    /// The tree's cgroup bounds (the one-shot sandbox makes its own group; a worker's comes
    /// from its profile).
    pub cgroup: CgroupLimits,
    /// Size of tier B's private `/tmp` (and `/var/tmp`, `/dev/shm`), bytes.
    pub tmp_size: u64,
}

impl Default for CommandLimits {
    fn default() -> Self {
        CommandLimits {
            open_files: 1024,
            file_size: Some(4 << 30),
            processes: Some(4096),
            address_space: Some(8 << 30),
            cgroup: CgroupLimits {
                max_pids: Some(TOOLS_MAX_PIDS),
                max_memory: Some(TOOLS_MAX_MEMORY),
            },
            tmp_size: PRIVATE_TMP_SIZE,
        }
    }
}

impl CommandLimits {
    /// The limits set in each command's pre-exec step.
    pub fn command_rlimits(&self) -> Rlimits {
        Rlimits {
            core: 0,
            nofile: self.open_files,
            fsize: self.file_size,
        }
    }
}

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

const COMMAND_SYSCALLS: Syscalls = Syscalls::DenyList {
    denied: COMMAND_DENIED_SYSCALLS,
    command_rules: true,
};

fn grant(path: impl Into<PathBuf>, access: FsAccess, why: &'static str) -> PathGrant {
    PathGrant {
        path: path.into(),
        access,
        why,
    }
}

fn existing(paths: &'static [&'static str]) -> impl Iterator<Item = &'static str> {
    paths.iter().copied().filter(|p| Path::new(p).exists())
}

/// The system directories and the listed `/etc` entries that exist, read-only.
fn system_grants(why: &'static str) -> Vec<PathGrant> {
    let mut fs: Vec<PathGrant> = existing(SYSTEM_READ_PATHS)
        .map(|p| grant(p, FsAccess::ReadExec, why))
        .collect();
    fs.extend(etc_grants(COMMAND_ETC, "what programs read under /etc"));
    fs
}

/// `/etc/<name>` for each listed name that exists (a dangling symlink does not).
pub fn etc_grants(names: &[&str], why: &'static str) -> Vec<PathGrant> {
    names
        .iter()
        .map(|n| Path::new("/etc").join(n))
        .filter(|p| p.exists())
        .map(|p| grant(p, FsAccess::ReadExec, why))
        .collect()
}

fn devices(why: &'static str) -> Vec<PathGrant> {
    let mut fs = vec![grant("/dev/null", FsAccess::ReadWrite, why)];
    fs.extend(existing(COMMAND_DEVICES).map(|d| grant(d, FsAccess::ReadWrite, why)));
    fs
}

/// The profile of tier B's egress forwarder (`hanzo_tools::egress_forward`), the one process in
/// the tools worker's network namespace that reaches the broker's egress proxy: no file at all,
/// no socket family (`SocketPolicy::None`, which the seccomp filter enforces: `socket(2)`
/// is refused altogether), because the forwarder creates
/// none: it accepts on the listener made for it and passes what it accepts over the control
/// socket it was given (`accept4`, `sendmsg`, `close`). Its syscalls are the commands' deny-list
/// (it has no allow-list of its own yet: it runs beside commands, in their namespace).
pub fn egress_forwarder() -> SandboxProfile {
    base(Role::Tools, COMMAND_SYSCALLS)
}

fn base(role: Role, syscalls: Syscalls) -> SandboxProfile {
    SandboxProfile {
        role,
        fs: Vec::new(),
        sockets: SocketPolicy::None,
        syscalls,
        deny_namespace_creation: true,
        rlimits: BASE_RLIMITS,
        requires: STRICT,
        env_allow: &[],
        cgroup: CgroupLimits::default(),
        launcher: false,
    }
}

/// The profile of the worker process of `role` in `ctx`.
pub fn profile_for(role: Role, ctx: &ProfileContext) -> SandboxProfile {
    match role {
        // Parses untrusted model output: no files, no sockets (its channels were inherited).
        // Talks HTTP through the broker.
        Role::Model => base(role, Syscalls::AllowList(allow_list("model"))),
        // Holds secrets and speaks HTTPS: any socket family, its credential directory, and what
        // TLS and name resolution read.
        Role::Broker => {
            let mut fs = etc_grants(BROKER_ETC, "name resolution and TLS roots");
            fs.extend(
                existing(&["/usr/share/ca-certificates"])
                    .map(|p| grant(p, FsAccess::ReadExec, "TLS roots")),
            );
            if let Some(dir) = &ctx.config_dir {
                fs.push(grant(dir, FsAccess::ReadWrite, "credential file"));
            }
            SandboxProfile {
                fs,
                sockets: SocketPolicy::Any,
                env_allow: &["SSL_CERT_FILE", "SSL_CERT_DIR"],
                rlimits: Rlimits {
                    nofile: BROKER_NOFILE,
                    ..BASE_RLIMITS
                },
                ..base(role, Syscalls::AllowList(allow_list("broker")))
            }
        }
        // Runs every file tool, and asks its launcher to run every command: the workspace
        // read-write and its private run directory; it neither executes a program nor creates a
        // socket itself.
        Role::Tools => {
            let mut fs = Vec::new();
            if let Some(ws) = &ctx.workspace {
                fs.push(grant(ws, FsAccess::ReadWrite, "the workspace"));
            }
            if let Some(run) = &ctx.run_dir {
                fs.push(grant(
                    run,
                    FsAccess::ReadWrite,
                    "private temporary directory",
                ));
            }
            SandboxProfile {
                fs,
                cgroup: CgroupLimits {
                    max_pids: Some(TOOLS_MAX_PIDS),
                    max_memory: Some(TOOLS_MAX_MEMORY),
                },
                launcher: true,
                ..base(role, Syscalls::AllowList(allow_list("tools")))
            }
        }
        // Asks its launcher to start MCP servers (node, python), each confined with its own
        // `CommandProfile`: the system read-only, the workspace read-only, its run directory for
        // server state; it neither executes a program nor creates a socket itself.
        // With `mcp_workspace_write`, the workspace read-write instead (a `workspace-rw` server's
        // grant must lie within its launcher's, and the launcher's within this one's).
        Role::Mcp => SandboxProfile {
            fs: mcp_grants(ctx),
            launcher: true,
            ..base(role, Syscalls::AllowList(allow_list("mcp")))
        },
        // Language servers read the workspace and the toolchains; they never write or connect out.
        // It asks its launcher to start every server (each under `CommandProfile`s of its own:
        // the workspace read-only, no socket).
        Role::Lsp => SandboxProfile {
            fs: lsp_grants(ctx),
            launcher: true,
            ..base(role, Syscalls::AllowList(allow_list("lsp")))
        },
    }
}

/// What the mcp worker reaches: [`reader_grants`], with the workspace read-write when a server
/// asks for it ([`ProfileContext::mcp_workspace_write`]).
fn mcp_grants(ctx: &ProfileContext) -> Vec<PathGrant> {
    let mut fs = reader_grants(ctx, "server programs");
    fs.extend(ctx.mcp_extra_read.iter().map(|p| {
        grant(
            p,
            FsAccess::ReadExec,
            "a path an MCP server's read_paths names",
        )
    }));
    if let (true, Some(ws)) = (ctx.mcp_workspace_write, &ctx.workspace) {
        for g in fs.iter_mut().filter(|g| &g.path == ws) {
            *g = grant(
                ws,
                FsAccess::ReadWrite,
                "the workspace (a workspace-rw server)",
            );
        }
    }
    fs
}

/// What the lsp worker reads: [`reader_grants`] and the vetted installation prefixes of its
/// servers ([`ProfileContext::toolchains`]).
fn lsp_grants(ctx: &ProfileContext) -> Vec<PathGrant> {
    let mut fs = reader_grants(ctx, "language servers and toolchains");
    fs.extend(ctx.toolchains.iter().map(|p| {
        grant(
            p,
            FsAccess::ReadExec,
            "a language server's installation prefix",
        )
    }));
    dedup(&mut fs);
    fs
}

fn reader_grants(ctx: &ProfileContext, why: &'static str) -> Vec<PathGrant> {
    let mut fs = system_grants(why);
    fs.push(grant(
        "/dev/null",
        FsAccess::ReadWrite,
        "servers redirect to it",
    ));
    if let Some(ws) = &ctx.workspace {
        fs.push(grant(ws, FsAccess::ReadExec, "the workspace, read-only"));
    }
    if let Some(run) = &ctx.run_dir {
        fs.push(grant(
            run,
            FsAccess::ReadWrite,
            "private temporary directory",
        ));
    }
    fs
}

/// The profile of the processes that only wait for a child and pass on its status: tier B's
/// pid 1 and the original process that waits for it. Nothing but the reaper allow-list, no
/// filesystem, no sockets.
pub fn reaper_profile(role: Role) -> SandboxProfile {
    base(role, Syscalls::AllowList(allow_list("reaper")))
}

/// Which tier a command runs in decides what its network can be.
pub use crate::isolation::Tier;

/// What a command or server may reach, declared by whoever starts it (the `bash` tool, a hook, an
/// MCP or language server). Applied at spawn as a Landlock domain and a seccomp filter nested in
/// the launcher's, so a command can be narrower than the worker that starts it, never wider.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct CommandProfile {
    /// How much of the workspace it reaches.
    pub fs: FsScope,
    /// More trees it may read and execute from (a toolchain outside the system directories).
    pub extra_read: Vec<PathBuf>,
    /// More trees it may write.
    pub extra_write: Vec<PathBuf>,
    /// What network it reaches.
    pub network: NetAccess,
    /// The device nodes ordinary programs open ([`COMMAND_DEVICES`]); `/dev/null` is always there.
    pub devices: bool,
}

/// How much of the workspace a command reaches. Every command also reads and executes the
/// system directories, and writes its private run directory (`HOME`; tier A's `TMPDIR`) and, in
/// tier B, the private `/tmp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum FsScope {
    /// No workspace access.
    None,
    /// The workspace, read-only.
    WorkspaceRo,
    /// The workspace, read-write.
    WorkspaceRw,
}

/// The network a command reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum NetAccess {
    /// No `socket(2)` at all.
    None,
    /// Tier B's private network namespace: `AF_INET`/`AF_INET6` on its own `lo`, nothing else.
    Loopback,
    /// The broker's egress proxy, reached from tier B's namespace through the forwarder on its
    /// `127.0.0.1`: the same socket policy as `Loopback` (the namespace has nothing else), given
    /// only when the run's allow-list is not empty.
    Egress,
}

impl CommandProfile {
    /// The `bash` tool's commands: the workspace read-write, the devices, and the loopback in
    /// tier B.
    pub fn bash(tier: Tier) -> CommandProfile {
        CommandProfile {
            fs: FsScope::WorkspaceRw,
            extra_read: Vec::new(),
            extra_write: Vec::new(),
            network: if tier == Tier::B {
                NetAccess::Loopback
            } else {
                NetAccess::None
            },
            devices: true,
        }
    }

    /// Hooks: the workspace read-write (a formatter hook edits files), no network in either tier.
    pub fn hook() -> CommandProfile {
        CommandProfile {
            network: NetAccess::None,
            ..CommandProfile::bash(Tier::A)
        }
    }
}

/// Why a command profile cannot be given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    /// Loopback network was asked for in tier A, where it would be the host's loopback.
    #[error(
        "a command asked for the loopback network, which only tier B gives (in tier A it would be \
         the host's loopback)"
    )]
    LoopbackNeedsTierB,
    /// Egress was asked for in tier A, which has no private namespace for the forwarder.
    #[error(
        "network for commands goes through the broker's proxy in tier B's namespace; tier A has \
         no egress (run where user namespaces work, or remove sandbox.network_allow)"
    )]
    EgressUnavailable,
}

/// The profile a command is confined with at spawn, nested in the launcher's (or, in the
/// one-shot sandbox, applied on its own): `cmd` over the worker's context in `tier`.
pub fn command_profile(
    role: Role,
    cmd: &CommandProfile,
    ctx: &ProfileContext,
    tier: Tier,
) -> Result<SandboxProfile, ProfileError> {
    let sockets = match (cmd.network, tier) {
        (NetAccess::None, _) => SocketPolicy::None,
        (NetAccess::Loopback, Tier::B) => SocketPolicy::InetOnly,
        (NetAccess::Loopback, Tier::A) => return Err(ProfileError::LoopbackNeedsTierB),
        (NetAccess::Egress, Tier::B) => SocketPolicy::InetOnly,
        (NetAccess::Egress, Tier::A) => return Err(ProfileError::EgressUnavailable),
    };
    let mut fs = system_grants("programs and libraries");
    if cmd.devices {
        fs.extend(devices("device nodes ordinary commands use"));
    } else {
        fs.push(grant(
            "/dev/null",
            FsAccess::ReadWrite,
            "commands redirect to it",
        ));
    }
    if let Some(ws) = &ctx.workspace {
        match cmd.fs {
            FsScope::None => {}
            FsScope::WorkspaceRo => {
                fs.push(grant(ws, FsAccess::ReadExec, "the workspace, read-only"))
            }
            FsScope::WorkspaceRw => fs.push(grant(ws, FsAccess::ReadWrite, "the workspace")),
        }
    }
    if let Some(run) = &ctx.run_dir {
        fs.push(grant(
            run,
            FsAccess::ReadWrite,
            "private run directory (HOME)",
        ));
    }
    if tier == Tier::B {
        // A grant reaches every mount beneath its path: a workspace under `/tmp` is bound back
        // into the private `/tmp`, so there `/tmp` is granted no wider than the workspace.
        let ws_in_tmp = ctx
            .workspace
            .as_ref()
            .is_some_and(|ws| ws.starts_with("/tmp"));
        match (ws_in_tmp, cmd.fs) {
            (false, _) | (true, FsScope::WorkspaceRw) => {
                fs.push(grant("/tmp", FsAccess::ReadWrite, "tier B's private /tmp"))
            }
            (true, FsScope::WorkspaceRo) => fs.push(grant(
                "/tmp",
                FsAccess::ReadExec,
                "tier B's private /tmp, read-only: the workspace lies beneath it",
            )),
            (true, FsScope::None) => {}
        }
    }
    fs.extend(
        cmd.extra_read
            .iter()
            .map(|p| grant(p, FsAccess::ReadExec, "an extra read-only tree")),
    );
    fs.extend(
        cmd.extra_write
            .iter()
            .map(|p| grant(p, FsAccess::ReadWrite, "an extra writable tree")),
    );
    dedup(&mut fs);
    Ok(SandboxProfile {
        fs,
        sockets,
        ..base(role, COMMAND_SYSCALLS)
    })
}

/// The profile of the launcher a worker of `role` forks before it confines itself, which starts
/// every command for it: what any of its commands may have (their profiles nest inside it), the
/// command deny list and rules, and in tier B the namespace's loopback.
pub fn launcher_profile(role: Role, ctx: &ProfileContext, tier: Tier) -> SandboxProfile {
    let widest = CommandProfile {
        fs: match role {
            Role::Tools => FsScope::WorkspaceRw,
            Role::Mcp if ctx.mcp_workspace_write => FsScope::WorkspaceRw,
            _ => FsScope::WorkspaceRo,
        },
        // The lsp role's servers may read their installation prefixes, the mcp role's the
        // servers' `read_paths` (and no other role either).
        extra_read: match role {
            Role::Lsp => ctx.toolchains.clone(),
            Role::Mcp => ctx.mcp_extra_read.clone(),
            _ => Vec::new(),
        },
        ..CommandProfile::bash(tier)
    };
    command_profile(role, &widest, ctx, tier)
        .expect("the widest command profile asks only for what the tier gives")
}

fn dedup(fs: &mut Vec<PathGrant>) {
    let mut seen = std::collections::HashSet::new();
    fs.retain(|g| seen.insert((g.path.clone(), g.access)));
}

/// Secret variable names (moved to [`crate::secret_names`]; re-exported so callers keep working).
pub use crate::secret_names::is_secret_env;

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> ProfileContext {
        ProfileContext {
            workspace: Some("/w".into()),
            config_dir: Some("/home/u/.config/hanzo".into()),
            run_dir: Some("/tmp/run".into()),
            hidden: vec![
                "/home/u/.config/hanzo".into(),
                "/home/u/.local/share/hanzo".into(),
            ],
            allow_dangerous_workspace: false,
            toolchains: Vec::new(),
            mcp_workspace_write: false,
            mcp_extra_read: Vec::new(),
        }
    }

    #[test]
    fn model_profile_has_no_filesystem_and_no_sockets() {
        let p = profile_for(Role::Model, &ProfileContext::default());
        assert!(p.fs.is_empty());
        assert_eq!(p.sockets, SocketPolicy::None);
        assert!(matches!(p.syscalls, Syscalls::AllowList(l) if l.name == "model"));
        assert!(p.denied_syscalls().contains(&"ptrace"));
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
    fn every_worker_runs_under_its_own_allow_list() {
        for role in Role::ALL {
            let p = profile_for(role, &ctx());
            match p.syscalls {
                Syscalls::AllowList(l) => assert_eq!(l.name, role.as_str()),
                other => panic!("{role}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_command_deny_list_repeats_every_base_entry() {
        // The command list is written out in full (a const slice cannot be concatenated), so a
        // syscall added to the base list alone would stay open to commands.
        for name in BASE_DENIED_SYSCALLS {
            assert!(
                COMMAND_DENIED_SYSCALLS.contains(name),
                "{name} is denied to workers but not to commands"
            );
        }
    }

    #[test]
    fn no_allow_list_names_a_denied_syscall_or_a_duplicate() {
        for list in allow_lists() {
            for name in BASE_DENIED_SYSCALLS.iter().chain(COMMAND_DENIED_SYSCALLS) {
                assert!(!list.contains(name), "{} admits {name}", list.file());
            }
            let mut sorted = list.syscalls.clone();
            sorted.dedup();
            assert_eq!(sorted, list.syscalls, "{}", list.name);
            assert!(list.contains("exit_group"), "{}", list.name);
        }
        // Each role file adds only what base lacks.
        let base: Vec<_> = parse_list(list_text("base")).collect();
        for (name, text) in LIST_FILES
            .iter()
            .filter(|(n, _)| *n != "base" && *n != "reaper")
        {
            for s in parse_list(text) {
                assert!(!base.contains(&s), "{name}.txt repeats {s} from base.txt");
            }
        }
    }

    #[test]
    fn every_list_that_admits_a_glibc_call_admits_its_musl_twin() {
        // Lists are re-derived by tracing the glibc build; this keeps the static musl build's
        // workers running on the same lists.
        for list in allow_lists() {
            for t in LIBC_TWINS {
                assert!(
                    !list.contains(t.glibc) || list.contains(t.musl),
                    "{} admits {} (glibc's {}) but not {} (musl's)",
                    list.file(),
                    t.glibc,
                    t.call,
                    t.musl
                );
            }
        }
    }

    #[test]
    fn every_argument_rule_holds_on_both_twins() {
        // Argument rules: the command rules on file modes, and (in hanzo-sandbox's seccomp.rs)
        // every profile's namespace-flag rule on clone's argument 0 and the socket-family rule
        // on socket's argument 0.
        let mut rules: Vec<(&str, u8)> = SETID_MODE_ARGS.to_vec();
        rules.extend([("clone", 0), ("socket", 0)]);
        for t in LIBC_TWINS {
            for &(name, index) in &rules {
                let mapped = if name == t.glibc {
                    t.args
                        .iter()
                        .find(|(g, _)| *g == index)
                        .map(|(_, m)| (t.musl, *m))
                } else if name == t.musl {
                    t.args
                        .iter()
                        .find(|(_, m)| *m == Some(index))
                        .map(|(g, _)| (t.glibc, Some(*g)))
                } else {
                    continue;
                };
                let Some((twin, mapped)) = mapped else {
                    panic!("{}: argument {index} of {name} is not mapped", t.call);
                };
                if let Some(i) = mapped {
                    assert!(
                        rules.contains(&(twin, i)),
                        "{}: {name} is checked at argument {index}, {twin} not at {i}",
                        t.call
                    );
                }
            }
        }
        // open's mode is checked like openat's, so a musl command cannot set set-id bits.
        assert!(SETID_MODE_ARGS.contains(&("open", 2)));
        assert!(SETID_MODE_ARGS.contains(&("openat", 3)));
    }

    #[test]
    fn twins_are_denied_together_or_not_at_all() {
        for t in LIBC_TWINS {
            for denied in [BASE_DENIED_SYSCALLS, COMMAND_DENIED_SYSCALLS] {
                assert_eq!(
                    denied.contains(&t.glibc),
                    denied.contains(&t.musl),
                    "{}",
                    t.call
                );
            }
        }
    }

    #[test]
    fn the_reaper_list_is_tiny_and_cannot_exec_or_open() {
        let r = allow_list("reaper");
        for s in [
            "execve", "execveat", "openat", "open", "socket", "clone", "clone3", "fork",
        ] {
            assert!(!r.contains(s), "reaper admits {s}");
        }
        assert!(r.contains("wait4"));
        assert!(r.syscalls.len() < 20, "{:?}", r.syscalls);
    }

    #[test]
    fn allow_list_digests_differ_per_list_and_are_stable() {
        let a = allow_list("tools").digest();
        assert_eq!(a, allow_list("tools").digest());
        assert_ne!(a, allow_list("model").digest());
        assert_eq!(a.len(), 64);
    }

    #[test]
    fn tools_worker_writes_only_workspace_and_run_dir() {
        let p = profile_for(Role::Tools, &ctx());
        let rw: Vec<_> = p.fs.iter().map(|g| (g.path.clone(), g.access)).collect();
        assert_eq!(
            rw,
            vec![
                (PathBuf::from("/w"), FsAccess::ReadWrite),
                (PathBuf::from("/tmp/run"), FsAccess::ReadWrite)
            ]
        );
        assert_eq!(p.sockets, SocketPolicy::None);
        assert_eq!(p.cgroup.max_pids, Some(TOOLS_MAX_PIDS));
        assert_eq!(p.cgroup.max_memory, Some(TOOLS_MAX_MEMORY));
    }

    #[test]
    fn nothing_grants_etc_as_a_whole_or_its_secrets() {
        let all = Role::ALL
            .iter()
            .flat_map(|r| profile_for(*r, &ctx()).fs)
            .chain(launcher_profile(Role::Tools, &ctx(), Tier::B).fs)
            .chain(
                command_profile(Role::Tools, &CommandProfile::bash(Tier::A), &ctx(), Tier::A)
                    .expect("profile")
                    .fs,
            );
        for g in all {
            assert_ne!(g.path, Path::new("/etc"));
            for secret in [
                "shadow",
                "gshadow",
                "ssh",
                "ssl/private",
                "sudoers",
                "kubernetes",
            ] {
                assert!(
                    !g.path.starts_with(Path::new("/etc").join(secret)),
                    "{}",
                    g.path.display()
                );
            }
        }
        for name in COMMAND_ETC.iter().chain(BROKER_ETC) {
            assert!(
                !name.starts_with("ssh") && !name.contains("shadow") && !name.contains("private")
            );
        }
    }

    #[test]
    fn hidden_paths_are_never_granted() {
        let ws_in_home = ProfileContext {
            workspace: Some("/home/u".into()),
            ..ctx()
        };
        assert_eq!(
            ws_in_home.hidden_in_workspace(),
            ws_in_home.hidden,
            "a workspace of the whole home contains both"
        );
        assert!(ctx().hidden_in_workspace().is_empty());
        for h in &ctx().hidden {
            for role in Role::ALL {
                if role == Role::Broker {
                    continue; // its credential directory is the point
                }
                assert!(!profile_for(role, &ctx())
                    .fs
                    .iter()
                    .any(|g| g.path.starts_with(h)));
            }
        }
    }

    #[test]
    fn commands_nest_inside_their_launcher() {
        for tier in [Tier::A, Tier::B] {
            let launcher = launcher_profile(Role::Tools, &ctx(), tier);
            for cmd in [CommandProfile::bash(tier), CommandProfile::hook()] {
                let p = command_profile(Role::Tools, &cmd, &ctx(), tier).expect("profile");
                assert!(p.sockets.within(launcher.sockets), "{tier:?}");
                for g in &p.fs {
                    assert!(
                        launcher.fs.iter().any(|l| g.path.starts_with(&l.path)
                            && (l.access == FsAccess::ReadWrite || g.access == FsAccess::ReadExec)),
                        "{tier:?}: {} not within the launcher",
                        g.path.display()
                    );
                }
                assert!(p.command_rules());
            }
        }
        assert_eq!(
            launcher_profile(Role::Tools, &ctx(), Tier::B).sockets,
            SocketPolicy::InetOnly
        );
        assert_eq!(
            launcher_profile(Role::Tools, &ctx(), Tier::A).sockets,
            SocketPolicy::None
        );
    }

    #[test]
    fn command_networks_follow_the_tier() {
        let mut cmd = CommandProfile::bash(Tier::B);
        assert_eq!(
            command_profile(Role::Tools, &cmd, &ctx(), Tier::A),
            Err(ProfileError::LoopbackNeedsTierB)
        );
        cmd.network = NetAccess::Egress;
        assert_eq!(
            command_profile(Role::Tools, &cmd, &ctx(), Tier::B)
                .expect("egress in tier B")
                .sockets,
            SocketPolicy::InetOnly
        );
        assert_eq!(
            command_profile(Role::Tools, &cmd, &ctx(), Tier::A),
            Err(ProfileError::EgressUnavailable)
        );
        let hook =
            command_profile(Role::Tools, &CommandProfile::hook(), &ctx(), Tier::B).expect("hook");
        assert_eq!(hook.sockets, SocketPolicy::None);
        let ro = CommandProfile {
            fs: FsScope::WorkspaceRo,
            ..CommandProfile::hook()
        };
        let p = command_profile(Role::Lsp, &ro, &ctx(), Tier::A).expect("ro");
        assert!(p
            .fs
            .iter()
            .any(|g| g.path == Path::new("/w") && g.access == FsAccess::ReadExec));
        assert!(!p
            .fs
            .iter()
            .any(|g| g.path == Path::new("/w") && g.access == FsAccess::ReadWrite));
    }

    #[test]
    fn the_mcp_role_writes_the_workspace_only_when_a_server_asks_for_it() {
        let ws = |fs: &[PathGrant]| {
            fs.iter()
                .filter(|g| g.path == Path::new("/w"))
                .map(|g| g.access)
                .collect::<Vec<_>>()
        };
        // By default the worker and its launcher read the workspace only.
        assert_eq!(ws(&profile_for(Role::Mcp, &ctx()).fs), [FsAccess::ReadExec]);
        for tier in [Tier::A, Tier::B] {
            assert_eq!(
                ws(&launcher_profile(Role::Mcp, &ctx(), tier).fs),
                [FsAccess::ReadExec]
            );
        }
        let rw = ProfileContext {
            mcp_workspace_write: true,
            ..ctx()
        };
        assert_eq!(ws(&profile_for(Role::Mcp, &rw).fs), [FsAccess::ReadWrite]);
        for tier in [Tier::A, Tier::B] {
            assert_eq!(
                ws(&launcher_profile(Role::Mcp, &rw, tier).fs),
                [FsAccess::ReadWrite]
            );
        }
        // The flag is the mcp role's alone; the hidden paths stay ungranted.
        for role in [Role::Lsp, Role::Model, Role::Broker] {
            assert_eq!(profile_for(role, &rw), profile_for(role, &ctx()), "{role}");
        }
        assert!(!profile_for(Role::Mcp, &rw)
            .fs
            .iter()
            .any(|g| rw.hidden.iter().any(|h| g.path.starts_with(h))));
    }

    #[test]
    fn the_mcp_roles_extra_reads_are_its_own_and_read_only() {
        let with = ProfileContext {
            mcp_extra_read: vec!["/srv/docs".into()],
            ..ctx()
        };
        let docs = |fs: &[PathGrant]| {
            fs.iter()
                .filter(|g| g.path == Path::new("/srv/docs"))
                .map(|g| g.access)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            docs(&profile_for(Role::Mcp, &with).fs),
            [FsAccess::ReadExec]
        );
        assert!(docs(&profile_for(Role::Mcp, &ctx()).fs).is_empty());
        for tier in [Tier::A, Tier::B] {
            assert_eq!(
                docs(&launcher_profile(Role::Mcp, &with, tier).fs),
                [FsAccess::ReadExec]
            );
            for role in [Role::Tools, Role::Lsp] {
                assert!(
                    docs(&launcher_profile(role, &with, tier).fs).is_empty(),
                    "{role}"
                );
            }
        }
        for role in [Role::Tools, Role::Lsp, Role::Model, Role::Broker] {
            assert_eq!(
                profile_for(role, &with),
                profile_for(role, &ctx()),
                "{role}"
            );
        }
    }

    #[test]
    fn in_tier_b_a_workspace_under_tmp_is_not_reached_through_the_private_tmp() {
        let in_tmp = ProfileContext {
            workspace: Some("/tmp/ws".into()),
            ..ctx()
        };
        let tmp = |fs: FsScope, ctx: &ProfileContext| {
            let cmd = CommandProfile {
                fs,
                ..CommandProfile::hook()
            };
            command_profile(Role::Mcp, &cmd, ctx, Tier::B)
                .expect("profile")
                .fs
                .into_iter()
                .filter(|g| g.path == Path::new("/tmp"))
                .map(|g| g.access)
                .collect::<Vec<_>>()
        };
        // Elsewhere, every command writes its private /tmp.
        for fs in [FsScope::None, FsScope::WorkspaceRo, FsScope::WorkspaceRw] {
            assert_eq!(tmp(fs, &ctx()), [FsAccess::ReadWrite], "{fs:?}");
        }
        // Under /tmp, no wider than the workspace.
        assert_eq!(tmp(FsScope::WorkspaceRw, &in_tmp), [FsAccess::ReadWrite]);
        assert_eq!(tmp(FsScope::WorkspaceRo, &in_tmp), [FsAccess::ReadExec]);
        assert!(tmp(FsScope::None, &in_tmp).is_empty());
    }

    #[test]
    fn language_server_prefixes_reach_the_lsp_role_alone() {
        let with = ProfileContext {
            toolchains: vec!["/home/u/.npm-global/lib/node_modules".into()],
            ..ctx()
        };
        let prefix = Path::new("/home/u/.npm-global/lib/node_modules");
        let has = |fs: &[PathGrant]| {
            fs.iter()
                .any(|g| g.path == prefix && g.access == FsAccess::ReadExec)
        };
        assert!(has(&profile_for(Role::Lsp, &with).fs));
        assert!(has(&launcher_profile(Role::Lsp, &with, Tier::A).fs));
        for role in [Role::Tools, Role::Mcp, Role::Model, Role::Broker] {
            assert!(!has(&profile_for(role, &with).fs), "{role}");
            assert!(!has(&launcher_profile(role, &with, Tier::A).fs), "{role}");
        }
        // A server granted its prefix nests inside the launcher.
        let server = CommandProfile {
            fs: FsScope::WorkspaceRo,
            extra_read: with.toolchains.clone(),
            ..CommandProfile::hook()
        };
        let p = command_profile(Role::Lsp, &server, &with, Tier::A).expect("server");
        assert!(has(&p.fs));
        assert!(!has(&profile_for(Role::Lsp, &ctx()).fs));
    }

    #[test]
    fn socket_policies_order_by_reach() {
        use SocketPolicy::*;
        assert!(None.within(InetOnly) && None.within(UnixOnly) && InetOnly.within(Any));
        assert!(!InetOnly.within(UnixOnly) && !UnixOnly.within(InetOnly) && !Any.within(InetOnly));
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
}
