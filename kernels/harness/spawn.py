"""Starting, talking to and killing runners (PROCESS_MODEL.md, "How the judge starts a runner").

argv = LAUNCHER + ["--rw", SCRATCH, "--env", "K=V", ..., "--", PYTHON, "-u", RUNNER_PY], where
LAUNCHER is the JSON array in KERNELD_RUNNER_LAUNCHER (the daemon's kerneld-sandbox and its
policy); unset, the program runs directly with the same cleared environment. Each runner has
its own process group (killed whole on a timeout or a protocol error) and a fresh scratch
directory (mode 0700) that is deleted once it is gone. A spare runner is kept warm: python
start + torch/triton import + CUDA init take seconds, so the next one starts while the
current one works.
"""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from . import proc
from . import runner_protocol as rp
from . import strays

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER_PY = os.path.join(HERE, "runner.py")
_LIVE: dict = {}   # pid -> Runner, while it lives (strays.kill_strays spares them)
READY_TIMEOUT_S = float(os.environ.get("KERNELD_RUNNER_READY_TIMEOUT_S", "180"))


class RunnerDied(Exception):
    """The runner crashed, timed out or broke the protocol; `kind` is crashed | timed_out | protocol."""

    def __init__(self, kind: str, message: str, fatal: bool = False):
        super().__init__(message)
        self.kind, self.message, self.fatal = kind, message, fatal


def _launcher() -> list[str]:
    raw = os.environ.get("KERNELD_RUNNER_LAUNCHER")
    if not raw:
        return []
    try:
        v = json.loads(raw)
    except ValueError as e:
        raise RuntimeError(f"KERNELD_RUNNER_LAUNCHER is not a JSON array of strings: {e}") from None
    if not isinstance(v, list) or not v or not all(isinstance(x, str) for x in v):
        raise RuntimeError("KERNELD_RUNNER_LAUNCHER must be a non-empty JSON array of strings")
    return v


def _libcuda_dir() -> str | None:
    """Where libcuda.so.1 is, found by the judge (outside the runner's sandbox) the way Triton
    would find it; None where there is none (a CPU machine) or the lookup fails."""
    try:
        from triton.backends.nvidia.driver import libcuda_dirs
        return libcuda_dirs()[0]
    except Exception:                       # no driver, no ldconfig: the runner's launch will say
        return None


