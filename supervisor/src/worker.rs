//! What callers hold of a role: its [`WorkerHandle`], which stays valid across restarts, and the
//! [`Slot`] the role's supervising task ([`crate::supervise`]) publishes it through.
//!
//! A request made while the worker restarts waits up to the handle's `wait_for_ready`; every unary
//! request has a deadline (`deadline`, from [`RestartPolicy::request_deadline`]) after which it
//! fails with [`CallError::Timeout`] and is cancelled; a crash, a kill or a missed heartbeat fails
//! the requests in flight at once.

use hanzo_ipc::attest::Attestation;
use hanzo_ipc::channel::{CallError, Client, ResponseStream};
use hanzo_ipc::proto::Protocol;
use hanzo_ipc::socket::WriteHalf;
use hanzo_ipc::Role;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Semaphore};

/// The client type of a worker channel.
pub type WorkerClient<P> = Client<P, WriteHalf>;

/// Restart policy and timing of one role.
#[derive(Debug, Clone, Copy)]
pub struct RestartPolicy {
    /// Backoff before restart n is uniform in [0, min(max, base·2ⁿ)].
    pub backoff_base: Duration,
    /// The cap of the backoff.
    pub backoff_max: Duration,
    /// More than `max_restarts` restarts within `window` marks the role failed.
    pub max_restarts: usize,
    /// The window `max_restarts` counts in.
    pub window: Duration,
    /// A worker that stayed up this long resets the backoff.
    pub stable_after: Duration,
    /// How long the handshake and attestation may take.
    pub handshake_timeout: Duration,
    /// How often the supervisor pings a running worker.
    pub heartbeat_interval: Duration,
    /// A ping not answered within this is a missed heartbeat: the worker is killed and restarted
    /// like a crashed one (a stopped or wedged process answers nothing).
    pub heartbeat_timeout: Duration,
    /// How long a unary request may wait for its reply before it fails with
    /// [`CallError::Timeout`] (and is cancelled in the worker).
    pub request_deadline: Duration,
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
            heartbeat_interval: Duration::from_secs(2),
            heartbeat_timeout: Duration::from_secs(10),
            request_deadline: Duration::from_secs(300),
        }
    }
}

/// A running, attested worker.
#[derive(Debug, Clone)]
pub struct WorkerInfo {
    /// Its role.
    pub role: Role,
    /// Its pid (in the supervisor's pid namespace).
    pub pid: u32,
    /// What the worker says it applied, as checked against its role's profile.
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
    /// Being (re)started; `last_error` says why the previous process ended.
    Starting {
        /// Why the previous process ended, if there was one.
        last_error: Option<String>,
    },
    /// Running and attested.
    Ready(WorkerClient<P>, Arc<WorkerInfo>),
    /// Gave up (restart intensity exceeded, refused confinement, not started, or shut down).
    Failed(String),
}

/// A caller's stable handle to a role, valid across restarts.
pub struct WorkerHandle<P: Protocol> {
    role: Role,
    slot: watch::Receiver<Slot<P>>,
    in_flight: Arc<Semaphore>,
    /// The generation of the process last configured by its user (`0`: none), for roles a
    /// restarted process of which knows nothing until configured again (the mcp worker's
    /// servers): see [`WorkerHandle::mark_configured`].
    configured: Arc<watch::Sender<u64>>,
    /// How long a request waits for a restarting worker.
    pub wait_for_ready: Duration,
    /// How long a unary request waits for its reply.
    pub deadline: Duration,
}

impl<P: Protocol> Clone for WorkerHandle<P> {
    fn clone(&self) -> Self {
        WorkerHandle {
            role: self.role,
            slot: self.slot.clone(),
            in_flight: self.in_flight.clone(),
            configured: self.configured.clone(),
            wait_for_ready: self.wait_for_ready,
            deadline: self.deadline,
        }
    }
}

impl<P: Protocol> WorkerHandle<P> {
    /// A handle on `slot`, with at most `max_in_flight` requests in flight and unary requests
    /// failing after `deadline`.
    pub fn new(
        role: Role,
        slot: watch::Receiver<Slot<P>>,
        max_in_flight: usize,
        deadline: Duration,
    ) -> Self {
        WorkerHandle {
            role,
            slot,
            in_flight: Arc::new(Semaphore::new(max_in_flight)),
            configured: Arc::new(watch::channel(0).0),
            wait_for_ready: Duration::from_secs(10),
            deadline,
        }
    }

    /// The role this handle reaches.
    pub fn role(&self) -> Role {
        self.role
    }

    /// Free request slots (requests beyond the cap wait for one).
    pub fn free_slots(&self) -> usize {
        self.in_flight.available_permits()
    }

