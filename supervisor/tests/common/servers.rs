//! Language servers from `test-deps/lsp` (installed by `scripts/setup.sh`), put into a test's
//! workspace the way a project installs them: in its own `node_modules`. The LSP bench includes
//! this file too.

// Each test binary (and the bench) uses only part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The repository's root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `test-deps/lsp/node_modules` into `ws/node_modules`, after checking that each of `exes`
/// (names under `.bin`) is there.
pub fn install_into(ws: &Path, exes: &[&str]) {
    let src = repo_root().join("test-deps/lsp/node_modules");
    for exe in exes {
        assert!(
            src.join(".bin").join(exe).exists(),
            "{exe} is missing from test-deps/lsp: run ./scripts/setup.sh"
        );
    }
    link_tree(&src, &ws.join("node_modules")).expect("install the servers into the workspace");
}

/// A copy of the tree `src` at `dst`: hard links where possible (the trees are large), else
/// copies; symbolic links recreated as they are.
pub fn link_tree(src: &Path, dst: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dst)?;
    for entry in std::fs::read_dir(src)? {
        let entry = entry?;
        let (from, to) = (entry.path(), dst.join(entry.file_name()));
        let ty = entry.file_type()?;
        if ty.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&from)?, &to)?;
        } else if ty.is_dir() {
            link_tree(&from, &to)?;
        } else if std::fs::hard_link(&from, &to).is_err() {
            std::fs::copy(&from, &to)?;
        }
    }
    Ok(())
}
