"""Check, time and sweep the KDA seed on one GPU in one call (the generic harness bench may
replace this). CPU dry run: TRITON_INTERPRET=1 python tune.py --cpu (smoke shapes, no timing).

    python kernels/kda/tune.py --out results.json [--shapes a,b] [--sweep] [--profile]

Stages, each appending rows to the JSON as it finishes (a timeout keeps what was done):
  1. correctness of the seed (BEST config), FLA and torch_chunked at the goal shapes vs the
     fp32 recurrent oracle (bf16 inputs; outputs poisoned with NaN before the candidate runs);
  2. timing, interleaved (seed, fla, torch_chunked, seed, fla, ...): do_bench medians with the
     L2 flushed before each rep; FLA replayed from a CUDA graph through task.extra_rows;
  3. held-out correctness and the causality check;
  4. a one-factor-at-a-time sweep of the seed's SPACE on the headline shape;
  5. per-kernel GPU time (torch.profiler) of the seed and FLA on the headline shape.
"""
from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
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


def load_seed(path: Path):
    spec = importlib.util.spec_from_file_location("kda_seed_" + path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def rel_err(out, ref):
    out, ref = out.float(), ref.float()
    if not torch.isfinite(out).all():
        return float("inf"), float("inf")
    d = out - ref
    return (d.norm() / ref.norm()).item(), (d.abs().max() / ref.abs().max()).item()


def check_outputs(out, ref, tol) -> dict:
    """rel-RMSE and max error of o and the final state against the oracle, and the verdict."""
    res, ok = {}, True
    for n in ("o", "final_state"):
        r, m = rel_err(out[n], ref[n])
        res[f"rel_{n}"], res[f"max_{n}"] = r, m
        ok &= r < tol["rel_rmse"] and m < tol["max_abs"]
    res["correct"] = bool(ok)
    return res


def env_info():
    info = {"gpu": None, "driver": None, "torch": torch.__version__, "triton": triton.__version__}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
        try:
            info["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.max.sm", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=10).stdout.strip()
        except Exception:
            pass
    try:
        info["commit"] = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
                                        capture_output=True, text=True, timeout=5).stdout.strip() or "uncommitted"
    except Exception:
        info["commit"] = "unknown"
    info["date"] = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return info


