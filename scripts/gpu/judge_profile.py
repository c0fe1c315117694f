#!/usr/bin/env python3
"""Where a warm MLA evaluation's judge time goes (issue #12), on the GPU: the judge in this
process (runners unsandboxed: the judge's side is what is profiled), one cold evaluation, then
candidates prepared ahead as the daemon does and their evaluations under cProfile. Prints the
phases and the top functions by cumulative and own time; writes JSON to --out.

usage: judge_profile.py --out FILE.json [--n 3] [--baseline torch_eager]
"""
import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
KERNELS = os.path.join(HERE, "..", "..", "kernels")
sys.path.insert(0, os.path.abspath(KERNELS))

from harness import evaluate as ev  # noqa: E402

TASK = os.path.abspath(os.path.join(KERNELS, "mla"))
SEED = os.path.join(TASK, "seeds", "splitkv_v3.py")
SHAPES = ["b1_s8192", "b64_s8192", "b1_s32768", "b128_s4096"]
CONFIGS = [{}, {"BLOCK_N": 32}, {"STAGES": 3}, {"WAVES": 2}, {"BLOCK_N": 32, "STAGES": 3}]


def req(config, baseline):
    return {"task_dir": TASK, "candidate": SEED, "config": config, "shapes": SHAPES, "baseline": baseline,
            "seeds": [11], "profile": True}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, default=3)
    ap.add_argument("--baseline", default="torch_eager")
    a = ap.parse_args()
    out = {"runs": []}
    t0 = time.perf_counter()
    cold = ev.evaluate(req(CONFIGS[0], a.baseline))
    out["runs"].append({"kind": "cold", "class": cold["class"], "elapsed_s": cold["elapsed_s"], "phases": cold["phases"]})
    print("cold", cold["class"], cold["elapsed_s"], cold["phases"], flush=True)
    todo = CONFIGS[1:1 + a.n]
    for c in todo:
        ev.prepare({"task_dir": TASK, "candidate": SEED, "config": c, "shapes": SHAPES, "ahead": len(todo)})
    time.sleep(30)   # start, import, warm-up: "while the GPU times another candidate"
    prof = cProfile.Profile()
    for c in todo:
        prof.enable()
        r = ev.evaluate(req(c, a.baseline))
        prof.disable()
        out["runs"].append({"kind": "warm", "config": c, "class": r["class"], "elapsed_s": r["elapsed_s"],
                            "phases": r["phases"], "message": r.get("message"), "warm_up": r.get("warm_up")})
        print("warm", c, r["class"], r["elapsed_s"], r["phases"], r.get("warm_up"), flush=True)
    for key in ("cumulative", "tottime"):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(key).print_stats(45)
        out[f"top_{key}"] = s.getvalue()
        print(s.getvalue()[-9000:])
    out["total_s"] = time.perf_counter() - t0
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    ev.AHEAD.discard()
    ev.POOL.shutdown()


if __name__ == "__main__":
    main()
