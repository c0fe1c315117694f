//! The command line of `kerneld-sandbox` (docs: docs/PROCESS_MODEL.md, "kerneld-sandbox"):
//! parsed here once, and written back here once, so the daemon's policies and the binary
//! cannot disagree on a flag.
//!
//! `kerneld-sandbox [OPTIONS] -- PROGRAM [ARGS...]` or `kerneld-sandbox --probe`.
//! Hand-parsed rather than with clap: options repeat and their order matters to nobody,
//! but everything after `--` must reach the program untouched, and an unknown option must
//! be an error (exit 125), never passed through.

use std::ffi::OsString;
use std::path::PathBuf;

/// What the sandbox applies before it runs the program.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// The program's whole environment (`--env K=V`).
    pub env: Vec<(String, String)>,
    pub nofile: Option<u64>,
    pub nproc: Option<u64>,
    /// Address-space limit in bytes.
    pub as_bytes: Option<u64>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// Landlock: read files and list directories beneath.
    pub ro: Vec<PathBuf>,
    /// Landlock: read and execute beneath.
    pub exec: Vec<PathBuf>,
    /// Landlock: read, write, create, remove, make directories beneath.
    pub rw: Vec<PathBuf>,
    /// Landlock: read, write and ioctl on device nodes.
    pub dev: Vec<PathBuf>,
    /// No IP networking: Landlock denies TCP bind/connect, seccomp denies socket() of
    /// every family but AF_UNIX and AF_NETLINK (so UDP, raw and packet sockets too).
    pub no_net: bool,
    /// Also deny socket(AF_UNIX). CUDA cannot initialise without AF_UNIX sockets (it
    /// creates two); `no_connect` is what keeps them from reaching anything.
    pub no_unix: bool,
    /// Sockets (of any family: seccomp cannot see an fd's family) may be created but reach
    /// nothing: connect, bind, listen, accept, accept4, sendmsg, sendmmsg and sendto with
    /// an address are refused (EACCES). So no named or abstract socket is reached (the
    /// daemon's, systemd's, D-Bus's...), no fd is passed; socketpair() still works, and
    /// reaches only the process itself.
    pub no_connect: bool,
    /// Which part of /proc may be written (Landlock WriteFile and Truncate only): CUDA
    /// names its threads through /proc/self/task/<tid>/comm.
    pub proc_write: ProcWrite,
    /// Layers left off: only the daemon's GPU trial asks for this, to find which layer
    /// CUDA cannot live with (sandbox::widen).
    pub relax: Vec<Relax>,
    /// Device nodes named by an environment variable of kerneld-sandbox's own (`VAR`, the
    /// node path's prefix): on a Slurm compute node the step's GPUs (`SLURM_STEP_GPUS=1,3`
    /// with prefix `/dev/nvidia` grants /dev/nvidia1 and /dev/nvidia3).
    pub dev_from_env: Vec<(String, PathBuf)>,
    /// Variables the program gets from kerneld-sandbox's own environment when set there
    /// (an `--env` of the same name wins): what only the place it runs knows, such as
    /// the CUDA_VISIBLE_DEVICES Slurm gives a step.
    pub pass_env: Vec<String>,
    /// Run with what the kernel supports instead of failing on a missing feature.
    pub best_effort: bool,
    /// Print what the kernel supports (JSON) and exit.
    pub probe: bool,
    /// The program and its arguments.
    pub program: Vec<OsString>,
}

/// The part of /proc `--proc-write` opens for writing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProcWrite {
    /// Nothing under /proc is writable.
    #[default]
    None,
    /// `/proc/<own pid>/task`: the program's own threads (their `comm`, thread names).
    Task,
    /// `/proc/<own pid>`: everything of the program's own process.
    Pid,
    /// All of /proc (what DAC allows: for a non-root uid, files of its own processes).
    All,
}

impl ProcWrite {
    pub const fn as_str(self) -> &'static str {
        match self {
            ProcWrite::None => "none",
            ProcWrite::Task => "task",
            ProcWrite::Pid => "pid",
            ProcWrite::All => "all",
        }
    }

    fn parse(v: &str) -> Option<ProcWrite> {
        [
            ProcWrite::None,
            ProcWrite::Task,
            ProcWrite::Pid,
            ProcWrite::All,
        ]
        .into_iter()
        .find(|p| p.as_str() == v)
    }
}

