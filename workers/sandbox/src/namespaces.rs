//! Tier B: user, mount, pid, net and ipc namespaces, created once by a process (the tools worker,
//! the one-shot sandbox) before it confines itself, so that every command it later runs is
//! already inside them and costs one fork+exec, not a namespace set-up.
//!
//! [`enter_with`] must run in a single-threaded process, before capabilities are dropped and
//! before seccomp (which refuses namespace creation and `mount`). It:
//!
//! 1. `clone`s a child into new user, mount, pid, net and ipc namespaces; the caller (outside,
//!    untouched) writes the child's uid and gid maps (its own ids to themselves; `setgroups`
//!    denied) while the child waits, dumpable for that moment so a non-root caller may write them
//!    (a non-dumpable process's `/proc` files belong to root);
//! 2. the child, pid 1 of the new pid namespace, joins the caller's cgroups, sets up the mounts
//!    (below) and brings `lo` up, and tells the caller whether that worked. Only then is the
//!    caller committed: when anything failed it is still in its own namespaces and may go on in
//!    tier A (`auto`) — the reason comes back as [`NamespaceError::Setup`];
//! 3. pid 1 runs its hook (the tools worker forks its command launcher there), forks pid 2 — the
//!    worker, or the one-shot's command — and from then on only reaps orphans until pid 2 ends,
//!    forwarding terminal signals to it when asked, under the reaper's seccomp allow-list;
//! 4. the caller waits for pid 1 ([`Parent::wait`]), also under the reaper's allow-list for a
//!    worker, and passes on its status. Killing the caller kills pid 1 (parent-death signal) and
//!    with it every process of the namespace.
//!
//! The mounts, in a mount namespace of its own (private: nothing propagates back):
//!
//! - the **whole host filesystem read-only** (`mount_setattr(AT_RECURSIVE, MOUNT_ATTR_RDONLY)` on
//!   `/`, or each mount remounted read-only on kernels without it), so `chmod`, `chown`,
//!   `utimensat`, `setxattr` and `chattr` anywhere outside fail with `EROFS`;
//! - **private, size-limited** tmpfs over `/tmp`, `/var/tmp`, `/dev/shm` (what programs expect to
//!   write), and **empty read-only** tmpfs over `/run`, `/root`, `/home` (host sockets, agents,
//!   other users' files);
//! - a **tmpfs over `/etc`** holding only the listed entries, bound back read-only (symlinks
//!   recreated): `/etc/shadow`, SSH host keys and TLS private keys are not there at all;
//! - the kept paths bound back where they were: the workspace, the run directory and extra
//!   writable trees read-write, extra readable trees read-only;
//! - every **hidden** path (hanzo's configuration and data directories) behind an empty read-only
//!   mount, also inside the workspace;
//! - every **protected** path (the git directory, its `commondir`/`gitdir` targets, the effective
//!   hooks directory, `.hanzo/`) bound read-only over itself, and every directory between the
//!   workspace and it pinned by a bind over itself: a mount point cannot be renamed or removed
//!   (`EBUSY`), so `.git` (or a directory holding it) cannot be moved away and recreated;
//! - a fresh `/proc` for the new pid namespace when the kernel allows it (a container's masked
//!   `/proc` makes the kernel refuse; the old one stays, and Landlock keeps `/proc` out of the
//!   tools role's reach anyway).
//!
//! In the new network namespace pid 1 brings `lo` up (`SIOCSIFFLAGS`, while it still holds
//! `CAP_NET_ADMIN` over the namespace): commands that may create inet sockets get a loopback of
//! their own — a test suite's local server works — and no route anywhere else: the host's
//! `127.0.0.1` is another namespace's loopback.

use crate::sys::errno_name;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// What tier B sets up.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TierB {
    /// Directories hidden behind an empty read-only tmpfs (skipped when absent or a symlink).
    pub hide: Vec<PathBuf>,
    /// Directories replaced by a private, writable tmpfs of `tmp_size` bytes.
    pub private_tmp: Vec<PathBuf>,
    /// The size of each private tmpfs, in bytes.
    pub tmp_size: u64,
    /// Entries of `/etc` that stay (everything else under `/etc` disappears).
    pub etc: Vec<String>,
    /// Paths bound back writable where they are (the workspace, the run directory, …).
    pub keep_rw: Vec<PathBuf>,
    /// Paths bound back read-only where they are.
    pub keep_ro: Vec<PathBuf>,
    /// Paths hidden behind an empty read-only mount wherever they are, the workspace included.
    pub masked: Vec<PathBuf>,
    /// Paths made read-only and not renameable (skipped when absent).
    pub protected: Vec<PathBuf>,
    /// The tree within which every ancestor of a protected path is pinned (the workspace).
    pub pin_within: Option<PathBuf>,
    /// `cgroup.procs` files pid 1 joins first (the one-shot sandbox's cgroup; a worker is in
    /// its cgroup already).
    pub join_cgroups: Vec<RawFd>,
    /// Pid 1 forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT to pid 2's process group (the one-shot
    /// sandbox: ^C still reaches the command).
    pub forward_signals: bool,
}

