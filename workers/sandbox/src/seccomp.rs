//! The seccomp filters a profile asks for, compiled to BPF.
//!
//! Every filter allows by default and refuses a listed set, so whatever tokio and std need later
//! keeps working. Each refusal gets its own errno, and seccompiler gives one match action per
//! filter, so the profile becomes up to four small programs (all are evaluated by the kernel on
//! every syscall; the strictest answer wins):
//!
//! 1. the profile's denied syscalls, and `clone` with any `CLONE_NEW*` flag → `EPERM`;
//! 2. `socket` with a family other than `AF_UNIX` → `EAFNOSUPPORT` (unix-only roles);
//! 3. `clone3` → `ENOSYS`, so libc falls back to `clone`, whose flags a filter can see;
//! 4. (x86_64) any syscall number with the x32 bit set → `EPERM`. seccompiler's programs check the
//!    architecture but x32 calls report `AUDIT_ARCH_X86_64`, so they would pass every number
//!    comparison; this hand-built program closes that hole.

use hanzo_ipc::attest::SocketPolicy;
use hanzo_policy::profile::SandboxProfile;
use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

/// Every `CLONE_NEW*` flag that `clone` accepts (`CLONE_NEWTIME` shares its bit with the exit
/// signal field in `clone` and is only accepted by `clone3` and `unshare`).
pub const CLONE_NEW_FLAGS: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
];

/// The bit that marks an x32 syscall number on x86_64 (`__X32_SYSCALL_BIT`).
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    #[error(
        "the profile denies syscall {0:?}, which this build does not know on this architecture"
    )]
    UnknownSyscall(String),
    #[error("compiling the seccomp filter: {0}")]
    Compile(#[from] seccompiler::BackendError),
}

/// The compiled filters of a profile and what they refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterSet {
    /// In installation order.
    pub programs: Vec<BpfProgram>,
    pub denied_syscalls: Vec<String>,
    pub sockets: SocketPolicy,
    pub namespace_creation_denied: bool,
    pub x32_denied: bool,
}

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;
#[cfg(target_arch = "riscv64")]
const ARCH: TargetArch = TargetArch::riscv64;

fn errno_action(errno: i32) -> SeccompAction {
    SeccompAction::Errno(errno as u32)
}

fn compile(rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32) -> Result<BpfProgram, FilterError> {
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, errno_action(errno), ARCH)?;
    Ok(BpfProgram::try_from(filter)?)
}

/// Builds the filters `profile` asks for.
pub fn build(profile: &SandboxProfile) -> Result<FilterSet, FilterError> {
    let mut programs = Vec::new();

    // 1. Denied syscalls and namespace-creating clone → EPERM.
    let mut deny: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for name in profile.denied_syscalls {
        let nr =
            syscall_number(name).ok_or_else(|| FilterError::UnknownSyscall(name.to_string()))?;
        // An empty rule chain matches the syscall unconditionally.
        deny.insert(nr, Vec::new());
    }
    if profile.deny_namespace_creation {
        if let std::collections::btree_map::Entry::Vacant(slot) = deny.entry(libc::SYS_clone) {
            // One rule per flag: the rules of a chain are alternatives, so any set flag matches.
            // The flags all live in the low 32 bits of the first argument.
            let rules = CLONE_NEW_FLAGS
                .iter()
                .map(|&flag| {
                    SeccompRule::new(vec![SeccompCondition::new(
                        0,
                        SeccompCmpArgLen::Dword,
                        SeccompCmpOp::MaskedEq(flag),
                        flag,
                    )?])
                })
                .collect::<Result<Vec<_>, _>>()?;
            slot.insert(rules);
        }
    }
    if !deny.is_empty() {
        programs.push(compile(deny, libc::EPERM)?);
    }

    // 2. Unix sockets only → EAFNOSUPPORT, the answer a kernel without that family gives.
    if profile.sockets == SocketPolicy::UnixOnly {
        let rule = SeccompRule::new(vec![SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Ne,
            libc::AF_UNIX as u64,
        )?])?;
        programs.push(compile(
            BTreeMap::from([(libc::SYS_socket, vec![rule])]),
            libc::EAFNOSUPPORT,
        )?);
    }

    // 3. clone3 hides its flags behind a pointer a filter cannot read → ENOSYS, so glibc falls
    // back to clone.
    if profile.deny_namespace_creation {
        programs.push(compile(
            BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
            libc::ENOSYS,
        )?);
    }

    // 4. x32 syscall numbers.
    let x32_denied = cfg!(target_arch = "x86_64");
    if x32_denied {
        programs.push(x32_filter());
    }

    Ok(FilterSet {
        programs,
        denied_syscalls: profile
            .denied_syscalls
            .iter()
            .map(|s| s.to_string())
            .collect(),
        sockets: profile.sockets,
        namespace_creation_denied: profile.deny_namespace_creation,
        x32_denied,
    })
}

