//! Confinement probes: a worker, asked by the supervisor, attempts one forbidden operation and
//! reports what the kernel answered. `hanzo-dev doctor` and the test suite use them to prove the
//! sandbox from the inside; an attempt can only ever fail more, never widen anything.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Probe {
    /// `open(path, O_RDONLY)`.
    OpenRead { path: String },
    /// `open(path, O_WRONLY | O_CREAT)` (the file is removed again if it was created).
    OpenWrite { path: String },
    /// `socket(family, kind, 0)`.
    Socket {
        family: SocketFamily,
        kind: SocketKind,
    },
    /// `connect` a TCP socket to `addr` (`ip:port`).
    ConnectTcp { addr: String },
    /// `ptrace(PTRACE_ATTACH, pid)` (0: the worker's parent).
    PtraceAttach { pid: u32 },
    /// `process_vm_readv` of one word from `pid` (0: the worker's parent).
    ProcessVmRead { pid: u32 },
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
    ReadEnviron { pid: u32 },
    /// `kill(pid, 0)` — may the worker signal `pid` (0: the worker's parent)?
    Signal { pid: u32 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SocketFamily {
    Unix,
    Inet,
    Inet6,
    Netlink,
    Packet,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SocketKind {
    Stream,
    Datagram,
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
