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
    /// Also deny socket(AF_UNIX): no connection to a named socket (the daemon's control
    /// socket included; Landlock cannot restrict those before ABI 9). socketpair() stays.
    pub no_unix: bool,
    /// Run with what the kernel supports instead of failing on a missing feature.
    pub best_effort: bool,
    /// Print what the kernel supports (JSON) and exit.
    pub probe: bool,
    /// The program and its arguments.
    pub program: Vec<OsString>,
}

/// Flags that take one value, in the order `to_args` writes them.
const VALUE_FLAGS: &[&str] = &[
    "--env",
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
            "--best-effort",
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
        assert!(o.no_net && o.no_unix && o.best_effort && !o.probe);
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
            "--no-unix",
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
