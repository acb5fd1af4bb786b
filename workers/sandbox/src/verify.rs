//! Comparing what a worker attests with what its role's profile requires. The supervisor uses a
//! worker only when [`missing`] is empty.

use hanzo_ipc::attest::{Attestation, LandlockStatus, SocketPolicy};
use hanzo_policy::profile::{
    FsAccess, SandboxProfile, Syscalls, COMMAND_DENIED_SYSCALLS, COMMAND_DEVICES, COMMAND_ETC,
    SYSTEM_READ_PATHS,
};
use std::path::Path;

/// What `att` lacks relative to `profile.requires`, in words (empty = acceptable). Landlock is
/// required fully enforced only when `kernel_landlock_abi > 0`.
///
/// The capability bounding set is not required empty: only a holder of `CAP_SETPCAP` can empty
/// it, and with `no_new_privs` an exec cannot use it (see `Requirement::caps_cleared`).
///
/// The socket policy read back must allow no more than the profile's (a tools worker that can
/// create a socket is refused); an allow-list profile needs the same list (name and digest) in
/// force; a worker with a launcher needs the launcher's own attestation among its helpers, and
/// that one must be a confined command launcher (see [`missing_in_launcher`]).
pub fn missing(
    profile: &SandboxProfile,
    att: &Attestation,
    kernel_landlock_abi: u32,
) -> Vec<String> {
    let mut out = missing_common(
        profile.role,
        att,
        kernel_landlock_abi,
        profile.requires.seccomp,
    );
    let req = profile.requires;
    if !req.no_new_privs {
        out.retain(|m| !m.contains("no_new_privs"));
    }
    if !req.non_dumpable {
        out.retain(|m| !m.contains("dumpable"));
    }
    if !req.caps_cleared {
        out.retain(|m| !m.contains("capability set"));
    }
    if !req.landlock_when_supported {
        out.retain(|m| !m.starts_with("Landlock"));
    }
    if req.seccomp {
        let s = &att.seccomp;
        if !s.sockets.within(profile.sockets) {
            out.push(format!(
                "sockets are {:?} where the role allows {:?}",
                s.sockets, profile.sockets
            ));
        }
        for name in profile.denied_syscalls() {
            if !s.denied_syscalls.iter().any(|d| d == name) {
                out.push(format!("syscall {name} is not denied"));
            }
        }
        if profile.deny_namespace_creation && !s.namespace_creation_denied {
            out.push("namespace creation (clone flags, clone3) is not denied".to_string());
        }
        match (profile.syscalls, &s.allow_list) {
            (Syscalls::AllowList(list), Some(a)) => {
                if a.name != list.name || a.digest != list.digest() {
                    out.push(format!(
                        "the seccomp allow-list in force is {} ({}), not {}",
                        a.name,
                        &a.digest[..a.digest.len().min(12)],
                        list.file()
                    ));
                }
            }
            (Syscalls::AllowList(list), None) => out.push(format!(
                "no seccomp allow-list is in force (the role runs under {})",
                list.file()
            )),
            (Syscalls::DenyList { .. }, _) => {}
        }
        if profile.command_rules() && !s.command_rules {
            out.push("the command rules (TIOCSTI, set-id modes, xattrs) are not in force".into());
        }
    }
    // Whatever the requirements, a grant the profile does not contain is a wider sandbox.
    for grant in &att.landlock.grants {
        let declared = profile
            .fs
            .iter()
            .any(|g| &format!("{} {}", g.access.short(), g.path.display()) == grant);
        if !declared {
            out.push(format!(
                "Landlock grants {grant}, which the profile does not"
            ));
        }
    }
    if profile.launcher {
        // The command launcher; in tier B the tools worker may have a second, the git
        // launcher (`hanzo_tools::launcher::Pending::fork_git`), held to the same profile.
        let tier_b = !att.namespaces.is_empty();
        let most = if tier_b && profile.role == hanzo_ipc::Role::Tools {
            2
        } else {
            1
        };
        match att.helpers.as_slice() {
            [] => out.push("it has no command launcher".to_string()),
            helpers if helpers.len() <= most => {
                for (i, launcher) in helpers.iter().enumerate() {
                    let name = if i == 0 {
                        "its command launcher"
                    } else {
                        "its git launcher"
                    };
                    out.extend(
                        missing_in_launcher(profile, launcher, kernel_landlock_abi, tier_b)
                            .into_iter()
                            .map(|m| format!("{name}: {m}")),
                    );
                }
            }
            more => out.push(format!("it reports {} command launchers", more.len())),
        }
    } else if !att.helpers.is_empty() {
        out.push(format!(
            "it reports {} helper processes its role has none of",
            att.helpers.len()
        ));
    }
    out
}

