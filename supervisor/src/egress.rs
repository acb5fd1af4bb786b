//! Egress for commands, on the supervisor's side: the allow-list a run or a one-shot uses, the
//! tier-A refusal, the proxy the one-shot sandbox serves itself, and how a record reads.
//!
//! In a run, the broker worker serves the proxy (`hanzo_broker::egress::spawn_for_run`) and its
//! records arrive as `Event::Egress` on the broker channel. `hanzo-dev sandbox` starts no worker:
//! its own (unconfined, secret-free) process serves the same proxy code on a thread of its own
//! while the command runs, and prints each record on stderr.

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

/// One record as a line: `allowed http_connect pypi.org:443 rule pypi.org → 151.101.0.223:443
/// (closed), 1.2 kB up, 30.5 kB down, 120 ms` or `denied socks5 10.0.0.1:22: ip_literal (…)`.
pub fn record_line(r: &EgressRecord) -> String {
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

/// The proxy of one `hanzo-dev sandbox` command, served on a thread of its own (a
/// single-threaded runtime, as in the broker). Dropping it waits until the channel ended (the
/// forwarder goes with the namespace when the command ends) and every record was passed on.
pub struct SandboxProxy {
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SandboxProxy {
    /// Serve `control` (the proxy's end, `SO_PASSCRED` set) for the forwarder `forwarder_pid`
    /// under `allow`, giving each record to `sink`.
    pub fn start(
        allow: &AllowList,
        control: OwnedFd,
        forwarder_pid: u32,
        mut sink: impl FnMut(EgressRecord) + Send + 'static,
    ) -> Result<SandboxProxy, String> {
        let settings = EgressSettings {
            allow: allow.entries(),
            forwarder_pid,
            ..EgressSettings::default()
        };
        let config = EgressConfig::from_settings(&settings).map_err(|e| e.to_string())?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the egress proxy's runtime: {e}"))?;
        let thread = std::thread::Builder::new()
            .name("hanzo-egress".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let (tx, mut rx) = tokio::sync::mpsc::channel(256);
                    let egress = Egress::new(config, Arc::new(SystemResolver), tx);
                    let serve = async move {
                        if let Err(e) = egress.serve_control(control).await {
                            eprintln!("hanzo-dev sandbox: egress channel refused: {e}");
                        }
                    };
                    let forward = async move {
                        while let Some(record) = rx.recv().await {
                            sink(record);
                        }
                    };
                    tokio::join!(serve, forward);
                });
            })
            .map_err(|e| format!("cannot start the egress proxy's thread: {e}"))?;
        Ok(SandboxProxy {
            thread: Some(thread),
        })
    }
}

impl Drop for SandboxProxy {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
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
