//! Confinement probes: attempt one forbidden operation and report what the kernel answered.
//!
//! Operations that would change the calling process if they succeeded (entering a namespace,
//! mounting) run in a short-lived forked child, so a probe can only ever fail more — a failed
//! sandbox does not get wider because someone looked.

use crate::sys::{errno, errno_name};
use hanzo_ipc::probe::{Probe, ProbeOutcome, SocketFamily, SocketKind};
use std::ffi::CString;
use std::time::Duration;

/// Attempt the forbidden operation `p` (pid 0 = `getppid()`) and report the kernel's answer.
pub fn run_probe(p: &Probe) -> ProbeOutcome {
    match p {
        Probe::OpenRead { path } => open_read(path),
        Probe::OpenWrite { path } => open_write(path),
        Probe::Socket { family, kind } => socket(*family, *kind),
        Probe::ConnectTcp { addr } => connect_tcp(addr),
        Probe::PtraceAttach { pid } => ptrace_attach(target(*pid)),
        Probe::ProcessVmRead { pid } => process_vm_read(target(*pid)),
        Probe::UnshareUser => in_child(|| {
            // SAFETY: unshare takes an integer; this runs in the forked probe child only.
            unsafe { libc::unshare(libc::CLONE_NEWUSER) }
        }),
        Probe::Mount => mount_tmpfs(),
        Probe::IoUringSetup => io_uring_setup(),
        Probe::Bpf => bpf_prog_load(),
        Probe::X32Syscall => x32_getpid(),
        Probe::CloneNewNamespace => clone_new_namespace(),
        Probe::ReadEnviron { pid } => read_environ(target(*pid)),
        Probe::Signal { pid } => {
            // SAFETY: signal 0 delivers nothing; kill only checks existence and permission.
            let r = unsafe { libc::kill(target(*pid), 0) };
            from_ret(r as i64, "may signal")
        }
    }
}

fn target(pid: u32) -> libc::pid_t {
    if pid == 0 {
        // SAFETY: getppid takes no arguments and cannot fail.
        unsafe { libc::getppid() }
    } else {
        libc::pid_t::try_from(pid).unwrap_or(libc::pid_t::MAX)
    }
}

fn succeeded(detail: impl Into<String>) -> ProbeOutcome {
    ProbeOutcome {
        succeeded: true,
        errno: None,
        detail: detail.into(),
    }
}

fn failed(e: i32) -> ProbeOutcome {
    ProbeOutcome {
        succeeded: false,
        errno: Some(e),
        detail: errno_name(e),
    }
}

/// A syscall's return value: negative means failed with the current errno.
fn from_ret(r: i64, ok: &str) -> ProbeOutcome {
    if r < 0 {
        failed(errno())
    } else {
        succeeded(ok)
    }
}

fn cpath(path: &str) -> Result<CString, ProbeOutcome> {
    CString::new(path).map_err(|_| failed(libc::EINVAL))
}

fn close(fd: libc::c_int) {
    // SAFETY: closing a descriptor this module just obtained and owns.
    unsafe { libc::close(fd) };
}

fn open_read(path: &str) -> ProbeOutcome {
    let c = match cpath(path) {
        Ok(c) => c,
        Err(o) => return o,
    };
    // SAFETY: `c` is a valid NUL-terminated path; the fd returned is closed below.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return failed(errno());
    }
    close(fd);
    succeeded("opened for reading")
}

fn open_write(path: &str) -> ProbeOutcome {
    let c = match cpath(path) {
        Ok(c) => c,
        Err(o) => return o,
    };
    // Create exclusively first, so that we know whether the file is ours to remove again.
    // SAFETY: `c` is a valid NUL-terminated path; the fd returned is closed below.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
            0o600 as libc::c_uint,
        )
    };
    if fd >= 0 {
        close(fd);
        // SAFETY: removing the file this probe just created, by the same valid path.
        unsafe { libc::unlink(c.as_ptr()) };
        return succeeded("created (and removed again)");
    }
    let e = errno();
    if e != libc::EEXIST {
        return failed(e);
    }
    // SAFETY: as above; no O_TRUNC, so an existing file is left unchanged.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return failed(errno());
    }
    close(fd);
    succeeded("opened for writing")
}

