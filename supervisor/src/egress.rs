//! Egress for commands, on the supervisor's side: the allow-list a run or a one-shot uses, the
//! tier-A refusal, the proxy the one-shot sandbox serves itself, and how a record reads.
//!
//! In a run, the broker worker serves the proxy (`hanzo_broker::egress::spawn_for_run`) on the
//! control socket it inherited, once [`configure_run`] told it the forwarder's pid; its records
//! arrive as `Event::Egress` on the broker channel, and [`EgressRecorder`] stores each in the run
//! (event kind `egress`) and streams it ([`RunEvent::Egress`]). `hanzo-dev sandbox` starts no worker:
//! it forks a helper that confines itself with the broker's profile and serves the same proxy
//! code while the command runs, printing each record on stderr ([`SandboxProxy`]).

use crate::agent::events::{EventSink, RunEvent};
use hanzo_broker::egress::{Egress, EgressConfig, SystemResolver};
use hanzo_ipc::roles::broker::{EgressOutcome, EgressRecord, EgressSettings};
use hanzo_policy::network::{require_tier_b, AllowList, NeedsTierB};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
    let target = match &r.server {
        Some(server) => format!("{target} for MCP server {server}"),
        None => target,
    };
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

/// One egress record as a run shows it (`runs show`, the `egress` event in the store, the
/// `egress` event of `run --json`). Every string is sanitised for a terminal here, whatever the
/// broker already did: the host and the detail come from what a command sent.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EgressEvent {
    /// Sequence number on the run's control channel.
    pub id: u64,
    /// `http_connect`, `http_forward`, `socks5`, `unknown`.
    pub protocol: String,
    /// The host the command asked for, sanitised and cut to 300 characters (empty when no request
    /// was read).
    pub host: String,
    /// The port the command asked for (0 when no request was read).
    pub port: u16,
    /// `allowed` or `denied`.
    pub decision: String,
    /// The allow-list entry that allowed the name (also for a later refusal of its address).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// `ip:port` connected to (allowed only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// How the tunnel ended: `closed`, `idle_timeout`, `error`, `shutdown` (allowed only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end: Option<String>,
    /// Why it was refused: `not_listed`, `private_address`, `ip_literal`, … (denied only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What happened, in a sentence, sanitised (denied only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Bytes sent to the destination for the command (the request to the proxy itself not counted).
    pub bytes_up: u64,
    /// Bytes from the destination to the command (the proxy's own replies not counted).
    pub bytes_down: u64,
    /// Milliseconds from the connection's arrival at the broker to its end.
    pub duration_ms: u64,
    /// The MCP stdio server the connection was made for (`None`: a command's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The record in one line, as `hanzo-dev sandbox` prints it.
    pub summary: String,
}

/// At most this many characters of a record's strings are kept.
const MAX_FIELD: usize = 300;

fn clean(s: &str) -> String {
    let line = crate::term::sanitize_line_for_terminal(s);
    match line.char_indices().nth(MAX_FIELD) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line.into_owned(),
    }
}

impl EgressEvent {
    /// The broker's record as a run shows it: strings sanitised for a terminal and cut, the
    /// outcome spread over `decision`, `rule`, `address`, `end`, `reason` and `detail`.
    pub fn from_record(r: &EgressRecord) -> EgressEvent {
        let mut e = EgressEvent {
            id: r.id,
            protocol: r.protocol.as_str().to_string(),
            host: clean(&r.host),
            port: r.port,
            decision: String::new(),
            rule: None,
            address: None,
            end: None,
            reason: None,
            detail: None,
            bytes_up: r.bytes_up,
            bytes_down: r.bytes_down,
            duration_ms: r.duration_ms,
            server: r.server.as_deref().map(clean),
            summary: clean(&record_line(r)),
        };
        match &r.outcome {
            EgressOutcome::Allowed { rule, address, end } => {
                e.decision = "allowed".into();
                e.rule = Some(clean(rule));
                e.address = Some(clean(address));
                e.end = Some(end.as_str().to_string());
            }
            EgressOutcome::Denied {
                reason,
                rule,
                detail,
            } => {
                e.decision = "denied".into();
                e.rule = rule.as_deref().map(clean);
                e.reason = Some(reason.as_str().to_string());
                e.detail = Some(clean(detail));
            }
        }
        e
    }
}

/// How long the supervisor looks for the tools worker's forwarder (bounds a broken start; the
/// forwarder exists before the worker is attested, so it is normally found at once).
const FORWARDER_PATIENCE: Duration = Duration::from_secs(5);

