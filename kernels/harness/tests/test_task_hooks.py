"""Optional task hooks and task-side failures: extra_checks wired into the battery, a failing
baseline does not fail the candidate, a broken task is a request error."""
import shutil

import pytest
from hpaths import DEMO

from harness.evaluate import RequestError, evaluate

SEED = str(DEMO / "seeds" / "tiled.py")


def make_task(tmp_path, extra_py="", toml_sub=None):
    d = tmp_path / "task"
    d.mkdir()
    shutil.copytree(DEMO / "seeds", d / "seeds")
    toml = (DEMO / "task.toml").read_text()
    if toml_sub:
        toml = toml.replace(*toml_sub)
    (d / "task.toml").write_text(toml)
    (d / "task.py").write_text((DEMO / "task.py").read_text() + "\n" + extra_py)
    return d


def test_extra_checks_pass_and_fail(tmp_path):
    ok = make_task(tmp_path, '''
def extra_checks(run_candidate, shape, seed, device, dtype):
    inputs = make_inputs(shape, seed, device, dtype)
    c = run_candidate(inputs)["c"]
    return [{"check": "finite", "passed": bool(c.isfinite().all())}]
''')
    r = evaluate({"task_dir": str(ok), "candidate": SEED, "seeds": [1, 2]})
    assert r["class"] == "ok", r["message"]
    assert sum(1 for c in r["checks"] if c["output"] == "check:finite") == 2  # once per smoke shape

    bad_dir = tmp_path / "b"
    bad_dir.mkdir()
    bad = make_task(bad_dir, '''
def extra_checks(run_candidate, shape, seed, device, dtype):
    run_candidate(make_inputs(shape, seed, device, dtype))
    return [{"check": "always_fails", "passed": False, "why": "test"}]
''')
    r = evaluate({"task_dir": str(bad), "candidate": SEED, "seeds": [1]})
    assert r["class"] == "wrong_result" and r["rule"] == "extra-check" and "always_fails" in r["message"]


def test_failing_baseline_is_reported_not_fatal(tmp_path):
    d = make_task(tmp_path, '''
def baseline_broken(a, b):
    raise ImportError("library not installed here")
''', ('torch_fp32 = "baseline_torch_fp32"', 'torch_fp32 = "baseline_torch_fp32"\nbroken = "baseline_broken"'))
    r = evaluate({"task_dir": str(d), "candidate": SEED, "seeds": [1], "baseline": "broken"})
    assert r["class"] == "ok" and r["speedup"] is None
    assert "library not installed" in r["baseline_error"]


def test_broken_task_is_a_request_error(tmp_path):
    d = make_task(tmp_path, "raise RuntimeError('task.py is broken')\n")
    with pytest.raises(RequestError, match="broken"):
        evaluate({"task_dir": str(d), "candidate": SEED})
