//! The seccomp filters of `kerneld-sandbox` (issue #24). Three, stacked (the kernel runs
//! every one and the strictest answer wins):
//!
//! - EPERM: ptrace, process_vm_readv/writev and io_uring (its socket and connect
//!   operations would pass the rules below), unless `--relax process-rules`; under
//!   `--no-net` socket() of any family but AF_UNIX and AF_NETLINK (AF_UNIX too with
//!   `--no-unix`). Any other architecture's calls (int 0x80) kill the process.
//! - EACCES, under `--no-connect`: connect, bind, listen, accept, accept4, sendmsg,
//!   sendmmsg, and sendto with an address. CUDA needs to *create* AF_UNIX sockets (cuInit
//!   fails with Error 304 without two SOCK_SEQPACKET ones; measured on an H200, driver
//!   580) but was never seen to connect, bind or send through them; with these refused a
//!   socket can reach no named or abstract socket (the daemon's control socket, systemd,
//!   D-Bus, nvidia-persistenced), accept from nobody, and pass no fd. socketpair() is left:
//!   it reaches only the process itself. seccomp cannot see a socket's family in connect,
//!   so the rule holds for every family (TCP too, already refused by `--no-net`).
//! - ENOSYS on x86_64 for x32 system calls (numbers with bit 30 set): the other filters
//!   match numbers exactly, and a kernel with x32 enabled would run `connect` as 0x4000002a.

use std::collections::BTreeMap;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

use super::apply::{fail, SetupError, Warnings};
use super::options::{Options, Relax};

type Rules = BTreeMap<i64, Vec<SeccompRule>>;

/// The EPERM filter's rules.
pub fn process_and_socket_rules(o: &Options) -> Result<Rules, String> {
    let mut rules = Rules::new();
    if !o.relax.contains(&Relax::ProcessRules) {
        for nr in [
            libc::SYS_ptrace,
            libc::SYS_process_vm_readv,
            libc::SYS_process_vm_writev,
            libc::SYS_io_uring_setup,
            libc::SYS_io_uring_enter,
            libc::SYS_io_uring_register,
        ] {
            rules.insert(nr, vec![]);
        }
    }
    let cond = |op, af: i32| {
        SeccompCondition::new(0, SeccompCmpArgLen::Dword, op, af as u64).map_err(|e| e.to_string())
    };
    let rule = |conds| SeccompRule::new(conds).map_err(|e| e.to_string());
    if o.no_net {
        // One rule: the family is none of the allowed ones.
        let mut allowed = vec![libc::AF_NETLINK];
        if !o.no_unix {
            allowed.push(libc::AF_UNIX);
        }
        let conds = allowed
            .into_iter()
            .map(|af| cond(SeccompCmpOp::Ne, af))
            .collect::<Result<Vec<_>, _>>()?;
        rules.insert(libc::SYS_socket, vec![rule(conds)?]);
    } else if o.no_unix {
        rules.insert(
            libc::SYS_socket,
            vec![rule(vec![cond(SeccompCmpOp::Eq, libc::AF_UNIX)?])?],
        );
    }
    Ok(rules)
}

/// What `--no-connect` refuses whatever the arguments: every call that reaches another
/// socket or passes a descriptor (sendto is refused only with an address: see below).
const REACH_ALWAYS: [libc::c_long; 7] = [
    libc::SYS_connect,
    libc::SYS_bind,
    libc::SYS_listen,
    libc::SYS_accept,
    libc::SYS_accept4,
    libc::SYS_sendmsg,
    libc::SYS_sendmmsg,
];

/// The EACCES filter's rules (`--no-connect`); empty without it.
pub fn reach_rules(o: &Options) -> Result<Rules, String> {
    let mut rules = Rules::new();
    if !o.no_connect {
        return Ok(rules);
    }
    for nr in REACH_ALWAYS {
        rules.insert(nr, vec![]);
    }
    // send(2) is sendto with a NULL address (x86_64 and aarch64 have no send syscall):
    // that one stays, for connected sockets (a socketpair's).
    let with_address = SeccompCondition::new(4, SeccompCmpArgLen::Qword, SeccompCmpOp::Ne, 0)
        .map_err(|e| e.to_string())?;
    rules.insert(
        libc::SYS_sendto,
        vec![SeccompRule::new(vec![with_address]).map_err(|e| e.to_string())?],
    );
    Ok(rules)
}