/// Why a run's egress could not be set up (the run is then refused: its commands were promised
/// a proxy).
#[derive(Debug, thiserror::Error)]
pub enum ConfigureError {
    /// No tools worker is running to forward the commands' connections.
    #[error("the tools worker is not running")]
    NoToolsWorker,
    /// The tools worker (this pid) runs, but its forwarder did not appear in its namespace in time.
    #[error(
        "the egress forwarder was not found in the tools worker's namespace (tools worker pid {0})"
    )]
    NoForwarder(u32),
    /// The broker answered the configuration with an error or an unexpected reply (the text).
    #[error("the broker refused the egress configuration: {0}")]
    Broker(String),
    /// No mcp worker is running to forward its servers' connections.
    #[error("the mcp worker is not running")]
    NoMcpWorker,
    /// The mcp worker (this pid) runs, but its forwarder did not appear in its namespace in time.
    #[error(
        "the egress forwarder was not found in the mcp worker's namespace (mcp worker pid {0})"
    )]
    NoMcpForwarder(u32),
}

/// The forwarder's pid as the supervisor sees it: the tools (or mcp) worker `tools_pid` waits
/// outside its namespaces for their pid 1, whose first child (pid
/// [`hanzo_tools::egress_forward::NS_PID`] inside) is the forwarder.
pub fn forwarder_pid(tools_pid: u32) -> Option<u32> {
    let pid1 = hanzo_sandbox::procfs::child_with_ns_pid(tools_pid, 1)?;
    hanzo_sandbox::procfs::child_with_ns_pid(pid1, hanzo_tools::egress_forward::NS_PID)
}

