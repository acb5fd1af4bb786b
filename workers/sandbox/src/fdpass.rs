//! Messages with file descriptors over `SOCK_SEQPACKET` unix socket pairs (`SCM_RIGHTS`), and a
//! helper process forked from a single-threaded process: what the tools worker's tier-B command
//! launcher is built from (`hanzo_tools::launcher`). `socketpair(2)` is allowed under every
//! profile, so the worker can make a new pair per command after confinement.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Most descriptors one message carries.
pub const MAX_FDS: usize = 4;

/// The bytes of `MAX_FDS` descriptors in a control message.
#[allow(clippy::cast_possible_truncation, reason = "a few dozen bytes")]
const MAX_FD_BYTES: u32 = (MAX_FDS * std::mem::size_of::<RawFd>()) as u32;

/// A connected `SOCK_SEQPACKET` pair, close-on-exec; the first end non-blocking when asked.
pub fn seqpacket_pair(first_nonblocking: bool) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: socketpair writes two fds into the array we own.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and are owned by nothing else.
    let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    if first_nonblocking {
        set_nonblocking(a.as_raw_fd())?;
    }
    Ok((a, b))
}

/// `fd` moved to the lowest free number at or above `min` (close-on-exec), so that it cannot be
/// taken for an inherited channel (`hanzo_worker` adopts fds 3 and 4 when present).
pub fn move_above(fd: OwnedFd, min: RawFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() >= min {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC duplicates an fd we own; the copy is ours alone.
    let copy = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, min) };
    if copy < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this fd; `fd` (the old number) is closed on drop.
    Ok(unsafe { OwnedFd::from_raw_fd(copy) })
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: F_GETFL/F_SETFL on an fd we own change its status flags only.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Send one message: `data` (non-empty) with `fds` attached. Never raises `SIGPIPE`.
pub fn send(sock: BorrowedFd<'_>, data: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many descriptors",
        ));
    }
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let fd_bytes = std::mem::size_of_val(raw.as_slice());
    // At most MAX_FDS descriptors (checked above): a few bytes.
    let fd_len =
        u32::try_from(fd_bytes).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: CMSG_SPACE computes a size from an integer.
    let space = unsafe { libc::CMSG_SPACE(fd_len) } as usize;
    // u64 elements keep the control buffer aligned for `cmsghdr`.
    let mut control = vec![0u64; space.div_ceil(8).max(1)];
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: an all-zero msghdr is a valid empty header; we fill in the fields below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !raw.is_empty() {
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: the control buffer holds `space` bytes, enough for one header with
        // `fd_bytes` of data (CMSG_SPACE); CMSG_FIRSTHDR/CMSG_DATA point inside it.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(fd_len) as _;
            std::ptr::copy_nonoverlapping(
                raw.as_ptr().cast::<u8>(),
                libc::CMSG_DATA(cmsg),
                fd_bytes,
            );
        }
    }
    loop {
        // SAFETY: msg points at our iovec and control buffer, both alive for the call.
        let r = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if r >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Receive one message into `buf`: its length (0 at end-of-file) and the descriptors it carried
/// (close-on-exec). A message longer than `buf` is an error (`EMSGSIZE`), its fds closed.
pub fn recv(sock: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    // SAFETY: CMSG_SPACE computes a size from an integer.
    let space = unsafe { libc::CMSG_SPACE(MAX_FD_BYTES) };
    let mut control = vec![0u64; (space as usize).div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is a valid empty header; we fill in the fields below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    let n = loop {
        // SAFETY: msg points at our buffers, alive for the call.
        let r = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if let Ok(n) = usize::try_from(r) {
            break n;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `msg`'s control buffer; CMSG_FIRSTHDR/CMSG_NXTHDR walk it within
    // `msg_controllen`, and each SCM_RIGHTS payload holds whole fds that are now ours.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg);
                let len = (*cmsg).cmsg_len as usize - (data as usize - cmsg as usize);
                for i in 0..len / std::mem::size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
        return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
    }
    Ok((n, fds))
}

/// Fork a helper from this (single-threaded) process. The child keeps only stdio and `keep`,
/// gets `SIGKILL` when this thread dies, reaps its own children automatically when `auto_reap`
/// (`SIGCHLD` ignored: its children must reset that before `exec`, and it spawns through
/// [`with_sigchld_default`]), runs `body` and exits with its return value, or with
/// [`HELPER_PANICKED`] if `body` panics (the panic never unwinds past `body`). Returns the
/// child's pid in the parent.
pub fn fork_helper(
    keep: RawFd,
    auto_reap: bool,
    body: impl FnOnce() -> i32,
) -> io::Result<libc::pid_t> {
    fork_helper_keeping(&[keep], auto_reap, body)
}

/// [`fork_helper`] keeping every descriptor of `keep` (each above 2) besides stdio.
pub fn fork_helper_keeping(
    keep: &[RawFd],
    auto_reap: bool,
    body: impl FnOnce() -> i32,
) -> io::Result<libc::pid_t> {
    let mut keep: Vec<RawFd> = keep.iter().copied().filter(|&fd| fd > 2).collect();
    keep.sort_unstable();
    keep.dedup();
    let threads = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|v| v.trim().parse::<u32>().ok())
        })
        .unwrap_or(0);
    if threads != 1 {
        return Err(io::Error::other(
            "a helper must be forked from a single-threaded process",
        ));
    }
    // SAFETY: getpid takes no arguments.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the process is single-threaded (checked), so the child is a complete copy that may
    // go on using std.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid > 0 {
        return Ok(pid);
    }
    // SAFETY: prctl/getppid take integers; close_range closes fds of our own table; fcntl probes
    // an fd number; open gets a NUL-terminated literal; sigaction installs SIG_IGN (no handler
    // code) for SIGCHLD.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
        if libc::getppid() != parent {
            libc::_exit(1);
        }
        // Close every gap between the kept descriptors, then everything above the last.
        let mut next = 3;
        for &fd in &keep {
            if fd > next {
                // Both are at least 3 here: `unsigned_abs` is the value itself, without a cast.
                libc::syscall(
                    libc::SYS_close_range,
                    next.unsigned_abs(),
                    (fd - 1).unsigned_abs(),
                    0u32,
                );
            }
            next = fd + 1;
        }
        libc::syscall(libc::SYS_close_range, next.unsigned_abs(), u32::MAX, 0u32);
        // Stdio open (on /dev/null if closed), so that no descriptor received later lands on
        // 0-2, where a spawned child's stdio would replace it.
        for fd in 0..3 {
            if libc::fcntl(fd, libc::F_GETFD) < 0 {
                libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
            }
        }
        if auto_reap {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = libc::SIG_IGN;
            sa.sa_flags = libc::SA_NOCLDWAIT;
            libc::sigaction(libc::SIGCHLD, &sa, std::ptr::null_mut());
        }
    }
    // A panic must end the helper here, never unwind into the frames it shares with the parent:
    // their values (the parent's `OwnedFd`s among them) are copies whose descriptors were just
    // closed above, and dropping them would close whatever now holds those numbers (std aborts
    // with "IO Safety violation: owned file descriptor already closed" in a debug build).
    let code =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(HELPER_PANICKED);
    // SAFETY: _exit ends the helper without running the parent's atexit handlers twice.
    unsafe { libc::_exit(code) }
}

