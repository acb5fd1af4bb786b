//! Tier B: user, mount, pid, net and ipc namespaces, created once by a worker (the tools worker)
//! before it confines itself, so that every command it later runs is already inside them and
//! costs one fork+exec, not a namespace set-up.
//!
//! [`enter`] must run in a single-threaded process, before capabilities are dropped and before
//! seccomp (which refuses `unshare` and `mount`). It:
//!
//! 1. `unshare`s the five namespaces and maps the caller's uid and gid to themselves (one id,
//!    `setgroups` denied);
//! 2. forks: the child is pid 1 of the new pid namespace; the parent only waits and returns the
//!    child's status (the supervisor's pid for the worker stays valid, and killing it kills the
//!    child through the parent-death signal, and with it — pid 1 — every process of the
//!    namespace). Pid 1 sets up the mounts (below), then forks the worker (pid 2) and from then
//!    on only reaps orphans until the worker ends;
//! 3. in the child, makes every mount private and hides directories behind empty tmpfs mounts
//!    (`/tmp`, `/var/tmp`, `/dev/shm`, `/run`, `/root`, `/home`: host sockets, agents and other
//!    users' files), then binds back the paths the worker needs (workspace, run directory) where
//!    they were, binds protected paths read-only over themselves (`.git/hooks`, `.git/config`,
//!    `.hanzo/` in the workspace), and mounts a fresh `/proc` for the new pid namespace when the
//!    kernel allows it (a container's masked `/proc` makes the kernel refuse; the old one stays,
//!    and Landlock keeps `/proc` out of the tools role's reach anyway).
//!
//! In the new network namespace pid 1 brings `lo` up (`SIOCSIFFLAGS`, while it still holds
//! `CAP_NET_ADMIN` over the namespace): commands that may create inet sockets (see
//! `hanzo_policy::profile::tools_tier_b_commands`) get a loopback of their own — a test suite's
//! local server works — and no route anywhere else: the host's `127.0.0.1` is another
//! namespace's loopback.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// What tier B sets up.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TierB {
    /// Directories hidden behind an empty tmpfs (skipped when absent or a symlink).
    pub hide: Vec<PathBuf>,
    /// Paths that stay visible where they are, even beneath a hidden directory.
    pub keep: Vec<PathBuf>,
    /// Paths bound read-only over themselves (skipped when absent).
    pub read_only: Vec<PathBuf>,
    /// An fd the original (waiting) process keeps open; it closes every other one above 2.
    pub parent_keeps: Option<i32>,
}

/// Directories tier B hides by default.
pub const DEFAULT_HIDE: &[&str] = &["/tmp", "/var/tmp", "/dev/shm", "/run", "/root", "/home"];

/// Paths inside a workspace that tier B makes read-only: what runs later outside the sandbox
/// (git hooks, git configuration with its `core.hooksPath`/aliases, hanzo's own settings). The
/// data lives in `policy`; the complete set (the whole git directory wherever it is, the
/// effective hooks path, included configuration, …) is `hanzo_tools::paths::protected_paths`.
pub use hanzo_policy::git::PROTECTED_IN_WORKSPACE;

