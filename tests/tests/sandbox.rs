//! `kerneld-sandbox` itself, over small Python and shell programs: each restriction is
//! shown to hold (and, where it matters, that the same program without it succeeds, so
//! the test is not passing because the program is broken).

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kerneld_e2e::*;
use serde_json::Value;

mod sbx;
use sbx::*;

#[test]
fn probe_prints_what_the_kernel_supports() {
    let o = Command::new(binary("kerneld-sandbox"))
        .arg("--probe")
        .output()
        .unwrap();
    assert!(o.status.success());
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    for key in [
        "landlock_fs",
        "landlock_net",
        "landlock_scope",
        "seccomp",
        "no_new_privs",
        "can_setuid",
    ] {
        assert!(v[key].is_boolean(), "{key} missing: {v}");
    }
    let abi = v["landlock_abi"].as_i64().unwrap();
    assert_eq!(v["landlock_fs"], abi >= 1);
    assert_eq!(v["landlock_net"], abi >= 4);
    assert_eq!(v["landlock_scope"], abi >= 6);
    assert_eq!(v["can_setuid"], nix::unistd::geteuid().is_root(), "{v}");
}

#[test]
fn a_setup_failure_is_exit_125_naming_the_step_and_nothing_runs() {
    let dir = TempDir::new("sbx-125");
    let marker = dir.path().join("ran");
    let script = format!("touch {}", marker.display());
    for (args, want) in [
        (s(&["--ro", "/no/such/dir"]), "landlock: --ro /no/such/dir"),
        (s(&["--frobnicate"]), "unknown option"),
        (s(&["--nofile", "lots"]), "--nofile lots"),
    ] {
        let o = run(&args, &["/bin/sh", "-c", &script]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(125), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!marker.exists());
    }
    // A program outside every --exec path is refused at exec, also 125.
    if !landlock_here() {
        return;
    }
    let o = run(&base_args(), &["/bin/sh", "-c", "true"]);
    assert_eq!(o.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&o.stderr).contains("exec:"));
}

#[test]
fn the_environment_is_exactly_the_env_options() {
    if !landlock_here() {
        return;
    }
    std::env::set_var("KD_SANDBOX_LEAK", "secret");
    let env = std::fs::canonicalize("/usr/bin/env").unwrap();
    let mut args = base_args();
    args.extend(s(&[
        "--exec",
        env.to_str().unwrap(),
        "--env",
        "A=1",
        "--env",
        "B=two words",
    ]));
    let o = Command::new(binary("kerneld-sandbox"))
        .args(&args)
        .arg("--")
        .arg(&env)
        .env("KD_SANDBOX_LEAK", "secret")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "A=1\nB=two words\n");
}

#[test]
fn reads_writes_and_execs_are_confined_to_their_options() {
    if !landlock_here() {
        return;
    }
    let dir = TempDir::new("sbx-fs");
    let (ro, rw, other) = (
        dir.path().join("ro"),
        dir.path().join("rw"),
        dir.path().join("other"),
    );
    for d in [&ro, &rw, &other] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(ro.join("f"), "readable").unwrap();
    std::fs::write(other.join("secret"), "TOPSECRET").unwrap();
    let code = format!(
        r#"
import os, subprocess
def attempt(name, f):
    try:
        f(); print(name, "ok")
    except OSError as e:
        print(name, "denied", e.errno)
attempt("read-ro", lambda: open("{ro}/f").read())
attempt("read-other", lambda: open("{other}/secret").read())
attempt("list-other", lambda: os.listdir("{other}"))
attempt("write-rw", lambda: open("{rw}/new", "w").write("x"))
attempt("mkdir-rw", lambda: os.mkdir("{rw}/d"))
attempt("write-ro", lambda: open("{ro}/new", "w").write("x"))
attempt("write-other", lambda: open("{other}/new", "w").write("x"))
attempt("write-tmp", lambda: open("/tmp/kd-sbx-escape-{pid}", "w").write("x"))
attempt("remove-ro", lambda: os.remove("{ro}/f"))
attempt("exec-sh", lambda: subprocess.run(["/bin/sh", "-c", "true"]))
"#,
        ro = ro.display(),
        rw = rw.display(),
        other = other.display(),
        pid = std::process::id()
    );
    let (status, out, err) = py(
        &s(&[
            "--ro",
            ro.to_str().unwrap(),
            "--rw",
            rw.to_str().unwrap(),
            "--env",
            "PATH=/usr/bin:/bin",
        ]),
        &code,
    );
    assert_eq!(status, 0, "{out}\n{err}");
    let want = [
        "read-ro ok",
        "read-other denied 13",
        "list-other denied 13",
        "write-rw ok",
        "mkdir-rw ok",
        "write-ro denied 13",
        "write-other denied 13",
        "write-tmp denied 13",
        "remove-ro denied 13",
        "exec-sh denied 13",
    ];
    assert_eq!(out.lines().collect::<Vec<_>>(), want, "{err}");
    assert!(rw.join("new").is_file() && ro.join("f").is_file());
    assert!(!other.join("new").exists());
    assert!(!Path::new(&format!("/tmp/kd-sbx-escape-{}", std::process::id())).exists());
}

