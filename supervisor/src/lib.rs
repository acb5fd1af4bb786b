//! The `hanzo-dev` supervisor: command line, supervision tree, worker lifecycle. The binary (`main.rs`)
//! is a thin entry over this library so that integration tests can drive the same code.
#![deny(unsafe_code)]
#![deny(missing_docs)]
// The cast lints (issue 11), as in the other crates.
#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss,
    clippy::cast_lossless
)]

pub mod agent;
pub mod cli;
pub mod demo;
pub mod egress;
pub mod mcp;
pub mod otlp;
pub mod pair;
pub mod secrets;
pub mod serve;
pub mod spawner;
pub mod start;
pub mod startup;
pub mod supervise;
pub mod term;
pub mod tree;
pub mod tui;
pub mod userfile;
pub mod vectors;
pub mod worker;
pub mod workspace;

/// The hidden first argument that turns this binary into a worker.
pub const WORKER_ENTRY: &str = "__worker";
