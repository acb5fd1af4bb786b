//! `hanzo-sandbox` confines hanzo-dev's processes: the pre-exec set-up of a child (fds, cgroups,
//! session, parent-death signal, rlimits, `no_new_privs`, and for a command its keeper and its
//! own Landlock domain and seccomp filters), and, inside a worker, capabilities, Landlock and
//! seccomp (an allow-list, with a `SIGSYS` reporter) from its profile, with an attestation read
//! back from the kernel; tier B's namespaces; cgroups (v1 and v2).
//!
//! It also verifies an attestation against a profile, runs confinement probes, builds worker
//! environments from the allow-list, and probes what the running kernel offers (`doctor`). It
//! decides nothing about *what* a process may do: that is `hanzo_policy::profile`, as data.
//!
//! This is the only crate where `unsafe` is used for confinement; every block says why it is sound.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![cfg(target_os = "linux")]

pub mod cgroup;
pub mod confine;
pub mod doctor;
pub mod env;
pub mod fdpass;
pub mod keeper;
pub mod namespaces;
pub mod probe;
pub mod procfs;
pub mod seccomp;
pub mod selfprotect;
pub mod signals;
pub mod sigsys;
pub mod spawn;
pub mod syscalls;
pub mod verify;

mod sys;

pub use sys::{errno_name, own_pid};