#[test]
fn no_net_refuses_tcp_to_a_local_listener_and_udp_sockets() {
    if !landlock_here() {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let code = format!(
        r#"
import socket
for name, f in [
    ("tcp", lambda: socket.create_connection(("127.0.0.1", {port}), timeout=5)),
    ("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM)),
    ("tcp6", lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM)),
    ("packet", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW)),
]:
    try:
        f(); print(name, "ok")
    except OSError as e:
        print(name, "denied", e.errno)
"#
    );
    // Without --no-net the connection is made: the program itself works.
    let (_, out, err) = py(&[], &code);
    assert!(out.starts_with("tcp ok"), "{out}\n{err}");
    std::thread::sleep(Duration::from_millis(100));
    let mut accepted = 0;
    while listener.accept().is_ok() {
        accepted += 1;
    }
    assert_eq!(accepted, 1);

    let (status, out, err) = py(&s(&["--no-net"]), &code);
    assert_eq!(status, 0, "{err}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "tcp denied 1",
            "udp denied 1",
            "tcp6 denied 1",
            "packet denied 1"
        ],
        "{err}"
    );
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        listener.accept().is_err(),
        "the listener accepted a connection"
    );
}

#[test]
fn no_unix_refuses_connecting_to_a_unix_socket() {
    if !landlock_here() {
        return;
    }
    let dir = TempDir::new("sbx-unix");
    let path = dir.path().join("s");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    let code = format!(
        r#"
import socket
try:
    s = socket.socket(socket.AF_UNIX); s.connect("{}"); print("ok")
except OSError as e:
    print("denied", e.errno)
a, b = socket.socketpair(); a.send(b"x"); print("pair", b.recv(1).decode())
"#,
        path.display()
    );
    let (_, out, _) = py(&[], &code);
    assert!(out.starts_with("ok"), "{out}");
    let _ = listener.accept();
    let (status, out, err) = py(&s(&["--no-unix"]), &code);
    assert_eq!(status, 0, "{err}");
    assert_eq!(out, "denied 1\npair x\n");
    assert!(listener.accept().is_err());
}

#[test]
fn rlimits_hold_and_core_dumps_are_off() {
    if !landlock_here() {
        return;
    }
    let code = r#"
import resource as r
for name in ["RLIMIT_NOFILE", "RLIMIT_NPROC", "RLIMIT_AS", "RLIMIT_CORE"]:
    print(name, *r.getrlimit(getattr(r, name)))
import os
try:
    [os.open("/dev/null", os.O_RDONLY) for _ in range(100)]
    print("fds ok")
except OSError as e:
    print("fds denied", e.errno)
"#;
    let (status, out, err) = py(
        &s(&[
            "--nofile",
            "64",
            "--nproc",
            "300",
            "--as-bytes",
            "8589934592",
            "--dev",
            "/dev/null",
        ]),
        code,
    );
    assert_eq!(status, 0, "{err}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "RLIMIT_NOFILE 64 64",
            "RLIMIT_NPROC 300 300",
            "RLIMIT_AS 8589934592 8589934592",
            "RLIMIT_CORE 0 0",
            "fds denied 24",
        ]
    );
}

