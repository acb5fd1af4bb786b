//! One actor per worker role: it owns the child process and its channel, restarts it one-for-one
//! with exponential backoff, and gives up when the role keeps crashing (restart intensity).
//!
//! Callers never hold the actor or the child: they hold a [`WorkerHandle`], which stays valid across
//! restarts. A request made while the worker restarts waits up to the handle's deadline; a crash
//! fails the requests in flight at once (the channel reader sees EOF and fails them).

use crate::pair::{DirectPair, Side};
use crate::spawner::{SpawnRequest, Spawner};
use hanzo_backoff::Backoff;
use hanzo_ipc::attest::Attestation;
use hanzo_ipc::channel::{CallError, ChannelEnd, Client, ResponseStream};
use hanzo_ipc::frame::DEFAULT_MAX_FRAME;
use hanzo_ipc::proto::Protocol;
use hanzo_ipc::transport::{self, IpcError};
use hanzo_ipc::Role;
use hanzo_policy::profile::{profile_for, ProfileContext};
use hanzo_worker::{Fault, WorkerOptions};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncBufReadExt;
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::{watch, Semaphore};

/// The client type of a worker channel.
pub type WorkerClient<P> = Client<P, OwnedWriteHalf>;

/// Restart policy of one role.
#[derive(Debug, Clone, Copy)]
pub struct RestartPolicy {
    /// Backoff before restart n is uniform in [0, min(max, base·2ⁿ)].
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    /// More than `max_restarts` restarts within `window` marks the role failed.
    pub max_restarts: usize,
    pub window: Duration,
    /// A worker that stayed up this long resets the backoff.
    pub stable_after: Duration,
    /// How long the handshake and attestation may take.
    pub handshake_timeout: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            backoff_base: Duration::from_millis(20),
            backoff_max: Duration::from_secs(2),
            max_restarts: 5,
            window: Duration::from_secs(30),
            stable_after: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(5),
        }
    }
}

/// A running, attested worker.
#[derive(Debug, Clone)]
pub struct WorkerInfo {
    pub role: Role,
    pub pid: u32,
    pub attestation: Attestation,
    /// How many times this role has been (re)started, counting the first start.
    pub generation: u64,
    /// Time from spawn to attested.
    pub start_time: Duration,
    /// The pids cgroup bounding this worker's process tree, if the host offers one.
    pub pids_cgroup: Option<std::path::PathBuf>,
    /// The memory cgroup bounding it (the same directory on cgroup v2).
    pub memory_cgroup: Option<std::path::PathBuf>,
}

/// Where a role stands.
pub enum Slot<P: Protocol> {
    Starting {
        last_error: Option<String>,
    },
    Ready(WorkerClient<P>, Arc<WorkerInfo>),
    /// Gave up (restart intensity exceeded, or refused confinement).
    Failed(String),
}

/// Everything a worker actor needs to (re)start its process.
pub struct WorkerSpec {
    pub role: Role,
    pub ctx: ProfileContext,
    pub env: Vec<(String, String)>,
    pub kernel_landlock_abi: u32,
    pub restart: RestartPolicy,
    pub isolation: hanzo_policy::isolation::IsolationMode,
    pub fault: Option<Fault>,
    pub spawner: Spawner,
    /// The direct channel this role holds one end of, if any.
    pub direct: Option<(Arc<DirectPair>, Side)>,
}

pub enum WorkerMsg<P: Protocol> {
    Start,
    /// The start of `generation` finished (successfully or not).
    Started {
        generation: u64,
        spawned: Instant,
        result: Box<Result<Running<P>, StartError>>,
    },
    /// The process of `generation` is gone, for `reason`.
    Exited {
        generation: u64,
        reason: String,
    },
}

/// A started, attested worker as the start task hands it to the actor.
pub struct Running<P: Protocol> {
    client: WorkerClient<P>,
    info: WorkerInfo,
    kill: KillSwitch,
}

pub struct WorkerActor<P>(std::marker::PhantomData<fn() -> P>);

