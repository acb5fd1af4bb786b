//! Confinement probes: a worker, asked by the supervisor, attempts one forbidden operation and
//! reports what the kernel answered. `hanzo-dev doctor` and the test suite use them to prove the
//! sandbox from the inside; an attempt can only ever fail more, never widen anything.

use serde::{Deserialize, Serialize};

/// One forbidden operation a worker attempts on the supervisor's request, to prove its sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Probe {
    /// `open(path, O_RDONLY)`.
    OpenRead {
        /// The path to open.
        path: String,
    },
    /// `open(path, O_WRONLY | O_CREAT)` (the file is removed again if it was created).
    OpenWrite {
        /// The path to open or create.
        path: String,
    },
    /// `socket(family, kind, 0)`.
    Socket {
        /// The address family to ask for.
        family: SocketFamily,
        /// The socket type to ask for.
        kind: SocketKind,
    },
    /// `connect` a TCP socket to `addr` (`ip:port`).
    ConnectTcp {
        /// The destination, as `ip:port`.
        addr: String,
    },
    /// `ptrace(PTRACE_ATTACH, pid)` (0: the worker's parent).
    PtraceAttach {
        /// The process to attach to (0: the worker's parent).
        pid: u32,
    },
    /// `process_vm_readv` of one word from `pid` (0: the worker's parent).
    ProcessVmRead {
        /// The process to read from (0: the worker's parent).
        pid: u32,
    },
    /// `unshare(CLONE_NEWUSER)`.
    UnshareUser,
    /// `mount("none", "/tmp", "tmpfs")`.
    Mount,
    /// `io_uring_setup`.
    IoUringSetup,
    /// `bpf(BPF_PROG_LOAD)` with an empty program.
    Bpf,
    /// A syscall number with the x32 bit set (`getpid | 0x4000_0000`).
    X32Syscall,
    /// `clone` with `CLONE_NEWNS`.
    CloneNewNamespace,
    /// Read `/proc/<pid>/environ` (0: the worker's parent).
    ReadEnviron {
        /// The process whose environment to read (0: the worker's parent).
        pid: u32,
    },
    /// `kill(pid, 0)` — may the worker signal `pid` (0: the worker's parent)?
    Signal {
        /// The process to signal (0: the worker's parent).
        pid: u32,
    },
}

/// The address family of a [`Probe::Socket`] attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SocketFamily {
    /// `AF_UNIX`.
    Unix,
    /// `AF_INET`.
    Inet,
    /// `AF_INET6`.
    Inet6,
    /// `AF_NETLINK` (the kernel's routing and audit interfaces).
    Netlink,
    /// `AF_PACKET` (raw link-layer frames).
    Packet,
}

/// The socket type of a [`Probe::Socket`] attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SocketKind {
    /// `SOCK_STREAM`.
    Stream,
    /// `SOCK_DGRAM`.
    Datagram,
    /// `SOCK_RAW`.
    Raw,
}

/// What the kernel answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeOutcome {
    /// The operation succeeded (for a forbidden operation: the sandbox failed).
    pub succeeded: bool,
    /// `errno` when it failed.
    pub errno: Option<i32>,
    /// A short human description (`"EACCES"`, `"read 12 bytes"`).
    pub detail: String,
}
