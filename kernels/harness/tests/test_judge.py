"""The judge/runner split (PROCESS_MODEL.md) in CPU mode: the judge never imports a candidate,
a runner that crashes, hangs or lies about the protocol is killed and answered for while the
judge goes on, re-timing, the cost of the checks, and the timer cross-check's bound."""
import json
import os
import sys

import pytest
from hpaths import DEMO

from harness import evaluate as ev
from harness import judge_timing as jt
from harness import spawn
from harness import timing
from harness.correctness import CheckFailure

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = str(DEMO / "seeds" / "tiled.py")
REQ = {"task_dir": str(DEMO), "seeds": [1, 2], "timing": {"cpu_reps": 3}, "profile": False}


def honest():
    r = ev.evaluate({**REQ, "candidate": SEED})
    assert r["class"] == "ok", r["message"]
    return r


def test_the_judge_never_imports_the_candidate():
    r = ev.evaluate({**REQ, "candidate": SEED, "profile": True})
    assert r["class"] == "ok", r["message"]
    assert not [m for m in sys.modules if m.startswith("kerneld_cand_")]
    assert r["runner"]["pid"] != os.getpid() and r["runner"]["sandbox"] is None
    assert r["profile"]["kernels"]


def test_every_result_says_what_the_checks_cost():
    r = honest()
    assert set(r["phases"]) == set(ev.Phases.NAMES)
    assert all(v >= 0 for v in r["phases"].values())
    assert r["phases"]["compile"] > 0 and r["phases"]["timing"] > 0
    assert sum(r["phases"].values()) <= r["elapsed_s"] * 1.05 + 0.05 + r["phases"]["runner_start"]
    for s in r["shapes"]:
        assert s["timed_outputs_checked"] >= 3
        assert s["ci_low_us"] <= s["median_us"] <= s["ci_high_us"]
        tc = s["timer_check"]
        assert tc["reported_us"] > 0 and tc["fixed_us"] >= 0


def test_a_crashing_runner_is_answered_and_the_judge_goes_on(monkeypatch):
    monkeypatch.setenv("KERNELD_UNSAFE_SKIP_STATIC_CHECKS", "1")
    r = ev.evaluate({**REQ, "candidate": os.path.join(HERE, "faults", "segfault.py")})
    assert r["class"] == "crashed", r["message"]
    assert "SIGSEGV" in r["message"]
    monkeypatch.delenv("KERNELD_UNSAFE_SKIP_STATIC_CHECKS")
    honest()


def test_a_hanging_runner_is_killed_and_answered(monkeypatch):
    monkeypatch.setenv("KERNELD_UNSAFE_SKIP_STATIC_CHECKS", "1")
    r = ev.evaluate({**REQ, "candidate": os.path.join(HERE, "faults", "python_hang.py"), "runner_timeout_s": 4})
    assert r["class"] == "timed_out", r["message"]
    monkeypatch.delenv("KERNELD_UNSAFE_SKIP_STATIC_CHECKS")
    honest()


def test_a_runner_that_breaks_the_protocol_is_killed(tmp_path, monkeypatch):
    fake = tmp_path / "fake_runner.py"
    fake.write_text("import json, sys\n"
                    "print(json.dumps({'event': 'ready', 'pid': 1, 'mode': 'cpu', 'torch': 'x', 'triton': 'y',"
                    " 'python': 'z'}), flush=True)\n"
                    "for line in sys.stdin:\n"
                    "    print('{\"id\": 1, \"ok\": true, \"stream_us\": [\"forged\"]}', flush=True)\n")
    monkeypatch.setattr(spawn, "RUNNER_PY", str(fake))
    r = ev.evaluate({**REQ, "candidate": SEED}, pool=spawn.Pool())
    assert r["class"] == "error" and r["rule"] == "runner-protocol", r["message"]
    monkeypatch.undo()
    honest()


