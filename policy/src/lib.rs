//! `hanzo-policy` decides what an agent may do: layered settings, workspace trust, permission
//! rules with audit records, the hook contract, and the sandbox profile of every worker role.
//! It holds data and decision logic only; it never spawns a process.
#![forbid(unsafe_code)]

pub mod profile;
