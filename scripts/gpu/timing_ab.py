#!/usr/bin/env python3
"""Issue 23, item 2: does the slot's own compile-ahead work disturb its timing, and does
stopping it during timed batches (judge_timing.quiet_siblings) remove that? An A/B on the GPU.

This process is the judge (the harness's evaluate() in-process, as worker.py calls it). Each
trial first `prepare`s PREPARE other candidates (splitkv seeds with random SPACE configs: their
runners start, import and warm up on the CPUs and the GPU, as compile-ahead does), then at once
evaluates the same candidate (splitkv_v3 BEST) on SHAPES. Arms alternate trial by trial:
quiet on / off, timing mode gpu / as_called. Per arm and shape: the median over trials of the
candidate's and the baseline's figures, their CV and largest deviation, and the speedup's.
Writes $OUT/timing_ab.json; prints a table.
"""
from __future__ import annotations

import json
import os
import random
import statistics
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "kernels"))

from harness import evaluate as ev  # noqa: E402

TASK = os.path.join(ROOT, "kernels", "mla")
V3 = os.path.join(TASK, "seeds", "splitkv_v3.py")
SEEDS = [os.path.join(TASK, "seeds", s) for s in ("splitkv.py", "splitkv_v2.py", "splitkv_v3.py")]
SHAPES = os.environ.get("SHAPES", "b1_s8192,b128_s4096").split(",")
TRIALS = int(os.environ.get("TRIALS", "3"))
PREPARE = int(os.environ.get("PREPARE", "4"))
ARMS = [a.split(":") for a in os.environ.get("ARMS", "gpu:1,gpu:0,as_called:1,as_called:0").split(",")]


def literal(path, name):
    import ast
    for node in ast.parse(open(path).read()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == name:
            return ast.literal_eval(node.value)
    return None


def best_config():
    # BEST = dict(DEFAULT, LAT_CORE="tl") in v3: built from DEFAULT, not a literal
    d = dict(literal(V3, "DEFAULT"))
    d["LAT_CORE"] = "tl"
    return d


def random_config(rng, path):
    space = literal(path, "SPACE") or {}
    return {k: rng.choice(v) for k, v in space.items()}


def main():
    out_dir = os.environ.get("OUT", "/tmp")
    rng = random.Random(7)
    rows = []
    base_req = {"task_dir": TASK, "candidate": V3, "config": best_config(), "shapes": SHAPES,
                "baseline": "torch_compile", "seeds": [11], "profile": False}
    # one warm evaluation first: torch.compile of the baseline, Triton's compile of the candidate
    t0 = time.time()
    r = ev.evaluate(dict(base_req, timing={"mode": "gpu"}))
    print(f"warm evaluation: {r['class']} {time.time() - t0:.0f} s {r.get('message') or ''}"[:400], flush=True)
    for trial in range(TRIALS):
        for mode, quiet in ARMS:
            os.environ["KERNELD_TIMING_QUIET"] = quiet
            for _ in range(PREPARE):
                src = rng.choice(SEEDS)
                ev.prepare({"task_dir": TASK, "candidate": src, "config": random_config(rng, src),
                            "shapes": SHAPES, "ahead": PREPARE})
            time.sleep(float(os.environ.get("PREPARE_HEAD_START_S", "2")))
            t1 = time.time()
            r = ev.evaluate(dict(base_req, timing={"mode": mode}))
            row = {"trial": trial, "mode": mode, "quiet": quiet == "1", "class": r["class"],
                   "seconds": round(time.time() - t1, 2), "message": (r.get("message") or "")[:300],
                   "shapes": {s["shape"]: {k: s.get(k) for k in ("median_us", "baseline_us", "speedup", "timing",
                                                                 "timing_note", "gpu_us", "baseline_gpu_us",
                                                                 "as_called_us", "baseline_as_called_us", "ci_pct",
                                                                 "baseline_ci_pct", "leaked_samples")}
                              for s in r.get("shapes", [])}}
            rows.append(row)
            print(json.dumps(row)[:600], flush=True)
    ev.AHEAD.discard()
    summary = {}
    for mode, quiet in ARMS:
        arm = [r for r in rows if r["mode"] == mode and r["quiet"] == (quiet == "1") and r["class"] == "ok"]
        for shape in SHAPES:
            for key in ("median_us", "baseline_us", "speedup"):
                xs = [r["shapes"][shape][key] for r in arm if r["shapes"].get(shape, {}).get(key)]
                if len(xs) >= 2:
                    med = statistics.median(xs)
                    summary[f"{mode}/quiet={quiet}/{shape}/{key}"] = {
                        "median": round(med, 3), "cv_pct": round(statistics.pstdev(xs) / statistics.mean(xs) * 100, 2),
                        "max_dev_pct": round(max(abs(x - med) / med for x in xs) * 100, 2), "values": xs}
    with open(os.path.join(out_dir, "timing_ab.json"), "w") as f:
        json.dump({"rows": rows, "summary": summary, "shapes": SHAPES, "prepare": PREPARE}, f, indent=1)
    for k, v in summary.items():
        print(f"{k:48s} median {v['median']:9.3f} cv {v['cv_pct']:6.2f}% maxdev {v['max_dev_pct']:6.2f}%")


if __name__ == "__main__":
    main()