def test_the_runner_environment_is_cleared(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("NOTIFY_SOCKET", "/run/systemd/notify")
    env = spawn.runner_env(str(tmp_path))
    assert "OPENAI_API_KEY" not in env and "NOTIFY_SOCKET" not in env
    assert set(env) <= {"PATH", "LANG", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "TMPDIR", "HOME",
                        "XDG_CACHE_HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH",
                        "CUDA_VISIBLE_DEVICES", "TRITON_INTERPRET", "TRITON_LIBCUDA_PATH", "KERNELD_RUNNER_SCRATCH",
                        "KERNELD_SANDBOX_INFO"}
    for k in ("TMPDIR", "HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH"):
        assert env[k].startswith(str(tmp_path))


def test_the_runner_finds_libcuda_without_ldconfig(monkeypatch, tmp_path):
    """The sandboxed runner may not execute /sbin/ldconfig (Triton's way to find libcuda): it
    gets the directory the daemon gave the judge, or the one the judge finds itself."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setenv("TRITON_LIBCUDA_PATH", "/usr/lib/x86_64-linux-gnu")
    assert spawn.runner_env(str(tmp_path))["TRITON_LIBCUDA_PATH"] == "/usr/lib/x86_64-linux-gnu"
    monkeypatch.delenv("TRITON_LIBCUDA_PATH")
    monkeypatch.setattr(spawn, "_libcuda_dir", lambda: "/opt/driver/lib")
    assert spawn.runner_env(str(tmp_path))["TRITON_LIBCUDA_PATH"] == "/opt/driver/lib"
    monkeypatch.setenv("TRITON_INTERPRET", "1")             # the interpreter needs no driver
    assert "TRITON_LIBCUDA_PATH" not in spawn.runner_env(str(tmp_path))


def test_the_launcher_wraps_the_runner(monkeypatch, tmp_path):
    """KERNELD_RUNNER_LAUNCHER: the judge appends --rw SCRATCH, the --env pairs and `--`."""
    log = tmp_path / "argv.json"
    launcher = tmp_path / "launcher.py"
    launcher.write_text("import json, os, sys\n"
                        f"json.dump(sys.argv[1:], open({str(log)!r}, 'w'))\n"
                        "i = sys.argv.index('--')\n"
                        "opts = sys.argv[1:i]\n"
                        "env = dict(opts[j + 1].split('=', 1) for j in range(len(opts)) if opts[j] == '--env')\n"
                        "os.execve(sys.argv[i + 1], sys.argv[i + 1:], env)\n")
    monkeypatch.setenv("KERNELD_RUNNER_LAUNCHER", json.dumps([sys.executable, str(launcher), "--no-net"]))
    r = ev.evaluate({**REQ, "candidate": SEED}, pool=spawn.Pool())
    assert r["class"] == "ok", r["message"]
    assert r["runner"]["sandbox"] == "kerneld-sandbox"
    argv = json.loads(log.read_text())
    assert argv[0] == "--no-net" and argv[1] == "--rw" and "--" in argv
    pairs = argv[3:argv.index("--")]
    assert pairs[0::2] and all(p == "--env" for p in pairs[0::2])
    assert any(p.startswith("TRITON_INTERPRET=") for p in pairs[1::2])
    assert argv[argv.index("--") + 1:][-1].endswith("runner.py")


def test_retime_times_again_with_one_seed_and_no_profile():
    r = ev.evaluate({**REQ, "candidate": SEED, "retime": True, "profile": True, "seeds": [3, 4, 5]})
    assert r["class"] == "ok" and r["retimed"] is True and r["profile"] is None
    assert {c["seed"] for c in r["checks"]} == {3}
    assert r["shapes"] and all(s["baseline_us"] for s in r["shapes"])


def test_secret_seeds_avoid_the_daemons():
    import random
    rng = random.Random(1)
    avoid = {rng.getrandbits(62)}
    rng = random.Random(1)
    got = ev._secret_seeds(rng, 5, avoid)
    assert len(set(got)) == 5 and not (set(got) & avoid)


def test_median_interval():
    xs = list(range(1, 101))
    lo, hi = timing.median_ci([float(x) for x in xs])
    assert lo < 50.5 < hi and 38 <= lo <= 42 and 59 <= hi <= 62
    assert timing.median_ci([3.0, 1.0]) == (1.0, 3.0)
    s = timing.summarize([10.0] * 20 + [30.0] * 20)   # bimodal: the interval says so
    assert s["ci_high_us"] - s["ci_low_us"] == 20.0


@pytest.mark.parametrize("device_us,fixed_us,host_hidden", [(5.0, 120.0, True), (30.0, 150.0, True),
                                                            (300.0, 150.0, True), (5000.0, 200.0, True)])
def test_timer_bound_passes_honest_and_catches_lies(device_us, fixed_us, host_hidden):
    """Honest (wall = fixed + device + a little jitter): never rejected, launch-bound included.
    A lie of 1.5x: caught when the lie exceeds the allowance; a 10x lie above 10 us always."""
    n, ping = 8, 0.0002
    gpu_allow, frac, factor = 5.0, 0.05, 1.4

    def batches(reported):
        wall = n * (fixed_us + device_us + 1.0) * 1e-6 + ping
        return [(wall, reported)] * 6

    jt._timer_check(batches(device_us), [fixed_us * 1e-6] * 6, ping, n, factor, gpu_allow, frac, "s")
    allow = gpu_allow + frac * fixed_us
    for lie in (1.5, 10.0):
        caught = factor * device_us / lie < device_us + 1.0 - allow
        if caught:
            with pytest.raises(CheckFailure) as e:
                jt._timer_check(batches(device_us / lie), [fixed_us * 1e-6] * 6, ping, n, factor, gpu_allow, frac, "s")
            assert e.value.rule == "timer"
        if lie == 10.0 and device_us >= 30:
            assert caught
    with pytest.raises(CheckFailure, match="did not run the loop"):
        jt._timer_check([(n * fixed_us * 0.3e-6 + ping, 1.0)] * 6, [fixed_us * 1e-6] * 6, ping, n, factor,
                        gpu_allow, frac, "s")


def test_describe_reads_literals_and_asks_a_runner_otherwise(tmp_path):
    r = ev.describe({"task_dir": str(DEMO), "candidate": SEED})
    assert r["class"] == "ok" and r["default"]["BLOCK_M"] == 32
    src = open(SEED).read().replace("SPACE = {", "SPACE = dict(**{", 1)
    i = src.index("SPACE = dict(**{")
    j = src.index("\n}", i)
    src = src[:j] + "\n})" + src[j + 2:]
    p = tmp_path / "computed_space.py"
    p.write_text(src)
    r2 = ev.describe({"task_dir": str(DEMO), "candidate": str(p)})
    assert r2["class"] == "ok", r2["message"]
    assert r2["space"] == r["space"]
    assert not [m for m in sys.modules if m.startswith("kerneld_cand_")]


def test_a_side_without_timing_samples_is_an_error_not_a_null_figure():
    """Every batch throttled (or leaked past the hold): the shape has no figure, and the judge
    says why instead of replying null where the daemon reads a number."""
    from harness import evaluate
    res = {"discarded": 48, "leaked_samples": 0, "hold_us": 0.0, "method": "graph"}
    with pytest.raises(evaluate.CheckFailure) as e:
        evaluate._require_samples("b1_s8192", res, {"median_us": 21.0}, {"median_us": None})
    assert e.value.cls == "error" and e.value.rule == "timing-samples"
    assert "baseline" in e.value.message and "48 discarded" in e.value.message
    evaluate._require_samples("b1_s8192", res, {"median_us": 21.0}, None)   # no baseline asked: fine


def test_a_failed_baseline_stops_a_gpu_evaluation_and_is_said_on_a_cpu():
    msg = ev._baseline_failed("torch_compile", "b1_s8192", "PermissionError: nope", cpu=True)
    assert "torch_compile" in msg and "b1_s8192" in msg and "PermissionError" in msg
    with pytest.raises(CheckFailure) as e:
        ev._baseline_failed("torch_compile", "b1_s8192", "PermissionError: nope", cpu=False)
    assert e.value.cls == "error" and e.value.rule == "baseline-failed" and "PermissionError" in e.value.message