impl TierB {
    /// The tools worker's set-up for `workspace` and `run_dir` (plus `extra` kept paths).
    pub fn for_workspace(workspace: &Path, run_dir: Option<&Path>, extra: &[PathBuf]) -> TierB {
        let mut keep = vec![workspace.to_path_buf()];
        keep.extend(run_dir.map(Path::to_path_buf));
        keep.extend(extra.iter().cloned());
        TierB {
            hide: DEFAULT_HIDE.iter().map(PathBuf::from).collect(),
            keep,
            read_only: PROTECTED_IN_WORKSPACE
                .iter()
                .map(|p| workspace.join(p))
                .collect(),
            parent_keeps: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum NamespaceError {
    #[error(
        "tier B needs a single-threaded process (unshare of a user namespace refuses otherwise)"
    )]
    Threads,
    #[error("unshare(user|mount|pid|net|ipc): {0}")]
    Unshare(#[source] io::Error),
    #[error("writing {file}: {source}")]
    IdMap {
        file: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("fork: {0}")]
    Fork(#[source] io::Error),
    #[error("{what} {path}: {source}")]
    Mount {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The namespaces this process entered with [`enter`], for its attestation (empty otherwise).
/// The network namespace says what its processes can reach (see [`describe_net`]).
pub fn entered() -> Vec<String> {
    ENTERED.lock().map(|v| v.clone()).unwrap_or_default()
}

/// Say what the network namespace gives the commands, e.g. `net (loopback for commands)`; the
/// default after [`enter`] is `net (lo up)` or `net (no interface up)`.
pub fn describe_net(what: &str) {
    if let Ok(mut v) = ENTERED.lock() {
        for name in v.iter_mut() {
            if name == "net" || name.starts_with("net (") {
                *name = format!("net ({what})");
            }
        }
    }
}

/// Whether `lo` came up in the namespace [`enter`] made.
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

/// Which process [`enter`] returned in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Pid 1 of the new namespaces: go on with the work.
    Child,
    /// The original process, after the child ended: its exit code (128 + signal when killed).
    /// It should clean up and exit with it, doing nothing else.
    Parent { status: i32 },
}

/// Enter tier B (see the module documentation). Returns twice: in the child (`Side::Child`), and
/// in the parent once the child has ended (`Side::Parent`).
pub fn enter(cfg: &TierB) -> Result<Side, NamespaceError> {
    enter_with(cfg, |_| {})
}

/// [`enter`], with `pid1` run by pid 1 once the mounts are made and `lo` is up (its argument:
/// whether `lo` came up), just before it forks the worker: still single-threaded, unconfined and
/// holding its capabilities over the namespaces. The tools worker forks its command launcher
/// there, as the worker's sibling; whatever `pid1` sets in memory, the worker inherits.
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
    // SAFETY: getuid/getgid take no arguments and cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let flags = libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWIPC;
    // SAFETY: unshare takes flags only; the process is single-threaded (checked above).
    if unsafe { libc::unshare(flags) } < 0 {
        return Err(NamespaceError::Unshare(io::Error::last_os_error()));
    }
    let write = |file: &'static str, text: String| {
        std::fs::write(file, text).map_err(|source| NamespaceError::IdMap { file, source })
    };
    write("/proc/self/setgroups", "deny".to_string())?;
    write("/proc/self/uid_map", format!("{uid} {uid} 1\n"))?;
    write("/proc/self/gid_map", format!("{gid} {gid} 1\n"))?;

    // SAFETY: the process is single-threaded, so the child is a complete copy that may go on
    // using std; the parent only waits and exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(NamespaceError::Fork(io::Error::last_os_error()));
    }
    if pid > 0 {
        return Ok(Side::Parent {
            status: wait_for(pid, cfg.parent_keeps),
        });
    }
    // The child: pid 1 of the new pid namespace. Die with the parent (the supervisor's handle).
    // SAFETY: PR_SET_PDEATHSIG takes a signal number only.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    let mut notes = Vec::new();
    set_up_mounts(cfg, &mut notes)?;
    let lo = match bring_loopback_up() {
        Ok(()) => true,
        Err(e) => {
            notes.push(format!(
                "lo could not be brought up ({e}): no network at all"
            ));
            false
        }
    };
    pid1(lo);
    // Pid 1 of the namespace only reaps. Orphans (what a command left running, killed with its
    // group) are re-parented to pid 1; were that the worker, their zombies would pile up, since
    // tokio waits for its own children only.
    // SAFETY: still single-threaded; the parent side only runs `reap_until`, which makes raw
    // syscalls and `_exit`s.
    let worker = unsafe { libc::fork() };
    if worker < 0 {
        return Err(NamespaceError::Fork(io::Error::last_os_error()));
    }
    if worker > 0 {
        reap_until(worker);
    }
    // The worker, pid 2: die with pid 1 (and so with the supervisor's handle).
    // SAFETY: PR_SET_PDEATHSIG takes a signal number only.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    if let Ok(mut v) = ENTERED.lock() {
        *v = NS_NAMES.iter().map(|s| s.to_string()).collect();
    }
    describe_net(if lo { "lo up" } else { "no interface up" });
    let _ = LOOPBACK_UP.set(lo);
    let _ = NOTES.set(notes);
    Ok(Side::Child)
}

