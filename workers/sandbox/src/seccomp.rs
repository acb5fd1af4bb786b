//! The seccomp filters a profile asks for, compiled to BPF.
//!
//! seccompiler gives one match action per filter, so a profile becomes a few small programs (the
//! kernel evaluates all of them on every syscall; the strictest answer wins — `KILL` over `TRAP`
//! over `ERRNO` over `ALLOW`):
//!
//! 1. **allow-list** (workers): the listed syscalls → allow, any other → `SIGSYS` (`TRAP`). The
//!    process's `SIGSYS` handler ([`crate::sigsys`]) names the syscall on stderr and exits, so a
//!    syscall missing from a list is diagnosable, and a compromised worker that tries one stops.
//!    Syscalls that another program of the set decides (`clone3`, `socket` when sockets are
//!    allowed at all) are admitted here so that program's answer stands.
//! 2. **refusals → `EPERM`**: the deny list (commands), `clone` with any `CLONE_NEW*` flag, and for
//!    commands the argument rules: `ioctl` requests in `DENIED_IOCTLS` (`TIOCSTI`, `TIOCLINUX`,
//!    inode flags) and set-id bits in the mode of `chmod`, `open`, `mknod` and their relatives;
//! 3. **sockets**: `socket` refused for the families the profile's `SocketPolicy` excludes
//!    (`EAFNOSUPPORT` for unix-only, `EACCES` otherwise);
//! 4. **`ENOSYS`**: `clone3` (its flags sit behind a pointer a filter cannot read; glibc then falls
//!    back to `clone`) and, for commands, `openat2` (its mode likewise);
//! 5. (x86_64) any syscall number with the x32 bit set → `EPERM`. seccompiler's programs check the
//!    architecture but x32 calls report `AUDIT_ARCH_X86_64`, so they would pass every number
//!    comparison; this hand-built program closes that hole.

use crate::syscalls;
use hanzo_ipc::attest::SocketPolicy;
use hanzo_policy::profile::{
    AllowList, SandboxProfile, Syscalls, COMMAND_ENOSYS_SYSCALLS, DENIED_IOCTLS, SETID_MODE_ARGS,
};
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

/// The errno for a refused `socket` when no family is allowed, or not this one (inet only):
/// "permission to create a socket … is denied".
pub const SOCKET_ERRNO: i32 = libc::EACCES;

/// Why a profile's seccomp filters could not be built.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    /// A syscall name with no number on this architecture.
    #[error(
        "the profile names syscall {0:?}, which this build does not know on this architecture"
    )]
    UnknownSyscall(String),
    /// seccompiler could not compile the rules.
    #[error("compiling the seccomp filter: {0}")]
    Compile(#[from] seccompiler::BackendError),
}

/// The compiled filters of a profile and what they refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterSet {
    /// In installation order.
    pub programs: Vec<BpfProgram>,
    /// The syscalls refused outright, by name (for attestation).
    pub denied_syscalls: Vec<String>,
    /// Which socket families and types may be created.
    pub sockets: SocketPolicy,
    /// Whether `unshare`/`clone` of new namespaces is refused.
    pub namespace_creation_denied: bool,
    /// Whether the x32 syscall ABI is refused (its numbers would slip past the rules).
    pub x32_denied: bool,
    /// The allow-list the first program enforces, if any.
    pub allow_list: Option<&'static AllowList>,
    /// Whether the rules for commands (refused ioctls, syscalls answered ENOSYS) are in the set.
    pub command_rules: bool,
}

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;
#[cfg(target_arch = "riscv64")]
const ARCH: TargetArch = TargetArch::riscv64;

fn compile(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    mismatch: SeccompAction,
    matched: SeccompAction,
) -> Result<BpfProgram, FilterError> {
    let filter = SeccompFilter::new(rules, mismatch, matched, ARCH)?;
    Ok(BpfProgram::try_from(filter)?)
}

fn errno(e: i32) -> SeccompAction {
    SeccompAction::Errno(e.cast_unsigned())
}

/// `(arg & bit) == bit` on the low 32 bits of argument `index`.
fn bit_set(index: u8, bit: u64) -> Result<SeccompRule, FilterError> {
    Ok(SeccompRule::new(vec![SeccompCondition::new(
        index,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::MaskedEq(bit),
        bit,
    )?])?)
}

