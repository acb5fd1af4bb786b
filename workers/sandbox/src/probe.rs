//! Confinement probes: attempt one forbidden operation and report what the kernel answered.
//!
//! Every attempt runs in a short-lived forked child, so a probe can only ever fail more — a
//! failed sandbox does not get wider because someone looked — and a syscall outside a worker's
//! seccomp allow-list (which stops the process with `SIGSYS`) stops the probe child, not the
//! worker: the answer is then "refused by the allow-list". The child may be the fork of a
//! multi-threaded worker, so it makes async-signal-safe calls only; paths and addresses are
//! prepared before the fork.

use crate::sys::{errno, errno_name};
use hanzo_ipc::probe::{Probe, ProbeOutcome, SocketFamily, SocketKind};
use nix::errno::Errno;
use nix::sys::socket::{AddressFamily, SockFlag, SockType, SockaddrStorage};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

/// What a probe child reports through its exit code, beyond an errno (1..=133).
mod code {
    pub const OK: i32 = 0;
    /// `process_vm_readv` got as far as the address (EFAULT): access was granted.
    pub const ACCESS_GRANTED_EFAULT: i32 = 200;
    /// The child could not run the probe at all.
    pub const BROKEN: i32 = 201;
    /// `OpenWrite` opened a file that existed already (and left it unchanged).
    pub const OPENED_EXISTING: i32 = 202;
}

/// Attempt the forbidden operation `p` (pid 0 = `getppid()`) and report the kernel's answer.
pub fn run_probe(p: &Probe) -> ProbeOutcome {
    match p {
        Probe::OpenRead { path } => match cpath(path) {
            Ok(c) => in_child(move || {
                nix::fcntl::open(
                    c.as_c_str(),
                    nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_CLOEXEC,
                    nix::sys::stat::Mode::empty(),
                )
                .map(drop)
            })
            .named("opened for reading"),
            Err(o) => o,
        },
        Probe::OpenWrite { path } => match cpath(path) {
            Ok(c) => open_write(c),
            Err(o) => o,
        },
        Probe::Socket { family, kind } => {
            let (family, kind) = (family_of(*family), kind_of(*kind));
            in_child(move || {
                nix::sys::socket::socket(family, kind, SockFlag::SOCK_CLOEXEC, None).map(drop)
            })
            .named("socket created")
        }
        Probe::ConnectTcp { addr } => connect_tcp(addr),
        Probe::PtraceAttach { pid } => {
            let pid = Pid::from_raw(target(*pid));
            // Attached from the probe child, which detaches by exiting.
            in_child(move || nix::sys::ptrace::attach(pid)).named("attached (and detached again)")
        }
        Probe::ProcessVmRead { pid } => process_vm_read(target(*pid)),
        Probe::UnshareUser => {
            in_child(|| nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER))
                .named("succeeded in a probe child")
        }
        Probe::Mount => in_child(|| {
            nix::mount::mount(
                Some(c"none"),
                c"/tmp",
                Some(c"tmpfs"),
                nix::mount::MsFlags::empty(),
                None::<&std::ffi::CStr>,
            )
        })
        .named("succeeded in a probe child"),
        Probe::IoUringSetup => in_child(io_uring_setup).named("io_uring instance created"),
        Probe::Bpf => in_child(bpf_prog_load).named("program loaded"),
        Probe::X32Syscall => x32_getpid(),
        Probe::CloneNewNamespace => {
            in_child(clone_new_namespace).named("a child was created in a new mount namespace")
        }
        Probe::ReadEnviron { pid } => match cpath(&format!("/proc/{}/environ", target(*pid))) {
            // The contents may be secrets: only whether they could be read.
            Ok(c) => in_child(move || read_some(&c)).named("read (contents withheld)"),
            Err(o) => o,
        },
        Probe::Signal { pid } => {
            let pid = Pid::from_raw(target(*pid));
            in_child(move || nix::sys::signal::kill(pid, None)).named("may signal")
        }
    }
}

