//! A cgroup per sandboxed process tree (a tools worker, a one-shot command), where the host
//! offers one: `pids.max` bounds how many processes the tree has at once (a fork bomb stops
//! there — `RLIMIT_NPROC` cannot, because the kernel exempts uid 0 from it), `memory.max` with
//! swap off bounds its memory (tier B's private `/tmp` included: tmpfs pages are charged to the
//! tree), and when the tree's owner drops the group every process left in it is killed —
//! including any that left its process group or session.
//!
//! The process joins in its pre-exec step (`hanzo_sandbox::spawn::ChildSetup::join_cgroups`:
//! the join files are opened by the parent and written by the single-threaded child, see
//! [`Cgroup::join_files`]), so nothing it forks can be created outside.
//!
//! Both hierarchies are handled:
//!
//! - **cgroup v2** (one unified tree): a `hanzo` directory is made under the v2 root with the
//!   `pids` and `memory` controllers delegated to it (`+pids +memory` in the root's and its own
//!   `cgroup.subtree_control`: the no-internal-processes rule forbids enabling them in the
//!   cgroup we run in, which has processes), or, when the root is not ours to write (an
//!   unprivileged user under systemd), a sibling of our own cgroup whose parent already
//!   delegates both controllers. Kill is `cgroup.kill`.
//! - **cgroup v1** (a hierarchy per controller, as on this project's CI machine): a group in the
//!   `pids` hierarchy and one in the `memory` hierarchy (`memory.limit_in_bytes`, and
//!   `memory.memsw.limit_in_bytes` equal to it so no swap is used), each nested under the cgroup
//!   we are in there. Kill is `SIGKILL` to each listed process until the group is empty.
//!
//! [`probe`] says which is used and why a bound is absent (`doctor` reports it).

use hanzo_policy::profile::CgroupLimits;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Which cgroup hierarchy a group was made in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Version {
    /// The v1 hierarchy: one mount per controller.
    V1,
    /// The unified v2 hierarchy.
    V2,
}

/// Where the host's cgroup hierarchies are mounted (from `/proc/self/mountinfo`) and where this
/// process sits in each (from `/proc/self/cgroup`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Hierarchies {
    /// The v2 mount and our path in it.
    pub v2: Option<(PathBuf, String)>,
    /// Controllers the v2 root offers (`cgroup.controllers`).
    pub v2_controllers: Vec<String>,
    /// The v1 `pids` mount and our path in it.
    pub v1_pids: Option<(PathBuf, String)>,
    /// The v1 `memory` mount and our path in it.
    pub v1_memory: Option<(PathBuf, String)>,
}

impl Hierarchies {
    /// Read from this process's `/proc/self/mountinfo` and `/proc/self/cgroup`.
    pub fn current() -> Hierarchies {
        let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let cgroup = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let mut h = Hierarchies::parse(&mountinfo, &cgroup);
        if let Some((root, _)) = &h.v2 {
            h.v2_controllers = fs::read_to_string(root.join("cgroup.controllers"))
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_string)
                .collect();
        }
        h
    }

    /// The mount points and our paths, from the text of `mountinfo` and `/proc/self/cgroup`.
    pub fn parse(mountinfo: &str, cgroup: &str) -> Hierarchies {
        let mut v2_mount = None;
        let mut pids_mount = None;
        let mut memory_mount = None;
        for line in mountinfo.lines() {
            // `36 35 98:0 /root /mnt rw,noatime master:1 - cgroup cgroup rw,pids`
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let mount_point = left.split_whitespace().nth(4).map(PathBuf::from);
            let mut r = right.split_whitespace();
            let (fstype, _source, options) = (r.next(), r.next(), r.next().unwrap_or(""));
            match (fstype, mount_point) {
                (Some("cgroup2"), Some(mp)) if v2_mount.is_none() => v2_mount = Some(mp),
                (Some("cgroup"), Some(mp)) => {
                    let opts: Vec<&str> = options.split(',').collect();
                    if opts.contains(&"pids") && pids_mount.is_none() {
                        pids_mount = Some(mp.clone());
                    }
                    if opts.contains(&"memory") && memory_mount.is_none() {
                        memory_mount = Some(mp);
                    }
                }
                _ => {}
            }
        }
        let mut v2_path = None;
        let mut pids_path = None;
        let mut memory_path = None;
        for line in cgroup.lines() {
            let mut parts = line.splitn(3, ':');
            let (Some(id), Some(controllers), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            if id == "0" && controllers.is_empty() {
                v2_path = Some(path.to_string());
            }
            for c in controllers.split(',') {
                match c {
                    "pids" => pids_path = Some(path.to_string()),
                    "memory" => memory_path = Some(path.to_string()),
                    _ => {}
                }
            }
        }
        Hierarchies {
            v2: v2_mount.map(|m| (m, v2_path.unwrap_or_else(|| "/".into()))),
            v2_controllers: Vec::new(),
            v1_pids: pids_mount.and_then(|m| pids_path.map(|p| (m, p))),
            v1_memory: memory_mount.and_then(|m| memory_path.map(|p| (m, p))),
        }
    }

    /// Whether the v2 tree carries the controllers (else they are bound to v1 hierarchies: a
    /// "hybrid" host).
    fn v2_has(&self, controller: &str) -> bool {
        self.v2_controllers.iter().any(|c| c == controller)
    }
}

