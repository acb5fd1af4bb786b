//! Starting one worker process and watching it until it ends.
//!
//! [`start_worker`] spawns the process (its cgroup, channel and direct-channel end passed as
//! inherited fds), runs the handshake within the role's deadline and checks the attested sandbox
//! against the role's profile. [`Running::watch`] then waits for the first of: the process exits,
//! its channel ends, it misses a heartbeat, its direct-channel peer restarted, or the tree stops;
//! whatever happens, the process is killed and reaped and its in-flight requests fail at once.

use crate::pair::{Adopter, DirectPair, Side};
use crate::spawner::{SpawnRequest, Spawner};
use crate::supervise::Stop;
use crate::worker::{RestartPolicy, WorkerClient, WorkerInfo};
use hanzo_ipc::attest::Attestation;
use hanzo_ipc::channel::{ChannelEnd, Client, EventFlow};
use hanzo_ipc::frame::DEFAULT_MAX_FRAME;
use hanzo_ipc::proto::Protocol;
use hanzo_ipc::transport::{self, UnixFrameReader, UnixFrameWriter};
use hanzo_ipc::Role;
use hanzo_policy::profile::{profile_for, ProfileContext, SandboxProfile};
use hanzo_worker::WorkerOptions;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncBufReadExt;
use tokio::process::Child;
use tokio::sync::oneshot;

/// Everything the supervising task needs to (re)start one role's process.
pub struct WorkerSpec {
    /// The role.
    pub role: Role,
    /// Paths the role's profile is built from.
    pub ctx: ProfileContext,
    /// The role's environment, already filtered by its allow-list.
    pub env: Vec<(String, String)>,
    /// The kernel's Landlock ABI, which the attestation is checked against.
    pub kernel_landlock_abi: u32,
    /// Backoff, intensity, handshake and heartbeat timing.
    pub restart: RestartPolicy,
    /// What the tools worker must set up.
    pub isolation: hanzo_policy::isolation::IsolationMode,
    /// Misbehaviour injected by a test.
    #[cfg(feature = "test-support")]
    pub fault: Option<hanzo_worker::Fault>,
    /// The thread that forks workers.
    pub spawner: Spawner,
    /// The direct channels this role holds one end of, each with the fd number its end becomes
    /// in the worker.
    pub direct: Vec<(Arc<DirectPair>, Side, i32)>,
    /// The egress control socket this role holds one end of (broker, tools), if the run allows
    /// network for commands; its end becomes [`hanzo_ipc::transport::EGRESS_FD`].
    pub egress: Option<(Arc<DirectPair>, Side)>,
    /// Where the broker's egress records go (the run's record); `None`: only logged.
    pub egress_records: Option<EgressRecords>,
    /// The role takes new ends of its adopted pairs while it runs (the broker): each process gets
    /// an adopt socket ([`hanzo_ipc::transport::ADOPT_FD`]).
    pub adopts: bool,
}

/// The receiving side of a run's egress records, from every broker process of the tree.
pub type EgressRecords = tokio::sync::mpsc::UnboundedSender<hanzo_ipc::roles::broker::EgressRecord>;

/// Why a start did not give an attested worker.
pub enum StartError {
    /// Could not start, or died during the handshake: counts as a crash.
    Failed(String),
    /// Started but weaker than required: never retried.
    Refused(String),
}

/// A started, attested worker.
pub struct Running<P: Protocol> {
    /// Its channel.
    pub client: WorkerClient<P>,
    /// What it is (the start time is filled in by the caller).
    pub info: WorkerInfo,
    child: Child,
    end: oneshot::Receiver<ChannelEnd>,
    cgroup: Option<hanzo_sandbox::cgroup::Cgroup>,
    /// Each fires when that direct-channel peer restarted and this process must follow.
    repair: Vec<oneshot::Receiver<()>>,
    /// The same for the egress control socket's peer (none or one).
    repair_egress: Vec<oneshot::Receiver<()>>,
}