/// Builds the filters `profile` asks for.
pub fn build(profile: &SandboxProfile) -> Result<FilterSet, FilterError> {
    let mut programs = Vec::new();
    let allow_list = match profile.syscalls {
        Syscalls::AllowList(list) => Some(list),
        Syscalls::DenyList { .. } => None,
    };
    let command_rules = profile.command_rules();

    // 1. The allow-list.
    if let Some(list) = allow_list {
        let mut allowed: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
        for name in &list.syscalls {
            // A name of another architecture (`open` on aarch64) is simply absent here.
            if let Some(nr) = syscalls::number(name) {
                allowed.insert(nr, Vec::new());
            }
        }
        // Decided by the programs below, not by the list.
        if profile.deny_namespace_creation {
            allowed.insert(libc::SYS_clone3, Vec::new());
        }
        if profile.sockets != SocketPolicy::None {
            allowed.insert(libc::SYS_socket, Vec::new());
        }
        programs.push(compile(allowed, SeccompAction::Trap, SeccompAction::Allow)?);
    }

    // 2. Refusals with EPERM.
    let mut deny: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    if allow_list.is_none() {
        for name in profile.denied_syscalls() {
            let nr = syscalls::number(name)
                .ok_or_else(|| FilterError::UnknownSyscall(name.to_string()))?;
            // An empty rule chain matches the syscall unconditionally.
            deny.insert(nr, Vec::new());
        }
    }
    if profile.deny_namespace_creation {
        if let std::collections::btree_map::Entry::Vacant(slot) = deny.entry(libc::SYS_clone) {
            // One rule per flag: the rules of a chain are alternatives, so any set flag matches.
            // The flags all live in the low 32 bits of the first argument.
            let rules = CLONE_NEW_FLAGS
                .iter()
                .map(|&flag| bit_set(0, flag))
                .collect::<Result<Vec<_>, _>>()?;
            slot.insert(rules);
        }
    }
    if command_rules {
        let ioctls = DENIED_IOCTLS
            .iter()
            .map(|&(_, request)| {
                Ok(SeccompRule::new(vec![SeccompCondition::new(
                    1,
                    SeccompCmpArgLen::Dword,
                    SeccompCmpOp::Eq,
                    request,
                )?])?)
            })
            .collect::<Result<Vec<_>, FilterError>>()?;
        deny.entry(libc::SYS_ioctl).or_default().extend(ioctls);
        for &(name, index) in SETID_MODE_ARGS {
            let Some(nr) = syscalls::number(name) else {
                continue;
            };
            let rules = deny.entry(nr).or_default();
            if rules.is_empty() && profile.denied_syscalls().contains(&name) {
                continue; // refused outright already
            }
            rules.push(bit_set(index, u64::from(libc::S_ISUID))?);
            rules.push(bit_set(index, u64::from(libc::S_ISGID))?);
        }
    }
    if !deny.is_empty() {
        programs.push(compile(deny, SeccompAction::Allow, errno(libc::EPERM))?);
    }

    // 3. Sockets.
    let socket_rules: Option<(Vec<SeccompRule>, i32)> = match profile.sockets {
        SocketPolicy::Any => None,
        // Under an allow-list without `socket`, the call already stops the process.
        SocketPolicy::None if allow_list.is_some() => None,
        SocketPolicy::None => Some((Vec::new(), SOCKET_ERRNO)),
        SocketPolicy::UnixOnly => Some((
            vec![SeccompRule::new(vec![SeccompCondition::new(
                0,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Ne,
                libc::AF_UNIX as u64,
            )?])?],
            // The answer a kernel without that family gives.
            libc::EAFNOSUPPORT,
        )),
        SocketPolicy::InetOnly => {
            let not = |family: i32| {
                SeccompCondition::new(
                    0,
                    SeccompCmpArgLen::Dword,
                    SeccompCmpOp::Ne,
                    u64::from(family.cast_unsigned()),
                )
            };
            // The conditions of one rule must all hold: neither inet family.
            Some((
                vec![SeccompRule::new(vec![
                    not(libc::AF_INET)?,
                    not(libc::AF_INET6)?,
                ])?],
                SOCKET_ERRNO,
            ))
        }
    };
    if let Some((rules, e)) = socket_rules {
        programs.push(compile(
            BTreeMap::from([(libc::SYS_socket, rules)]),
            SeccompAction::Allow,
            errno(e),
        )?);
    }

    // 4. ENOSYS: what a filter cannot inspect, so that libc falls back to what it can.
    let mut enosys: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    if profile.deny_namespace_creation {
        enosys.insert(libc::SYS_clone3, Vec::new());
    }
    if command_rules {
        for name in COMMAND_ENOSYS_SYSCALLS {
            if let Some(nr) = syscalls::number(name) {
                enosys.insert(nr, Vec::new());
            }
        }
    }
    if !enosys.is_empty() {
        programs.push(compile(enosys, SeccompAction::Allow, errno(libc::ENOSYS))?);
    }

    // 5. x32 syscall numbers.
    let x32_denied = cfg!(target_arch = "x86_64");
    if x32_denied {
        programs.push(x32_filter());
    }

    Ok(FilterSet {
        programs,
        denied_syscalls: profile
            .denied_syscalls()
            .iter()
            .map(|s| s.to_string())
            .collect(),
        sockets: profile.sockets,
        namespace_creation_denied: profile.deny_namespace_creation,
        x32_denied,
        allow_list,
        command_rules,
    })
}