fn join(mount: &Path, path: &str) -> PathBuf {
    mount.join(path.trim_start_matches('/'))
}

/// What the host offers for a tree's bounds, for `doctor`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Support {
    /// The hierarchy that would be used, if any.
    pub version: Option<Version>,
    /// Where process-count groups go, or why there are none.
    #[serde(serialize_with = "bound")]
    pub pids: Result<PathBuf, String>,
    /// Where memory groups go, or why there are none.
    #[serde(serialize_with = "bound")]
    pub memory: Result<PathBuf, String>,
}

/// `Ok(dir)` → `{"available": true, "path": dir}`; `Err(why)` → `{"available": false,
/// "reason": why}` (the shape of every availability in `doctor --json`).
fn bound<S: serde::Serializer>(v: &Result<PathBuf, String>, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(None)?;
    match v {
        Ok(dir) => {
            m.serialize_entry("available", &true)?;
            m.serialize_entry("path", dir)?;
        }
        Err(why) => {
            m.serialize_entry("available", &false)?;
            m.serialize_entry("reason", why)?;
        }
    }
    m.end()
}

/// Where groups would be made on this host, and why a bound would be absent. Makes (and
/// removes again) a probe group in each candidate place, so the answer is what creation will do.
pub fn probe() -> Support {
    let h = Hierarchies::current();
    let name = format!("hanzo-probe-{}", std::process::id());
    match Cgroup::create_in(
        &h,
        &name,
        CgroupLimits {
            max_pids: Some(64),
            max_memory: Some(64 << 20),
        },
    ) {
        Ok(cg) => Support {
            version: Some(cg.version),
            pids: cg
                .pids_dir()
                .map(Path::to_path_buf)
                .ok_or_else(|| cg.absent_pids.clone().unwrap_or_default()),
            memory: cg
                .memory_dir()
                .map(Path::to_path_buf)
                .ok_or_else(|| cg.absent_memory.clone().unwrap_or_default()),
        },
        Err(e) => Support {
            version: None,
            pids: Err(e.to_string()),
            memory: Err(e.to_string()),
        },
    }
}

