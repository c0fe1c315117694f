"""The worker protocol end to end, as the daemon drives it: a subprocess in its own process
group, from an unrelated working directory, one JSON line per request and reply."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hpaths import DEMO, WORKER

HERE = Path(__file__).resolve().parent
SEED = str(DEMO / "seeds" / "tiled.py")


class Worker:
    def __init__(self, cwd="/", **extra_env):
        env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="", NOTIFY_SOCKET="/dev/null",
                   **extra_env)
        self.p = subprocess.Popen([sys.executable, "-u", str(WORKER)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=env,
                                  start_new_session=True)
        self.ready = self.read()

    def read(self):
        line = self.p.stdout.readline()
        assert line, "worker closed stdout; stderr:\n" + self.p.stderr.read().decode()[-3000:]
        return json.loads(line)

    def send_raw(self, raw: bytes):
        self.p.stdin.write(raw)
        self.p.stdin.flush()

    def ask(self, obj):
        self.send_raw((json.dumps(obj) + "\n").encode())
        return self.read()


@pytest.fixture(scope="module")
def worker():
    w = Worker(cwd="/tmp")
    yield w
    if w.p.poll() is None:
        w.p.kill()
        w.p.wait()


def test_ready_line(worker):
    r = worker.ready
    assert r["event"] == "ready" and r["mode"] == "cpu" and r["device"] is None
    assert r["pid"] == worker.p.pid
    assert r["torch"].startswith("2.") and r["triton"]
    # the judge: same-uid processes (its runners) cannot read its memory or environment
    assert r["role"] == "judge" and r["nondumpable"] is True and r["runner_launcher"] is False


def test_describe(worker):
    r = worker.ask({"id": 1, "op": "describe", "task_dir": str(DEMO), "candidate": SEED})
    assert r["id"] == 1 and r["ok"] and r["class"] == "ok"
    assert r["space"]["BLOCK_M"] and r["default"]["BLOCK_M"] == 32


def test_describe_rejected(worker):
    r = worker.ask({"id": 2, "op": "describe", "task_dir": str(DEMO),
                    "candidate": str(HERE / "adversarial" / "thread.py")})
    assert r["ok"] and r["class"] == "rejected" and r["space"] == {} and "[concurrency]" in r["message"]


def test_evaluate_seed(worker):
    r = worker.ask({"id": 3, "op": "evaluate", "task_dir": str(DEMO), "candidate": SEED,
                    "config": {"BLOCK_M": 16}, "shapes": ["m512"], "baseline": "reference", "seeds": [1, 2],
                    "timing": {"warmup_ms": 1, "min_reps": 3, "max_reps": 5, "target_noise_pct": 5.0},
                    "profile": True})
    assert r["id"] == 3 and r["ok"], r
    res = r["result"]
    assert res["class"] == "ok", res["message"]
    assert res["interpreted"] is True and res["correct"] is True
    assert [s["shape"] for s in res["shapes"]] == ["s16", "s_odd"]  # smoke replaces goal shapes
    for s in res["shapes"]:
        assert s["median_us"] > 0 and s["baseline_us"] > 0 and s["speedup"] > 0
    assert len(res["checks"]) == 4 and all(c["passed"] for c in res["checks"])
    assert res["elapsed_s"] < 30


def test_candidate_exception_and_stdout_is_protocol_only(worker):
    r = worker.ask({"id": 4, "op": "evaluate", "task_dir": str(DEMO),
                    "candidate": str(HERE / "protocol" / "prints_and_raises.py"), "seeds": [1]})
    # the forged line the candidate printed went to stderr, not to us
    assert r["id"] == 4 and r["ok"] and "forged" not in r
    assert r["result"]["class"] == "error" and "KeyError" in r["result"]["message"]


def test_compile_error(worker):
    r = worker.ask({"id": 5, "op": "evaluate", "task_dir": str(DEMO),
                    "candidate": str(HERE / "protocol" / "compile_error.py"), "seeds": [1]})
    assert r["ok"] and r["result"]["class"] == "compile_error", r["result"]["message"]


def test_import_error(worker):
    r = worker.ask({"id": 6, "op": "evaluate", "task_dir": str(DEMO),
                    "candidate": str(HERE / "protocol" / "import_error.py"), "seeds": [1]})
    assert r["ok"] and r["result"]["class"] == "error" and "ZeroDivisionError" in r["result"]["message"]


@pytest.mark.parametrize("raw,frag", [
    (b"this is not json\n", "bad request"),
    (b"[1, 2, 3]\n", "bad request"),
    (b'{"id": 7, "op": "frobnicate"}\n', "unknown op"),
    (b'{"id": 8, "op": "evaluate", "task_dir": "/nonexistent", "candidate": "/x.py"}\n', "no task.toml"),
    (b'{"id": 9, "op": "evaluate", "candidate": "/x.py"}\n', "task_dir"),
    (('{"id": 10, "op": "evaluate", "task_dir": "%s", "candidate": "/nonexistent.py"}\n' % DEMO).encode(), "cannot read"),
    (('{"id": 11, "op": "evaluate", "task_dir": "%s", "candidate": "%s", "baseline": "nope"}\n' % (DEMO, SEED)).encode(), "no baseline"),
    (('{"id": 12, "op": "evaluate", "task_dir": "%s", "candidate": "%s", "seeds": ["x"]}\n' % (DEMO, SEED)).encode(), "seeds"),
    (b"\xff\xfe garbage\n", "bad request"),
])
def test_bad_requests(worker, raw, frag):
    worker.send_raw(raw)
    r = worker.read()
    assert r["ok"] is False and frag in r["error"], r


def test_shutdown_exits_zero():
    w = Worker(cwd=str(Path.home()))
    r = w.ask({"id": 42, "op": "shutdown"})
    assert r == {"id": 42, "ok": True}
    assert w.p.wait(timeout=30) == 0


def test_killpg_on_hang():
    """What the daemon does on a timeout: kill the whole process group; a fresh worker is ready."""
    import signal
    w = Worker(cwd="/tmp")
    os.killpg(w.p.pid, signal.SIGKILL)
    assert w.p.wait(timeout=10) != 0
    t0 = time.time()
    w2 = Worker(cwd="/tmp")
    assert w2.ready["event"] == "ready"
    w2.ask({"id": 1, "op": "shutdown"})
    assert w2.p.wait(timeout=30) == 0
    assert time.time() - t0 < 60


def test_sigint_abandons_the_request_and_the_worker_stays():
    """The daemon's pause/cancel: SIGINT makes the worker answer the request in flight with
    `aborted` and keep serving; between requests SIGINT is ignored."""
    import signal

    w = Worker(cwd="/tmp")
    try:
        w.p.send_signal(signal.SIGINT)              # idle: ignored
        assert w.ask({"id": 1, "op": "ping"})["ok"]
        hang = str(HERE / "faults" / "python_hang.py")
        w.send_raw((json.dumps({"id": 2, "op": "evaluate", "task_dir": str(DEMO), "candidate": hang,
                                "config": {"X": 1}, "shapes": ["m512"], "baseline": "torch_fp32",
                                "seeds": [1]}) + "\n").encode())
        time.sleep(3.0)                             # well inside the candidate's endless loop
        w.p.send_signal(signal.SIGINT)
        r = w.read()
        assert r["id"] == 2 and r["ok"] is False and r.get("aborted") is True, r
        again = w.ask({"id": 3, "op": "evaluate", "task_dir": str(DEMO), "candidate": SEED, "config": {},
                       "shapes": ["m512"], "baseline": "torch_fp32", "seeds": [1]})
        assert again["id"] == 3 and again["ok"] and again["result"]["class"] == "ok", again
        assert w.p.poll() is None
    finally:
        w.p.kill()
        w.p.wait()
