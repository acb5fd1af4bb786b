//! `hanzo-ipc` is the only crate that knows the wire format between the supervisor and its
//! workers: length-prefixed frames, typed per-role channels, the handshake and the transports.
//!
//! Layers, bottom up: [`frame`] (bytes ↔ frames, limits checked before allocation), [`proto`]
//! (frame types, handshake, envelopes), [`roles`] (each role's message set), and with the
//! `transport` feature [`transport`] (inherited socketpair fds, async frame I/O) and [`channel`]
//! (request/response client and worker-side server).
// The cast lints (issue 11), enforced crate by crate until every member passes them.
#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss,
    clippy::cast_lossless
)]
#![deny(missing_docs)]
#![cfg_attr(not(feature = "transport"), forbid(unsafe_code))]
#![cfg_attr(feature = "transport", deny(unsafe_code))]

pub mod attest;
pub mod frame;
#[cfg(feature = "test-support")]
pub mod fuzzing;
pub mod probe;
pub mod proto;
pub mod role;
pub mod roles;
pub mod secret;

#[cfg(feature = "transport")]
pub mod channel;
#[cfg(feature = "transport")]
pub mod socket;
#[cfg(feature = "transport")]
pub mod transport;

pub use role::Role;