/// Spawn, handshake and attest one worker process of `spec`'s role.
pub async fn start_worker<P: Protocol>(
    spec: &WorkerSpec,
    generation: u64,
) -> Result<Running<P>, StartError> {
    let role = spec.role;
    let profile = profile_for(role, &spec.ctx);
    let cgroup = worker_cgroup(role, &profile, generation);
    let (ours, adopter, mut child) = match spawn_process(spec, &profile, cgroup.as_ref()).await {
        Ok(started) => started,
        Err(e) => {
            release_cgroup(cgroup).await;
            return Err(e);
        }
    };
    let pid = child.id().unwrap_or(0);
    forward_stderr(role, pid, &mut child);
    let checked = match handshake(spec, ours).await {
        Ok((reader, writer, attestation)) => {
            check_attestation(spec, &profile, &attestation).map(|()| (reader, writer, attestation))
        }
        Err(e) => Err(e),
    };
    let (reader, writer, attestation) = match checked {
        Ok(parts) => parts,
        Err(e) => {
            let status = kill_and_reap(&mut child).await;
            release_cgroup(cgroup).await;
            tracing::error!(%role, pid, "worker start failed");
            return Err(match e {
                StartError::Failed(m) => StartError::Failed(format!("{m} (worker {status})")),
                refused => refused,
            });
        }
    };
    // The task below drains every event at once and never waits on this channel's replies, so
    // the reader may wait for it: no egress record is lost to a burst.
    let (client, mut events, end) =
        Client::<P, _>::start_with(reader, writer, EventFlow::Backpressure);
    let records = spec.egress_records.clone();
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            if let (Some(tx), Some(record)) = (&records, egress_record(&event)) {
                // Gone only when the run is over: nothing is left to record into.
                let _ = tx.send(record);
                continue;
            }
            tracing::info!(%role, ?event, "worker event");
        }
    });
    let repair = spec
        .direct
        .iter()
        .map(|(pair, side, _)| pair.register_live(*side, adopter.clone()))
        .collect();
    let repair_egress = spec
        .egress
        .iter()
        .map(|(pair, side)| pair.register_live(*side, adopter.clone()))
        .collect();
    Ok(Running {
        client,
        info: WorkerInfo {
            role,
            pid,
            attestation,
            generation,
            start_time: Duration::ZERO,
            pids_cgroup: cgroup
                .as_ref()
                .and_then(|c| c.pids_dir().map(|d| d.to_path_buf())),
            memory_cgroup: cgroup
                .as_ref()
                .and_then(|c| c.memory_dir().map(|d| d.to_path_buf())),
        },
        child,
        end,
        cgroup,
        repair,
        repair_egress,
    })
}

/// The egress record an event carries, when it is the broker's `Event::Egress`.
fn egress_record<E: 'static>(event: &E) -> Option<hanzo_ipc::roles::broker::EgressRecord> {
    match (event as &dyn std::any::Any).downcast_ref::<hanzo_ipc::roles::broker::Event>()? {
        hanzo_ipc::roles::broker::Event::Egress(r) => Some(r.clone()),
        _ => None,
    }
}

/// The role's process and memory budget, where the host has cgroups for us.
fn worker_cgroup(
    role: Role,
    profile: &SandboxProfile,
    generation: u64,
) -> Option<hanzo_sandbox::cgroup::Cgroup> {
    let limits = profile.cgroup;
    if limits.max_pids.is_none() && limits.max_memory.is_none() {
        return None;
    }
    let name = format!("hanzo-{}-{role}-{generation}", std::process::id());
    match hanzo_sandbox::cgroup::Cgroup::create(&name, limits) {
        Ok(cg) => {
            for why in cg.absent() {
                tracing::warn!(%role, "{why}");
            }
            Some(cg)
        }
        Err(e) => {
            tracing::warn!(%role, error = %e, "no cgroup: the worker's processes and memory are not bounded");
            None
        }
    }
}

/// Fork and exec the worker with its fds; returns our end of its channel, of its adopt socket
/// (when the role adopts), and the child.
async fn spawn_process(
    spec: &WorkerSpec,
    profile: &SandboxProfile,
    cgroup: Option<&hanzo_sandbox::cgroup::Cgroup>,
) -> Result<(OwnedFd, Option<Arc<Adopter>>, Child), StartError> {
    let role = spec.role;
    let fail = StartError::Failed;
    let (ours, theirs) = transport::socketpair().map_err(|e| fail(format!("socketpair: {e}")))?;
    let cgroup = match cgroup {
        Some(cg) => cg.join_files().map_err(|e| fail(format!("cgroup: {e}")))?,
        None => Vec::new(),
    };
    let mut direct = spec
        .direct
        .iter()
        .map(|(pair, side, fd)| pair.take_end(*side).map(|end| (end, *fd)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(format!("direct channel: {e}")))?;
    let adopter = if spec.adopts {
        let (adopter, theirs) = Adopter::pair().map_err(|e| fail(format!("adopt socket: {e}")))?;
        direct.push((theirs, transport::ADOPT_FD));
        Some(adopter)
    } else {
        None
    };
    let egress = spec
        .egress
        .as_ref()
        .map(|(pair, side)| pair.take_end(*side))
        .transpose()
        .map_err(|e| fail(format!("egress control socket: {e}")))?;
    let child = spec
        .spawner
        .spawn(SpawnRequest {
            opts: WorkerOptions {
                role,
                ctx: spec.ctx.clone(),
                isolation: spec.isolation,
                #[cfg(feature = "test-support")]
                fault: spec.fault,
            },
            env: spec.env.clone(),
            channel: theirs,
            direct,
            egress,
            cgroup,
            rlimits: profile.rlimits,
        })
        .await
        .map_err(|e| fail(format!("cannot start the {role} worker: {e}")))?;
    Ok((ours, adopter, child))
}

/// Log the worker's stderr line by line (it never carries a secret: workers print only their
/// own failures).
fn forward_stderr(role: Role, pid: u32, child: &mut Child) {
    if let Some(stderr) = child.stderr.take() {
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::warn!(%role, pid, "worker stderr: {line}");
            }
        });
    }
}

