//! Applying the restrictions of `kerneld-sandbox`, in the order PROCESS_MODEL.md fixes:
//! rlimits, core dumps off, groups/gid/uid, no_new_privs, Landlock, seccomp (seccomp.rs),
//! then execve with exactly the `--env` environment (plus `--pass-env`). Every step either holds or is an error that
//! names it (the binary exits 125 and nothing runs), unless `--best-effort` lets a
//! feature the kernel lacks go (a uid switch never goes: running as the wrong user is
//! worse than not running).

use std::ffi::{CString, OsStr};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::options::{Options, ProcWrite, Relax};
use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};

/// The Landlock ABI whose rights the sandbox asks for: 6 has everything it uses
/// (IOCTL_DEV from 5, TCP rules from 4, signal and abstract-socket scoping from 6).
const TARGET_ABI: ABI = ABI::V6;

/// A step that could not be applied.
#[derive(Debug)]
pub struct SetupError {
    pub step: &'static str,
    pub message: String,
}

impl std::fmt::Display for SetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "kerneld-sandbox: {}: {}", self.step, self.message)
    }
}

pub(super) fn fail<T>(step: &'static str, message: impl Into<String>) -> Result<T, SetupError> {
    Err(SetupError {
        step,
        message: message.into(),
    })
}

/// What could not be enforced under `--best-effort` (said on stderr before the program runs).
pub type Warnings = Vec<String>;

/// Applies everything and execs the program; returns only on failure.
pub fn apply_and_exec(o: &Options) -> SetupError {
    let mut warnings = Warnings::new();
    match apply(o, &mut warnings) {
        Ok(()) => {}
        Err(e) => return e,
    }
    for w in &warnings {
        eprintln!("kerneld-sandbox: warning (--best-effort): {w}");
    }
    exec(o)
}

fn apply(o: &Options, warnings: &mut Warnings) -> Result<(), SetupError> {
    // Open every path first, with the caller's rights: after the uid switch the runner
    // user may not even traverse the directories above them.
    let rules = open_rules(o)?;
    limits(o)?;
    let death_signal = parent_death_signal();
    let parent = nix::unistd::getppid();
    switch_user(o)?;
    restore_parent_death_signal(death_signal, parent)?;
    // SAFETY: plain prctl calls with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return fail("no_new_privs", std::io::Error::last_os_error().to_string());
    }
    landlock(o, rules, warnings)?;
    super::seccomp::install(o, warnings)?;
    Ok(())
}

/// Landlock's rights for each kind of path option.
fn rights(kind: &str) -> BitFlags<AccessFs> {
    // Not `AccessFs::from_read`: that includes Execute.
    let read = AccessFs::ReadFile | AccessFs::ReadDir;
    match kind {
        "ro" => read,
        "exec" => read | AccessFs::Execute,
        // Everything but executing what was written and ioctl on devices: a runner
        // cannot plant a program for itself or for a later runner.
        "rw" => AccessFs::from_all(TARGET_ABI) & !AccessFs::Execute & !AccessFs::IoctlDev,
        "dev" => AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev,
        _ => unreachable!("rights of an unknown kind {kind}"),
    }
}

struct Rule {
    fd: PathFd,
    access: BitFlags<AccessFs>,
}

fn path_rule(kind: &str, p: &Path) -> Result<Rule, SetupError> {
    let meta = std::fs::metadata(p)
        .or_else(|e| fail("landlock", format!("--{kind} {}: {e}", p.display())))?;
    let fd =
        PathFd::new(p).or_else(|e| fail("landlock", format!("--{kind} {}: {e}", p.display())))?;
    let mut access = rights(kind);
    if !meta.is_dir() {
        // Rights on a file are the file rights only (Landlock refuses the others).
        access &= AccessFs::from_file(TARGET_ABI);
    }
    Ok(Rule { fd, access })
}