/// Only the socket filter of `child` where it is stricter than `parent`'s, for a command whose
/// profile nests inside its launcher's (which already carries every other program).
pub fn nested_programs(
    child: &SandboxProfile,
    parent: &SandboxProfile,
) -> Result<Vec<BpfProgram>, FilterError> {
    if child.sockets == parent.sockets {
        return Ok(Vec::new());
    }
    let only_sockets = SandboxProfile {
        syscalls: Syscalls::DenyList {
            denied: &[],
            command_rules: false,
        },
        deny_namespace_creation: false,
        ..child.clone()
    };
    let set = build(&only_sockets)?;
    // Drop the x32 program: the parent has it.
    Ok(set
        .programs
        .into_iter()
        .filter(|p| *p != x32_filter())
        .collect())
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

/// The number of the syscall called `name` on this architecture.
pub fn syscall_number(name: &str) -> Option<i64> {
    syscalls::number(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hanzo_ipc::Role;
    use hanzo_policy::isolation::Tier;
    use hanzo_policy::profile::{
        allow_lists, command_profile, launcher_profile, profile_for, CommandProfile,
        ProfileContext, BASE_DENIED_SYSCALLS, COMMAND_DENIED_SYSCALLS,
    };

    #[test]
    fn every_denied_syscall_has_a_number() {
        for name in BASE_DENIED_SYSCALLS.iter().chain(COMMAND_DENIED_SYSCALLS) {
            assert!(syscall_number(name).is_some(), "{name}");
        }
    }

    #[test]
    fn every_allow_listed_name_is_a_syscall_of_x86_64_or_this_architecture() {
        for list in allow_lists() {
            for name in &list.syscalls {
                assert!(
                    syscall_number(name).is_some() || cfg!(not(target_arch = "x86_64")),
                    "{}: {name} is not a syscall",
                    list.file()
                );
            }
        }
    }

    #[test]
    fn model_profile_compiles_to_an_allow_list_and_refusals() {
        let set = build(&profile_for(Role::Model, &ProfileContext::default())).expect("builds");
        // allow-list, clone flags (EPERM), clone3 (ENOSYS), x32.
        assert_eq!(
            set.programs.len(),
            if cfg!(target_arch = "x86_64") { 4 } else { 3 }
        );
        assert_eq!(set.sockets, SocketPolicy::None);
        assert_eq!(set.allow_list.map(|l| l.name), Some("model"));
        assert!(set.namespace_creation_denied);
        assert!(set.denied_syscalls.iter().any(|s| s == "ptrace"));
        assert!(!set.command_rules);
    }

    #[test]
    fn broker_profile_admits_sockets_through_its_list() {
        let set = build(&profile_for(Role::Broker, &ProfileContext::default())).expect("builds");
        assert_eq!(set.sockets, SocketPolicy::Any);
        assert_eq!(
            set.programs.len(),
            if cfg!(target_arch = "x86_64") { 4 } else { 3 }
        );
    }

    #[test]
    fn commands_get_the_deny_list_the_rules_and_their_socket_filter() {
        let ctx = ProfileContext {
            workspace: Some("/w".into()),
            run_dir: Some("/r".into()),
            ..ProfileContext::default()
        };
        let p = command_profile(Role::Tools, &CommandProfile::bash(Tier::A), &ctx, Tier::A)
            .expect("profile");
        let set = build(&p).expect("builds");
        assert!(set.allow_list.is_none() && set.command_rules);
        assert_eq!(set.sockets, SocketPolicy::None);
        // EPERM, sockets, ENOSYS, x32.
        assert_eq!(
            set.programs.len(),
            if cfg!(target_arch = "x86_64") { 4 } else { 3 }
        );
        // Nested in a tier-B launcher, a hook adds only its socket filter.
        let launcher = launcher_profile(Role::Tools, &ctx, Tier::B);
        let hook =
            command_profile(Role::Tools, &CommandProfile::hook(), &ctx, Tier::B).expect("hook");
        assert_eq!(nested_programs(&hook, &launcher).expect("nested").len(), 1);
        let bash = command_profile(Role::Tools, &CommandProfile::bash(Tier::B), &ctx, Tier::B)
            .expect("bash");
        assert!(nested_programs(&bash, &launcher)
            .expect("nested")
            .is_empty());
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
