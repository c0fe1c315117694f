//! The daemon's half of the harness worker protocol (docs/HARNESS.md section 3).
//!
//! One persistent Python worker per evaluation slot, in its own process group, so
//! that a timeout or a crash is answered by killing the whole group: the next
//! evaluation never runs in a poisoned CUDA context. Only this module spawns workers.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio_util::codec::{FramedRead, LinesCodec};

/// Largest line a worker may print (a result with profiles is far smaller).
const WORKER_MAX_LINE: usize = 4 * 1024 * 1024;
/// Lines of the worker's stderr kept for the message of a crash.
const STDERR_TAIL: usize = 40;
/// Longest stderr line kept (red team, session 4): a candidate may print without newlines, and
/// an unbounded line would grow the daemon's memory until it is killed.
const STDERR_MAX_LINE: usize = 64 * 1024;

/// How to start a worker for one slot.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    pub python: PathBuf,
    pub script: PathBuf,
    pub max_files: u64,
    /// Address-space limit in bytes (CPU mode only; 0 = none).
    pub max_address_space: u64,
    pub start_timeout: Duration,
    /// Programs the worker's argv is handed to, outermost first (a Slurm slot's
    /// `srun --jobid=N ... --`): the worker, and any wrapper of its own, run under it.
    /// Empty: the worker runs here. Under a launcher the device is the launcher's to
    /// assign (Slurm sets CUDA_VISIBLE_DEVICES for the job's GPU), and SIGINT does not
    /// reach the worker (srun does not forward it), so `interrupt` reports failure.
    pub launcher: Vec<String>,
    /// How the worker is confined (crate::sandbox), or why it cannot be started.
    pub sandbox: Result<crate::sandbox::WorkerSandbox, String>,
}

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("could not start the harness worker ({python} {script}): {source}; check `python` in kerneld.toml (it needs torch and triton)")]
    Spawn {
        python: String,
        script: String,
        source: std::io::Error,
    },
    #[error("the harness worker did not become ready within {0:?}: {1}")]
    NotReady(Duration, String),
    #[error(
        "the evaluation exceeded its {0:?} wall-clock limit; the worker's process group was killed"
    )]
    Timeout(Duration),
    #[error("the harness worker died ({status}): {stderr}")]
    Died { status: String, stderr: String },
    #[error("the harness worker broke the protocol: {0}")]
    Protocol(String),
    /// The place the worker runs could not be had (a Slurm slot's job, see `launcher`).
    #[error("no place to start the harness worker: {0}")]
    NoPlace(String),
    #[error("cannot prepare the evaluation sandbox: {0}")]
    Sandbox(String),
}

/// A running worker. Dropping it kills its process group.
pub struct Worker {
    child: Child,
    pgid: Pid,
    stdin: ChildStdin,
    lines: FramedRead<ChildStdout, LinesCodec>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    next_id: u64,
    /// SIGINT reaches the worker (false under a launcher such as srun).
    interruptible: bool,
    /// The worker's ready line (versions, device).
    pub ready: Value,
    sandbox: crate::sandbox::WorkerSandbox,
}