/// What every attested process must have: the role it claims, `no_new_privs`, non-dumpable, no
/// capabilities, a filter (with x32 refused), Landlock when the kernel has it.
fn missing_common(
    role: hanzo_ipc::Role,
    att: &Attestation,
    kernel_landlock_abi: u32,
    seccomp: bool,
) -> Vec<String> {
    let mut out = Vec::new();
    if att.role != role {
        out.push(format!(
            "the attestation is for role {}, not {}",
            att.role, role
        ));
    }
    if !att.no_new_privs {
        out.push("no_new_privs is not set".to_string());
    }
    if !att.non_dumpable {
        out.push("the process is still dumpable".to_string());
    }
    let sets = [
        ("effective", att.caps.effective_empty),
        ("permitted", att.caps.permitted_empty),
        ("inheritable", att.caps.inheritable_empty),
        ("ambient", att.caps.ambient_empty),
    ];
    for (name, empty) in sets {
        if !empty {
            out.push(format!("the {name} capability set is not empty"));
        }
    }
    if seccomp {
        if !att.seccomp.installed {
            out.push("no seccomp filter is installed".to_string());
        }
        if !att.seccomp.x32_denied && cfg!(target_arch = "x86_64") {
            out.push("x32 syscall numbers are not denied".to_string());
        }
    }
    if kernel_landlock_abi > 0 {
        let l = &att.landlock;
        if l.status != LandlockStatus::FullyEnforced {
            out.push(format!(
                "Landlock is {:?} but the kernel supports ABI {kernel_landlock_abi} and the role \
                 requires it fully enforced",
                l.status
            ));
        }
        if kernel_landlock_abi >= 6 && !l.scoped {
            out.push(
                "Landlock scoping (abstract unix sockets, signals) is not applied although the \
                 kernel supports it (ABI 6+)"
                    .to_string(),
            );
        }
    }
    out
}