    /// Record that the process of `generation` is configured (every clone of this handle sees
    /// it).
    pub fn mark_configured(&self, generation: u64) {
        self.configured.send_if_modified(|g| {
            let newer = generation > *g;
            if newer {
                *g = generation;
            }
            newer
        });
    }

    /// Once a process was ever configured ([`WorkerHandle::mark_configured`]): wait, at most
    /// `within`, until the running process is the configured one (a restarted process is
    /// configured again by whoever configured the first). `false` when it is not by then.
    pub async fn wait_configured(&self, within: Duration) -> bool {
        let mut configured = self.configured.subscribe();
        if *configured.borrow() == 0 {
            return true;
        }
        let mut slot = self.slot.clone();
        tokio::time::timeout(within, async {
            loop {
                let current = match &*slot.borrow_and_update() {
                    Slot::Ready(client, info) if !client.is_closed() => Some(info.generation),
                    _ => None,
                };
                if current.is_some_and(|g| *configured.borrow_and_update() >= g) {
                    return;
                }
                tokio::select! {
                    r = slot.changed() => if r.is_err() { return },
                    r = configured.changed() => if r.is_err() { return },
                }
            }
        })
        .await
        .is_ok()
    }

    /// The running worker, if there is one now.
    pub fn info(&self) -> Option<Arc<WorkerInfo>> {
        match &*self.slot.borrow() {
            Slot::Ready(_, info) => Some(info.clone()),
            _ => None,
        }
    }

    /// Wait, without a deadline, until a process of this role later than `generation` is running
    /// and attested; `None` when the role failed or its supervising task stopped.
    pub async fn next_ready(&self, generation: u64) -> Option<Arc<WorkerInfo>> {
        let mut rx = self.slot.clone();
        loop {
            {
                let slot = rx.borrow_and_update();
                match &*slot {
                    Slot::Ready(client, info)
                        if !client.is_closed() && info.generation > generation =>
                    {
                        return Some(info.clone())
                    }
                    Slot::Failed(_) => return None,
                    _ => {}
                }
            }
            rx.changed().await.ok()?;
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
                        reason: "its supervising task has stopped".into(),
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

    /// Send one request and wait for its reply, at most the handle's `deadline` (after the
    /// worker is ready). A worker that does not answer in time — stopped, wedged, or just slow —
    /// fails the call with [`CallError::Timeout`]; the request is cancelled in the worker.
    pub async fn call(&self, request: P::Request) -> Result<P::Response, CallError> {
        self.call_within(request, self.deadline).await
    }

    /// [`WorkerHandle::call`] with its own deadline, for a request known to be long or short.
    pub async fn call_within(
        &self,
        request: P::Request,
        deadline: Duration,
    ) -> Result<P::Response, CallError> {
        self.call_answered_by(request, deadline)
            .await
            .map(|(response, _)| response)
    }

    /// [`WorkerHandle::call_within`], also saying which process answered (its
    /// [`WorkerInfo::generation`]): a caller that configured one process learns whether the
    /// answer came from a later one, started since, which never saw the configuration.
    pub async fn call_answered_by(
        &self,
        request: P::Request,
        deadline: Duration,
    ) -> Result<(P::Response, u64), CallError> {
        let _permit = self
            .in_flight
            .acquire()
            .await
            .map_err(|_| CallError::Unavailable {
                role: self.role,
                reason: "closed".into(),
            })?;
        let (client, info) = self.ready().await?;
        // Dropping the call at the deadline cancels it (the client sends the worker a cancel).
        match tokio::time::timeout(deadline, client.call(request)).await {
            Ok(result) => result.map(|response| (response, info.generation)),
            Err(_) => Err(CallError::Timeout {
                role: self.role,
                ms: u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX),
            }),
        }
    }

    /// Send one request whose reply is streamed. The stream counts against the in-flight cap
    /// until it is dropped. Sending is bounded by the handle's `deadline`; the stream itself has
    /// none (a model turn may stream for long), but a worker that stops answering misses its
    /// heartbeat, is killed, and the stream then ends with [`CallError::WorkerGone`].
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
        let stream = tokio::time::timeout(self.deadline, client.call_stream(request))
            .await
            .map_err(|_| CallError::Timeout {
                role: self.role,
                ms: u64::try_from(self.deadline.as_millis()).unwrap_or(u64::MAX),
            })??;
        Ok(HandleStream {
            stream,
            _permit: permit,
        })
    }
}

/// A streamed response obtained through a [`WorkerHandle`]; holds an in-flight slot while alive.
pub struct HandleStream<P: Protocol> {
    stream: ResponseStream<P, WriteHalf>,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl<P: Protocol> std::ops::Deref for HandleStream<P> {
    type Target = ResponseStream<P, WriteHalf>;
    fn deref(&self) -> &Self::Target {
        &self.stream
    }
}

impl<P: Protocol> std::ops::DerefMut for HandleStream<P> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.stream
    }
}
