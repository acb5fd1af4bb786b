//! Protections the supervisor applies to itself at start.
//!
//! Removing a variable from the environment (`unsetenv`) only drops its pointer: the original
//! `NAME=value` bytes stay in the process's initial environment block, which is exactly what
//! `/proc/<pid>/environ` shows. So secrets are overwritten in place before they are removed, and
//! the process is made non-dumpable so that other processes of the same user can neither ptrace it
//! nor read its `/proc/<pid>/environ` or `/proc/<pid>/mem`.

use std::ffi::CString;

/// Overwrite the value of each named variable in place with NUL bytes, then remove it.
///
/// Must be called while the process is single-threaded (nothing else may read the environment).
/// Returns how many values were wiped.
pub fn wipe_and_remove_env(names: &[String]) -> usize {
    let mut wiped = 0;
    for name in names {
        let Ok(cname) = CString::new(name.as_str()) else {
            continue;
        };
        // SAFETY: `getenv` returns a pointer to the NUL-terminated value inside the environment
        // block (or null). We are single-threaded (the caller's contract), so nothing else reads
        // or changes the environment while we overwrite exactly `strlen` bytes of that value,
        // which stay inside the same allocation; the pointer is not used after `remove_var`.
        unsafe {
            let value = libc::getenv(cname.as_ptr());
            if !value.is_null() {
                let len = libc::strlen(value);
                std::ptr::write_bytes(value, 0, len);
                wiped += 1;
            }
        }
        std::env::remove_var(name);
    }
    wiped
}

/// Make this process non-dumpable (no core dump, no ptrace or `/proc/<pid>/{mem,environ}` by
/// other processes of the same user).
pub fn set_non_dumpable() -> std::io::Result<()> {
    // SAFETY: prctl(PR_SET_DUMPABLE, 0) takes integer arguments only and touches no memory of ours.
    let rc = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