/// Directories tier B hides by default behind an empty read-only tmpfs.
pub const DEFAULT_HIDE: &[&str] = &["/run", "/root", "/home"];

/// Paths inside a workspace that tier B makes read-only: what runs later outside the sandbox
/// (git hooks, git configuration with its `core.hooksPath`/aliases, hanzo's own settings). The
/// data lives in `policy`; the complete set (the whole git directory wherever it is, the
/// effective hooks path, included configuration, …) is `hanzo_tools::paths::protected_paths`.
pub use hanzo_policy::git::PROTECTED_IN_WORKSPACE;
/// Directories tier B replaces by a private, writable, size-limited tmpfs (the list lives in
/// `policy`, which also refuses a configured read path beneath one).
pub use hanzo_policy::profile::PRIVATE_TMP_DIRS as DEFAULT_PRIVATE_TMP;

impl TierB {
    /// The set-up for a workspace: `keep_rw` (the workspace first, then the run directory and
    /// extra writable trees), `keep_ro`, the paths to hide whatever the workspace is, the
    /// protected paths inside it, and the `/etc` entries programs may read.
    pub fn new(
        keep_rw: Vec<PathBuf>,
        keep_ro: Vec<PathBuf>,
        masked: Vec<PathBuf>,
        protected: Vec<PathBuf>,
        etc: &[&str],
        tmp_size: u64,
    ) -> TierB {
        TierB {
            hide: DEFAULT_HIDE.iter().map(PathBuf::from).collect(),
            private_tmp: DEFAULT_PRIVATE_TMP.iter().map(PathBuf::from).collect(),
            tmp_size,
            etc: etc.iter().map(|s| s.to_string()).collect(),
            pin_within: keep_rw.first().cloned(),
            keep_rw,
            keep_ro,
            masked,
            protected,
            join_cgroups: Vec::new(),
            forward_signals: false,
        }
    }
}