class Bench:
    def __init__(self, args):
        self.args = args
        self.cpu = args.cpu
        self.device = "cpu" if self.cpu else "cuda"
        self.dtype = torch.float16 if self.cpu else torch.bfloat16
        toml = tomllib.loads((HERE / "task.toml").read_text())
        self.toml = toml
        self.tol = toml["tolerance"]
        self.seed_mod = load_seed(HERE / "seeds" / "chunked.py")
        self.rows = []
        self.env = env_info()
        self.fla = task._fla_available() and not self.cpu
        self.out_path = Path(args.out) if args.out else None

    # -- helpers ------------------------------------------------------------------------
    def save(self):
        if self.out_path:
            self.out_path.write_text(json.dumps({"env": self.env, "rows": self.rows}, indent=1))

    def alloc(self, shape, inputs):
        spec = task.output_spec(shape, inputs)
        return {n: torch.full(s, float("nan"), dtype=d, device=self.device) for n, (s, d) in spec.items()}

    def run_seed(self, inputs, shape, cfg):
        out = self.alloc(shape, inputs)
        self.seed_mod.kda(inputs, out, cfg)
        return out

    def check(self, outs, ref):
        res = {}
        ok = True
        for n in ("o", "final_state"):
            r, m = rel_err(outs[n], ref[n])
            res[f"rel_rmse_{n}"] = r
            res[f"max_err_{n}"] = m
            ok &= (r < self.tol["rel_rmse"]) and (m < self.tol["max_abs"])
        res["correct"] = bool(ok)
        return res

    def impls(self, cfg):
        fns = {"seed": lambda inp, shape: self.run_seed(inp, shape, cfg)}
        if self.fla:
            fns["fla"] = lambda inp, shape: task.baseline_fla(**inp)
        fns["torch_chunked"] = lambda inp, shape: task.baseline_torch_chunked(**inp)
        return fns

    def row(self, **kw):
        r = dict(kw)
        r["env"] = {k: self.env[k] for k in ("gpu", "driver", "torch", "triton")}
        r["commit"] = self.env["commit"]
        r["date"] = self.env["date"]
        self.rows.append(r)
        self.save()
        return r

    def bench(self, fn):
        if self.cpu:
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e6, 0.0
        q20, q50, q80 = triton.testing.do_bench(fn, warmup=25, rep=self.args.rep_ms, quantiles=[0.2, 0.5, 0.8])
        return q50 * 1e3, 100.0 * (q80 - q20) / q50

    # -- stages ---------------------------------------------------------------------------
    def stage_goal(self, shapes, cfg):
        self.inputs, self.refs = {}, {}
        for name in shapes:
            shape = self.all_shapes[name]
            t0 = time.time()
            inp = task.make_inputs(shape, 11, self.device, self.dtype)
            ref = task.reference(**inp)
            self.inputs[name], self.refs[name] = inp, ref
            t_ref = time.time() - t0
            for impl, fn in self.impls(cfg).items():
                if impl == "torch_chunked" and name != shapes[0]:
                    continue
                try:
                    res = self.check(fn(inp, shape), ref)
                except Exception as e:  # report, keep going
                    res = {"correct": False, "error": f"{type(e).__name__}: {e}"[:400]}
                self.row(stage="check", shape=name, impl=impl, **res)
                print(f"[check] {name:18s} {impl:14s} " + " ".join(
                    f"{k}={v:.2e}" if isinstance(v, float) else f"{k}={v}" for k, v in res.items()),
                    f"(oracle {t_ref:.1f}s)", flush=True)

    def stage_time(self, shapes, cfgs):
        for name in shapes:
            shape, inp = self.all_shapes[name], self.inputs[name]
            fns = {}
            for label, cfg in cfgs.items():
                out = self.alloc(shape, inp)
                fns[label] = (lambda o=out, c=cfg: self.seed_mod.kda(inp, o, c))
            if self.fla:
                fns["fla"] = lambda: task.baseline_fla(**inp)
            if not self.args.skip_torch_chunked and name == shapes[0]:
                fns["torch_chunked"] = lambda: task.baseline_torch_chunked(**inp)
            samples = {k: [] for k in fns}
            for _ in range(2):                      # ABAB: two interleaved rounds
                for k, fn in fns.items():
                    samples[k].append(self.bench(fn))
            res = {}
            for k, s in samples.items():
                meds = [m for m, _ in s]
                med = sorted(meds)[len(meds) // 2 - (1 if len(meds) % 2 == 0 else 0)]
                med = min(meds)  # two rounds: report the lower median, spread covers both
                spread = max(max(sp for _, sp in s), 100.0 * (max(meds) - min(meds)) / med)
                res[k] = (med, spread)
            if self.fla:
                for extra in task.extra_rows(shape, inp):
                    res[extra["impl"]] = (extra["median_us"], extra["spread_pct"])
            fla_us = res.get("fla", (None,))[0]
            fla_g = res.get("fla_cudagraph", (None,))[0]
            for k, (med, spread) in res.items():
                r = self.row(stage="time", shape=name, impl=k, median_us=med, spread_pct=spread,
                             config=cfgs.get(k),
                             correct=next((x["correct"] for x in self.rows if x.get("stage") == "check"
                                           and x["shape"] == name and x["impl"] == ("seed" if k in cfgs else k)), None),
                             speedup_vs_fla=(fla_us / med) if fla_us else None,
                             speedup_vs_fla_cudagraph=(fla_g / med) if fla_g else None)
                print(f"[time]  {name:18s} {k:14s} {med:9.1f} us  ±{spread:4.1f}%  "
                      f"vs fla {r['speedup_vs_fla'] or 0:5.2f}x  vs fla-graph {r['speedup_vs_fla_cudagraph'] or 0:5.2f}x",
                      flush=True)

    def stage_heldout(self, cfgs):
        names = list(self.toml["heldout"]) if not self.cpu else []
        for name in names:
            shape = self.all_shapes[name]
            inp = task.make_inputs(shape, 23, self.device, self.dtype)
            ref = task.reference(**inp)
            for label, cfg in cfgs.items():
                try:
                    res = self.check(self.run_seed(inp, shape, cfg), ref)
                except Exception as e:
                    res = {"correct": False, "error": f"{type(e).__name__}: {e}"[:400]}
                self.row(stage="heldout", shape=name, impl=label, config=cfg, **res)
                print(f"[held]  {name:24s} {label:10s} " + " ".join(
                f"{k}={v:.2e}" if isinstance(v, float) else f"{k}={v}" for k, v in res.items()), flush=True)
        cshape = dict(B=2, T=1000, H=4, gate="strong", h0=True) if not self.cpu else \
            dict(B=1, T=77, H=2, K=16, V=16, gate="strong")
        for label, cfg in cfgs.items():
            for seed in (5, 6):
                chk = task.extra_checks(lambda i: self.run_seed(i, cshape, cfg), cshape, seed, self.device, self.dtype)
                for c in chk:
                    self.row(stage="causality", shape=str(cshape), impl=label, config=cfg, **c)
                    print(f"[causal] {label} {c}", flush=True)

    def stage_sweep(self, name, base):
        shape, inp, ref = self.all_shapes[name], self.inputs[name], self.refs[name]
        space = self.seed_mod.SPACE
        cands = [dict(base)]
        for key, vals in space.items():
            if self.args.sweep_keys and key not in self.args.sweep_keys.split(","):
                continue
            for v in vals:
                if v != base[key]:
                    c = dict(base)
                    c[key] = v
                    cands.append(c)
        for extra in self.args.extra_cfgs:
            c = dict(base)
            c.update(json.loads(extra))
            cands.append(c)
        best = None
        for cfg in cands:
            label = ",".join(f"{k}={v}" for k, v in cfg.items() if v != base[k]) or "BEST"
            try:
                t0 = time.time()
                res = self.check(self.run_seed(inp, shape, cfg), ref)
                tc = time.time() - t0
                med, spread = self.bench(lambda: self.run_seed(inp, shape, cfg)) if res["correct"] else (None, None)
            except Exception as e:
                res, med, spread, tc = {"correct": False, "error": f"{type(e).__name__}: {str(e)[:300]}"}, None, None, 0
            self.row(stage="sweep", shape=name, impl="seed", config=cfg, label=label,
                     median_us=med, spread_pct=spread, **res)
            print(f"[sweep] {label:34s} " + (f"{med:8.1f} us ±{spread:4.1f}%" if med else "   -    ") +
                  f" o={res.get('rel_rmse_o', float('nan')):.2e} S={res.get('rel_rmse_final_state', float('nan')):.2e}"
                  f" compile+run {tc:.1f}s {res.get('error', '')}", flush=True)
            if med and (best is None or med < best[0]):
                best = (med, cfg)
        return best

    def stage_profile(self, name, cfg, extra_cfgs=()):
        if self.cpu:
            return
        from torch.profiler import ProfilerActivity, profile
        inp, shape = self.inputs[name], self.all_shapes[name]
        fns = {"seed": lambda: self.run_seed(inp, shape, cfg)}
        for i, e in enumerate(extra_cfgs):
            c = dict(cfg)
            c.update(json.loads(e))
            fns[f"seed[{e}]"] = (lambda c=c: self.run_seed(inp, shape, c))
        if self.fla:
            fns["fla"] = lambda: task.baseline_fla(**inp)
        for impl, fn in fns.items():
            fn()
            torch.cuda.synchronize()
            n = 5
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(n):
                    fn()
                torch.cuda.synchronize()
            tot = 0.0
            for ev in prof.key_averages():
                us = getattr(ev, "self_device_time_total", None)
                if us is None:
                    us = getattr(ev, "self_cuda_time_total", 0.0)
                if us <= 0:
                    continue
                per = us / n
                tot += per
                self.row(stage="profile", shape=name, impl=impl, kernel=ev.key[:120], us_per_call=per,
                         calls_per_call=ev.count / n)
                print(f"[prof]  {impl[:40]:40s} {per:8.1f} us  x{ev.count / n:.0f}  {ev.key[:90]}", flush=True)
            print(f"[prof]  {impl[:40]:40s} {tot:8.1f} us  total GPU time per call", flush=True)
        # registers / spills / shared memory of the seed's kernels
        for kname in ("_kda_prep", "_kda_scan"):
            fn = getattr(self.seed_mod, kname)
            try:
                for dev_cache in fn.device_caches.values():
                    for ck in dev_cache[0].values():
                        info = dict(kernel=kname, registers=ck.n_regs, spills=ck.n_spills,
                                    shared_bytes=ck.metadata.shared, num_warps=ck.metadata.num_warps)
                        self.row(stage="kernel_info", shape=name, impl="seed", **info)
                        print(f"[kinfo] {info}", flush=True)
            except Exception as e:
                print(f"[kinfo] {kname}: {type(e).__name__}: {e}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu", action="store_true", help="interpreter dry run at the smoke shapes")
    ap.add_argument("--out", default=None)
    ap.add_argument("--shapes", default=None)
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--heldout", action="store_true")
    ap.add_argument("--skip-torch-chunked", action="store_true")
    ap.add_argument("--rep-ms", type=int, default=150)
    ap.add_argument("--cfg", default=None, help="JSON overrides of the seed's BEST")
    ap.add_argument("--extra-cfgs", nargs="*", default=[], help="more sweep points (JSON overrides)")
    ap.add_argument("--profile-cfgs", nargs="*", default=[], help="more configs to profile (JSON overrides)")
    ap.add_argument("--sweep-keys", default=None, help="comma-separated SPACE keys to sweep")
    args = ap.parse_args()
    b = Bench(args)
    b.all_shapes = {**b.toml["shapes"], **b.toml["heldout"], **b.toml["smoke"]}
    base = dict(b.seed_mod.BEST)
    if args.cfg:
        base.update(json.loads(args.cfg))
    if args.cpu:
        shapes = list(b.toml["smoke"])
    else:
        shapes = args.shapes.split(",") if args.shapes else list(b.toml["default_shapes"])
    print(f"env {b.env}  fla={b.fla}", flush=True)
    b.stage_goal(shapes, base)
    if args.profile:
        b.stage_profile(shapes[0], base, args.profile_cfgs)
    cfgs = {"seed": base}
    if args.sweep:
        best = b.stage_sweep(shapes[0], base)
        if best and best[1] != base:
            cfgs["seed_tuned"] = best[1]
            print(f"[sweep] best {best[0]:.1f} us with {best[1]}", flush=True)
    if args.heldout:
        b.stage_heldout(cfgs)
    b.stage_time(shapes, cfgs)
    b.save()
    print("done", flush=True)




def summarize(run_json: str, out_json: str):
    """Fold a tune.py run into the committed results file and print a markdown table."""
    d = json.loads(Path(run_json).read_text())
    rows = d["rows"]
    timed = [r for r in rows if r.get("stage") == "time"]
    keep = ("shape", "impl", "median_us", "spread_pct", "correct", "speedup_vs_fla",
            "speedup_vs_fla_cudagraph", "config", "env", "commit", "date")
    results = [{k: r.get(k) for k in keep} for r in timed]
    for r, t in zip(results, timed):
        chk = next((x for x in rows if x.get("stage") == "check" and x["shape"] == t["shape"]
                    and x["impl"] == ("seed" if t["impl"].startswith("seed") else
                                      "fla" if t["impl"] == "fla_cudagraph" else t["impl"])), None)
        if chk:
            r["correct"] = chk.get("correct") if t["impl"] != "seed_tuned" else r["correct"]
            r["rel_rmse_o"] = chk.get("rel_rmse_o")
            r["rel_rmse_final_state"] = chk.get("rel_rmse_final_state")
    out = {"env": d["env"], "results": results,
           "checks": [r for r in rows if r.get("stage") in ("check", "heldout", "causality")],
           "profile": [r for r in rows if r.get("stage") in ("profile", "kernel_info")],
           "sweep": [r for r in rows if r.get("stage") == "sweep"]}
    Path(out_json).write_text(json.dumps(out, indent=1))
    print("| shape | impl | median µs | spread % | correct | vs FLA called | vs FLA graph |")
    print("| --- | --- | ---: | ---: | --- | ---: | ---: |")
    for r in results:
        f = lambda x: f"{x:.2f}x" if x else "-"
        print(f"| {r['shape']} | {r['impl']} | {r['median_us']:.1f} | {r['spread_pct']:.1f} | {r['correct']} "
              f"| {f(r['speedup_vs_fla'])} | {f(r['speedup_vs_fla_cudagraph'])} |")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--summarize":
        summarize(sys.argv[2], sys.argv[3])
    else:
        main()