fn open_rules(o: &Options) -> Result<Vec<Rule>, SetupError> {
    let mut rules = Vec::new();
    for (kind, paths) in o.paths() {
        for p in paths {
            rules.push(path_rule(kind, p)?);
        }
    }
    for p in devices_from_env(o)? {
        rules.push(path_rule("dev", &p)?);
    }
    if let Some(rule) = proc_rule(o.proc_write)? {
        rules.push(rule);
    }
    Ok(rules)
}

/// `--dev-from-env`: the nodes named by the variables of our own environment.
fn devices_from_env(o: &Options) -> Result<Vec<PathBuf>, SetupError> {
    let mut nodes = Vec::new();
    for (var, prefix) in &o.dev_from_env {
        let value = std::env::var(var).unwrap_or_default();
        let numbers = device_numbers(&value).map_err(|why| SetupError {
            step: "devices",
            message: format!(
                "--dev-from-env {var}={}: {var}={value:?} {why} (on a Slurm node: did the step \
                 get a GPU? gres.conf needs File=/dev/nvidia[...])",
                prefix.display()
            ),
        })?;
        for n in numbers {
            nodes.push(PathBuf::from(format!("{}{n}", prefix.display())));
        }
    }
    Ok(nodes)
}

/// "0,2", "1-3", "0,2-3": the device numbers a list names (Slurm's SLURM_STEP_GPUS).
pub fn device_numbers(value: &str) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for part in value.split(',').map(str::trim) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b) = match (a.parse::<u32>(), b.parse::<u32>()) {
            (Ok(a), Ok(b)) if a <= b && b - a < 1024 => (a, b),
            _ => return Err("is not a list of device numbers".into()),
        };
        out.extend(a..=b);
    }
    Ok(out)
}

/// `--proc-write`: Landlock's WriteFile and Truncate (fopen "wb" truncates) on the part of
/// /proc it names. `/proc/<pid>` is this process's, which execve keeps.
///
/// Landlock ties a rule to the inode behind the path, and procfs makes a new inode each
/// time it looks a pid directory up again: once the kernel evicts the dentry (memory
/// pressure, `drop_caches`), a rule on /proc/<pid>/task no longer covers it (measured on
/// kernel 6.18: writes refused after `echo 2 > /proc/sys/vm/drop_caches`). An open file
/// keeps the dentry, so a non-close-on-exec O_PATH descriptor of the directory is left to
/// the program on purpose; it names only the program's own process.
fn proc_rule(scope: ProcWrite) -> Result<Option<Rule>, SetupError> {
    let pid = std::process::id();
    let path = match scope {
        ProcWrite::None => return Ok(None),
        ProcWrite::Task => PathBuf::from(format!("/proc/{pid}/task")),
        ProcWrite::Pid => PathBuf::from(format!("/proc/{pid}")),
        ProcWrite::All => PathBuf::from("/proc"),
    };
    let fd = PathFd::new(&path)
        .or_else(|e| fail("landlock", format!("--proc-write {}: {e}", path.display())))?;
    if scope != ProcWrite::All {
        // SAFETY: F_DUPFD of a valid descriptor; the copy (without FD_CLOEXEC) is
        // deliberately never closed here.
        if unsafe { libc::fcntl(fd.as_fd().as_raw_fd(), libc::F_DUPFD, 3) } < 0 {
            return fail(
                "landlock",
                format!(
                    "--proc-write: keeping {} open: {}",
                    path.display(),
                    std::io::Error::last_os_error()
                ),
            );
        }
    }
    Ok(Some(Rule {
        fd,
        access: AccessFs::WriteFile | AccessFs::Truncate,
    }))
}

fn limits(o: &Options) -> Result<(), SetupError> {
    use nix::sys::resource::{setrlimit, Resource};
    let set = |res: Resource, name: &str, v: u64| {
        setrlimit(res, v, v).or_else(|e| fail("rlimits", format!("{name}={v}: {e}")))
    };
    if let Some(n) = o.nofile {
        set(Resource::RLIMIT_NOFILE, "nofile", n)?;
    }
    if let Some(n) = o.nproc {
        set(Resource::RLIMIT_NPROC, "nproc", n)?;
    }
    if let Some(n) = o.as_bytes {
        set(Resource::RLIMIT_AS, "as-bytes", n)?;
    }
    set(Resource::RLIMIT_CORE, "core", 0)?;
    Ok(())
}