/// Why tier B's namespaces could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum NamespaceError {
    /// Another thread exists, and `unshare(CLONE_NEWUSER)` refuses a multi-threaded caller.
    #[error(
        "tier B needs a single-threaded process (user namespaces refuse a multi-threaded caller)"
    )]
    Threads,
    /// The kernel refused the new namespaces (user namespaces off or limited).
    #[error("clone(user|mount|pid|net|ipc): {0}")]
    Unshare(#[source] io::Error),
    /// A uid or gid map could not be written.
    #[error("writing {file}: {source}")]
    IdMap {
        /// Which file under `/proc/PID` (`uid_map`, `gid_map`, `setgroups`).
        file: String,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
    /// The pipe to the namespace's first process failed.
    #[error("a pipe to the namespace's first process: {0}")]
    Pipe(#[source] io::Error),
    /// The namespace's first process failed or ended before it was set up (what it said).
    #[error("setting up the namespace: {0}")]
    Setup(String),
    /// The namespace's first process could not be forked.
    #[error("fork: {0}")]
    Fork(#[source] io::Error),
    /// A mount of the private filesystem view failed.
    #[error("{what} {path}: {source}")]
    Mount {
        /// What kind (`bind`, `tmpfs`, `remount`, …).
        what: &'static str,
        /// Where.
        path: PathBuf,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
}

impl NamespaceError {
    /// Whether the caller is untouched (still in its own namespaces, nothing forked that lives
    /// on), so that it may go on in tier A.
    pub fn can_fall_back(&self) -> bool {
        !matches!(self, NamespaceError::Fork(_) | NamespaceError::Mount { .. })
    }
}

/// The namespaces this process entered with [`enter_with`], for its attestation (empty
/// otherwise). The network namespace says what its processes can reach (see [`describe_net`]).
pub fn entered() -> Vec<String> {
    ENTERED.lock().map(|v| v.clone()).unwrap_or_default()
}

/// Say what the network namespace gives the commands, e.g. `net (loopback for commands)`; the
/// default after [`enter_with`] is `net (lo up)` or `net (no interface up)`.
pub fn describe_net(what: &str) {
    if let Ok(mut v) = ENTERED.lock() {
        for name in v.iter_mut() {
            if name == "net" || name.starts_with("net (") {
                *name = format!("net ({what})");
            }
        }
    }
}

/// Whether `lo` came up in the namespace [`enter_with`] made.
pub fn loopback_up() -> bool {
    LOOPBACK_UP.get().copied().unwrap_or(false)
}

/// Notes about parts of tier B the kernel refused (e.g. a fresh `/proc`), for the attestation.
pub fn notes() -> Vec<String> {
    NOTES.get().cloned().unwrap_or_default()
}

static ENTERED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
static NOTES: OnceLock<Vec<String>> = OnceLock::new();
static LOOPBACK_UP: OnceLock<bool> = OnceLock::new();

const NS_NAMES: [&str; 5] = ["user", "mount", "pid", "net", "ipc"];

/// Which process [`enter_with`] returned in.
#[derive(Debug)]
pub enum Side {
    /// Pid 2 of the new namespaces: go on with the work.
    Child,
    /// The original process, with pid 1 running: it should [`Parent::wait`] and exit with the
    /// status, doing nothing else.
    Parent(Parent),
}

/// The original process's handle on pid 1.
#[derive(Debug)]
pub struct Parent {
    pid1: libc::pid_t,
}

/// How the original process waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitAs {
    /// Close every fd above 2, drop every capability and confine itself with the reaper's
    /// allow-list first (a worker's waiting process: nothing to do but wait).
    pub confine: bool,
    /// Forward SIGINT, SIGTERM, SIGHUP and SIGQUIT to pid 1 (which passes them on).
    pub forward_signals: bool,
}

impl Parent {
    /// Pid 1's pid in the caller's namespace.
    pub fn pid1(&self) -> libc::pid_t {
        self.pid1
    }

    /// Wait for pid 1 and return its status as an exit code (128 + signal when killed).
    pub fn wait(self, how: WaitAs) -> i32 {
        if how.forward_signals {
            crate::signals::forward(self.pid1);
        }
        if how.confine {
            // SAFETY: close_range closes fds of our own table; this process uses none of them
            // again (pid 1 and pid 2 have their own copies).
            unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
            if let Err(e) = crate::confine::confine_reaper(hanzo_ipc::Role::Tools) {
                eprintln!("hanzo-dev: tier B's waiting process could not confine itself: {e}");
            }
        }
        wait_for(self.pid1)
    }
}

/// Enter tier B (see the module documentation), with `pid1` run by pid 1 once the mounts are made
/// and `lo` is up (its argument: whether `lo` came up), just before it forks pid 2: still
/// single-threaded, unconfined and holding its capabilities over the namespaces. The tools worker
/// forks its command launcher there, as the worker's sibling; whatever `pid1` sets in memory,
/// pid 2 inherits. Returns in pid 2 (`Side::Child`) and in the caller (`Side::Parent`).
pub fn enter_with(cfg: &TierB, pid1: impl FnOnce(bool)) -> Result<Side, NamespaceError> {
    let threads = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|v| v.trim().parse::<u32>().ok())
        })
        .unwrap_or(0);
    if threads != 1 {
        return Err(NamespaceError::Threads);
    }
    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
    // go: the caller → pid 1, "the maps are written"; ready: pid 1 → the caller, "set up" or why not.
    let (go_read, go_write) = std::io::pipe().map_err(NamespaceError::Pipe)?;
    let (mut ready_read, ready_write) = std::io::pipe().map_err(NamespaceError::Pipe)?;
    let parent = nix::unistd::getpid();
    let flags = libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWIPC;
    // SAFETY: a fork-like clone (no stack, no thread pointers) from a single-threaded process
    // (checked above): the child is a complete copy that may go on using std, as after fork.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::c_ulong::from((flags | libc::SIGCHLD).cast_unsigned()),
            0,
            0,
            0,
            0,
        )
    };
    if pid < 0 {
        return Err(NamespaceError::Unshare(io::Error::last_os_error()));
    }
    if pid == 0 {
        drop(go_write);
        drop(ready_read);
        pid1_main(cfg, parent, go_read, ready_write, pid1);
        // pid1_main returns only in pid 2.
        return Ok(Side::Child);
    }
    let pid = crate::sys::syscall_int(pid);
    drop(go_read);
    drop(ready_write);
    // Wait until pid 1 is dumpable ("D"): it inherits this process's dumpable flag, and the
    // supervisor and the one-shot make themselves non-dumpable early, so writing the maps
    // before pid 1 flipped it would race (a non-root caller then gets EACCES on `setgroups`).
    let mut dumpable = [0u8; 1];
    let maps = match ready_read.read_exact(&mut dumpable) {
        Ok(()) if dumpable[0] == b'D' => write_id_maps(pid, uid.as_raw(), gid.as_raw()),
        _ => Err(NamespaceError::Setup(
            "the namespace's first process ended before its id maps were written".to_string(),
        )),
    };
    // "G" tells pid 1 to go on; closing without it, to stop.
    let mut go_write = go_write;
    if maps.is_ok() {
        let _ = go_write.write_all(b"G");
    }
    drop(go_write);
    let mut answer = Vec::new();
    let _ = ready_read.read_to_end(&mut answer);
    let failed = |why: NamespaceError| -> Result<Side, NamespaceError> {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
        Err(why)
    };
    if let Err(e) = maps {
        return failed(e);
    }
    match answer.first() {
        Some(b'K') => Ok(Side::Parent(Parent { pid1: pid })),
        Some(b'E') => failed(NamespaceError::Setup(
            String::from_utf8_lossy(&answer[1..]).into_owned(),
        )),
        _ => failed(NamespaceError::Setup(
            "the namespace's first process ended before it was set up".to_string(),
        )),
    }
}

