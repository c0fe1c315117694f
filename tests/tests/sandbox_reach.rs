//! What issue #24 opened in `kerneld-sandbox`, and that it opens nothing more:
//! - `--no-connect`: AF_UNIX sockets can be made (CUDA needs two) but reach nothing: no
//!   named, abstract or datagram socket of anyone else, no fd passed, nothing to accept;
//!   socketpair() still works;
//! - `--proc-write task`: a thread made after the rule names itself (what cuInit does),
//!   also after the kernel dropped its dentries; nothing else under /proc is writable; a
//!   judge's `all` lets its runner's own `task` work, a judge's `task` does not;
//! - `--dev-from-env` / `--pass-env`: the device nodes a variable names (a Slurm step's
//!   GPUs), and only those.

use std::os::unix::net::{UnixDatagram, UnixListener};
use std::path::Path;
use std::process::Command;

use kerneld_e2e::*;

mod sbx;
use sbx::*;

/// Every AF_UNIX use the rule must stop, and the ones it must leave: one line each.
const SOCKETS: &str = r#"
import array, os, socket, sys
d = sys.argv[1]
def attempt(name, f):
    try:
        r = f(); print(name, "ok", r or "")
    except OSError as e:
        print(name, "denied", e.errno)
def seqpacket():
    socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC).close()
def connect(addr):
    s = socket.socket(socket.AF_UNIX); s.connect(addr); s.send(b"hello")
def sendto():
    socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"hello", d + "/dgram")
def scm_rights():
    a, b = socket.socketpair(); fd = os.open("/dev/null", os.O_RDONLY)
    a.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
def listen():
    s = socket.socket(socket.AF_UNIX); s.bind(d + "/mine"); s.listen(1)
def pair():
    a, b = socket.socketpair(); a.send(b"hi"); return b.recv(2).decode()
attempt("socket", seqpacket)
attempt("connect-path", lambda: connect(d + "/listener"))
attempt("connect-abstract", lambda: connect("\0" + sys.argv[2]))
attempt("sendto-path", sendto)
attempt("sendmsg-rights", scm_rights)
attempt("bind-listen", listen)
attempt("socketpair", pair)
"#;

