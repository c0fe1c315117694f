"""One GPU call: check and time seeds/chunked_v3.py (whole, preparation alone, scan alone) against
seeds/chunked.py and FLA (as called and from a CUDA graph); print a table last.

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site FLA_FLASH_KDA=0 PYTHONUNBUFFERED=1 python3 kernels/kda/tune_v3.py --out $OUT/v3.json
CPU dry run (smoke shapes, interpreter, no timing): TRITON_INTERPRET=1 python tune_v3.py --cpu

Stages (rows appended to the JSON as they finish; a wall-clock guard skips what would not fit):
  1. headline shape: v3 BEST, FLA, v1 BEST, then every v3 variant: correctness against the fp32
     oracle (bf16, NaN-poisoned outputs) and do_bench medians (L2 flushed) of the whole forward,
     of the preparation alone and of the scan alone, interleaved over two rounds;
  2. the other goal shapes: v3 BEST and the fastest correct variant, FLA as called and its CUDA
     graph replay;
  3. held-out shapes and the causality check, for the same two configs.
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

VARIANTS = [{"MAXNREG": 168}, {"BK": 16, "MAXNREG": 168}, {"BK": 16}, {"PREP_WARPS": 8},
            {"PREP_WARPS": 8, "BK": 64}, {"AP_DOT": "lowp"}, {"PREP_STAGES": 2}, {"BV": 16},
            {"SCAN_STAGES": 2}, {"INV_DOT": "tf32x3"}]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--variants", default=None, help="JSON list of v3 config overrides")
    ap.add_argument("--budget-s", type=float, default=230.0)
    ap.add_argument("--rep-ms", type=int, default=60)
    ap.add_argument("--ab", action="store_true",
                    help="headline shape only, no FLA / v1 / held-out: print the fastest correct config last")
    args = ap.parse_args()
    t_start = time.time()
    left = lambda: args.budget_s - (time.time() - t_start)
    cpu = args.cpu
    dev, dt = ("cpu", torch.float16) if cpu else ("cuda", torch.bfloat16)
    toml = tomllib.loads((HERE / "task.toml").read_text())
    tol = toml["tolerance"]
    shapes_all = {**toml["shapes"], **toml["heldout"], **toml["smoke"]}
    goal = list(toml["smoke"])[:2] if cpu else toml["default_shapes"]
    v1, v3 = load_seed(HERE / "seeds" / "chunked.py"), load_seed(HERE / "seeds" / "chunked_v3.py")
    small = {"BV": 16} if cpu else {}
    cfgs = {"v3": dict(v3.BEST, **small)}
    for var in (json.loads(args.variants) if args.variants is not None else VARIANTS):
        cfgs["v3[" + ",".join(f"{k}={v}" for k, v in var.items()) + "]"] = dict(v3.BEST, **small, **var)
    fla = task._fla_available() and not cpu and not args.ab
    env = env_info()
    rows, table = [], []
    out_path = Path(args.out) if args.out else None

    def row(**kw):
        kw["t_s"] = round(time.time() - t_start, 1)
        rows.append(kw)
        if out_path:
            out_path.write_text(json.dumps({"env": env, "rows": rows}, indent=1))

    def alloc(shape, inp):
        return {n: torch.full(s, float("nan"), dtype=d, device=dev)
                for n, (s, d) in task.output_spec(shape, inp).items()}

    def check(out, ref):
        return check_outputs(out, ref, tol)

    def bench(fn):
        if cpu:
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e6
        return triton.testing.do_bench(fn, warmup=10, rep=args.rep_ms, return_mode="median") * 1e3

    def v3_fns(cfg, inp, shape):
        """whole forward, preparation alone, scan alone (buffers prepared once)."""
        q, k, v, g, beta = (inp[n].contiguous() for n in ("q", "k", "v", "g", "beta"))
        out = alloc(shape, inp)
        buf = v3.buffers(q, v, cfg)
        v3.prep(q, k, v, g, beta, buf, cfg)
        fns = {"total": lambda: v3.kda(inp, out, cfg),
               "prep": lambda: v3.prep(q, k, v, g, beta, buf, cfg),
               "scan": lambda: v3.scan(q, v, inp.get("h0"), buf, out, cfg)}
        if cfg["INV"] == "split":
            fns["inv"] = lambda: v3.inv_wu(v, beta, buf, cfg)
        return fns

    def measure(name, labels, with_v1=False):
        shape = shapes_all[name]
        inp = task.make_inputs(shape, 11, dev, dt)
        ref = task.reference(**inp)
        fns, checks = {}, {}
        if with_v1:
            out = alloc(shape, inp)
            v1.kda(inp, out, v1.BEST)
            checks["v1"] = check(out, ref)
            fns[("v1", "total")] = lambda o=out: v1.kda(inp, o, v1.BEST)
        if fla and left() > 20:
            t0 = time.time()
            checks["fla"] = check(task.baseline_fla(**inp), ref)
            checks["fla"]["first_call_s"] = round(time.time() - t0, 1)
            fns[("fla", "total")] = lambda: task.baseline_fla(**inp)
        for label in labels:
            if left() < 25:
                print(f"[{name}] {label}: skipped (time)", flush=True)
                continue
            t0 = time.time()
            try:
                out = alloc(shape, inp)
                v3.kda(inp, out, cfgs[label])
                res = check(out, ref)
            except Exception as e:  # report, keep going
                res = {"correct": False, "error": f"{type(e).__name__}: {e}"[:300]}
            res["first_call_s"] = round(time.time() - t0, 1)
            checks[label] = res
            row(stage="check", shape=name, impl=label, config=cfgs[label], **res)
            print(f"[{name}] {label:28s} o {res.get('rel_o', float('nan')):.4f} S "
                  f"{res.get('rel_final_state', float('nan')):.4f} {'ok' if res['correct'] else 'WRONG ' + res.get('error', '')}"
                  f" ({res['first_call_s']} s)", flush=True)
            if res["correct"]:
                for part, fn in v3_fns(cfgs[label], inp, shape).items():
                    fns[(label, part)] = fn
        samples = {key: [] for key in fns}
        for _ in range(1 if cpu else 2):               # interleaved rounds
            for key, fn in fns.items():
                samples[key].append(bench(fn))
        times = {key: min(s) for key, s in samples.items()}
        spread = {key: 100.0 * (max(s) - min(s)) / min(s) for key, s in samples.items()}
        if fla and "fla" in checks:
            for extra in task.extra_rows(shape, inp):
                times[(extra["impl"], "total")] = extra["median_us"]
                spread[(extra["impl"], "total")] = extra["spread_pct"]
                checks[extra["impl"]] = checks["fla"]
        for label in checks:
            t = {part: times.get((label, part)) for part in ("total", "prep", "scan", "inv")}
            sp = spread.get((label, "total"))
            row(stage="time", shape=name, impl=label, median_us=t["total"], prep_us=t["prep"],
                scan_us=t["scan"], inv_us=t["inv"], spread_pct=sp)
            table.append((name, label, t, checks[label]))
        del inp, ref, fns
        return {label: times.get((label, "total")) for label in checks}

    print(f"env {env} fla={fla}", flush=True)
    head = goal[0]
    t_head = measure(head, list(cfgs), with_v1=not args.ab)
    ok = {lb: t for lb, t in t_head.items() if lb.startswith("v3") and t}
    pick = min(ok, key=ok.get) if ok else "v3"
    row(stage="pick", impl=pick, config=cfgs[pick], median_us=ok.get(pick))
    print(f"[pick] {pick} {ok.get(pick)}", flush=True)
    labels = ["v3"] + ([pick] if pick != "v3" else [])
    if args.ab:
        _table(goal[:1], table)
        print(json.dumps({k: v for k, v in cfgs[pick].items()}), flush=True)
        return
    for name in goal[1:]:
        if left() > 40:
            measure(name, labels)

    # held-out shapes and causality
    held = list(toml["smoke"])[2:] if cpu else list(toml["heldout"])
    for label in labels:
        for name in held:
            if left() < 12:
                break
            shape = shapes_all[name]
            inp = task.make_inputs(shape, 23, dev, dt)
            out = alloc(shape, inp)
            v3.kda(inp, out, cfgs[label])
            res = check(out, task.reference(**inp))
            row(stage="heldout", shape=name, impl=label, **res)
            print(f"[held] {name:24s} {label} o {res['rel_o']:.4f} S {res['rel_final_state']:.4f} "
                  f"correct={res['correct']}", flush=True)
        if left() < 8:
            break
        cshape = dict(B=1, T=77, H=2, K=16, V=16, gate="strong") if cpu else dict(B=2, T=1000, H=4, gate="strong", h0=True)

        def run_c(i, lb=label):
            o = alloc(cshape, i)
            v3.kda(i, o, cfgs[lb])
            return o
        for c in task.extra_checks(run_c, cshape, 5, dev, dt):
            row(stage="causality", impl=label, **c)
            print(f"[causal] {label} {c}", flush=True)

    _table(goal, table)
    print(f"done in {time.time() - t_start:.0f} s", flush=True)


def _table(goal, table):
    print("\n| shape | impl | total us | prep us | scan us | rel o | rel S | correct | vs FLA graph |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |")
    for name in goal:
        rs = [t for t in table if t[0] == name]
        g = {lb: t["total"] for _, lb, t, _ in rs}.get("fla_cudagraph")
        for _, lb, t, c in rs:
            f = lambda x: f"{x:.1f}" if x else "-"
            vs = f"{g / t['total']:.2f}x" if g and t["total"] else "-"
            inv = f" (inv {t['inv']:.1f})" if t.get("inv") else ""
            print(f"| {name} | {lb} | {f(t['total'])} | {f(t['prep'])}{inv} | {f(t['scan'])} | "
                  f"{c.get('rel_o', float('nan')):.4f} | {c.get('rel_final_state', float('nan')):.4f} | "
                  f"{c.get('correct')} | {vs} |")


if __name__ == "__main__":
    main()
