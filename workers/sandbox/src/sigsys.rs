//! What happens when a worker makes a syscall outside its allow-list: the filter answers
//! `SECCOMP_RET_TRAP`, the kernel skips the syscall and raises `SIGSYS`, and the handler installed
//! here writes one line naming the syscall and the list to edit, then ends the process with
//! [`EXIT_SECCOMP`]. The supervisor logs the worker's stderr and restarts it.
//!
//! Why stop rather than return an error: a worker runs known code, so a syscall outside its list
//! is a bug or a compromise. An error return would let a compromised worker probe quietly, and
//! a bug would surface as a confusing failure far from its cause (a library treating `EPERM` as
//! "file not found"); a stop is loud, names the syscall, and the supervisor's restart machinery
//! already handles a dying worker. The kernel never executes the refused syscall either way.
//!
//! Two other modes exist for the moments when a trap must not end the process: [`probing`]
//! records the trap and returns (the attestation's read-back calls syscalls outside the list on
//! purpose), and [`quiet`] exits without the report (a probe child attempting a forbidden
//! operation for `doctor`; its parent reports the refusal).

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, AtomicU8, AtomicUsize, Ordering};

/// Exit status of a worker stopped for a syscall outside its allow-list (128 + `SIGSYS`, what a
/// shell shows for a death by that signal).
pub const EXIT_SECCOMP: i32 = 128 + libc::SIGSYS;

const MODE_REPORT: u8 = 0;
const MODE_PROBING: u8 = 1;
const MODE_QUIET: u8 = 2;

static MODE: AtomicU8 = AtomicU8::new(MODE_REPORT);
static TRAPPED: AtomicI64 = AtomicI64::new(-1);
static WHO: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static WHO_LEN: AtomicUsize = AtomicUsize::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Install the handler (once per process; a forked child keeps it). `who` names the process and
/// its list in the report, e.g. `"tools worker (policy/seccomp/tools.txt)"`.
pub fn install(who: &'static str) -> std::io::Result<()> {
    WHO.store(who.as_ptr().cast_mut(), Ordering::SeqCst);
    WHO_LEN.store(who.len(), Ordering::SeqCst);
    if INSTALLED.swap(true, Ordering::SeqCst) {
        return Ok(());
    }
    // SAFETY: an all-zero sigaction is a valid starting point; we set the handler, SA_SIGINFO and
    // an empty mask, and `on_sigsys` only makes async-signal-safe calls.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = on_sigsys as *const () as usize;
    sa.sa_flags = libc::SA_SIGINFO;
    // SAFETY: `sa.sa_mask` is ours to initialise.
    unsafe { libc::sigemptyset(&mut sa.sa_mask) };
    // SAFETY: installs a handler for SIGSYS from a valid sigaction; the old one is not wanted.
    if unsafe { libc::sigaction(libc::SIGSYS, &sa, std::ptr::null_mut()) } < 0 {
        INSTALLED.store(false, Ordering::SeqCst);
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// While the returned guard lives, a trap is recorded (see [`trapped`]) and the process goes on;
/// the trapped call's return value is meaningless.
pub fn probing() -> Probing {
    TRAPPED.store(-1, Ordering::SeqCst);
    MODE.store(MODE_PROBING, Ordering::SeqCst);
    Probing(())
}

/// Restores the reporting mode when dropped.
pub struct Probing(());

impl Probing {
    /// The syscall number trapped since the last call (or since [`probing`]), if any.
    pub fn take(&self) -> Option<i64> {
        let nr = TRAPPED.swap(-1, Ordering::SeqCst);
        (nr >= 0).then_some(nr)
    }
}

impl Drop for Probing {
    fn drop(&mut self) {
        MODE.store(MODE_REPORT, Ordering::SeqCst);
    }
}

/// From now on a trap ends this process with [`EXIT_SECCOMP`] and no report: for a short-lived
/// probe child whose parent reports what happened.
pub fn quiet() {
    MODE.store(MODE_QUIET, Ordering::SeqCst);
}

/// The syscall number a `SIGSYS` siginfo carries (`si_syscall`, after `si_call_addr`).
///
/// # Safety
/// `info` must point to the siginfo the kernel passed for a seccomp `SIGSYS`.
unsafe fn si_syscall(info: *const libc::siginfo_t) -> i64 {
    // The `_sigsys` member of the union starts after si_signo, si_errno, si_code (three ints,
    // padded to 8 bytes on 64-bit): `void *_call_addr; int _syscall; unsigned int _arch;`.
    const SIGSYS_OFFSET: usize = 16;
    let base = info.cast::<u8>();
    // SAFETY: the caller passes the kernel's siginfo, which is 128 bytes; the offset is within.
    let nr = unsafe {
        std::ptr::read_unaligned(
            base.add(SIGSYS_OFFSET + std::mem::size_of::<usize>())
                .cast::<libc::c_int>(),
        )
    };
    i64::from(nr)
}

fn write_all(bytes: &[u8]) {
    let mut rest = bytes;
    while !rest.is_empty() {
        // SAFETY: write reads `rest.len()` bytes from a live slice.
        let n = unsafe { libc::write(2, rest.as_ptr().cast(), rest.len()) };
        if n <= 0 {
            return;
        }
        rest = &rest[n.unsigned_abs()..];
    }
}

/// Formats `n` into `buf` without allocating; returns the digits.
fn decimal(mut n: i64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    if n == 0 {
        i -= 1;
        buf[i] = b'0';
    }
    let negative = n < 0;
    while n != 0 && i > 1 {
        i -= 1;
        buf[i] = b'0' + u8::try_from((n % 10).unsigned_abs()).unwrap_or(0);
        n /= 10;
    }
    if negative {
        i -= 1;
        buf[i] = b'-';
    }
    &buf[i..]
}

extern "C" fn on_sigsys(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passed this siginfo for the SIGSYS being handled.
    let nr = unsafe { si_syscall(info) };
    match MODE.load(Ordering::SeqCst) {
        MODE_PROBING => {
            TRAPPED.store(nr, Ordering::SeqCst);
        }
        MODE_QUIET => {
            // SAFETY: _exit is async-signal-safe and never returns.
            unsafe { libc::_exit(EXIT_SECCOMP) }
        }
        _ => {
            write_all(b"hanzo-dev ");
            let who = WHO.load(Ordering::SeqCst);
            let len = WHO_LEN.load(Ordering::SeqCst);
            if !who.is_null() && len > 0 {
                // SAFETY: `who`/`len` were stored together from a `&'static str`.
                write_all(unsafe { std::slice::from_raw_parts(who, len) });
            }
            write_all(b": seccomp stopped the process at syscall ");
            write_all(crate::syscalls::name(nr).as_bytes());
            write_all(b" (");
            let mut buf = [0u8; 20];
            write_all(decimal(nr, &mut buf));
            write_all(b"), which its allow-list does not admit; if it is needed, add it to the list after review\n");
            // SAFETY: _exit is async-signal-safe and never returns.
            unsafe { libc::_exit(EXIT_SECCOMP) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_formats_without_allocating() {
        let mut b = [0u8; 20];
        assert_eq!(decimal(0, &mut b), b"0");
        assert_eq!(decimal(425, &mut b), b"425");
        assert_eq!(decimal(-12, &mut b), b"-12");
    }
}