/// Tell the running broker to serve the run's egress for the running tools worker's forwarder
/// under `allow` (the effective list, not empty). Returns the forwarder's pid.
pub async fn configure_run(
    sup: &crate::tree::Supervisor,
    allow: &[String],
) -> Result<u32, ConfigureError> {
    let tools = sup.tools.info().ok_or(ConfigureError::NoToolsWorker)?;
    let deadline = std::time::Instant::now() + FORWARDER_PATIENCE;
    let forwarder = loop {
        if let Some(pid) = forwarder_pid(tools.pid) {
            break pid;
        }
        if std::time::Instant::now() >= deadline {
            return Err(ConfigureError::NoForwarder(tools.pid));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let settings = EgressSettings {
        allow: allow.to_vec(),
        forwarder_pid: forwarder,
        ..EgressSettings::default()
    };
    match sup
        .broker
        .call(hanzo_ipc::roles::broker::Request::ConfigureEgress(settings))
        .await
    {
        Ok(hanzo_ipc::roles::broker::Response::EgressConfigured) => Ok(forwarder),
        Ok(other) => Err(ConfigureError::Broker(format!(
            "unexpected reply {other:?}"
        ))),
        Err(e) => Err(ConfigureError::Broker(e.to_string())),
    }
}

/// Tell the running broker to serve the mcp worker's egress channel for its forwarder, one
/// source per stdio server given network (its proxy address and list). Returns the forwarder's
/// pid. `mcp` and `broker` are the tree's handles (owned: the keeper task holds clones).
pub async fn configure_mcp(
    mcp: &crate::worker::WorkerHandle<hanzo_ipc::roles::mcp::McpProtocol>,
    broker: &crate::worker::WorkerHandle<hanzo_ipc::roles::broker::BrokerProtocol>,
    sources: &[hanzo_ipc::roles::broker::EgressSource],
) -> Result<u32, ConfigureError> {
    let worker = mcp.info().ok_or(ConfigureError::NoMcpWorker)?;
    let deadline = std::time::Instant::now() + FORWARDER_PATIENCE;
    let forwarder = loop {
        if let Some(pid) = forwarder_pid(worker.pid) {
            break pid;
        }
        if std::time::Instant::now() >= deadline {
            return Err(ConfigureError::NoMcpForwarder(worker.pid));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let settings = EgressSettings {
        forwarder_pid: forwarder,
        sources: sources.to_vec(),
        ..EgressSettings::default()
    };
    match broker
        .call(hanzo_ipc::roles::broker::Request::ConfigureMcpEgress(
            settings,
        ))
        .await
    {
        Ok(hanzo_ipc::roles::broker::Response::EgressConfigured) => Ok(forwarder),
        Ok(other) => Err(ConfigureError::Broker(format!(
            "unexpected reply {other:?}"
        ))),
        Err(e) => Err(ConfigureError::Broker(e.to_string())),
    }
}

/// Keep the broker configured for the run's egress across restarts: the broker and the tools
/// worker restart as a pair (a new control socket each), and a new broker serves nothing until
/// told the new forwarder's pid. Runs beside the agent loop and never returns; `configured` is
/// the (tools, broker) generations [`configure_run`] was first sent for.
pub async fn keep_configured(
    sup: &crate::tree::Supervisor,
    allow: &[String],
    mut configured: (u64, u64),
) -> std::convert::Infallible {
    loop {
        // Either side restarting restarts the other: wait for both to be back.
        let (Some(tools), Some(broker)) = (
            sup.tools.next_ready(configured.0).await,
            sup.broker.next_ready(configured.1).await,
        ) else {
            break;
        };
        configured = (tools.generation, broker.generation);
        match configure_run(sup, allow).await {
            Ok(forwarder) => {
                tracing::info!(forwarder, "egress reconfigured after a worker restart")
            }
            Err(e) => {
                tracing::error!("egress not reconfigured after a worker restart: {e}");
                eprintln!(
                    "warning: the egress proxy could not be set up again after a worker \
                     restart ({e}); commands' connections are refused from now on"
                );
            }
        }
    }
    std::future::pending().await
}

/// The generations of the tools and broker workers now running (what [`keep_configured`]
/// starts from after [`configure_run`]).
pub fn generations(sup: &crate::tree::Supervisor) -> (u64, u64) {
    let gen = |i: Option<Arc<crate::worker::WorkerInfo>>| i.map(|i| i.generation).unwrap_or(0);
    (gen(sup.tools.info()), gen(sup.broker.info()))
}

/// The run's event sink with egress records woven in: each record the broker sends is stored
/// in the run (event kind `egress`, through a connection of its own to the run store) and
/// emitted as [`RunEvent::Egress`] at the next event of the run, and `run_finished` is held back
/// until [`EgressRecorder::finish`] has collected the run's last records — so it stays last.
pub struct EgressRecorder<'a> {
    inner: &'a dyn EventSink,
    state: Mutex<RecorderState>,
}

struct RecorderState {
    records: tokio::sync::mpsc::UnboundedReceiver<EgressRecord>,
    store: hanzo_store::RunStore,
    run: Option<hanzo_store::RunId>,
    /// Records that came before the run was begun.
    early: Vec<EgressEvent>,
    finished: Option<RunEvent>,
    seen: u64,
    /// The first store failure (reported once).
    failed: bool,
}

/// How long [`EgressRecorder::finish`] waits for records the broker said it sent.
const RECORD_PATIENCE: Duration = Duration::from_secs(3);

impl<'a> EgressRecorder<'a> {
    /// Wraps `inner`: records arriving on `records` are stored through `store` (the run store, its
    /// own connection) once the run has begun, and passed on to `inner` as events.
    pub fn new(
        inner: &'a dyn EventSink,
        records: tokio::sync::mpsc::UnboundedReceiver<EgressRecord>,
        store: hanzo_store::RunStore,
    ) -> EgressRecorder<'a> {
        EgressRecorder {
            inner,
            state: Mutex::new(RecorderState {
                records,
                store,
                run: None,
                early: Vec::new(),
                finished: None,
                seen: 0,
                failed: false,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RecorderState> {
        // Every field is replaced whole: consistent between statements.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Store and emit every record that has arrived.
    fn drain(&self, st: &mut RecorderState) {
        while let Ok(record) = st.records.try_recv() {
            st.seen += 1;
            let event = EgressEvent::from_record(&record);
            match st.run {
                Some(run) => self.keep(st, run, event),
                None => st.early.push(event),
            }
        }
    }

    fn keep(&self, st: &mut RecorderState, run: hanzo_store::RunId, event: EgressEvent) {
        let data = serde_json::to_value(&event).expect("an egress event always serializes");
        if let Err(e) = st.store.record_event(run, None, "egress", &data) {
            if !st.failed {
                st.failed = true;
                tracing::error!(run_id = run.0, "cannot store an egress record: {e}");
                eprintln!("error: cannot store the run's egress records: {e}");
            }
        }
        self.inner.emit(&RunEvent::Egress(event));
    }

    /// After the loop: ask the broker to settle (open connections end, records sent), collect
    /// the records it says it sent (bounded wait), then emit the held `run_finished`.
    pub async fn finish(&self, sup: &crate::tree::Supervisor) {
        let expected = match sup
            .broker
            .call(hanzo_ipc::roles::broker::Request::EgressQuiesce)
            .await
        {
            Ok(hanzo_ipc::roles::broker::Response::EgressQuiet { records, open }) => {
                if open > 0 {
                    eprintln!(
                        "warning: {open} egress connection(s) were still open when the run \
                         ended; they are recorded when they close, or not at all"
                    );
                }
                records
            }
            _ => 0,
        };
        let deadline = tokio::time::Instant::now() + RECORD_PATIENCE;
        loop {
            let seen = {
                let mut st = self.lock();
                self.drain(&mut st);
                st.seen
            };
            if seen >= expected || tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let finished = self.lock().finished.take();
        if let Some(f) = finished {
            self.inner.emit(&f);
        }
    }
}

impl EventSink for EgressRecorder<'_> {
    fn emit(&self, event: &RunEvent) {
        let mut st = self.lock();
        if let RunEvent::RunStarted { run_id, .. } = event {
            self.inner.emit(event);
            let run = hanzo_store::RunId(*run_id);
            st.run = Some(run);
            for e in std::mem::take(&mut st.early) {
                self.keep(&mut st, run, e);
            }
            self.drain(&mut st);
            return;
        }
        self.drain(&mut st);
        if matches!(event, RunEvent::RunFinished { .. }) {
            st.finished = Some(event.clone());
            return;
        }
        self.inner.emit(event);
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
            server: Some("srv\u{1b}[31m".into()),
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
            server: None,
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
        r.server = Some("fetcher".into());
        assert!(
            record_line(&r).starts_with("denied http_connect [::1]:443 for MCP server fetcher:"),
            "{}",
            record_line(&r)
        );
    }
}
