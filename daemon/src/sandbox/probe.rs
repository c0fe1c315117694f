//! What the running kernel and process can enforce: `kerneld-sandbox --probe` prints it,
//! the daemon runs that at start and reports it (log, `kernelctl version` and `gpus`).

pub use crate::wire::SandboxProbe as Probe;

/// What the sandbox needs from the kernel and lacks (uid switching is the policy's business).
/// A function, not a method: the type is the protocol's.
pub fn missing(p: &Probe) -> Vec<String> {
    let mut m = Vec::new();
    if p.landlock_abi < 6 {
        m.push(format!(
            "Landlock ABI {} (6 needed: filesystem, TCP and scoping rules)",
            p.landlock_abi
        ));
    }
    if !p.seccomp {
        m.push("seccomp filters".into());
    }
    if !p.no_new_privs {
        m.push("no_new_privs".into());
    }
    m
}

/// The kernel's Landlock ABI (landlock_create_ruleset with the VERSION flag).
fn landlock_abi() -> i64 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with the VERSION flag the kernel reads no attribute (NULL, size 0).
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    v.max(0)
}

fn seccomp_filters() -> bool {
    const SECCOMP_GET_ACTION_AVAIL: libc::c_uint = 2;
    let action: u32 = libc::SECCOMP_RET_ERRNO;
    // SAFETY: the kernel reads one u32 from a valid pointer.
    unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_GET_ACTION_AVAIL,
            0,
            &action as *const u32,
        ) == 0
    }
}

/// True when this process may switch to another uid and gid.
pub fn can_setuid() -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    const CAP_SETGID: u64 = 1 << 6;
    const CAP_SETUID: u64 = 1 << 7;
    eff & (CAP_SETGID | CAP_SETUID) == (CAP_SETGID | CAP_SETUID)
}

pub fn probe() -> Probe {
    let abi = landlock_abi();
    // SAFETY: a read-only prctl.
    let nnp = unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) } >= 0;
    Probe {
        landlock_abi: abi,
        landlock_fs: abi >= 1,
        landlock_net: abi >= 4,
        landlock_scope: abi >= 6,
        seccomp: seccomp_filters(),
        no_new_privs: nnp,
        can_setuid: can_setuid(),
        kernel: nix::sys::utsname::uname()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_default(),
    }
}
