//! Proves the sandbox for real: every case re-execs this binary (`--sandbox-child MODE`) so that
//! confinement is applied to a fresh, single-threaded process, spawned through
//! `spawn::configure_command` as the supervisor spawns workers. The parent then asks the child to
//! attempt forbidden operations (one JSON `Probe` per line on its stdin, one `ProbeOutcome` per
//! line back) and checks `/proc/<child>` from outside.
//!
//! Own `main` (harness = false): libtest runs each test on a thread of a multi-threaded process.

#![deny(clippy::undocumented_unsafe_blocks)]

use hanzo_ipc::attest::{Attestation, LandlockStatus, SocketPolicy};
use hanzo_ipc::probe::{Probe, ProbeOutcome, SocketFamily, SocketKind};
use hanzo_ipc::Role;
use hanzo_policy::profile::{profile_for, ProfileContext, SandboxProfile};
use hanzo_sandbox::confine::{adopt_inherited_fd, confine_current_process, ConfineError};
use hanzo_sandbox::spawn::{configure_command, ChildSetup, PARENT_DIED_EXIT_CODE};
use hanzo_sandbox::{doctor, env, probe, procfs, verify};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

const CHILD_FLAG: &str = "--sandbox-child";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(CHILD_FLAG) {
        std::process::exit(child::run(&args[2..]));
    }
    let cases: &[(&str, fn())] = &[
        ("model_worker_is_confined", model_worker_is_confined),
        (
            "tools_worker_writes_only_its_workspace",
            tools_worker_writes_only_its_workspace,
        ),
        (
            "broker_worker_may_open_inet_sockets_but_not_ptrace",
            broker_worker_may_open_inet_sockets_but_not_ptrace,
        ),
        (
            "canary_secret_reaches_the_broker_environ_only",
            canary_secret_reaches_the_broker_environ_only,
        ),
        (
            "confine_refuses_a_multi_threaded_process",
            confine_refuses_a_multi_threaded_process,
        ),
        (
            "spawned_child_gets_session_fds_rlimits_pdeathsig_nnp",
            spawned_child_gets_session_fds_rlimits_pdeathsig_nnp,
        ),
        (
            "fd_passed_at_its_own_number_survives_exec",
            fd_passed_at_its_own_number_survives_exec,
        ),
        (
            "child_of_a_dead_parent_exits_before_exec",
            child_of_a_dead_parent_exits_before_exec,
        ),
        (
            "child_dies_with_its_spawning_thread",
            child_dies_with_its_spawning_thread,
        ),
        (
            "adopt_inherited_fd_sets_cloexec_and_wants_a_socket",
            adopt_inherited_fd_sets_cloexec_and_wants_a_socket,
        ),
        ("doctor_reports_this_kernel", doctor_reports_this_kernel),
        (
            "a_syscall_outside_the_allow_list_stops_the_worker_and_names_it",
            a_syscall_outside_the_allow_list_stops_the_worker_and_names_it,
        ),
        (
            "the_reaper_can_wait_and_nothing_else",
            the_reaper_can_wait_and_nothing_else,
        ),
        (
            "a_helper_that_panics_exits_without_running_its_parent_s_destructors",
            a_helper_that_panics_exits_without_running_its_parent_s_destructors,
        ),
        (
            "a_reaping_helper_gets_a_failed_exec_as_an_error_and_leaves_no_zombie",
            a_reaping_helper_gets_a_failed_exec_as_an_error_and_leaves_no_zombie,
        ),
    ];
    // nextest lists with `--list --format terse` (and `--ignored` for ignored tests: none here).
    if args.iter().any(|a| a == "--list") {
        if !args.iter().any(|a| a == "--ignored") {
            for (name, _) in cases {
                println!("{name}: test");
            }
        }
        return;
    }
    // `NAME` filters by substring like libtest, or exactly with `--exact` (as nextest runs one).
    let exact = args.iter().any(|a| a == "--exact");
    let filters: Vec<&String> = args[1..].iter().filter(|a| !a.starts_with('-')).collect();
    let selected: Vec<_> = cases
        .iter()
        .filter(|(name, _)| {
            filters.is_empty()
                || filters.iter().any(|f| {
                    if exact {
                        *name == f.as_str()
                    } else {
                        name.contains(f.as_str())
                    }
                })
        })
        .collect();
    println!("\nrunning {} tests", selected.len());
    let (mut passed, mut failed) = (0usize, Vec::new());
    for (name, case) in selected {
        match std::panic::catch_unwind(case) {
            Ok(()) => {
                println!("test {name} ... ok");
                passed += 1;
            }
            Err(_) => {
                println!("test {name} ... FAILED");
                failed.push(*name);
            }
        }
    }
    if !failed.is_empty() {
        println!("\nfailures:");
        for name in &failed {
            println!("    {name}");
        }
    }
    println!(
        "\ntest result: {}. {passed} passed; {} failed\n{passed} passed, {} failed",
        if failed.is_empty() { "ok" } else { "FAILED" },
        failed.len(),
        failed.len()
    );
    std::process::exit(if failed.is_empty() { 0 } else { 1 });
}

// ---------------------------------------------------------------------------------------------
// Parent side.

