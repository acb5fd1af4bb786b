//! Build facts for `hanzo-dev --version`: the git commit and its date (the build date of a
//! reproducible build: `SOURCE_DATE_EPOCH` when set, else the commit's date, never the clock),
//! and the target triple.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some();
    let date = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(epoch) => format!("@{epoch}"),
        Err(_) => git(&["log", "-1", "--format=%cs"]).unwrap_or_else(|| "unknown".into()),
    };
    println!(
        "cargo:rustc-env=HANZO_BUILD_COMMIT={commit}{}",
        if dirty { "-dirty" } else { "" }
    );
    println!("cargo:rustc-env=HANZO_BUILD_DATE={date}");
    println!(
        "cargo:rustc-env=HANZO_BUILD_TARGET={}",
        std::env::var("TARGET").unwrap_or_default()
    );
    let tiers = if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        "A (Landlock, seccomp, no capabilities), B (A + user, mount, pid, net, ipc namespaces)"
    } else {
        "none on this platform"
    };
    println!("cargo:rustc-env=HANZO_BUILD_TIERS={tiers}");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        println!("cargo:rerun-if-changed={dir}/index");
        if let Some(common) = git(&["rev-parse", "--git-common-dir"]) {
            println!("cargo:rerun-if-changed={common}/packed-refs");
            if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"]) {
                println!("cargo:rerun-if-changed={common}/{head_ref}");
            }
        }
    }
}
