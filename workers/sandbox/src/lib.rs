//! `hanzo-sandbox` confines hanzo-dev worker processes: the pre-exec set-up of a child (fds,
//! session, parent-death signal, rlimits, `no_new_privs`) and, inside the worker, capabilities,
//! Landlock and seccomp from the role's profile, with an attestation read back from the kernel.
//!
//! It also verifies an attestation against a profile, runs confinement probes, builds worker
//! environments from the allow-list, and probes what the running kernel offers (`doctor`). It
//! decides nothing about *what* a role may do: that is `hanzo_policy::profile`, as data.
//!
//! This is the only crate where `unsafe` is used for confinement; every block says why it is sound.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![cfg(target_os = "linux")]

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
pub mod spawn;
pub mod verify;

mod sys;
