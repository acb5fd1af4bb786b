//! The direct channel between two workers (model ↔ broker): one socketpair, one end inherited by
//! each as fd 4, so HTTP requests and raw response bytes never pass through the supervisor.
//!
//! The same machinery carries the egress control socket between the broker (side A) and the
//! tools worker (side B) when a run allows network for commands ([`DirectPair::egress_control`]):
//! a `SOCK_SEQPACKET` pair, inherited as fd 6 by each (`EGRESS_FD`), with `SO_PASSCRED` set on the broker's end
//! the moment it is made, before the tools worker's forwarder can send anything on the other.
//!
//! A channel whose other end died cannot be reconnected, so whichever side starts without an
//! unclaimed end creates a fresh pair. The peer then needs the other end:
//! - a pair the broker (side A) **adopts** ([`DirectPair::adopted_as`]: model ↔ broker, mcp ↔
//!   broker, the mcp egress control socket) hands it to the running broker over the broker's adopt
//!   socket ([`Adopter`], fd [`ADOPT_FD`](hanzo_ipc::transport::ADOPT_FD) in the broker), which
//!   serves the new end in place of the dead one: a model or mcp worker crash restarts that worker
//!   alone;
//! - otherwise (the tools worker's egress control socket; or when handing over fails, or the
//!   peer is the one restarting) the peer's current process is killed, and its restart takes the
//!   other end.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};

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
    /// Where each side's running process takes a new end without restarting (the broker's adopt
    /// socket), when this pair is adopted.
    adopters: [Option<Arc<Adopter>>; 2],
}

/// The supervisor's end of one running worker's adopt socket (`SOCK_SEQPACKET`; the worker holds
/// the other as [`ADOPT_FD`](hanzo_ipc::transport::ADOPT_FD)): each message is a pair's tag and
/// that pair's new end for the worker.
#[derive(Debug)]
pub struct Adopter {
    sock: OwnedFd,
}

impl Adopter {
    /// A new adopt socket: ours (non-blocking, so a worker that stopped reading makes a hand-over
    /// fail at once rather than block the supervisor) and the worker's end.
    pub fn pair() -> std::io::Result<(Arc<Adopter>, OwnedFd)> {
        let (ours, theirs) = hanzo_sandbox::fdpass::seqpacket_pair(true)?;
        Ok((Arc::new(Adopter { sock: ours }), theirs))
    }

    /// Send `end` tagged `tag`; the worker then holds its own copy.
    fn hand(&self, tag: &[u8], end: &OwnedFd) -> std::io::Result<()> {
        hanzo_sandbox::fdpass::send(self.sock.as_fd(), tag, &[end.as_fd()])
    }
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
    /// The tag under which side A adopts a new end while it runs (`None`: it restarts instead).
    adopt_tag: Option<&'static [u8]>,
}

impl DirectPair {
    /// The egress control pair: side A is the broker's end (`SO_PASSCRED` set at creation),
    /// side B the tools worker's.
    pub fn egress_control() -> DirectPair {
        DirectPair {
            state: Mutex::default(),
            kind: PairKind::EgressControl,
            adopt_tag: None,
        }
    }

    /// This pair, with side A (the broker) adopting a new end under `tag` while it runs, when
    /// side B restarts (see the module documentation).
    pub fn adopted_as(mut self, tag: &'static [u8]) -> DirectPair {
        self.adopt_tag = Some(tag);
        self
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
    /// fresh pair, whose other end the running peer adopts (an adopted pair) or takes when it
    /// restarts (its current process, connected to a dead end, is killed).
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
        if let (Some(tag), Some(adopter)) = (self.adopt_tag, st.adopters[peer].clone()) {
            match adopter.hand(tag, &theirs) {
                Ok(()) => {
                    tracing::info!(side = ?side.peer(), "the direct-channel peer adopted a new end");
                    return Ok(mine);
                }
                // Gone or not reading: it restarts and takes the end then.
                Err(e) => {
                    st.adopters[peer] = None;
                    tracing::warn!(side = ?side.peer(), error = %e, "the direct-channel peer could not adopt a new end; restarting it");
                }
            }
        }
        st.unclaimed[peer] = Some(theirs);
        if let Some(restart) = st.live[peer].take() {
            tracing::info!(side = ?side.peer(), "restarting the direct-channel peer to re-pair it");
            let _ = restart.send(());
        }
        Ok(mine)
    }

