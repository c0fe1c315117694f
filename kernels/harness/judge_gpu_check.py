#!/usr/bin/env python3
"""The judge on a GPU (scripts/gpu/judge_check.sh runs this; <= 5 minutes on the H200).

Through the judge directly (this process is the judge; candidates run in runners, started
through KERNELD_RUNNER_LAUNCHER when it is set):
  1. the hostile suite (tests/hostile/, static rules on, and `expect-runtime` with them off)
     and the older adversarial suite, each followed by the honest demo seed, whose class and
     speedup are compared with a fresh judge's;
  2. the MLA and KDA seeds at goal shapes (correctness + timing), with per-phase seconds;
  3. the noise experiment (FIELD_NOTES 1b): repeated 4-shape MLA evaluations against
     torch_eager, with per-batch clocks, holds and leaked samples, at the default hold and a
     generous one. Hypotheses: (a) the launch leaked past a too-short hold (leaked_samples > 0
     and both sides slow), (b) memory/SM clocks low for a whole evaluation (mem_mhz/sm_mhz in
     the trace), (c) background compilation right after a torch.compile (the first evaluations).
Writes $OUT/judge_check.json (or --out) and prints a short table last.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
KERNELS = HERE.parent
sys.path.insert(0, str(KERNELS))

from harness import evaluate as ev  # noqa: E402

HOSTILE = HERE / "tests" / "hostile"
ADV = HERE / "tests" / "adversarial"
DEMO = KERNELS / "demo"
SEED = str(DEMO / "seeds" / "tiled.py")
EXPECT = re.compile(r"^# expect(-runtime)?: (no-effect|class=(\S+) rule=(\S+))\s*$", re.M)
T0 = time.time()


def left(budget):
    return budget - (time.time() - T0)


def log(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, file=sys.stderr, flush=True)


def short(r):
    keep = ("class", "rule", "message", "speedup", "elapsed_s", "phases", "retimed")
    out = {k: r.get(k) for k in keep}
    out["message"] = (out["message"] or "")[:300]
    out["shapes"] = [{k: s.get(k) for k in ("shape", "median_us", "baseline_us", "speedup", "ci_pct", "baseline_ci_pct",
                                            "n", "leaked_samples", "discarded_samples", "hold_us", "timer_check",
                                            "timed_outputs_checked", "outlasted_stream", "trace")}
                     for s in r.get("shapes", [])]
    return out


def demo_req(cand, **kw):
    return {"task_dir": str(DEMO), "candidate": cand, "shapes": ["m512", "m1024_k4096"], "seeds": [5, 6, 7],
            "profile": False, **kw}


def hostile(tmp: Path, budget: float) -> dict:
    import secrets
    token = secrets.token_hex(16)
    secret = tmp / "secret.txt"
    secret.write_text(token)
    marker = tmp / "marker"
    marker.mkdir(exist_ok=True)
    os.environ["KERNELD_CHECK_SECRET"] = token
    fresh = ev.evaluate(demo_req(SEED), pool=ev.Pool())
    out = {"fresh_honest": short(fresh), "cases": []}
    for path in sorted(HOSTILE.glob("*.py")) + sorted(ADV.glob("*.py")):
        if left(budget) < 10:
            out["cases"].append({"file": path.name, "skipped": "out of time"})
            continue
        src = path.read_text()
        for k, v in {"@@SECRET_FILE@@": str(secret), "@@SECRET_ENV@@": "KERNELD_CHECK_SECRET",
                     "@@MARKER_DIR@@": str(marker), "@@STATE_DIR@@": str(tmp / "state"), "@@TCP_PORT@@": "9"}.items():
            src = src.replace(k, v)
        cand = tmp / path.name
        cand.write_text(src)
        exps = {("runtime" if m.group(1) else "static"): (None if m.group(2) == "no-effect" else (m.group(3), m.group(4)))
                for m in EXPECT.finditer(src)}
        for mode in ("static", "runtime"):
            if mode == "runtime" and "runtime" not in exps:
                continue
            if mode == "runtime":
                os.environ["KERNELD_UNSAFE_SKIP_STATIC_CHECKS"] = "1"
            try:
                r = ev.evaluate(demo_req(str(cand)))
            finally:
                os.environ.pop("KERNELD_UNSAFE_SKIP_STATIC_CHECKS", None)
            want = exps.get(mode)
            got = (r["class"], r.get("rule"))
            ok = want is None or got == want or (path.parent == ADV and r["class"] != "ok")
            case = {"file": path.name, "mode": mode, "want": want, "got": got, "pass": ok,
                    "leak": token in json.dumps(r), "message": (r["message"] or "")[:200]}
            if r["class"] != "rejected" or "line" not in (r["message"] or ""):
                h = ev.evaluate(demo_req(SEED))
                case["honest_after"] = {"class": h["class"], "speedup": h["speedup"]}
                case["honest_same"] = (h["class"] == fresh["class"] and h["speedup"] and fresh["speedup"]
                                       and abs(h["speedup"] / fresh["speedup"] - 1) < 0.15)
            out["cases"].append(case)
            log(path.name, mode, got, "ok" if ok else f"WANT {want}")
    out["marker_files"] = [p.name for p in marker.iterdir()]
    return out


def seeds(budget: float) -> dict:
    plans = [("mla", ["b1_s8192", "b64_s8192"], "torch_compile"), ("kda", ["b1_t8192_h16"], "fla")]
    out = []
    for task, shapes, base in plans:
        tdir = KERNELS / task
        from harness.taskload import load_task
        for seed in load_task(tdir).seeds:
            if left(budget) < 20:
                out.append({"task": task, "seed": seed.name, "skipped": "out of time"})
                continue
            req = {"task_dir": str(tdir), "candidate": str(seed), "shapes": shapes, "baseline": base, "seeds": [1, 2],
                   "profile": True}
            r = ev.evaluate(req)
            if r.get("baseline_error") and base != "reference":
                log(task, seed.name, "baseline failed:", r["baseline_error"][:200])
            again = ev.evaluate({**req, "retime": True})
            out.append({"task": task, "seed": seed.name, "first": short(r), "retime": short(again)})
            log(task, seed.name, r["class"], r.get("speedup"), "retime", again.get("speedup"),
                "phases", r.get("phases"))
    return {"runs": out}


def noise(budget: float, n: int) -> dict:
    tdir = KERNELS / "mla"
    seed = str(tdir / "seeds" / "splitkv_v2.py")
    shapes = ["b1_s8192", "b64_s8192", "b1_s32768", "b128_s4096"]
    runs = []
    for variant, extra in (("default_hold", {}), ("hold_x4_min100", {"hold_factor": 4.0, "hold_min_us": 100.0})):
        for i in range(n):
            if left(budget) < 15:
                break
            r = ev.evaluate({"task_dir": str(tdir), "candidate": seed, "shapes": shapes, "baseline": "torch_eager",
                             "seeds": [1], "profile": False, "retime": True,
                             "timing": {"trace": True, **extra}})
            runs.append({"variant": variant, "i": i, **short(r)})
            b1 = next((s for s in r.get("shapes", []) if s["shape"] == "b1_s8192"), {})
            log("noise", variant, i, r["class"], "b1_s8192", b1.get("median_us"), b1.get("baseline_us"),
                "leaked", b1.get("leaked_samples"))
    summary = {}
    for variant in {r["variant"] for r in runs}:
        rows = [r for r in runs if r["variant"] == variant and r["class"] == "ok"]
        per = {}
        for sh in shapes:
            c = [s["median_us"] for r in rows for s in r["shapes"] if s["shape"] == sh and s["median_us"]]
            b = [s["baseline_us"] for r in rows for s in r["shapes"] if s["shape"] == sh and s["baseline_us"]]
            lk = sum(s["leaked_samples"] or 0 for r in rows for s in r["shapes"] if s["shape"] == sh)
            if c:
                per[sh] = {"cand_median_of_medians": statistics.median(c), "cand_max_over_min": max(c) / min(c),
                           "base_median_of_medians": statistics.median(b) if b else None,
                           "base_max_over_min": (max(b) / min(b)) if b else None, "leaked": lk, "n": len(c)}
        sp = [r["speedup"] for r in rows if r["speedup"]]
        summary[variant] = {"shapes": per, "speedup_cv_pct": (100 * statistics.pstdev(sp) / statistics.mean(sp))
                            if len(sp) > 1 else None}
    return {"runs": runs, "summary": summary}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--budget-s", type=float, default=280)
    ap.add_argument("--noise-n", type=int, default=6)
    ap.add_argument("--skip", default="", help="comma-separated sections to skip: hostile,seeds,noise")
    a = ap.parse_args()
    import tempfile

    import torch
    skip = set(a.skip.split(",")) - {""}
    res = {"device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
           "launcher": os.environ.get("KERNELD_RUNNER_LAUNCHER"), "torch": torch.__version__}
    B = a.budget_s
    with tempfile.TemporaryDirectory() as tmp:
        if "hostile" not in skip:
            res["hostile"] = hostile(Path(tmp), 0.45 * B)
        if "seeds" not in skip:
            res["seeds"] = seeds(0.80 * B)
        if "noise" not in skip:
            res["noise"] = noise(B, a.noise_n)
    res["elapsed_s"] = round(time.time() - T0, 1)
    os.makedirs(a.out, exist_ok=True)
    p = Path(a.out) / "judge_check.json"
    p.write_text(json.dumps(res, indent=1, default=str))
    # the short table, last
    print(f"judge_check: {res['device']}  launcher={'set' if res['launcher'] else 'unset'}  {res['elapsed_s']} s")
    if "hostile" in res:
        cs = [c for c in res["hostile"]["cases"] if "pass" in c]
        bad = [c for c in cs if not c["pass"] or c["leak"] or c.get("honest_same") is False]
        print(f"hostile+adversarial: {len(cs) - len(bad)}/{len(cs)} as expected; marker files: "
              f"{res['hostile']['marker_files']}; fresh honest speedup {res['hostile']['fresh_honest']['speedup']}")
        for c in bad:
            print(f"  UNEXPECTED {c['file']} {c['mode']}: got {c['got']} want {c['want']} leak={c['leak']} "
                  f"honest_after={c.get('honest_after')}")
    for run in res.get("seeds", {}).get("runs", []):
        if "first" in run:
            f, rt = run["first"], run["retime"]
            print(f"{run['task']:4} {run['seed']:16} {f['class']:12} speedup {f['speedup']} retime {rt['speedup']} "
                  f"elapsed {f['elapsed_s']} s phases " + " ".join(f"{k}={v:.2f}" for k, v in (f['phases'] or {}).items()
                                                                  if v >= 0.05))
    for variant, s in res.get("noise", {}).get("summary", {}).items():
        print(f"noise {variant}: speedup CV {s['speedup_cv_pct']}")
        for sh, v in s["shapes"].items():
            print(f"   {sh:12} cand {v['cand_median_of_medians']:.1f} us (max/min {v['cand_max_over_min']:.2f}) "
                  f"base {v['base_median_of_medians']} (max/min {v['base_max_over_min']}) leaked {v['leaked']}")
    print(f"json: {p}")


if __name__ == "__main__":
    main()
