//! `hanzo-dev sandbox`'s command line (`cli/sandbox.rs`), compiled here on its own until the
//! subcommand is wired into `cli/mod.rs`. The confinement it applies — the whole escape battery,
//! the canary, ordinary work — is proven by `workers/tools/tests/escape.rs`, which runs the same
//! `hanzo_tools::oneshot::run` in fresh processes.

// `sandbox.rs` names `crate::secrets`; here the crate is this test.
mod secrets {
    pub use hanzo_dev::secrets::*;
}

#[path = "../src/cli/sandbox.rs"]
mod sandbox;

use clap::Parser;
use hanzo_sandbox::doctor::KernelReport;
use sandbox::{one_shot, Args, Isolation};
use std::ffi::OsString;
use std::path::PathBuf;

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    args: Args,
}

fn parse(argv: &[&str]) -> Result<Args, clap::Error> {
    Cli::try_parse_from(std::iter::once("sandbox").chain(argv.iter().copied())).map(|c| c.args)
}

fn report(userns: Result<(), String>) -> KernelReport {
    KernelReport {
        landlock_abi: 6,
        landlock_error: None,
        seccomp: true,
        user_namespaces: userns,
        container: None,
        container_evidence: None,
        kernel_release: "6.8".into(),
        arch: "x86_64".into(),
        running_as_root: false,
    }
}

#[test]
fn arguments_parse_with_the_command_after_the_double_dash() {
    let a = parse(&[
        "--isolation",
        "strict",
        "--workspace",
        "/w",
        "--allow-write",
        "/a",
        "--allow-write",
        "/b",
        "--allow-read",
        "/opt/tc",
        "--",
        "ls",
        "-l",
        "--all",
    ])
    .expect("parse");
    assert_eq!(a.isolation, Isolation::Strict);
    assert_eq!(a.workspace, Some(PathBuf::from("/w")));
    assert_eq!(a.allow_write, [PathBuf::from("/a"), PathBuf::from("/b")]);
    assert_eq!(a.allow_read, [PathBuf::from("/opt/tc")]);
    assert_eq!(a.command, ["ls", "-l", "--all"].map(OsString::from));
    let d = parse(&["--", "/bin/true"]).expect("parse");
    assert_eq!(d.isolation, Isolation::Auto);
    assert!(parse(&[]).is_err(), "a command is required");
    assert!(parse(&["--isolation", "off", "--", "true"]).is_err());
}

#[test]
fn the_one_shot_run_takes_the_workspace_and_grants_from_the_arguments() {
    let a = parse(&["--allow-write", "/x", "--", "make", "-j2"]).expect("parse");
    let spec = one_shot(&a, &hanzo_dev::secrets::StartEnv { vars: Vec::new() }).expect("spec");
    assert_eq!(spec.workspace, std::env::current_dir().expect("cwd"));
    assert_eq!(spec.allow_write, [PathBuf::from("/x")]);
    assert_eq!(spec.command, ["make", "-j2"].map(OsString::from));
    // Nothing from the environment is added: the command gets the allow-list only.
    assert!(spec.extra_env.is_empty());
}

#[test]
fn entry_point_and_exit_code_match_the_cli() {
    // What `cli::run` will call once the subcommand is wired.
    let _: fn(&Args, hanzo_dev::secrets::StartEnv) -> anyhow::Result<i32> = sandbox::run;
    assert_eq!(
        sandbox::ISOLATION_UNAVAILABLE,
        hanzo_dev::cli::exit::ISOLATION_UNAVAILABLE
    );
}

#[test]
fn strict_failure_names_the_cause_and_the_way_out() {
    let e =
        sandbox::strict_unavailable(&"unshare: EPERM", || report(Err("EPERM; sysctl …".into())));
    assert!(
        e.contains("needs tier B")
            && e.contains("unshare: EPERM")
            && e.contains("sysctl")
            && e.contains("hanzo-dev doctor")
            && e.contains("--isolation auto"),
        "{e}"
    );
}

#[test]
fn isolation_maps_to_the_one_shot_tier() {
    let env = hanzo_dev::secrets::StartEnv { vars: Vec::new() };
    let auto = one_shot(&parse(&["--", "true"]).expect("parse"), &env).expect("spec");
    assert_eq!(auto.isolation, hanzo_tools::oneshot::Tier::Auto);
    let strict = one_shot(
        &parse(&["--isolation", "strict", "--", "true"]).expect("parse"),
        &env,
    )
    .expect("spec");
    assert_eq!(strict.isolation, hanzo_tools::oneshot::Tier::B);
}