/// A layer `--relax` leaves off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Relax {
    /// Landlock's scoping (signals to and abstract sockets of processes outside the sandbox).
    Scoping,
    /// The seccomp rules on ptrace, process_vm_readv/writev and io_uring.
    ProcessRules,
}

impl Relax {
    pub const fn as_str(self) -> &'static str {
        match self {
            Relax::Scoping => "scoping",
            Relax::ProcessRules => "process-rules",
        }
    }
}

/// Flags that take one value, in the order `to_args` writes them.
const VALUE_FLAGS: &[&str] = &[
    "--env",
    "--pass-env",
    "--dev-from-env",
    "--proc-write",
    "--relax",
    "--nofile",
    "--nproc",
    "--as-bytes",
    "--uid",
    "--gid",
    "--ro",
    "--exec",
    "--rw",
    "--dev",
];

impl Options {
    /// Parses the arguments after the program name.
    pub fn parse<I: IntoIterator<Item = OsString>>(args: I) -> Result<Options, String> {
        let mut o = Options::default();
        let mut it = args.into_iter();
        while let Some(arg) = it.next() {
            let Some(flag) = arg.to_str() else {
                return Err(format!(
                    "option {} is not UTF-8; put the program after `--`",
                    arg.to_string_lossy()
                ));
            };
            match flag {
                "--" => {
                    o.program = it.collect();
                    break;
                }
                "--no-net" => o.no_net = true,
                "--no-unix" => o.no_unix = true,
                "--no-connect" => o.no_connect = true,
                "--best-effort" => o.best_effort = true,
                "--probe" => o.probe = true,
                f if VALUE_FLAGS.contains(&f) => {
                    let value = it
                        .next()
                        .ok_or_else(|| format!("{f} needs a value"))?;
                    o.set(f, value)?;
                }
                f => {
                    return Err(format!(
                        "unknown option `{f}` (see `kerneld-sandbox --help`; the program goes after `--`)"
                    ))
                }
            }
        }
        if !o.probe && o.program.is_empty() {
            return Err(
                "no program to run: `kerneld-sandbox [OPTIONS] -- PROGRAM [ARGS...]`".into(),
            );
        }
        if o.uid.is_some() != o.gid.is_some() {
            return Err("--uid and --gid go together (a process with one but not the other keeps the caller's)".into());
        }
        Ok(o)
    }

    fn set(&mut self, flag: &str, value: OsString) -> Result<(), String> {
        let path = || -> Result<PathBuf, String> {
            let p = PathBuf::from(&value);
            if p.is_absolute() {
                Ok(p)
            } else {
                Err(format!("{flag} {}: the path must be absolute", p.display()))
            }
        };
        let text = || {
            value
                .to_str()
                .map(str::to_string)
                .ok_or_else(|| format!("{flag}: the value is not UTF-8"))
        };
        let number = || -> Result<u64, String> {
            let t = text()?;
            t.parse::<u64>()
                .map_err(|_| format!("{flag} {t}: expected a non-negative integer"))
        };
        let id = || -> Result<u32, String> {
            let n = number()?;
            u32::try_from(n).map_err(|_| format!("{flag} {n}: out of range"))
        };
        match flag {
            "--env" => {
                let t = text()?;
                let (k, v) = t
                    .split_once('=')
                    .ok_or_else(|| format!("--env {t}: expected NAME=VALUE"))?;
                if k.is_empty() || k.contains('\0') || v.contains('\0') {
                    return Err(format!("--env {t}: empty name or NUL byte"));
                }
                self.env.retain(|(name, _)| name != k);
                self.env.push((k.to_string(), v.to_string()));
            }
            "--pass-env" => {
                let t = text()?;
                if t.is_empty() || t.contains('=') || t.contains('\0') {
                    return Err(format!("--pass-env {t}: expected a variable name"));
                }
                if !self.pass_env.contains(&t) {
                    self.pass_env.push(t);
                }
            }
            "--dev-from-env" => {
                let t = text()?;
                let (var, prefix) = t
                    .split_once('=')
                    .filter(|(k, p)| !k.is_empty() && p.starts_with('/'))
                    .ok_or_else(|| {
                        format!("--dev-from-env {t}: expected VAR=/absolute/prefix (e.g. SLURM_STEP_GPUS=/dev/nvidia)")
                    })?;
                self.dev_from_env
                    .push((var.to_string(), PathBuf::from(prefix)));
            }
            "--proc-write" => {
                let t = text()?;
                self.proc_write = ProcWrite::parse(&t)
                    .ok_or_else(|| format!("--proc-write {t}: expected none, task, pid or all"))?;
            }
            "--relax" => {
                let t = text()?;
                let r = [Relax::Scoping, Relax::ProcessRules]
                    .into_iter()
                    .find(|r| r.as_str() == t)
                    .ok_or_else(|| format!("--relax {t}: expected scoping or process-rules"))?;
                if !self.relax.contains(&r) {
                    self.relax.push(r);
                }
            }
            "--nofile" => self.nofile = Some(number()?),
            "--nproc" => self.nproc = Some(number()?),
            "--as-bytes" => self.as_bytes = Some(number()?),
            "--uid" => self.uid = Some(id()?),
            "--gid" => self.gid = Some(id()?),
            "--ro" => self.ro.push(path()?),
            "--exec" => self.exec.push(path()?),
            "--rw" => self.rw.push(path()?),
            "--dev" => self.dev.push(path()?),
            _ => unreachable!("VALUE_FLAGS and set() list the same flags"),
        }
        Ok(())
    }