/// Why a bounding cgroup could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// No writable hierarchy with the needed controller (the reason says what was tried).
    #[error("no cgroup hierarchy offers a pids or memory controller here ({0})")]
    Unsupported(String),
    /// The group's directory could not be made.
    #[error("creating {path}: {source}")]
    Create {
        /// The directory.
        path: PathBuf,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
    /// A limit file could not be written.
    #[error("setting {path}: {source}")]
    Limit {
        /// The file (`pids.max`, `memory.max`, …).
        path: PathBuf,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
}

/// One tree's cgroup (one directory on v2; one per controller on v1). Dropping it kills what is
/// left in it and removes it.
#[derive(Debug)]
pub struct Cgroup {
    version: Version,
    /// Every directory made, most specific last; on v2 one.
    dirs: Vec<PathBuf>,
    pids: Option<PathBuf>,
    memory: Option<PathBuf>,
    absent_pids: Option<String>,
    absent_memory: Option<String>,
}

impl Cgroup {
    /// Create `name` with `limits` (see the module documentation for where). Groups left by
    /// processes that died without removing theirs (`kill -9`) — named `hanzo-<pid>-…` or
    /// `hanzo-sandbox-<pid>-…` after their maker — are removed first.
    pub fn create(name: &str, limits: CgroupLimits) -> Result<Cgroup, CgroupError> {
        Cgroup::create_in(&Hierarchies::current(), name, limits)
    }

    fn create_in(h: &Hierarchies, name: &str, limits: CgroupLimits) -> Result<Cgroup, CgroupError> {
        if let Some((root, own)) = &h.v2 {
            if h.v2_has("pids") || h.v2_has("memory") {
                match create_v2(root, own, name, limits, h) {
                    Ok(cg) => return Ok(cg),
                    Err(e) if h.v1_pids.is_none() && h.v1_memory.is_none() => return Err(e),
                    Err(_) => {}
                }
            }
        }
        create_v1(h, name, limits)
    }

    /// The hierarchy the group lives in.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The directory whose `pids.max` bounds the tree.
    pub fn pids_dir(&self) -> Option<&Path> {
        self.pids.as_deref()
    }

    /// The directory whose memory limit bounds the tree.
    pub fn memory_dir(&self) -> Option<&Path> {
        self.memory.as_deref()
    }

    /// Why a bound is absent although the group exists (a controller the host lacks).
    pub fn absent(&self) -> Vec<String> {
        self.absent_pids
            .iter()
            .chain(self.absent_memory.iter())
            .cloned()
            .collect()
    }

    /// The files the tree's first process writes `0` into to join (one per directory), opened
    /// for writing. Pass their fds as `ChildSetup::join_cgroups`; the writer must be
    /// single-threaded (a freshly forked child is), because on v1 these are the `tasks` files.
    ///
    /// Why `tasks` on v1: writing `cgroup.procs` moves a whole thread group, so the kernel takes
    /// the global `cgroup_threadgroup_rwsem` for writing, which waits for an RCU grace period —
    /// measured on this project's CI machine at 6–25 ms per join (under load) against 0.6 ms for
    /// writing the calling thread's `0` into `tasks`, which the kernel moves without that lock.
    /// For a single-threaded process the two are the same move. On v2 `cgroup.threads` cannot
    /// cross into another domain cgroup, so `cgroup.procs` it is.
    pub fn join_files(&self) -> io::Result<Vec<fs::File>> {
        let file = match self.version {
            Version::V1 => "tasks",
            Version::V2 => "cgroup.procs",
        };
        self.dirs
            .iter()
            .map(|d| fs::OpenOptions::new().write(true).open(d.join(file)))
            .collect()
    }

    /// Processes now in the group.
    pub fn pids(&self) -> Vec<u32> {
        let dir = self.pids.as_ref().or(self.dirs.first());
        dir.map(|d| read_pids(d)).unwrap_or_default()
    }

    /// SIGKILL everything in the group until it is empty. Blocking (it waits for the kernel to
    /// remove the dead between rounds), bounded to 100 rounds of 10 ms.
    pub fn kill_all(&self) {
        if self.version == Version::V2 {
            if let Some(d) = self.dirs.first() {
                // cgroup.kill (Linux 5.14) kills the whole subtree at once, forks in flight
                // included; older kernels fall back to signalling each process.
                let _ = fs::write(d.join("cgroup.kill"), "1");
            }
        }
        for _ in 0..100 {
            let mut any = false;
            for d in &self.dirs {
                for pid in read_pids(d) {
                    any = true;
                    if let Ok(pid) = i32::try_from(pid) {
                        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                    }
                }
            }
            if !any {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        self.kill_all();
        for d in self.dirs.iter().rev() {
            let _ = fs::remove_dir(d);
        }
    }
}

fn read_pids(dir: &Path) -> Vec<u32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn mkdir(path: &Path) -> Result<(), CgroupError> {
    match fs::create_dir(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(CgroupError::Create {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn write_limit(dir: &Path, file: &str, value: &str) -> Result<(), CgroupError> {
    let path = dir.join(file);
    fs::write(&path, value).map_err(|source| CgroupError::Limit { path, source })
}

/// Enable `controllers` for the children of `dir` (those `dir` offers and has not enabled yet).
fn delegate(dir: &Path, controllers: &[&str]) -> io::Result<()> {
    let offered = fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
    let enabled = fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
    let want: Vec<String> = controllers
        .iter()
        .filter(|c| offered.split_whitespace().any(|o| o == **c))
        .filter(|c| !enabled.split_whitespace().any(|e| e == **c))
        .map(|c| format!("+{c}"))
        .collect();
    if want.is_empty() {
        return Ok(());
    }
    fs::write(dir.join("cgroup.subtree_control"), want.join(" "))
}

fn create_v2(
    root: &Path,
    own: &str,
    name: &str,
    limits: CgroupLimits,
    h: &Hierarchies,
) -> Result<Cgroup, CgroupError> {
    let wanted: Vec<&str> = ["pids", "memory"]
        .into_iter()
        .filter(|c| h.v2_has(c))
        .collect();
    // 1. A `hanzo` directory under the root, with the controllers delegated to it.
    let hanzo = root.join("hanzo");
    let parent = if delegate(root, &wanted).is_ok()
        && mkdir(&hanzo).is_ok()
        && delegate(&hanzo, &wanted).is_ok()
    {
        hanzo
    } else {
        // 2. Beside our own cgroup, when its parent delegates the controllers already.
        let own_dir = join(root, own);
        let p = own_dir
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| root.to_path_buf());
        let enabled = fs::read_to_string(p.join("cgroup.subtree_control")).unwrap_or_default();
        if !wanted
            .iter()
            .all(|c| enabled.split_whitespace().any(|e| e == *c))
        {
            return Err(CgroupError::Unsupported(format!(
                "cgroup v2 at {}: cannot delegate {} to a hanzo directory under the root, and {} \
                 does not delegate them (run as root, or under a systemd user session with \
                 delegation)",
                root.display(),
                wanted.join(" and "),
                p.display()
            )));
        }
        p
    };
    sweep_stale(&parent);
    let dir = parent.join(name);
    mkdir(&dir)?;
    let mut cg = Cgroup {
        version: Version::V2,
        dirs: vec![dir.clone()],
        pids: None,
        memory: None,
        absent_pids: None,
        absent_memory: None,
    };
    let controllers = fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
    let has = |c: &str| controllers.split_whitespace().any(|x| x == c);
    if let Some(max) = limits.max_pids {
        if has("pids") {
            write_limit(&dir, "pids.max", &max.to_string())?;
            cg.pids = Some(dir.clone());
        } else {
            cg.absent_pids = Some("cgroup v2 offers no pids controller here".into());
        }
    }
    if let Some(max) = limits.max_memory {
        if has("memory") {
            write_limit(&dir, "memory.max", &max.to_string())?;
            // Absent when the kernel has no swap accounting: then there is no swap to use.
            if dir.join("memory.swap.max").exists() {
                write_limit(&dir, "memory.swap.max", "0")?;
            }
            cg.memory = Some(dir.clone());
        } else {
            cg.absent_memory = Some("cgroup v2 offers no memory controller here".into());
        }
    }
    Ok(cg)
}

fn create_v1(h: &Hierarchies, name: &str, limits: CgroupLimits) -> Result<Cgroup, CgroupError> {
    let mut cg = Cgroup {
        version: Version::V1,
        dirs: Vec::new(),
        pids: None,
        memory: None,
        absent_pids: None,
        absent_memory: None,
    };
    let mut why = Vec::new();
    if let Some(max) = limits.max_pids {
        match &h.v1_pids {
            Some((mount, own)) => {
                let parent = join(mount, own);
                sweep_stale(&parent);
                let dir = parent.join(name);
                match mkdir(&dir).and_then(|()| write_limit(&dir, "pids.max", &max.to_string())) {
                    Ok(()) => {
                        cg.dirs.push(dir.clone());
                        cg.pids = Some(dir);
                    }
                    Err(e) => {
                        let _ = fs::remove_dir(&dir);
                        cg.absent_pids = Some(format!("cgroup v1 pids: {e}"));
                    }
                }
            }
            None => cg.absent_pids = Some("no pids controller is mounted (v1 or v2)".into()),
        }
    }
    if let Some(max) = limits.max_memory {
        match &h.v1_memory {
            Some((mount, own)) => {
                let parent = join(mount, own);
                sweep_stale(&parent);
                let dir = parent.join(name);
                let made = mkdir(&dir).and_then(|()| {
                    write_limit(&dir, "memory.limit_in_bytes", &max.to_string())?;
                    // memsw = mem + swap: equal limits leave no room for swap. Absent without
                    // swap accounting (then there is no swap to use).
                    if dir.join("memory.memsw.limit_in_bytes").exists() {
                        write_limit(&dir, "memory.memsw.limit_in_bytes", &max.to_string())?;
                    }
                    Ok(())
                });
                match made {
                    Ok(()) => {
                        cg.dirs.push(dir.clone());
                        cg.memory = Some(dir);
                    }
                    Err(e) => {
                        let _ = fs::remove_dir(&dir);
                        cg.absent_memory = Some(format!("cgroup v1 memory: {e}"));
                    }
                }
            }
            None => cg.absent_memory = Some("no memory controller is mounted (v1 or v2)".into()),
        }
    }
    if cg.dirs.is_empty() {
        why.extend(cg.absent());
        return Err(CgroupError::Unsupported(why.join("; ")));
    }
    Ok(cg)
}

/// Remove the groups of processes that died without cleaning up (`kill -9`): their names carry
/// the maker's pid (`hanzo-<pid>-…`, `hanzo-sandbox-<pid>-…`, `hanzo-probe-<pid>`). Anything left
/// in them is killed.
fn sweep_stale(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(maker_pid) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            drop(Cgroup {
                version: Version::V1,
                dirs: vec![entry.path()],
                pids: None,
                memory: None,
                absent_pids: None,
                absent_memory: None,
            });
        }
    }
}

fn maker_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("hanzo-")?;
    let rest = rest
        .strip_prefix("sandbox-")
        .or_else(|| rest.strip_prefix("probe-"))
        .unwrap_or(rest);
    rest.split('-').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID_MOUNTINFO: &str = "\
30 25 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw
35 30 0:31 / /sys/fs/cgroup/pids rw,nosuid - cgroup cgroup rw,pids
36 30 0:32 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
";
    const HYBRID_CGROUP: &str = "8:pids:/\n4:memory:/process_api/abc\n0::/\n";

    #[test]
    fn hybrid_hosts_use_v1_for_both_controllers() {
        let h = Hierarchies::parse(HYBRID_MOUNTINFO, HYBRID_CGROUP);
        assert_eq!(h.v2, Some(("/sys/fs/cgroup/unified".into(), "/".into())));
        assert_eq!(h.v1_pids, Some(("/sys/fs/cgroup/pids".into(), "/".into())));
        assert_eq!(
            h.v1_memory,
            Some(("/sys/fs/cgroup/memory".into(), "/process_api/abc".into()))
        );
    }

    #[test]
    fn pure_v2_hosts_have_no_v1() {
        let h = Hierarchies::parse(
            "29 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n",
            "0::/user.slice/user-1000.slice/session-2.scope\n",
        );
        assert_eq!(
            h.v2,
            Some((
                "/sys/fs/cgroup".into(),
                "/user.slice/user-1000.slice/session-2.scope".into()
            ))
        );
        assert!(h.v1_pids.is_none() && h.v1_memory.is_none());
    }

    /// A fake v2 tree in a temporary directory (cgroupfs files are plain files here): the
    /// `hanzo` directory gets the controllers delegated and the group its limits.
    #[test]
    fn v2_delegates_to_a_hanzo_directory_and_sets_limits() {
        let root = tempfile::tempdir().expect("tmp");
        let r = root.path();
        fs::write(r.join("cgroup.controllers"), "cpu memory pids\n").expect("w");
        fs::write(r.join("cgroup.subtree_control"), "").expect("w");
        let h = Hierarchies {
            v2: Some((r.to_path_buf(), "/init.scope".into())),
            v2_controllers: vec!["memory".into(), "pids".into()],
            v1_pids: None,
            v1_memory: None,
        };
        // What the kernel would create in new directories.
        fs::create_dir_all(r.join("hanzo")).expect("mkdir");
        fs::write(r.join("hanzo/cgroup.controllers"), "memory pids\n").expect("w");
        fs::create_dir_all(r.join("hanzo/hanzo-1-tools-1")).expect("mkdir");
        fs::write(
            r.join("hanzo/hanzo-1-tools-1/cgroup.controllers"),
            "memory pids\n",
        )
        .expect("w");
        fs::write(r.join("hanzo/hanzo-1-tools-1/memory.swap.max"), "max\n").expect("w");
        let cg = Cgroup::create_in(
            &h,
            "hanzo-1-tools-1",
            CgroupLimits {
                max_pids: Some(512),
                max_memory: Some(1 << 30),
            },
        )
        .expect("create");
        assert_eq!(cg.version(), Version::V2);
        let dir = r.join("hanzo/hanzo-1-tools-1");
        assert_eq!(
            fs::read_to_string(r.join("cgroup.subtree_control")).expect("r"),
            "+pids +memory"
        );
        assert_eq!(
            fs::read_to_string(r.join("hanzo/cgroup.subtree_control")).expect("r"),
            "+pids +memory"
        );
        assert_eq!(fs::read_to_string(dir.join("pids.max")).expect("r"), "512");
        assert_eq!(
            fs::read_to_string(dir.join("memory.max")).expect("r"),
            "1073741824"
        );
        assert_eq!(
            fs::read_to_string(dir.join("memory.swap.max")).expect("r"),
            "0"
        );
        assert_eq!(cg.pids_dir(), Some(dir.as_path()));
        std::mem::forget(cg); // a plain directory cannot be removed like a cgroup
    }

    #[test]
    fn sweep_removes_only_groups_of_dead_makers() {
        let parent = tempfile::tempdir().expect("tmp");
        let dead = parent.path().join("hanzo-4194303999-tools-1");
        let dead_sandbox = parent.path().join("hanzo-sandbox-4194303998-1");
        let live = parent
            .path()
            .join(format!("hanzo-{}-tools-1", std::process::id()));
        let other = parent.path().join("someone-else");
        for d in [&dead, &dead_sandbox, &live, &other] {
            fs::create_dir(d).expect("mkdir");
        }
        sweep_stale(parent.path());
        assert!(!dead.exists() && !dead_sandbox.exists());
        assert!(live.exists());
        assert!(other.exists());
    }

    /// The real hierarchy of this host (v1 here, as `doctor` reports): a group is made with its
    /// limits, a process joins, dropping the group kills it and removes the group.
    #[test]
    fn a_real_group_bounds_joins_and_is_emptied_on_drop() {
        let name = format!("hanzo-{}-unit-{}", std::process::id(), line!());
        let cg = match Cgroup::create(
            &name,
            CgroupLimits {
                max_pids: Some(16),
                max_memory: Some(64 << 20),
            },
        ) {
            Ok(cg) => cg,
            Err(e) => panic!("this project's CI hosts offer cgroups: {e}"),
        };
        let pids_dir = cg.pids_dir().expect("pids").to_path_buf();
        assert_eq!(
            fs::read_to_string(pids_dir.join("pids.max"))
                .expect("r")
                .trim(),
            "16"
        );
        let mem = cg.memory_dir().expect("memory").to_path_buf();
        let limit_file = if cg.version() == Version::V2 {
            "memory.max"
        } else {
            "memory.limit_in_bytes"
        };
        assert_eq!(
            fs::read_to_string(mem.join(limit_file)).expect("r").trim(),
            (64u64 << 20).to_string()
        );
        let files = cg.join_files().expect("join files");
        // The command forks (`sleep` in the background): the child must land in the group too.
        let mut cmd = std::process::Command::new("/bin/sh");
        cmd.args(["-c", "/bin/sleep 30 & exec /bin/sleep 31"]);
        crate::spawn::configure_command(
            &mut cmd,
            crate::spawn::ChildSetup {
                fds: Vec::new(),
                rlimits: hanzo_policy::profile::Rlimits {
                    core: 0,
                    nofile: 64,
                    fsize: None,
                },
                parent_pid: crate::own_pid(),
                new_session: true,
                join_cgroups: files.iter().map(std::os::fd::AsRawFd::as_raw_fd).collect(),
            },
        );
        let mut child = cmd.spawn().expect("spawn");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while cg.pids().len() < 2 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let mut pids = cg.pids();
        pids.sort_unstable();
        assert!(pids.contains(&child.id()) && pids.len() == 2, "{pids:?}");
        // Every directory lists both processes (on v1, the memory group as well as pids).
        for dir in [&pids_dir, &mem] {
            let listed = fs::read_to_string(dir.join("cgroup.procs")).expect("procs");
            assert_eq!(listed.lines().count(), 2, "{}: {listed}", dir.display());
        }
        drop(cg);
        let status = child.wait().expect("wait");
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL)
        );
        assert!(!pids_dir.exists() && !mem.exists());
    }
}
