//! The supervisor and its five workers as real processes: confinement seen from inside and from
//! outside, secrets reaching the broker only, crashes, restarts, the restart-intensity limit, and
//! workers that break the protocol.
//!
//! Bounds (`within`) only keep a broken build from hanging the suite; no test asserts on time.

use hanzo_dev::secrets::StartEnv;
use hanzo_dev::startup::supervisor_config;
use hanzo_dev::tree::{Supervisor, SupervisorConfig};
use hanzo_dev::worker::WorkerHandle;
use hanzo_ipc::channel::{CallError, StreamPart};
use hanzo_ipc::probe::{Probe, ProbeOutcome, SocketFamily, SocketKind};
use hanzo_ipc::roles::{CommonRequest, CommonResponse, HasCommon};
use hanzo_ipc::Role;
use hanzo_worker::Fault;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

const CANARY: &str = "sk-canary-7f3a9d2e1b6c4058";

async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within the hang guard"))
}

struct Setup {
    cfg: SupervisorConfig,
    _run_dir: hanzo_dev::startup::RunDir,
    _workspace: tempfile::TempDir,
}

fn setup(faults: &[(Role, Fault)]) -> Setup {
    let workspace = tempfile::tempdir().expect("workspace");
    let mut vars: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k == "PATH" || k == "HOME" || k == "LANG")
        .collect();
    vars.push(("HANZO_CANARY_API_KEY".into(), CANARY.into()));
    vars.push(("DEPLOY_TOKEN".into(), format!("{CANARY}-token")));
    // A name no built-in pattern catches, declared secret through HANZO_SECRET_ENV.
    vars.push(("CORP_VAULT".into(), format!("{CANARY}-vault")));
    vars.push(("HANZO_SECRET_ENV".into(), "CORP_VAULT".into()));
    let env = StartEnv { vars };
    let abi = hanzo_sandbox::doctor::probe_kernel().landlock_abi;
    let (mut cfg, run_dir) =
        supervisor_config(Some(workspace.path().to_path_buf()), &env, abi).expect("config");
    cfg.exe = PathBuf::from(env!("CARGO_BIN_EXE_hanzo-dev"));
    cfg.faults = faults.iter().copied().collect();
    Setup {
        cfg,
        _run_dir: run_dir,
        _workspace: workspace,
    }
}

async fn start(faults: &[(Role, Fault)]) -> (Supervisor, Setup) {
    let s = setup(faults);
    let sup = within("start", Supervisor::start(s.cfg.clone()))
        .await
        .expect("supervisor starts");
    (sup, s)
}

async fn probe<P: HasCommon>(h: &WorkerHandle<P>, p: Probe) -> ProbeOutcome {
    match within(
        "probe",
        h.call(P::common_request(CommonRequest::Probe(p.clone()))),
    )
    .await
    {
        Ok(r) => match P::into_common_response(r) {
            Some(CommonResponse::Probe(o)) => o,
            other => panic!("unexpected reply to {p:?}: {other:?}"),
        },
        Err(e) => panic!("probe {p:?} failed: {e}"),
    }
}

async fn echo<P: HasCommon>(h: &WorkerHandle<P>, data: &[u8]) -> Result<(), CallError> {
    let reply = h
        .call(P::common_request(CommonRequest::Echo {
            data: data.to_vec(),
        }))
        .await?;
    match P::into_common_response(reply) {
        Some(CommonResponse::Echo { data: back }) if back == data => Ok(()),
        other => panic!("bad echo reply {other:?}"),
    }
}

/// `pid` and all its descendants (a tier-B worker's tree: the process we spawned, pid 1 of the
/// namespaces, and under it the worker and the command launcher).
fn process_tree(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    let mut i = 0;
    while i < all.len() {
        all.extend(children(all[i]));
        i += 1;
    }
    all
}

/// `pid`'s status once it holds no capability and has `no_new_privs`, or as it is after the
/// bound (the caller's assertions then fail). Tier B's pid 1 of the namespaces strips itself
/// just after it forks the worker (`namespaces::reap_until`), so the worker's `Ready` can reach
/// the supervisor a moment before pid 1 is done: a bounded poll (5 ms steps, at most 2000).
fn stripped_status(pid: u32) -> hanzo_sandbox::procfs::ProcStatus {
    let mut st = hanzo_sandbox::procfs::read_status(pid).expect("status");
    for _ in 0..2000 {
        if st.no_new_privs && (st.cap_eff, st.cap_prm, st.cap_inh, st.cap_amb) == (0, 0, 0, 0) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
        st = hanzo_sandbox::procfs::read_status(pid).expect("status");
    }
    st
}

fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .collect()
}

fn we_are_privileged() -> bool {
    hanzo_sandbox::procfs::read_status(std::process::id())
        .map(|s| s.cap_eff != 0)
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_worker_is_confined_as_seen_from_outside() {
    let (sup, _s) = start(&[]).await;
    let infos = within("ready", sup.wait_ready()).await.expect("all ready");
    assert_eq!(infos.len(), 5);
    let privileged = we_are_privileged();
    for info in &infos {
        // A tier-B worker is a leaf of a small tree (the process we spawned waits for pid 1 of
        // the new namespaces, which reaps for the worker and the command launcher beside it):
        // every process in it must be stripped, and every leaf confined.
        let tree = process_tree(info.pid);
        if info.attestation.namespaces.is_empty() {
            // The worker, and the helpers it attested (a command launcher for tools, mcp, lsp).
            assert_eq!(
                tree.len(),
                1 + info.attestation.helpers.len(),
                "{}: process tree {tree:?}",
                info.role
            );
        } else {
            assert!(tree.len() >= 3, "{}: process tree {tree:?}", info.role);
        }
        for pid in &tree {
            let st = stripped_status(*pid);
            assert!(st.no_new_privs, "{} ({pid}): NoNewPrivs", info.role);
            assert_eq!(
                (st.cap_eff, st.cap_prm, st.cap_inh, st.cap_amb),
                (0, 0, 0, 0),
                "{} ({pid}): capability sets",
                info.role
            );
            if privileged {
                assert_eq!(st.cap_bnd, 0, "{} ({pid}): bounding set", info.role);
            }
            if children(*pid).is_empty() {
                assert_eq!(st.seccomp_mode, 2, "{} ({pid}): Seccomp", info.role);
                // One thread, plus in tier B's tools and mcp workers the thread that watches for
                // the launcher's end (`hanzo_tools::runner::launcher_gone`), started after
                // confinement: every thread must carry the filter.
                let most = if matches!(info.role, hanzo_ipc::Role::Tools | hanzo_ipc::Role::Mcp)
                    && !info.attestation.namespaces.is_empty()
                {
                    2
                } else {
                    1
                };
                assert!(
                    st.threads <= most,
                    "{} ({pid}): {} threads",
                    info.role,
                    st.threads
                );
                for task in std::fs::read_dir(format!("/proc/{pid}/task"))
                    .expect("tasks")
                    .flatten()
                {
                    let status =
                        std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
                    assert!(
                        status
                            .lines()
                            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["Seccomp:", "2"]),
                        "{} ({pid}) thread {:?}: no seccomp filter",
                        info.role,
                        task.file_name()
                    );
                }
            }
        }
        assert_eq!(info.attestation.role, info.role);
        assert!(info.attestation.non_dumpable);
        assert_eq!(info.generation, 1);
    }
    sup.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_worker_is_confined_as_seen_from_inside() {
    let (sup, _s) = start(&[]).await;
    within("ready", sup.wait_ready()).await.expect("ready");
    // A file outside every worker's grants, readable by us.
    let outside = tempfile::tempdir().expect("outside dir");
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "not for workers").expect("write");
    let secret = secret.display().to_string();

    macro_rules! check_role {
        ($h:expr, $may_inet:expr) => {{
            let h = &$h;
            let role = h.role();
            let o = probe(
                h,
                Probe::OpenRead {
                    path: secret.clone(),
                },
            )
            .await;
            assert!(!o.succeeded, "{role} read a file outside its grants");
            // Landlock says EACCES; in tier B the host's /tmp is not even mounted (ENOENT); a
            // role whose allow-list has no `openat` (the model) never gets that far.
            assert!(
                matches!(o.errno, Some(libc::EACCES) | Some(libc::ENOENT))
                    || (o.errno.is_none() && o.detail.contains("seccomp allow-list")),
                "{role}: {o:?}"
            );
            let o = probe(
                h,
                Probe::OpenWrite {
                    path: format!("{}/planted", outside.path().display()),
                },
            )
            .await;
            assert!(!o.succeeded, "{role} wrote outside its grants");
            let o = probe(
                h,
                Probe::Socket {
                    family: SocketFamily::Inet,
                    kind: SocketKind::Stream,
                },
            )
            .await;
            assert_eq!(o.succeeded, $may_inet, "{role} inet socket: {o:?}");
            let o = probe(
                h,
                Probe::Socket {
                    family: SocketFamily::Inet6,
                    kind: SocketKind::Datagram,
                },
            )
            .await;
            assert_eq!(o.succeeded, $may_inet, "{role} inet6 socket: {o:?}");
            for p in [
                Probe::PtraceAttach { pid: 0 },
                Probe::ProcessVmRead { pid: 0 },
                Probe::ReadEnviron { pid: 0 },
                Probe::UnshareUser,
                Probe::Mount,
                Probe::IoUringSetup,
                Probe::Bpf,
                Probe::X32Syscall,
                Probe::CloneNewNamespace,
            ] {
                let o = probe(h, p.clone()).await;
                assert!(!o.succeeded, "{role}: {p:?} succeeded: {o:?}");
            }
        }};
    }
    check_role!(sup.broker, true);
    check_role!(sup.model, false);
    check_role!(sup.tools, false);
    check_role!(sup.mcp, false);
    check_role!(sup.lsp, false);

    // The model worker has no filesystem at all, not even the system directories.
    let o = probe(
        &sup.model,
        Probe::OpenRead {
            path: "/etc/hostname".into(),
        },
    )
    .await;
    assert!(!o.succeeded, "model read /etc: {o:?}");
    // The tools worker may write its workspace.
    let ws = sup.tools.info().expect("tools info");
    assert!(ws
        .attestation
        .landlock
        .grants
        .iter()
        .any(|g| g.starts_with("rw ")));
    sup.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_variables_reach_the_broker_only() {
    let (sup, _s) = start(&[]).await;
    let infos = within("ready", sup.wait_ready()).await.expect("ready");
    for info in infos {
        let env = hanzo_sandbox::procfs::read_environ(info.pid).expect("environ");
        let has_canary = env.iter().any(|(_, v)| v.contains(CANARY));
        assert_eq!(
            has_canary,
            info.role == Role::Broker,
            "{}: canary present = {has_canary}; env names: {:?}",
            info.role,
            env.iter().map(|(k, _)| k).collect::<Vec<_>>()
        );
        // HOME is not in any worker's environment (nothing points a worker at the user's files).
        assert!(!env.iter().any(|(k, _)| k == "HOME"), "{}", info.role);
    }
    sup.shutdown().await;
}

/// Kill -9 one worker while requests are in flight; they fail at once with `WorkerGone`; the
/// worker comes back under a new pid; later requests succeed.
///
/// Workers joined by a direct channel restart as a pair (`pair.rs`): killing the broker, say,
/// makes the model and mcp workers restart too, a moment later. A worker replaced that way while
/// this function sets up is not the one it meant to kill, so it starts over with the new one.
async fn kill_during_requests<P: HasCommon>(h: &WorkerHandle<P>) {
    let mut attempts = 0;
    let (before, in_flight) = loop {
        attempts += 1;
        let (_, before) = within("ready", h.ready()).await.expect("ready");
        let mut in_flight = Vec::new();
        for _ in 0..4 {
            let h = h.clone();
            in_flight.push(tokio::spawn(async move {
                h.call(P::common_request(CommonRequest::Sleep { ms: 600_000 }))
                    .await
            }));
        }
        let stream = h
            .call_stream(P::common_request(CommonRequest::EchoStream {
                data: vec![1; 16],
                count: 1,
            }))
            .await;
        // The stream's one item proves the worker has received requests sent before it.
        let item = match stream {
            Ok(mut stream) => within("item", stream.next()).await,
            Err(e) => Some(Err(e)),
        };
        match item {
            Some(Ok(StreamPart::Item(_))) => break (before, in_flight),
            Some(Ok(StreamPart::Done(_))) => panic!("stream ended without its item"),
            Some(Err(e)) if e.is_worker_gone() && attempts < 5 => {
                // Replaced by its partner's restart: the in-flight calls failed with it. (A
                // worker that died by itself every time would fail the fifth attempt.)
                for t in in_flight {
                    let _ = within("abandoned call", t).await;
                }
            }
            Some(Err(e)) => panic!("stream failed: {e}"),
            None => panic!("stream ended"),
        }
    };
    // SAFETY-free kill: a signal to a pid we own.
    let rc = std::process::Command::new("kill")
        .args(["-9", &before.pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(rc.success());
    for t in in_flight {
        let err = within("in-flight failure", t)
            .await
            .expect("join")
            .expect_err("a killed worker cannot answer");
        assert!(err.is_worker_gone(), "{}: {err:?}", P::ROLE);
    }
    within("later request", echo(h, b"after the crash"))
        .await
        .expect("restarted worker answers");
    let after = h.info().expect("running again");
    assert_ne!(after.pid, before.pid, "{}: a new process", P::ROLE);
    assert!(after.generation > before.generation);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_workers_fail_in_flight_requests_and_restart() {
    let (sup, _s) = start(&[]).await;
    within("ready", sup.wait_ready()).await.expect("ready");
    kill_during_requests(&sup.broker).await;
    kill_during_requests(&sup.model).await;
    kill_during_requests(&sup.tools).await;
    kill_during_requests(&sup.mcp).await;
    kill_during_requests(&sup.lsp).await;
    sup.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_made_during_a_restart_waits_for_the_new_worker() {
    let (sup, _s) = start(&[]).await;
    let (_, before) = within("ready", sup.tools.ready()).await.expect("ready");
    std::process::Command::new("kill")
        .args(["-9", &before.pid.to_string()])
        .status()
        .expect("kill");
    // Keep asking until the supervisor has noticed; no request may hang or be lost silently.
    for _ in 0..50 {
        match within("echo", echo(&sup.tools, b"x")).await {
            Ok(()) if sup.tools.info().is_some_and(|i| i.pid != before.pid) => break,
            Ok(()) | Err(CallError::WorkerGone { .. }) => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => panic!("unexpected error during restart: {e}"),
        }
    }
    assert_ne!(sup.tools.info().expect("running").pid, before.pid);
    sup.shutdown().await;
}

/// The orderly stop cannot be held up by its worker: one that answers its ping but does not exit
/// when its channel ends is killed after the grace, and every other worker exits on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_ignores_the_end_of_its_channel_is_killed_after_the_grace() {
    let (sup, _s) = start(&[(Role::Tools, Fault::HangOnStop)]).await;
    within("ready", sup.wait_ready()).await.expect("ready");
    let pids = sup.worker_pids();
    let tools = pids
        .iter()
        .find(|(role, _)| *role == Role::Tools)
        .map(|(_, pid)| *pid)
        .expect("a tools worker");
    echo(&sup.tools, b"still serving").await.expect("echo");
    within("shutdown", sup.shutdown()).await;
    for (role, pid) in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "the {role} worker {pid} (tools: {tools}) is still there after the tree stopped"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_intensity_marks_a_crash_looping_role_failed() {
    let (sup, _s) = start(&[(Role::Tools, Fault::CrashAtStart)]).await;
    let err = within("tools gives up", sup.tools.ready())
        .await
        .err()
        .expect("a worker that always crashes is never ready");
    match &err {
        CallError::Unavailable { role, reason } => {
            assert_eq!(*role, Role::Tools);
            assert!(reason.contains("giving up"), "{reason}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    // Calls fail at once with the same clear error, and the other roles are unaffected.
    let e = within("call", echo(&sup.tools, b"x"))
        .await
        .expect_err("failed role");
    assert!(matches!(e, CallError::Unavailable { .. }));
    within("model", echo(&sup.model, b"x"))
        .await
        .expect("model fine");
    sup.shutdown().await;
}

async fn failed_reason(
    faults: &[(Role, Fault)],
    tune: impl FnOnce(&mut SupervisorConfig),
) -> String {
    let mut s = setup(faults);
    tune(&mut s.cfg);
    let sup = Supervisor::start(s.cfg.clone()).await.expect("start");
    // A worker that breaks the protocol after `Ready` is briefly ready each time it restarts.
    let err = within("model gives up", async {
        loop {
            match sup.model.ready().await {
                Ok(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                Err(e) => break e,
            }
        }
    })
    .await;
    // The rest of the tree keeps working: the supervisor did not panic or stall.
    within("tools", echo(&sup.tools, b"still here"))
        .await
        .expect("tools fine");
    sup.shutdown().await;
    match err {
        CallError::Unavailable { reason, .. } => reason,
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_from_a_worker_close_its_channel_with_a_typed_error() {
    for (fault, expect) in [
        (Fault::ZeroLengthFrame, "frame length 0 is illegal"),
        (Fault::OversizedFrame, "exceeds this channel's limit"),
        (Fault::TruncatedFrame, "stream ended inside a frame"),
        (Fault::GarbagePayload, "malformed REPLY payload"),
    ] {
        let reason = failed_reason(&[(Role::Model, fault)], |_| {}).await;
        assert!(reason.contains(expect), "{fault:?}: {reason}");
        assert!(reason.contains("giving up"), "{fault:?}: {reason}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_handshakes_are_refused_with_clear_errors() {
    for (fault, expect) in [
        (Fault::BadMagic, "not a hanzo-dev process"),
        (Fault::WrongMajor, "major version mismatch"),
        (Fault::WrongRole, "this channel is for model"),
        (Fault::HangBeforeReady, "did not complete its handshake"),
    ] {
        let reason = failed_reason(&[(Role::Model, fault)], |cfg| {
            cfg.restart.handshake_timeout = Duration::from_millis(300);
            cfg.restart.max_restarts = 1;
        })
        .await;
        assert!(reason.contains(expect), "{fault:?}: {reason}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_attesting_weaker_confinement_is_refused() {
    let reason = failed_reason(&[(Role::Model, Fault::UnderReport)], |_| {}).await;
    assert!(reason.contains("weaker than its role requires"), "{reason}");
    assert!(reason.contains("no_new_privs"), "{reason}");
    assert!(reason.contains("hanzo-dev doctor"), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_waits_for_a_restarting_worker_only_up_to_its_deadline() {
    let mut s = setup(&[(Role::Lsp, Fault::HangBeforeReady)]);
    s.cfg.restart.handshake_timeout = Duration::from_secs(60);
    let sup = Supervisor::start(s.cfg.clone()).await.expect("start");
    let mut lsp = sup.lsp.clone();
    lsp.wait_for_ready = Duration::from_millis(200);
    let err = within("deadline", echo(&lsp, b"x"))
        .await
        .expect_err("never ready");
    match err {
        CallError::Unavailable { role, reason } => {
            assert_eq!(role, Role::Lsp);
            assert!(reason.contains("not ready after waiting"), "{reason}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    sup.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_requests_are_capped_per_worker() {
    let mut s = setup(&[]);
    s.cfg.max_in_flight = 2;
    let sup = Supervisor::start(s.cfg.clone()).await.expect("start");
    within("ready", sup.wait_ready()).await.expect("ready");
    // Two sleeping requests take both slots; a third waits instead of being sent.
    let mut sleepers = Vec::new();
    for _ in 0..2 {
        let h = sup.tools.clone();
        sleepers.push(tokio::spawn(async move {
            h.call(hanzo_ipc::roles::tools::Request::Common(
                CommonRequest::Sleep { ms: 600_000 },
            ))
            .await
        }));
    }
    within("both slots taken", async {
        while sup.tools.free_slots() > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let third = tokio::spawn({
        let h = sup.tools.clone();
        async move { echo(&h, b"third").await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !third.is_finished(),
        "a third request went past the cap of 2"
    );
    // Killing the worker frees the slots (the sleepers fail); the third then goes through.
    let pid = sup.tools.info().expect("running").pid;
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("kill");
    for s in sleepers {
        assert!(within("sleeper", s).await.expect("join").is_err());
    }
    within("third", third)
        .await
        .expect("join")
        .expect("third succeeds after the restart");
    sup.shutdown().await;
}

fn fd4_of(pid: u32) -> String {
    std::fs::read_link(format!("/proc/{pid}/fd/4"))
        .map(|p| p.display().to_string())
        .unwrap_or_else(|e| format!("no fd 4: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_and_broker_share_a_direct_channel_which_the_broker_adopts_anew_when_the_model_restarts(
) {
    let (sup, _s) = start(&[]).await;
    within("ready", sup.wait_ready()).await.expect("ready");
    let model = sup.model.info().expect("model").pid;
    let broker = sup.broker.info().expect("broker").pid;
    assert!(fd4_of(model).starts_with("socket:"), "{}", fd4_of(model));
    assert!(fd4_of(broker).starts_with("socket:"), "{}", fd4_of(broker));
    // No other role holds a direct channel: its fd 4, if any, is not a socket.
    let tools = sup.tools.info().expect("tools").pid;
    assert!(!fd4_of(tools).starts_with("socket:"), "{}", fd4_of(tools));
    // Kill the model: it restarts with an end of a fresh pair, whose other end the running
    // broker adopts (a turn through the new pair: `model_path.rs`).
    std::process::Command::new("kill")
        .args(["-9", &model.to_string()])
        .status()
        .expect("kill");
    within("re-paired", async {
        loop {
            if sup.model.info().is_some_and(|i| i.pid != model) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(
        sup.broker.info().map(|i| i.pid),
        Some(broker),
        "the broker restarted"
    );
    within("model ok", echo(&sup.model, b"m"))
        .await
        .expect("model answers");
    within("broker ok", echo(&sup.broker, b"b"))
        .await
        .expect("broker answers");
    let (m, b) = (
        sup.model.info().expect("m").pid,
        sup.broker.info().expect("b").pid,
    );
    assert!(fd4_of(m).starts_with("socket:"));
    assert!(fd4_of(b).starts_with("socket:"));
    sup.shutdown().await;
}

/// Whether `pid` is still a process (not yet reaped).
fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigstopped_worker_times_out_its_request_misses_its_heartbeat_and_is_restarted() {
    let mut s = setup(&[]);
    s.cfg.roles = Some(vec![Role::Broker, Role::Mcp]);
    s.cfg.restart.heartbeat_interval = Duration::from_millis(100);
    // Longer than the request's own deadline below, so that the request fails by its deadline
    // and not because the heartbeat killed the worker first.
    s.cfg.restart.heartbeat_timeout = Duration::from_secs(3);
    let sup = within("start", Supervisor::start(s.cfg.clone()))
        .await
        .expect("start");
    within("ready", sup.wait_ready()).await.expect("ready");
    let old = sup.mcp.info().expect("mcp running");
    // In tier B the worker is a leaf of a small tree (the process spawned waits for the
    // namespaces' pid 1): stop every process of it.
    for pid in process_tree(old.pid) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid")),
            nix::sys::signal::Signal::SIGSTOP,
        )
        .expect("SIGSTOP the mcp worker");
    }

    // The stopped worker answers nothing: the request fails with a typed timeout, not a hang.
    let req = hanzo_ipc::roles::mcp::McpProtocol::common_request(CommonRequest::Echo {
        data: b"are you there".to_vec(),
    });
    let err = within(
        "call to a stopped worker",
        sup.mcp.call_within(req, Duration::from_millis(300)),
    )
    .await
    .expect_err("a stopped worker cannot answer");
    assert_eq!(
        err,
        CallError::Timeout {
            role: Role::Mcp,
            ms: 300
        }
    );
    // The supervisor is not stalled: another worker answers meanwhile.
    within("broker echo", echo(&sup.broker, b"still here"))
        .await
        .expect("the broker answers while mcp is stopped");

    // The missed heartbeat kills the stopped process (reaped) and a new one takes its place.
    let new = within("restart after a missed heartbeat", async {
        loop {
            if let Some(info) = sup.mcp.info() {
                if info.generation > old.generation {
                    return info;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_ne!(new.pid, old.pid);
    assert!(
        !alive(old.pid),
        "the stopped worker {} was not reaped",
        old.pid
    );
    within("echo after restart", echo(&sup.mcp, b"back"))
        .await
        .expect("the restarted worker answers");
    sup.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_configured_roles_start_and_the_others_are_unavailable() {
    let mut s = setup(&[]);
    s.cfg.roles = Some(vec![Role::Broker]);
    let sup = within("start", Supervisor::start(s.cfg.clone()))
        .await
        .expect("start");
    assert_eq!(sup.started(), &[Role::Broker]);
    let ready = within("ready", sup.wait_ready()).await.expect("ready");
    assert_eq!(
        ready.iter().map(|i| i.role).collect::<Vec<_>>(),
        [Role::Broker]
    );
    let pids = sup.worker_pids();
    assert_eq!(pids.len(), 1);
    assert_eq!(pids[0].0, Role::Broker);
    within("broker echo", echo(&sup.broker, b"x"))
        .await
        .expect("the broker answers");
    for err in [
        within("lsp", echo(&sup.lsp, b"x")).await,
        within("model", echo(&sup.model, b"x")).await,
    ] {
        match err.expect_err("not started") {
            CallError::Unavailable { reason, .. } => {
                assert!(reason.contains("was not started"), "{reason}")
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }
    sup.shutdown().await;
}
