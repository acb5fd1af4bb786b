//! Reading a process's confinement state from `/proc`: the kernel's own account, used both by a
//! worker attesting itself and by the supervisor and tests checking a worker from outside.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// The confinement-relevant lines of `/proc/<pid>/status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStatus {
    /// `NoNewPrivs: 1`.
    pub no_new_privs: bool,
    /// `Seccomp:` 0 (none), 1 (strict) or 2 (filter).
    pub seccomp_mode: u8,
    /// `CapEff:` the effective capabilities (a bit mask).
    pub cap_eff: u64,
    /// `CapPrm:` the permitted capabilities.
    pub cap_prm: u64,
    /// `CapInh:` the inheritable capabilities.
    pub cap_inh: u64,
    /// `CapAmb:` the ambient capabilities.
    pub cap_amb: u64,
    /// `CapBnd:` the bounding set.
    pub cap_bnd: u64,
    /// `Threads:` how many threads the process has.
    pub threads: u32,
    /// `Seccomp_filters:` how many filters are stacked (0 where the kernel does not say).
    pub seccomp_filters: u32,
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// Parses the text of a `status` file. Capability and thread lines are required; `NoNewPrivs`
/// and `Seccomp` read as off when the kernel does not print them (so a missing line can only
/// make an attestation weaker, never stronger).
pub fn parse_status(text: &str) -> io::Result<ProcStatus> {
    let mut no_new_privs = false;
    let mut seccomp_mode = 0u8;
    let mut seccomp_filters = 0u32;
    let (mut eff, mut prm, mut inh, mut amb, mut bnd, mut threads) =
        (None, None, None, None, None, None);
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        let hex = || {
            u64::from_str_radix(value, 16)
                .map_err(|_| invalid(format!("bad {key} value {value:?}")))
        };
        match key {
            "NoNewPrivs" => no_new_privs = value == "1",
            "Seccomp" => {
                seccomp_mode = value
                    .parse()
                    .map_err(|_| invalid(format!("bad Seccomp value {value:?}")))?
            }
            "Seccomp_filters" => seccomp_filters = value.parse().unwrap_or(0),
            "CapEff" => eff = Some(hex()?),
            "CapPrm" => prm = Some(hex()?),
            "CapInh" => inh = Some(hex()?),
            "CapAmb" => amb = Some(hex()?),
            "CapBnd" => bnd = Some(hex()?),
            "Threads" => {
                threads = Some(
                    value
                        .parse()
                        .map_err(|_| invalid(format!("bad Threads value {value:?}")))?,
                )
            }
            _ => {}
        }
    }
    let need = |v: Option<u64>, name: &str| v.ok_or_else(|| invalid(format!("no {name} line")));
    Ok(ProcStatus {
        no_new_privs,
        seccomp_mode,
        cap_eff: need(eff, "CapEff")?,
        cap_prm: need(prm, "CapPrm")?,
        cap_inh: need(inh, "CapInh")?,
        // Kernels before 4.3 have no ambient set: nothing can be in it.
        cap_amb: amb.unwrap_or(0),
        cap_bnd: need(bnd, "CapBnd")?,
        threads: threads.ok_or_else(|| invalid("no Threads line".to_string()))?,
        seccomp_filters,
    })
}

/// Parses `/proc/<pid>/status`.
pub fn read_status(pid: u32) -> io::Result<ProcStatus> {
    parse_status(&std::fs::read_to_string(format!("/proc/{pid}/status"))?)
}

/// Re-reads an already open `status` file from its start. procfs regenerates the text on every
/// read at offset 0, so a worker can open the file before Landlock hides `/proc` and still read
/// its current state afterwards.
pub(crate) fn reread_status(file: &File) -> io::Result<ProcStatus> {
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        let n = file.read_at(&mut buf[len..], len as u64)?;
        if n == 0 {
            break;
        }
        len += n;
    }
    parse_status(&String::from_utf8_lossy(&buf[..len]))
}

/// The environment of `pid` (`/proc/<pid>/environ`), as it was at exec. Bytes that are not UTF-8
/// are replaced; an entry without `=` becomes a name with an empty value.
pub fn read_environ(pid: u32) -> io::Result<Vec<(String, String)>> {
    let raw = std::fs::read(format!("/proc/{pid}/environ"))?;
    Ok(parse_environ(&raw))
}

pub(crate) fn parse_environ(raw: &[u8]) -> Vec<(String, String)> {
    raw.split(|b| *b == 0)
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let text = String::from_utf8_lossy(entry);
            match text.split_once('=') {
                Some((k, v)) => (k.to_string(), v.to_string()),
                None => (text.into_owned(), String::new()),
            }
        })
        .collect()
}

/// The child of `parent` (a pid in our namespace) whose pid in its own, innermost pid namespace
/// is `ns_pid` (the last `NSpid` field), as our pid: how the caller of tier B finds a process
/// pid 1 forked (the egress forwarder) without anything inside telling it.
pub fn child_with_ns_pid(parent: u32, ns_pid: u32) -> Option<u32> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        };
        let ppid = field("PPid:").and_then(|v| v.first().and_then(|p| p.parse::<u32>().ok()));
        let inner = field("NSpid:").and_then(|v| v.last().and_then(|p| p.parse::<u32>().ok()));
        if ppid == Some(parent) && inner == Some(ns_pid) {
            return Some(pid);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "Name:\tworker\nThreads:\t1\nCapInh:\t0000000000000000\n\
        CapPrm:\t000001fffeffffff\nCapEff:\t000001fffeffffff\nCapBnd:\t0000000000000000\n\
        CapAmb:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t4\n";

    #[test]
    fn parses_every_field() {
        let s = parse_status(SAMPLE).expect("sample parses");
        assert_eq!(
            s,
            ProcStatus {
                no_new_privs: true,
                seccomp_mode: 2,
                cap_eff: 0x1fffeffffff,
                cap_prm: 0x1fffeffffff,
                cap_inh: 0,
                cap_amb: 0,
                cap_bnd: 0,
                threads: 1,
                seccomp_filters: 4,
            }
        );
    }

    #[test]
    fn missing_capability_line_is_an_error() {
        let text = SAMPLE.replace("CapEff:\t000001fffeffffff\n", "");
        let err = parse_status(&text).expect_err("no CapEff");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn missing_seccomp_line_reads_as_no_filter() {
        let text = SAMPLE
            .replace("Seccomp:\t2\n", "")
            .replace("NoNewPrivs:\t1\n", "");
        let s = parse_status(&text).expect("parses");
        assert_eq!(s.seccomp_mode, 0);
        assert!(!s.no_new_privs);
    }

    #[test]
    fn reads_own_status() {
        let s = read_status(std::process::id()).expect("own status");
        assert!(s.threads >= 1);
    }

    #[test]
    fn environ_entries_split_on_first_equals() {
        let env = parse_environ(b"A=1\0B=x=y\0C\0\0");
        assert_eq!(
            env,
            vec![
                ("A".to_string(), "1".to_string()),
                ("B".to_string(), "x=y".to_string()),
                ("C".to_string(), String::new())
            ]
        );
    }

    #[test]
    fn a_child_is_found_by_its_pid_in_its_own_namespace() {
        let mut child = std::process::Command::new("/bin/sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let me = std::process::id();
        // Same pid namespace: its innermost pid is its pid.
        assert_eq!(child_with_ns_pid(me, child.id()), Some(child.id()));
        assert_eq!(child_with_ns_pid(me + 1_000_000, child.id()), None);
        let _ = child.kill();
        let _ = child.wait();
    }
}
