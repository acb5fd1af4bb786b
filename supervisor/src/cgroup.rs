//! A pids cgroup per worker process tree, where the host offers one: `pids.max` bounds the worker
//! and everything it runs (a fork bomb stops there — `RLIMIT_NPROC` cannot, because the kernel
//! exempts uid 0 from it), and when the worker ends every process left in the group is killed,
//! including any that left its process group with `setsid`.
//!
//! The worker joins the group itself, first thing after exec, through the group's `cgroup.procs`
//! file passed as fd 5 (`hanzo_sandbox::confine::join_inherited_cgroup`), so that nothing it forks
//! can be created outside it.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The fd number the `cgroup.procs` file is passed as.
pub const CGROUP_FD: i32 = 5;

/// Where pids cgroups can be made: the v1 `pids` hierarchy. (A v2-only host needs the pids
/// controller delegated to us; not handled yet — the worker then runs without the cgroup and
/// `doctor` says so.)
const V1_PIDS_ROOT: &str = "/sys/fs/cgroup/pids";

/// One worker's pids cgroup. Dropping it kills what is left in it and removes it.
#[derive(Debug)]
pub struct PidsCgroup {
    dir: PathBuf,
}

impl PidsCgroup {
    /// Create `name` under the pids hierarchy with `pids.max = max`.
    pub fn create(name: &str, max: u64) -> io::Result<PidsCgroup> {
        let root = Path::new(V1_PIDS_ROOT);
        if !root.join("cgroup.procs").exists() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "no writable pids cgroup hierarchy at /sys/fs/cgroup/pids",
            ));
        }
        // Nest under the cgroup we are in, so a delegated subtree is respected.
        let own = own_v1_pids_path().unwrap_or_default();
        let parent = root.join(own.trim_start_matches('/'));
        sweep_stale(&parent);
        let dir = parent.join(name);
        fs::create_dir(&dir)?;
        let cg = PidsCgroup { dir };
        fs::write(cg.dir.join("pids.max"), max.to_string())?;
        Ok(cg)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The `cgroup.procs` file, opened for the worker to join with.
    pub fn procs_file(&self) -> io::Result<fs::File> {
        fs::OpenOptions::new()
            .write(true)
            .open(self.dir.join("cgroup.procs"))
    }

    /// Processes now in the group.
    pub fn pids(&self) -> Vec<u32> {
        fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// How many forks the limit refused so far (`pids.events`: `max N`).
    pub fn refused_forks(&self) -> u64 {
        fs::read_to_string(self.dir.join("pids.events"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("max "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }

    /// SIGKILL everything in the group until it is empty. Blocking (it waits for the kernel to
    /// remove the dead between rounds), bounded to 50 rounds of 10 ms.
    pub fn kill_all(&self) {
        for _ in 0..50 {
            let pids = self.pids();
            if pids.is_empty() {
                return;
            }
            for pid in pids {
                if let Ok(pid) = i32::try_from(pid) {
                    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for PidsCgroup {
    fn drop(&mut self) {
        self.kill_all();
        let _ = fs::remove_dir(&self.dir);
    }
}

/// Remove the groups of supervisors that died without cleaning up (`kill -9`): their names carry
/// the supervisor's pid. Their processes died with the supervisor; anything left is killed.
fn sweep_stale(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("hanzo-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            drop(PidsCgroup { dir: entry.path() });
        }
    }
}

/// This process's path in the v1 pids hierarchy (from `/proc/self/cgroup`).
fn own_v1_pids_path() -> Option<String> {
    fs::read_to_string("/proc/self/cgroup")
        .ok()?
        .lines()
        .find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers
                .split(',')
                .any(|c| c == "pids")
                .then(|| path.to_string())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_removes_only_groups_of_dead_supervisors() {
        let parent = tempfile::tempdir().expect("tmp");
        let dead = parent.path().join("hanzo-4194303999-tools-1");
        let live = parent
            .path()
            .join(format!("hanzo-{}-tools-1", std::process::id()));
        let other = parent.path().join("someone-else");
        for d in [&dead, &live, &other] {
            fs::create_dir(d).expect("mkdir");
        }
        sweep_stale(parent.path());
        assert!(!dead.exists());
        assert!(live.exists());
        assert!(other.exists());
    }
}
