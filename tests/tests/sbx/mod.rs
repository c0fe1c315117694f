//! What the kerneld-sandbox tests share (sandbox.rs, sandbox_reach.rs): the options any
//! program needs, and running a program or Python code under the real binary.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

use kerneld::sandbox::policy::python_dirs;
use kerneld_e2e::*;

/// What any program needs: libraries readable, the loader executable.
pub fn base_args() -> Vec<String> {
    let mut a = Vec::new();
    for p in ["/usr", "/lib", "/lib64", "/etc/ld.so.cache"] {
        if Path::new(p).exists() {
            a.extend(["--ro".to_string(), p.to_string()]);
        }
    }
    for l in ["/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"] {
        if let Ok(real) = std::fs::canonicalize(l) {
            a.extend(["--exec".to_string(), real.display().to_string()]);
        }
    }
    a
}

/// The above plus the test Python's installation.
pub fn python_args() -> Vec<String> {
    let mut a = base_args();
    let (ro, exec) = python_dirs(&python());
    for p in ro {
        a.extend(["--ro".to_string(), p.display().to_string()]);
    }
    for p in exec {
        a.extend(["--exec".to_string(), p.display().to_string()]);
    }
    a
}

pub fn run(args: &[String], program: &[&str]) -> Output {
    Command::new(binary("kerneld-sandbox"))
        .args(args)
        .arg("--")
        .args(program)
        .output()
        .expect("run kerneld-sandbox")
}

/// Runs Python code in the sandbox with extra options; returns (status, stdout, stderr).
pub fn py(extra: &[String], code: &str) -> (i32, String, String) {
    let mut args = python_args();
    args.extend(extra.iter().cloned());
    let py = python();
    let o = run(&args, &[py.to_str().unwrap(), "-c", code]);
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

pub fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

pub fn landlock_here() -> bool {
    let v = sandbox_probe();
    if v["landlock_abi"].as_i64().unwrap_or(0) < 6 {
        eprintln!(
            "skipped: this kernel has Landlock ABI {} (6 needed)",
            v["landlock_abi"]
        );
        return false;
    }
    true
}
