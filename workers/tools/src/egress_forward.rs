//! Tier B's egress forwarder: how a command reaches the network it is allowed, without its
//! namespace getting any.
//!
//! Tier B's network namespace has one interface, its own `lo`. The forwarder listens on
//! `127.0.0.1:PORT` there and, for every connection it accepts, sends **the accepted socket
//! itself** to the broker over a pre-connected `SOCK_SEQPACKET` control socket (`SCM_RIGHTS`),
//! then closes its copy. It parses nothing and resolves nothing: the broker reads the request
//! (HTTP `CONNECT`, plain HTTP in absolute form, or SOCKS5 — one port serves all three), decides
//! on the name the client asked for, resolves it, refuses private addresses, connects, and relays
//! (`hanzo_broker::egress`). Commands are pointed at it by [`proxy_env`].
//!
//! The mcp worker runs the same forwarder in its own tier-B namespace for the MCP stdio servers
//! given network ([`start_on`] with [`ALL_LOOPBACK`]): there each server is pointed at its own
//! loopback address (`127.0.0.N`, [`proxy_env_at`]), and the broker, which sees the address each
//! accepted socket was made to, judges the connection by that server's allow-list.
//!
//! The forwarder needs no file, creates no socket (the listener is made for it, [`bind`]) and
//! holds nothing but its two descriptors, so it can run under the strictest confinement:
//! `accept4`, `sendmsg` and `close` are all it calls in its loop.

use hanzo_sandbox::fdpass;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

/// The forwarder's address inside the namespace.
pub const PROXY_IP: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// What stays direct (the namespace's own loopback: a command's local test server).
pub const NO_PROXY: &str = "localhost,127.0.0.1,::1";

/// The one byte of data each control message carries besides its descriptor.
pub const MESSAGE: &[u8] = b"C";

/// How long a connection waits for the broker to take descriptors it has not received yet
/// (`ETOOMANYREFS`: too many in flight) before it is dropped.
const IN_FLIGHT_PATIENCE: Duration = Duration::from_secs(2);

