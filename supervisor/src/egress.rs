//! Egress for commands, on the supervisor's side: the allow-list a run or a one-shot uses, the
//! tier-A refusal, the proxy the one-shot sandbox serves itself, and how a record reads.
//!
//! In a run, the broker worker serves the proxy (`hanzo_broker::egress::spawn_for_run`) and its
//! records arrive as `Event::Egress` on the broker channel. `hanzo-dev sandbox` starts no worker:
//! it forks a helper that confines itself with the broker's profile and serves the same proxy
//! code while the command runs, printing each record on stderr ([`SandboxProxy`]).

use hanzo_broker::egress::{Egress, EgressConfig, SystemResolver};
use hanzo_ipc::roles::broker::{EgressOutcome, EgressRecord, EgressSettings};
use hanzo_policy::network::{require_tier_b, AllowList, NeedsTierB};
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// Fail closed when `list` asks for network and the run would be in tier A: `isolation` is
/// `tier-a`, or the kernel cannot give tier B.
pub fn require_egress_tier(
    list: &AllowList,
    isolation: hanzo_policy::isolation::IsolationMode,
    kernel_tier_b: Result<(), String>,
) -> Result<(), NeedsTierB> {
    let tier_b = match isolation {
        hanzo_policy::isolation::IsolationMode::TierA => {
            Err("--isolation tier-a (or sandbox.isolation \"tier-a\") was asked for".to_string())
        }
        _ => kernel_tier_b,
    };
    require_tier_b(list, tier_b)
}

/// One record as a line, safe for a terminal (every part that came from a command passes
/// `term::sanitize_line_for_terminal`): `allowed http_connect pypi.org:443 rule pypi.org → 151.101.0.223:443
/// (closed), 1.2 kB up, 30.5 kB down, 120 ms` or `denied socks5 10.0.0.1:22: ip_literal (…)`.
pub fn record_line(r: &EgressRecord) -> String {
    crate::term::sanitize_line_for_terminal(&record_text(r)).into_owned()
}

fn record_text(r: &EgressRecord) -> String {
    let target = if r.host.contains(':') {
        format!("[{}]:{}", r.host, r.port)
    } else {
        format!("{}:{}", r.host, r.port)
    };
    let counts = format!(
        "{} B up, {} B down, {} ms",
        r.bytes_up, r.bytes_down, r.duration_ms
    );
    match &r.outcome {
        EgressOutcome::Allowed { rule, address, end } => format!(
            "allowed {} {target} by rule {rule} to {address} ({}), {counts}",
            r.protocol.as_str(),
            end.as_str()
        ),
        EgressOutcome::Denied {
            reason,
            rule,
            detail,
        } => {
            let rule = rule
                .as_ref()
                .map(|r| format!(" (rule {r})"))
                .unwrap_or_default();
            format!(
                "denied {} {target}: {}{rule}: {detail}, {counts}",
                r.protocol.as_str(),
                reason.as_str()
            )
        }
    }
}

/// The proxy of one `hanzo-dev sandbox` command: a helper process forked from the (still
/// single-threaded) caller that confines itself with **the broker's profile** (Landlock: what name
/// resolution and TLS read; seccomp: the broker's allow-list; no capabilities) before it reads a
/// byte from a command, then serves the proxy on a single-threaded runtime and prints each
/// record on stderr. Dropping it waits for the helper, which ends when the forwarder's end closes
/// (the forwarder dies with the namespace when the command ends).
pub struct SandboxProxy {
    pid: nix::unistd::Pid,
}

/// Exit code of a proxy helper that could not confine itself (it then serves nothing).
const PROXY_NOT_CONFINED: i32 = 92;