/// The parent-death signal the caller set (the daemon sets SIGKILL on its workers); 0: none.
fn parent_death_signal() -> libc::c_int {
    let mut signal: libc::c_int = 0;
    // SAFETY: PR_GET_PDEATHSIG writes one int through the pointer.
    unsafe {
        libc::prctl(
            libc::PR_GET_PDEATHSIG,
            &mut signal as *mut libc::c_int,
            0,
            0,
            0,
        )
    };
    signal
}

/// A uid switch clears the parent-death signal: set it again, and stop if the parent
/// died meanwhile (the signal would never come).
fn restore_parent_death_signal(
    signal: libc::c_int,
    parent: nix::unistd::Pid,
) -> Result<(), SetupError> {
    if signal == 0 {
        return Ok(());
    }
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong, 0, 0, 0) } != 0 {
        return fail("pdeathsig", std::io::Error::last_os_error().to_string());
    }
    if nix::unistd::getppid() != parent {
        return fail("pdeathsig", "the parent process is gone");
    }
    Ok(())
}

/// setgroups([]) + gid + uid (all three ids each), then no capability survives exec.
fn switch_user(o: &Options) -> Result<(), SetupError> {
    use nix::unistd::{getgid, getgroups, getuid, setgroups, setresgid, setresuid, Gid, Uid};
    if let (Some(uid), Some(gid)) = (o.uid, o.gid) {
        let (uid, gid) = (Uid::from_raw(uid), Gid::from_raw(gid));
        if super::probe::can_setuid() {
            setgroups(&[]).or_else(|e| fail("setgroups", format!("clearing the groups: {e}")))?;
            setresgid(gid, gid, gid).or_else(|e| fail("setgid", format!("gid {gid}: {e}")))?;
            setresuid(uid, uid, uid).or_else(|e| fail("setuid", format!("uid {uid}: {e}")))?;
        } else if getuid() != uid || getgid() != gid {
            return fail(
                "setuid",
                format!(
                    "switching to uid {uid} gid {gid} needs root (or CAP_SETUID and CAP_SETGID); \
                     this process is uid {} gid {}",
                    getuid(),
                    getgid()
                ),
            );
        } else if getgroups()
            .map(|g| g.iter().any(|g| *g != gid))
            .unwrap_or(true)
        {
            return fail(
                "setgroups",
                "already uid/gid as asked but holding supplementary groups that cannot be \
                 dropped without CAP_SETGID",
            );
        }
        if nix::unistd::geteuid() != uid {
            return fail(
                "setuid",
                format!("still euid {} after the switch", nix::unistd::geteuid()),
            );
        }
    }
    drop_capabilities()
}

/// The program gets no capability, whatever uid it runs as: not the ambient ones a
/// daemon may have from systemd (they would survive exec), and not root's (a root
/// program without them cannot read a non-dumpable process's memory or environment,
/// override file permissions or switch users). no_new_privs then keeps exec from
/// granting any back.
fn drop_capabilities() -> Result<(), SetupError> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    // SAFETY: prctl with integer arguments; capset reads a valid header and two data words.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        libc::prctl(libc::PR_SET_KEEPCAPS, 0, 0, 0, 0);
        // The bounding set needs CAP_SETPCAP; without it there is nothing to drop from.
        for cap in 0..64 {
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
        let header = Header {
            version: LINUX_CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        if libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr()) != 0 {
            return fail("capabilities", std::io::Error::last_os_error().to_string());
        }
    }
    Ok(())
}

