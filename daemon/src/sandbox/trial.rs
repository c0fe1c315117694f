//! The start-up trials (issue #10, #24): the harness's Python under the judge policy (can
//! the runner user reach the interpreter, its libraries, the kernels?), and in GPU mode the
//! CUDA trial the ladder in `widen` runs: CUDA started in a judge, then in a runner the
//! judge starts through its launcher, as worker.py does, so the judge's Landlock layer and
//! filters stay in force over the runner's (they stack) exactly as in an evaluation.

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::policy::{resolve_python, Policy, PolicyInputs};
use super::scratch::{ensure_root, fresh_dir, worker_env, SCRATCH_SUBDIRS};
use super::widen::{Finding, Variant};
use crate::config::Config;
use crate::gpu::DeviceInfo;

/// What a GPU trial runs in the judge, then in a runner the judge starts. The judge's code
/// may set `RUNNER_ARG`, which the runner gets as `sys.argv[1]`.
#[derive(Debug, Clone, Copy)]
pub struct GpuCode<'a> {
    pub judge: &'a str,
    pub runner: &'a str,
}

/// What every GPU evaluation does first: CUDA's initialisation through torch, and the
/// judge's shared arena (arena.py): a cuMemAlloc block whose CUDA IPC handle the runner
/// opens and reads (the judge wrote 42 into it).
pub const CUDA: GpuCode = GpuCode {
    judge: r#"
import base64, ctypes, torch
torch.ones(1, device="cuda").sum().item()
lib, ptr, handle = ctypes.CDLL("libcuda.so.1"), ctypes.c_uint64(), (ctypes.c_char * 64)()
for what, rc in [
    ("cuMemAlloc", lambda: lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(2 << 20))),
    ("cuMemsetD8", lambda: lib.cuMemsetD8_v2(ctypes.c_uint64(ptr.value), ctypes.c_ubyte(42), ctypes.c_size_t(2 << 20))),
    ("cuIpcGetMemHandle", lambda: lib.cuIpcGetMemHandle(handle, ctypes.c_uint64(ptr.value))),
]:
    if rc() != 0:
        raise RuntimeError("%s failed" % what)
RUNNER_ARG = base64.b64encode(ctypes.string_at(handle, 64)).decode()
"#,
    runner: r#"
import base64, ctypes, sys, torch
torch.ones(1, device="cuda").sum().item()
class Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]
lib, ptr, byte = ctypes.CDLL("libcuda.so.1"), ctypes.c_uint64(), ctypes.c_ubyte()
lib.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), Handle, ctypes.c_uint]
rc = lib.cuIpcOpenMemHandle_v2(ctypes.byref(ptr), Handle.from_buffer_copy(base64.b64decode(sys.argv[1])), 1)
if rc != 0:
    raise RuntimeError("cuIpcOpenMemHandle of the judge's arena failed with error %d" % rc)
rc = lib.cuMemcpyDtoH_v2(ctypes.byref(byte), ctypes.c_uint64(ptr.value), ctypes.c_size_t(1))
if rc != 0 or byte.value != 42:
    raise RuntimeError("reading the judge's arena: error %d, value %d" % (rc, byte.value))
"#,
};

/// A trial that takes longer than this failed (a CUDA init that hangs must not hold the
/// daemon's start-up, which `version`, `gpus` and every worker start wait for, forever).
const TRIAL_LIMIT: Duration = Duration::from_secs(240);

/// The whole ladder's time: trials left when it is spent count as failed, untried.
const LADDER_LIMIT: Duration = Duration::from_secs(900);

/// The judge's side of a GPU trial: `argv[3]` (the judge's code) here, then a runner
/// through `argv[1]` (the launcher's full argv, as spawn.py builds it, plus the judge's
/// `RUNNER_ARG` if it set one), bounded by `argv[2]` seconds. The last line of stderr says
/// which side failed and how.
const JUDGE_TRIAL: &str = r#"
import json, subprocess, sys
def last(text):
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    return lines[-1] if lines else ""
g = {}
try:
    exec(sys.argv[3], g)
except BaseException as e:
    print("the judge: %s: %s" % (type(e).__name__, last(str(e)) or "(no message)"), file=sys.stderr)
    sys.exit(3)
argv = json.loads(sys.argv[1]) + ([g["RUNNER_ARG"]] if "RUNNER_ARG" in g else [])
try:
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, errors="replace", timeout=float(sys.argv[2]))
except subprocess.TimeoutExpired:
    print("the runner: no answer within %s s" % sys.argv[2], file=sys.stderr)
    sys.exit(4)
if r.returncode != 0:
    print("the runner: %s (exit status %d)" % (last(r.stderr) or "no message", r.returncode), file=sys.stderr)
    sys.exit(4)
"#;

/// The last non-empty line of a failed trial's stderr (a traceback's last line names the
/// error), at most 400 characters.
fn last_line(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let line = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    line.chars().take(400).collect()
}

/// Runs `cmd` (its own process group) for at most `limit`; its exit status and stderr.
fn run_bounded(cmd: &mut Command, limit: Duration) -> Result<(ExitStatus, Vec<u8>), String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot run {:?}: {e}", cmd.get_program()))?;
    let mut stderr = child.stderr.take().expect("piped stderr");
    // Read while it runs: a chatty program must not block on a full pipe.
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stderr.read_to_end(&mut buf);
        buf
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Ok(None) => {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(child.id() as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
                let _ = child.wait();
                return Err(format!("no result within {} s", limit.as_secs()));
            }
            Err(e) => return Err(format!("waiting for the trial: {e}")),
        }
    };
    Ok((status, reader.join().unwrap_or_default()))
}

