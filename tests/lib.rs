//! Shared pieces of the end-to-end tests: start the real `kerneld` binary on a
//! temporary state directory and socket, talk to it over the real socket, run the
//! real `kernelctl`.
//!
//! The binaries are the workspace's own (`cargo test --workspace` builds them);
//! the harness worker runs under `KERNELD_PYTHON` (the test script points it at the
//! virtual environment with torch and triton).

pub mod cluster;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use kerneld::wire::{self, Event, GoalState, GoalSummary};
use serde_json::{json, Value};

/// The repository root (this crate lives in `tests/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A binary of the workspace, next to the test executable's `deps/` folder.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "{} is not built; run `cargo build --workspace` first",
        path.display()
    );
    path
}

/// The Python that has torch and triton: `KERNELD_PYTHON`, else the repo's `.venv`.
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("KERNELD_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = repo_root().join(".venv/bin/python");
    if venv.is_file() {
        venv
    } else {
        PathBuf::from("python3")
    }
}

/// What `kerneld-sandbox --probe` says about this machine's kernel.
pub fn sandbox_probe() -> Value {
    let o = Command::new(binary("kerneld-sandbox"))
        .arg("--probe")
        .output()
        .expect("run kerneld-sandbox --probe");
    serde_json::from_slice(&o.stdout).expect("the probe prints JSON")
}

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        // Short paths: Unix socket paths are limited to ~108 bytes.
        let p =
            std::env::temp_dir().join(format!("kd-{tag}-{}-{:x}", std::process::id(), rand_u32()));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn rand_u32() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    (t.subsec_nanos() ^ (t.as_secs() as u32).rotate_left(7)).wrapping_mul(2654435761)
}

/// A running `kerneld` process.
pub struct Daemon {
    pub child: Child,
    pub socket: PathBuf,
    pub state_dir: PathBuf,
    pub log: PathBuf,
}

impl Daemon {
    /// Starts the real binary (CPU mode) and waits until its socket answers `version`.
    pub fn start(dir: &Path) -> Daemon {
        Self::start_with(dir, &[])
    }

    pub fn start_with(dir: &Path, extra: &[&str]) -> Daemon {
        Self::start_env(dir, extra, &[])
    }

    /// Starts with extra arguments and environment variables (passed on to the workers).
    pub fn start_env(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        let mut args = daemon_args(dir);
        args.extend(extra.iter().map(Into::into));
        let d = Self::spawn(dir, &args, env);
        d.wait_ready(Duration::from_secs(30));
        d
    }

