//! Passing terminal signals on. A sandboxed command runs in a session of its own (no controlling
//! terminal, so it cannot push input into the caller's), which also means the terminal's ^C no
//! longer reaches it directly: the process that waits for it forwards SIGINT, SIGTERM, SIGHUP and
//! SIGQUIT instead.

use std::sync::atomic::{AtomicI32, Ordering};

/// The signals forwarded.
pub const FORWARDED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

static TARGET: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    let target = TARGET.load(Ordering::SeqCst);
    if target != 0 && target != -1 {
        // SAFETY: kill is async-signal-safe; the target is a pid or a negative process group.
        unsafe { libc::kill(target, sig) };
    }
}

/// From now on, forward the terminal signals to `target` (a pid, or `-pgid` for a process
/// group). The handlers restart interrupted calls, so a `waitpid` loop goes on.
pub fn forward(target: libc::pid_t) {
    TARGET.store(target, Ordering::SeqCst);
    for sig in FORWARDED {
        // SAFETY: an all-zero sigaction is a valid starting point; the handler only calls kill.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = on_signal as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        // SAFETY: `sa.sa_mask` is ours to initialise.
        unsafe { libc::sigemptyset(&mut sa.sa_mask) };
        // SAFETY: installs a handler from a valid sigaction; the old one is not wanted.
        unsafe { libc::sigaction(sig, &sa, std::ptr::null_mut()) };
    }
}