/// Exit status of a helper ([`fork_helper`]) whose body panicked (the panic message is on its
/// stderr), as of a Rust program that panicked.
pub const HELPER_PANICKED: i32 = 101;

/// Run `spawn` (a `std::process::Command::spawn`, or anything that waits for a child it just
/// forked) with `SIGCHLD` at its default disposition, in a single-threaded helper forked with
/// `auto_reap` ([`fork_helper`]); afterwards the automatic reaping is back, and the children
/// that ended in between (zombies then) are reaped.
///
/// Why: when the child's `exec` (or a pre-exec step) fails, std's `spawn` waits for that child
/// before returning the error, and asserts that the wait worked. Where `SIGCHLD` is ignored the
/// kernel has already reaped it, `waitpid` fails with `ECHILD`, and `spawn` panics ("wait()
/// should either return Ok or panic") instead of returning the error: a command launcher would
/// die of a server whose program does not exist.
///
/// Only for a single-threaded process whose children nobody else waits for: the reaping takes
/// any child that has ended.
pub fn with_sigchld_default<T>(spawn: impl FnOnce() -> T) -> T {
    /// Puts the caller's disposition back (also if `spawn` unwinds), then reaps.
    struct Restore(Option<libc::sigaction>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let Some(old) = self.0.take() else { return };
            // SAFETY: sigaction reads the disposition saved below (SIG_IGN or a flag: no handler
            // code is installed that was not there before).
            unsafe { libc::sigaction(libc::SIGCHLD, &old, std::ptr::null_mut()) };
            if old.sa_sigaction == libc::SIG_IGN || old.sa_flags & libc::SA_NOCLDWAIT != 0 {
                // Children that ended while SIGCHLD was at its default are zombies: the kernel
                // reaps automatically only those that end from now on.
                loop {
                    // SAFETY: waitpid with a null status pointer and WNOHANG only reaps.
                    let r = unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) };
                    if r <= 0 {
                        break;
                    }
                }
            }
        }
    }
    // SAFETY: all-zero sigaction structs are valid (SIG_DFL, no flags, an empty mask); sigaction
    // writes the old disposition into ours and installs SIG_DFL, which runs no handler code.
    let restore = unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        let default: libc::sigaction = std::mem::zeroed();
        (libc::sigaction(libc::SIGCHLD, &default, &mut old) == 0).then_some(old)
    };
    let _restore = Restore(restore);
    spawn()
}