impl Worker {
    /// Starts a worker and waits for its ready line.
    pub async fn start(spec: &WorkerSpec) -> Result<Worker, WorkerError> {
        let sandbox = spec.sandbox.clone().map_err(WorkerError::Sandbox)?;
        // Under kerneld-sandbox when it works here (crate::sandbox::runtime), else Python
        // directly; either way with exactly the harness's environment: never the daemon's
        // API keys, NOTIFY_SOCKET or settings. A launcher (a Slurm slot's srun) goes
        // outside all of it, so the sandbox confines the worker on the compute node too.
        let mut argv: Vec<std::ffi::OsString> = spec.launcher.iter().map(Into::into).collect();
        if let Some((bin, args)) = &sandbox.wrapper {
            argv.push(bin.into());
            argv.extend(args.iter().map(Into::into));
            argv.push("--".into());
        }
        argv.push(spec.python.clone().into());
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]);
        cmd.arg("-u")
            .arg(&spec.script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env_clear()
            .envs(sandbox.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&sandbox.scratch)
            .process_group(0)
            .kill_on_drop(true);
        let max_files = spec.max_files;
        let max_as = spec.max_address_space;
        let daemon_pid = std::process::id() as libc::pid_t;
        // SAFETY: only async-signal-safe calls (setrlimit, open, write, close, prctl,
        // getppid) between fork and exec. The sandbox sets its limits again; these hold
        // when it is off.
        unsafe {
            cmd.pre_exec(move || {
                use nix::sys::resource::{setrlimit, Resource};
                let _ = setrlimit(Resource::RLIMIT_NOFILE, max_files, max_files);
                let _ = setrlimit(Resource::RLIMIT_CORE, 0, 0);
                if max_as > 0 {
                    let _ = setrlimit(Resource::RLIMIT_AS, max_as, max_as);
                }
                // Under memory pressure the kernel should take a worker, not the daemon
                // (the sandboxed worker can no longer write /proc itself).
                let fd = libc::open(c"/proc/self/oom_score_adj".as_ptr(), libc::O_WRONLY);
                if fd >= 0 {
                    let _ = libc::write(fd, b"500".as_ptr().cast(), 3);
                    libc::close(fd);
                }
                // The worker dies with the daemon, even one that never sees its pipes close
                // (a SIGKILL of the daemon while the worker starts left one running in the
                // kill-torture). The signal comes when the forking thread ends: a runtime
                // worker thread, which lives as long as the daemon. kerneld-sandbox sets it
                // again after its uid switch, which clears it. A daemon already gone: no start.
                libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                );
                if libc::getppid() != daemon_pid {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(|source| WorkerError::Spawn {
            python: spec.python.display().to_string(),
            script: spec.script.display().to_string(),
            source,
        })?;
        let pid = child.id().unwrap_or(0) as i32;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");

        // Keep the tail of stderr for crash messages, and pass it on to our log.
        let stderr_tail = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_TAIL)));
        let tail = stderr_tail.clone();
        tokio::spawn(read_stderr(stderr, tail, pid));

        let mut worker = Worker {
            child,
            pgid: Pid::from_raw(pid),
            stdin,
            lines: FramedRead::new(stdout, LinesCodec::new_with_max_length(WORKER_MAX_LINE)),
            stderr_tail,
            next_id: 1,
            interruptible: spec.launcher.is_empty(),
            ready: Value::Null,
            sandbox,
        };
        let ready = match tokio::time::timeout(spec.start_timeout, worker.read_line()).await {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                let tail = worker.stderr_text();
                worker.kill().await;
                return Err(WorkerError::NotReady(spec.start_timeout, tail));
            }
        };
        if ready.get("event").and_then(Value::as_str) != Some("ready") {
            worker.kill().await;
            return Err(WorkerError::Protocol(format!(
                "expected a ready line, got {ready}"
            )));
        }
        worker.ready = ready;
        Ok(worker)
    }

    pub fn pid(&self) -> i32 {
        self.pgid.as_raw()
    }

    fn stderr_text(&self) -> String {
        let t = self.stderr_tail.lock().unwrap();
        let lines: Vec<&str> = t.iter().map(String::as_str).collect();
        let text = lines.join("\n");
        if text.is_empty() {
            "(no output on stderr)".into()
        } else {
            text
        }
    }

    async fn read_line(&mut self) -> Result<Value, WorkerError> {
        match self.lines.next().await {
            Some(Ok(line)) => serde_json::from_str(&line).map_err(|e| {
                WorkerError::Protocol(format!("not JSON ({e}): {}", truncate(&line, 200)))
            }),
            Some(Err(e)) => Err(WorkerError::Protocol(e.to_string())),
            None => {
                // stdout closed: the worker is gone or going. Give stderr a moment to drain.
                let status =
                    match tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await {
                        Ok(Ok(s)) => describe_status(s),
                        _ => "closed its output".into(),
                    };
                tokio::time::sleep(Duration::from_millis(50)).await;
                Err(WorkerError::Died {
                    status,
                    stderr: self.stderr_text(),
                })
            }
        }
    }

    /// Sends one request and waits for its reply, at most `timeout`. On a timeout the
    /// caller must `kill` the worker: its state is unknown.
    pub async fn call(&mut self, mut req: Value, timeout: Duration) -> Result<Value, WorkerError> {
        crate::sandbox::inbox::hand_over(&self.sandbox, &mut req).map_err(WorkerError::Sandbox)?;
        let id = self.next_id;
        self.next_id += 1;
        req["id"] = json!(id);
        let mut line = req.to_string();
        line.push('\n');
        let exchange = async {
            if let Err(e) = self.stdin.write_all(line.as_bytes()).await {
                let _ = e;
                return Err(WorkerError::Died {
                    status: "stdin closed".into(),
                    stderr: self.stderr_text(),
                });
            }
            let _ = self.stdin.flush().await;
            loop {
                let reply = self.read_line().await?;
                // Replies to an earlier, abandoned request cannot happen (we kill on timeout),
                // but lines without our id are skipped rather than misattributed.
                if reply.get("id").and_then(Value::as_u64) == Some(id) {
                    return Ok(reply);
                }
            }
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(r) => r,
            Err(_) => Err(WorkerError::Timeout(timeout)),
        }
    }

    /// Asks the worker to abandon the request in flight (SIGINT: it answers that request
    /// and stays usable, see kernels/harness/worker.py). True when it answered within
    /// `grace`; otherwise its state is unknown and the caller must `kill` it.
    pub async fn interrupt(&mut self, grace: Duration) -> bool {
        let id = self.next_id.saturating_sub(1);
        if !self.interruptible {
            return false;
        }
        if nix::sys::signal::kill(self.pgid, Signal::SIGINT).is_err() {
            return false;
        }
        let answered = async {
            loop {
                match self.read_line().await {
                    Ok(v) if v.get("id").and_then(Value::as_u64) == Some(id) => return true,
                    Ok(_) => continue,
                    Err(_) => return false,
                }
            }
        };
        matches!(tokio::time::timeout(grace, answered).await, Ok(true))
    }

    /// Kills the worker's whole process group and reaps it.
    pub async fn kill(mut self) {
        self.kill_group();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }

    fn kill_group(&mut self) {
        if self.pgid.as_raw() > 0 {
            let _ = killpg(self.pgid, Signal::SIGKILL);
        }
    }

    /// Asks the worker to exit, and kills it if it does not within a few seconds.
    pub async fn shutdown(mut self) {
        let _ = self
            .call(json!({"op": "shutdown"}), Duration::from_secs(5))
            .await;
        if tokio::time::timeout(Duration::from_secs(5), self.child.wait())
            .await
            .is_err()
        {
            self.kill_group();
        }
        self.kill_group();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Whatever the group still holds (a child the candidate forked, a hung kernel's
        // process) goes with the worker.
        self.kill_group();
    }
}