impl<P> Default for WorkerActor<P> {
    fn default() -> Self {
        WorkerActor(std::marker::PhantomData)
    }
}

pub struct WorkerState<P: Protocol> {
    spec: Arc<WorkerSpec>,
    /// The start in progress; aborting it drops (and so kills) the half-started process.
    starting: Option<tokio::task::AbortHandle>,
    slot: watch::Sender<Slot<P>>,
    generation: u64,
    restarts: VecDeque<Instant>,
    backoff: Backoff,
    started_at: Option<Instant>,
    /// Fired to kill the current process; answers once it is reaped.
    kill: Option<KillSwitch>,
}

type KillSwitch = tokio::sync::oneshot::Sender<tokio::sync::oneshot::Sender<()>>;

pub struct WorkerArgs<P: Protocol> {
    pub spec: WorkerSpec,
    pub slot: watch::Sender<Slot<P>>,
}

impl<P: Protocol> Actor for WorkerActor<P> {
    type Msg = WorkerMsg<P>;
    type State = WorkerState<P>;
    type Arguments = WorkerArgs<P>;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let backoff = Backoff::new(
            args.spec.restart.backoff_base,
            args.spec.restart.backoff_max,
        );
        myself.send_message(WorkerMsg::Start)?;
        Ok(WorkerState {
            spec: Arc::new(args.spec),
            starting: None,
            slot: args.slot,
            generation: 0,
            restarts: VecDeque::new(),
            backoff,
            started_at: None,
            kill: None,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            WorkerMsg::Start => {
                // The start runs as its own task so that the actor stays responsive (to a stop,
                // above all) while a worker is slow to attest.
                state.generation += 1;
                let generation = state.generation;
                let spec = state.spec.clone();
                let actor = myself.clone();
                let task = tokio::spawn(async move {
                    let spawned = Instant::now();
                    let result = start_worker::<P>(&spec, generation, actor.clone()).await;
                    let _ = actor.send_message(WorkerMsg::Started {
                        generation,
                        spawned,
                        result: Box::new(result),
                    });
                });
                state.starting = Some(task.abort_handle());
            }
            WorkerMsg::Started {
                generation,
                spawned,
                result,
            } => {
                if generation != state.generation {
                    return Ok(()); // dropping a stale result kills its process
                }
                state.starting = None;
                match *result {
                    Ok(Running { client, info, kill }) => {
                        let info = WorkerInfo {
                            start_time: spawned.elapsed(),
                            ..info
                        };
                        tracing::info!(role = %state.spec.role, pid = info.pid, generation, "worker ready");
                        state.kill = Some(kill);
                        state.started_at = Some(Instant::now());
                        state.slot.send_replace(Slot::Ready(client, Arc::new(info)));
                    }
                    Err(StartError::Refused(reason)) => {
                        // Weaker confinement than required is not a crash to retry: the kernel
                        // will not change between attempts.
                        tracing::error!(role = %state.spec.role, %reason, "worker refused");
                        state.slot.send_replace(Slot::Failed(reason));
                    }
                    Err(StartError::Failed(reason)) => {
                        myself.send_message(WorkerMsg::Exited { generation, reason })?;
                    }
                }
            }
            WorkerMsg::Exited { generation, reason } => {
                if generation != state.generation {
                    return Ok(()); // a stale notice about an earlier process
                }
                state.kill = None;
                let now = Instant::now();
                if state
                    .started_at
                    .take()
                    .is_some_and(|t| now.duration_since(t) >= state.spec.restart.stable_after)
                {
                    state.backoff.reset();
                }
                state.restarts.push_back(now);
                while state
                    .restarts
                    .front()
                    .is_some_and(|t| now.duration_since(*t) > state.spec.restart.window)
                {
                    state.restarts.pop_front();
                }
                if state.restarts.len() > state.spec.restart.max_restarts {
                    let msg = format!(
                        "the {} worker failed {} times within {:?}; giving up (last: {reason})",
                        state.spec.role,
                        state.restarts.len(),
                        state.spec.restart.window
                    );
                    tracing::error!(role = %state.spec.role, "{msg}");
                    state.slot.send_replace(Slot::Failed(msg));
                    return Ok(());
                }
                let delay = state.backoff.next_delay();
                tracing::warn!(role = %state.spec.role, %reason, ?delay, "worker exited; restarting");
                state.slot.send_replace(Slot::Starting {
                    last_error: Some(reason),
                });
                myself.send_after(delay, || WorkerMsg::Start);
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(starting) = state.starting.take() {
            starting.abort();
        }
        if let Some(kill) = state.kill.take() {
            let (ack_tx, ack_rx) = tokio::sync::oneshot::channel();
            if kill.send(ack_tx).is_ok() {
                let _ = tokio::time::timeout(Duration::from_secs(5), ack_rx).await;
            }
        }
        state
            .slot
            .send_replace(Slot::Failed("the supervisor is shutting down".into()));
        Ok(())
    }
}

pub enum StartError {
    /// Could not start, or died during the handshake: counts as a crash.
    Failed(String),
    /// Started but weaker than required: never retried.
    Refused(String),
}

async fn start_worker<P: Protocol>(
    spec: &WorkerSpec,
    generation: u64,
    actor: ActorRef<WorkerMsg<P>>,
) -> Result<Running<P>, StartError> {
    let role = spec.role;
    let profile = profile_for(role, &spec.ctx);
    let (ours, theirs) =
        transport::socketpair().map_err(|e| StartError::Failed(format!("socketpair: {e}")))?;
    // The role's process and memory budget, where the host has cgroups for us.
    let limits = profile.cgroup;
    let cgroup = (limits.max_pids.is_some() || limits.max_memory.is_some())
        .then(|| {
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
        })
        .flatten();
    let cgroup_procs = match &cgroup {
        Some(cg) => cg
            .procs_files()
            .map_err(|e| StartError::Failed(format!("cgroup: {e}")))?,
        None => Vec::new(),
    };
    let direct = match &spec.direct {
        Some((pair, side)) => Some(
            pair.take_end(*side)
                .map_err(|e| StartError::Failed(format!("direct channel: {e}")))?,
        ),
        None => None,
    };
    let mut child = spec
        .spawner
        .spawn(SpawnRequest {
            opts: WorkerOptions {
                role,
                ctx: spec.ctx.clone(),
                isolation: spec.isolation,
                fault: spec.fault,
            },
            env: spec.env.clone(),
            channel: theirs,
            direct,
            cgroup: cgroup_procs,
            rlimits: profile.rlimits,
        })
        .await
        .map_err(|e| StartError::Failed(format!("cannot start the {role} worker: {e}")))?;
    let pid = child.id().unwrap_or(0);
    if let Some(stderr) = child.stderr.take() {
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::warn!(%role, pid, "worker stderr: {line}");
            }
        });
    }
    let fail = |msg: String| StartError::Failed(msg);
    let stream = transport::stream_from_fd(ours).map_err(|e| fail(format!("channel: {e}")))?;
    let (mut reader, mut writer) = transport::split(stream, DEFAULT_MAX_FRAME);
    let handshake = tokio::time::timeout(
        spec.restart.handshake_timeout,
        transport::supervisor_handshake(&mut reader, &mut writer, role),
    )
    .await;
    let attestation = match handshake {
        Ok(Ok((_hello, attestation))) => attestation,
        Ok(Err(e)) => {
            let _ = child.start_kill();
            let status = child.wait().await.ok();
            tracing::error!(%role, pid, error = %e, "worker handshake failed");
            return Err(fail(format!(
                "handshake with the {role} worker failed: {e}{}",
                status.map(|s| format!(" (worker {s})")).unwrap_or_default()
            )));
        }
        Err(_) => {
            let _ = child.start_kill();
            let _ = child.wait().await;
            return Err(fail(format!(
                "the {role} worker did not complete its handshake within {:?}",
                spec.restart.handshake_timeout
            )));
        }
    };
    let missing = hanzo_sandbox::verify::missing(&profile, &attestation, spec.kernel_landlock_abi);
    if !missing.is_empty() {
        let _ = child.start_kill();
        let _ = child.wait().await;
        return Err(StartError::Refused(format!(
            "the {role} worker's sandbox is weaker than its role requires: {}. \
             Run `hanzo-dev doctor` to see what this kernel offers.",
            missing.join("; ")
        )));
    }
    let (client, mut events, end) = Client::<P, OwnedWriteHalf>::start(reader, writer);
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            tracing::info!(%role, ?event, "worker event");
        }
    });
    let (kill_tx, kill_rx) = tokio::sync::oneshot::channel::<tokio::sync::oneshot::Sender<()>>();
    let repair = spec
        .direct
        .as_ref()
        .map(|(pair, side)| pair.register_live(*side));
    let repaired = async move {
        // A dropped sender only means the record was replaced: not a request to restart.
        let asked = match repair {
            Some(rx) => rx.await.is_ok(),
            None => false,
        };
        if !asked {
            std::future::pending::<()>().await;
        }
    };
    let pids_dir = cgroup
        .as_ref()
        .and_then(|c| c.pids_dir().map(|d| d.to_path_buf()));
    let memory_dir = cgroup
        .as_ref()
        .and_then(|c| c.memory_dir().map(|d| d.to_path_buf()));
    // Watch the process and its channel: whichever ends first ends the other.
    tokio::spawn(async move {
        let mut end = end;
        // Held until the worker is gone; releasing it kills what is left in the group.
        let mut cgroup = cgroup;
        let reason = tokio::select! {
            status = child.wait() => {
                // The channel's last bytes may still be unread: its end says *how* the worker
                // failed (a half-written frame, say), the exit status only *that* it did.
                let what = match tokio::time::timeout(Duration::from_secs(1), &mut end).await {
                    Ok(Ok(e)) => channel_end_reason(role, pid, e),
                    _ => "channel still open".to_string(),
                };
                format!("{what}; process {}", status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string()))
            }
            e = &mut end => {
                let what = match e {
                    Ok(e) => channel_end_reason(role, pid, e),
                    Err(_) => "channel closed".to_string(),
                };
                let _ = child.start_kill();
                let status = child.wait().await;
                format!("{what}; process {}", status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string()))
            }
            _ = repaired => {
                let _ = child.start_kill();
                let status = child.wait().await;
                format!("restarted to re-pair its direct channel (its peer restarted); process {}", status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string()))
            }
            ack = kill_rx => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                release_cgroup(&mut cgroup).await;
                if let Ok(ack) = ack {
                    let _ = ack.send(());
                }
                return;
            }
        };
        release_cgroup(&mut cgroup).await;
        let _ = actor.send_message(WorkerMsg::Exited { generation, reason });
    });
    Ok(Running {
        client,
        info: WorkerInfo {
            role,
            pid,
            attestation,
            generation,
            start_time: Duration::ZERO,
            pids_cgroup: pids_dir,
            memory_cgroup: memory_dir,
        },
        kill: kill_tx,
    })
}