/// The harness's Python under the judge policy (`inputs`, scratch and inbox set here):
/// starts, and imports what every evaluation imports first.
pub fn python_trial(cfg: &Config, bin: &Path, inputs: &PolicyInputs) -> Result<(), String> {
    let dir = cfg.scratch_dir().join("trial");
    ensure_root(&cfg.scratch_dir())?;
    fresh_dir(&dir, inputs.run_as, 0o700)?;
    let mut inputs = inputs.clone();
    (inputs.scratch, inputs.inbox) = (dir.clone(), dir.clone());
    let mut judge = Policy::build(&inputs)?.judge;
    judge.env = vec![("PATH".into(), "/usr/bin:/bin".into())];
    let result = run_bounded(
        Command::new(bin)
            .args(judge.to_args())
            .arg("--")
            .arg(&cfg.python)
            .args(["-c", "import json, sys"])
            .current_dir("/")
            .env_clear(),
        Duration::from_secs(60),
    );
    let _ = std::fs::remove_dir_all(&dir);
    match result? {
        (status, _) if status.success() => Ok(()),
        (status, stderr) => Err(format!(
            "{} ({status})",
            String::from_utf8_lossy(&stderr).trim()
        )),
    }
}

/// The CUDA trials of one daemon start: the ladder's `trial` function.
pub struct GpuTrial<'a> {
    pub cfg: &'a Config,
    pub bin: &'a Path,
    /// The policy's inputs with the runner user (if any); scratch and inbox are set here.
    pub inputs: PolicyInputs,
    pub gpu: &'a DeviceInfo,
    /// What the judge and the runner run ([`CUDA`]; tests give a stand-in that does what
    /// cuInit was measured to do).
    pub code: GpuCode<'a>,
}

impl GpuTrial<'_> {
    /// The ladder over this trial (`widen::Finding::find`). Variants that give the same
    /// command lines (the `user` layer when there is no runner user, say) run once.
    pub fn ladder(&self) -> Finding {
        let mut seen: HashMap<Vec<String>, Result<(), String>> = HashMap::new();
        let start = Instant::now();
        Finding::find(|v| {
            if start.elapsed() > LADDER_LIMIT {
                return Err(format!(
                    "not tried: the trials took more than {} s",
                    LADDER_LIMIT.as_secs()
                ));
            }
            let (key, run) = match self.command(v) {
                Ok(c) => c,
                Err(e) => return Err(e),
            };
            if let Some(r) = seen.get(&key) {
                return r.clone();
            }
            let r = run();
            seen.insert(key, r.clone());
            r
        })
    }

    /// The trial of `v`: its command lines (to tell variants apart) and a way to run it.
    #[allow(clippy::type_complexity)]
    fn command<'s>(
        &'s self,
        v: &Variant,
    ) -> Result<(Vec<String>, Box<dyn FnOnce() -> Result<(), String> + 's>), String> {
        let run_as = if v.keeps_user() {
            self.inputs.run_as
        } else {
            None
        };
        let dir = self.cfg.scratch_dir().join("trial");
        let runner_dir = dir.join("runner");
        let mut inputs = self.inputs.clone();
        (inputs.scratch, inputs.inbox, inputs.run_as) = (dir.clone(), dir.clone(), run_as);
        let policy = Policy::build(&inputs)?;
        let (mut judge, mut runner) = (policy.judge, policy.runner);
        v.apply(&mut judge, &mut runner);
        judge.env = worker_env(self.cfg, &dir, self.gpu);
        runner.env = worker_env(self.cfg, &runner_dir, self.gpu);
        runner.rw.push(runner_dir.clone());
        let python = resolve_python(&self.cfg.python).display().to_string();
        let mut runner_argv = vec![self.bin.display().to_string()];
        runner_argv.extend(runner.to_args());
        runner_argv.extend(["--".into(), python, "-c".into(), self.code.runner.into()]);
        let mut key = judge.to_args();
        key.extend(runner_argv.iter().cloned());
        key.push(self.code.judge.into());
        let run = move || {
            ensure_root(&self.cfg.scratch_dir())?;
            fresh_dir(&dir, run_as, 0o700)?;
            for d in SCRATCH_SUBDIRS.iter().chain(&["runner"]) {
                fresh_dir(&dir.join(d), run_as, 0o700)?;
            }
            let limit = TRIAL_LIMIT - Duration::from_secs(20);
            let result = run_bounded(
                Command::new(self.bin)
                    .args(judge.to_args())
                    .arg("--")
                    .arg(&self.cfg.python)
                    .args(["-c", JUDGE_TRIAL])
                    .arg(serde_json::to_string(&runner_argv).unwrap_or_default())
                    .arg(limit.as_secs().to_string())
                    .arg(self.code.judge)
                    .current_dir("/")
                    .env_clear(),
                TRIAL_LIMIT,
            );
            let _ = std::fs::remove_dir_all(&dir);
            match result? {
                (status, _) if status.success() => Ok(()),
                (status, stderr) => Err(match last_line(&stderr) {
                    l if l.is_empty() => format!("{status}, nothing on stderr"),
                    l => l,
                }),
            }
        };
        Ok((key, Box::new(run)))
    }
}