/// `pids` and every process descending from them (one pass over /proc): a worker's
/// runners and compilers are the worker's, whatever process group they are in.
pub fn with_descendants(pids: &std::collections::BTreeSet<u32>) -> std::collections::BTreeSet<u32> {
    let mut parent = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // After the `(comm)`: state, ppid, ...
        if let Some(ppid) = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok())
        {
            parent.insert(pid, ppid);
        }
    }
    let mut ours = pids.clone();
    for &pid in parent.keys() {
        let mut p = pid;
        // Bounded walk up: pid 1 (or a vanished parent) ends it.
        for _ in 0..64 {
            if ours.contains(&p) {
                ours.insert(pid);
                break;
            }
            match parent.get(&p) {
                Some(&pp) if pp > 1 => p = pp,
                _ => break,
            }
        }
    }
    ours
}

fn describe_status(s: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(sig)) => {
            let name = Signal::try_from(sig)
                .map(|s| s.as_str().to_string())
                .unwrap_or_else(|_| sig.to_string());
            format!("killed by signal {name}")
        }
        _ => "unknown status".into(),
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.len() <= n {
        s.to_string()
    } else {
        let mut end = n;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &s[..end])
    }
}

/// The worker's stderr, line by line, into the debug log and the crash-message tail. Lines are
/// capped (STDERR_MAX_LINE: the rest of a longer line is dropped): a candidate may print without
/// newlines, and an unbounded line would grow the daemon's memory until it is killed.
async fn read_stderr(
    stderr: impl tokio::io::AsyncRead + Unpin,
    tail: Arc<Mutex<VecDeque<String>>>,
    pid: i32,
) {
    let mut r = BufReader::new(stderr);
    let mut line: Vec<u8> = Vec::new();
    loop {
        let (used, ended) = match r.fill_buf().await {
            Ok(buf) if !buf.is_empty() => {
                let end = buf.iter().position(|&b| b == b'\n');
                let chunk = &buf[..end.unwrap_or(buf.len())];
                let room = STDERR_MAX_LINE.saturating_sub(line.len());
                line.extend_from_slice(&chunk[..chunk.len().min(room)]);
                (end.map_or(buf.len(), |i| i + 1), end.is_some())
            }
            _ => break,
        };
        r.consume(used);
        if ended {
            let text = String::from_utf8_lossy(&line).into_owned();
            line.clear();
            tracing::debug!(target: "worker", pid, "{text}");
            let mut t = tail.lock().unwrap();
            if t.len() == STDERR_TAIL {
                t.pop_front();
            }
            t.push_back(text);
        }
    }
}

#[cfg(test)]
mod stderr_tests {
    use super::*;

    #[tokio::test]
    async fn an_endless_stderr_line_is_dropped_and_reading_goes_on() {
        let (mut w, r) = tokio::io::duplex(1 << 16);
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let reader = tokio::spawn(read_stderr(r, tail.clone(), 1));
        let chunk = vec![b'x'; 1 << 16];
        for _ in 0..64 {
            w.write_all(&chunk).await.unwrap(); // 4 MiB without a newline
        }
        w.write_all(b"\nafter the flood\n").await.unwrap();
        drop(w);
        reader.await.unwrap();
        let t = tail.lock().unwrap();
        assert_eq!(t.len(), 2, "the capped flood line, then the next one");
        assert!(t[0].len() == STDERR_MAX_LINE && t[0].bytes().all(|b| b == b'x'));
        assert_eq!(t[1], "after the flood");
    }
}