/// Empty and remove a worker's cgroup. Killing its stragglers polls until the group is
/// empty, so it runs on the blocking pool, never on a runtime thread.
async fn release_cgroup(cgroup: &mut Option<hanzo_sandbox::cgroup::Cgroup>) {
    if let Some(cg) = cgroup.take() {
        let _ = tokio::task::spawn_blocking(move || drop(cg)).await;
    }
}

fn channel_end_reason(role: Role, pid: u32, end: ChannelEnd) -> String {
    match end {
        ChannelEnd::Eof => "channel closed".to_string(),
        ChannelEnd::Error(e) => {
            tracing::error!(%role, pid, error = %e, "protocol violation by worker; closing its channel");
            protocol_violation(&e)
        }
    }
}

fn protocol_violation(e: &IpcError) -> String {
    format!("protocol violation: {e}")
}

/// A caller's stable handle to a role, valid across restarts.
pub struct WorkerHandle<P: Protocol> {
    role: Role,
    slot: watch::Receiver<Slot<P>>,
    in_flight: Arc<Semaphore>,
    /// How long a request waits for a restarting worker.
    pub wait_for_ready: Duration,
}

impl<P: Protocol> Clone for WorkerHandle<P> {
    fn clone(&self) -> Self {
        WorkerHandle {
            role: self.role,
            slot: self.slot.clone(),
            in_flight: self.in_flight.clone(),
            wait_for_ready: self.wait_for_ready,
        }
    }
}