    /// `start_env` with another kernels directory (its `harness/worker.py` is the worker).
    pub fn start_kernels(
        dir: &Path,
        kernels: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Daemon {
        let mut args = daemon_args_with(dir, kernels);
        args.extend(extra.iter().map(Into::into));
        let d = Self::spawn(dir, &args, env);
        d.wait_ready(Duration::from_secs(30));
        d
    }

    /// Starts the binary with exactly these arguments and does not wait for it.
    pub fn spawn(dir: &Path, args: &[std::ffi::OsString], env: &[(&str, &str)]) -> Daemon {
        let socket = dir.join("sock");
        let state_dir = dir.join("state");
        let log = dir.join("kerneld.log");
        let logfile = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let child = Command::new(binary("kerneld"))
            .args(args)
            .env("KERNELD_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(logfile.try_clone().unwrap())
            .stderr(logfile)
            .spawn()
            .expect("start kerneld");
        Daemon {
            child,
            socket,
            state_dir,
            log,
        }
    }

    /// Waits until the socket answers `version`, or panics with the log.
    pub fn wait_ready(&self, limit: Duration) {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            if let Ok(v) = try_call(&self.socket, wire::method::VERSION, json!({})) {
                if v.get("result").is_some() {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "kerneld did not answer within {limit:?}; log:\n{}",
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
    }

    pub fn call(&self, method: &str, params: Value) -> Value {
        let v = try_call(&self.socket, method, params).expect("daemon reachable");
        if let Some(e) = v.get("error") {
            panic!("{method} failed: {e}");
        }
        v["result"].clone()
    }

    pub fn status(&self) -> Vec<GoalSummary> {
        serde_json::from_value(self.call(wire::method::STATUS, json!({}))).unwrap()
    }

    pub fn goal(&self, id: &str) -> GoalSummary {
        let v = self.call(wire::method::STATUS, json!({"goal": id}));
        let mut all: Vec<GoalSummary> = serde_json::from_value(v).unwrap();
        all.remove(0)
    }

    /// Every event after `after`, reading page after page as a client must.
    pub fn events(&self, after: u64) -> Vec<Event> {
        let mut all: Vec<Event> = Vec::new();
        loop {
            let from = all.last().map_or(after, |e| e.seq);
            let page: Vec<Event> =
                serde_json::from_value(self.call(wire::method::EVENTS, json!({"after": from})))
                    .unwrap();
            if page.is_empty() {
                return all;
            }
            all.extend(page);
        }
    }

    /// Waits until the goal is in a terminal state, or panics with the log.
    pub fn wait_terminal(&self, id: &str, limit: Duration) -> GoalSummary {
        let t0 = Instant::now();
        loop {
            let g = self.goal(id);
            if g.state.is_terminal() {
                return g;
            }
            if t0.elapsed() > limit {
                panic!(
                    "goal {id} still {} after {limit:?}; log:\n{}",
                    g.state,
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn wait_until(&self, limit: Duration, mut f: impl FnMut(&Daemon) -> bool) -> bool {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            if f(self) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL: no chance to record anything.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Its worker notices the closed pipe and exits; don't wait for that.
    }

    /// SIGTERM and wait for the clean exit.
    pub fn stop(mut self) -> std::process::ExitStatus {
        use nix::sys::signal::{kill, Signal};
        use nix::unistd::Pid;
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM);
        self.child.wait().unwrap()
    }
}

impl Daemon {
    /// The daemon's workers: its children that lead their own process group.
    pub fn worker_pids(&self) -> Vec<i32> {
        let daemon = self.child.id() as i32;
        let mut pids = Vec::new();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // After the `(comm)`: state, ppid, pgrp, ...
            let rest: Vec<&str> = stat
                .rsplit_once(')')
                .map(|(_, r)| r.split_whitespace().collect())
                .unwrap_or_default();
            let field = |i: usize| rest.get(i).and_then(|v| v.parse::<i32>().ok());
            if field(1) == Some(daemon) && field(2) == Some(pid) {
                pids.push(pid);
            }
        }
        pids
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // A test that fails mid-way must not leave workers spinning: kill their groups too.
        let workers = self.worker_pids();
        let _ = self.child.kill();
        let _ = self.child.wait();
        for pgid in workers {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pgid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// One JSON-RPC call over the socket (a fresh connection).
pub fn try_call(socket: &Path, method: &str, params: Value) -> std::io::Result<Value> {
    let mut s = UnixStream::connect(socket)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let req = wire::Request::new(1, method, params);
    let mut line = serde_json::to_string(&req).unwrap();
    line.push('\n');
    s.write_all(line.as_bytes())?;
    let mut reply = String::new();
    BufReader::new(s).read_line(&mut reply)?;
    serde_json::from_str(&reply)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Runs the real `kernelctl` against a socket.
pub fn kernelctl(socket: &Path, args: &[&str]) -> Output {
    kernelctl_under(&[], socket, args)
}

/// Runs `kernelctl` under a wrapper command (e.g. `setpriv --reuid=...`); none: directly.
pub fn kernelctl_under(wrapper: &[&str], socket: &Path, args: &[&str]) -> Output {
    let mut cmd = match wrapper.split_first() {
        None => Command::new(binary("kernelctl")),
        Some((program, rest)) => {
            let mut c = Command::new(program);
            c.args(rest).arg(binary("kernelctl"));
            c
        }
    };
    cmd.arg("--socket")
        .arg(socket)
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run kernelctl")
}

/// Writes a demo goal file with the given budget of iterations.
pub fn demo_goal(dir: &Path, name: &str, iterations: u64, extra: &str) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    let text = format!(
        "name = \"{name}\"\ntask = \"demo\"\n{extra}\n[budget]\nwall = \"30m\"\niterations = {iterations}\n\n[agent]\nkind = \"search\"\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// Writes a goal on the demo task whose seeds are the harness's fault candidates
/// (`kernels/harness/tests/faults/`, copied next to the goal file) and the demo's own
/// seeds, evaluated in the order given.
pub fn fault_goal(dir: &Path, name: &str, seeds: &[&str], iterations: u64) -> PathBuf {
    let faults = repo_root().join("kernels/harness/tests/faults");
    for s in seeds {
        if faults.join(s).is_file() {
            std::fs::copy(faults.join(s), dir.join(s)).unwrap();
        }
    }
    let list: Vec<String> = seeds.iter().map(|s| format!("\"{s}\"")).collect();
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "name = \"{name}\"\ntask = \"{}\"\nseed = [{}]\n[budget]\niterations = {iterations}\n",
            repo_root().join("kernels/demo").display(),
            list.join(", ")
        ),
    )
    .unwrap();
    path
}

/// Enqueues through the socket and returns the goal id. Like `kernelctl`, it sends the
/// seed files found next to the goal file.
pub fn enqueue(d: &Daemon, path: &Path) -> String {
    let source = std::fs::read_to_string(path).unwrap();
    let files = kerneld::goal::local_seed_files(path, &source).unwrap();
    let r = d.call(
        wire::method::ENQUEUE,
        json!({"path": path, "source": source, "unique": false, "files": files}),
    );
    r["id"].as_str().unwrap().to_string()
}

/// Checks the log's sequence numbers are 1..=n with no gap.
pub fn assert_dense(events: &[Event]) {
    for (i, e) in events.iter().enumerate() {
        assert_eq!(
            e.seq,
            i as u64 + 1,
            "sequence gap or disorder at position {i}: {e:?}"
        );
    }
}

pub fn is_active(s: GoalState) -> bool {
    matches!(s, GoalState::Queued | GoalState::Running)
}

/// One HTTP/1.1 request as a stand-in endpoint reads it: path, Authorization, JSON body.
pub struct HttpRequest {
    pub path: String,
    pub auth: String,
    pub body: Value,
}

/// Reads one request from a client of a stand-in HTTP server (tests only: no chunked
/// bodies, no keep-alive).
pub fn read_http_request(stream: &std::net::TcpStream) -> HttpRequest {
    use std::io::Read;
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let (mut len, mut auth) = (0usize, String::new());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let lower = l.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
        if lower.starts_with("authorization:") {
            auth = l["authorization:".len()..].trim().to_string();
        }
    }
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).unwrap();
    HttpRequest {
        path,
        auth,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    }
}

/// A chat-completions reply whose content proposes `source` with `config`, and the
/// `usage` an endpoint reports.
pub fn chat_reply(note: &str, source: &str, config: &Value, tokens: Option<u64>) -> String {
    let content = format!("{note}\n```python\n{source}\n```\n```json\n{config}\n```\n");
    let mut reply = json!({"choices": [{"message": {"role": "assistant", "content": content}}]});
    if let Some(t) = tokens {
        reply["usage"] =
            json!({"prompt_tokens": t / 2, "completion_tokens": t - t / 2, "total_tokens": t});
    }
    reply.to_string()
}

/// Writes an HTTP response and closes the connection.
pub fn write_http(stream: &mut std::net::TcpStream, status: &str, headers: &str, body: &str) {
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{headers}Connection: close\r\n\r\n{body}",
        body.len()
    );
}

// -- a client as another user ---------------------------------------------------------

/// The unprivileged uid the tests run clients as.
pub const NOBODY: &str = "65534";

/// Whether the daemon's log `log` has the audit line of a change by `uid` that it refused
/// (`daemon/src/audit.rs`): `method`, and the goal or file it named when `target` is given.
pub fn audited(log: &str, uid: &str, method: &str, target: Option<&str>) -> bool {
    let head = format!("refused: uid {uid} {method} ");
    log.lines()
        .any(|l| l.contains(&head) && target.is_none_or(|t| l.contains(t)))
}

/// `setpriv` as uid/gid 65534 with no supplementary groups, ready for a program.
pub const AS_NOBODY: [&str; 4] = [
    "setpriv",
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
];

/// Runs `kernelctl` as uid/gid 65534.
pub fn kernelctl_as_nobody(socket: &Path, args: &[&str]) -> Output {
    kernelctl_under(&AS_NOBODY, socket, args)
}

/// A test directory every user can read, or None (with the reason printed) when this
/// machine cannot run a client as another user.
pub fn nobody_dir(tag: &str) -> Option<TempDir> {
    use std::os::unix::fs::PermissionsExt;
    let probe = Command::new(AS_NOBODY[0])
        .args(&AS_NOBODY[1..])
        .arg(binary("kernelctl"))
        .arg("--version")
        .output();
    match probe {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            eprintln!(
                "skipped: cannot run kernelctl as uid {NOBODY} (needs root, and a target dir \
                 that uid may read): {}",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            return None;
        }
        Err(e) => {
            eprintln!("skipped: setpriv is not available: {e}");
            return None;
        }
    }
    let dir = TempDir::new(tag);
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    Some(dir)
}

/// A finished command's status, stdout and stderr, for assertion messages.
pub fn output_text(o: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Writes a file every user may read.
pub fn write_public(path: &Path, contents: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, contents).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
}

/// Runs a command to its end, or kills it after `limit` (then the status is None): a
/// client that blocks forever must fail the test, not hang it.
pub fn run_bounded(
    cmd: &mut Command,
    limit: Duration,
) -> (Option<std::process::ExitStatus>, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut text = String::new();
    use std::io::Read;
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut text);
    }
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut text);
    }
    (status, text)
}

/// The arguments `Daemon::start` gives kerneld for a test directory.
pub fn daemon_args(dir: &Path) -> Vec<std::ffi::OsString> {
    daemon_args_with(dir, &repo_root().join("kernels"))
}

/// The same with another kernels directory.
pub fn daemon_args_with(dir: &Path, kernels: &Path) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = Vec::new();
    for (flag, value) in [
        ("--state-dir", dir.join("state")),
        ("--socket", dir.join("sock")),
        ("--kernels", kernels.to_path_buf()),
        ("--python", python()),
    ] {
        args.push(flag.into());
        args.push(value.into());
    }
    args.push("--cpu".into());
    // These tests run as root on machines without the runner user (or with a Python the
    // runner user cannot reach): the judge still runs under the sandbox, as the daemon's
    // uid. tests/tests/isolation.rs tests the sandbox.
    args.push("--allow-unsandboxed".into());
    args
}

/// A kernels directory whose harness worker is `tests/fixtures/stub_worker.py` (the worker
/// protocol without torch: it starts and "evaluates" in milliseconds) and whose `demo`
/// task is a copy of the real one.
pub fn stub_kernels(dir: &Path) -> PathBuf {
    let kernels = dir.join("kernels");
    std::fs::create_dir_all(kernels.join("harness")).unwrap();
    std::fs::copy(
        repo_root().join("tests/fixtures/stub_worker.py"),
        kernels.join("harness/worker.py"),
    )
    .unwrap();
    copy_demo_task(&kernels);
    kernels
}

/// Copies the demo task into a kernels directory. A copy, not a symlink: the evaluation
/// sandbox resolves the task directory and refuses one outside the kernels directory
/// (every seed would be rejected and no evaluation would run).
fn copy_demo_task(kernels: &Path) {
    let demo = repo_root().join("kernels/demo");
    std::fs::create_dir_all(kernels.join("demo/seeds")).unwrap();
    for f in ["task.toml", "task.py", "seeds/tiled.py"] {
        std::fs::copy(demo.join(f), kernels.join("demo").join(f)).unwrap();
    }
}

/// A kernels directory whose worker is the scripted one (tests/fixtures/scripted/worker.py,
/// answering what `harness/script.json` there says) and whose `demo` task is a copy of the real one.
pub fn scripted_kernels(dir: &Path) -> PathBuf {
    let k = dir.join("kernels");
    std::fs::create_dir_all(k.join("harness")).unwrap();
    std::fs::copy(
        repo_root().join("tests/fixtures/scripted/worker.py"),
        k.join("harness/worker.py"),
    )
    .unwrap();
    copy_demo_task(&k);
    k
}

/// Every process that has `file` open (a link in /proc/PID/fd to it), described: pid,
/// comm, state, parent, command line. The event log's lock belongs to whoever holds its
/// open file: this names the holder when a start finds the log in use (issue #18).
pub fn holders_of(file: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let fds = entry.path().join("fd");
        let holds = std::fs::read_dir(&fds)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|fd| std::fs::read_link(fd.path()).ok())
            .any(|target| target == file);
        if holds {
            found.push(describe_holder(pid));
        }
    }
    found
}

