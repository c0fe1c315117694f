"""One GPU call: check and time seeds/chunked_v2.py against seeds/chunked.py and FLA; print a table.

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site FLA_FLASH_KDA=0 PYTHONUNBUFFERED=1 python3 kernels/kda/tune_v2.py --out $OUT/v2.json
CPU dry run (smoke shapes, interpreter, no timing): TRITON_INTERPRET=1 python tune_v2.py --cpu

Stages (rows appended to the JSON as they finish, so a timeout keeps what was done):
  1. per goal shape: correctness of v1 BEST, v2 BEST (+ the v2 variants on the headline shape
     only) and FLA against the fp32 oracle (bf16 inputs, NaN-poisoned outputs), then interleaved
     timing (two ABAB rounds of do_bench, L2 flushed each rep) of every correct one, plus FLA
     from a CUDA graph;
  2. v2 BEST on two held-out shapes and the causality check;
  3. per-kernel GPU time (torch.profiler) of v1 / v2 / FLA at the headline shape, and the
     compiled kernels' registers / spills / shared memory.
Budget: about 2-3 minutes on an H200 with a cold Triton cache (FLA's first call autotunes);
shorter: --variants '[]' and/or --shapes b1_t8192_h16.
"""
from __future__ import annotations

import argparse
import json
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