/// What a worker's command launcher lacks: everything every process needs; the command deny
/// list and rules; no sockets (tier A) or inet only (in tier B's private network namespace);
/// and no grant wider than what commands get — writable only beneath the worker's own writable
/// grants, the device nodes and tier B's private `/tmp`, readable only beneath those, the system
/// directories and the listed `/etc` entries.
pub fn missing_in_launcher(
    worker: &SandboxProfile,
    att: &Attestation,
    kernel_landlock_abi: u32,
    tier_b: bool,
) -> Vec<String> {
    let mut out = missing_common(worker.role, att, kernel_landlock_abi, true);
    let s = &att.seccomp;
    let allowed = if tier_b {
        SocketPolicy::InetOnly
    } else {
        SocketPolicy::None
    };
    if !s.sockets.within(allowed) {
        out.push(format!(
            "sockets are {:?} where at most {allowed:?} is allowed",
            s.sockets
        ));
    }
    for name in COMMAND_DENIED_SYSCALLS {
        if !s.denied_syscalls.iter().any(|d| d == name) {
            out.push(format!("syscall {name} is not denied"));
        }
    }
    if !s.command_rules {
        out.push("the command rules (TIOCSTI, set-id modes, xattrs) are not in force".into());
    }
    if !s.namespace_creation_denied {
        out.push("namespace creation (clone flags, clone3) is not denied".to_string());
    }
    let writable_ok = |p: &Path| {
        worker
            .fs
            .iter()
            .any(|g| g.access == FsAccess::ReadWrite && p.starts_with(&g.path))
            || p == Path::new("/dev/null")
            || COMMAND_DEVICES.iter().any(|d| p == Path::new(d))
            || (tier_b && p == Path::new("/tmp"))
    };
    let readable_ok = |p: &Path| {
        writable_ok(p)
            || worker.fs.iter().any(|g| p.starts_with(&g.path))
            || SYSTEM_READ_PATHS.iter().any(|s| p.starts_with(s))
            || COMMAND_ETC
                .iter()
                .any(|e| p.starts_with(Path::new("/etc").join(e)))
    };
    for grant in &att.landlock.grants {
        let ok = match grant.split_once(' ') {
            Some(("rw", p)) => writable_ok(Path::new(p)),
            Some(("ro", p)) => readable_ok(Path::new(p)),
            _ => false,
        };
        if !ok {
            out.push(format!(
                "Landlock grants {grant}, wider than any command may have"
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hanzo_ipc::attest::{
        AllowListAttestation, CapsAttestation, LandlockAttestation, SeccompAttestation,
    };
    use hanzo_ipc::Role;
    use hanzo_policy::isolation::Tier;
    use hanzo_policy::profile::{launcher_profile, profile_for, ProfileContext};

    fn ctx() -> ProfileContext {
        ProfileContext {
            workspace: Some("/w".into()),
            config_dir: Some("/c".into()),
            run_dir: Some("/r".into()),
            ..ProfileContext::default()
        }
    }

    fn model() -> SandboxProfile {
        profile_for(Role::Model, &ProfileContext::default())
    }

    fn good(profile: &SandboxProfile) -> Attestation {
        Attestation {
            role: profile.role,
            pid: 42,
            no_new_privs: true,
            non_dumpable: true,
            caps: CapsAttestation {
                effective_empty: true,
                permitted_empty: true,
                inheritable_empty: true,
                ambient_empty: true,
                bounding_empty: true,
            },
            landlock: LandlockAttestation {
                kernel_abi: 7,
                status: LandlockStatus::FullyEnforced,
                grants: profile
                    .fs
                    .iter()
                    .map(|g| format!("{} {}", g.access.short(), g.path.display()))
                    .collect(),
                scoped: true,
            },
            seccomp: SeccompAttestation {
                installed: true,
                sockets: profile.sockets,
                denied_syscalls: profile
                    .denied_syscalls()
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
                x32_denied: true,
                namespace_creation_denied: true,
                allow_list: match profile.syscalls {
                    Syscalls::AllowList(l) => Some(AllowListAttestation {
                        name: l.name.to_string(),
                        syscalls: u32::try_from(l.syscalls.len()).unwrap_or(u32::MAX),
                        digest: l.digest(),
                    }),
                    Syscalls::DenyList { .. } => None,
                },
                command_rules: profile.command_rules(),
                filters: 4,
            },
            namespaces: Vec::new(),
            notes: Vec::new(),
            helpers: if profile.launcher {
                vec![good(&launcher_profile(profile.role, &ctx(), Tier::A))]
            } else {
                Vec::new()
            },
        }
    }

    #[test]
    fn a_full_attestation_is_acceptable() {
        for role in Role::ALL {
            let p = profile_for(role, &ctx());
            assert_eq!(missing(&p, &good(&p), 7), Vec::<String>::new(), "{role}");
        }
    }

    #[test]
    fn a_bounding_set_left_by_a_worker_without_setpcap_is_acceptable() {
        let p = model();
        let mut a = good(&p);
        a.caps.bounding_empty = false;
        assert!(missing(&p, &a, 7).is_empty());
    }

    #[test]
    fn each_weakness_is_named() {
        let p = model();
        let mut a = good(&p);
        a.no_new_privs = false;
        a.non_dumpable = false;
        a.caps.permitted_empty = false;
        a.seccomp.installed = false;
        a.seccomp.sockets = SocketPolicy::Any;
        a.seccomp.denied_syscalls.retain(|s| s != "ptrace");
        a.seccomp.x32_denied = false;
        a.seccomp.namespace_creation_denied = false;
        a.seccomp.allow_list = None;
        a.landlock.status = LandlockStatus::PartiallyEnforced;
        let m = missing(&p, &a, 7);
        let expected_x32 = cfg!(target_arch = "x86_64");
        for needle in [
            "no_new_privs",
            "dumpable",
            "permitted capability",
            "no seccomp filter",
            "sockets are Any",
            "syscall ptrace",
            "namespace creation",
            "no seccomp allow-list",
            "Landlock is PartiallyEnforced",
        ] {
            assert!(
                m.iter().any(|s| s.contains(needle)),
                "{needle} not in {m:?}"
            );
        }
        assert_eq!(m.iter().any(|s| s.contains("x32")), expected_x32);
        assert_eq!(m.len(), 9 + usize::from(expected_x32));
    }

    /// The attack of issue 10's socket item: a tools worker whose filter lets it create a socket
    /// (any family) is refused, whatever else it attests.
    #[test]
    fn a_tools_worker_that_can_create_a_socket_is_refused() {
        let p = profile_for(Role::Tools, &ctx());
        assert_eq!(p.sockets, SocketPolicy::None);
        for weaker in [
            SocketPolicy::UnixOnly,
            SocketPolicy::InetOnly,
            SocketPolicy::Any,
        ] {
            let mut a = good(&p);
            a.seccomp.sockets = weaker;
            let m = missing(&p, &a, 7);
            assert!(
                m.iter().any(|s| s.contains("sockets are")),
                "{weaker:?}: {m:?}"
            );
        }
    }

    #[test]
    fn another_allow_list_or_a_changed_one_is_refused() {
        let p = profile_for(Role::Tools, &ctx());
        let mut a = good(&p);
        a.seccomp.allow_list = Some(AllowListAttestation {
            name: "broker".into(),
            syscalls: 300,
            digest: hanzo_policy::profile::allow_list("broker").digest(),
        });
        assert!(missing(&p, &a, 7)
            .iter()
            .any(|m| m.contains("allow-list in force is broker")));
        let mut a = good(&p);
        if let Some(l) = a.seccomp.allow_list.as_mut() {
            l.digest = "0".repeat(64);
        }
        assert!(!missing(&p, &a, 7).is_empty());
    }

    #[test]
    fn a_tools_worker_needs_a_confined_launcher() {
        let p = profile_for(Role::Tools, &ctx());
        let mut a = good(&p);
        a.helpers.clear();
        assert!(missing(&p, &a, 7)
            .iter()
            .any(|m| m.contains("no command launcher")));
        // A launcher without the command rules, with unix sockets, or reading all of /home.
        let mut a = good(&p);
        a.helpers[0].seccomp.command_rules = false;
        a.helpers[0].seccomp.sockets = SocketPolicy::UnixOnly;
        a.helpers[0].landlock.grants.push("ro /home".into());
        let m = missing(&p, &a, 7);
        for needle in ["command rules", "sockets are UnixOnly", "grants ro /home"] {
            assert!(
                m.iter()
                    .any(|s| s.contains(needle) && s.starts_with("its command launcher")),
                "{needle}: {m:?}"
            );
        }
        // Inet is for tier B's launcher only.
        let mut a = good(&p);
        a.helpers[0].seccomp.sockets = SocketPolicy::InetOnly;
        assert!(!missing(&p, &a, 7).is_empty());
        a.namespaces = vec!["net".into()];
        a.helpers[0].landlock.grants.push("rw /tmp".into());
        assert_eq!(missing(&p, &a, 7), Vec::<String>::new());
    }

    #[test]
    fn landlock_is_required_only_when_the_kernel_has_it() {
        let p = model();
        let mut a = good(&p);
        a.landlock.status = LandlockStatus::Unsupported;
        a.landlock.kernel_abi = 0;
        assert!(missing(&p, &a, 0).is_empty());
        assert_eq!(missing(&p, &a, 1).len(), 1);
    }

    #[test]
    fn scoping_is_required_from_abi_6() {
        let p = model();
        let mut a = good(&p);
        a.landlock.scoped = false;
        assert!(missing(&p, &a, 5).is_empty());
        let m = missing(&p, &a, 6);
        assert_eq!(m.len(), 1);
        assert!(m[0].contains("scoping"), "{m:?}");
    }

    #[test]
    fn wrong_role_and_extra_grant_are_refused() {
        let p = model();
        let mut a = good(&p);
        a.role = Role::Broker;
        a.landlock.grants.push("rw /home".to_string());
        let m = missing(&p, &a, 7);
        assert!(m.iter().any(|s| s.contains("role broker")), "{m:?}");
        assert!(m.iter().any(|s| s.contains("grants rw /home")), "{m:?}");
    }
}
