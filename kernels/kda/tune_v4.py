"""One GPU call: check and time seeds/chunked_v4.py variants against seeds/chunked_v3.py (BEST) and
FLA's CUDA-graph time; print a table last.

    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site FLA_FLASH_KDA=0 PYTHONUNBUFFERED=1 python3 kernels/kda/tune_v4.py --out $OUT/v4.json
CPU dry run (smoke shapes, interpreter, no timing): TRITON_INTERPRET=1 python tune_v4.py --cpu

Stages (rows appended to the JSON as they finish; a wall-clock guard skips what would not fit):
  0. every config is compiled first in parallel subprocesses (the host's cores; Triton's on-disk
     cache then serves the measuring process), at the goal shapes' specialisation;
  1. headline shape: every config, correctness against the fp32 oracle (bf16, NaN-poisoned
     outputs), do_bench medians (L2 flushed) of the whole forward, the preparation alone and the
     scan alone, two interleaved rounds; FLA replayed from a CUDA graph;
  2. the other goal shapes (--shapes): v3 BEST and the --keep fastest correct v4 configs, FLA graph;
  3. held-out shapes and the causality check for the fastest v4 config.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import torch  # noqa: E402
import triton  # noqa: E402

import task  # noqa: E402
from tune import check_outputs, env_info, load_seed  # noqa: E402
from tune_v3 import _table  # noqa: E402  (the same table)

SEEDS = {"v3": "chunked_v3.py", "v4": "chunked_v4.py"}
# label -> (seed, overrides of its BEST)
CONFIGS = {
    "v3": ("v3", {}),
    "v4": ("v4", {}),
    "v4[P=own,MAXNREG=168]": ("v4", {"P": "own", "MAXNREG": 168}),
    "v4[P=role,MAXNREG=168]": ("v4", {"P": "role", "MAXNREG": 168}),
    "v4[P=role,MAXNREG=168,WU_LOAD=early]": ("v4", {"P": "role", "MAXNREG": 168, "WU_LOAD": "early"}),
    "v4[WU_LOAD=early]": ("v4", {"WU_LOAD": "early"}),
    "v4[P=own,MAXNREG=168,WU_LOAD=early]": ("v4", {"P": "own", "MAXNREG": 168, "WU_LOAD": "early"}),
    "v4[INV_ORDER=left]": ("v4", {"INV_ORDER": "left"}),
    "v4[WU_LOAD=early,INV_ORDER=left]": ("v4", {"WU_LOAD": "early", "INV_ORDER": "left"}),
    "v4[SCAN=transition]": ("v4", {"SCAN": "transition"}),
    "v4[SCAN=transition,WU_LOAD=early,INV_ORDER=left]": ("v4", {"SCAN": "transition", "WU_LOAD": "early",
                                                                "INV_ORDER": "left"}),
    "v4[INV=split]": ("v4", {"INV": "split"}),
    # a probe, not a candidate: the Neumann inverse (depth 6 instead of 10) is wrong with nearly
    # parallel keys (tests/emulate_inv.py); its time says how much the inverse's chain costs
    "v3[neumann]": ("v3", {"INV_ALGO": "neumann"}),
}
# the scan with fewer load stages (193 KB of shared memory at 3: one program per SM): only where
# its programs (B*H*V/BV) outnumber the SMs, e.g. b8_t4096_h16's 512 (4 waves)
SCAN_CONFIGS = {
    "v4[SCAN_STAGES=1]": ("v4", {"SCAN_STAGES": 1}),
    "v4[SCAN_STAGES=2]": ("v4", {"SCAN_STAGES": 2}),
    "v4[SCAN=transition,SCAN_STAGES=1]": ("v4", {"SCAN": "transition", "SCAN_STAGES": 1}),
}
CONFIGS.update(SCAN_CONFIGS)


def _cfg(mods, label, small):
    seed, over = CONFIGS[label]
    return mods[seed], dict(mods[seed].BEST, **small, **over)


def precompile(jobs, budget_s):
    """Compile every (config, shape) in its own process at once (one run of each)."""
    procs = [subprocess.Popen([sys.executable, __file__, "--warm", label, "--warm-shape", shape_name],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for label, shape_name in jobs]
    t0, res = time.time(), {}
    for (label, shape_name), p in zip(jobs, procs):
        label = f"{label}@{shape_name}"
        try:
            out, _ = p.communicate(timeout=max(1.0, budget_s - (time.time() - t0)))
            res[label] = (p.returncode, out.strip().splitlines()[-1:] if out else [])
        except subprocess.TimeoutExpired:
            p.kill()
            res[label] = ("timeout", [])
    return res


def warm(label, shape_name):
    toml = tomllib.loads((HERE / "task.toml").read_text())
    shape = {**toml["shapes"], **toml["heldout"]}[shape_name]
    mods = {k: load_seed(HERE / "seeds" / v) for k, v in SEEDS.items()}
    mod, cfg = _cfg(mods, label, {})
    inp = task.make_inputs(shape, 11, "cuda", torch.bfloat16)
    out = {n: torch.empty(s, dtype=d, device="cuda") for n, (s, d) in task.output_spec(shape, inp).items()}
    t0 = time.time()
    mod.kda(inp, out, cfg)
    torch.cuda.synchronize()
    print(f"warm {label} {time.time() - t0:.1f} s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--labels", default=None, help="semicolon-separated labels of CONFIGS (default: all)")
    ap.add_argument("--shapes", default=None, help="comma-separated goal shapes after the headline")
    ap.add_argument("--keep", type=int, default=2, help="v4 configs carried to the other shapes")
    ap.add_argument("--budget-s", type=float, default=225.0)
    ap.add_argument("--rep-ms", type=int, default=50)
    ap.add_argument("--warm", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--warm-shape", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.warm:
        return warm(args.warm, args.warm_shape)
    t_start = time.time()
    left = lambda: args.budget_s - (time.time() - t_start)
    cpu = args.cpu
    dev, dt = ("cpu", torch.float16) if cpu else ("cuda", torch.bfloat16)
    toml = tomllib.loads((HERE / "task.toml").read_text())
    tol = toml["tolerance"]
    shapes_all = {**toml["shapes"], **toml["heldout"], **toml["smoke"]}
    goal = list(toml["smoke"])[:2] if cpu else toml["default_shapes"]
    head = goal[0]
    others = args.shapes.split(",") if args.shapes else goal[1:]
    mods = {k: load_seed(HERE / "seeds" / v) for k, v in SEEDS.items()}
    small = {"BV": 16} if cpu else {}
    labels = args.labels.split(";") if args.labels else [lb for lb in CONFIGS if lb not in SCAN_CONFIGS]
    scan_labels = [] if args.labels else list(SCAN_CONFIGS)
    fla = task._fla_available() and not cpu
    env = env_info()
    rows, table = [], []
    out_path = Path(args.out) if args.out else None

    def row(**kw):
        kw["t_s"] = round(time.time() - t_start, 1)
        rows.append(kw)
        if out_path:
            out_path.write_text(json.dumps({"env": env, "rows": rows}, indent=1))

    if not cpu:
        big = [n for n in others if n in toml["shapes"] and
               toml["shapes"][n]["B"] * toml["shapes"][n]["H"] * 128 // 32 > 132]
        jobs = [(lb, head) for lb in labels] + [(lb, n) for lb in ["v3", "v4"] + scan_labels for n in big[:1]]
        pre = precompile(jobs, min(120.0, left() - 60))
        row(stage="precompile", result={k: [str(v[0]), v[1]] for k, v in pre.items()})
        print(f"[precompile] {time.time() - t_start:.0f} s: {pre}", flush=True)

    def alloc(shape, inp):
        return {n: torch.full(s, float("nan"), dtype=d, device=dev)
                for n, (s, d) in task.output_spec(shape, inp).items()}

    def bench(fn):
        if cpu:
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e6
        return triton.testing.do_bench(fn, warmup=10, rep=args.rep_ms, return_mode="median") * 1e3

    def fns_of(mod, cfg, inp, shape):
        """whole forward, preparation alone, scan alone (buffers prepared once)."""
        q, k, v, g, beta = (inp[n].contiguous() for n in ("q", "k", "v", "g", "beta"))
        out = alloc(shape, inp)
        buf = mod.buffers(q, v, cfg)
        mod.prep(q, k, v, g, beta, buf, cfg)
        fns = {"total": lambda: mod.kda(inp, out, cfg),
               "prep": lambda: mod.prep(q, k, v, g, beta, buf, cfg),
               "scan": lambda: mod.scan(q, v, inp.get("h0"), buf, out, cfg)}
        if cfg["INV"] == "split":
            fns["inv"] = lambda: mod.inv_wu(v, beta, buf, cfg)
        return fns

    def measure(name, labs):
        shape = shapes_all[name]
        inp = task.make_inputs(shape, 11, dev, dt)
        ref = task.reference(**inp)
        fns, checks = {}, {}
        for label in labs:
            if left() < 20:
                print(f"[{name}] {label}: skipped (time)", flush=True)
                continue
            mod, cfg = _cfg(mods, label, small)
            t0 = time.time()
            try:
                out = alloc(shape, inp)
                mod.kda(inp, out, cfg)
                res = check_outputs(out, ref, tol)
            except Exception as e:  # report, keep going
                res = {"correct": False, "error": f"{type(e).__name__}: {e}"[:300]}
            res["first_call_s"] = round(time.time() - t0, 1)
            checks[label] = res
            row(stage="check", shape=name, impl=label, config=cfg, **res)
            print(f"[{name}] {label:32s} o {res.get('rel_o', float('nan')):.4f} S "
                  f"{res.get('rel_final_state', float('nan')):.4f} "
                  f"{'ok' if res['correct'] else 'WRONG ' + res.get('error', '')} ({res['first_call_s']} s)",
                  flush=True)
            if res["correct"]:
                for part, fn in fns_of(mod, cfg, inp, shape).items():
                    fns[(label, part)] = fn
        samples = {key: [] for key in fns}
        for _ in range(1 if cpu else 2):               # interleaved rounds
            for key, fn in fns.items():
                samples[key].append(bench(fn))
        times = {key: min(s) for key, s in samples.items()}
        spread = {key: 100.0 * (max(s) - min(s)) / min(s) for key, s in samples.items()}
        if fla and (name == head or left() > 90):     # FLA's first call at a shape autotunes (~20-60 s)
            for extra in task.extra_rows(shape, inp):
                times[(extra["impl"], "total")] = extra["median_us"]
                spread[(extra["impl"], "total")] = extra["spread_pct"]
                checks[extra["impl"]] = {}
        for label in checks:
            t = {part: times.get((label, part)) for part in ("total", "prep", "scan", "inv")}
            row(stage="time", shape=name, impl=label, median_us=t["total"], prep_us=t["prep"],
                scan_us=t["scan"], inv_us=t["inv"], spread_pct=spread.get((label, "total")))
            table.append((name, label, t, checks[label]))
        del inp, ref, fns
        return {label: times.get((label, "total")) for label in checks}

    print(f"env {env} fla={fla}", flush=True)
    t_head = measure(head, labels)
    ok = sorted((t, lb) for lb, t in t_head.items() if lb.startswith("v4") and t)
    keep = [lb for _, lb in ok[:args.keep]]
    row(stage="pick", keep=keep, times={lb: t for t, lb in ok})
    print(f"[pick] {keep}", flush=True)
    for name in others:
        if left() > 45:
            sh = shapes_all[name]
            many = sh["B"] * sh["H"] * sh.get("V", 128) // 32 > 132     # scan programs at BV 32
            measure(name, ["v3"] + keep + (scan_labels if many else []))

    if keep:                                        # held-out shapes and causality, fastest v4
        label = keep[0]
        mod, cfg = _cfg(mods, label, small)
        for name in (list(toml["smoke"])[2:] if cpu else list(toml["heldout"])):
            if left() < 15:
                break
            shape = shapes_all[name]
            inp = task.make_inputs(shape, 23, dev, dt)
            out = alloc(shape, inp)
            mod.kda(inp, out, cfg)
            res = check_outputs(out, task.reference(**inp), tol)
            row(stage="heldout", shape=name, impl=label, **res)
            print(f"[held] {name:24s} {label} o {res['rel_o']:.4f} S {res['rel_final_state']:.4f} "
                  f"correct={res['correct']}", flush=True)
        if left() > 8:
            cshape = (dict(B=1, T=77, H=2, K=16, V=16, gate="strong") if cpu
                      else dict(B=2, T=1000, H=4, gate="strong", h0=True))

            def run_c(i):
                o = alloc(cshape, i)
                mod.kda(i, o, cfg)
                return o
            for c in task.extra_checks(run_c, cshape, 5, dev, dt):
                row(stage="causality", impl=label, **c)
                print(f"[causal] {label} {c}", flush=True)

    _table([head] + others, table)
    print(f"done in {time.time() - t_start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
