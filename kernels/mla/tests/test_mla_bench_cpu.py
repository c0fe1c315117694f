"""The device script scripts/gpu/mla_bench.sh (+ mla_bench.py), run on a CPU under Triton's interpreter at the smoke
shapes, so that the one GPU call does not die on a typo: the whole run (both batteries in their own processes, the
baseline's warm-up, bench.py per shape, h200.json, the summary printed last), and fail-soft when v4 is wrong or does
not import (v3 and the baseline are still timed, v4 is reported).

Run: CUDA_VISIBLE_DEVICES= .venv/bin/python -m pytest -q -p no:cacheprovider kernels/mla/tests/test_mla_bench_cpu.py
(~1 minute on two cores). What it cannot cover: the GPU-only lines (nvidia-smi, torch.cuda.empty_cache, the Gluon
core: v4 runs its tl core here).
"""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "gpu" / "mla_bench.py"
SMOKE = ["s37_h4", "s130_h8", "s64_h16"]


def _env():
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="", PY=sys.executable, KERNELD_COMMIT="0" * 40)
    return env


def _mod():
    spec = importlib.util.spec_from_file_location("mla_bench_script", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_dry_run_writes_rows_for_every_impl_and_prints_the_summary_last(tmp_path):
    res = subprocess.run(["bash", "scripts/gpu/mla_bench.sh", "dry"], cwd=ROOT, capture_output=True, text=True,
                         env=dict(_env(), OUT=str(tmp_path)), timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    rows = json.loads((tmp_path / "h200.json").read_text())
    got = {(r["shape"], r["impl"]) for r in rows}
    assert got == {(s, i) for s in SMOKE for i in ("splitkv_v4", "splitkv_v3", "torch_eager")}, got
    for r in rows:
        assert r["median_us"] > 0 and r["gpu"] and r["torch"] and r["triton"] and r["date"], r
        assert len(r["commit"]) == 40   # git rev-parse HEAD where the repo has .git, else KERNELD_COMMIT
        if r["impl"].startswith("splitkv"):
            assert r["correct"] is True and r["battery"]["all_shapes_ok"] and r["battery"]["shapes"] == 3, r
    summ = json.loads((tmp_path / "summary.json").read_text())
    assert summ["battery"]["v4"]["all"] and summ["battery"]["v3"]["all"] and summ["environment"]["triton"]
    tail = res.stdout.strip().splitlines()
    assert tail[-1].startswith("phases:") and any(x.startswith("=== MLA summary") for x in tail[-20:]), tail[-20:]
    assert any(x.startswith("s130_h8") for x in tail[-20:]) and any(x.startswith("v4 sweep s37_h4: best") for x in tail)
    assert set(summ["sweep_v4"]) == set(SMOKE) and all("best" in r for r in summ["sweep_v4"].values()), summ["sweep_v4"]


def test_a_wrong_v4_is_reported_and_the_others_still_timed(tmp_path):
    src = (ROOT / "kernels" / "mla" / "seeds" / "splitkv_v4.py").read_text()
    head = "def mla_decode(inputs: dict, out: dict, config: dict) -> None:\n"
    assert head in src
    bad = tmp_path / "bad" / "splitkv_v4.py"
    bad.parent.mkdir()
    bad.write_text(src.replace(head, head + "    out['lse'].zero_()\n    out['o'].zero_()\n    return\n"))
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, str(SCRIPT), "run", "--out", str(out), "--v4-path", str(bad),
                          "--budget-s", "500"], cwd=ROOT, capture_output=True, text=True, env=_env(), timeout=600)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
    rows = json.loads((out / "h200.json").read_text())
    assert {r["impl"] for r in rows} == {"splitkv_v3", "torch_eager"}, rows
    summ = json.loads((out / "summary.json").read_text())
    assert not summ["battery"]["v4"]["goal"] and summ["battery"]["v3"]["all"]
    assert any("v4 not timed" in n for n in summ["notes"])
    assert "battery v4: 0 shapes ok" in res.stdout and "wrong_result" in res.stdout, res.stdout[-2000:]


def test_a_hanging_v4_battery_is_killed_and_the_others_still_timed(tmp_path):
    src = (ROOT / "kernels" / "mla" / "seeds" / "splitkv_v4.py").read_text()
    head = "def mla_decode(inputs: dict, out: dict, config: dict) -> None:\n"
    bad = tmp_path / "hang" / "splitkv_v4.py"
    bad.parent.mkdir()
    bad.write_text(src.replace(head, head + "    while True:\n        pass\n"))
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, str(SCRIPT), "run", "--out", str(out), "--v4-path", str(bad),
                          "--budget-s", "500"], cwd=ROOT, capture_output=True, text=True,
                         env=dict(_env(), MLA_BENCH_BATTERY_S="45"), timeout=600)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
    summ = json.loads((out / "summary.json").read_text())
    assert summ["battery"]["v4"]["process"].startswith("killed") and summ["battery"]["v4"]["missing"] == SMOKE
    assert summ["battery"]["v3"]["all"], summ["battery"]["v3"]
    assert {r["impl"] for r in json.loads((out / "h200.json").read_text())} == {"splitkv_v3", "torch_eager"}


def test_battery_of_a_v4_that_does_not_import(tmp_path):
    bad = tmp_path / "splitkv_v4.py"
    bad.write_text("import triton\nraise RuntimeError('no gluon here')\n")
    res = subprocess.run([sys.executable, str(SCRIPT), "battery", "--seed", "v4", "--path", str(bad), "--out",
                          str(tmp_path / "b.json")], cwd=ROOT, capture_output=True, text=True, env=_env(), timeout=300)
    assert res.returncode == 1, res.stdout[-2000:] + res.stderr[-2000:]
    b = json.loads((tmp_path / "b.json").read_text())
    assert "no gluon here" in b["error"] and b["shapes"] == {}
    v = _mod()._verdict(b, SMOKE)
    assert not v["goal"] and not v["all"] and v["missing"] == SMOKE


def test_verdict_and_summary_text():
    m = _mod()
    goal = ["b1_s8192", "b64_s8192"]
    bat = {"shapes": {"b1_s8192": {"ok": True}, "b64_s8192": {"ok": True}, "b1_s1_h64": {"ok": False, "error": "x"}}}
    v = m._verdict(bat, goal)
    assert v["goal"] and not v["all"] and v["failed"] == ["b1_s1_h64"]
    assert not m._verdict({"shapes": {"b1_s8192": {"ok": True}}}, goal)["goal"]     # killed before b64: not timed
    assert not m._verdict(None, goal)["goal"]
    rows = [{"shape": "b64_s8192", "impl": "splitkv_v4", "median_us": 180.0, "pct_copy_bw": 78.5},
            {"shape": "b64_s8192", "impl": "splitkv_v3", "median_us": 207.0},
            {"shape": "b64_s8192", "impl": "torch_compile", "median_us": 403.0}]
    txt = m._summary_text(rows, {"environment": {"gpu": "NVIDIA H200"}, "battery": {"v4": dict(v, shapes=bat["shapes"])},
                                 "notes": ["a\nb"], "phases": {"total_s": 1}}, goal, "torch_compile")
    line = [x for x in txt.splitlines() if x.startswith("b64_s8192")][0]
    assert "180.0" in line and "207.0" in line and "403.0" in line and "0.87" in line and "175.0" in line, line
    assert [x for x in txt.splitlines() if x.startswith("b1_s8192")][0].count("-") >= 4
    assert "failed {'b1_s1_h64': 'x'}" in txt and "note: a | b" in txt and txt.splitlines()[-1].startswith("phases:")