impl SandboxProxy {
    /// Fork the helper serving `control` (the proxy's end, `SO_PASSCRED` set) for the forwarder
    /// `forwarder_pid` under `allow`; `label` starts each record's line. Returns once the helper
    /// is confined, or why it is not.
    pub fn start(
        allow: &AllowList,
        control: OwnedFd,
        forwarder_pid: u32,
        label: &'static str,
    ) -> Result<SandboxProxy, String> {
        use std::io::{Read, Write};
        use std::os::fd::AsRawFd;
        let settings = EgressSettings {
            allow: allow.entries(),
            forwarder_pid,
            ..EgressSettings::default()
        };
        let config = EgressConfig::from_settings(&settings).map_err(|e| e.to_string())?;
        let (mut ready_read, ready_write) =
            std::io::pipe().map_err(|e| format!("egress proxy: pipe: {e}"))?;
        let keep = [control.as_raw_fd(), ready_write.as_raw_fd()];
        // The closure owns the write end and `control`: the child keeps them (and closes the read
        // end with every other descriptor); in this process they close when the closure drops.
        let pid = hanzo_sandbox::fdpass::fork_helper_keeping(&keep, false, move || {
            let profile = hanzo_policy::profile::profile_for(
                hanzo_ipc::Role::Broker,
                &hanzo_policy::profile::ProfileContext::default(),
            );
            match hanzo_sandbox::confine::confine_current_process(&profile) {
                Ok(a) if a.seccomp.installed => {}
                Ok(_) => {
                    eprintln!("{label}: egress proxy: seccomp is unavailable; not serving");
                    return PROXY_NOT_CONFINED;
                }
                Err(e) => {
                    eprintln!("{label}: egress proxy: cannot confine itself ({e}); not serving");
                    return PROXY_NOT_CONFINED;
                }
            }
            let mut ready_write = ready_write;
            if ready_write.write_all(b"K").is_err() {
                return 1;
            }
            drop(ready_write);
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                eprintln!("{label}: egress proxy: no runtime");
                return 1;
            };
            runtime.block_on(async move {
                let (tx, mut rx) = tokio::sync::mpsc::channel(256);
                let egress = Egress::new(config, Arc::new(SystemResolver), tx);
                let serve = async move {
                    let ended = egress.serve_control(control).await;
                    drop(egress);
                    if let Err(e) = ended {
                        eprintln!("{label}: egress channel refused: {e}");
                    }
                };
                let forward = async move {
                    while let Some(record) = rx.recv().await {
                        // One write per line: the command shares this stderr, and `eprintln!`
                        // may write a line in pieces, which a command's own message (curl's
                        // error for the refusal just recorded) can then split. A pipe write of
                        // at most PIPE_BUF bytes is atomic.
                        let line = format!("{label}: egress: {}\n", record_line(&record));
                        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
                    }
                };
                tokio::join!(serve, forward);
            });
            0
        })
        .map_err(|e| format!("cannot start the egress proxy: {e}"))?;
        let proxy = SandboxProxy {
            pid: nix::unistd::Pid::from_raw(pid),
        };
        let mut said = [0u8; 1];
        match ready_read.read(&mut said) {
            Ok(1) if said[0] == b'K' => Ok(proxy),
            _ => Err(
                "the egress proxy could not confine itself with the broker's profile; \
                      refusing to run the command (see the message above)"
                    .to_string(),
            ),
        }
    }
}

impl Drop for SandboxProxy {
    fn drop(&mut self) {
        let _ = nix::sys::wait::waitpid(self.pid, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hanzo_ipc::roles::broker::{EgressDenial, EgressProtocol, TunnelEnd};
    use hanzo_policy::isolation::IsolationMode;

    #[test]
    fn tier_a_with_a_list_fails_closed_and_without_one_runs() {
        let list = AllowList::parse(&["pypi.org"]).expect("list");
        let e = require_egress_tier(&list, IsolationMode::TierA, Ok(())).expect_err("tier a");
        assert!(e.to_string().contains("tier B"), "{e}");
        assert!(e.to_string().contains("pypi.org"), "{e}");
        let e = require_egress_tier(&list, IsolationMode::Auto, Err("no userns".into()))
            .expect_err("no tier b");
        assert!(e.to_string().contains("no userns"), "{e}");
        assert!(require_egress_tier(&list, IsolationMode::Auto, Ok(())).is_ok());
        assert!(require_egress_tier(&AllowList::none(), IsolationMode::TierA, Ok(())).is_ok());
    }

    #[test]
    fn a_record_line_carries_no_terminal_control_from_a_command() {
        let r = EgressRecord {
            id: 1,
            protocol: EgressProtocol::HttpConnect,
            host: "a\u{1b}]0;pwned\u{7}b".into(),
            port: 443,
            outcome: EgressOutcome::Denied {
                reason: EgressDenial::InvalidHost,
                rule: None,
                detail: "bad host \u{1b}[2J\r\nforged line".into(),
            },
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: 0,
        };
        let line = record_line(&r);
        assert!(!line.chars().any(|c| c.is_control()), "{line:?}");
    }

    #[test]
    fn a_record_line_names_the_outcome_rule_and_counts() {
        let mut r = EgressRecord {
            id: 0,
            protocol: EgressProtocol::HttpConnect,
            host: "pypi.org".into(),
            port: 443,
            outcome: EgressOutcome::Allowed {
                rule: "pypi.org".into(),
                address: "151.101.0.223:443".into(),
                end: TunnelEnd::Closed,
            },
            bytes_up: 10,
            bytes_down: 20,
            duration_ms: 3,
        };
        assert_eq!(
            record_line(&r),
            "allowed http_connect pypi.org:443 by rule pypi.org to 151.101.0.223:443 (closed), \
             10 B up, 20 B down, 3 ms"
        );
        r.outcome = EgressOutcome::Denied {
            reason: EgressDenial::NotListed,
            rule: None,
            detail: "not on the list".into(),
        };
        r.host = "::1".into();
        assert_eq!(
            record_line(&r),
            "denied http_connect [::1]:443: not_listed: not on the list, 10 B up, 20 B down, 3 ms"
        );
    }
}
