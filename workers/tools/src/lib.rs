//! The tools worker: every built-in tool, command execution and hook execution happen here,
//! inside the tools sandbox, never in the supervisor.
#![forbid(unsafe_code)]

pub mod hooks;
