"""`prepare` (compile-ahead, issue #12; ahead.py) through the judge as the daemon drives it: the
prepared candidate's runner imports it before its `evaluate`, which then finds it ready; a
different `evaluate` discards it; a prepared runner is a fresh one-candidate runner like any."""
import os
import time

import pytest
from hpaths import DEMO
from test_worker_protocol import SEED, Worker

TIMING = {"warmup_ms": 1, "min_reps": 3, "max_reps": 5, "target_noise_pct": 5.0}


def evaluate(w, rid, config):
    r = w.ask({"id": rid, "op": "evaluate", "task_dir": str(DEMO), "candidate": SEED, "config": config,
               "shapes": ["m512"], "baseline": "reference", "seeds": [1], "timing": TIMING,
               "profile": False})
    assert r["id"] == rid and r["ok"], r
    return r["result"]


def prepare(w, rid, config, candidate=SEED):
    r = w.ask({"id": rid, "op": "prepare", "task_dir": str(DEMO), "candidate": candidate, "config": config})
    assert r["id"] == rid and r["ok"], r
    return r


@pytest.fixture(scope="module")
def w():
    # one judge for the module (a judge's start is seconds of CI time); each test leaves
    # nothing prepared behind it
    w = Worker(cwd="/tmp")
    yield w
    w.p.kill()
    w.p.wait()


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def test_a_prepared_candidate_is_imported_ahead_in_a_fresh_runner(w):
    first = evaluate(w, 1, {"BLOCK_M": 16})
    assert first["class"] == "ok", first["message"]
    assert first["phases"]["ahead"] == 0
    r = prepare(w, 2, {"BLOCK_M": 32})
    assert r["accepted"] is True and r["message"] is None
    time.sleep(6)  # the runner starts and imports while "the GPU times another candidate"
    second = evaluate(w, 3, {"BLOCK_M": 32})
    assert second["class"] == "ok", second["message"]
    assert second["config"]["BLOCK_M"] == 32
    # the start and the import happened ahead: the evaluation waited for neither
    assert second["phases"]["ahead"] > 0
    assert second["phases"]["runner_wait"] < 1.0
    assert second["phases"]["import"] < 0.05
    # one candidate per process: a new runner, and the previous one is gone
    assert second["runner"]["pid"] != first["runner"]["pid"]
    assert not alive(first["runner"]["pid"]) and not alive(second["runner"]["pid"])


def test_other_evaluations_leave_prepared_runners_and_at_most_two_are_held(w):
    # as the daemon does: the next candidate is prepared just before this one's evaluate
    prepare(w, 1, {"BLOCK_M": 32})
    res = evaluate(w, 2, {"BLOCK_M": 16})
    assert res["class"] == "ok", res["message"]
    assert res["config"]["BLOCK_M"] == 16 and res["phases"]["ahead"] == 0
    # a third and a fourth prepare: the oldest (BLOCK_M 32) is dropped
    prepare(w, 3, {"BLOCK_M": 64})
    prepare(w, 4, {"BLOCK_M": 16})
    res = evaluate(w, 5, {"BLOCK_M": 32})
    assert res["class"] == "ok" and res["phases"]["ahead"] == 0
    res = evaluate(w, 6, {"BLOCK_M": 64})
    assert res["class"] == "ok" and res["phases"]["ahead"] > 0, res["phases"]
    # the one left (BLOCK_M 16) is taken by its evaluation: nothing stays prepared
    res = evaluate(w, 7, {"BLOCK_M": 16})
    assert res["class"] == "ok" and res["phases"]["ahead"] > 0, res["phases"]


def test_a_statically_rejected_candidate_is_not_prepared(w, tmp_path):
    bad = tmp_path / "thread.py"
    bad.write_text((DEMO / "seeds" / "tiled.py").read_text() + "\nimport threading\n")
    r = prepare(w, 1, {}, candidate=str(bad))
    assert r["accepted"] is False and "static" in r["message"]
    r = w.ask({"id": 2, "op": "prepare", "task_dir": str(DEMO), "candidate": SEED, "config": [1]})
    assert r["ok"] is False and "config" in r["error"]