    /// The path options by kind (`ro`, `exec`, `rw`, `dev`: the flag without `--`).
    pub fn paths(&self) -> [(&'static str, &Vec<PathBuf>); 4] {
        [
            ("ro", &self.ro),
            ("exec", &self.exec),
            ("rw", &self.rw),
            ("dev", &self.dev),
        ]
    }

    /// The options as arguments again (without `--` and the program): what the daemon
    /// puts in a launcher. `Options::parse(to_args() + ["--", p])` gives back `self`.
    pub fn to_args(&self) -> Vec<String> {
        let mut a = Vec::new();
        let mut push = |flag: &str, v: String| {
            a.push(flag.to_string());
            a.push(v);
        };
        for (k, v) in &self.env {
            push("--env", format!("{k}={v}"));
        }
        for k in &self.pass_env {
            push("--pass-env", k.clone());
        }
        for (var, prefix) in &self.dev_from_env {
            push("--dev-from-env", format!("{var}={}", prefix.display()));
        }
        if self.proc_write != ProcWrite::None {
            push("--proc-write", self.proc_write.as_str().to_string());
        }
        for r in &self.relax {
            push("--relax", r.as_str().to_string());
        }
        let numbers = [
            ("--nofile", self.nofile),
            ("--nproc", self.nproc),
            ("--as-bytes", self.as_bytes),
            ("--uid", self.uid.map(u64::from)),
            ("--gid", self.gid.map(u64::from)),
        ];
        for (flag, v) in numbers {
            if let Some(v) = v {
                push(flag, v.to_string());
            }
        }
        for (kind, paths) in self.paths() {
            for p in paths {
                push(&format!("--{kind}"), p.display().to_string());
            }
        }
        for (flag, on) in [
            ("--no-net", self.no_net),
            ("--no-unix", self.no_unix),
            ("--no-connect", self.no_connect),
            ("--best-effort", self.best_effort),
        ] {
            if on {
                a.push(flag.to_string());
            }
        }
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Options, String> {
        Options::parse(args.iter().map(OsString::from))
    }

    #[test]
    fn every_option_is_read_and_the_program_is_left_untouched() {
        let o = parse(&[
            "--env",
            "A=1",
            "--env",
            "B=x=y",
            "--nofile",
            "64",
            "--nproc",
            "32",
            "--as-bytes",
            "1048576",
            "--uid",
            "990",
            "--gid",
            "991",
            "--ro",
            "/usr",
            "--exec",
            "/usr/bin/python3",
            "--rw",
            "/tmp/s",
            "--dev",
            "/dev/null",
            "--no-net",
            "--no-unix",
            "--no-connect",
            "--best-effort",
            "--proc-write",
            "task",
            "--relax",
            "scoping",
            "--dev-from-env",
            "SLURM_STEP_GPUS=/dev/nvidia",
            "--pass-env",
            "CUDA_VISIBLE_DEVICES",
            "--",
            "/usr/bin/python3",
            "--ro",
            "--",
            "-c",
        ])
        .unwrap();
        assert_eq!(
            o.env,
            vec![("A".into(), "1".into()), ("B".into(), "x=y".into())]
        );
        assert_eq!(
            (o.nofile, o.nproc, o.as_bytes),
            (Some(64), Some(32), Some(1 << 20))
        );
        assert_eq!((o.uid, o.gid), (Some(990), Some(991)));
        assert_eq!(o.ro, vec![PathBuf::from("/usr")]);
        assert_eq!(o.exec, vec![PathBuf::from("/usr/bin/python3")]);
        assert_eq!(o.rw, vec![PathBuf::from("/tmp/s")]);
        assert_eq!(o.dev, vec![PathBuf::from("/dev/null")]);
        assert!(o.no_net && o.no_unix && o.no_connect && o.best_effort && !o.probe);
        assert_eq!(o.proc_write, ProcWrite::Task);
        assert_eq!(o.relax, vec![Relax::Scoping]);
        assert_eq!(
            o.dev_from_env,
            vec![("SLURM_STEP_GPUS".into(), PathBuf::from("/dev/nvidia"))]
        );
        assert_eq!(o.pass_env, vec!["CUDA_VISIBLE_DEVICES".to_string()]);
        let program: Vec<&str> = o.program.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(program, ["/usr/bin/python3", "--ro", "--", "-c"]);
    }

    #[test]
    fn a_later_env_of_the_same_name_replaces_the_earlier() {
        let o = parse(&["--env", "A=1", "--env", "A=2", "--", "/bin/true"]).unwrap();
        assert_eq!(o.env, vec![("A".into(), "2".into())]);
    }

    #[test]
    fn options_written_back_parse_to_the_same() {
        let o = parse(&[
            "--env",
            "PATH=/usr/bin",
            "--nofile",
            "4096",
            "--uid",
            "1",
            "--gid",
            "2",
            "--ro",
            "/a b",
            "--rw",
            "/s",
            "--dev",
            "/dev/nvidia0",
            "--no-net",
            "--no-connect",
            "--proc-write",
            "all",
            "--relax",
            "process-rules",
            "--relax",
            "scoping",
            "--dev-from-env",
            "V=/dev/nvidia",
            "--pass-env",
            "V",
            "--",
            "/bin/sh",
        ])
        .unwrap();
        let mut again = o.to_args();
        again.extend(["--".to_string(), "/bin/sh".to_string()]);
        assert_eq!(
            Options::parse(again.into_iter().map(OsString::from)).unwrap(),
            o
        );
    }

    #[test]
    fn bad_input_is_an_error_that_names_the_option() {
        let cases: &[(&[&str], &str)] = &[
            (&["--ro", "usr", "--", "/bin/true"], "must be absolute"),
            (&["--nofile", "many", "--", "/bin/true"], "--nofile many"),
            (
                &["--uid", "99999999999", "--gid", "1", "--", "/bin/true"],
                "out of range",
            ),
            (&["--env", "NOEQUALS", "--", "/bin/true"], "NAME=VALUE"),
            (&["--env", "=v", "--", "/bin/true"], "empty name"),
            (
                &["--frobnicate", "--", "/bin/true"],
                "unknown option `--frobnicate`",
            ),
            (&["--ro"], "--ro needs a value"),
            (&["--no-net"], "no program to run"),
            (&["--uid", "5", "--", "/bin/true"], "go together"),
            (&["/bin/true"], "unknown option `/bin/true`"),
            (
                &["--proc-write", "everything", "--", "/bin/true"],
                "expected none, task, pid or all",
            ),
            (
                &["--relax", "landlock", "--", "/bin/true"],
                "--relax landlock",
            ),
            (
                &["--dev-from-env", "SLURM_STEP_GPUS", "--", "/bin/true"],
                "VAR=/absolute/prefix",
            ),
            (
                &["--dev-from-env", "V=dev/nvidia", "--", "/bin/true"],
                "VAR=/absolute/prefix",
            ),
            (&["--pass-env", "A=1", "--", "/bin/true"], "a variable name"),
        ];
        for (args, want) in cases {
            let e = parse(args).unwrap_err();
            assert!(e.contains(want), "{args:?}: {e}");
        }
    }

    #[test]
    fn probe_needs_no_program() {
        let o = parse(&["--probe"]).unwrap();
        assert!(o.probe && o.program.is_empty());
    }
}