# v2 points worth timing besides BEST (one factor at a time, offline figures in NOTES.md):
# no slice prefetch; bf16 A / P operands (error +0.0005); no register cap (142 regs, 1 program
# of 8 warps per SM); 4 warps under the cap (4 programs per SM, 272 B of stack); wider K slices
VARIANTS = [{"PREP_STAGES": 1}, {"AP_DOT": "lowp"}, {"PREP_MAXNREG": 0}, {"PREP_WARPS": 4},
            {"BK": 32}]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--shapes", default=None)
    ap.add_argument("--variants", default=None, help="JSON list of v2 config overrides")
    ap.add_argument("--rep-ms", type=int, default=100)
    ap.add_argument("--no-profile", action="store_true")
    args = ap.parse_args()
    cpu = args.cpu
    dev, dt = ("cpu", torch.float16) if cpu else ("cuda", torch.bfloat16)
    toml = tomllib.loads((HERE / "task.toml").read_text())
    tol = toml["tolerance"]
    shapes_all = {**toml["shapes"], **toml["heldout"], **toml["smoke"]}
    shapes = list(toml["smoke"]) if cpu else (args.shapes.split(",") if args.shapes else toml["default_shapes"])
    v1, v2 = load_seed(HERE / "seeds" / "chunked.py"), load_seed(HERE / "seeds" / "chunked_v2.py")
    small = {"BV": 16} if cpu else {}
    impls = {"v1": (v1, dict(v1.BEST, **small)), "v2": (v2, dict(v2.BEST, **small))}
    for var in (json.loads(args.variants) if args.variants else VARIANTS):
        impls["v2[" + ",".join(f"{k}={v}" for k, v in var.items()) + "]"] = (v2, dict(v2.BEST, **small, **var))
    fla = task._fla_available() and not cpu
    env = env_info()
    rows = []
    out_path = Path(args.out) if args.out else None

    def row(**kw):
        rows.append(kw)
        if out_path:
            out_path.write_text(json.dumps({"env": env, "rows": rows}, indent=1))

    def alloc(shape, inp):
        return {n: torch.full(s, float("nan"), dtype=d, device=dev)
                for n, (s, d) in task.output_spec(shape, inp).items()}

    def run(mod, cfg, inp, shape):
        out = alloc(shape, inp)
        mod.kda(inp, out, cfg)
        return out

    def check(out, ref):
        return check_outputs(out, ref, tol)

    def bench(fn):
        if cpu:
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e6, 0.0
        q20, q50, q80 = triton.testing.do_bench(fn, warmup=25, rep=args.rep_ms, quantiles=[0.2, 0.5, 0.8])
        return q50 * 1e3, 100.0 * (q80 - q20) / q50

    print(f"env {env} fla={fla}", flush=True)
    table = []
    for name in shapes:
        shape = shapes_all[name]
        inp = task.make_inputs(shape, 11, dev, dt)
        ref = task.reference(**inp)
        fns, checks = {}, {}
        for label, (mod, cfg) in impls.items():
            if label.startswith("v2[") and name != shapes[0]:
                continue                        # variants: headline shape only (time budget)
            t0 = time.time()
            try:
                res = check(run(mod, cfg, inp, shape), ref)
            except Exception as e:  # report, keep going
                res = {"correct": False, "error": f"{type(e).__name__}: {e}"[:300]}
            res["first_call_s"] = round(time.time() - t0, 1)
            checks[label] = res
            row(stage="check", shape=name, impl=label, config=cfg, **res)
            if res["correct"]:
                out = alloc(shape, inp)
                fns[label] = (lambda m=mod, c=cfg, o=out: m.kda(inp, o, c))
        if fla:
            res = check(task.baseline_fla(**inp), ref)
            checks["fla"] = res
            row(stage="check", shape=name, impl="fla", **res)
            fns["fla"] = lambda: task.baseline_fla(**inp)
        samples = {k: [] for k in fns}
        for _ in range(1 if cpu else 2):            # ABAB: interleaved rounds
            for k, fn in fns.items():
                samples[k].append(bench(fn))
        times = {}
        for k, s in samples.items():
            meds = [m for m, _ in s]
            times[k] = (min(meds), max(max(sp for _, sp in s), 100.0 * (max(meds) - min(meds)) / min(meds)))
        if fla:
            for extra in task.extra_rows(shape, inp):
                times[extra["impl"]] = (extra["median_us"], extra["spread_pct"])
                checks[extra["impl"]] = checks["fla"]
        for k in checks:
            med, spread = times.get(k, (None, None))
            row(stage="time", shape=name, impl=k, median_us=med, spread_pct=spread)
            table.append((name, k, med, spread, checks[k]))
        for k in list(checks) + (["fla_cudagraph"] if "fla_cudagraph" in times else []):
            if k in times or k in checks:
                c = checks.get(k, {})
                med = times.get(k, (None,))[0]
                print(f"[{name}] {k:34s} " + (f"{med:9.1f} us" if med else "      -     ") +
                      f"  o {c.get('rel_o', float('nan')):.4f}  S {c.get('rel_final_state', float('nan')):.4f}"
                      f"  {'ok' if c.get('correct') else 'WRONG ' + c.get('error', '')}", flush=True)
            if k == "fla_cudagraph":
                break
        del inp, ref, fns

    # held-out shapes and causality, v2 BEST
    mod, cfg = impls["v2"]
    held = [] if cpu else ["b3_t777_h4_strong_h0", "b2_t4097_h20_mild_h0"]
    for name in held:
        shape = shapes_all[name]
        inp = task.make_inputs(shape, 23, dev, dt)
        res = check(run(mod, cfg, inp, shape), task.reference(**inp))
        row(stage="heldout", shape=name, impl="v2", **res)
        print(f"[held] {name:24s} v2 o {res['rel_o']:.4f} S {res['rel_final_state']:.4f} correct={res['correct']}", flush=True)
    cshape = dict(B=1, T=77, H=2, K=16, V=16, gate="strong") if cpu else dict(B=2, T=1000, H=4, gate="strong", h0=True)
    for c in task.extra_checks(lambda i: run(mod, cfg, i, cshape), cshape, 5, dev, dt):
        row(stage="causality", impl="v2", **c)
        print(f"[causal] v2 {c}", flush=True)

    # per-kernel GPU time and compiled resources at the headline shape
    if not cpu and not args.no_profile:
        from torch.profiler import ProfilerActivity, profile
        name = shapes[0]
        shape = shapes_all[name]
        inp = task.make_inputs(shape, 11, dev, dt)
        fns = {"v1": lambda: run(v1, impls["v1"][1], inp, shape), "v2": lambda: run(v2, impls["v2"][1], inp, shape)}
        if fla:
            fns["fla"] = lambda: task.baseline_fla(**inp)
        for impl, fn in fns.items():
            fn()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(5):
                    fn()
                torch.cuda.synchronize()
            for ev in prof.key_averages():
                us = getattr(ev, "self_device_time_total", None) or getattr(ev, "self_cuda_time_total", 0.0)
                if us > 0:
                    row(stage="profile", shape=name, impl=impl, kernel=ev.key[:100], us_per_call=us / 5)
                    print(f"[prof] {impl:4s} {us / 5:8.1f} us  {ev.key[:80]}", flush=True)
        for label, mod_, kname in (("v1", v1, "_kda_prep"), ("v1", v1, "_kda_scan"),
                                   ("v2", v2, "_kda_prep_v2"), ("v2", v2, "_kda_scan")):
            try:
                for cache in getattr(mod_, kname).device_caches.values():
                    for ck in cache[0].values():
                        info = dict(kernel=kname, registers=ck.n_regs, spills=ck.n_spills,
                                    shared=ck.metadata.shared, num_warps=ck.metadata.num_warps)
                        row(stage="kernel_info", impl=label, **info)
                        print(f"[kinfo] {label} {info}", flush=True)
            except Exception as e:
                print(f"[kinfo] {kname}: {type(e).__name__}: {e}", flush=True)

    # the short table
    print("\n| shape | impl | median us | spread % | rel-RMSE o | correct | vs v1 | vs FLA graph |")
    print("| --- | --- | ---: | ---: | ---: | --- | ---: | ---: |")
    for name in shapes:
        rs = [t for t in table if t[0] == name]
        base = {t[1]: t[2] for t in rs}
        for _, k, med, spread, c in rs:
            f = lambda ref: f"{base[ref] / med:.2f}x" if med and base.get(ref) else "-"
            print(f"| {name} | {k} | {med or float('nan'):.1f} | {spread or 0:.1f} | {c.get('rel_o', float('nan')):.4f} "
                  f"| {c.get('correct')} | {f('v1')} | {f('fla_cudagraph')} |")
    print("done", flush=True)


if __name__ == "__main__":
    main()