    /// Record the process now running on `side`: firing the returned receiver's sender restarts
    /// it. With `adopter` (an adopted pair's side A), it takes new ends while it runs instead; and
    /// one the peer left since this process took its own (the peer restarted while this one
    /// started) is handed to it at once.
    pub fn register_live(
        &self,
        side: Side,
        adopter: Option<Arc<Adopter>>,
    ) -> tokio::sync::oneshot::Receiver<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let mut st = self.lock();
        let me = side as usize;
        st.adopters[me] = None;
        if let (Some(tag), Some(adopter)) = (self.adopt_tag, adopter) {
            if let Some(end) = st.unclaimed[me].take() {
                match adopter.hand(tag, &end) {
                    Ok(()) => {}
                    Err(e) => {
                        // It cannot take the newer end: restart it, and its restart will.
                        tracing::warn!(?side, error = %e, "a new end could not be handed over; restarting");
                        st.unclaimed[me] = Some(end);
                        let _ = tx.send(());
                        return rx;
                    }
                }
            }
            st.adopters[me] = Some(adopter);
        }
        st.live[me] = Some(tx);
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
        let mut a_restart = pair.register_live(Side::A, None);
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
    fn an_adopted_pair_hands_the_running_side_a_its_new_end_instead_of_restarting_it() {
        use std::io::{Read, Write};
        let pair = DirectPair::default().adopted_as(b"mcp");
        let _a = pair.take_end(Side::A).expect("a");
        let (adopter, worker_end) = Adopter::pair().expect("adopt socket");
        let mut a_restart = pair.register_live(Side::A, Some(adopter));
        let _b = pair.take_end(Side::B).expect("b");
        // B restarts: a new pair; A's new end arrives on A's adopt socket, tagged; A is not
        // asked to restart and nothing is left unclaimed.
        let b2 = pair.take_end(Side::B).expect("b2");
        assert_eq!(
            a_restart.try_recv(),
            Err(tokio::sync::oneshot::error::TryRecvError::Empty)
        );
        assert!(pair.lock().unclaimed.iter().all(Option::is_none));
        let mut buf = [0u8; 16];
        let (n, mut fds) =
            hanzo_sandbox::fdpass::recv(worker_end.as_fd(), &mut buf).expect("adopted");
        assert_eq!(&buf[..n], b"mcp");
        // The adopted end is connected to B's new one.
        let mut a2 = std::os::unix::net::UnixStream::from(fds.remove(0));
        let mut b2 = std::os::unix::net::UnixStream::from(b2);
        b2.write_all(b"again").expect("write");
        let mut got = [0u8; 5];
        a2.read_exact(&mut got).expect("read");
        assert_eq!(&got, b"again");
        // A's adopt socket gone (its process died): the hand-over fails, A restarts instead and
        // its restart takes the end.
        drop(worker_end);
        let _b3 = pair.take_end(Side::B).expect("b3");
        assert_eq!(a_restart.try_recv(), Ok(()));
        assert!(pair.lock().unclaimed[0].is_some());
    }

    #[test]
    fn an_adopting_side_started_while_its_peer_restarted_gets_the_newer_end_at_once() {
        let pair = DirectPair::default().adopted_as(b"model");
        let _a = pair.take_end(Side::A).expect("a");
        let mut b_restart = pair.register_live(Side::B, None);
        let _b = pair.take_end(Side::B).expect("b");
        let _ = b_restart.try_recv();
        // B restarts before A registers: the newer end waits unclaimed for A...
        let _b2 = pair.take_end(Side::B).expect("b2");
        assert!(pair.lock().unclaimed[0].is_some());
        // ... and A's registration hands it over.
        let (adopter, worker_end) = Adopter::pair().expect("adopt socket");
        let mut a_restart = pair.register_live(Side::A, Some(adopter));
        assert!(pair.lock().unclaimed[0].is_none());
        assert!(a_restart.try_recv().is_err());
        let mut buf = [0u8; 16];
        let (n, fds) = hanzo_sandbox::fdpass::recv(worker_end.as_fd(), &mut buf).expect("adopted");
        assert_eq!((&buf[..n], fds.len()), (&b"model"[..], 1));
    }

    #[test]
    fn a_side_restarting_alone_creates_a_new_pair_for_both() {
        let pair = DirectPair::default();
        let _a = pair.take_end(Side::A).expect("a");
        let mut a_restart = pair.register_live(Side::A, None);
        let _b = pair.take_end(Side::B).expect("b");
        // B restarts: nothing unclaimed for it, so a new pair is made, A's new end waits, and the
        // running A (holding an end whose peer is gone) is told to restart.
        let _b2 = pair.take_end(Side::B).expect("b2");
        assert!(pair.lock().unclaimed[0].is_some());
        assert!(pair.lock().unclaimed[1].is_none());
        assert_eq!(a_restart.try_recv(), Ok(()));
    }
}