fn this_exe() -> PathBuf {
    std::env::current_exe().expect("current_exe")
}

fn worker_setup(profile: &SandboxProfile, fds: Vec<(RawFd, RawFd)>) -> ChildSetup {
    ChildSetup {
        fds,
        rlimits: profile.rlimits,
        parent_pid: hanzo_sandbox::own_pid(),
        new_session: true,
        join_cgroups: Vec::new(),
    }
}

/// A confined child and the pipes to drive it.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    att: Attestation,
}

impl Worker {
    /// Spawns `--sandbox-child confine ROLE [WORKSPACE]` with the role's environment built by
    /// `env::role_env` from `parent_env`, and reads its attestation.
    fn start(role: Role, workspace: Option<&Path>, parent_env: Vec<(String, String)>) -> Worker {
        let profile = profile_for(role, &ctx(workspace));
        let mut cmd = Command::new(this_exe());
        cmd.arg(CHILD_FLAG).arg("confine").arg(role.as_str());
        if let Some(ws) = workspace {
            cmd.arg(ws);
        }
        cmd.env_clear()
            .envs(env::role_env(&profile, parent_env.into_iter(), &[]))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        configure_command(&mut cmd, worker_setup(&profile, Vec::new()));
        let mut child = cmd.spawn().expect("spawn confined child");
        let stdin = child.stdin.take().expect("stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read attestation");
        let json = line
            .strip_prefix("ATT ")
            .unwrap_or_else(|| panic!("child did not attest: {line:?}"));
        let att: Attestation = serde_json::from_str(json.trim()).expect("attestation json");
        Worker {
            child,
            stdin,
            stdout,
            att,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn request(&mut self, line: String) -> String {
        writeln!(self.stdin, "{line}").expect("write request");
        self.stdin.flush().expect("flush");
        let mut answer = String::new();
        self.stdout.read_line(&mut answer).expect("read answer");
        answer.trim().to_string()
    }

    fn probe(&mut self, p: Probe) -> ProbeOutcome {
        let answer = self.request(format!(
            "probe {}",
            serde_json::to_string(&p).expect("json")
        ));
        serde_json::from_str(&answer).unwrap_or_else(|_| panic!("bad answer to {p:?}: {answer}"))
    }

    /// Asks the child to run `path` and returns its answer (`ok` or the error).
    fn exec(&mut self, path: &str) -> String {
        self.request(format!("exec {path}"))
    }

    fn finish(mut self) {
        drop(self.stdin);
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "child failed: {status:?}");
    }
}

fn ctx(workspace: Option<&Path>) -> ProfileContext {
    ProfileContext {
        workspace: workspace.map(Path::to_path_buf),
        ..ProfileContext::default()
    }
}

fn parent_env() -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = std::env::vars().collect();
    env.push(("CANARY_API_KEY".to_string(), "sk-canary-7f3a".to_string()));
    env
}

fn kernel_abi() -> u32 {
    doctor::probe_kernel().landlock_abi
}

fn held_setpcap() -> bool {
    let own = procfs::read_status(std::process::id()).expect("own status");
    own.cap_eff & (1 << 8) != 0
}

/// The kernel's own account of a confined worker, read from outside.
fn assert_confined_from_outside(pid: u32) {
    let s = procfs::read_status(pid).expect("child status");
    assert!(s.no_new_privs, "NoNewPrivs: {s:?}");
    assert_eq!(s.seccomp_mode, 2, "Seccomp: {s:?}");
    assert_eq!(
        (s.cap_eff, s.cap_prm, s.cap_inh, s.cap_amb),
        (0, 0, 0, 0),
        "capabilities: {s:?}"
    );
    if held_setpcap() {
        assert_eq!(s.cap_bnd, 0, "CapBnd: {s:?}");
    }
    assert_eq!(s.threads, 1);
}

fn assert_denied(o: &ProbeOutcome, errno: i32, what: &str) {
    assert!(!o.succeeded, "{what} succeeded: {o:?}");
    assert_eq!(o.errno, Some(errno), "{what}: {o:?}");
}

/// Refused by the worker's seccomp allow-list: the probe child was stopped with `SIGSYS`.
fn assert_trapped(o: &ProbeOutcome, what: &str) {
    assert!(!o.succeeded, "{what} succeeded: {o:?}");
    assert!(
        o.errno.is_none() && o.detail.contains("allow-list"),
        "{what} was not stopped by the allow-list: {o:?}"
    );
}

/// The attestation names the role's allow-list, as the policy declares it.
fn assert_allow_list(att: &Attestation, role: Role) {
    let list = hanzo_policy::profile::allow_list(role.as_str());
    let a = att
        .seccomp
        .allow_list
        .as_ref()
        .expect("an allow-list is attested");
    assert_eq!(
        (a.name.as_str(), a.digest.clone()),
        (role.as_str(), list.digest())
    );
}