// Classic BPF opcodes and seccomp constants, from <linux/filter.h> and <linux/seccomp.h>.
/// `BPF_LD | BPF_W | BPF_ABS` (0x00 | 0x00 | 0x20).
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10;
const BPF_JMP_JSET_K: u16 = 0x05 | 0x40;
const BPF_RET_K: u16 = 0x06;
const SECCOMP_DATA_NR: u32 = 0;
const SECCOMP_DATA_ARCH: u32 = 4;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
/// `AUDIT_ARCH_X86_64` = `EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE`.
const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// The program refusing x32 syscall numbers with `EPERM` (not `ENOSYS`, so that a read-back can
/// tell this filter from a kernel built without x32 support). Other architectures pass through to
/// the other filters, which kill them.
pub fn x32_filter() -> BpfProgram {
    vec![
        insn(BPF_LD_W_ABS, 0, 0, SECCOMP_DATA_ARCH),
        // Not x86_64 (i386 via int 0x80): not ours to judge here → allow (jump to the last insn).
        insn(BPF_JMP_JEQ_K, 0, 3, AUDIT_ARCH_X86_64),
        insn(BPF_LD_W_ABS, 0, 0, SECCOMP_DATA_NR),
        insn(BPF_JMP_JSET_K, 0, 1, X32_SYSCALL_BIT),
        insn(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | libc::EPERM as u32),
        insn(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ]
}

/// The number of the syscall called `name` on this architecture, for the names profiles use
/// (see `hanzo_policy::profile::BASE_DENIED_SYSCALLS`) and a few more a profile may add.
pub fn syscall_number(name: &str) -> Option<i64> {
    Some(match name {
        "ptrace" => libc::SYS_ptrace,
        "process_vm_readv" => libc::SYS_process_vm_readv,
        "process_vm_writev" => libc::SYS_process_vm_writev,
        "process_madvise" => libc::SYS_process_madvise,
        "pidfd_getfd" => libc::SYS_pidfd_getfd,
        "kcmp" => libc::SYS_kcmp,
        "bpf" => libc::SYS_bpf,
        "mount" => libc::SYS_mount,
        "umount2" => libc::SYS_umount2,
        "pivot_root" => libc::SYS_pivot_root,
        "chroot" => libc::SYS_chroot,
        "unshare" => libc::SYS_unshare,
        "setns" => libc::SYS_setns,
        "io_uring_setup" => libc::SYS_io_uring_setup,
        "io_uring_enter" => libc::SYS_io_uring_enter,
        "io_uring_register" => libc::SYS_io_uring_register,
        "userfaultfd" => libc::SYS_userfaultfd,
        "perf_event_open" => libc::SYS_perf_event_open,
        "kexec_load" => libc::SYS_kexec_load,
        "kexec_file_load" => libc::SYS_kexec_file_load,
        "init_module" => libc::SYS_init_module,
        "finit_module" => libc::SYS_finit_module,
        "delete_module" => libc::SYS_delete_module,
        "keyctl" => libc::SYS_keyctl,
        "add_key" => libc::SYS_add_key,
        "request_key" => libc::SYS_request_key,
        "open_by_handle_at" => libc::SYS_open_by_handle_at,
        "name_to_handle_at" => libc::SYS_name_to_handle_at,
        "move_mount" => libc::SYS_move_mount,
        "open_tree" => libc::SYS_open_tree,
        "fsopen" => libc::SYS_fsopen,
        "fsconfig" => libc::SYS_fsconfig,
        "fsmount" => libc::SYS_fsmount,
        "fspick" => libc::SYS_fspick,
        "mount_setattr" => libc::SYS_mount_setattr,
        "swapon" => libc::SYS_swapon,
        "swapoff" => libc::SYS_swapoff,
        "reboot" => libc::SYS_reboot,
        "acct" => libc::SYS_acct,
        "quotactl" => libc::SYS_quotactl,
        "personality" => libc::SYS_personality,
        "syslog" => libc::SYS_syslog,
        "settimeofday" => libc::SYS_settimeofday,
        "clock_settime" => libc::SYS_clock_settime,
        "clock_adjtime" => libc::SYS_clock_adjtime,
        "adjtimex" => libc::SYS_adjtimex,
        "sethostname" => libc::SYS_sethostname,
        "setdomainname" => libc::SYS_setdomainname,
        "vhangup" => libc::SYS_vhangup,
        "lookup_dcookie" => libc::SYS_lookup_dcookie,
        "fanotify_init" => libc::SYS_fanotify_init,
        "landlock_create_ruleset" => libc::SYS_landlock_create_ruleset,
        "clone" => libc::SYS_clone,
        "clone3" => libc::SYS_clone3,
        "socket" => libc::SYS_socket,
        "seccomp" => libc::SYS_seccomp,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hanzo_ipc::Role;
    use hanzo_policy::profile::{profile_for, ProfileContext, BASE_DENIED_SYSCALLS};

    #[test]
    fn every_base_denied_syscall_has_a_number() {
        for name in BASE_DENIED_SYSCALLS {
            assert!(syscall_number(name).is_some(), "{name}");
        }
    }

    #[test]
    fn model_profile_compiles_to_four_programs() {
        let set = build(&profile_for(Role::Model, &ProfileContext::default())).expect("builds");
        assert_eq!(
            set.programs.len(),
            if cfg!(target_arch = "x86_64") { 4 } else { 3 }
        );
        assert_eq!(set.sockets, SocketPolicy::UnixOnly);
        assert!(set.namespace_creation_denied);
        assert!(set.denied_syscalls.iter().any(|s| s == "ptrace"));
    }

    #[test]
    fn broker_profile_has_no_socket_filter() {
        let set = build(&profile_for(Role::Broker, &ProfileContext::default())).expect("builds");
        assert_eq!(set.sockets, SocketPolicy::Any);
        assert_eq!(
            set.programs.len(),
            if cfg!(target_arch = "x86_64") { 3 } else { 2 }
        );
    }

    #[test]
    fn unknown_syscall_name_fails_closed() {
        let mut p = profile_for(Role::Model, &ProfileContext::default());
        p.denied_syscalls = &["no_such_syscall"];
        assert!(matches!(build(&p), Err(FilterError::UnknownSyscall(n)) if n == "no_such_syscall"));
    }

    #[test]
    fn x32_filter_jumps_land_on_return_instructions() {
        let prog = x32_filter();
        // The arch mismatch branch (insn 1, jf 3) must reach the ALLOW return, the JSET hit the
        // ERRNO return.
        assert_eq!(prog[1 + 1 + 3].k, SECCOMP_RET_ALLOW);
        assert_eq!(prog[3 + 1].k, SECCOMP_RET_ERRNO | libc::EPERM as u32);
        assert_eq!(prog[3 + 1 + 1].k, SECCOMP_RET_ALLOW);
    }
}
