//! One supervising task per role: start the worker, publish it in the role's slot, watch it, and
//! restart it one-for-one with exponential backoff — until the role crashes too often (restart
//! intensity: the role is marked failed), refuses confinement (failed at once: the kernel will not
//! change between attempts), or the tree stops.
//!
//! A plain tokio task, not an actor: it receives no messages but "stop", and everything it must
//! react to (the process, its channel, its heartbeat, its direct-channel peer) is a future it
//! selects on. See ARCHITECTURE.md for why ractor went.

use crate::start::{start_worker, StartError, WorkerSpec};
use crate::worker::{Slot, WorkerInfo};
use hanzo_backoff::Backoff;
use hanzo_ipc::proto::Protocol;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The tree's stop signal, as one supervising task sees it.
pub struct Stop(watch::Receiver<bool>);

impl Stop {
    /// Wrap a receiver of the tree's stop flag.
    pub fn new(rx: watch::Receiver<bool>) -> Stop {
        Stop(rx)
    }

    /// Resolves once the tree is asked to stop (or its sender is gone).
    pub async fn requested(&mut self) {
        while !*self.0.borrow_and_update() {
            if self.0.changed().await.is_err() {
                return;
            }
        }
    }
}

/// Recent crashes of one role, to decide when restarting is pointless.
struct Intensity {
    max: usize,
    window: Duration,
    crashes: VecDeque<Instant>,
}

impl Intensity {
    /// Record a crash at `now`; true when more than `max` fell within `window`.
    fn exceeded_after(&mut self, now: Instant) -> bool {
        self.crashes.push_back(now);
        while self
            .crashes
            .front()
            .is_some_and(|t| now.duration_since(*t) > self.window)
        {
            self.crashes.pop_front();
        }
        self.crashes.len() > self.max
    }
}

/// Supervise `spec`'s role until the tree stops, publishing where it stands in `slot`.
pub async fn supervise<P: Protocol>(
    spec: WorkerSpec,
    slot: watch::Sender<Slot<P>>,
    mut stop: Stop,
) {
    let role = spec.role;
    let restart = spec.restart;
    let mut backoff = Backoff::new(restart.backoff_base, restart.backoff_max);
    let mut intensity = Intensity {
        max: restart.max_restarts,
        window: restart.window,
        crashes: VecDeque::new(),
    };
    let mut generation = 0;
    loop {
        generation += 1;
        let spawned = Instant::now();
        let started = tokio::select! {
            started = start_worker::<P>(&spec, generation) => started,
            // Dropping a half-started worker kills its process.
            () = stop.requested() => break,
        };
        let reason = match started {
            Ok(running) => {
                let info = Arc::new(WorkerInfo {
                    start_time: spawned.elapsed(),
                    ..running.info.clone()
                });
                tracing::info!(%role, pid = info.pid, generation, "worker ready");
                slot.send_replace(Slot::Ready(running.client.clone(), info));
                let up = Instant::now();
                let Some(reason) = running.watch(&restart, &mut stop).await else {
                    break;
                };
                if up.elapsed() >= restart.stable_after {
                    backoff.reset();
                }
                reason
            }
            Err(StartError::Refused(reason)) => {
                tracing::error!(%role, %reason, "worker refused");
                slot.send_replace(Slot::Failed(reason));
                return;
            }
            Err(StartError::Failed(reason)) => reason,
        };
        if intensity.exceeded_after(Instant::now()) {
            let msg = format!(
                "the {role} worker failed {} times within {:?}; giving up (last: {reason})",
                intensity.crashes.len(),
                restart.window
            );
            tracing::error!(%role, "{msg}");
            slot.send_replace(Slot::Failed(msg));
            return;
        }
        let delay = backoff.next_delay();
        tracing::warn!(%role, %reason, ?delay, "worker exited; restarting");
        slot.send_replace(Slot::Starting {
            last_error: Some(reason),
        });
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = stop.requested() => break,
        }
    }
    slot.send_replace(Slot::Failed("the supervisor is shutting down".into()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intensity_counts_only_crashes_within_the_window() {
        let mut i = Intensity {
            max: 2,
            window: Duration::from_secs(10),
            crashes: VecDeque::new(),
        };
        let t0 = Instant::now();
        assert!(!i.exceeded_after(t0));
        assert!(!i.exceeded_after(t0 + Duration::from_secs(1)));
        // 12 s after the first: both earlier crashes have left the window.
        assert!(!i.exceeded_after(t0 + Duration::from_secs(12)));
        assert!(!i.exceeded_after(t0 + Duration::from_secs(13)));
        // A third crash within 10 s: more than `max`.
        assert!(i.exceeded_after(t0 + Duration::from_secs(14)));
    }

    #[tokio::test]
    async fn stop_resolves_on_the_flag_or_a_dropped_sender() {
        let (tx, rx) = watch::channel(false);
        let mut stop = Stop::new(rx);
        tx.send_replace(true);
        stop.requested().await;
        let (tx, rx) = watch::channel(false);
        let mut stop = Stop::new(rx);
        drop(tx);
        stop.requested().await;
    }
}