fn model_worker_is_confined() {
    let mut w = Worker::start(Role::Model, None, parent_env());
    let profile = profile_for(Role::Model, &ctx(None));
    let abi = kernel_abi();
    assert_eq!(verify::missing(&profile, &w.att, abi), Vec::<String>::new());
    assert_eq!(w.att.pid, w.pid());
    assert_eq!(w.att.landlock.status, LandlockStatus::FullyEnforced);
    assert_eq!(w.att.landlock.kernel_abi, abi);
    assert!(w.att.landlock.grants.is_empty());
    assert_eq!(w.att.landlock.scoped, abi >= 6);
    assert_eq!(w.att.seccomp.sockets, SocketPolicy::None);
    assert!(w.att.seccomp.x32_denied && w.att.seccomp.namespace_creation_denied);
    assert_allow_list(&w.att, Role::Model);
    assert!(!w.att.seccomp.command_rules);
    assert!(
        w.att.caps.all_empty() || !held_setpcap(),
        "{:?}",
        w.att.caps
    );
    assert_confined_from_outside(w.pid());

    use libc::EPERM;
    // No file at all: `openat` is not even on the model worker's list (Landlock would refuse too).
    let open = |p: &str| Probe::OpenRead { path: p.into() };
    assert_trapped(&w.probe(open("/etc/passwd")), "read /etc/passwd");
    assert_trapped(&w.probe(open("/proc/self/status")), "read /proc");
    assert_trapped(
        &w.probe(Probe::OpenWrite {
            path: "/tmp/hanzo-model-probe".into(),
        }),
        "write /tmp",
    );
    // No socket of any family: the model worker's channels were inherited.
    for (family, kind) in [
        (SocketFamily::Unix, SocketKind::Stream),
        (SocketFamily::Inet, SocketKind::Stream),
        (SocketFamily::Inet6, SocketKind::Datagram),
        (SocketFamily::Netlink, SocketKind::Raw),
        (SocketFamily::Packet, SocketKind::Raw),
    ] {
        let o = w.probe(Probe::Socket { family, kind });
        assert_trapped(&o, &format!("socket {family:?}"));
    }
    assert_trapped(
        &w.probe(Probe::ConnectTcp {
            addr: "127.0.0.1:9".into(),
        }),
        "tcp connect",
    );
    // Outside the allow-list (and on the base deny list): the attempt stops the process.
    assert_trapped(&w.probe(Probe::PtraceAttach { pid: 0 }), "ptrace parent");
    assert_trapped(
        &w.probe(Probe::ProcessVmRead { pid: 0 }),
        "process_vm_readv",
    );
    assert_trapped(&w.probe(Probe::UnshareUser), "unshare");
    assert_trapped(&w.probe(Probe::Mount), "mount");
    assert_trapped(&w.probe(Probe::IoUringSetup), "io_uring_setup");
    assert_trapped(&w.probe(Probe::Bpf), "bpf");
    assert_trapped(&w.probe(Probe::X32Syscall), "x32 getpid");
    assert_denied(
        &w.probe(Probe::CloneNewNamespace),
        EPERM,
        "clone(CLONE_NEWNS)",
    );
    assert_trapped(&w.probe(Probe::ReadEnviron { pid: 0 }), "parent environ");
    // The model worker sends no signal at all (kill is not on its list).
    assert_trapped(&w.probe(Probe::Signal { pid: 0 }), "signal parent");
    // clone3 is refused (ENOSYS, attested above) and clone without namespace flags is not: a
    // plain fork still works.
    let fork = w.request("fork".to_string());
    assert_eq!(fork, "ok", "fork in the confined worker");
    // i386 syscalls (int 0x80) report another audit arch: the filter kills the process.
    #[cfg(target_arch = "x86_64")]
    {
        let int80 = w.request("int80".to_string());
        assert!(
            int80 == format!("signal {}", libc::SIGSYS)
                || int80 == format!("signal {}", libc::SIGSEGV),
            "an i386 syscall must not return: {int80}"
        );
    }
    // Threads start after confinement (tokio): clone3 → ENOSYS → glibc falls back to clone.
    assert_eq!(
        w.request("thread".to_string()),
        "ok",
        "thread in the confined worker"
    );
    w.finish();
}

