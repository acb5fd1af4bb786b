//! Passing terminal signals on. A sandboxed command runs in a session of its own (no controlling
//! terminal, so it cannot push input into the caller's), which also means the terminal's ^C no
//! longer reaches it directly: the process that waits for it forwards SIGINT, SIGTERM, SIGHUP and
//! SIGQUIT instead.

use std::sync::atomic::{AtomicI32, Ordering};

/// The signals forwarded.
pub const FORWARDED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

static TARGET: AtomicI32 = AtomicI32::new(0);
/// The last signal that arrived while there was no target yet (0: none).
static PENDING: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    let target = TARGET.load(Ordering::SeqCst);
    if target != 0 && target != -1 {
        // SAFETY: kill is async-signal-safe; the target is a pid or a negative process group.
        unsafe { libc::kill(target, sig) };
    } else {
        PENDING.store(sig, Ordering::SeqCst);
    }
}

/// Catch the terminal signals before there is anything to forward them to (call it before the
/// command is spawned): one that arrives now is kept and passed on by [`forward`], instead of
/// killing the caller while the command runs on. Without it, a ^C typed while the command
/// starts kills the waiting process and leaves the command behind.
pub fn hold() {
    install();
}

/// From now on, forward the terminal signals to `target` (a pid, or `-pgid` for a process
/// group), starting with one held since [`hold`]. The handlers restart interrupted calls, so a
/// `waitpid` loop goes on.
pub fn forward(target: libc::pid_t) {
    TARGET.store(target, Ordering::SeqCst);
    install();
    let held = PENDING.swap(0, Ordering::SeqCst);
    if held != 0 && target != 0 && target != -1 {
        // SAFETY: kill with a pid or a negative process group and a valid signal number.
        unsafe { libc::kill(target, held) };
    }
}

fn install() {
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
