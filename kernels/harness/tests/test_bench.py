"""bench.py in CPU mode: JSON rows per (shape, impl) and a markdown table."""
import json
import os
import subprocess
import sys

from hpaths import DEMO, KERNELS


def test_bench_cpu(tmp_path):
    out, table = tmp_path / "r.json", tmp_path / "r.md"
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="", KERNELD_COMMIT="testcommit")
    p = subprocess.run([sys.executable, str(KERNELS / "harness" / "bench.py"), "--task", str(DEMO), "--seeds", "1,2",
                        "--out", str(out), "--table", str(table)], cwd="/tmp", env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert {(r["shape"], r["impl"]) for r in rows} == {(s, i) for s in ("s16", "s_odd")
                                                      for i in ("tiled", "reference", "torch_fp32")}
    for r in rows:
        for k in ("median_us", "spread_pct", "gbps", "tflops", "pct_roofline", "speedup_vs_reference",
                  "speedup_vs_torch_fp32", "gpu", "torch", "triton", "commit", "date"):
            assert k in r, k
        assert r["interpreted"] is True
    tiled = [r for r in rows if r["impl"] == "tiled"]
    assert all(r["correct"] for r in tiled)
    assert "| shape | impl |" in table.read_text()
