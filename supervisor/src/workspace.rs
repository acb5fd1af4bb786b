//! Refusing a workspace that would put the user's own files within a model's reach.
//!
//! The tools sandbox grants the workspace read-write. A workspace that is `/`, the home directory
//! (or a parent of it), or that contains hanzo-dev's configuration directory, its data directory
//! (the run store, the trust store) would let a prompt-injected model read the credentials file
//! and SSH keys, rewrite the user's settings to allow everything in later runs, or delete the
//! audit rows of the run that is going on. `run` refuses such a workspace unless
//! `--allow-dangerous-workspace` is given, and then records that it was.

use crate::secrets::StartEnv;
use std::path::{Path, PathBuf};

/// Why a workspace is dangerous: each thing of the user's it would expose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dangers(pub Vec<String>);

impl Dangers {
    /// Whether nothing of the user's is exposed, so the workspace may be used without
    /// `--allow-dangerous-workspace`.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Display for Dangers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join("; "))
    }
}

fn lookup<'a>(env: &'a StartEnv, name: &str) -> Option<&'a str> {
    env.vars
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty())
}

/// `$XDG_<kind>_HOME` when absolute (the XDG rule), else `$HOME/<fallback>`.
fn xdg(env: &StartEnv, var: &str, fallback: &str) -> Option<PathBuf> {
    match lookup(env, var).filter(|v| Path::new(v).is_absolute()) {
        Some(d) => Some(PathBuf::from(d)),
        None => lookup(env, "HOME").map(|h| PathBuf::from(h).join(fallback)),
    }
}

/// `path` as the kernel would resolve it: canonical when it exists, else its nearest existing
/// ancestor made canonical with the rest appended (so a configuration directory that does not
/// exist yet is still recognised inside the workspace).
fn resolved(path: &Path) -> PathBuf {
    if let Ok(c) = path.canonicalize() {
        return c;
    }
    let mut rest = Vec::new();
    let mut cur = path;
    while let Some(parent) = cur.parent() {
        if let Some(name) = cur.file_name() {
            rest.push(name.to_os_string());
        }
        if let Ok(c) = parent.canonicalize() {
            let mut out = c;
            out.extend(rest.iter().rev());
            return out;
        }
        cur = parent;
    }
    path.to_path_buf()
}

/// What the workspace (canonical) would expose; empty when it is safe. `store_file` is the run
/// store this run writes.
pub fn dangers(workspace: &Path, env: &StartEnv, store_file: Option<&Path>) -> Dangers {
    let mut out = Vec::new();
    if workspace.parent().is_none() {
        out.push(format!(
            "{} is the whole filesystem, your home directory and hanzo-dev's own files included",
            workspace.display()
        ));
        return Dangers(out);
    }
    let hanzo_home = |var, fallback| xdg(env, var, fallback).map(|d| resolved(&d.join("hanzo")));
    let home = lookup(env, "HOME").map(|h| resolved(Path::new(h)));
    let mut check = |what: &str, path: Option<PathBuf>| {
        if let Some(p) = path.filter(|p| p.starts_with(workspace)) {
            out.push(format!("it contains {what} ({})", p.display()));
        }
    };
    check(
        "your home directory, with your SSH keys, credentials and shell startup files",
        home,
    );
    check(
        "hanzo-dev's configuration (settings and credentials a model could rewrite)",
        hanzo_home("XDG_CONFIG_HOME", ".config"),
    );
    check(
        "hanzo-dev's data directory (the run store and the trust records)",
        hanzo_home("XDG_DATA_HOME", ".local/share"),
    );
    let trust = {
        let vars = env.vars.iter().cloned().collect();
        hanzo_policy::TrustStore::default_path(&vars).map(|p| resolved(&p))
    };
    check("the trust store", trust);
    check("the run store this run writes to", store_file.map(resolved));
    out.dedup();
    Dangers(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(root: &Path) -> StartEnv {
        StartEnv {
            vars: vec![
                ("HOME".into(), root.join("home/u").display().to_string()),
                (
                    "XDG_CONFIG_HOME".into(),
                    root.join("cfg").display().to_string(),
                ),
                (
                    "XDG_DATA_HOME".into(),
                    root.join("data").display().to_string(),
                ),
            ],
        }
    }

    #[test]
    fn each_dangerous_workspace_is_named_with_its_reason() {
        let dir = tempfile::tempdir().expect("tmp");
        let root = dir.path().canonicalize().expect("canon");
        for d in ["home/u/project", "cfg/hanzo", "data/hanzo", "cfg/other"] {
            std::fs::create_dir_all(root.join(d)).expect("mkdir");
        }
        let env = env(&root);
        let safe = dangers(&root.join("home/u/project"), &env, None);
        assert!(safe.is_empty(), "{safe}");
        assert!(dangers(&root.join("cfg/other"), &env, None).is_empty());
        let home = dangers(&root.join("home/u"), &env, None);
        assert_eq!(home.0.len(), 1, "{home}");
        assert!(home.0[0].contains("your home directory"), "{home}");
        let parent = dangers(&root.join("home"), &env, None);
        assert!(parent.0[0].contains("your home directory"), "{parent}");
        let cfg = dangers(&root.join("cfg"), &env, None);
        assert!(cfg.0[0].contains("configuration"), "{cfg}");
        assert!(dangers(&root.join("cfg/hanzo"), &env, None).0[0].contains("configuration"));
        let data = dangers(&root.join("data"), &env, None);
        assert_eq!(data.0.len(), 2, "data dir and trust store: {data}");
        assert!(data.to_string().contains("trust store"), "{data}");
        let all = dangers(&root, &env, None);
        assert_eq!(all.0.len(), 4, "{all}");
        let slash = dangers(Path::new("/"), &env, None);
        assert!(slash.0[0].contains("whole filesystem"), "{slash}");
        // A store somewhere else, named by the caller.
        let store = root.join("home/u/project/db/agents.db");
        let s = dangers(&root.join("home/u/project"), &env, Some(&store));
        assert!(s.0[0].contains("run store"), "{s}");
    }
}
