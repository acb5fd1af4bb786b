//! Where the run store lives and how commands open it.

use crate::secrets::StartEnv;
use anyhow::Context;
use hanzo_store::{RunStore, DEFAULT_ORG};
use std::path::PathBuf;

/// `$XDG_DATA_HOME/hanzo`, else `$HOME/.local/share/hanzo` (the same directory trust records use).
pub fn data_dir(env: &StartEnv) -> anyhow::Result<PathBuf> {
    let get = |name: &str| {
        env.vars
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    };
    // The XDG rule: a relative value is ignored.
    if let Some(x) = get("XDG_DATA_HOME").filter(|x| std::path::Path::new(x).is_absolute()) {
        return Ok(PathBuf::from(x).join("hanzo"));
    }
    if let Some(home) = get("HOME") {
        return Ok(PathBuf::from(home).join(".local/share/hanzo"));
    }
    anyhow::bail!("no data directory for the run store: set XDG_DATA_HOME or HOME")
}

/// The org whose store to open: `--org`, else `HANZO_ORG`, else `local`.
pub fn org(flag: Option<&str>, env: &StartEnv) -> String {
    flag.map(str::to_string)
        .or_else(|| {
            env.vars
                .iter()
                .find(|(k, _)| k == "HANZO_ORG")
                .map(|(_, v)| v.clone())
                .filter(|v| !v.is_empty())
        })
        .unwrap_or_else(|| DEFAULT_ORG.to_string())
}

/// The file the org's store lives in (it may not exist yet).
pub fn store_file(org_flag: Option<&str>, env: &StartEnv) -> anyhow::Result<PathBuf> {
    let dir = data_dir(env)?;
    let org = org(org_flag, env);
    hanzo_store::store_path(&dir, &org).map_err(|e| super::exit::usage(e.to_string()))
}

/// Open the org's store, marking runs whose process died as `interrupted`.
pub fn open(org_flag: Option<&str>, env: &StartEnv) -> anyhow::Result<RunStore> {
    let dir = data_dir(env)?;
    let org = org(org_flag, env);
    let mut store = RunStore::open(&dir, &org).with_context(|| {
        format!(
            "cannot open the run store of org {org:?} under {}",
            dir.display()
        )
    })?;
    store
        .mark_interrupted_runs()
        .context("cannot mark interrupted runs")?;
    Ok(store)
}