fn describe_holder(pid: u32) -> String {
    let read = |f: &str| std::fs::read_to_string(format!("/proc/{pid}/{f}")).unwrap_or_default();
    let stat = read("stat");
    // After the `(comm)`: state, ppid, ...
    let mut after = stat
        .rsplit_once(')')
        .map(|(_, r)| r.split_whitespace())
        .into_iter()
        .flatten();
    let fields: Vec<&str> = after.by_ref().take(7).collect();
    let field = |i: usize| fields.get(i).copied().unwrap_or("?");
    // stat's flags (field 9): PF_EXITING (0x4) says it is being torn down.
    let (state, ppid, flags) = (field(0), field(1), field(6));
    let flags = flags
        .parse::<u64>()
        .map_or("?".into(), |f| format!("{f:#x}"));
    let status: Vec<String> = read("status")
        .lines()
        .filter(|l| {
            ["Threads", "SigPnd", "ShdPnd", "VmSize"]
                .iter()
                .any(|k| l.starts_with(k))
        })
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    // The kernel stack (root only): where it is, e.g. exit_mmap while being torn down.
    let stack: Vec<String> = read("stack")
        .lines()
        .take(6)
        .map(|l| l.split_whitespace().last().unwrap_or_default().to_string())
        .collect();
    format!(
        "pid {pid} comm {} state {state} ppid {ppid} flags {flags} {} wchan {} stack [{}] cmdline {}",
        read("comm").trim(),
        status.join(", "),
        read("wchan"),
        stack.join(" < "),
        read("cmdline")
            .replace('\0', " ")
            .chars()
            .take(300)
            .collect::<String>()
    )
}
