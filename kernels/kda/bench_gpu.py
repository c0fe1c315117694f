#!/usr/bin/env python3
"""One device call for KDA: the correctness battery on v5 and bench.py-method timing of v5, the
previous best seed (v4) and the baseline (FLA), written as h200.json-shaped JSON.

    OUT=<dir> bash scripts/gpu/kda_bench.sh                      (the device command)
    python3 kernels/kda/bench_gpu.py --out DIR [--budget-s 215]
    TRITON_INTERPRET=1 python3 kernels/kda/bench_gpu.py --out DIR     (CPU dry run: smoke shapes)
    python3 kernels/kda/bench_gpu.py --summary DIR/h200_v5.json       (print the summary again)

Stages, each guarded by the wall-clock budget (what does not fit is recorded as skipped), the JSON
rewritten after every shape so a kill keeps what finished:
  1. the battery of the harness (harness.correctness.run_battery: oracle comparison in both call
     orders, NaN-poisoned outputs, inputs untouched, the task's causality check) on v5 at every
     goal shape, then every held-out shape, seed 11, one shape at a time (a failure is recorded
     and the next shape still runs);
  2. per goal shape (headline first, H = 32 last: FLA re-tunes there), the harness's timing
     (harness.inprocess.time_impls, as bench.py: GPU time of a CUDA graph of one call, L2
     flushed, sides interleaved, the call's output re-checked afterwards) of v5, v4 and FLA;
     FLA's own CUDA-graph row (task.extra_rows). A side that breaks the shared timing loop is
     dropped and the others are re-timed without it (fail soft).
The baseline is FLA when fla-core imports (FLA_FLASH_KDA=0), else torch_chunked (noted).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))          # kernels/: the harness package

torch = bench = dev = timing = load_candidate = CheckFailure = run_battery = None
low_dtype = probe_baseline = sync_fn = time_impls = load_task = None


def _imports():
    """torch and the harness, imported only when something runs (--summary needs neither)."""
    global torch, bench, dev, timing, load_candidate, CheckFailure, run_battery
    global low_dtype, probe_baseline, sync_fn, time_impls, load_task
    import torch
    from harness import bench, device as dev, timing
    from harness.candidate import load_candidate
    from harness.correctness import CheckFailure, run_battery
    from harness.inprocess import low_dtype, probe_baseline, sync_fn, time_impls
    from harness.taskload import load_task

# label -> seed file; the first is the one under test (the battery runs on it)
CANDIDATES = {"v5": "seeds/chunked_split.py", "v4": "seeds/chunked_v4.py"}
# v5 off its BEST, timed beside it (not checked by the battery: the same kernels; the timed call's
# output is still re-checked): the split count and the chunk size the cost model chose. A SPLIT
# variant is timed only where it gives another segment count than `auto`.
VARIANTS = {"v5[SPLIT=1]": ("v5", {"SPLIT": 1}), "v5[SPLIT=4]": ("v5", {"SPLIT": 4}),
            "v5[SPLIT=8]": ("v5", {"SPLIT": 8}), "v5[C=64]": ("v5", {"C": 64})}
VARIANT_SHAPES = {"v5[C=64]": ("b1_t8192_h16",)}
MODS = {}                      # label -> the loaded seed module
SHAPE_ORDER = ["b1_t8192_h16", "b8_t4096_h16", "b2_t16384_h16", "b1_t8192_h32"]
GPU_TIMING = {"warmup_ms": 25, "min_reps": 20, "max_reps": 60, "target_noise_pct": 0.5}
CPU_TIMING = {"cpu_reps": 2}
# rough wall-clock cost of the stages on the H200 (s), for the guard: a battery shape (oracle +
# 4 candidate calls + causality), a timed shape (warm-up, interleaved samples, FLA's graph)
EST_CHECK_S = 8.0
EST_TIME_S = 25.0


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e)[:400]}"


class Run:
    def __init__(self, out: Path, budget_s: float):
        self.t0 = time.time()
        self.budget = budget_s
        self.path = out / "h200_v5.json"
        self.res = {"task": "kda", "dtype": None, "K": 128, "V": 128,
                    "timing": "harness timing (bench.py's method): GPU time of a CUDA graph of one call, 256 MB L2 "
                              "flush before each sample, candidates and baseline interleaved, median; as_called_us: "
                              "the same call as launched from Python; fla_cudagraph: task.extra_rows",
                    "note": "", "env": bench.environment(), "candidates": {}, "baseline": None,
                    "checks": [], "results": [], "skipped": [], "errors": []}

    def left(self) -> float:
        return self.budget - (time.time() - self.t0)

    def save(self):
        self.res["elapsed_s"] = round(time.time() - self.t0, 1)
        self.path.write_text(json.dumps(self.res, indent=1, default=str) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--budget-s", type=float, default=215.0)
    ap.add_argument("--shapes", default=None, help="comma-separated goal (or, on the CPU, smoke) shapes")
    ap.add_argument("--no-heldout", action="store_true")
    ap.add_argument("--candidate", action="append", default=[], help="LABEL=PATH (adds; for tests)")
    ap.add_argument("--summary", default=None, help="print the summary of an existing JSON and exit")
    ap.add_argument("--no-warm", action="store_true", help="no parallel compile processes")
    ap.add_argument("--warm-on-cpu", action="store_true", help="start them in a CPU dry run too (tests)")
    ap.add_argument("--warm", default=None, help=argparse.SUPPRESS)   # LABEL@SHAPE: one call (a warm-up process)
    a = ap.parse_args(argv)
    if a.summary:
        print(summary(json.loads(Path(a.summary).read_text())))
        return 0
    _imports()
    if a.warm:
        return warm(a.warm, dict(x.split("=", 1) for x in a.candidate))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    run = Run(out, a.budget_s)
    res = run.res
    task = load_task(str(HERE))
    cpu = dev.cpu_mode()
    device, dtype, sync = dev.device_str(), low_dtype(cpu), sync_fn(cpu)
    res["dtype"] = str(dtype).replace("torch.", "")
    pool = task.smoke if cpu else task.shapes
    names = a.shapes.split(",") if a.shapes else ([n for n in SHAPE_ORDER if n in pool] + [n for n in pool if n not in SHAPE_ORDER])
    goal = [(n, pool[n]) for n in names]
    heldout = [] if (cpu or a.no_heldout) else list(task.heldout.items())
    res["shapes"] = [n for n, _ in goal]

    # candidates (a seed that fails to import or is rejected is recorded; the rest go on)
    cands = []
    paths = dict(CANDIDATES)
    paths.update(dict(x.split("=", 1) for x in a.candidate))
    for label, rel in paths.items():
        p = Path(rel) if Path(rel).is_absolute() else HERE / rel
        entry = {"path": str(p.relative_to(HERE.parents[1])) if p.is_relative_to(HERE.parents[1]) else str(p)}
        try:
            c = load_candidate(p, task.banned_calls)
            cfg = c.resolve_config(getattr(c.module, "BEST", None) or c.default)
            cands.append((label, c.entry(task.entry), cfg))
            MODS[label] = c.module
            entry["config"] = cfg
        except Exception as e:
            entry["error"] = getattr(e, "message", None) or _err(e)
            print(f"[kda] {label}: cannot load: {entry['error']}", file=sys.stderr)
        res["candidates"][label] = entry
    base = "fla" if (not cpu and task.module._fla_available()) else "torch_chunked"
    res["baseline"] = base
    if base != "fla":
        res["note"] += f"FLA not available here ({'CPU dry run' if cpu else 'fla-core does not import'}): baseline {base}. "
    bfn = task.baseline_fn(base)
    variants = []
    for label, (of, over) in VARIANTS.items():
        c = next((x for x in cands if x[0] == of), None)
        if c is not None:
            variants.append((label, c[1], dict(c[2], **over)))
    run.save()
    # 0. compile in parallel processes (Triton's on-disk cache then serves this one): v5 at every
    #    checked shape, v4 and FLA at the goal shapes (FLA: its autotune candidates compile there;
    #    the choice is made here, on an idle GPU, as the timing stage has it to itself)
    warmers = []
    if (not cpu or a.warm_on_cpu) and not a.no_warm:
        jobs = [(under_label(), n) for n, _ in goal + heldout] + [(lb, n) for lb in res["candidates"]
                                                                 if lb != under_label() for n, _ in goal]
        if base == "fla":
            jobs += [("fla", n) for n, _ in goal]
        jobs += [(lb, n) for lb, _, _ in variants for n, _ in goal if n in VARIANT_SHAPES.get(lb, (n,))
                 and lb.startswith("v5[C=")]           # a SPLIT variant compiles nothing new
        loaded = {c[0] for c in cands} | {"fla"} | {v[0] for v in variants}
        logs = out / "warm"
        logs.mkdir(exist_ok=True)
        for lb, n in jobs:
            if lb in loaded:
                log = open(logs / f"{lb}@{n}.log".replace("[", "_").replace("]", "_").replace("=", "_"), "w")
                warmers.append((lb, n, time.time(), log, subprocess.Popen(
                    [sys.executable, __file__, "--warm", f"{lb}@{n}"] + sum((["--candidate", x] for x in a.candidate), []),
                    stdout=log, stderr=subprocess.STDOUT,
                    # FLA caches autotune choices on disk by default: a choice made on a GPU shared
                    # with 15 other processes must not be the one timed
                    env={**os.environ, "FLA_CACHE_RESULTS": "0"})))

    # 1. the battery on the candidate under test (the first one), shape by shape
    under = next((c for c in cands if c[0] == under_label()), None)
    for sname, shape in goal + heldout:
        kind = "goal" if (sname, shape) in goal else "heldout"
        if under is None:
            break
        # keep time for the timing stage: half of it for the goal shapes' checks, all of it for
        # the held-out ones
        if run.left() < EST_CHECK_S + EST_TIME_S * len(goal) * (0.5 if kind == "goal" else 1.0):
            res["skipped"].append({"stage": "check", "shape": sname, "why": f"{run.left():.0f} s left"})
            continue
        t = time.time()
        row = {"stage": "check", "kind": kind, "shape": sname, "impl": under[0], "correct": True, "error": None}
        try:
            rows = run_battery(task, under[1], under[2], [(sname, shape)], [11], device, dtype, sync)
        except CheckFailure as e:
            rows = getattr(e, "rows", [])
            row.update(correct=False, error=f"{e.cls}: {e.message}")
        except Exception as e:
            rows = []
            row.update(correct=False, error=_err(e))
            traceback.print_exc()
        for r in rows:
            if r.get("output") in ("o", "final_state"):
                row[f"rel_rmse_{r['output']}"] = r.get("rel_rmse")
                row[f"max_err_{r['output']}"] = r.get("max_err")
            elif str(r.get("output", "")).startswith("check:"):
                row[r["output"][6:]] = {"passed": r.get("passed"), **(r.get("detail") or {})}
        row["seconds"] = round(time.time() - t, 1)
        res["checks"].append(row)
        print(f"[kda] check {sname}: correct={row['correct']} o {row.get('rel_rmse_o')} state "
              f"{row.get('rel_rmse_final_state')} ({row['seconds']} s){' ' + row['error'][:200] if row['error'] else ''}",
              file=sys.stderr)
        run.save()

    # the warm-up processes must be gone before anything is timed
    res["warm"] = []
    deadline = time.time() + max(1.0, min(90.0, run.left() - EST_TIME_S * 2))     # one for all of them
    for lb, n, t, log, p in warmers:
        try:
            p.wait(timeout=max(0.1, deadline - time.time()))
            why = None
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            why = "killed (time)"
        log.close()
        tail = Path(log.name).read_text(errors="replace")[-300:] if (p.returncode or why) else None
        res["warm"].append({"job": f"{lb}@{n}", "rc": p.returncode, "s": round(time.time() - t, 1),
                            "why": why, "log_tail": tail})
    if warmers:
        print(f"[kda] warm-up processes done at {time.time() - run.t0:.0f} s: "
              f"{sum(w['rc'] == 0 for w in res['warm'])}/{len(warmers)} ok", file=sys.stderr)
        run.save()

    # 2. timing, shape by shape
    try:
        res["copy_gbps"] = None if cpu else timing.copy_bandwidth_gbps()
    except Exception as e:
        res["errors"].append(f"copy bandwidth: {_err(e)}")
    tcfg = CPU_TIMING if cpu else GPU_TIMING
    for sname, shape in goal:
        if run.left() < EST_TIME_S:
            res["skipped"].append({"stage": "time", "shape": sname, "why": f"{run.left():.0f} s left"})
            continue
        t = time.time()
        sides = cands + [v for v in variants if sname in VARIANT_SHAPES.get(v[0], (sname,))
                         and differs(cands, v, shape)]
        res["results"].extend(time_shape(task, sides, base, bfn, sname, shape, tcfg, cpu, device, dtype, res))
        print(f"[kda] timed {sname} ({time.time() - t:.1f} s): " + ", ".join(
            f"{r['impl']} {r['median_us']:.1f}" if r.get("median_us") else f"{r['impl']} ERR"
            for r in res["results"] if r["shape"] == sname), file=sys.stderr)
        run.save()
    run.save()
    print(summary(res))
    ok = all(c["correct"] for c in res["checks"]) and bool(res["checks"])
    return 0 if ok else 1


def under_label() -> str:
    return next(iter(CANDIDATES))


def differs(cands, variant, shape) -> bool:
    """False for a SPLIT variant that `auto` already is at this shape (v5's own cost model)."""
    label, _, cfg = variant
    if "SPLIT" not in VARIANTS[label][1]:
        return True
    try:
        mod = MODS[VARIANTS[label][0]]
        K, V = shape.get("K", 128), shape.get("V", 128)
        bv, ntc = min(cfg["BV"], V, K), -(-shape["T"] // cfg["C"])
        bh = shape["B"] * shape["H"]
        base_cfg = dict(cfg, SPLIT="auto")
        return mod.segments(cfg, bh, ntc, K, V, bv, cfg["C"]) != mod.segments(base_cfg, bh, ntc, K, V, bv, cfg["C"])
    except Exception:
        return True


def warm(job: str, extra: dict) -> int:
    """One call of LABEL (a candidate at its BEST, or the baseline `fla`) at SHAPE: compiles
    (and, for FLA, compiles its autotune candidates) into Triton's on-disk cache."""
    label, sname = job.split("@", 1)
    task = load_task(str(HERE))
    shape = {**task.shapes, **task.heldout, **task.smoke}[sname]
    cpu = dev.cpu_mode()
    inputs = task.make_inputs(shape, 1, dev.device_str(), low_dtype(cpu))
    if label == "fla":
        task.baseline_fn("fla")(**inputs)
    else:
        of, over = VARIANTS.get(label, (label, {}))
        rel = {**CANDIDATES, **extra}[of]
        c = load_candidate(Path(rel) if Path(rel).is_absolute() else HERE / rel, task.banned_calls)
        cfg = dict(c.resolve_config(getattr(c.module, "BEST", None) or c.default), **over)
        B, T, H, K = inputs["q"].shape
        out = {"o": torch.empty_like(inputs["v"]),
               "final_state": torch.empty((B, H, K, inputs["v"].shape[-1]), device=inputs["v"].device,
                                          dtype=torch.float32)}
        c.entry(task.entry)(inputs, out, cfg)
    sync_fn(cpu)()
    return 0


def time_shape(task, cands, base, bfn, sname, shape, tcfg, cpu, device, dtype, res) -> list[dict]:
    """One shape: every candidate and the baseline interleaved; a side that breaks the loop is
    timed alone (and recorded), the others again without it."""
    berr = None
    try:
        berr = probe_baseline(task, bfn, shape, cpu)
    except Exception as e:
        berr = _err(e)
    bls = [] if berr else [(base, bfn)]
    rows, sides = [], None
    try:
        sides = time_impls(task, cands, bls, sname, shape, tcfg, cpu)
        groups = [(cands, bls, sides)]
    except Exception as e:
        res["errors"].append(f"{sname}: shared timing loop: {_err(e)}; timing each side alone")
        groups = []
        for c in cands:
            try:
                groups.append(([c], [], time_impls(task, [c], [], sname, shape, tcfg, cpu)))
            except Exception as e1:
                rows.append({"shape": sname, "impl": c[0], "kind": "candidate", "median_us": None, "error": _err(e1)})
        for b in bls:
            try:
                groups.append(([], [b], time_impls(task, [], [b], sname, shape, tcfg, cpu)))
            except Exception as e1:
                rows.append({"shape": sname, "impl": b[0], "kind": "baseline", "median_us": None, "error": _err(e1)})
    if berr:
        rows.append({"shape": sname, "impl": base, "kind": "baseline", "median_us": None, "error": berr})
    for cs, bs, r in groups:
        for name, _, cfg in cs:
            s = r["sides"][name]
            late = r["late_checks"].get(name)
            rows.append({"shape": sname, "impl": name, "kind": "candidate", "config": cfg,
                         "median_us": s["median_us"], "spread_pct": s.get("spread_pct"), "ci_pct": s.get("ci_pct"),
                         "n": s.get("n"), "as_called_us": s.get("as_called_us"), "timing_note": s.get("timing_note"),
                         "late_check_ok": late is None, "error": late})
        for name, _ in bs:
            s = r["sides"][name]
            rows.append({"shape": sname, "impl": name, "kind": "baseline", "median_us": s["median_us"],
                         "spread_pct": s.get("spread_pct"), "n": s.get("n"), "as_called_us": s.get("as_called_us"),
                         "timing_note": s.get("timing_note")})
    if base == "fla" and not cpu:
        try:
            inputs = task.make_inputs(shape, 999, device, dtype)
            for x in task.module.extra_rows(dict(shape), inputs) or []:
                rows.append({"shape": sname, "impl": x["impl"], "kind": "extra", "median_us": x.get("median_us"),
                             "spread_pct": x.get("spread_pct"), "note": x.get("note")})
            del inputs
        except Exception as e:
            rows.append({"shape": sname, "impl": "fla_cudagraph", "kind": "extra", "median_us": None, "error": _err(e)})
    ref = {r["impl"]: r.get("median_us") for r in rows}
    checks = {c["shape"]: c for c in res["checks"]}
    for r in rows:
        for b in (base, "fla_cudagraph"):
            if ref.get(b) and r.get("median_us"):
                r[f"speedup_vs_{b}"] = round(ref[b] / r["median_us"], 3)
        if r["kind"] == "candidate":
            c = checks.get(sname) if r["impl"] == under_label() else None
            # correct: the battery's verdict (the candidate under test) and the timed call's re-check
            r["correct"] = (None if c is None else c["correct"]) if r.get("late_check_ok", False) else False
            if c:
                r["rel_rmse_o"], r["rel_rmse_final_state"] = c.get("rel_rmse_o"), c.get("rel_rmse_final_state")
        r.update({k: round(v, 3) for k, v in r.items() if isinstance(v, float)})
    return rows


def summary(res: dict) -> str:
    """A short table: per goal shape, each impl's median and its ratio to FLA's GPU time."""
    lines = [f"== KDA v5 bench: {res['env'].get('gpu')}, torch {res['env'].get('torch')}, triton "
             f"{res['env'].get('triton')}, commit {str(res['env'].get('commit'))[:10]}, {res['env'].get('date')}, "
             f"baseline {res.get('baseline')}, {res.get('elapsed_s')} s"]
    bad = [c for c in res["checks"] if not c["correct"]]
    lines.append(f"battery (v5): {sum(c['correct'] for c in res['checks'])}/{len(res['checks'])} shapes correct"
                 + "".join(f"\n  FAIL {c['shape']}: {str(c['error'])[:160]}" for c in bad))
    worst = [c.get("rel_rmse_o") for c in res["checks"] if c.get("rel_rmse_o") is not None]
    if worst:
        lines.append(f"  worst rel-RMSE o {max(worst):.4f}")
    ref = "fla_cudagraph" if any(r["impl"] == "fla_cudagraph" and r.get("median_us") for r in res["results"]) \
        else res.get("baseline")
    for sname in res.get("shapes", []):
        rs = [r for r in res["results"] if r["shape"] == sname]
        if not rs:
            continue
        parts = []
        for r in rs:
            if r.get("median_us"):
                x = r.get(f"speedup_vs_{ref}")
                parts.append(f"{r['impl']} {r['median_us']:.1f}" + (f" ({x:.2f}x)" if x and r["impl"] != ref else ""))
            else:
                parts.append(f"{r['impl']} ERROR {str(r.get('error'))[:80]}")
        lines.append(f"{sname} [us, x vs {ref}]: " + "; ".join(parts))
    if res.get("warm"):
        bad_w = [w["job"] + (f" ({w['why']})" if w.get("why") else f" (rc {w['rc']})") for w in res["warm"] if w["rc"] != 0]
        lines.append(f"warm-up processes: {len(res['warm']) - len(bad_w)}/{len(res['warm'])} ok"
                     + (": not ok " + ", ".join(bad_w) if bad_w else ""))
    for s in res["skipped"]:
        lines.append(f"skipped {s['stage']} {s['shape']} ({s['why']})")
    for e in res["errors"]:
        lines.append(f"error: {e[:200]}")
    for k, c in res["candidates"].items():
        if c.get("error"):
            lines.append(f"candidate {k} not loaded: {c['error'][:200]}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