/// The caller writes pid 1's maps: its own uid and gid to themselves, `setgroups` denied first
/// (required before an unprivileged `gid_map`).
fn write_id_maps(pid: libc::pid_t, uid: u32, gid: u32) -> Result<(), NamespaceError> {
    let write = |file: &str, text: String| {
        let path = format!("/proc/{pid}/{file}");
        std::fs::write(&path, text).map_err(|source| NamespaceError::IdMap { file: path, source })
    };
    write("setgroups", "deny".to_string())?;
    write("uid_map", format!("{uid} {uid} 1\n"))?;
    write("gid_map", format!("{gid} {gid} 1\n"))
}

/// Pid 1: wait for the maps, set up, report, run the hook, fork pid 2 and reap. Returns only in
/// pid 2.
fn pid1_main(
    cfg: &TierB,
    parent: nix::unistd::Pid,
    go: impl Read,
    mut ready: impl Write,
    hook: impl FnOnce(bool),
) {
    // Die with the caller (the supervisor's handle on the worker, or the one-shot's process).
    // Whether it died before this took effect shows below: it never says "go" (`getppid` is 0
    // across the pid namespace's border either way).
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::SIGKILL);
    let _ = parent;
    // Dumpable while the caller writes our maps (a non-dumpable process's /proc files belong to
    // root, which a non-root caller is not); not a moment longer.
    let _ = nix::sys::prctl::set_dumpable(true);
    if ready.write_all(b"D").is_err() {
        // SAFETY: _exit ends the process without running anything else.
        unsafe { libc::_exit(1) }
    }
    let mut go = go;
    let mut said = [0u8; 1];
    let went = go.read(&mut said).is_ok_and(|n| n == 1 && said[0] == b'G');
    let _ = nix::sys::prctl::set_dumpable(false);
    if !went {
        // SAFETY: _exit ends the process without running anything else.
        unsafe { libc::_exit(1) }
    }
    let mut notes = Vec::new();
    let set_up = (|| -> Result<bool, NamespaceError> {
        for &procs in &cfg.join_cgroups {
            // SAFETY: the fd is borrowed for one write; the caller keeps it open.
            let file = std::mem::ManuallyDrop::new(unsafe { File::from_raw_fd(procs) });
            (&*file)
                .write_all(b"0")
                .map_err(|source| NamespaceError::Mount {
                    what: "joining the cgroup through",
                    path: PathBuf::from(format!("fd {procs}")),
                    source,
                })?;
        }
        set_up_mounts(cfg, &mut notes)?;
        Ok(match bring_loopback_up() {
            Ok(()) => true,
            Err(e) => {
                notes.push(format!(
                    "lo could not be brought up ({e}): no network at all"
                ));
                false
            }
        })
    })();
    let lo = match set_up {
        Ok(lo) => {
            let _ = ready.write_all(b"K");
            lo
        }
        Err(e) => {
            let _ = ready.write_all(format!("E{e}").as_bytes());
            // SAFETY: _exit ends the process without running anything else.
            unsafe { libc::_exit(1) }
        }
    };
    drop(ready);
    // A panic in the hook ends pid 1 here: unwinding would run the caller's destructors (its
    // temporary directories, its descriptors) in pid 1, a copy that owns none of them.
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(lo))).is_err() {
        // SAFETY: _exit ends the process without running anything else.
        unsafe { libc::_exit(1) }
    }
    // Pid 1 of the namespace only reaps. Orphans (what a command left running) are re-parented
    // to pid 1; were that the worker, their zombies would pile up.
    // SAFETY: single-threaded, so the child is a complete copy; the parent side only reaps.
    let child = unsafe { libc::fork() };
    if child < 0 {
        // SAFETY: _exit ends the process without running anything else.
        unsafe { libc::_exit(1) }
    }
    if child > 0 {
        reap_until(child, cfg.forward_signals);
    }
    // Pid 2: die with pid 1 (and so with the caller).
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::SIGKILL);
    if let Ok(mut v) = ENTERED.lock() {
        *v = NS_NAMES.iter().map(|s| s.to_string()).collect();
    }
    describe_net(if lo { "lo up" } else { "no interface up" });
    let _ = LOOPBACK_UP.set(lo);
    let _ = NOTES.set(notes);
}