impl<P: Protocol> WorkerHandle<P> {
    pub fn new(role: Role, slot: watch::Receiver<Slot<P>>, max_in_flight: usize) -> Self {
        WorkerHandle {
            role,
            slot,
            in_flight: Arc::new(Semaphore::new(max_in_flight)),
            wait_for_ready: Duration::from_secs(10),
        }
    }

    pub fn role(&self) -> Role {
        self.role
    }

    /// Free request slots (requests beyond the cap wait for one).
    pub fn free_slots(&self) -> usize {
        self.in_flight.available_permits()
    }

    /// The running worker, if there is one now.
    pub fn info(&self) -> Option<Arc<WorkerInfo>> {
        match &*self.slot.borrow() {
            Slot::Ready(_, info) => Some(info.clone()),
            _ => None,
        }
    }

    /// Wait until the role is ready (or failed, or the deadline passes).
    pub async fn ready(&self) -> Result<(WorkerClient<P>, Arc<WorkerInfo>), CallError> {
        let mut rx = self.slot.clone();
        let wait = async {
            loop {
                {
                    let slot = rx.borrow_and_update();
                    match &*slot {
                        Slot::Ready(client, info) if !client.is_closed() => {
                            return Ok((client.clone(), info.clone()))
                        }
                        Slot::Failed(reason) => {
                            return Err(CallError::Unavailable {
                                role: self.role,
                                reason: reason.clone(),
                            })
                        }
                        _ => {}
                    }
                }
                if rx.changed().await.is_err() {
                    return Err(CallError::Unavailable {
                        role: self.role,
                        reason: "its supervisor actor has stopped".into(),
                    });
                }
            }
        };
        match tokio::time::timeout(self.wait_for_ready, wait).await {
            Ok(r) => r,
            Err(_) => {
                let last = match &*self.slot.borrow() {
                    Slot::Starting {
                        last_error: Some(e),
                    } => format!(" (last failure: {e})"),
                    _ => String::new(),
                };
                Err(CallError::Unavailable {
                    role: self.role,
                    reason: format!("not ready after waiting {:?}{last}", self.wait_for_ready),
                })
            }
        }
    }

