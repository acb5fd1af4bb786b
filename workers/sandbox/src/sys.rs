//! The raw system calls that neither `std`, `nix`, `caps` nor `landlock` wrap, each with the
//! reason it is raw; everything else in the crate goes through those crates.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// The calling thread's `errno` after a failed call.
/// A raw `syscall` result that is a pid or a descriptor: the kernel returns an `int`, which the
/// C library widens to a `long`.
#[allow(
    clippy::cast_possible_truncation,
    reason = "an int widened to a long, narrowed back"
)]
pub(crate) fn syscall_int(r: libc::c_long) -> libc::c_int {
    r as libc::c_int
}

/// This process's id as a `pid_t` (`std::process::id` gives a `u32`).
pub fn own_pid() -> libc::pid_t {
    nix::unistd::getpid().as_raw()
}

pub(crate) fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A short symbolic name for the errno values our probes and checks meet.
pub fn errno_name(e: i32) -> String {
    let name = match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ESRCH => "ESRCH",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::EBADF => "EBADF",
        libc::ECHILD => "ECHILD",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::EMFILE => "EMFILE",
        libc::ENOTTY => "ENOTTY",
        libc::ENOSPC => "ENOSPC",
        libc::EROFS => "EROFS",
        libc::ENOSYS => "ENOSYS",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::EXDEV => "EXDEV",
        _ => return format!("errno {e}"),
    };
    name.to_string()
}

/// `LANDLOCK_CREATE_RULESET_VERSION` from `<linux/landlock.h>`.
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;

/// The Landlock ABI version of the running kernel, or the errno explaining why there is none
/// (`EOPNOTSUPP`: built in but not enabled at boot; `ENOSYS`: not built in). Raw: the `landlock`
/// crate keeps its version query private, and `doctor` needs the errno to say why.
pub(crate) fn landlock_abi() -> Result<u32, i32> {
    // SAFETY: with a null attribute pointer, size 0 and the VERSION flag the kernel reads no
    // memory and only returns the ABI version (or fails with errno).
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if v < 0 {
        Err(errno())
    } else {
        Ok(u32::try_from(v).unwrap_or(u32::MAX))
    }
}

/// Enter the Landlock domain of a ruleset built with the `landlock` crate. Raw, because it runs
/// between fork and exec (the keeper, a command), where only async-signal-safe calls may be made
/// and the crate's `restrict_self` (which consumes its ruleset) cannot be called twice.
pub(crate) fn landlock_restrict_self_raw(ruleset: libc::c_int) -> libc::c_long {
    // SAFETY: landlock_restrict_self takes an fd and flags, no pointers.
    unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) }
}

/// `prctl(PR_GET_SECCOMP)`: Err when the kernel has no seccomp. Raw: nix has no wrapper.
pub(crate) fn seccomp_mode() -> io::Result<libc::c_int> {
    // SAFETY: PR_GET_SECCOMP takes no pointer arguments and only returns a value.
    let r = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// `prctl(PR_SET_SECUREBITS)`. Raw: neither nix nor caps wraps it.
pub(crate) fn set_securebits(bits: libc::c_ulong) -> io::Result<()> {
    // SAFETY: PR_SET_SECUREBITS takes an integer only.
    if unsafe { libc::prctl(libc::PR_SET_SECUREBITS, bits, 0, 0, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `clone3(NULL, 0)` is refused with `ENOSYS` (our filter) rather than `EINVAL` (the
/// kernel). Raw: no crate wraps clone3, and it must be called with exactly these arguments.
pub(crate) fn clone3_probe_refused_with_enosys() -> bool {
    // SAFETY: clone3 with a null argument pointer and size 0 is rejected before any memory is
    // read or any process created (EINVAL from the kernel, ENOSYS from our filter).
    let r = unsafe { libc::syscall(libc::SYS_clone3, std::ptr::null::<libc::c_void>(), 0usize) };
    r < 0 && errno() == libc::ENOSYS
}

/// Whether an x32 `getpid` is refused (the filter's `EPERM`; a kernel without x32 says
/// `ENOSYS`). Raw: an x32 number is not a syscall any wrapper makes.
#[cfg(target_arch = "x86_64")]
pub(crate) fn x32_getpid_refused() -> bool {
    let nr = libc::SYS_getpid | libc::c_long::from(crate::seccomp::X32_SYSCALL_BIT);
    // SAFETY: getpid takes no arguments and has no effect, under any ABI.
    let r = unsafe { libc::syscall(nr) };
    r < 0 && errno() == libc::EPERM
}

#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn x32_getpid_refused() -> bool {
    false
}

/// `syslog(SYSLOG_ACTION_SIZE_BUFFER)`: harmless (it reads the kernel log's size), on every deny
/// list, and so outside every allow-list. Returns the errno (0 when it answered). Raw: no crate
/// wraps it, and it is called to see the filter's answer.
pub(crate) fn syslog_size_probe() -> i32 {
    const SYSLOG_ACTION_SIZE_BUFFER: libc::c_int = 10;
    // SAFETY: the SIZE_BUFFER action reads no buffer (null, length 0).
    let r = unsafe {
        libc::syscall(
            libc::SYS_syslog,
            SYSLOG_ACTION_SIZE_BUFFER,
            std::ptr::null_mut::<libc::c_char>(),
            0,
        )
    };
    if r < 0 {
        errno()
    } else {
        0
    }
}

/// Whether `ioctl(TIOCSTI)` on a pipe is refused with `EPERM` (our filter) rather than `ENOTTY`
/// (the kernel: a pipe is no terminal, so nothing can be injected either way). Raw: the point is
/// the filter's answer to this exact request.
pub(crate) fn tiocsti_refused_with_eperm() -> bool {
    let Ok((read, _write)) = std::io::pipe() else {
        return false;
    };
    let byte: libc::c_char = 0;
    let fd: BorrowedFd<'_> = std::os::fd::AsFd::as_fd(&read);
    // SAFETY: TIOCSTI reads one byte from the pointer we pass; on a pipe the kernel refuses
    // before reading it.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSTI, &byte) };
    r < 0 && errno() == libc::EPERM
}