fn landlock(o: &Options, rules: Vec<Rule>, warnings: &mut Warnings) -> Result<(), SetupError> {
    let level = if o.best_effort {
        CompatLevel::BestEffort
    } else {
        CompatLevel::HardRequirement
    };
    let err = |e: landlock::RulesetError| SetupError {
        step: "landlock",
        message: format!(
            "{e} (the kernel needs Landlock ABI >= 6: Linux 6.12+ with `landlock` in the lsm= \
             list; --best-effort runs with what it has)"
        ),
    };
    let mut ruleset = Ruleset::default()
        .set_compatibility(level)
        .handle_access(AccessFs::from_all(TARGET_ABI))
        .map_err(err)?;
    if !o.relax.contains(&Relax::Scoping) {
        ruleset = ruleset.scope(Scope::from_all(TARGET_ABI)).map_err(err)?;
    }
    if o.no_net {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(TARGET_ABI))
            .map_err(err)?;
    }
    let mut created = ruleset.create().map_err(err)?.no_new_privs(true);
    for r in rules {
        created = created
            .add_rule(PathBeneath::new(r.fd, r.access))
            .map_err(err)?;
    }
    let status = created.restrict_self().map_err(err)?;
    match status.ruleset {
        RulesetStatus::FullyEnforced => Ok(()),
        other if o.best_effort => {
            warnings.push(format!("Landlock is {other:?} on this kernel"));
            Ok(())
        }
        other => fail("landlock", format!("the ruleset is only {other:?}")),
    }
}

/// The program, found on the `--env` PATH when it has no slash.
fn resolve(program: &OsStr, env: &[(String, String)]) -> Option<PathBuf> {
    let p = Path::new(program);
    if program.as_bytes().contains(&b'/') {
        return Some(p.to_path_buf());
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())?;
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(p))
        .find(|c| c.is_file())
}

/// The program's environment: the `--env` variables, then each `--pass-env` variable of
/// our own environment that `--env` does not set.
fn environment(o: &Options) -> Vec<(String, String)> {
    let mut env = o.env.clone();
    for k in &o.pass_env {
        if env.iter().any(|(name, _)| name == k) {
            continue;
        }
        if let Ok(v) = std::env::var(k) {
            env.push((k.clone(), v));
        }
    }
    env
}

fn exec(o: &Options) -> SetupError {
    let Some(path) = resolve(&o.program[0], &o.env) else {
        return SetupError {
            step: "exec",
            message: format!(
                "{} not found (no slash, and not on the --env PATH)",
                o.program[0].to_string_lossy()
            ),
        };
    };
    let cstr = |b: &[u8]| CString::new(b.to_vec());
    let built = (|| -> Result<_, std::ffi::NulError> {
        let prog = cstr(path.as_os_str().as_bytes())?;
        let argv = o
            .program
            .iter()
            .map(|a| cstr(a.as_bytes()))
            .collect::<Result<Vec<_>, _>>()?;
        let envp = environment(o)
            .iter()
            .map(|(k, v)| cstr(format!("{k}={v}").as_bytes()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((prog, argv, envp))
    })();
    let (prog, argv, envp) = match built {
        Ok(t) => t,
        Err(e) => {
            return SetupError {
                step: "exec",
                message: format!("an argument holds a NUL byte: {e}"),
            }
        }
    };
    let e = nix::unistd::execve(&prog, &argv, &envp).unwrap_err();
    SetupError {
        step: "exec",
        message: format!(
            "{}: {e}{}",
            path.display(),
            if e == nix::errno::Errno::EACCES {
                " (is it beneath an --exec path?)"
            } else {
                ""
            }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_numbers_read_slurms_lists_and_ranges() {
        assert_eq!(device_numbers("0").unwrap(), [0]);
        assert_eq!(device_numbers("1,3").unwrap(), [1, 3]);
        assert_eq!(device_numbers("0-2,7").unwrap(), [0, 1, 2, 7]);
        for bad in ["", "gpu0", "3-1", "0-5000", "1,,2"] {
            assert!(device_numbers(bad).is_err(), "{bad:?}");
        }
    }
}
