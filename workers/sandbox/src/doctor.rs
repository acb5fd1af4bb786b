//! What the running kernel offers for confinement, probed for real and cheaply (a few syscalls
//! and one short-lived child): the checks of HIP-0301 §10 and ours.

use crate::sys::{self, errno_name};
use serde::Serialize;
use std::path::Path;

/// The kernel's confinement features, as `hanzo-dev doctor` reports them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KernelReport {
    /// Landlock ABI version (0: none).
    pub landlock_abi: u32,
    /// Why there is no Landlock, when `landlock_abi == 0`.
    pub landlock_error: Option<String>,
    /// Seccomp filter mode is available.
    pub seccomp: bool,
    /// Creating user, mount, pid, net and ipc namespaces without privileges works, or why not.
    /// Serialised as `{"available": true}` or `{"available": false, "reason": "…"}`, the shape
    /// of every availability in `doctor --json`.
    #[serde(serialize_with = "availability")]
    pub user_namespaces: Result<(), String>,
    /// The container runtime we run in (`docker`, `podman`, `k8s`), if any, and how we know.
    pub container: Option<String>,
    /// The file or variable that showed the container runtime.
    pub container_evidence: Option<String>,
    /// `uname -r`.
    pub kernel_release: String,
    /// The machine architecture (`uname -m`).
    pub arch: String,
    /// Effective uid 0: capabilities are really held, so dropping them (and the bounding set)
    /// matters.
    pub running_as_root: bool,
}

/// `Ok(())` → `{"available": true}`; `Err(why)` → `{"available": false, "reason": why}`.
fn availability<S: serde::Serializer>(v: &Result<(), String>, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(None)?;
    match v {
        Ok(()) => m.serialize_entry("available", &true)?,
        Err(why) => {
            m.serialize_entry("available", &false)?;
            m.serialize_entry("reason", why)?;
        }
    }
    m.end()
}

impl KernelReport {
    /// Tier A: capabilities dropped, `no_new_privs`, seccomp, and Landlock. Err says what is
    /// missing and what to do.
    pub fn tier_a(&self) -> Result<(), String> {
        if !self.seccomp {
            return Err(
                "seccomp filters are unavailable: the kernel needs CONFIG_SECCOMP_FILTER \
                        (every mainstream distribution kernel has it); under a container runtime, \
                        do not run with seccomp=unconfined replaced by a profile that forbids \
                        seccomp(2)"
                    .to_string(),
            );
        }
        if self.landlock_abi == 0 {
            let why = self.landlock_error.as_deref().unwrap_or("not available");
            return Err(format!(
                "Landlock is unavailable ({why}): workers would run without filesystem \
                 confinement. Use Linux 5.13 or later with landlock in the lsm= boot parameter \
                 (e.g. lsm=landlock,lockdown,yama,integrity,apparmor,bpf)"
            ));
        }
        Ok(())
    }

    /// Tier B: tier A plus namespaces for command execution. Err says why not.
    pub fn tier_b(&self) -> Result<(), String> {
        self.tier_a()?;
        self.user_namespaces
            .clone()
            .map_err(|why| format!("user namespaces do not work: {why}"))
    }
}

/// Probes the running kernel.
pub fn probe_kernel() -> KernelReport {
    let (landlock_abi, landlock_error) = match sys::landlock_abi() {
        Ok(v) => (v, None),
        Err(e) if e == libc::EOPNOTSUPP => (
            0,
            Some("built into the kernel but not enabled at boot".to_string()),
        ),
        Err(e) if e == libc::ENOSYS => (0, Some("not built into the kernel".to_string())),
        Err(e) => (0, Some(errno_name(e))),
    };
    let (container, container_evidence) = match detect_container() {
        Some((kind, evidence)) => (Some(kind.to_string()), Some(evidence)),
        None => (None, None),
    };
    KernelReport {
        landlock_abi,
        landlock_error,
        seccomp: seccomp_filter_available(),
        user_namespaces: probe_user_namespaces(),
        container,
        container_evidence,
        kernel_release: kernel_release(),
        arch: std::env::consts::ARCH.to_string(),
        running_as_root: nix::unistd::geteuid().is_root(),
    }
}