/// Hellos both ways and the worker's `Ready`, within the role's handshake deadline.
async fn handshake(
    spec: &WorkerSpec,
    ours: OwnedFd,
) -> Result<(UnixFrameReader, UnixFrameWriter, Attestation), StartError> {
    let role = spec.role;
    let (mut reader, mut writer) = transport::split(ours, DEFAULT_MAX_FRAME)
        .map_err(|e| StartError::Failed(format!("channel: {e}")))?;
    let limit = spec.restart.handshake_timeout;
    match tokio::time::timeout(
        limit,
        transport::supervisor_handshake(&mut reader, &mut writer, role),
    )
    .await
    {
        Ok(Ok((_hello, attestation))) => Ok((reader, writer, attestation)),
        Ok(Err(e)) => Err(StartError::Failed(format!(
            "handshake with the {role} worker failed: {e}"
        ))),
        Err(_) => Err(StartError::Failed(format!(
            "the {role} worker did not complete its handshake within {limit:?}"
        ))),
    }
}

/// Refuse a worker whose attested sandbox is weaker than its role's profile requires.
fn check_attestation(
    spec: &WorkerSpec,
    profile: &SandboxProfile,
    attestation: &Attestation,
) -> Result<(), StartError> {
    let missing = hanzo_sandbox::verify::missing(profile, attestation, spec.kernel_landlock_abi);
    if missing.is_empty() {
        return Ok(());
    }
    Err(StartError::Refused(format!(
        "the {} worker's sandbox is weaker than its role requires: {}. \
         Run `hanzo-dev doctor` to see what this kernel offers.",
        spec.role,
        missing.join("; ")
    )))
}

impl<P: Protocol> Running<P> {
    /// Wait until the worker is gone and say why, or `None` when the tree was stopped. Either way
    /// the process is killed and reaped, its cgroup emptied, and its requests in flight failed.
    pub async fn watch(self, restart: &RestartPolicy, stop: &mut Stop) -> Option<String> {
        let Running {
            client,
            info,
            mut child,
            mut end,
            cgroup,
            repair,
            repair_egress,
        } = self;
        let (role, pid) = (info.role, info.pid);
        let reason = tokio::select! {
            status = child.wait() => {
                // The channel's last bytes may still be unread: its end says *how* the worker
                // failed (a half-written frame, say), the exit status only *that* it did.
                let what = match tokio::time::timeout(Duration::from_secs(1), &mut end).await {
                    Ok(Ok(e)) => channel_end_reason(role, pid, e),
                    _ => "channel still open".to_string(),
                };
                Some(format!("{what}; process {}", describe(status)))
            }
            e = &mut end => {
                let what = match e {
                    Ok(e) => channel_end_reason(role, pid, e),
                    Err(_) => "channel closed".to_string(),
                };
                Some(format!("{what}; process {}", kill_and_reap(&mut child).await))
            }
            () = repaired(repair) => Some(format!(
                "restarted to re-pair its direct channel (its peer restarted); process {}",
                kill_and_reap(&mut child).await
            )),
            () = repaired(repair_egress) => Some(format!(
                "restarted to re-pair its egress control socket (its peer restarted); process {}",
                kill_and_reap(&mut child).await
            )),
            missed = heartbeat(&client, restart) => {
                tracing::error!(%role, pid, "{missed}; killing it");
                Some(format!("{missed}; process {}", kill_and_reap(&mut child).await))
            }
            () = stop.requested() => {
                stop_in_order(&client, &mut child, role, pid).await;
                None
            }
        };
        // A worker that is gone answers nothing: fail what it was asked now, not when (or if) its
        // socket reports the end.
        client.close(
            reason
                .as_deref()
                .unwrap_or("the supervisor is shutting down"),
        );
        release_cgroup(cgroup).await;
        reason
    }
}

