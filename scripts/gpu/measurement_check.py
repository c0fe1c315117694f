#!/usr/bin/env python3
"""Issue 23's check of a daemon run (scripts/gpu/measurement.sh STEP=finish): is the night's
best the fastest kernel?

From the goal's events (`kernelctl --json events GOAL`): the final best, the run's ten highest
first readings (first evaluations, not re-times), the would-be wins with their first and
re-timed speedups. Then kernels/harness/bench.py times the final best and those ten in ONE
process (GPU time, interleaved, no daemon), and this prints:
  - whether the final best is within 5 % of the fastest of them (bench.py's geomean speedup),
  - the best's reported speedup against bench.py's figure for it,
  - the median ratio re-timed / first over the would-be wins.

    python3 scripts/gpu/measurement_check.py events.jsonl --out winner_check.json [--budget-s S]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def read_events(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def analyse(events):
    proposed = {}
    for e in events:
        if e.get("type") == "candidate_proposed":
            proposed[e["candidate"]] = {"seed": e.get("seed"), "config": e.get("config") or {}}
    firsts = {}
    for e in events:
        r = e.get("result") or {}
        if e.get("type") == "evaluation_finished" and r.get("class") == "ok" and r.get("speedup") \
                and not r.get("retimed") and e["candidate"] not in firsts:
            firsts[e["candidate"]] = r["speedup"]
    bests = [e["best"] for e in events if e.get("type") == "new_best"]
    wins = [e for e in events if e.get("type") == "win_checked" and e.get("retimed_speedup")]
    ratios = [e["retimed_speedup"] / e["first_speedup"] for e in wins if e.get("first_speedup")]
    top = sorted(firsts, key=lambda c: -firsts[c])[:10]
    return proposed, firsts, (bests[-1] if bests else None), top, ratios


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("events")
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=300)
    a = ap.parse_args()
    proposed, firsts, best, top, ratios = analyse(read_events(a.events))
    out = {"best": best, "top_first_readings": [{"candidate": c, "first_speedup": firsts[c], **proposed.get(c, {})}
                                                for c in top],
           "retimed_over_first": ratios, "retimed_over_first_median": statistics.median(ratios) if ratios else None}
    names = list(dict.fromkeys(([best["candidate"]] if best else []) + top))
    cands = [(c, proposed[c]) for c in names if c in proposed and proposed[c].get("seed")]
    task = os.path.join(ROOT, "kernels", "mla")
    if cands:
        tmp = tempfile.mkdtemp(prefix="mcheck.")
        argv = [sys.executable, os.path.join(ROOT, "kernels", "harness", "bench.py"), "--task", task, "--no-check",
                "--baselines", "torch_compile", "--timing", json.dumps({"min_reps": 20, "max_reps": 120,
                                                                        "target_noise_pct": 0.5}),
                "--out", os.path.join(tmp, "bench.json")]
        for c, p in cands:
            # a copy per candidate, named by its id: bench.py labels rows by file name
            path = os.path.join(tmp, f"c_{c}.py")
            with open(os.path.join(task, "seeds", p["seed"])) as src, open(path, "w") as dst:
                dst.write(src.read())
            argv += ["--candidate", path, "--config", json.dumps(p["config"])]
        try:
            subprocess.run(argv, timeout=max(60, a.budget_s), check=False)
            rows = json.load(open(os.path.join(tmp, "bench.json")))
        except (subprocess.TimeoutExpired, OSError, ValueError) as e:
            rows = []
            out["bench_error"] = f"{type(e).__name__}: {e}"
        per = {}
        for r in rows:
            if r.get("kind") == "candidate" and r.get("speedup_vs_torch_compile"):
                per.setdefault(r["impl"][2:], []).append(r["speedup_vs_torch_compile"])
        bench = {c: geomean(v) for c, v in per.items() if len(v) == 4}
        out["bench_geomean"] = bench
        if best and best["candidate"] in bench and bench:
            fastest = max(bench.values())
            b = bench[best["candidate"]]
            out["best_over_fastest"] = b / fastest
            out["reported_over_bench"] = best["speedup"] / b
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps({k: out.get(k) for k in ("best_over_fastest", "reported_over_bench",
                                               "retimed_over_first_median", "bench_error")}))
    print("best:", best and {k: best.get(k) for k in ("candidate", "seed", "speedup", "spread_pct", "iteration")})
    for c in names:
        print(f"  {c} first {firsts.get(c)} bench {out.get('bench_geomean', {}).get(c)}")


if __name__ == "__main__":
    main()
