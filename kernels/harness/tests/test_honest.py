"""No false rejections: the demo seed over several configs x several seeds, all 'ok'."""
import pytest
from hpaths import DEMO

from harness.evaluate import describe, evaluate
from harness.taskload import load_task

CONFIGS = [
    None,  # DEFAULT
    {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 1},
    {"SPLIT_K": 2, "BLOCK_K": 16},
    {"SPLIT_K": 4, "BLOCK_M": 64, "BLOCK_N": 16, "GROUP_M": 8},
    {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 8, "num_stages": 3},
]


@pytest.mark.parametrize("seed_file", [str(p) for p in load_task(DEMO).seeds])
@pytest.mark.parametrize("ci", range(len(CONFIGS)))
def test_honest_configs(seed_file, ci):
    d = describe({"task_dir": str(DEMO), "candidate": seed_file})
    assert d["class"] == "ok"
    seeds = [100 * ci + s for s in (1, 2, 3, 4)]
    r = evaluate({"task_dir": str(DEMO), "candidate": seed_file, "config": CONFIGS[ci], "seeds": seeds})
    assert r["class"] == "ok", r["message"]
    assert r["correct"] and r["interpreted"]
    assert len(r["checks"]) == 2 * len(seeds)  # 2 smoke shapes x seeds, one output
    assert all(c["passed"] for c in r["checks"])
    assert {s["shape"] for s in r["shapes"]} == {"s16", "s_odd"}
    assert r["speedup"] is not None
    assert r["profile"]["kernels"] and r["profile"]["kernels"][0]["name"] == "_matmul_kernel"
    # the result names the full configuration that ran: the request's keys over DEFAULT
    assert r["config"] == {**d["default"], **(CONFIGS[ci] or {})}


def test_config_outside_space_is_an_error():
    seed = str(load_task(DEMO).seeds[0])
    r = evaluate({"task_dir": str(DEMO), "candidate": seed, "config": {"BLOCK_M": 48}})
    assert r["class"] == "error" and "SPACE" in r["message"]
