"""Zero false rejections: every shipped seed of every task, through the judge (its own runner,
secret timing inputs, sampled timed outputs, the timer cross-check), in CPU mode at the smoke
shapes."""
import pytest
from hpaths import KERNELS

from harness import evaluate as ev
from harness.taskload import load_task

CASES = [(t, str(p)) for t in ("demo", "mla", "kda") for p in sorted((KERNELS / t / "seeds").glob("*.py"))]


@pytest.mark.parametrize("task,seed", CASES, ids=lambda x: x.rsplit("/", 1)[-1])
def test_seed_passes_the_judge(task, seed):
    task_dir = KERNELS / task
    t = load_task(task_dir)
    r = ev.evaluate({"task_dir": str(task_dir), "candidate": seed, "seeds": [1, 2], "baseline": "reference",
                     "timing": {"cpu_reps": 3}, "profile": False})
    assert r["class"] == "ok", f"{task} {seed}: [{r.get('rule')}] {r['message']}"
    assert all(c["passed"] for c in r["checks"])
    assert len(r["shapes"]) == len(t.smoke)
    for s in r["shapes"]:
        assert s["timed_outputs_checked"] >= 3 and s["median_us"] > 0