fn compile(rules: Rules, errno: i32) -> Result<BpfProgram, String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| e.to_string())?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())
}

/// x86_64: ENOSYS for every x32 system call (nr >= 0x40000000); other architectures: none.
fn x32_guard() -> Option<BpfProgram> {
    if std::env::consts::ARCH != "x86_64" {
        return None;
    }
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
    const X32_BIT: u32 = 0x4000_0000;
    let i = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    Some(vec![
        i(LD_W_ABS, 0, 0, 4),                                          // 0: A = arch
        i(JEQ_K, 0, 3, AUDIT_ARCH_X86_64),                             // 1: not x86_64: allow (5)
        i(LD_W_ABS, 0, 0, 0),                                          // 2: A = nr
        i(JGE_K, 0, 1, X32_BIT), // 3: below the x32 bit: allow (5)
        i(RET_K, 0, 0, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32), // 4
        i(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW), // 5
    ])
}

/// Builds and installs the filters (after no_new_privs).
pub fn install(o: &Options, warnings: &mut Warnings) -> Result<(), SetupError> {
    let build = || -> Result<Vec<BpfProgram>, String> {
        let mut programs = vec![compile(process_and_socket_rules(o)?, libc::EPERM)?];
        let reach = reach_rules(o)?;
        if !reach.is_empty() {
            programs.push(compile(reach, libc::EACCES)?);
        }
        programs.extend(x32_guard());
        Ok(programs)
    };
    let result = build().and_then(|programs| {
        programs
            .iter()
            .try_for_each(|p| seccompiler::apply_filter(p).map_err(|e| e.to_string()))
    });
    match result {
        Ok(()) => Ok(()),
        Err(e) if o.best_effort => {
            warnings.push(format!("no seccomp filter: {e}"));
            Ok(())
        }
        Err(e) => fail("seccomp", e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_connect_refuses_every_way_to_reach_another_socket_and_keeps_send() {
        let o = Options {
            no_connect: true,
            ..Options::default()
        };
        let r = reach_rules(&o).unwrap();
        for nr in REACH_ALWAYS {
            assert_eq!(r.get(&nr).map(Vec::len), Some(0), "syscall {nr}: always");
        }
        assert_eq!(
            r.get(&libc::SYS_sendto).map(Vec::len),
            Some(1),
            "sendto: only with an address"
        );
        assert!(!r.contains_key(&libc::SYS_socket), "sockets may be created");
        assert!(reach_rules(&Options::default()).unwrap().is_empty());
    }

    #[test]
    fn relaxing_the_process_rules_drops_only_them() {
        let strict = Options {
            no_net: true,
            ..Options::default()
        };
        let r = process_and_socket_rules(&strict).unwrap();
        assert!(r.contains_key(&libc::SYS_ptrace) && r.contains_key(&libc::SYS_socket));
        let relaxed = Options {
            relax: vec![Relax::ProcessRules],
            ..strict
        };
        let r = process_and_socket_rules(&relaxed).unwrap();
        assert_eq!(r.keys().collect::<Vec<_>>(), [&libc::SYS_socket]);
    }

    #[test]
    fn the_filters_compile() {
        let o = Options {
            no_net: true,
            no_connect: true,
            ..Options::default()
        };
        assert!(compile(process_and_socket_rules(&o).unwrap(), libc::EPERM).is_ok());
        assert!(compile(reach_rules(&o).unwrap(), libc::EACCES).is_ok());
        if cfg!(target_arch = "x86_64") {
            assert_eq!(x32_guard().unwrap().len(), 6);
        }
    }
}
