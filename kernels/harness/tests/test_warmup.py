"""Compile-only warm-up and compile-ahead depth (issue #12; warmup.py, ahead.py) through the judge
as the daemon drives it. On the CPU the interpreter compiles nothing, so KERNELD_WARM_UP=1 makes
the judge warm up anyway: what is checked here is the protocol and the judgement around it (a
warm-up's failure never becomes the candidate's, a global-state change in it is rejected, a
broken warm-up runner is replaced, `ahead` candidates are held). That a warm-up compiles and
launches nothing is checked on the GPU (test_warmup_gpu.py)."""
import time

import pytest
from hpaths import DEMO
from test_worker_protocol import SEED, Worker

from harness import runner_protocol as rp
from harness import warmup
from harness.taskload import load_task

TIMING = {"warmup_ms": 1, "min_reps": 3, "max_reps": 5, "target_noise_pct": 5.0}
TILED = (DEMO / "seeds" / "tiled.py").read_text()


def evaluate(w, rid, config, candidate=SEED):
    r = w.ask({"id": rid, "op": "evaluate", "task_dir": str(DEMO), "candidate": candidate, "config": config,
               "baseline": "reference", "seeds": [1], "timing": TIMING, "profile": False})
    assert r["id"] == rid and r["ok"], r
    return r["result"]


def prepare(w, rid, config, candidate=SEED, ahead=1):
    r = w.ask({"id": rid, "op": "prepare", "task_dir": str(DEMO), "candidate": candidate, "config": config,
               "ahead": ahead})
    assert r["id"] == rid and r["ok"], r
    assert r["accepted"] is True, r
    return r


@pytest.fixture(scope="module")
def w():
    w = Worker(cwd="/tmp", KERNELD_WARM_UP="1")
    yield w
    w.p.kill()
    w.p.wait()


@pytest.fixture(scope="module")
def unchecked():
    """A judge without its static checks (as the harness's fault suite runs): what the runtime
    layers catch on their own."""
    w = Worker(cwd="/tmp", KERNELD_WARM_UP="1", KERNELD_UNSAFE_SKIP_STATIC_CHECKS="1")
    yield w
    w.p.kill()
    w.p.wait()


def test_the_warm_calls_cover_every_checked_shape_with_public_inputs():
    task = load_task(DEMO)
    _, checked = task.resolve_shapes(None, True)
    calls = warmup.warm_calls(task, checked, warmup.torch.float16)
    assert [c["where"] for c in calls] == [f"warm-up {n}" for n, _ in checked]
    # what the runner is sent parses, and small tensors carry their values
    req = rp.parse_request(rp.encode(rp.Warm(1, calls)))
    assert req.op == "warm" and len(req.calls) == len(checked)
    a = req.calls[0]["inputs"]["a"]
    assert len(a["values"]) == a["shape"][0] * a["shape"][1]
    # the same public seed each time: the cache gives the same specs
    assert warmup.warm_calls(task, checked, warmup.torch.float16) == calls


def test_large_values_are_dropped_to_keep_the_request_small(monkeypatch):
    task = load_task(DEMO)
    _, checked = task.resolve_shapes(None, True)
    monkeypatch.setattr(warmup, "REQUEST_MAX_BYTES", 1000)
    calls = warmup.warm_calls(task, checked, warmup.torch.float16)
    assert all("values" not in v for c in calls for v in c["inputs"].values())
    monkeypatch.undo()
    assert any("values" in v for c in warmup.warm_calls(task, checked, warmup.torch.float16)
               for v in c["inputs"].values())


def test_a_warmed_candidate_is_judged_as_without_the_warm_up(w):
    cold = evaluate(w, 1, {"BLOCK_M": 16})
    assert cold["class"] == "ok", cold["message"]
    prepare(w, 2, {"BLOCK_M": 16, "BLOCK_N": 16})
    time.sleep(8)  # start, import and warm-up "while the GPU times another candidate"
    warm = evaluate(w, 3, {"BLOCK_M": 16, "BLOCK_N": 16})
    assert warm["class"] == "ok", warm["message"]
    assert warm["phases"]["ahead"] > cold["phases"]["ahead"] == 0
    assert warm["phases"]["import"] < 0.05
    assert "warm_up" not in warm, warm.get("warm_up")
    assert [c["shape"] for c in warm["checks"]] == [c["shape"] for c in cold["checks"]]