fn socket(family: SocketFamily, kind: SocketKind) -> ProbeOutcome {
    let domain = match family {
        SocketFamily::Unix => libc::AF_UNIX,
        SocketFamily::Inet => libc::AF_INET,
        SocketFamily::Inet6 => libc::AF_INET6,
        SocketFamily::Netlink => libc::AF_NETLINK,
        SocketFamily::Packet => libc::AF_PACKET,
    };
    let ty = match kind {
        SocketKind::Stream => libc::SOCK_STREAM,
        SocketKind::Datagram => libc::SOCK_DGRAM,
        SocketKind::Raw => libc::SOCK_RAW,
    };
    // SAFETY: socket() with integer arguments; the fd returned is closed at once.
    let fd = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return failed(errno());
    }
    close(fd);
    succeeded("socket created")
}

fn connect_tcp(addr: &str) -> ProbeOutcome {
    let Ok(addr) = addr.parse::<std::net::SocketAddr>() else {
        return ProbeOutcome {
            succeeded: false,
            errno: None,
            detail: format!("not an ip:port address: {addr:?}"),
        };
    };
    match std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
        Ok(_) => succeeded("connected"),
        Err(e) => match e.raw_os_error() {
            Some(code) => failed(code),
            None => ProbeOutcome {
                succeeded: false,
                errno: None,
                detail: e.kind().to_string(),
            },
        },
    }
}

fn ptrace_attach(pid: libc::pid_t) -> ProbeOutcome {
    let null = std::ptr::null_mut::<libc::c_void>();
    // SAFETY: PTRACE_ATTACH takes a pid and ignores the address and data pointers.
    let r = unsafe { libc::ptrace(libc::PTRACE_ATTACH, pid, null, null) };
    if r < 0 {
        return failed(errno());
    }
    // The sandbox failed; let the tracee go again once it has stopped.
    let mut status = 0;
    // SAFETY: waitpid writes the status into our local; PTRACE_DETACH takes integers only.
    unsafe {
        libc::waitpid(pid, &mut status, libc::__WALL);
        libc::ptrace(libc::PTRACE_DETACH, pid, null, null);
    }
    succeeded("attached (and detached again)")
}

fn process_vm_read(pid: libc::pid_t) -> ProbeOutcome {
    let mut word = 0u64;
    let local = libc::iovec {
        iov_base: (&mut word as *mut u64).cast(),
        iov_len: std::mem::size_of::<u64>(),
    };
    // We do not know the other process's layout; the address of our own word is as good a guess
    // as any. The permission check comes before any address is used, so EFAULT still means the
    // kernel let us in.
    let remote = libc::iovec {
        iov_base: (&mut word as *mut u64).cast(),
        iov_len: std::mem::size_of::<u64>(),
    };
    // SAFETY: the local iovec points to `word`, valid for 8 bytes of writes; the remote iovec is
    // only dereferenced in the other process by the kernel.
    let r = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    if r >= 0 {
        return succeeded(format!("read {r} bytes"));
    }
    let e = errno();
    if e == libc::EFAULT {
        return ProbeOutcome {
            succeeded: true,
            errno: Some(e),
            detail: "access granted (EFAULT: the guessed address is not mapped there)".to_string(),
        };
    }
    failed(e)
}

/// Runs `op` in a forked child and reports its result: the child exits 0 on success or with the
/// errno. `op` must be async-signal-safe: the parent may have other threads.
fn in_child(op: impl FnOnce() -> libc::c_int) -> ProbeOutcome {
    // SAFETY: the child only runs `op` (async-signal-safe by contract), reads errno and `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let e = errno();
        return ProbeOutcome {
            succeeded: false,
            errno: Some(e),
            detail: format!("could not fork the probe child: {}", errno_name(e)),
        };
    }
    if pid == 0 {
        let r = op();
        let code = if r < 0 { errno().clamp(1, 255) } else { 0 };
        // SAFETY: _exit never returns and runs no atexit handlers inherited from the parent.
        unsafe { libc::_exit(code) };
    }
    wait_child(pid)
}

fn wait_child(pid: libc::pid_t) -> ProbeOutcome {
    let mut status = 0;
    loop {
        // SAFETY: waiting for our own child, writing its status into our local.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r >= 0 {
            break;
        }
        if errno() != libc::EINTR {
            let e = errno();
            return ProbeOutcome {
                succeeded: false,
                errno: Some(e),
                detail: format!("waiting for the probe child: {}", errno_name(e)),
            };
        }
    }
    if libc::WIFEXITED(status) {
        match libc::WEXITSTATUS(status) {
            0 => succeeded("succeeded in a probe child"),
            e => failed(e),
        }
    } else {
        ProbeOutcome {
            succeeded: false,
            errno: None,
            detail: format!("probe child ended by signal {}", libc::WTERMSIG(status)),
        }
    }
}