fn target(pid: u32) -> libc::pid_t {
    if pid == 0 {
        nix::unistd::getppid().as_raw()
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

fn cpath(path: &str) -> Result<CString, ProbeOutcome> {
    CString::new(path).map_err(|_| failed(libc::EINVAL))
}

fn family_of(f: SocketFamily) -> AddressFamily {
    match f {
        SocketFamily::Unix => AddressFamily::Unix,
        SocketFamily::Inet => AddressFamily::Inet,
        SocketFamily::Inet6 => AddressFamily::Inet6,
        SocketFamily::Netlink => AddressFamily::Netlink,
        SocketFamily::Packet => AddressFamily::Packet,
    }
}

fn kind_of(k: SocketKind) -> SockType {
    match k {
        SocketKind::Stream => SockType::Stream,
        SocketKind::Datagram => SockType::Datagram,
        SocketKind::Raw => SockType::Raw,
    }
}

/// The outcome of a probe child, still to be named on success.
struct Child(ProbeOutcome);

impl Child {
    fn named(self, ok: &str) -> ProbeOutcome {
        let mut o = self.0;
        if o.succeeded && o.detail.is_empty() {
            o.detail = ok.to_string();
        }
        o
    }
}

/// Runs `op` in a forked child and reports its result: the child exits 0 on success, with the
/// errno, or with one of the [`code`]s; a stop by the seccomp allow-list is reported as such.
/// `op` must be async-signal-safe: the parent may have other threads.
fn in_child(op: impl FnOnce() -> nix::Result<()>) -> Child {
    in_child_code(|| match op() {
        Ok(()) => code::OK,
        Err(e) => (e as i32).clamp(1, 133),
    })
}

fn in_child_code(op: impl FnOnce() -> i32) -> Child {
    // SAFETY: the child only runs `op` (async-signal-safe by contract) and `_exit`s.
    let pid = match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => {
            crate::sigsys::quiet();
            let code = op();
            // SAFETY: _exit never returns and runs no atexit handlers inherited from the parent.
            unsafe { libc::_exit(code) }
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => child,
        Err(e) => {
            return Child(ProbeOutcome {
                succeeded: false,
                errno: Some(e as i32),
                detail: format!("could not fork the probe child: {}", errno_name(e as i32)),
            })
        }
    };
    Child(wait_child(pid))
}

fn wait_child(pid: Pid) -> ProbeOutcome {
    let status = loop {
        match waitpid(pid, None) {
            Ok(s) => break s,
            Err(Errno::EINTR) => continue,
            Err(e) => {
                return ProbeOutcome {
                    succeeded: false,
                    errno: Some(e as i32),
                    detail: format!("waiting for the probe child: {}", errno_name(e as i32)),
                }
            }
        }
    };
    match status {
        WaitStatus::Exited(_, code::OK) => succeeded(""),
        WaitStatus::Exited(_, code::ACCESS_GRANTED_EFAULT) => ProbeOutcome {
            succeeded: true,
            errno: Some(libc::EFAULT),
            detail: "access granted (EFAULT: the guessed address is not mapped there)".to_string(),
        },
        WaitStatus::Exited(_, crate::sigsys::EXIT_SECCOMP) => ProbeOutcome {
            succeeded: false,
            errno: None,
            detail: "refused by the seccomp allow-list (SIGSYS)".to_string(),
        },
        WaitStatus::Exited(_, code::OPENED_EXISTING) => succeeded("opened an existing file"),
        WaitStatus::Exited(_, code::BROKEN) => ProbeOutcome {
            succeeded: false,
            errno: None,
            detail: "the probe child could not run the probe".to_string(),
        },
        WaitStatus::Exited(_, e) => failed(e),
        WaitStatus::Signaled(_, sig, _) => ProbeOutcome {
            succeeded: false,
            errno: None,
            detail: format!("probe child ended by {}", sig.as_str()),
        },
        other => ProbeOutcome {
            succeeded: false,
            errno: None,
            detail: format!("probe child: {other:?}"),
        },
    }
}

fn open_write(c: CString) -> ProbeOutcome {
    use nix::fcntl::OFlag;
    use nix::sys::stat::Mode;
    let mut o = in_child_code(move || {
        // Create exclusively first, so that we know whether the file is ours to remove again.
        match nix::fcntl::open(
            c.as_c_str(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        ) {
            Ok(fd) => {
                drop(fd);
                let _ = nix::unistd::unlink(c.as_c_str());
                code::OK
            }
            // No O_TRUNC: an existing file is left unchanged.
            Err(Errno::EEXIST) => match nix::fcntl::open(
                c.as_c_str(),
                OFlag::O_WRONLY | OFlag::O_CLOEXEC,
                Mode::empty(),
            ) {
                Ok(_) => code::OPENED_EXISTING,
                Err(e) => (e as i32).clamp(1, 133),
            },
            Err(e) => (e as i32).clamp(1, 133),
        }
    })
    .named("created (and removed again)");
    if o.detail == "opened an existing file" {
        o.detail = "opened for writing".to_string();
    }
    o
}

fn connect_tcp(addr: &str) -> ProbeOutcome {
    let Ok(addr) = addr.parse::<std::net::SocketAddr>() else {
        return ProbeOutcome {
            succeeded: false,
            errno: None,
            detail: format!("not an ip:port address: {addr:?}"),
        };
    };
    let family = if addr.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    let sockaddr = SockaddrStorage::from(addr);
    in_child(move || {
        let sock = nix::sys::socket::socket(
            family,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            None,
        )?;
        match nix::sys::socket::connect(sock.as_raw_fd(), &sockaddr) {
            Ok(()) => return Ok(()),
            Err(Errno::EINPROGRESS) => {}
            Err(e) => return Err(e),
        }
        // At most two seconds for an answer.
        let mut pfd = [nix::poll::PollFd::new(
            sock.as_fd(),
            nix::poll::PollFlags::POLLOUT,
        )];
        if nix::poll::poll(&mut pfd, nix::poll::PollTimeout::from(2000u16))? == 0 {
            return Err(Errno::ETIMEDOUT);
        }
        match nix::sys::socket::getsockopt(&sock, nix::sys::socket::sockopt::SocketError)? {
            0 => Ok(()),
            e => Err(Errno::from_raw(e)),
        }
    })
    .named("connected")
}

fn process_vm_read(pid: libc::pid_t) -> ProbeOutcome {
    in_child_code(move || {
        let mut word = [0u8; 8];
        // We do not know the other process's layout; the address of our own word is as good a
        // guess as any. The permission check comes before any address is used, so EFAULT still
        // means the kernel let us in.
        let remote = nix::sys::uio::RemoteIoVec {
            base: word.as_ptr() as usize,
            len: word.len(),
        };
        let mut local = [std::io::IoSliceMut::new(&mut word)];
        match nix::sys::uio::process_vm_readv(Pid::from_raw(pid), &mut local, &[remote]) {
            Ok(_) => code::OK,
            Err(Errno::EFAULT) => code::ACCESS_GRANTED_EFAULT,
            Err(e) => (e as i32).clamp(1, 133),
        }
    })
    .named("read a word")
}

fn read_some(path: &CString) -> nix::Result<()> {
    let fd = nix::fcntl::open(
        path.as_c_str(),
        nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    let mut buf = [0u8; 64];
    nix::unistd::read(&fd, &mut buf).map(drop)
}

/// Raw: no crate wraps `io_uring_setup`.
fn io_uring_setup() -> nix::Result<()> {
    // struct io_uring_params is 120 bytes; zeroed asks for nothing special.
    let mut params = [0u8; 120];
    // SAFETY: the kernel reads and writes `params`, which is large enough for io_uring_params.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr()) };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: the fd was just returned by the kernel and is ours.
    drop(unsafe { OwnedFd::from_raw_fd(crate::sys::syscall_int(fd)) });
    Ok(())
}

/// Raw: no crate wraps `bpf`.
fn bpf_prog_load() -> nix::Result<()> {
    const BPF_PROG_LOAD: libc::c_int = 5;
    // A zeroed bpf_attr: an empty program, which the kernel refuses when bpf is reachable at all.
    let mut attr = [0u8; 128];
    // SAFETY: the kernel reads at most `attr.len()` bytes from `attr`.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_LOAD,
            attr.as_mut_ptr(),
            libc::c_uint::try_from(attr.len()).unwrap_or(0),
        )
    };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: the fd was just returned by the kernel and is ours.
    drop(unsafe { OwnedFd::from_raw_fd(crate::sys::syscall_int(fd)) });
    Ok(())
}

/// Raw: an x32 number is not a syscall any wrapper makes.
#[cfg(target_arch = "x86_64")]
fn x32_getpid() -> ProbeOutcome {
    in_child(|| {
        let nr = libc::SYS_getpid | libc::c_long::from(crate::seccomp::X32_SYSCALL_BIT);
        // SAFETY: getpid has no arguments and no effect, under either ABI.
        let r = unsafe { libc::syscall(nr) };
        if r < 0 {
            Err(Errno::from_raw(errno()))
        } else {
            Ok(())
        }
    })
    .named("x32 getpid answered")
}

#[cfg(not(target_arch = "x86_64"))]
fn x32_getpid() -> ProbeOutcome {
    ProbeOutcome {
        succeeded: false,
        errno: Some(libc::ENOSYS),
        detail: "no x32 ABI on this architecture".to_string(),
    }
}

/// Raw: `clone` with a namespace flag and no stack is no call a wrapper makes.
fn clone_new_namespace() -> nix::Result<()> {
    let flags = (libc::CLONE_NEWNS | libc::SIGCHLD) as libc::c_ulong;
    // SAFETY: clone with a null stack behaves like fork (the child gets a copy-on-write copy of
    // the stack); the child only calls _exit.
    let pid = unsafe { libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) };
    if pid < 0 {
        return Err(Errno::last());
    }
    if pid == 0 {
        // SAFETY: in the new child: leave at once.
        unsafe { libc::_exit(0) };
    }
    let _ = waitpid(Pid::from_raw(crate::sys::syscall_int(pid)), None);
    Ok(())
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
        assert_eq!(o.detail, "created (and removed again)");
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

    #[test]
    fn a_refused_connection_reports_its_errno() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        drop(l);
        let o = run_probe(&Probe::ConnectTcp {
            addr: addr.to_string(),
        });
        assert_eq!(o.errno, Some(libc::ECONNREFUSED), "{o:?}");
    }
}