/// A process of the test's uid, made non-dumpable like kerneld makes itself, or left
/// dumpable. (The sandboxed program has no capabilities, so root or not, only the
/// dumpable flag and the uid decide.)
fn sibling(dumpable: bool) -> std::process::Child {
    let code = format!(
        "import ctypes, time; ctypes.CDLL(None).prctl(4, {}, 0, 0, 0); time.sleep(30)",
        dumpable as i32
    );
    let mut c = Command::new(python());
    let child = c.args(["-c", &code]).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    child
}

#[test]
fn ptrace_and_proc_access_to_a_sibling_fail() {
    if !landlock_here() {
        return;
    }
    let code = |pid: u32| {
        format!(
            r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
rc = libc.ptrace(16, {pid}, None, None)  # PTRACE_ATTACH
print("ptrace", rc, ctypes.get_errno())
for f in ["environ", "mem"]:
    try:
        open("/proc/{pid}/" + f, "rb").read(1); print(f, "ok")
    except OSError as e:
        print(f, "denied", e.errno)
"#
        )
    };
    let extra = s(&["--ro", "/proc"]);
    let mut hidden = sibling(false);
    let mut open = sibling(true);
    let (status, out_hidden, err) = py(&extra, &code(hidden.id()));
    let (_, out_open, _) = py(&extra, &code(open.id()));
    for c in [&mut hidden, &mut open] {
        let _ = c.kill();
        let _ = c.wait();
    }
    assert_eq!(status, 0, "{err}");
    // Non-dumpable, like kerneld: nothing of it can be read, even by its own uid.
    assert_eq!(
        out_hidden.lines().collect::<Vec<_>>(),
        ["ptrace -1 1", "environ denied 13", "mem denied 13"],
        "{err}"
    );
    // A dumpable process of the same uid: ptrace and its memory stay closed. Its
    // environment is readable to a same-uid program without capabilities when the
    // process has none either (Landlock scopes ptrace attach, not /proc reads): a known
    // limit of a user daemon's runners (docs/INSTALL.md); a root daemon's runner user
    // avoids it. A root sibling keeps its capabilities, which the program lacks: closed.
    let lines: Vec<&str> = out_open.lines().collect();
    let environ = if nix::unistd::geteuid().is_root() {
        "environ denied 13"
    } else {
        "environ ok"
    };
    assert_eq!(lines, ["ptrace -1 1", environ, "mem denied 13"]);
}

#[test]
fn a_root_program_without_a_uid_switch_gets_no_capabilities() {
    if !landlock_here() {
        return;
    }
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let sh = std::fs::canonicalize("/bin/sh").unwrap();
    let grep = std::fs::canonicalize("/usr/bin/grep").unwrap();
    let mut args = base_args();
    args.extend(s(&[
        "--exec",
        sh.to_str().unwrap(),
        "--exec",
        grep.to_str().unwrap(),
        "--ro",
        "/proc",
    ]));
    let o = run(
        &args,
        &[
            sh.to_str().unwrap(),
            "-c",
            "/usr/bin/grep -E '^Cap(Eff|Prm|Bnd|Amb)' /proc/self/status",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout).replace('\t', " ");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "CapPrm: 0000000000000000",
            "CapEff: 0000000000000000",
            "CapBnd: 0000000000000000",
            "CapAmb: 0000000000000000",
        ]
    );
}