/// The warning for a user about to run sandboxed commands as uid 0, or `None` when the process
/// is not root. `hanzo-dev doctor`, `hanzo-dev sandbox` and `hanzo-dev run` print it.
pub fn root_warning() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    Some(
        "commands will run as uid 0 (root). The sandbox drops every capability and grants only \
         the listed parts of /etc (no /etc/shadow, no SSH host keys), and tier B also makes the \
         host filesystem read-only; but in tier A a root command can still change the mode bits \
         and timestamps of any root-owned file outside the workspace it can name (Landlock does \
         not cover chmod or utimensat). Run hanzo-dev as an ordinary user."
            .to_string(),
    )
}

/// `SECCOMP_GET_ACTION_AVAIL` from `<linux/seccomp.h>`.
const SECCOMP_GET_ACTION_AVAIL: libc::c_uint = 2;

fn seccomp_filter_available() -> bool {
    // PR_GET_SECCOMP fails with EINVAL on a kernel without seccomp.
    if sys::seccomp_mode().is_err() {
        return false;
    }
    // Filter mode, and the actions our filters use, are all there. Raw: no crate wraps
    // SECCOMP_GET_ACTION_AVAIL.
    [libc::SECCOMP_RET_ERRNO, libc::SECCOMP_RET_TRAP]
        .iter()
        .all(|action| {
            // SAFETY: the kernel reads one u32 from `action`.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_seccomp,
                    SECCOMP_GET_ACTION_AVAIL,
                    0u32,
                    action as *const u32,
                )
            };
            r == 0
        })
}

/// Forks a child that drops its capabilities (so the answer is the unprivileged one, as for a
/// confined worker) and tries to create every namespace tier B uses.
fn probe_user_namespaces() -> Result<(), String> {
    use nix::sched::CloneFlags;
    let flags = CloneFlags::CLONE_NEWUSER
        | CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWNET
        | CloneFlags::CLONE_NEWIPC;
    // SAFETY: the child makes only async-signal-safe calls (capset, unshare) and _exits.
    let pid = match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Parent { child }) => child,
        Ok(nix::unistd::ForkResult::Child) => {
            // struct __user_cap_header_struct / __user_cap_data_struct[2] for version 3. Raw:
            // the caps crate allocates, which the fork of a multi-threaded process must not.
            #[repr(C)]
            struct Header {
                version: u32,
                pid: i32,
            }
            let header = Header {
                version: 0x2008_0522,
                pid: 0,
            };
            let data = [0u32; 6];
            // SAFETY: capset reads the header and two data structs (six u32) we own.
            let _ = unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) };
            let code = match nix::sched::unshare(flags) {
                Ok(()) => 0,
                Err(e) => (e as i32).clamp(1, 255),
            };
            // SAFETY: leave the probe child without running the parent's atexit handlers (nix
            // has no safe `_exit`).
            unsafe { libc::_exit(code) };
        }
        Err(e) => {
            return Err(format!(
                "could not fork the probe child: {}",
                errno_name(e as i32)
            ))
        }
    };
    let status = loop {
        match nix::sys::wait::waitpid(pid, None) {
            Ok(s) => break s,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                return Err(format!(
                    "waiting for the probe child: {}",
                    errno_name(e as i32)
                ))
            }
        }
    };
    match status {
        nix::sys::wait::WaitStatus::Exited(_, 0) => Ok(()),
        nix::sys::wait::WaitStatus::Exited(_, e) => Err(format!(
            "unshare(user|mount|pid|net|ipc) failed with {}{}",
            errno_name(e),
            userns_reason()
        )),
        _ => Err("the namespace probe child was killed".to_string()),
    }
}

/// The sysctls that explain a refused user namespace, with advice.
fn userns_reason() -> String {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    let mut why = Vec::new();
    if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        why.push(
            "kernel.unprivileged_userns_clone = 0 (sysctl -w kernel.unprivileged_userns_clone=1)",
        );
    }
    if read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        why.push("user.max_user_namespaces = 0 (sysctl -w user.max_user_namespaces=15000)");
    }
    if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        why.push(
            "AppArmor restricts unprivileged user namespaces \
             (kernel.apparmor_restrict_unprivileged_userns = 1)",
        );
    }
    if why.is_empty() {
        " (a container runtime's seccomp profile may refuse unshare; run the container with a \
         profile that allows it, or use --isolation auto)"
            .to_string()
    } else {
        format!(": {}", why.join("; "))
    }
}

