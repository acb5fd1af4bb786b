//! What the sandbox costs a spawn: `/bin/true` plain vs through `configure_command` (the pre-exec
//! hook: fd moves, setsid, parent-death signal, close_range, rlimits, no_new_privs), and the
//! cost of compiling a role's seccomp filters.

use criterion::{criterion_group, criterion_main, Criterion};
use hanzo_ipc::Role;
use hanzo_policy::profile::{profile_for, ProfileContext};
use hanzo_sandbox::seccomp;
use hanzo_sandbox::spawn::{configure_command, ChildSetup};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};

fn spawn(c: &mut Criterion) {
    let profile = profile_for(Role::Tools, &ProfileContext::default());
    let (_ours, theirs) = UnixStream::pair().expect("socketpair");
    let mut group = c.benchmark_group("spawn_bin_true");
    group.bench_function("plain", |b| {
        b.iter(|| {
            let status = Command::new("/bin/true")
                .stdin(Stdio::null())
                .status()
                .expect("spawn");
            assert!(status.success());
        })
    });
    group.bench_function("configure_command", |b| {
        b.iter(|| {
            let mut cmd = Command::new("/bin/true");
            cmd.stdin(Stdio::null());
            configure_command(
                &mut cmd,
                ChildSetup {
                    fds: vec![(theirs.as_raw_fd(), 3)],
                    rlimits: profile.rlimits,
                    parent_pid: hanzo_sandbox::own_pid(),
                    new_session: true,
                    join_cgroups: Vec::new(),
                },
            );
            assert!(cmd.status().expect("spawn").success());
        })
    });
    group.finish();

    c.bench_function("seccomp_build_model", |b| {
        let model = profile_for(Role::Model, &ProfileContext::default());
        b.iter(|| seccomp::build(&model).expect("builds"))
    });
}

criterion_group!(benches, spawn);
criterion_main!(benches);