#[test]
fn uid_and_gid_are_switched_with_no_groups_and_no_capabilities() {
    if !landlock_here() {
        return;
    }
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: switching users needs root");
        return;
    }
    let sh = std::fs::canonicalize("/bin/sh").unwrap();
    let mut args = base_args();
    args.extend(s(&[
        "--exec",
        sh.to_str().unwrap(),
        "--exec",
        "/usr/bin",
        "--ro",
        "/proc",
        "--uid",
        "65534",
        "--gid",
        "65534",
        "--env",
        "PATH=/usr/bin:/bin",
    ]));
    let o = run(
        &args,
        &[
            sh.to_str().unwrap(),
            "-c",
            "id -u; id -g; id -G; grep -E '^(CapEff|CapPrm|CapAmb|NoNewPrivs)' /proc/self/status",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout).replace('\t', " ");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "65534",
            "65534",
            "65534",
            "CapPrm: 0000000000000000",
            "CapEff: 0000000000000000",
            "CapAmb: 0000000000000000",
            "NoNewPrivs: 1",
        ],
        "{out}"
    );
}

#[test]
fn a_uid_switch_it_cannot_make_is_refused_not_ignored() {
    if nix::unistd::geteuid().is_root() {
        // Run the sandbox itself as 65534, asking for another uid.
        let probe = Command::new("setpriv").arg("--version").output();
        if probe.is_err() {
            eprintln!("skipped: no setpriv");
            return;
        }
        let bin = binary("kerneld-sandbox");
        let mut buf = String::new();
        let mut child = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&bin)
            .args(["--uid", "0", "--gid", "0", "--", "/bin/true"])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut buf)
            .unwrap();
        let status = child.wait().unwrap();
        if buf.contains("Permission denied")
            && buf.contains("kerneld-sandbox")
            && !buf.contains("setuid")
        {
            eprintln!("skipped: uid 65534 cannot run {} ({buf})", bin.display());
            return;
        }
        assert_eq!(status.code(), Some(125), "{buf}");
        assert!(
            buf.contains("setuid") && buf.contains("needs root"),
            "{buf}"
        );
    }
}

#[test]
fn the_judge_policy_runs_python_the_c_compiler_and_system_programs_a_runner_may_not() {
    use kerneld::sandbox::policy::{GpuNodes, Policy, PolicyInputs};
    if !landlock_here() || !Path::new("/usr/bin/cc").exists() {
        eprintln!("skipped: no Landlock or no cc");
        return;
    }
    let dir = TempDir::new("sbx-policy");
    let scratch = dir.path().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let policy = Policy::build(&PolicyInputs {
        sandbox_bin: binary("kerneld-sandbox"),
        python: python(),
        kernels_dir: repo_root().join("kernels"),
        scratch: scratch.clone(),
        inbox: dir.path().join("inbox"),
        gpu: GpuNodes::None,
        run_as: None,
        max_files: 4096,
        max_procs: 4096,
        max_address_space: 0,
        extra_ro: vec![],
        extra_exec: vec![],
        forbidden: vec![dir.path().join("state")],
        no_connect: true,
        best_effort: false,
    })
    .unwrap();
    let mut judge = policy.judge.clone();
    judge.env = vec![
        ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
        ("TMPDIR".into(), scratch.display().to_string()),
    ];
    // Python finds its headers (as Triton's build does) and compiles a C extension.
    let code = format!(
        r##"
import sysconfig, subprocess
src = "{s}/m.c"
open(src, "w").write("#include <Python.h>\nint f(void) {{ return 1; }}\n")
subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-I" + sysconfig.get_paths()["include"], src, "-o", "{s}/m.so"], check=True)
print("compiled")
# a system program, as torch.compile runs `openssl sha512` over its headers
subprocess.run(["sha512sum", src], check=True, capture_output=True)
"##,
        s = scratch.display()
    );
    let o = Command::new(binary("kerneld-sandbox"))
        .args(judge.to_args())
        .arg("--")
        .arg(python())
        .args(["-c", &code])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "compiled\n");
    assert!(scratch.join("m.so").is_file());
    // a runner, which holds the candidate, executes no such program
    let mut runner = policy.runner.clone();
    runner.env = vec![("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into())];
    let o = Command::new(binary("kerneld-sandbox"))
        .args(runner.to_args())
        .arg("--")
        .arg(python())
        .args([
            "-c",
            "import subprocess\ntry:\n    subprocess.run(['sha512sum', '/dev/null'])\n    print('ran')\nexcept PermissionError:\n    print('refused')\n",
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "refused\n",
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