fn wait_for(pid: libc::pid_t) -> i32 {
    loop {
        match nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None) {
            Ok(nix::sys::wait::WaitStatus::Exited(_, code)) => return code,
            Ok(nix::sys::wait::WaitStatus::Signaled(_, sig, _)) => return 128 + sig as i32,
            Ok(_) => continue,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return 1,
        }
    }
}

/// Pid 1's whole life after forking pid 2: close every fd, drop every capability, confine itself
/// with the reaper's allow-list, then reap every child until pid 2 ends and exit with its status
/// (which ends the namespace: the kernel kills whatever is left in it).
fn reap_until(worker: libc::pid_t, forward_signals: bool) -> ! {
    // SAFETY: close_range closes fds of our own table; pid 1 uses none of them (pid 2 has its
    // own copies). Stderr stays for the seccomp reporter.
    unsafe {
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
    }
    if forward_signals {
        // To pid 2's process group: pid 2 is a session leader (a command is spawned with a new
        // session), so the command and what stayed in its group get it, as from a terminal.
        crate::signals::forward(-worker);
    }
    if let Err(e) = crate::confine::confine_reaper(hanzo_ipc::Role::Tools) {
        eprintln!("hanzo-dev: tier B's pid 1 could not confine itself: {e}");
    }
    loop {
        let mut status = 0;
        // SAFETY: waiting for any child, writing into our local.
        let r = unsafe { libc::waitpid(-1, &mut status, 0) };
        let code = if r == worker {
            if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                128 + libc::WTERMSIG(status)
            }
        } else if r < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            1
        } else {
            continue;
        };
        // SAFETY: _exit ends the process without running anything else.
        unsafe { libc::_exit(code) }
    }
}

/// `IFF_UP`, which libc types as an `int`, in the `short` of `ifr_flags`.
#[allow(clippy::cast_possible_truncation, reason = "IFF_UP is 1")]
const IFF_UP: libc::c_short = libc::IFF_UP as libc::c_short;

/// `ip link set lo up`, without `ip`: read the flags of `lo`, add `IFF_UP`, write them back.
/// Raw: no crate wraps `SIOCGIFFLAGS`/`SIOCSIFFLAGS`.
fn bring_loopback_up() -> io::Result<()> {
    let sock = nix::sys::socket::socket(
        nix::sys::socket::AddressFamily::Inet,
        nix::sys::socket::SockType::Datagram,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(io::Error::from)?;
    // SAFETY: an all-zero ifreq is valid (an empty name, zero flags).
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = libc::c_char::from_ne_bytes([*src]);
    }
    // SAFETY: SIOCGIFFLAGS reads the name and writes the flags of our ifreq.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS as _, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel filled the union's flags member.
    unsafe { req.ifr_ifru.ifru_flags |= IFF_UP };
    // SAFETY: SIOCSIFFLAGS reads our ifreq.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS as _, &req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn mount_err<'a>(
    what: &'static str,
    path: &'a Path,
) -> impl FnOnce(nix::Error) -> NamespaceError + 'a {
    move |e| NamespaceError::Mount {
        what,
        path: path.to_path_buf(),
        source: io::Error::from(e),
    }
}

fn mount(
    what: &'static str,
    source: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: nix::mount::MsFlags,
    data: Option<&str>,
) -> Result<(), NamespaceError> {
    nix::mount::mount(source, target, fstype, flags, data).map_err(mount_err(what, target))
}

use nix::mount::MsFlags;