fn mount_tmpfs() -> ProbeOutcome {
    let (source, target, fstype) = (c"none", c"/tmp", c"tmpfs");
    in_child(|| {
        // SAFETY: static NUL-terminated strings and a null data pointer; runs in the probe child.
        unsafe {
            libc::mount(
                source.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                0,
                std::ptr::null(),
            )
        }
    })
}

fn io_uring_setup() -> ProbeOutcome {
    // struct io_uring_params is 120 bytes; zeroed asks for nothing special.
    let mut params = [0u8; 120];
    // SAFETY: the kernel reads and writes `params`, which is large enough for io_uring_params.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr()) };
    if fd < 0 {
        return failed(errno());
    }
    close(fd as libc::c_int);
    succeeded("io_uring instance created")
}

fn bpf_prog_load() -> ProbeOutcome {
    const BPF_PROG_LOAD: libc::c_int = 5;
    // A zeroed bpf_attr: an empty program, which the kernel refuses when bpf is reachable at all.
    let mut attr = [0u8; 128];
    // SAFETY: the kernel reads at most `attr.len()` bytes from `attr`.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_LOAD,
            attr.as_mut_ptr(),
            attr.len() as libc::c_uint,
        )
    };
    if fd < 0 {
        return failed(errno());
    }
    close(fd as libc::c_int);
    succeeded("program loaded")
}

#[cfg(target_arch = "x86_64")]
fn x32_getpid() -> ProbeOutcome {
    let nr = libc::SYS_getpid | crate::seccomp::X32_SYSCALL_BIT as libc::c_long;
    // SAFETY: getpid has no arguments and no effect, under either ABI.
    let r = unsafe { libc::syscall(nr) };
    from_ret(r, "x32 getpid answered")
}

#[cfg(not(target_arch = "x86_64"))]
fn x32_getpid() -> ProbeOutcome {
    ProbeOutcome {
        succeeded: false,
        errno: Some(libc::ENOSYS),
        detail: "no x32 ABI on this architecture".to_string(),
    }
}

fn clone_new_namespace() -> ProbeOutcome {
    let flags = (libc::CLONE_NEWNS | libc::SIGCHLD) as libc::c_ulong;
    // SAFETY: clone with a null stack behaves like fork (the child gets a copy-on-write copy of
    // the stack); the child only calls _exit. Argument order is the x86_64/aarch64 one.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            flags,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_int>(),
            std::ptr::null_mut::<libc::c_int>(),
            0 as libc::c_ulong,
        )
    };
    if pid < 0 {
        return failed(errno());
    }
    if pid == 0 {
        // SAFETY: in the new child: leave at once.
        unsafe { libc::_exit(0) };
    }
    let outcome = wait_child(pid as libc::pid_t);
    if outcome.succeeded {
        succeeded("a child was created in a new mount namespace")
    } else {
        outcome
    }
}

fn read_environ(pid: libc::pid_t) -> ProbeOutcome {
    match std::fs::read(format!("/proc/{pid}/environ")) {
        // The length only: the contents may be secrets.
        Ok(bytes) => succeeded(format!("read {} bytes", bytes.len())),
        Err(e) => match e.raw_os_error() {
            Some(code) => failed(code),
            None => ProbeOutcome {
                succeeded: false,
                errno: None,
                detail: e.kind().to_string(),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unconfined_open_of_a_missing_file_reports_enoent() {
        let o = run_probe(&Probe::OpenRead {
            path: "/nonexistent/hanzo-probe".into(),
        });
        assert_eq!(o.errno, Some(libc::ENOENT));
        assert!(!o.succeeded);
        assert_eq!(o.detail, "ENOENT");
    }

    #[test]
    fn open_write_removes_what_it_created() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("probe");
        let o = run_probe(&Probe::OpenWrite {
            path: path.display().to_string(),
        });
        assert!(o.succeeded, "{o:?}");
        assert!(!path.exists());
    }

    #[test]
    fn unix_socket_is_allowed_unconfined() {
        let o = run_probe(&Probe::Socket {
            family: SocketFamily::Unix,
            kind: SocketKind::Stream,
        });
        assert!(o.succeeded, "{o:?}");
    }

    #[test]
    fn bad_connect_address_is_reported_not_panicked() {
        let o = run_probe(&Probe::ConnectTcp {
            addr: "not-an-address".into(),
        });
        assert!(!o.succeeded);
        assert_eq!(o.errno, None);
    }
}
