//! The control socket: accepted client sockets arrive here from the forwarder in the tools
//! worker's network namespace, one `SCM_RIGHTS` message each.
//!
//! The sender of every message is checked with `SCM_CREDENTIALS` (`SO_PASSCRED` on our end): the
//! kernel attaches the sending process's pid, translated into the broker's pid namespace, and an
//! unprivileged sender cannot claim another. `SO_PEERCRED` cannot do this job: for a pair made by
//! `socketpair(2)` it reports the process that made the pair (the supervisor), not the one holding
//! the other end. A message from any other pid — a command that got hold of the socket, say —
//! refuses the whole channel: its descriptors are closed, every tunnel of the channel is shut
//! down, and a `PeerMismatch` record says who sent it.
//!
//! The kernel attaches credentials only to messages sent after `SO_PASSCRED` was set on the
//! receiving end, so whoever makes the pair sets it on the broker's end at once
//! (`hanzo_ipc::transport::pass_credentials`), before the other end is handed out.

use super::{Egress, Handled};
use hanzo_ipc::roles::broker::{EgressDenial, EgressOutcome, EgressProtocol};
use hanzo_ipc::transport;
use rustix::net::{AddressFamily, SocketType};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tokio::io::Interest;

/// Most descriptors accepted in one message (the forwarder sends one).
const MAX_FDS: usize = 4;

/// Why the egress control channel stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The inherited fd is not a unix `SOCK_SEQPACKET` socket; holds what it is.
    #[error("the egress control socket is not a unix SOCK_SEQPACKET socket: {0}")]
    NotSeqpacket(String),
    /// Receiving on the control socket failed.
    #[error("the egress control socket: {0}")]
    Io(#[from] io::Error),
    /// A message came from a process other than the configured forwarder.
    #[error(
        "a message on the egress control socket came from pid {got:?}, not from the forwarder \
         (pid {expected}); the channel was refused"
    )]
    PeerMismatch {
        /// The forwarder's pid, as the broker sees it.
        expected: u32,
        /// The sender's pid (`None`: the kernel named no sender).
        got: Option<u32>,
    },
}

fn receive(fd: BorrowedFd<'_>) -> io::Result<Message> {
    let mut data = [0u8; 64];
    let got = transport::recv_with_credentials(fd, &mut data, MAX_FDS)?;
    Ok(Message {
        bytes: got.len,
        fds: got.fds,
        sender: got.sender.map(|c| c.pid).filter(|pid| *pid != 0),
        truncated: got.truncated,
    })
}

/// One message from the control socket.
struct Message {
    bytes: usize,
    fds: Vec<OwnedFd>,
    /// The sending process, when the kernel named it.
    sender: Option<u32>,
    truncated: bool,
}

/// A received descriptor as a client connection: a connected TCP socket, or nothing.
fn admit_socket(fd: OwnedFd) -> Result<tokio::net::TcpStream, String> {
    let kind = rustix::net::sockopt::socket_type(&fd).map_err(|e| format!("not a socket ({e})"))?;
    if kind != SocketType::STREAM {
        let name = match kind {
            SocketType::DGRAM => "datagram",
            SocketType::SEQPACKET => "seqpacket",
            SocketType::RAW => "raw",
            _ => "non-stream",
        };
        return Err(format!("a {name} socket, not a TCP connection"));
    }
    let family = rustix::net::sockopt::socket_domain(&fd).map_err(|e| e.to_string())?;
    if family != AddressFamily::INET && family != AddressFamily::INET6 {
        return Err(format!(
            "a socket of address family {}, not TCP",
            family.as_raw()
        ));
    }
    if rustix::net::sockopt::socket_acceptconn(&fd).map_err(|e| e.to_string())? {
        return Err("a listening socket".to_string());
    }
    let std_stream = std::net::TcpStream::from(fd);
    std_stream
        .set_nonblocking(true)
        .map_err(|e| e.to_string())?;
    tokio::net::TcpStream::from_std(std_stream).map_err(|e| e.to_string())
}

impl Egress {
    /// Receive client sockets on `control` (one end of a `SOCK_SEQPACKET` pair) and serve each,
    /// until the forwarder closes its end (`Ok`) or a message fails the sender check (`Err`).
    /// Either way every connection of this proxy is shut down and recorded before this returns.
    pub async fn serve_control(self: &Arc<Self>, control: OwnedFd) -> Result<(), ControlError> {
        let result = self.receive_all(control).await;
        self.shutdown().await;
        result
    }

    async fn receive_all(self: &Arc<Self>, control: OwnedFd) -> Result<(), ControlError> {
        match rustix::net::sockopt::socket_type(&control) {
            Ok(SocketType::SEQPACKET) => {}
            Ok(other) => return Err(ControlError::NotSeqpacket(format!("{other:?}"))),
            Err(e) => return Err(ControlError::NotSeqpacket(e.to_string())),
        }
        // Normally set already by whoever made the pair, before the forwarder could send: a
        // message sent before this carries no sender and refuses the channel.
        transport::pass_credentials(control.as_fd())?;
        // Driven through tokio's datagram type for its readiness only: every receive is our own
        // `recvmsg` (one message per call, as for any SOCK_SEQPACKET socket).
        let control = std::os::unix::net::UnixDatagram::from(control);
        control.set_nonblocking(true)?;
        let control = tokio::net::UnixDatagram::from_std(control)?;
        let expected = self.config.forwarder_pid;
        loop {
            control.readable().await?;
            let message = match control.try_io(Interest::READABLE, || receive(control.as_fd())) {
                Ok(m) => m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ControlError::Io(e)),
            };
            if message.bytes == 0 && message.fds.is_empty() {
                return Ok(());
            }
            if message.sender != Some(expected) {
                drop(message.fds);
                let err = ControlError::PeerMismatch {
                    expected,
                    got: message.sender,
                };
                self.record_channel_refusal(EgressDenial::PeerMismatch, err.to_string())
                    .await;
                return Err(err);
            }
            if message.truncated {
                eprintln!(
                    "hanzo-dev broker: an egress control message was truncated (more than \
                     {MAX_FDS} descriptors); the extra ones were closed"
                );
            }
            for fd in message.fds {
                match admit_socket(fd) {
                    Ok(stream) => self.accept(stream),
                    Err(what) => {
                        let detail = format!(
                            "the forwarder passed {what}; only accepted TCP connections are \
                             served (closed)"
                        );
                        self.record_channel_refusal(EgressDenial::BadRequest, detail)
                            .await;
                    }
                }
            }
        }
    }

    async fn record_channel_refusal(&self, reason: EgressDenial, detail: String) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let h = Handled {
            protocol: EgressProtocol::Unknown,
            host: String::new(),
            port: 0,
            outcome: EgressOutcome::Denied {
                reason,
                rule: None,
                detail,
            },
        };
        self.send_record(id, Instant::now(), h).await;
    }
}