/// Flags of the mount holding `path` that a user namespace may not clear on a remount.
fn locked_flags(path: &Path) -> MsFlags {
    let Ok(st) = nix::sys::statvfs::statvfs(path) else {
        return MsFlags::empty();
    };
    use nix::sys::statvfs::FsFlags;
    let f = st.flags();
    let mut flags = MsFlags::empty();
    for (st_flag, ms_flag) in [
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
    ] {
        if f.contains(st_flag) {
            flags |= ms_flag;
        }
    }
    // `ST_RELATIME` by its value (linux/statfs.h): nix defines the constant for glibc only, and
    // the musl build must keep the flag too.
    const ST_RELATIME: libc::c_ulong = 0x1000;
    if f.bits() & ST_RELATIME != 0 {
        flags |= MsFlags::MS_RELATIME;
    }
    flags
}

/// Remount the mount at `path` (a bind) read-only or read-write, keeping its locked flags.
fn remount_bind(path: &Path, read_only: bool) -> Result<(), NamespaceError> {
    let mut flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | locked_flags(path);
    if read_only {
        flags |= MsFlags::MS_RDONLY;
    }
    mount(
        if read_only {
            "making read-only"
        } else {
            "making writable"
        },
        None,
        path,
        None,
        flags,
        None,
    )
}

/// `struct mount_attr` from `<linux/mount.h>`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}
const MOUNT_ATTR_RDONLY: u64 = 0x0000_0001;

/// Every mount of this namespace read-only at once (Linux 5.12's `mount_setattr` with
/// `AT_RECURSIVE`), else each mount listed in `/proc/self/mountinfo` remounted read-only.
/// Raw: no crate wraps `mount_setattr`.
fn make_everything_read_only(notes: &mut Vec<String>) -> Result<(), NamespaceError> {
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: mount_setattr reads `size_of::<MountAttr>()` bytes from our struct and a
    // NUL-terminated path literal.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            c"/".as_ptr(),
            libc::AT_RECURSIVE as libc::c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r == 0 {
        return Ok(());
    }
    notes.push(format!(
        "mount_setattr: {}; remounting each mount read-only instead",
        errno_name(crate::sys::errno())
    ));
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for line in mountinfo.lines() {
        let Some(mp) = line.split_whitespace().nth(4) else {
            continue;
        };
        let mp = PathBuf::from(unescape_mountinfo(mp));
        if let Err(e) = remount_bind(&mp, true) {
            // A mount we cannot make read-only (a locked one) keeps its state; say so.
            notes.push(format!("{e}"));
        }
    }
    Ok(())
}

/// `/proc/self/mountinfo` escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 4 <= b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The names inside a git directory that stay read-only in the git view ([`open_git_view`]):
/// everything git reads that can name a program or another repository (configuration, hooks,
/// `info/` with its attributes and excludes, the links of worktrees and submodules).
pub const GIT_VIEW_READ_ONLY: &[&str] = &[
    "config",
    "config.worktree",
    "hooks",
    "info",
    "commondir",
    "gitdir",
    "modules",
    "worktrees",
    "objects/info/alternates",
];

/// Turns this process's view into the **git view** of tier B: a mount namespace of its own in
/// which the git directory `git_dir` (bound read-only over itself by [`enter_with`]) is writable
/// again — objects, refs, the index, `HEAD` — except [`GIT_VIEW_READ_ONLY`] and every path in
/// `keep_read_only` (the effective hooks directory, …), which are bound read-only again. Only the
/// git tool's own launcher runs here (`hanzo_tools::launcher`); every other command keeps the
/// view in which the whole git directory is read-only and cannot be renamed.
///
/// Call it in a single-threaded child of tier B's pid 1 (it needs the namespace's
/// `CAP_SYS_ADMIN`), before it confines itself. `git_dir` must be a directory that tier B
/// protected (a mount point); anything else is refused and the view is left as it was.
pub fn open_git_view(git_dir: &Path, keep_read_only: &[PathBuf]) -> Result<(), NamespaceError> {
    let is_mount_point = std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|info| {
        info.lines().any(|l| {
            l.split(' ')
                .nth(4)
                .is_some_and(|mp| Path::new(&unescape_mountinfo(mp)) == git_dir)
        })
    });
    if !is_real_dir(git_dir) || !is_mount_point {
        return Err(NamespaceError::Setup(format!(
            "{} is not a protected git directory",
            git_dir.display()
        )));
    }
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)
        .map_err(|e| NamespaceError::Unshare(io::Error::from(e)))?;
    mount(
        "making mounts private",
        None,
        Path::new("/"),
        None,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None,
    )?;
    // Listed while the whole directory is still protected.
    let mut kept: Vec<PathBuf> = GIT_VIEW_READ_ONLY
        .iter()
        .map(|n| git_dir.join(n))
        .chain(
            keep_read_only
                .iter()
                .filter(|p| p.starts_with(git_dir) && p.as_path() != git_dir)
                .cloned(),
        )
        .filter(|p| std::fs::symlink_metadata(p).is_ok())
        .collect();
    kept.sort_by_key(|p| p.components().count());
    kept.dedup();
    nix::mount::umount2(git_dir, nix::mount::MntFlags::MNT_DETACH)
        .map_err(mount_err("unmounting", git_dir))?;
    if is_read_only(git_dir) {
        return Err(NamespaceError::Setup(format!(
            "{} is read-only beneath its protection (outside the workspace?)",
            git_dir.display()
        )));
    }
    for p in kept {
        mount(
            "binding",
            Some(&p),
            &p,
            None,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None,
        )?;
        remount_bind(&p, true)?;
    }
    Ok(())
}