fn tools_worker_writes_only_its_workspace() {
    let outer = tempfile::tempdir().expect("tempdir");
    let ws = outer.path().join("ws");
    std::fs::create_dir(&ws).expect("mkdir ws");
    std::fs::write(outer.path().join("outside.txt"), "x").expect("write outside");
    let mut w = Worker::start(Role::Tools, Some(&ws), parent_env());
    // The launcher is the tools worker's own (`hanzo_tools::worker_main`, proven in that crate's
    // tests); this child confines only itself.
    let profile = SandboxProfile {
        launcher: false,
        ..profile_for(Role::Tools, &ctx(Some(&ws)))
    };
    assert_eq!(
        verify::missing(&profile, &w.att, kernel_abi()),
        Vec::<String>::new()
    );
    assert!(w
        .att
        .landlock
        .grants
        .contains(&format!("rw {}", ws.display())));
    assert_eq!(w.att.seccomp.sockets, SocketPolicy::None);
    assert_allow_list(&w.att, Role::Tools);
    assert_confined_from_outside(w.pid());

    let path = |p: &Path| p.display().to_string();
    let inside = w.probe(Probe::OpenWrite {
        path: path(&ws.join("new.txt")),
    });
    assert!(inside.succeeded, "write inside the workspace: {inside:?}");
    assert_denied(
        &w.probe(Probe::OpenWrite {
            path: path(&outer.path().join("new.txt")),
        }),
        libc::EACCES,
        "create outside the workspace",
    );
    assert_denied(
        &w.probe(Probe::OpenWrite {
            path: path(&outer.path().join("outside.txt")),
        }),
        libc::EACCES,
        "write an existing file outside the workspace",
    );
    assert_denied(
        &w.probe(Probe::OpenRead {
            path: path(&outer.path().join("outside.txt")),
        }),
        libc::EACCES,
        "read outside the workspace",
    );
    assert_denied(
        &w.probe(Probe::OpenWrite {
            path: "/usr/hanzo-probe".into(),
        }),
        libc::EACCES,
        "write /usr",
    );
    // The worker itself reads neither the system nor /etc: its launcher runs the commands.
    for unreadable in ["/usr/bin", "/etc/passwd"] {
        assert_denied(
            &w.probe(Probe::OpenRead {
                path: unreadable.into(),
            }),
            libc::EACCES,
            &format!("read {unreadable}"),
        );
    }
    for family in [SocketFamily::Unix, SocketFamily::Inet] {
        assert_trapped(
            &w.probe(Probe::Socket {
                family,
                kind: SocketKind::Stream,
            }),
            &format!("{family:?} socket"),
        );
    }
    // Nor does it execute anything: a child that tries is stopped by the allow-list.
    assert_eq!(
        w.exec("/bin/true"),
        format!("exit {}", hanzo_sandbox::sigsys::EXIT_SECCOMP)
    );
    assert!(
        !ws.join("new.txt").exists(),
        "the write probe removes what it created"
    );
    w.finish();
}

fn broker_worker_may_open_inet_sockets_but_not_ptrace() {
    let mut w = Worker::start(Role::Broker, None, parent_env());
    let profile = profile_for(Role::Broker, &ctx(None));
    assert_eq!(
        verify::missing(&profile, &w.att, kernel_abi()),
        Vec::<String>::new()
    );
    assert_eq!(w.att.seccomp.sockets, SocketPolicy::Any);
    assert_allow_list(&w.att, Role::Broker);
    assert_confined_from_outside(w.pid());
    let inet = w.probe(Probe::Socket {
        family: SocketFamily::Inet,
        kind: SocketKind::Stream,
    });
    assert!(inet.succeeded, "the broker speaks HTTPS: {inet:?}");
    assert!(
        w.probe(Probe::OpenRead {
            path: "/etc/hosts".into()
        })
        .succeeded
    );
    assert_denied(
        &w.probe(Probe::OpenRead {
            path: "/usr/bin".into(),
        }),
        libc::EACCES,
        "read /usr/bin",
    );
    assert_trapped(&w.probe(Probe::PtraceAttach { pid: 0 }), "ptrace");
    assert_trapped(&w.probe(Probe::UnshareUser), "unshare");
    w.finish();
}

/// A syscall outside a worker's allow-list stops it with a report on stderr naming the syscall
/// and the list: diagnosable, and no quiet probing.
fn a_syscall_outside_the_allow_list_stops_the_worker_and_names_it() {
    let profile = profile_for(Role::Model, &ctx(None));
    let mut cmd = Command::new(this_exe());
    cmd.args([CHILD_FLAG, "confine", "model"])
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    configure_command(&mut cmd, worker_setup(&profile, Vec::new()));
    let mut child = cmd.spawn().expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    writeln!(stdin, "forbidden").expect("write");
    drop(stdin);
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(hanzo_sandbox::sigsys::EXIT_SECCOMP),
        "{stderr}"
    );
    assert!(
        stderr.contains("syscall acct (") && stderr.contains("policy/seccomp/model.txt"),
        "{stderr}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("survived"));
}