/// Ping every `heartbeat_interval`; resolves (with the reason) at the first ping not answered
/// within `heartbeat_timeout`. A channel that ended is left to the channel's own branch.
async fn heartbeat<P: Protocol>(client: &WorkerClient<P>, restart: &RestartPolicy) -> String {
    let mut tick = tokio::time::interval(restart.heartbeat_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await; // the first tick is immediate; the worker has just answered its handshake
    loop {
        tick.tick().await;
        match tokio::time::timeout(restart.heartbeat_timeout, client.ping()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => std::future::pending::<()>().await,
            Err(_) => {
                return format!(
                    "missed its heartbeat (no answer to a ping within {:?})",
                    restart.heartbeat_timeout
                )
            }
        }
    }
}

/// Resolves when a direct-channel peer asked this side to restart; never otherwise. A dropped
/// sender only means the record was replaced: not a request to restart.
async fn repaired(mut repairs: Vec<oneshot::Receiver<()>>) {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::Poll;
    std::future::poll_fn(|cx| {
        let mut i = 0;
        while i < repairs.len() {
            match Pin::new(&mut repairs[i]).poll(cx) {
                Poll::Ready(Ok(())) => return Poll::Ready(()),
                Poll::Ready(Err(_)) => {
                    repairs.swap_remove(i);
                }
                Poll::Pending => i += 1,
            }
        }
        Poll::Pending
    })
    .await
}

/// How long a worker has, once its channel is ended, to stop its own peers and exit: above the
/// workers' own grace for a language server's `shutdown` or an MCP server's end (2 s each), so
/// the orderly path completes for a server that is slow to go, and bounded, so a worker that
/// hangs cannot hold up the end of a run.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// How long a worker has to answer the ping that precedes its orderly stop.
const STOP_PING: Duration = Duration::from_secs(1);

/// The orderly stop: end the worker's channel for writing ([`Client::finish`]); the worker aborts
/// its requests, stops its servers and exits. A worker that does not answer a ping first (a
/// stopped or wedged process: waiting for it would only add the grace to the end of the run),
/// one still there after [`STOP_GRACE`], or one whose channel cannot even be ended is killed.
async fn stop_in_order<P: Protocol>(
    client: &WorkerClient<P>,
    child: &mut Child,
    role: Role,
    pid: u32,
) {
    if !matches!(
        tokio::time::timeout(STOP_PING, client.ping()).await,
        Ok(Ok(()))
    ) {
        let status = kill_and_reap(child).await;
        tracing::warn!(%role, pid, "worker did not answer a ping before its stop; {status}");
        return;
    }
    let orderly = async {
        client.finish("the supervisor is shutting down").await;
        child.wait().await
    };
    match tokio::time::timeout(STOP_GRACE, orderly).await {
        Ok(Ok(status)) if status.success() => {}
        Ok(status) => tracing::warn!(%role, pid, "worker stopped: {}", describe(status)),
        Err(_) => {
            let status = kill_and_reap(child).await;
            tracing::warn!(
                %role,
                pid,
                "worker did not exit within {STOP_GRACE:?} of its channel's end; {status}"
            );
        }
    }
}

/// SIGKILL (which also ends a stopped process) and reap; the exit status, described.
async fn kill_and_reap(child: &mut Child) -> String {
    let _ = child.start_kill();
    describe(child.wait().await)
}

fn describe(status: std::io::Result<std::process::ExitStatus>) -> String {
    status
        .map(|s| s.to_string())
        .unwrap_or_else(|e| e.to_string())
}

/// Empty and remove a worker's cgroup. Killing its stragglers polls until the group is
/// empty, so it runs on the blocking pool, never on a runtime thread.
async fn release_cgroup(cgroup: Option<hanzo_sandbox::cgroup::Cgroup>) {
    if let Some(cg) = cgroup {
        let _ = tokio::task::spawn_blocking(move || drop(cg)).await;
    }
}

fn channel_end_reason(role: Role, pid: u32, end: ChannelEnd) -> String {
    match end {
        ChannelEnd::Eof => "channel closed".to_string(),
        ChannelEnd::Error(e) => {
            tracing::error!(%role, pid, error = %e, "protocol violation by worker; closing its channel");
            format!("protocol violation: {e}")
        }
    }
}