/// A path held open (`O_PATH`) before anything is hidden, to bind back from.
struct Held {
    path: PathBuf,
    file: File,
    is_dir: bool,
}

fn hold(path: &Path) -> Option<Held> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let is_dir = file.metadata().is_ok_and(|m| m.is_dir());
    Some(Held {
        path: path.to_path_buf(),
        file,
        is_dir,
    })
}

impl Held {
    fn source(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
    }
}

/// Make `path` exist as a mount point of the right kind (in a tmpfs we made, or already there).
fn mount_point(path: &Path, is_dir: bool) -> Result<(), NamespaceError> {
    let made = if is_dir {
        std::fs::create_dir_all(path)
    } else if path.exists() {
        Ok(())
    } else {
        path.parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| File::create(path).map(drop))
    };
    made.map_err(|source| NamespaceError::Mount {
        what: "making a mount point for",
        path: path.to_path_buf(),
        source,
    })
}

fn bind(held: &Held, read_only: bool) -> Result<(), NamespaceError> {
    mount_point(&held.path, held.is_dir)?;
    mount(
        "binding back",
        Some(&held.source()),
        &held.path,
        None,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None,
    )?;
    // A bind copies the source mount's read-only flag, and the whole host is read-only by now:
    // a read-only bind needs no remount (one mount call instead of two for each of the few
    // dozen `/etc` entries) — checked, not assumed, so a source that somehow is writable is
    // still remounted.
    if read_only && is_read_only(&held.path) {
        return Ok(());
    }
    remount_bind(&held.path, read_only)
}

/// Whether the mount holding `path` is read-only.
fn is_read_only(path: &Path) -> bool {
    nix::sys::statvfs::statvfs(path)
        .is_ok_and(|st| st.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY))
}

fn tmpfs(path: &Path, mode: &str, size: u64) -> Result<(), NamespaceError> {
    mount(
        "mounting a tmpfs over",
        Some(Path::new("tmpfs")),
        path,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(&format!("mode={mode},size={size}")),
    )
}

fn remount_tmpfs_read_only(path: &Path) -> Result<(), NamespaceError> {
    mount(
        "making read-only",
        None,
        path,
        None,
        MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        None,
    )
}

fn is_real_dir(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir())
}