/// Tier B's waiting processes carry the reaper's allow-list: they can wait and nothing else.
fn the_reaper_can_wait_and_nothing_else() {
    let out = Command::new(this_exe())
        .args([CHILD_FLAG, "reaper"])
        .stdin(Stdio::null())
        .output()
        .expect("run reaper child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("reaped 7"), "{stdout} {stderr}");
    assert_eq!(
        out.status.code(),
        Some(hanzo_sandbox::sigsys::EXIT_SECCOMP),
        "opening a file must stop it: {stdout} {stderr}"
    );
    assert!(
        stderr.contains("openat") && stderr.contains("reaper.txt"),
        "{stderr}"
    );
}

/// A helper (`fdpass::fork_helper`) whose body panics exits with `HELPER_PANICKED`: the panic
/// does not unwind into the frames it shares with its parent, whose descriptors the helper
/// closed (dropping them aborted with "IO Safety violation: owned file descriptor already
/// closed", as the mcp worker's command launcher once did).
fn a_helper_that_panics_exits_without_running_its_parent_s_destructors() {
    let out = Command::new(this_exe())
        .args([CHILD_FLAG, "helper-panic"])
        .stdin(Stdio::null())
        .output()
        .expect("run helper-panic child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("the helper's body panics"), "{stderr}");
    assert!(!stderr.contains("IO Safety"), "{stderr}");
    assert_eq!(
        stdout.trim(),
        format!("helper exited {}", hanzo_sandbox::fdpass::HELPER_PANICKED),
        "{stderr}"
    );
    assert!(out.status.success(), "{stdout} {stderr}");
}

/// A helper that reaps automatically (`SIGCHLD` ignored, as the command launcher) spawns through
/// `fdpass::with_sigchld_default`: a program that does not exist is `spawn`'s error (std waits
/// for the child whose `exec` failed, which an ignored `SIGCHLD` made impossible: it panicked),
/// and the children that ended meanwhile are reaped.
fn a_reaping_helper_gets_a_failed_exec_as_an_error_and_leaves_no_zombie() {
    let out = Command::new(this_exe())
        .args([CHILD_FLAG, "helper-spawn"])
        .stdin(Stdio::null())
        .output()
        .expect("run helper-spawn child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        vec![
            "missing: NotFound",
            "true: spawned 20",
            "no child left",
            "helper exited 0"
        ],
        "{stderr}"
    );
    assert!(out.status.success(), "{stdout} {stderr}");
}

fn canary_secret_reaches_the_broker_environ_only() {
    for role in [Role::Broker, Role::Model, Role::Tools] {
        let ws = tempfile::tempdir().expect("tempdir");
        let w = Worker::start(role, Some(ws.path()), parent_env());
        let environ = procfs::read_environ(w.pid()).expect("environ");
        let canary = environ
            .iter()
            .any(|(k, v)| k == "CANARY_API_KEY" && v == "sk-canary-7f3a");
        assert_eq!(canary, role == Role::Broker, "{role}: {environ:?}");
        assert!(environ.iter().all(|(k, _)| k != "HOME"), "{role}");
        w.finish();
    }
}

fn confine_refuses_a_multi_threaded_process() {
    let out = Command::new(this_exe())
        .args([CHILD_FLAG, "threads"])
        .stderr(Stdio::inherit())
        .output()
        .expect("run threads child");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.trim(), "NotSingleThreaded 2");
    assert!(out.status.success());
}

fn socketpair() -> (UnixStream, UnixStream) {
    UnixStream::pair().expect("socketpair")
}

/// Spawns `--sandbox-child inspect FDS…` through `configure_command` and returns its report.
fn inspect(fds: Vec<(RawFd, RawFd)>, parent_pid: i32) -> (Child, Vec<String>) {
    let profile = profile_for(Role::Model, &ctx(None));
    let mut setup = worker_setup(&profile, fds.clone());
    setup.parent_pid = parent_pid;
    let mut cmd = Command::new(this_exe());
    cmd.arg(CHILD_FLAG).arg("inspect");
    for (_, target) in &fds {
        cmd.arg(target.to_string());
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    configure_command(&mut cmd, setup);
    let mut child = cmd.spawn().expect("spawn inspect child");
    let mut text = String::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut text)
        .expect("read report");
    (child, text.lines().map(str::to_string).collect())
}

fn value<'a>(report: &'a [String], key: &str) -> &'a str {
    report
        .iter()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in {report:?}"))
}

fn spawned_child_gets_session_fds_rlimits_pdeathsig_nnp() {
    let (ours3, theirs3) = socketpair();
    let (ours4, theirs4) = socketpair();
    // A descriptor leaked without close-on-exec must not reach the child.
    // SAFETY: dup of an open fd; the copy is owned (and closed) by `leak`.
    let leak = unsafe { OwnedFd::from_raw_fd(libc::dup(ours3.as_raw_fd())) };
    let (mut child, report) = inspect(
        vec![(theirs3.as_raw_fd(), 3), (theirs4.as_raw_fd(), 4)],
        hanzo_sandbox::own_pid(),
    );
    let status = child.wait().expect("wait");
    assert!(status.success(), "{status:?} {report:?}");
    assert_eq!(value(&report, "sid"), value(&report, "pid"), "new session");
    assert_eq!(value(&report, "pdeathsig"), libc::SIGKILL.to_string());
    assert_eq!(value(&report, "open_fds"), "0,1,2,3,4");
    assert_eq!(value(&report, "sockets"), "3,4");
    assert_eq!(value(&report, "core"), "0,0");
    assert_eq!(value(&report, "nofile"), "1024,1024");
    assert_eq!(value(&report, "no_new_privs"), "1");
    assert_eq!(value(&report, "adopted_cloexec"), "3,4");
    // fd 3 and 4 are the sockets we passed, in that order.
    for (mut ours, expected) in [(&ours3, "fd 3"), (&ours4, "fd 4")] {
        let mut buf = [0u8; 4];
        ours.read_exact(&mut buf).expect("read from child");
        assert_eq!(&buf, expected.as_bytes());
    }
    drop(leak);
}

fn fd_passed_at_its_own_number_survives_exec() {
    let (ours, theirs) = socketpair();
    // A close-on-exec copy at a number ≥ 60, passed to the same number: the hook must clear the
    // flag although source == target.
    // SAFETY: F_DUPFD_CLOEXEC of an open fd; the copy is owned by `same`.
    let same =
        unsafe { OwnedFd::from_raw_fd(libc::fcntl(theirs.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 60)) };
    let n = same.as_raw_fd();
    let (mut child, report) = inspect(vec![(n, n)], hanzo_sandbox::own_pid());
    assert!(child.wait().expect("wait").success(), "{report:?}");
    assert_eq!(value(&report, "sockets"), n.to_string());
    assert_eq!(value(&report, "open_fds"), format!("0,1,2,{n}"));
    let mut buf = [0u8; 5];
    (&ours).read_exact(&mut buf).expect("read from child");
    assert_eq!(&buf, format!("fd {n}").as_bytes()[..5].as_ref());
}

