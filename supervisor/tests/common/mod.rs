//! What the supervisor integration tests share: a tree configuration for a workspace whose
//! workers are the built `hanzo-dev` binary; a private user for the binary's commands (`env`);
//! the process tree (`procs`); language servers in a workspace (`servers`); the user's side of
//! a login (`browser`); a local HTTP site (`www`).

// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

pub mod browser;
pub mod env;
pub mod procs;
pub mod servers;
pub mod www;

use hanzo_dev::secrets::StartEnv;
use hanzo_dev::startup::{supervisor_config, RunDir};
use hanzo_dev::tree::SupervisorConfig;
use std::path::{Path, PathBuf};

/// The configuration `hanzo-dev` would build for `workspace` from the environment `vars`, with the
/// workers re-executed from the built binary (not the test binary).
pub fn tree_config(workspace: &Path, vars: Vec<(String, String)>) -> (SupervisorConfig, RunDir) {
    let abi = hanzo_sandbox::doctor::probe_kernel().landlock_abi;
    let (mut cfg, run) = supervisor_config(Some(workspace.to_path_buf()), &StartEnv { vars }, abi)
        .expect("supervisor config");
    cfg.exe = PathBuf::from(env!("CARGO_BIN_EXE_hanzo-dev"));
    (cfg, run)
}

/// Only `PATH` from this process's environment.
pub fn path_only() -> Vec<(String, String)> {
    std::env::vars().filter(|(k, _)| k == "PATH").collect()
}