/// Why the forwarder stopped.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// The broker closed its end of the control socket; holds the socket's error.
    #[error("the broker closed the egress control socket ({0}); commands have no network now")]
    BrokerGone(#[source] io::Error),
    /// Accepting a command's connection on the proxy endpoint failed.
    #[error("accepting on the egress proxy endpoint: {0}")]
    Accept(#[source] io::Error),
    /// Handing an accepted connection to the broker failed.
    #[error("passing a connection to the broker: {0}")]
    Send(#[source] io::Error),
}

/// Why the forwarder could not be started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The proxy endpoint on the namespace's `127.0.0.1` could not be bound.
    #[error("cannot listen on the egress proxy endpoint 127.0.0.1 in tier B's namespace: {0}")]
    Bind(#[source] io::Error),
    /// The forwarder process could not be forked.
    #[error("cannot start the egress forwarder: {0}")]
    Fork(#[source] io::Error),
}

/// Exit code of a forwarder that could not confine itself (it never serves unconfined).
pub const NOT_CONFINED: i32 = 92;

/// The forwarder's pid inside the namespace: it is the first process pid 1 forks, so the
/// supervisor (or the one-shot's caller) can find it from outside (see
/// [`hanzo_sandbox::procfs::child_with_ns_pid`]).
pub const NS_PID: u32 = 2;

/// Start the forwarder from tier B's pid 1 (the `namespaces::enter_with` hook: `lo` up,
/// single-threaded, unconfined, nothing forked yet): bind [`bind`]`(0)`, fork a helper that keeps
/// exactly the listener and `control`, confines itself with `profile::egress_forwarder()` (no
/// file, no `socket(2)`) and runs [`serve`]. Returns the port; pid 1's copies of both descriptors
/// are closed when this returns, so nothing else in the namespace holds the control socket.
pub fn start(control: OwnedFd) -> Result<u16, StartError> {
    start_on(PROXY_IP, control)
}

/// Every address of the namespace (`0.0.0.0`): with nothing but `lo` there, every loopback
/// address `127.0.0.N`. The mcp worker's forwarder listens so.
pub const ALL_LOOPBACK: Ipv4Addr = Ipv4Addr::UNSPECIFIED;

/// [`start`], listening on `ip` (in tier B's namespace).
pub fn start_on(ip: Ipv4Addr, control: OwnedFd) -> Result<u16, StartError> {
    use std::os::fd::AsRawFd;
    let listener = bind_on(ip, 0).map_err(StartError::Bind)?;
    let port = listener.local_addr().map_err(StartError::Bind)?.port();
    let keep = [listener.as_raw_fd(), control.as_raw_fd()];
    fdpass::fork_helper_keeping(&keep, true, move || {
        let profile = hanzo_policy::profile::egress_forwarder();
        match hanzo_sandbox::confine::confine_current_process(&profile) {
            Ok(a) if a.seccomp.installed => {}
            Ok(_) => {
                eprintln!("hanzo-dev egress forwarder: seccomp is unavailable; not serving");
                return NOT_CONFINED;
            }
            Err(e) => {
                eprintln!("hanzo-dev egress forwarder: cannot confine itself ({e}); not serving");
                return NOT_CONFINED;
            }
        }
        let e = serve(listener, control);
        eprintln!("hanzo-dev egress forwarder: {e}");
        0
    })
    .map_err(StartError::Fork)?;
    Ok(port)
}

/// The listener for [`serve`]: `127.0.0.1:port` in the calling process's network namespace
/// (`port` 0 picks a free one; [`TcpListener::local_addr`] tells which). Call it inside tier B,
/// with `lo` up.
pub fn bind(port: u16) -> io::Result<TcpListener> {
    bind_on(PROXY_IP, port)
}

/// [`bind`] on `ip`.
pub fn bind_on(ip: Ipv4Addr, port: u16) -> io::Result<TcpListener> {
    TcpListener::bind(SocketAddr::from((ip, port)))
}

/// The environment that points a command's HTTP clients at the forwarder on `port`: both cases
/// of `HTTP_PROXY`, `HTTPS_PROXY` (`http://127.0.0.1:PORT`: plain HTTP is forwarded, HTTPS
/// tunnelled with `CONNECT`), `ALL_PROXY` (`socks5h://127.0.0.1:PORT`: the `h` makes the client
/// send the name, never resolve it) and `NO_PROXY` (the namespace's own loopback stays direct).
/// pip, npm, cargo, git over https, curl and Python's urllib all read these.
pub fn proxy_env(port: u16) -> Vec<(String, String)> {
    proxy_env_at(PROXY_IP, port)
}

/// [`proxy_env`] for a forwarder reached at `ip` (an MCP server's own `127.0.0.N`).
pub fn proxy_env_at(ip: Ipv4Addr, port: u16) -> Vec<(String, String)> {
    let http = format!("http://{ip}:{port}");
    let socks = format!("socks5h://{ip}:{port}");
    let mut env = Vec::new();
    for (name, value) in [
        ("HTTP_PROXY", &http),
        ("HTTPS_PROXY", &http),
        ("ALL_PROXY", &socks),
        ("NO_PROXY", &NO_PROXY.to_string()),
    ] {
        env.push((name.to_string(), value.clone()));
        env.push((name.to_ascii_lowercase(), value.clone()));
    }
    env
}

/// Accept connections on `listener` and pass each to the broker over `control` (one end of a
/// `SOCK_SEQPACKET` pair whose other end the broker serves), until the broker goes away.
/// Blocking and single-threaded; returns only why it stopped.
pub fn serve(listener: TcpListener, control: OwnedFd) -> ForwardError {
    loop {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) => match e.raw_os_error() {
                // The client gave up before we accepted, or a signal: next one.
                Some(libc::EINTR | libc::ECONNABORTED | libc::EPROTO) => continue,
                // Out of descriptors or memory for now: the backlog waits.
                Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
                _ => return ForwardError::Accept(e),
            },
        };
        if let Err(e) = pass(&control, &stream) {
            return e;
        }
        // Our copy closes here; the broker holds the connection now.
    }
}

fn pass(control: &OwnedFd, stream: &std::net::TcpStream) -> Result<(), ForwardError> {
    let mut waited = Duration::ZERO;
    loop {
        match fdpass::send(control.as_fd(), MESSAGE, &[stream.as_fd()]) {
            Ok(()) => return Ok(()),
            Err(e) => match e.raw_os_error() {
                Some(libc::EPIPE | libc::ECONNRESET | libc::ENOTCONN | libc::ECONNREFUSED) => {
                    return Err(ForwardError::BrokerGone(e))
                }
                // Descriptors in flight beyond our limit, or no buffer: the broker is behind.
                Some(libc::ETOOMANYREFS | libc::ENOBUFS | libc::ENOMEM | libc::EAGAIN) => {
                    if waited >= IN_FLIGHT_PATIENCE {
                        // This client is dropped (it sees a reset); the next may fare better.
                        return Ok(());
                    }
                    let pause = Duration::from_millis(5);
                    std::thread::sleep(pause);
                    waited += pause;
                }
                _ => return Err(ForwardError::Send(e)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_names_one_port_for_every_protocol_in_both_cases() {
        let env = proxy_env(3128);
        let get = |k: &str| {
            env.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.as_str())
                .unwrap_or_default()
        };
        for k in ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"] {
            assert_eq!(get(k), "http://127.0.0.1:3128", "{k}");
        }
        for k in ["ALL_PROXY", "all_proxy"] {
            assert_eq!(get(k), "socks5h://127.0.0.1:3128", "{k}");
        }
        for k in ["NO_PROXY", "no_proxy"] {
            assert_eq!(get(k), "localhost,127.0.0.1,::1", "{k}");
        }
        assert_eq!(env.len(), 8);
    }
}
