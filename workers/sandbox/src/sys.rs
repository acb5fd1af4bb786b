//! Small wrappers over raw system calls shared by the modules.

use std::io;

/// The calling thread's `errno` after a failed call.
pub(crate) fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A short symbolic name for the errno values our probes and checks meet.
pub(crate) fn errno_name(e: i32) -> String {
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
/// (`EOPNOTSUPP`: built in but not enabled at boot; `ENOSYS`: not built in).
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

/// `prctl(option)` for the read-only getters that take no further arguments.
pub(crate) fn prctl_get(option: libc::c_int) -> io::Result<libc::c_int> {
    // SAFETY: the PR_GET_* options used here take no pointer arguments and only return a value.
    let r = unsafe { libc::prctl(option, 0, 0, 0, 0) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}
