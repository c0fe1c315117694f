//! `kerneld-sandbox [OPTIONS] -- PROGRAM [ARGS...]`: runs PROGRAM with exactly the given
//! environment, rlimits, user, Landlock rules and seccomp filter (see
//! docs/PROCESS_MODEL.md and `kerneld::sandbox`). `--probe` prints what the kernel
//! supports as one JSON object. Exit 125: the sandbox could not be set up (stderr says
//! which step and why) and nothing ran; otherwise the program's own status.

use std::process::ExitCode;

use kerneld::sandbox::{apply, probe, Options};

const USAGE: &str =
    "usage: kerneld-sandbox [--env K=V]... [--nofile N] [--nproc N] [--as-bytes N] \
[--uid UID --gid GID] [--ro PATH]... [--exec PATH]... [--rw PATH]... [--dev PATH]... \
[--no-net] [--no-unix] [--no-connect] [--proc-write none|task|pid|all] \
[--dev-from-env VAR=/dev/prefix]... [--pass-env NAME]... [--relax scoping|process-rules]... \
[--best-effort] -- PROGRAM [ARGS...]\n       kerneld-sandbox --probe";

fn main() -> ExitCode {
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    if args.first().and_then(|a| a.to_str()) == Some("--help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let opts = match Options::parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("kerneld-sandbox: {e}\n{USAGE}");
            return ExitCode::from(125);
        }
    };
    if opts.probe {
        println!(
            "{}",
            serde_json::to_string(&probe::probe()).unwrap_or_default()
        );
        return ExitCode::SUCCESS;
    }
    let e = apply::apply_and_exec(&opts);
    eprintln!("{e}");
    ExitCode::from(125)
}