/// HIP-0301 §10 order: `/proc/1/cgroup`, `/.dockerenv`, `/run/.containerenv`,
/// `KUBERNETES_SERVICE_HOST`. Returns the runtime and the evidence.
pub fn detect_container() -> Option<(&'static str, String)> {
    detect_container_in(
        std::fs::read_to_string("/proc/1/cgroup").ok().as_deref(),
        Path::new("/.dockerenv").exists(),
        Path::new("/run/.containerenv").exists(),
        std::env::var_os("KUBERNETES_SERVICE_HOST").is_some(),
    )
}

pub(crate) fn detect_container_in(
    cgroup: Option<&str>,
    dockerenv: bool,
    containerenv: bool,
    kubernetes_env: bool,
) -> Option<(&'static str, String)> {
    if let Some(text) = cgroup {
        let kind = if text.contains("kubepods") {
            Some("k8s")
        } else if text.contains("libpod") || text.contains("podman") {
            Some("podman")
        } else if text.contains("docker") {
            Some("docker")
        } else {
            None
        };
        if let Some(kind) = kind {
            return Some((kind, "/proc/1/cgroup".to_string()));
        }
    }
    if dockerenv {
        return Some(("docker", "/.dockerenv".to_string()));
    }
    if containerenv {
        return Some(("podman", "/run/.containerenv".to_string()));
    }
    if kubernetes_env {
        return Some(("k8s", "KUBERNETES_SERVICE_HOST".to_string()));
    }
    None
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_detection_follows_the_spec_order() {
        assert_eq!(
            detect_container_in(Some("0::/kubepods/besteffort/pod1"), true, false, false)
                .map(|c| c.0),
            Some("k8s")
        );
        assert_eq!(
            detect_container_in(Some("0::/"), true, true, true),
            Some(("docker", "/.dockerenv".to_string()))
        );
        assert_eq!(
            detect_container_in(Some("0::/"), false, true, true).map(|c| c.0),
            Some("podman")
        );
        assert_eq!(
            detect_container_in(None, false, false, true).map(|c| c.0),
            Some("k8s")
        );
        assert_eq!(
            detect_container_in(Some("12:pids:/docker/abc"), false, false, false).map(|c| c.0),
            Some("docker")
        );
        assert_eq!(
            detect_container_in(Some("0::/init.scope"), false, false, false),
            None
        );
    }

    fn report() -> KernelReport {
        KernelReport {
            landlock_abi: 7,
            landlock_error: None,
            seccomp: true,
            user_namespaces: Ok(()),
            container: None,
            container_evidence: None,
            kernel_release: "6.18".into(),
            arch: "x86_64".into(),
            running_as_root: false,
        }
    }

    #[test]
    fn tiers_follow_the_features() {
        let r = report();
        assert_eq!(r.tier_a(), Ok(()));
        assert_eq!(r.tier_b(), Ok(()));

        let mut no_userns = report();
        no_userns.user_namespaces = Err("EPERM".into());
        assert_eq!(no_userns.tier_a(), Ok(()));
        assert!(no_userns.tier_b().expect_err("no tier B").contains("EPERM"));

        let mut no_landlock = report();
        no_landlock.landlock_abi = 0;
        no_landlock.landlock_error = Some("not enabled at boot".into());
        let why = no_landlock.tier_a().expect_err("no tier A");
        assert!(
            why.contains("not enabled at boot") && why.contains("lsm="),
            "{why}"
        );
        assert!(no_landlock.tier_b().is_err());

        let mut no_seccomp = report();
        no_seccomp.seccomp = false;
        assert!(no_seccomp
            .tier_a()
            .expect_err("no seccomp")
            .contains("seccomp"));
    }

    #[test]
    fn this_machine_offers_landlock_seccomp_and_user_namespaces() {
        let r = probe_kernel();
        assert!(r.landlock_abi >= 1, "{r:?}");
        assert!(r.seccomp, "{r:?}");
        assert_eq!(r.user_namespaces, Ok(()), "{r:?}");
        assert_eq!(r.tier_b(), Ok(()));
    }

    #[test]
    fn report_serializes_for_json_output() {
        let json = serde_json::to_value(report()).expect("serializes");
        assert_eq!(json["landlock_abi"], 7);
        assert_eq!(json["seccomp"], true);
    }
}
