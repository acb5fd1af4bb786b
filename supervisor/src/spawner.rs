//! Worker processes are spawned from one long-lived thread.
//!
//! The parent-death signal a child sets with `PR_SET_PDEATHSIG` fires when the *thread* that forked
//! it exits, not the process. Tokio's blocking threads come and go, so forking from them would kill
//! workers at random; this thread lives as long as the supervisor.

use hanzo_sandbox::spawn::{configure_command, ChildSetup};
use hanzo_worker::WorkerOptions;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::mpsc as std_mpsc;
use tokio::sync::oneshot;

/// What one worker process is started with.
pub struct SpawnRequest {
    /// The worker's role, sandbox profile context and isolation, written on its command line after
    /// the hidden `__worker` entry.
    pub opts: WorkerOptions,
    /// The complete environment (already filtered by the role's allow-list).
    pub env: Vec<(String, String)>,
    /// The worker's end of its channel; becomes fd 3.
    pub channel: OwnedFd,
    /// The worker's ends of its direct channels to peer workers, each with the fd number it
    /// becomes (the role table's, [`hanzo_ipc::role::CHANNEL_ENDS`]).
    pub direct: Vec<(OwnedFd, i32)>,
    /// The worker's end of the egress control socket (broker or tools, in a run that allows
    /// network for commands); becomes the role table's number for the role's end.
    pub egress: Option<OwnedFd>,
    /// The `cgroup.procs` files of the worker's cgroup (one per hierarchy), which the child joins
    /// in its pre-exec step, before the worker runs an instruction of its own.
    pub cgroup: Vec<std::fs::File>,
    /// Resource limits the child sets with `setrlimit` before exec (core dumps off, open files,
    /// file size).
    pub rlimits: hanzo_policy::profile::Rlimits,
}

struct Job {
    req: SpawnRequest,
    reply: oneshot::Sender<std::io::Result<tokio::process::Child>>,
}

/// Handle to the spawner thread. Cloning shares the thread.
#[derive(Clone)]
pub struct Spawner {
    tx: std_mpsc::Sender<Job>,
}

impl Spawner {
    /// Start the thread. `exe` is the binary to re-exec (normally `/proc/self/exe`'s target).
    pub fn start(exe: PathBuf, runtime: tokio::runtime::Handle) -> std::io::Result<Spawner> {
        let (tx, rx) = std_mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("hanzo-spawner".into())
            .spawn(move || {
                // Entering the runtime lets tokio register the child for async `wait`.
                let _guard = runtime.enter();
                while let Ok(job) = rx.recv() {
                    let _ = job.reply.send(spawn_one(&exe, job.req));
                }
            })?;
        Ok(Spawner { tx })
    }

    /// Spawn a worker. Fails if the thread is gone or the exec fails.
    pub async fn spawn(&self, req: SpawnRequest) -> std::io::Result<tokio::process::Child> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Job { req, reply })
            .map_err(|_| std::io::Error::other("the spawner thread has stopped"))?;
        rx.await
            .map_err(|_| std::io::Error::other("the spawner thread dropped the request"))?
    }
}

fn spawn_one(exe: &PathBuf, req: SpawnRequest) -> std::io::Result<tokio::process::Child> {
    use hanzo_ipc::role::Channel::ToolsEgress;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg0(format!("hanzo-dev[{}]", req.opts.role))
        .arg("__worker")
        .args(req.opts.to_args())
        .env_clear()
        .envs(req.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .current_dir("/");
    configure_command(
        &mut cmd,
        ChildSetup {
            fds: std::iter::once((req.channel.as_raw_fd(), hanzo_ipc::transport::SUPERVISOR_FD))
                .chain(req.direct.iter().map(|(d, fd)| (d.as_raw_fd(), *fd)))
                .chain(req.egress.as_ref().and_then(|d| {
                    let fd = hanzo_ipc::role::fd_of(ToolsEgress, req.opts.role)?;
                    Some((d.as_raw_fd(), fd))
                }))
                .collect(),
            rlimits: req.rlimits,
            parent_pid: hanzo_sandbox::own_pid(),
            new_session: true,
            join_cgroups: req.cgroup.iter().map(|f| f.as_raw_fd()).collect(),
        },
    );
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    let child = cmd.spawn();
    // The child holds its own copy now; ours must close so EOF reaches the supervisor when the
    // worker dies.
    drop(req.channel);
    drop(req.direct);
    drop(req.egress);
    drop(req.cgroup);
    child
}

use std::os::unix::process::CommandExt;