def test_depth_holds_that_many_prepared_runners(w):
    configs = [{"BLOCK_M": m, "BLOCK_N": n} for m, n in ((32, 16), (32, 32), (64, 16), (64, 32))]
    for i, c in enumerate(configs):
        prepare(w, 10 + i, c, ahead=4)
    time.sleep(10)
    for i, c in enumerate(configs):
        res = evaluate(w, 20 + i, c)
        assert res["class"] == "ok" and res["phases"]["ahead"] > 0, (c, res["phases"])


HOSTILE_FLAG = TILED + '''
_calls = [0]
_entry = matmul


def matmul(inputs, out, config):
    # only on its first call: a check around later calls would never see it
    _calls[0] += 1
    if _calls[0] == 1:
        torch.backends.cudnn.benchmark = not torch.backends.cudnn.benchmark
    return _entry(inputs, out, config)
'''


def prepared_then_judged(w, path, text):
    """The candidate `text`, prepared (imported and warmed up) ahead, then evaluated."""
    path.write_text(text)
    prepare(w, 1, {}, candidate=str(path))
    time.sleep(6)
    return evaluate(w, 2, {}, candidate=str(path))


def test_a_global_flag_changed_during_the_warm_up_is_rejected(unchecked, tmp_path):
    res = prepared_then_judged(unchecked, tmp_path / "first_call_flag.py", HOSTILE_FLAG)
    assert res["class"] == "rejected" and res["rule"] == "introspection", res["message"]
    assert "warm-up" in res["message"]


CRASH_IN_WARM_UP = TILED + '''
_entry = matmul


def matmul(inputs, out, config):
    # dies when its Triton launches are compile-only (the warm-up), never in a real call
    if triton.runtime.jit.JITFunction.run.__qualname__ != "JITFunction.run":
        raise SystemExit(7)
    return _entry(inputs, out, config)
'''


def test_a_warm_up_failure_is_not_the_candidates(unchecked, tmp_path):
    res = prepared_then_judged(unchecked, tmp_path / "fails_when_warm.py", CRASH_IN_WARM_UP)
    assert res["class"] == "ok", res["message"]
    assert "SystemExit" in res.get("warm_up", ""), res.get("warm_up")


def test_a_retime_waits_until_prepared_runners_are_quiet_and_leaves_them(w):
    prepare(w, 1, {"BLOCK_M": 128, "BLOCK_N": 16})   # starting, importing, warming up: seconds
    r = w.ask({"id": 2, "op": "evaluate", "task_dir": str(DEMO), "candidate": SEED, "config": {"BLOCK_M": 16},
               "baseline": "reference", "seeds": [1], "timing": TIMING, "retime": True})
    assert r["ok"] and r["result"]["class"] == "ok" and r["result"]["retimed"], r
    # it waited for the prepared runner (its start alone takes seconds), not beside it
    assert r["result"]["phases"]["runner_wait"] > 1.0, r["result"]["phases"]
    res = evaluate(w, 3, {"BLOCK_M": 128, "BLOCK_N": 16})
    assert res["class"] == "ok" and res["phases"]["ahead"] > 0, res["phases"]


def test_a_retime_warms_its_own_fresh_runner_up_and_judges_as_before(w):
    r = w.ask({"id": 1, "op": "evaluate", "task_dir": str(DEMO), "candidate": SEED, "config": {"BLOCK_M": 64},
               "baseline": "reference", "seeds": [1], "timing": TIMING, "retime": True})
    res = r["result"]
    assert r["ok"] and res["class"] == "ok" and res["retimed"] and res["profile"] is None, r
    assert res["phases"]["ahead"] == 0, res["phases"]      # its own start is in runner_wait
    assert res["phases"]["import"] < 0.05, res["phases"]   # imported (and warmed) while settling
    assert "warm_up" not in res, res.get("warm_up")
    assert res["config"]["BLOCK_M"] == 64