fn child_of_a_dead_parent_exits_before_exec() {
    // A parent pid that is not ours stands for "the parent died and we were re-parented".
    let (mut child, report) = inspect(Vec::new(), i32::MAX);
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(PARENT_DIED_EXIT_CODE), "{report:?}");
    assert!(
        report.is_empty(),
        "the child must not reach exec: {report:?}"
    );
}

fn child_dies_with_its_spawning_thread() {
    let spawner = std::thread::spawn(|| {
        let profile = profile_for(Role::Model, &ctx(None));
        let mut cmd = Command::new(this_exe());
        cmd.args([CHILD_FLAG, "sleep"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        configure_command(&mut cmd, worker_setup(&profile, Vec::new()));
        // The main thread reaps it with waitpid once this thread has ended.
        #[allow(clippy::zombie_processes)]
        let mut child = cmd.spawn().expect("spawn sleeper");
        // Wait until it has exec'd (so the parent-death signal is set) before this thread ends.
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read ready");
        assert_eq!(line.trim(), "ready");
        libc::pid_t::try_from(child.id()).expect("a pid fits pid_t")
    });
    let pid = spawner.join().expect("spawner thread");
    let mut status = 0;
    let mut reaped = false;
    // Bounded wait so a failure cannot hang the suite.
    for _ in 0..200 {
        // SAFETY: reaping our own child, writing into our local.
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
            reaped = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if !reaped {
        // SAFETY: killing and reaping our own child so the suite does not leak it.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, &mut status, 0);
        }
        panic!("the child outlived the thread that spawned it");
    }
    let status = std::process::ExitStatus::from_raw(status);
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
}

fn adopt_inherited_fd_sets_cloexec_and_wants_a_socket() {
    let (_a, b) = socketpair();
    // SAFETY: F_DUPFD of an open fd, without close-on-exec; adopt takes ownership of the copy.
    let raw = unsafe { libc::fcntl(b.as_raw_fd(), libc::F_DUPFD, 0) };
    let owned = adopt_inherited_fd(raw).expect("adopt socket");
    // SAFETY: F_GETFD on an fd we own.
    let flags = unsafe { libc::fcntl(owned.as_raw_fd(), libc::F_GETFD) };
    assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);

    let file = std::fs::File::open("/dev/null").expect("open /dev/null");
    // SAFETY: F_DUPFD of an open fd; adopt takes ownership of the copy (and closes it on error).
    let raw = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_DUPFD, 0) };
    let err = adopt_inherited_fd(raw).expect_err("not a socket");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    // SAFETY: F_GETFD only checks that the rejected fd was closed, not leaked.
    assert_eq!(unsafe { libc::fcntl(raw, libc::F_GETFD) }, -1);

    assert!(adopt_inherited_fd(9999).is_err(), "a closed fd is an error");
}

fn doctor_reports_this_kernel() {
    let r = doctor::probe_kernel();
    assert!(r.landlock_abi >= 1, "{r:?}");
    assert!(r.seccomp, "{r:?}");
    assert_eq!(r.user_namespaces, Ok(()), "{r:?}");
    assert_eq!(r.tier_a(), Ok(()));
    assert_eq!(r.tier_b(), Ok(()));
}

// ---------------------------------------------------------------------------------------------
// Child side: runs in the re-exec'd process.

mod child {
    use super::*;

    pub fn run(args: &[String]) -> i32 {
        match args.first().map(String::as_str) {
            Some("confine") => confine(&args[1..]),
            Some("threads") => threads(),
            Some("reaper") => reaper(),
            // For timing the cost of `confine` against a process that does nothing.
            Some("noop") => 0,
            Some("inspect") => inspect(&args[1..]),
            Some("helper-panic") => helper_panic(),
            Some("helper-spawn") => helper_spawn(),
            Some("sleep") => {
                println!("ready");
                loop {
                    // SAFETY: pause only waits for a signal.
                    unsafe { libc::pause() };
                }
            }
            other => {
                eprintln!("unknown child mode {other:?}");
                2
            }
        }
    }