#[test]
fn no_connect_lets_sockets_be_made_but_reach_nothing() {
    if !landlock_here() {
        return;
    }
    let dir = TempDir::new("sbx-reach");
    let d = dir.path().join("s");
    std::fs::create_dir_all(&d).unwrap();
    let listener = UnixListener::bind(d.join("listener")).unwrap();
    listener.set_nonblocking(true).unwrap();
    let dgram = UnixDatagram::bind(d.join("dgram")).unwrap();
    dgram.set_nonblocking(true).unwrap();
    // An abstract socket outside the sandbox (Landlock's scoping refuses it too, EPERM).
    let name = format!("kd-reach-{}", std::process::id());
    let abstract_socket = abstract_listener(&name);
    let rw = s(&["--rw", d.to_str().unwrap()]);
    let run = |extra: &[&str]| {
        let mut args = rw.clone();
        args.extend(s(extra));
        let code = SOCKETS.to_string();
        let mut a = python_args();
        a.extend(args);
        let out = Command::new(binary("kerneld-sandbox"))
            .args(&a)
            .arg("--")
            .arg(python())
            .args(["-c", &code, d.to_str().unwrap(), &name])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // Without the rule the program reaches the listener and the datagram socket: it works.
    let open = run(&[]);
    assert!(
        open.contains("connect-path ok") && open.contains("sendto-path ok"),
        "{open}"
    );
    assert!(listener.accept().is_ok());
    assert!(dgram.recv(&mut [0u8; 16]).is_ok());
    let _ = std::fs::remove_file(d.join("mine"));

    let strict = run(&["--no-net", "--no-connect"]);
    assert_eq!(
        strict.lines().map(str::trim_end).collect::<Vec<_>>(),
        [
            "socket ok",
            "connect-path denied 13",
            "connect-abstract denied 13",
            "sendto-path denied 13",
            "sendmsg-rights denied 13",
            "bind-listen denied 13",
            "socketpair ok hi",
        ],
        "{strict}"
    );
    assert!(listener.accept().is_err(), "the listener accepted");
    assert!(dgram.recv(&mut [0u8; 16]).is_err(), "a datagram arrived");
    assert!(
        abstract_socket.accept().is_err(),
        "the abstract socket accepted"
    );
    assert!(!d.join("mine").exists(), "a socket file was made");
}

/// A listening abstract AF_UNIX socket named `name` (std has no constructor for one).
fn abstract_listener(name: &str) -> UnixListener {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let l = UnixListener::bind_addr(&addr).unwrap();
    l.set_nonblocking(true).unwrap();
    l
}

/// Threads and /proc writes: what each write gave (`name=ok` or `name=denied ERRNO`).
/// With argv[1] = "drop", it waits for a line on stdin between its two rounds; with more
/// arguments, it runs them (a nested runner) and prints what that printed.
const THREADS: &str = r#"
import os, subprocess, sys, threading, time
def tryw(path, what="x"):
    try:
        with open(path, "wb") as f: f.write(what.encode())
        return "ok"
    except OSError as e:
        return "denied %d" % e.errno
out, go, tids = {}, threading.Event(), []
def body():
    tids.append(threading.get_native_id())
    out["own"] = tryw("/proc/self/task/%d/comm" % threading.get_native_id())
    go.wait()
    out["own-later"] = tryw("/proc/self/task/%d/comm" % threading.get_native_id())
t = threading.Thread(target=body); t.start(); time.sleep(0.2)
out["named-by-main"] = tryw("/proc/self/task/%d/comm" % tids[0])
out["pid-comm"] = tryw("/proc/self/comm")
out["oom"] = tryw("/proc/self/oom_score_adj", "500")
out["parent"] = tryw("/proc/%d/task/%d/comm" % (os.getppid(), os.getppid()))
if sys.argv[1] == "drop":
    print("ready", flush=True); sys.stdin.readline()
go.set(); t.join()
print(" ".join("%s=%s" % kv for kv in out.items()), flush=True)
if len(sys.argv) > 2:
    r = subprocess.run(sys.argv[2:], capture_output=True, text=True)
    print("runner: " + (r.stdout.strip() or r.stderr.strip()))
"#;

fn threads_args(extra: &[&str]) -> Vec<String> {
    let mut a = python_args();
    a.extend(s(&["--ro", "/proc", "--no-net", "--no-connect"]));
    a.extend(s(extra));
    a
}

fn threads(extra: &[&str], tail: &[String]) -> String {
    let mut cmd = Command::new(binary("kerneld-sandbox"));
    cmd.args(threads_args(extra))
        .arg("--")
        .arg(python())
        .args(["-c", THREADS, "once"])
        .args(tail);
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn proc_write_task_lets_new_threads_be_named_and_nothing_else() {
    if !landlock_here() {
        return;
    }
    let want = |own: &str, pid: &str| {
        format!(
            "own={own} named-by-main={own} pid-comm={pid} oom={pid} parent=denied 13 own-later={own}\n"
        )
    };
    assert_eq!(threads(&[], &[]), want("denied 13", "denied 13"));
    assert_eq!(
        threads(&["--proc-write", "task"], &[]),
        want("ok", "denied 13")
    );
    assert_eq!(threads(&["--proc-write", "pid"], &[]), want("ok", "ok"));

    // A judge and its runner: the runner's own grant works only under a judge's `all`.
    let sandbox = binary("kerneld-sandbox").display().to_string();
    let mut runner = vec![sandbox.clone()];
    runner.extend(threads_args(&["--proc-write", "task"]));
    runner.extend([
        "--".into(),
        python().display().to_string(),
        "-c".into(),
        THREADS.into(),
        "once".into(),
    ]);
    let judge_all = threads(&["--proc-write", "all", "--exec", &sandbox], &runner);
    let runner_line = judge_all.lines().last().unwrap();
    assert_eq!(
        format!("{}\n", runner_line.trim_start_matches("runner: ")),
        want("ok", "denied 13"),
        "{judge_all}"
    );
    let judge_task = threads(&["--proc-write", "task", "--exec", &sandbox], &runner);
    assert!(
        judge_task
            .lines()
            .last()
            .unwrap()
            .starts_with("runner: own=denied 13"),
        "{judge_task}"
    );
}

#[test]
fn the_proc_grant_survives_the_kernel_dropping_its_dentries() {
    if !landlock_here() {
        return;
    }
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: dropping the dentry cache needs root");
        return;
    }
    use std::io::{BufRead, BufReader, Write};
    let mut child = Command::new(binary("kerneld-sandbox"))
        .args(threads_args(&["--proc-write", "task"]))
        .arg("--")
        .arg(python())
        .args(["-c", THREADS, "drop"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    // Evicts unused dentries and inodes (not the page cache): procfs then makes new
    // inodes for the directories, which a Landlock rule without the kept descriptor
    // would no longer cover (measured: writes refused afterwards).
    std::fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
    writeln!(child.stdin.take().unwrap()).unwrap();
    line.clear();
    out.read_line(&mut line).unwrap();
    assert!(child.wait().unwrap().success());
    assert!(line.ends_with("own-later=ok\n"), "{line}");
}

#[test]
fn dev_from_env_opens_only_the_nodes_its_variable_names() {
    if !landlock_here() {
        return;
    }
    let dir = TempDir::new("sbx-devenv");
    // Unset: refused before anything runs, naming the variable.
    let o = run(
        &s(&[
            "--dev-from-env",
            "KD_TEST_GPUS=/dev/nvidia",
            "--exec",
            "/bin/true",
        ]),
        &["/bin/true"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(125), "{err}");
    assert!(
        err.contains("KD_TEST_GPUS") && err.contains("did the step"),
        "{err}"
    );
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped the rest: making device nodes needs root");
        return;
    }
    // Two stand-in GPUs (/dev/null's numbers, as the Slurm test cluster makes them).
    for i in 0..2 {
        let node = dir.path().join(format!("gpu{i}"));
        let made = Command::new("mknod")
            .args([node.to_str().unwrap(), "c", "1", "3"])
            .status()
            .unwrap();
        assert!(made.success());
    }
    let prefix = format!("KD_TEST_GPUS={}/gpu", dir.path().display());
    let code = format!(
        r#"
import os
for i in range(2):
    try:
        os.close(os.open("{d}/gpu%d" % i, os.O_WRONLY)); print(i, "ok")
    except OSError as e:
        print(i, "denied", e.errno)
print(os.environ.get("KD_TEST_GPUS"), os.environ.get("KD_VISIBLE"), os.environ.get("KD_OTHER"))
"#,
        d = dir.path().display()
    );
    let mut args = python_args();
    args.extend(s(&[
        "--dev-from-env",
        &prefix,
        "--pass-env",
        "KD_TEST_GPUS",
        "--pass-env",
        "KD_VISIBLE",
        "--env",
        "KD_VISIBLE=from-env-option",
    ]));
    let out = Command::new(binary("kerneld-sandbox"))
        .args(&args)
        .arg("--")
        .arg(python())
        .args(["-c", &code])
        .env("KD_TEST_GPUS", "1")
        .env("KD_VISIBLE", "from-the-step")
        .env("KD_OTHER", "not-passed")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "0 denied 13\n1 ok\n1 from-env-option None\n",
        "an --env of the same name wins over --pass-env"
    );
    assert!(Path::new(&dir.path().join("gpu1")).exists());
}