fn set_up_mounts(cfg: &TierB, notes: &mut Vec<String>) -> Result<(), NamespaceError> {
    // Nothing we do from here propagates back to the host.
    mount(
        "making mounts private",
        None,
        Path::new("/"),
        None,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None,
    )?;
    // Hold what is bound back before hiding what contains it.
    let keep_rw: Vec<Held> = cfg.keep_rw.iter().filter_map(|p| hold(p)).collect();
    let keep_ro: Vec<Held> = cfg.keep_ro.iter().filter_map(|p| hold(p)).collect();
    let etc: Vec<(String, Result<Held, PathBuf>)> = cfg
        .etc
        .iter()
        .filter_map(|name| {
            let path = Path::new("/etc").join(name);
            let meta = std::fs::symlink_metadata(&path).ok()?;
            if meta.file_type().is_symlink() {
                // Recreated, not bound: a bind would follow it, and its target may be hidden.
                std::fs::read_link(&path)
                    .ok()
                    .map(|t| (name.clone(), Err(t)))
            } else {
                hold(&path).map(|h| (name.clone(), Ok(h)))
            }
        })
        .collect();

    // 1. The whole host read-only.
    make_everything_read_only(notes)?;

    // 2. Hidden directories (read-only below, once the kept paths are bound back inside them)
    // and private temporary directories.
    let hidden: Vec<&PathBuf> = cfg.hide.iter().filter(|d| is_real_dir(d)).collect();
    for dir in &hidden {
        tmpfs(dir, "0755", 1 << 20)?;
    }
    for dir in cfg.private_tmp.iter().filter(|d| is_real_dir(d)) {
        tmpfs(dir, "1777", cfg.tmp_size.max(1 << 20))?;
    }

    // 3. /etc: only the listed entries.
    if is_real_dir(Path::new("/etc")) {
        tmpfs(Path::new("/etc"), "0755", 1 << 20)?;
        for (name, entry) in &etc {
            let path = Path::new("/etc").join(name);
            match entry {
                Ok(held) => bind(held, true)?,
                Err(target) => {
                    if let Some(parent) = path.parent() {
                        let _ = std::fs::create_dir_all(parent);
                    }
                    std::os::unix::fs::symlink(target, &path).map_err(|source| {
                        NamespaceError::Mount {
                            what: "recreating the symlink",
                            path: path.clone(),
                            source,
                        }
                    })?;
                }
            }
        }
        remount_tmpfs_read_only(Path::new("/etc"))?;
    }

    // 4. The kept paths, where they were.
    for held in &keep_rw {
        bind(held, false)?;
    }
    for held in &keep_ro {
        bind(held, true)?;
    }
    for dir in &hidden {
        remount_tmpfs_read_only(dir)?;
    }

    // 5. Protected paths: pin every directory between the workspace and each (shallowest
    // first), then bind each read-only over itself.
    let mut protected: Vec<&PathBuf> = cfg
        .protected
        .iter()
        .filter(|p| std::fs::symlink_metadata(p).is_ok())
        .collect();
    protected.sort_by_key(|p| p.components().count());
    if let Some(root) = &cfg.pin_within {
        let mut pins: Vec<PathBuf> = Vec::new();
        for p in &protected {
            let mut a = p.parent();
            while let Some(dir) = a {
                if !dir.starts_with(root) || dir == root.as_path() {
                    break;
                }
                if !pins.iter().any(|x| x == dir) {
                    pins.push(dir.to_path_buf());
                }
                a = dir.parent();
            }
        }
        pins.sort_by_key(|p| p.components().count());
        for dir in pins {
            mount(
                "pinning",
                Some(&dir),
                &dir,
                None,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None,
            )?;
        }
    }
    for p in protected {
        mount(
            "binding",
            Some(p),
            p,
            None,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None,
        )?;
        remount_bind(p, true)?;
    }

    // 6. Hidden paths, wherever they are (an empty read-only tmpfs over a directory, an empty
    // read-only file over a file).
    for path in &cfg.masked {
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            continue;
        };
        if meta.is_dir() {
            tmpfs(path, "0500", 4096)?;
            remount_tmpfs_read_only(path)?;
        } else if meta.is_file() {
            mount(
                "hiding",
                Some(Path::new("/dev/null")),
                path,
                None,
                MsFlags::MS_BIND,
                None,
            )?;
            remount_bind(path, true)?;
        }
    }

    // 7. A /proc of this pid namespace.
    if let Err(e) = mount(
        "mounting a fresh",
        Some(Path::new("proc")),
        Path::new("/proc"),
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None,
    ) {
        notes.push(format!(
            "no fresh /proc for the pid namespace ({e}); the host's stays mounted"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_set_up_keeps_protects_and_hides_what_it_is_given() {
        let b = TierB::new(
            vec!["/w".into(), "/tmp/run".into()],
            vec!["/opt/tc".into()],
            vec!["/home/u/.config/hanzo".into()],
            vec!["/w/.git".into(), "/w/.hanzo".into()],
            &["passwd"],
            1 << 20,
        );
        assert_eq!(b.keep_rw, [PathBuf::from("/w"), PathBuf::from("/tmp/run")]);
        assert_eq!(b.pin_within, Some(PathBuf::from("/w")));
        assert!(b.private_tmp.contains(&PathBuf::from("/tmp")));
        assert!(
            b.hide.contains(&PathBuf::from("/root")) && b.hide.contains(&PathBuf::from("/home"))
        );
        assert_eq!(b.etc, ["passwd"]);
        assert!(entered().is_empty());
    }

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape_mountinfo("/a\\040b"), "/a b");
        assert_eq!(unescape_mountinfo("/plain"), "/plain");
    }
}
