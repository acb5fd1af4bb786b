//! Resource limits of commands.
//!
//! Open files, file size and core dumps are set in each command's pre-exec step (the profile's
//! `Rlimits`). The number of processes and the address space are set on the tools worker itself
//! (hard and soft, before confinement), so every command inherits them and none can raise them.
//!
//! `RLIMIT_NPROC` counts every process of the user, and the kernel does not apply it to uid 0 in
//! the initial user namespace; a fork bomb is bounded by the tree's pids cgroup
//! (`hanzo_sandbox::cgroup`, from the profile's `CgroupLimits`), and its memory by the memory
//! cgroup beside it.

use hanzo_policy::profile::{
    CgroupLimits, Rlimits, PRIVATE_TMP_SIZE, TOOLS_MAX_MEMORY, TOOLS_MAX_PIDS,
};
use nix::sys::resource::{getrlimit, setrlimit, Resource};

/// The resource limits a command runs under, as this worker applies them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most open file descriptors per command (`RLIMIT_NOFILE`).
    pub open_files: u64,
    /// Largest file a command may write, bytes.
    pub file_size: Option<u64>,
    /// Processes of the user (`RLIMIT_NPROC`).
    pub processes: Option<u64>,
    /// Virtual memory per process, bytes (`RLIMIT_AS`).
    pub address_space: Option<u64>,
    /// The tree's cgroup bounds (the one-shot sandbox makes its own group; a worker's comes
    /// from its profile).
    pub cgroup: CgroupLimits,
    /// Size of tier B's private `/tmp` (and `/var/tmp`, `/dev/shm`), bytes.
    pub tmp_size: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            open_files: 1024,
            file_size: Some(4 << 30),
            processes: Some(4096),
            address_space: Some(8 << 30),
            cgroup: CgroupLimits {
                max_pids: Some(TOOLS_MAX_PIDS),
                max_memory: Some(TOOLS_MAX_MEMORY),
            },
            tmp_size: PRIVATE_TMP_SIZE,
        }
    }
}

impl Limits {
    /// The limits set in each command's pre-exec step.
    pub fn command_rlimits(&self) -> Rlimits {
        Rlimits {
            core: 0,
            nofile: self.open_files,
            fsize: self.file_size,
        }
    }

    /// Lower this process's process-count and address-space limits (soft and hard), so that
    /// everything it starts inherits them. A limit is never raised.
    pub fn apply_process_wide(&self) -> nix::Result<()> {
        let lower = |res: Resource, want: Option<u64>| -> nix::Result<()> {
            let Some(want) = want else { return Ok(()) };
            let (_, hard) = getrlimit(res)?;
            let v = want.min(hard);
            setrlimit(res, v, v)
        };
        lower(Resource::RLIMIT_NPROC, self.processes)?;
        lower(Resource::RLIMIT_AS, self.address_space)
    }
}
