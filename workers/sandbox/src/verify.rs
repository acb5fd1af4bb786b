//! Comparing what a worker attests with what its role's profile requires. The supervisor uses a
//! worker only when [`missing`] is empty.

use hanzo_ipc::attest::{Attestation, LandlockStatus, SocketPolicy};
use hanzo_policy::profile::SandboxProfile;

/// What `att` lacks relative to `profile.requires`, in words (empty = acceptable). Landlock is
/// required fully enforced only when `kernel_landlock_abi > 0`.
///
/// The capability bounding set is not required empty: only a holder of `CAP_SETPCAP` can empty
/// it, and with `no_new_privs` an exec cannot use it (see `Requirement::caps_cleared`).
pub fn missing(
    profile: &SandboxProfile,
    att: &Attestation,
    kernel_landlock_abi: u32,
) -> Vec<String> {
    let req = profile.requires;
    let mut out = Vec::new();
    if att.role != profile.role {
        out.push(format!(
            "the attestation is for role {}, not {}",
            att.role, profile.role
        ));
    }
    if req.no_new_privs && !att.no_new_privs {
        out.push("no_new_privs is not set".to_string());
    }
    if req.non_dumpable && !att.non_dumpable {
        out.push("the process is still dumpable".to_string());
    }
    if req.caps_cleared {
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
    }
    if req.seccomp {
        let s = &att.seccomp;
        if !s.installed {
            out.push("no seccomp filter is installed".to_string());
        }
        if profile.sockets == SocketPolicy::UnixOnly && s.sockets != SocketPolicy::UnixOnly {
            out.push("non-unix sockets are not refused".to_string());
        }
        for name in profile.denied_syscalls {
            if !s.denied_syscalls.iter().any(|d| d == name) {
                out.push(format!("syscall {name} is not denied"));
            }
        }
        if !s.x32_denied && cfg!(target_arch = "x86_64") {
            out.push("x32 syscall numbers are not denied".to_string());
        }
        if profile.deny_namespace_creation && !s.namespace_creation_denied {
            out.push("namespace creation (clone flags, clone3) is not denied".to_string());
        }
    }
    if req.landlock_when_supported && kernel_landlock_abi > 0 {
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
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hanzo_ipc::attest::{CapsAttestation, LandlockAttestation, SeccompAttestation};
    use hanzo_ipc::Role;
    use hanzo_policy::profile::{profile_for, ProfileContext};

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
                    .denied_syscalls
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
                x32_denied: true,
                namespace_creation_denied: true,
            },
            namespaces: Vec::new(),
            notes: Vec::new(),
        }
    }

    #[test]
    fn a_full_attestation_is_acceptable() {
        for role in Role::ALL {
            let p = profile_for(
                role,
                &ProfileContext {
                    workspace: Some("/w".into()),
                    config_dir: Some("/c".into()),
                    run_dir: Some("/r".into()),
                },
            );
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
        a.landlock.status = LandlockStatus::PartiallyEnforced;
        let m = missing(&p, &a, 7);
        let expected_x32 = cfg!(target_arch = "x86_64");
        for needle in [
            "no_new_privs",
            "dumpable",
            "permitted capability",
            "no seccomp filter",
            "non-unix sockets",
            "syscall ptrace",
            "namespace creation",
            "Landlock is PartiallyEnforced",
        ] {
            assert!(
                m.iter().any(|s| s.contains(needle)),
                "{needle} not in {m:?}"
            );
        }
        assert_eq!(m.iter().any(|s| s.contains("x32")), expected_x32);
        assert_eq!(m.len(), 8 + usize::from(expected_x32));
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