/// The parent's remaining life: close everything but stdio and `keep` (the child holds the
/// channel), wait for the child, return its status.
fn wait_for(pid: libc::pid_t, keep: Option<i32>) -> i32 {
    // SAFETY: close_range closes fds of our own table; the parent uses none of them again but
    // `keep`, which the caller still owns.
    unsafe {
        match keep {
            Some(k) if k >= 3 => {
                if k > 3 {
                    libc::syscall(libc::SYS_close_range, 3u32, (k - 1) as u32, 0u32);
                }
                libc::syscall(libc::SYS_close_range, (k + 1) as u32, u32::MAX, 0u32);
            }
            _ => {
                libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
            }
        }
    };
    drop_all_privileges();
    let mut status = 0;
    loop {
        // SAFETY: waiting for our own child, writing into our local.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        if r < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            status = 1 << 8;
            break;
        }
    }
    exit_code(status)
}

/// The waiting parent and pid 1 need nothing but `waitpid`: drop every capability (bounding set
/// first, while `CAP_SETPCAP` is still held) and become non-dumpable, so that neither is worth
/// attacking from the worker.
fn drop_all_privileges() {
    #[repr(C)]
    struct CapHeader {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct CapData {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    for cap in 0..64 {
        // SAFETY: PR_CAPBSET_DROP takes a capability number; unknown numbers fail with EINVAL.
        unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
    }
    // SAFETY: PR_CAP_AMBIENT_CLEAR_ALL and PR_SET_DUMPABLE take integers only.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capset reads a v3 header and two data structs, both valid for the call; clearing
    // every set is always permitted.
    unsafe {
        libc::syscall(
            libc::SYS_capset,
            &mut header as *mut CapHeader,
            data.as_ptr(),
        )
    };
}

fn exit_code(status: libc::c_int) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    }
}

/// Pid 1's whole life: reap every child until `worker` ends, then exit with its status (which
/// ends the namespace: the kernel kills whatever is left in it).
fn reap_until(worker: libc::pid_t) -> ! {
    // SAFETY: close_range closes fds of our own table; pid 1 uses none of them (the worker has
    // its own copies).
    unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    drop_all_privileges();
    loop {
        let mut status = 0;
        // SAFETY: waiting for any child, writing into our local.
        let r = unsafe { libc::waitpid(-1, &mut status, 0) };
        let code = if r == worker {
            exit_code(status)
        } else if r < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            1
        } else {
            continue;
        };
        // SAFETY: _exit ends the process without running anything else.
        unsafe { libc::_exit(code) }
    }
}

