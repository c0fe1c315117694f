"""The device script's logic on the CPU (kernels/kda/bench_gpu.py, run by scripts/gpu/kda_bench.sh):
a dry run under the interpreter on one smoke shape with a seed that raises and one that does not
parse, so the single device call cannot die on a typo and fails soft; and the summary of a
GPU-shaped JSON (FLA's CUDA-graph row as the reference, a skipped shape, a failed check)."""
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
SCRIPT = HERE / "bench_gpu.py"
ROOT = HERE.parents[1]

BROKEN = """SPACE = {"X": [1]}
BEST = {"X": 1}
DEFAULT = dict(BEST)


def kda(inputs, out, config):
    raise RuntimeError("broken on purpose")
"""


def test_dry_run_fails_soft(tmp_path):
    (tmp_path / "raises.py").write_text(BROKEN)
    (tmp_path / "syntax.py").write_text("def kda(inputs, out, config)\n    pass\n")
    out = tmp_path / "out"
    env = dict(os.environ, TRITON_INTERPRET="1", OUT=str(out), PY=sys.executable,
               DRY="1", DRY_SHAPES="s_strong_h0")
    # the shell script itself, with two extra seeds passed through to bench_gpu.py's --candidate
    res = subprocess.run(["bash", str(ROOT / "scripts" / "gpu" / "kda_bench.sh")], cwd=ROOT, env=dict(
        env, KDA_BENCH_ARGS=f"--candidate bad={tmp_path / 'raises.py'} --candidate syn={tmp_path / 'syntax.py'}"),
        capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    d = json.loads((out / "h200_v5.json").read_text())
    for k in ("gpu", "driver", "torch", "triton", "commit", "date"):
        assert k in d["env"], k
    assert [c["shape"] for c in d["checks"]] == ["s_strong_h0"] and d["checks"][0]["correct"], d["checks"]
    assert d["checks"][0]["causality"]["passed"], d["checks"][0]
    rows = {r["impl"]: r for r in d["results"]}
    assert rows["v5"]["median_us"] and rows["v4"]["median_us"] and rows["torch_chunked"]["median_us"], rows
    assert rows["v5"]["correct"] is True and rows["v4"]["correct"] is None     # v4: no battery, re-check ok
    assert rows["bad"]["median_us"] is None and "broken on purpose" in rows["bad"]["error"]
    # a split variant of v5 (auto does not split 5 chunks; SPLIT 8 clamps to 5 segments), re-checked
    assert rows["v5[SPLIT=8]"]["median_us"] and rows["v5[SPLIT=8]"]["error"] is None, rows["v5[SPLIT=8]"]
    assert "v5[SPLIT=1]" not in rows and "v5[C=64]" not in rows     # = auto here / headline shape only
    assert "error" in d["candidates"]["syn"]
    last = res.stdout.strip().splitlines()
    assert any(x.startswith("== KDA v5 bench") for x in last[-12:]), res.stdout[-2000:]
    assert "candidate syn not loaded" in last[-1], last[-3:]


def test_summary_of_a_gpu_json(tmp_path):
    d = {"env": {"gpu": "NVIDIA H200", "torch": "2.11.0", "triton": "3.6.0", "commit": "abc", "date": "d"},
         "baseline": "fla", "elapsed_s": 200.0, "shapes": ["b1_t8192_h16", "b1_t8192_h32"],
         "checks": [{"shape": "b1_t8192_h16", "correct": True, "error": None, "rel_rmse_o": 0.0039},
                    {"shape": "b1_t1000_h4_strong", "correct": False, "error": "wrong_result: causality"}],
         "results": [{"shape": "b1_t8192_h16", "impl": "v5", "median_us": 290.0, "speedup_vs_fla_cudagraph": 2.05},
                     {"shape": "b1_t8192_h16", "impl": "fla", "median_us": 600.0},
                     {"shape": "b1_t8192_h16", "impl": "fla_cudagraph", "median_us": 595.0}],
         "skipped": [{"stage": "time", "shape": "b1_t8192_h32", "why": "20 s left"}], "errors": [],
         "candidates": {"v5": {}, "v4": {"error": "x"}}}
    p = tmp_path / "r.json"
    p.write_text(json.dumps(d))
    res = subprocess.run([sys.executable, str(SCRIPT), "--summary", str(p)], capture_output=True, text=True,
                         timeout=60, env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"})
    assert res.returncode == 0, res.stderr
    s = res.stdout
    assert "1/2 shapes correct" in s and "FAIL b1_t1000_h4_strong" in s
    assert "x vs fla_cudagraph" in s and "v5 290.0 (2.05x)" in s
    assert "skipped time b1_t8192_h32" in s and "candidate v4 not loaded" in s
