//! The direct channel between two workers (model ↔ broker): one socketpair, one end inherited by
//! each as fd 4, so HTTP requests and raw response bytes never pass through the supervisor.
//!
//! The same machinery carries the egress control socket between the broker (side A) and the
//! tools worker (side B) when a run allows network for commands ([`DirectPair::egress_control`]):
//! a `SOCK_SEQPACKET` pair, inherited as fd 6 by each (`EGRESS_FD`), with `SO_PASSCRED` set on the broker's end
//! the moment it is made, before the tools worker's forwarder can send anything on the other.
//!
//! The two workers are restarted as a pair: a channel whose other end died cannot be reconnected,
//! so whichever side starts without an unclaimed end creates a fresh pair and kills the peer's
//! current process; the peer's restart then takes the other end.

use std::os::fd::OwnedFd;
use std::sync::Mutex;

/// Which end of the pair a worker holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The end the role table lists first for the channel (the broker on its channels).
    A = 0,
    /// The other end.
    B = 1,
}

impl Side {
    fn peer(self) -> Side {
        match self {
            Side::A => Side::B,
            Side::B => Side::A,
        }
    }
}

#[derive(Default)]
struct PairState {
    /// Ends created but not yet taken by a starting worker.
    unclaimed: [Option<OwnedFd>; 2],
    /// Fired to make each side's running process restart (its monitor kills it).
    live: [Option<tokio::sync::oneshot::Sender<()>>; 2],
}

/// What kind of socket pair a [`DirectPair`] makes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum PairKind {
    /// A stream pair for a framed channel (model ↔ broker).
    #[default]
    Stream,
    /// The egress control socket: `SOCK_SEQPACKET`, credentials passed to side A (the broker).
    EgressControl,
}

/// Shared by the two workers' supervising tasks.
#[derive(Default)]
pub struct DirectPair {
    state: Mutex<PairState>,
    kind: PairKind,
}

impl DirectPair {
    /// The egress control pair: side A is the broker's end (`SO_PASSCRED` set at creation),
    /// side B the tools worker's.
    pub fn egress_control() -> DirectPair {
        DirectPair {
            state: Mutex::default(),
            kind: PairKind::EgressControl,
        }
    }

    fn make_pair(&self) -> std::io::Result<(OwnedFd, OwnedFd)> {
        match self.kind {
            PairKind::Stream => hanzo_ipc::transport::socketpair(),
            PairKind::EgressControl => {
                let (a, b) = hanzo_sandbox::fdpass::seqpacket_pair(false)?;
                // Before the other end exists anywhere else: every message the forwarder sends
                // then carries its pid, which the broker checks.
                hanzo_ipc::transport::pass_credentials(std::os::fd::AsFd::as_fd(&a))?;
                Ok((a, b))
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PairState> {
        // The state is a handful of options, consistent between statements.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The end for a starting worker on `side`: an unclaimed one if the peer left it, otherwise a
    /// fresh pair (and the peer's current process, connected to a dead end, is killed).
    pub fn take_end(&self, side: Side) -> std::io::Result<OwnedFd> {
        let mut st = self.lock();
        if let Some(end) = st.unclaimed[side as usize].take() {
            return Ok(end);
        }
        let (a, b) = self.make_pair()?;
        let (mine, theirs) = match side {
            Side::A => (a, b),
            Side::B => (b, a),
        };
        let peer = side.peer() as usize;
        st.unclaimed[peer] = Some(theirs);
        if let Some(restart) = st.live[peer].take() {
            tracing::info!(side = ?side.peer(), "restarting the direct-channel peer to re-pair it");
            let _ = restart.send(());
        }
        Ok(mine)
    }

    /// Record the process now running on `side`: firing the returned receiver's sender restarts it.
    pub fn register_live(&self, side: Side) -> tokio::sync::oneshot::Receiver<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.lock().live[side as usize] = Some(tx);
        rx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_second_side_takes_the_end_the_first_left() {
        let pair = DirectPair::default();
        let a = pair.take_end(Side::A).expect("a");
        let mut a_restart = pair.register_live(Side::A);
        let b = pair.take_end(Side::B).expect("b");
        // The two ends are connected: what A writes, B reads.
        use std::io::{Read, Write};
        let mut a = std::os::unix::net::UnixStream::from(a);
        let mut b = std::os::unix::net::UnixStream::from(b);
        a.write_all(b"hi").expect("write");
        let mut buf = [0u8; 2];
        b.read_exact(&mut buf).expect("read");
        assert_eq!(&buf, b"hi");
        // Nothing is left unclaimed, and A was not asked to restart.
        assert!(pair.lock().unclaimed.iter().all(Option::is_none));
        assert!(a_restart.try_recv().is_err());
        assert!(pair.lock().live[0].is_some());
    }

    #[test]
    fn the_egress_pair_is_seqpacket_and_passes_credentials_to_the_broker() {
        use std::os::fd::AsFd;
        let pair = DirectPair::egress_control();
        let broker = pair.take_end(Side::A).expect("broker end");
        let tools = pair.take_end(Side::B).expect("tools end");
        hanzo_sandbox::fdpass::send(tools.as_fd(), b"C", &[]).expect("send");
        let mut buf = [0u8; 8];
        let got =
            hanzo_ipc::transport::recv_with_credentials(broker.as_fd(), &mut buf, 1).expect("recv");
        assert_eq!(got.len, 1);
        // The kernel named the sender (this process) because the broker's end had SO_PASSCRED
        // before anything was sent.
        assert_eq!(got.sender.map(|c| c.pid), Some(std::process::id()));
    }

    #[test]
    fn a_side_restarting_alone_creates_a_new_pair_for_both() {
        let pair = DirectPair::default();
        let _a = pair.take_end(Side::A).expect("a");
        let mut a_restart = pair.register_live(Side::A);
        let _b = pair.take_end(Side::B).expect("b");
        // B restarts: nothing unclaimed for it, so a new pair is made, A's new end waits, and the
        // running A (holding an end whose peer is gone) is told to restart.
        let _b2 = pair.take_end(Side::B).expect("b2");
        assert!(pair.lock().unclaimed[0].is_some());
        assert!(pair.lock().unclaimed[1].is_none());
        assert_eq!(a_restart.try_recv(), Ok(()));
    }
}