    /// Send one request and wait for its reply.
    pub async fn call(&self, request: P::Request) -> Result<P::Response, CallError> {
        let _permit = self
            .in_flight
            .acquire()
            .await
            .map_err(|_| CallError::Unavailable {
                role: self.role,
                reason: "closed".into(),
            })?;
        let (client, _) = self.ready().await?;
        client.call(request).await
    }

    /// Send one request whose reply is streamed. The stream counts against the in-flight cap
    /// until it is dropped.
    pub async fn call_stream(&self, request: P::Request) -> Result<HandleStream<P>, CallError> {
        let permit =
            self.in_flight
                .clone()
                .acquire_owned()
                .await
                .map_err(|_| CallError::Unavailable {
                    role: self.role,
                    reason: "closed".into(),
                })?;
        let (client, _) = self.ready().await?;
        let stream = client.call_stream(request).await?;
        Ok(HandleStream {
            stream,
            _permit: permit,
        })
    }
}

/// A streamed response obtained through a [`WorkerHandle`]; holds an in-flight slot while alive.
pub struct HandleStream<P: Protocol> {
    stream: ResponseStream<P, OwnedWriteHalf>,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl<P: Protocol> std::ops::Deref for HandleStream<P> {
    type Target = ResponseStream<P, OwnedWriteHalf>;
    fn deref(&self) -> &Self::Target {
        &self.stream
    }
}

impl<P: Protocol> std::ops::DerefMut for HandleStream<P> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.stream
    }
}