/// `ip link set lo up`, without `ip`: read the flags of `lo`, add `IFF_UP`, write them back.
fn bring_loopback_up() -> io::Result<()> {
    // SAFETY: socket takes integers; the fd is ours and closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the fd was just created and is owned by nothing else.
    let sock = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: an all-zero ifreq is valid (an empty name, zero flags).
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads the name and writes the flags of our ifreq.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS as _, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel filled the union's flags member.
    unsafe { req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
    // SAFETY: SIOCSIFFLAGS reads our ifreq.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS as _, &req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn cstr(p: &Path) -> CString {
    // A path from the OS has no interior NUL.
    CString::new(p.as_os_str().as_bytes()).unwrap_or_default()
}

fn mount(
    what: &'static str,
    source: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> Result<(), NamespaceError> {
    let source = source.map(cstr);
    let target_c = cstr(target);
    let fstype = fstype.map(|s| CString::new(s).unwrap_or_default());
    let data = data.map(|s| CString::new(s).unwrap_or_default());
    let ptr = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: every pointer is a NUL-terminated string we own for the duration of the call, or
    // null where mount(2) accepts null.
    let r = unsafe {
        libc::mount(
            ptr(&source),
            target_c.as_ptr(),
            ptr(&fstype),
            flags,
            ptr(&data).cast(),
        )
    };
    if r < 0 {
        return Err(NamespaceError::Mount {
            what,
            path: target.to_path_buf(),
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Flags of the mount holding `path` that a user namespace may not clear on a remount.
fn locked_flags(path: &Path) -> libc::c_ulong {
    let c = cstr(path);
    // SAFETY: statvfs writes into the zeroed buffer we own.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated; `st` is ours.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } < 0 {
        return 0;
    }
    let mut flags = 0;
    for (st_flag, ms_flag) in [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if st.f_flag & st_flag != 0 {
            flags |= ms_flag;
        }
    }
    flags
}

fn set_up_mounts(cfg: &TierB, notes: &mut Vec<String>) -> Result<(), NamespaceError> {
    // Nothing we do from here propagates back to the host.
    mount(
        "making mounts private",
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )?;
    // Hold the kept paths open before hiding what contains them: they are bound back from these.
    let kept: Vec<(PathBuf, File)> = cfg
        .keep
        .iter()
        .filter_map(|p| {
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH)
                .open(p)
                .ok()
                .map(|f| (p.clone(), f))
        })
        .collect();
    for dir in &cfg.hide {
        let is_real_dir = std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir());
        if !is_real_dir {
            continue;
        }
        mount(
            "hiding",
            Some(Path::new("tmpfs")),
            dir,
            Some("tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some("mode=0755,size=16m"),
        )?;
    }
    for (path, file) in &kept {
        if !cfg.hide.iter().any(|h| path.starts_with(h)) {
            continue;
        }
        let is_dir = file.metadata().is_ok_and(|m| m.is_dir());
        let made = if is_dir {
            std::fs::create_dir_all(path)
        } else {
            path.parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| std::fs::File::create(path).map(drop))
        };
        made.map_err(|source| NamespaceError::Mount {
            what: "making a mount point for",
            path: path.clone(),
            source,
        })?;
        let fd_path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        mount(
            "binding back",
            Some(&fd_path),
            path,
            None,
            libc::MS_BIND | libc::MS_REC,
            None,
        )?;
    }
    drop(kept);
    for path in &cfg.read_only {
        if std::fs::symlink_metadata(path).is_err() {
            continue;
        }
        mount(
            "binding",
            Some(path),
            path,
            None,
            libc::MS_BIND | libc::MS_REC,
            None,
        )?;
        mount(
            "making read-only",
            None,
            path,
            None,
            libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | locked_flags(path),
            None,
        )?;
    }
    if let Err(e) = mount(
        "mounting a fresh",
        Some(Path::new("proc")),
        Path::new("/proc"),
        Some("proc"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        None,
    ) {
        notes.push(format!(
            "no fresh /proc for the pid namespace ({e}); the host's stays mounted"
        ));
    }
    Ok(())
}

use std::os::unix::fs::OpenOptionsExt;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_set_up_keeps_workspace_and_run_dir_and_protects_git_and_hanzo() {
        let b = TierB::for_workspace(Path::new("/w"), Some(Path::new("/tmp/run")), &[]);
        assert_eq!(b.keep, [PathBuf::from("/w"), PathBuf::from("/tmp/run")]);
        assert!(
            b.hide.contains(&PathBuf::from("/tmp")) && b.hide.contains(&PathBuf::from("/root"))
        );
        assert_eq!(
            b.read_only,
            [
                PathBuf::from("/w/.git/hooks"),
                PathBuf::from("/w/.git/config"),
                PathBuf::from("/w/.hanzo")
            ]
        );
        assert!(entered().is_empty());
    }
}
