//! The process tree as `/proc` shows it: what the tests that kill, stop or cancel a run read to
//! prove no process outlived it.

/// The parent of `pid`, from `/proc/PID/stat` (the field after the parenthesised command name,
/// which may itself hold spaces and parentheses).
pub fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(1)?.parse().ok()
}

/// Whether `pid` still runs: a zombie has exited, only its parent's wait is missing.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rfind(')')
            .is_some_and(|i| !stat[i + 1..].trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Pids of the processes whose parent chain leads to `root` and whose command line contains
/// every one of `words`.
pub fn descendants_with(root: u32, words: &[&str]) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if !words.iter().all(|w| cmd.contains(w)) {
            continue;
        }
        let mut p = pid;
        // Bounded: a chain that changes under us while we walk it must not loop.
        for _ in 0..64 {
            if p == root {
                out.push(pid);
                break;
            }
            match parent(p) {
                Some(pp) if pp > 1 => p = pp,
                _ => break,
            }
        }
    }
    out
}