    fn confine(args: &[String]) -> i32 {
        let role = args
            .first()
            .and_then(|r| Role::parse(r))
            .expect("role argument");
        let workspace = args.get(1).map(PathBuf::from);
        let profile = profile_for(role, &ctx(workspace.as_deref()));
        match confine_current_process(&profile) {
            Ok(att) => println!("ATT {}", serde_json::to_string(&att).expect("json")),
            Err(e) => {
                println!("ERR {e}");
                return 3;
            }
        }
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let line = line.expect("read request");
            let answer = if let Some(json) = line.strip_prefix("probe ") {
                let p: Probe = serde_json::from_str(json).expect("probe json");
                serde_json::to_string(&probe::run_probe(&p)).expect("json")
            } else if let Some(path) = line.strip_prefix("exec ") {
                // In a forked child (an exec outside the allow-list stops that one, not us).
                let path = std::ffi::CString::new(path).expect("path");
                // SAFETY: the child only execs or _exits.
                match unsafe { libc::fork() } {
                    0 => {
                        let argv = [path.as_ptr(), std::ptr::null()];
                        // SAFETY: a NUL-terminated path and argv, valid until the call.
                        unsafe { libc::execv(path.as_ptr(), argv.as_ptr()) };
                        // SAFETY: leave the child.
                        unsafe { libc::_exit(126) }
                    }
                    pid if pid > 0 => {
                        let mut status = 0;
                        // SAFETY: reaping our own child.
                        unsafe { libc::waitpid(pid, &mut status, 0) };
                        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
                            "ok".to_string()
                        } else if libc::WIFEXITED(status) {
                            format!("exit {}", libc::WEXITSTATUS(status))
                        } else {
                            format!("signal {}", libc::WTERMSIG(status))
                        }
                    }
                    _ => format!("error {}", std::io::Error::last_os_error()),
                }
            } else if line == "forbidden" {
                // acct(NULL): on every deny list, so outside every allow-list.
                // SAFETY: acct with a null path only asks to turn accounting off.
                unsafe { libc::syscall(libc::SYS_acct, std::ptr::null::<libc::c_char>()) };
                "survived".to_string()
            } else if line == "thread" {
                match std::thread::Builder::new().spawn(|| 7).map(|t| t.join()) {
                    Ok(Ok(7)) => "ok".to_string(),
                    Ok(_) => "thread panicked".to_string(),
                    Err(e) => format!("error {e}"),
                }
            } else if line == "int80" {
                int80()
            } else if line == "fork" {
                // SAFETY: the child only _exits.
                match unsafe { libc::fork() } {
                    // SAFETY: in the forked child: leave at once.
                    0 => unsafe { libc::_exit(0) },
                    pid if pid > 0 => {
                        let mut status = 0;
                        // SAFETY: reaping our own child.
                        unsafe { libc::waitpid(pid, &mut status, 0) };
                        "ok".to_string()
                    }
                    _ => format!("error {}", std::io::Error::last_os_error()),
                }
            } else {
                format!("unknown request {line:?}")
            };
            println!("{answer}");
        }
        0
    }

    /// Makes an i386 `getpid` (int 0x80, eax 20) in a forked child and reports how it ended.
    #[cfg(target_arch = "x86_64")]
    fn int80() -> String {
        // SAFETY: the child makes one raw syscall and _exits.
        match unsafe { libc::fork() } {
            0 => {
                let mut eax: u32 = 20;
                // SAFETY: int 0x80 with eax = 20 is getpid in the i386 ABI: no memory is touched.
                unsafe { std::arch::asm!("int 0x80", inout("eax") eax => eax) };
                let _ = eax;
                // SAFETY: leave the child.
                unsafe { libc::_exit(0) }
            }
            pid if pid > 0 => {
                let mut status = 0;
                // SAFETY: reaping our own child.
                unsafe { libc::waitpid(pid, &mut status, 0) };
                if libc::WIFSIGNALED(status) {
                    format!("signal {}", libc::WTERMSIG(status))
                } else {
                    format!("exit {}", libc::WEXITSTATUS(status))
                }
            }
            _ => format!("error {}", std::io::Error::last_os_error()),
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn int80() -> String {
        "not x86_64".to_string()
    }

    /// Confine as tier B's reaper, reap a child, then try to open a file (which must stop us).
    fn reaper() -> i32 {
        // SAFETY: the child only _exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: leave the child with a status to reap.
            unsafe { libc::_exit(7) }
        }
        if let Err(e) = hanzo_sandbox::confine::confine_reaper(Role::Tools) {
            println!("ERR {e}");
            return 3;
        }
        let mut status = 0;
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        let line: &[u8] = if libc::WEXITSTATUS(status) == 7 {
            b"reaped 7\n"
        } else {
            b"reaped something else\n"
        };
        // SAFETY: write of a static buffer to stdout (println! would lock and allocate).
        unsafe { libc::write(1, line.as_ptr().cast(), line.len()) };
        // SAFETY: a NUL-terminated literal; the call must not return.
        unsafe { libc::open(c"/etc/hostname".as_ptr(), libc::O_RDONLY) };
        0
    }

    /// Fork a helper (from this single-threaded process) while this frame owns a pipe, wait
    /// for it and print its exit code.
    fn run_helper(auto_reap: bool, body: impl FnOnce() -> i32) -> i32 {
        let (read, write) = std::io::pipe().expect("pipe");
        let pid = hanzo_sandbox::fdpass::fork_helper_keeping(&[], auto_reap, body)
            .expect("fork the helper");
        let mut status = 0;
        // SAFETY: waiting for our own child, into our local.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        let code = if r == pid && libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status).to_string()
        } else {
            format!("abnormally (wait status {status})")
        };
        println!("helper exited {code}");
        // Ours, open here: the helper's copies were its to close, not these.
        drop((read, write));
        0
    }

    fn helper_panic() -> i32 {
        run_helper(false, || panic!("the helper's body panics"))
    }

    fn helper_spawn() -> i32 {
        use hanzo_sandbox::fdpass::with_sigchld_default;
        use std::os::unix::process::CommandExt;
        // A pre-exec hook, as every spawn of the launcher has (`spawn::configure`): std then
        // forks and execs itself (without one it uses posix_spawn, which waits for nothing).
        let forked = |program: &str| {
            let mut cmd = Command::new(program);
            // SAFETY: the hook does nothing.
            unsafe { cmd.pre_exec(|| Ok(())) };
            cmd
        };
        run_helper(true, || {
            let missing = with_sigchld_default(|| forked("/nonexistent/hanzo-program").spawn());
            match missing {
                Err(e) => println!("missing: {:?}", e.kind()),
                Ok(_) => println!("missing: spawned"),
            }
            // Children that exit at once, dropped unwaited (as the launcher drops its keepers):
            // some end while SIGCHLD is at its default, the rest after automatic reaping is back.
            let mut spawned = 0;
            for _ in 0..20 {
                if with_sigchld_default(|| forked("/bin/true").spawn()).is_ok() {
                    spawned += 1;
                }
            }
            println!("true: spawned {spawned}");
            // No zombie ever: looked at without reaping (WNOWAIT), until no child is left at
            // all (ECHILD). Bounded.
            let mut verdict = "children still running";
            for _ in 0..2000 {
                // SAFETY: an all-zero siginfo is valid; waitid writes into it.
                let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
                // SAFETY: waitid writes into our siginfo; WNOWAIT leaves any child as it is.
                let r = unsafe {
                    libc::waitid(
                        libc::P_ALL,
                        0,
                        &mut info,
                        libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
                    )
                };
                if r < 0 {
                    verdict = "no child left";
                    break;
                }
                // SAFETY: waitid filled the siginfo (si_pid 0: none has ended yet).
                if unsafe { info.si_pid() } != 0 {
                    verdict = "a zombie was left";
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            println!("{verdict}");
            0
        })
    }

    fn threads() -> i32 {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            let _ = rx.recv();
        });
        let profile = profile_for(Role::Model, &ctx(None));
        let result = confine_current_process(&profile);
        drop(tx);
        let _ = t.join();
        match result {
            Err(ConfineError::NotSingleThreaded { threads }) => {
                println!("NotSingleThreaded {threads}");
                0
            }
            Err(e) => {
                println!("other error: {e}");
                1
            }
            Ok(_) => {
                println!("confined a multi-threaded process");
                1
            }
        }
    }

    /// Reports what the pre-exec hook set up. Scans fds first, before std opens anything.
    fn inspect(targets: &[String]) -> i32 {
        let open: Vec<String> = (0..1024)
            // SAFETY: F_GETFD on an integer only reports whether it is open.
            .filter(|&fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0)
            .map(|fd: RawFd| fd.to_string())
            .collect();
        let targets: Vec<RawFd> = targets.iter().map(|t| t.parse().expect("fd")).collect();
        let sockets: Vec<String> = targets
            .iter()
            .filter(|&&fd| {
                // SAFETY: fstat into a zeroed buffer we own.
                let mut st: libc::stat = unsafe { std::mem::zeroed() };
                // SAFETY: as above.
                let r = unsafe { libc::fstat(fd, &mut st) };
                r == 0 && st.st_mode & libc::S_IFMT == libc::S_IFSOCK
            })
            .map(|fd| fd.to_string())
            .collect();
        let limit = |res| {
            let mut l = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: getrlimit writes into our local.
            unsafe { libc::getrlimit(res, &mut l) };
            format!("{},{}", l.rlim_cur, l.rlim_max)
        };
        let mut pdeathsig: libc::c_int = 0;
        // SAFETY: PR_GET_PDEATHSIG writes one int to the pointer we pass.
        unsafe { libc::prctl(libc::PR_GET_PDEATHSIG, &mut pdeathsig as *mut libc::c_int) };
        // SAFETY: the getters take no pointers.
        let (sid, pid, nnp) = unsafe {
            (
                libc::getsid(0),
                libc::getpid(),
                libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0),
            )
        };
        let mut adopted = Vec::new();
        for &fd in &targets {
            if let Ok(owned) = adopt_inherited_fd(fd) {
                // SAFETY: F_GETFD on an fd we own.
                if unsafe { libc::fcntl(owned.as_raw_fd(), libc::F_GETFD) } & libc::FD_CLOEXEC != 0
                {
                    adopted.push(fd.to_string());
                }
                let mut stream = UnixStream::from(owned);
                let _ = stream.write_all(format!("fd {fd}").as_bytes());
            }
        }
        println!("open_fds={}", open.join(","));
        println!("sockets={}", sockets.join(","));
        println!("sid={sid}");
        println!("pid={pid}");
        println!("pdeathsig={pdeathsig}");
        println!("core={}", limit(libc::RLIMIT_CORE));
        println!("nofile={}", limit(libc::RLIMIT_NOFILE));
        println!("no_new_privs={nnp}");
        println!("adopted_cloexec={}", adopted.join(","));
        0
    }
}