def runner_env(scratch: str) -> dict:
    """Exactly the variables a runner needs (PROCESS_MODEL.md): nothing secret, no daemon settings."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": os.environ.get("LANG", "C.UTF-8"),
           "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": os.path.dirname(HERE),
           "TMPDIR": scratch, "HOME": scratch, "XDG_CACHE_HOME": os.path.join(scratch, "cache"),
           "TRITON_CACHE_DIR": os.path.join(scratch, "triton"),
           "TORCHINDUCTOR_CACHE_DIR": os.path.join(scratch, "inductor"),
           "CUDA_CACHE_PATH": os.path.join(scratch, "cuda"), "KERNELD_RUNNER_SCRATCH": scratch}
    # SLURM_STEP_GPUS: on a Slurm node the runner's kerneld-sandbox finds its GPU's device
    # node there (--dev-from-env), as the judge's did.
    # TRITON_LIBCUDA_PATH: without it Triton's first launch runs `/sbin/ldconfig -p` to find
    # libcuda, and the sandbox lets the runner execute no such thing (on the H200 every
    # evaluation failed "Permission denied: '/sbin/ldconfig'"). The daemon gives the judge the
    # directory; the runner gets the judge's.
    for k in ("CUDA_VISIBLE_DEVICES", "TRITON_INTERPRET", "TRITON_LIBCUDA_PATH", "KERNELD_RUNNER_GPU_MEM_FRACTION",
              "SLURM_STEP_GPUS"):
        if k in os.environ:
            env[k] = os.environ[k]
    if "TRITON_LIBCUDA_PATH" not in env and env.get("TRITON_INTERPRET") != "1":
        lib = _libcuda_dir()
        if lib:
            env["TRITON_LIBCUDA_PATH"] = lib
    if os.environ.get("KERNELD_RUNNER_LAUNCHER"):
        env["KERNELD_SANDBOX_INFO"] = os.environ.get("KERNELD_SANDBOX_INFO", "kerneld-sandbox")
    return env


class Runner:
    """One runner process: start, wait ready, request/reply with timeouts, kill."""

    def __init__(self):
        root = os.environ.get("KERNELD_SCRATCH_ROOT") or None
        if root:
            os.makedirs(root, mode=0o700, exist_ok=True)
        self.scratch = tempfile.mkdtemp(prefix="runner-", dir=root)
        os.chmod(self.scratch, 0o700)
        uid, gid = os.environ.get("KERNELD_RUNNER_UID"), os.environ.get("KERNELD_RUNNER_GID")
        if uid and os.geteuid() == 0:
            os.chown(self.scratch, int(uid), int(gid or uid))
        env = runner_env(self.scratch)
        argv = [sys.executable, "-u", RUNNER_PY]
        launcher = _launcher()
        if launcher:
            pre = launcher + ["--rw", self.scratch]
            for k, v in env.items():
                pre += ["--env", f"{k}={v}"]
            argv = pre + ["--"] + argv
        self.t_start = time.perf_counter()
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, env=env,
                                  cwd=self.scratch, start_new_session=True, close_fds=True)
        self.ready: rp.Ready | None = None
        self.ready_s: float | None = None
        self._buf = b""
        self._id = 0
        self.dead = False
        proc.EXIT_HOOKS.append(self._killpg)
        _LIVE[self.p.pid] = self

    # -- lines -------------------------------------------------------------------------------------
    def _readline(self, timeout_s: float) -> bytes:
        deadline = time.monotonic() + timeout_s
        fd = self.p.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RunnerDied("timed_out", f"the runner did not answer within {timeout_s:.0f} s")
            r, _, _ = select.select([fd], [], [], min(left, 0.5))
            if not r:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                code = self.p.poll()
                if code is None:
                    try:
                        code = self.p.wait(timeout=2)
                    except subprocess.TimeoutExpired:
                        code = None
                raise RunnerDied("crashed", f"the runner exited ({_describe_exit(code)}) without answering",
                                 fatal=(code == 3))
            self._buf += chunk
            if len(self._buf) > rp.MAX_LINE and b"\n" not in self._buf:
                raise RunnerDied("protocol", f"the runner wrote a line longer than {rp.MAX_LINE} bytes")
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> rp.Ready:
        if self.ready is None:
            try:
                self.ready = rp.parse_ready(self._readline(timeout_s))
            except rp.ProtocolError as e:
                self.kill()
                raise RunnerDied("protocol", f"runner start: {e}") from None
            except RunnerDied:
                self.kill()
                raise
            self.ready_s = time.perf_counter() - self.t_start
        return self.ready

    def request(self, msg, timeout_s: float) -> rp.Reply:
        """Send one request (a runner_protocol dataclass without id) and wait for its reply."""
        self._id += 1
        msg.id = self._id
        try:
            self.p.stdin.write((rp.encode(msg) + "\n").encode())
            self.p.stdin.flush()
        except (BrokenPipeError, OSError):
            self.kill()
            raise RunnerDied("crashed", "the runner is gone (its stdin closed)") from None
        try:
            line = self._readline(timeout_s)
            return rp.parse_reply(line, self._id)
        except rp.ProtocolError as e:
            self.kill()
            raise RunnerDied("protocol", f"runner reply: {e}") from None
        except RunnerDied:
            self.kill()
            raise

    def _killpg(self):
        """The orphaned judge's last act: no waiting, no cleanup (the daemon clears the scratch root)."""
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, OSError):
            pass

    def kill(self):
        """SIGKILL the runner's whole process group, reap it, delete its scratch."""
        if self.dead:
            return
        self.dead = True
        self._killpg()
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        _LIVE.pop(self.p.pid, None)
        strays.kill_strays(set(_LIVE))  # what escaped the group (setsid) dies with the runner
        for f in (self.p.stdin, self.p.stdout):
            try:
                f.close()
            except Exception:
                pass
        shutil.rmtree(self.scratch, ignore_errors=True)
        try:
            proc.EXIT_HOOKS.remove(self._killpg)
        except ValueError:
            pass

    def close(self):
        """Ask politely, then kill (a runner never serves a second candidate anyway)."""
        if not self.dead and self.p.poll() is None:
            try:
                self.request(rp.Exit(0), 5)
            except RunnerDied:
                pass
        self.kill()


def stop_others(keep: "Runner | None") -> list:
    """SIGSTOP every live runner of this judge but `keep` (judge_timing.quiet_siblings): the
    runner process itself, not its group, so a compiler it started (ptxas: CPU only) finishes
    and nothing is left stopped should the runner die. A runner stopped when the judge dies is
    killed by its parent-death signal (runner.py sets it), which a stopped process receives."""
    stopped = []
    for pid, r in list(_LIVE.items()):
        if r is keep or r.dead or r.p.poll() is not None:
            continue
        try:
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        except (ProcessLookupError, PermissionError, OSError):
            pass
    return stopped


def continue_runners(pids: list) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except (ProcessLookupError, PermissionError, OSError):
            pass


def _describe_exit(code) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    if code == 125:
        return "exit 125: the sandbox could not be set up (see the judge's stderr)"
    return f"exit status {code}"


class Pool:
    """One runner per candidate, and one spare started ahead."""

    def __init__(self):
        self.spare: Runner | None = None

    def take(self) -> Runner:
        """The spare (or a new runner). The caller starts the next spare with prestart() once this
        one is ready: two runners importing torch at once only slow each other down."""
        r = self.spare if self.spare is not None and self.spare.p.poll() is None else None
        if r is None and self.spare is not None:
            self.spare.kill()
        self.spare = None
        if r is None:
            r = Runner()
        return r

    def prestart(self):
        if self.spare is None or self.spare.dead or self.spare.p.poll() is not None:
            try:
                self.spare = Runner()
            except OSError as e:
                print(f"judge: could not start a spare runner: {e}", file=sys.stderr)
                self.spare = None

    def shutdown(self):
        if self.spare is not None:
            self.spare.kill()
            self.spare = None
