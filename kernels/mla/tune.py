"""GPU sweep for the MLA seed: correctness (bf16, every shape incl. held-out) and timing.

    python3 kernels/mla/tune.py --sweep r1 --out $OUT [--jobs 10] [--baselines] [--inductor-cache DIR]

1. check: a pool of processes compiles and checks every config (Triton's on-disk cache then
   serves the timing process), each shape with a fresh seed against the fp32 oracle, outputs
   poisoned with NaN, inputs checked unchanged.
2. time: one process, configs that passed, do_bench medians (L2 flushed before every call),
   spread = (p80 - p20) / median over all samples.
3. baselines (optional): reference, eager bf16, torch.compile max-autotune (cache warmed by a
   side process started at the beginning, during step 1), device copy bandwidth.
Writes sweep.json and prints a table. Until kernels/harness/bench.py exists this is the bench.
"""
import argparse
import itertools
import json
import math
import multiprocessing as mp
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tunekit import DEVICE, TASK_DIR, Checker, bench, check_shapes, load_mod, task_and_toml  # noqa: E402

SEED = TASK_DIR / "seeds" / "splitkv.py"


# ---------------------------------------------------------------- sweeps
def sweep(name):
    cores = {
        # (BLOCK_H, BLOCK_N, num_warps, num_stages)
        "r1": [(64, 64, 8, 2), (64, 64, 8, 1), (64, 32, 8, 2), (64, 32, 8, 3), (64, 32, 4, 2), (64, 64, 4, 2),
               (32, 64, 4, 2), (32, 64, 8, 2), (32, 32, 4, 3), (16, 64, 4, 2), (64, 128, 8, 1), (16, 32, 4, 3)],
    }
    strategies = {
        # (COMBINE, WAVES, MIN_SPLIT_TILES)
        "r1": [("spin", 1, 1), ("spin", 1, 2), ("spin", 1, 4), ("launch", 2, 1), ("launch", 4, 2), ("last", 1, 4)],
    }
    out = []
    if name == "r2":
        full = [("spin", 1, 1, "fp32"), ("spin", 1, 2, "fp32"), ("spin", 1, 1, "input"), ("launch", 1, 1, "fp32"),
                ("launch", 2, 2, "fp32"), ("launch", 4, 4, "fp32"), ("launch", 1, 1000, "fp32"),
                ("last", 1, 4, "fp32")]
        short = [full[i] for i in (0, 1, 3, 4, 5)]
        plan = [((64, 32, 8, 2), full), ((64, 64, 8, 2), full), ((64, 32, 8, 3), short), ((32, 64, 8, 2), short),
                ((16, 64, 4, 2), short), ((16, 32, 4, 3), short)]
        for (bh, bn, nw, st), strats in plan:
            for cb, wv, mst, part in strats:
                out.append(dict(BLOCK_H=bh, BLOCK_N=bn, num_warps=nw, num_stages=st, COMBINE=cb, WAVES=wv,
                                MIN_SPLIT_TILES=mst, PARTIAL=part, MERGE_TILE=4096))
        return out
    for (bh, bn, nw, st), (cb, wv, mst) in itertools.product(cores[name], strategies[name]):
        out.append(dict(BLOCK_H=bh, BLOCK_N=bn, num_warps=nw, num_stages=st, COMBINE=cb, WAVES=wv,
                        MIN_SPLIT_TILES=mst))
    return out


def cfg_key(c):
    c = {"PARTIAL": "fp32", "MERGE_TILE": 4096, **c}
    return ("h{BLOCK_H}_n{BLOCK_N}_w{num_warps}_s{num_stages}_{COMBINE}_W{WAVES}_m{MIN_SPLIT_TILES}"
            "_{PARTIAL}_t{MERGE_TILE}").format(**c)


# ---------------------------------------------------------------- check (pool workers)
_W = {}


def _worker_init():
    _W.update(checker=Checker(), cand=load_mod(SEED, "mla_seed"))


def check_config(cfg, which=("shapes", "heldout")):
    checker, cand = _W["checker"], _W["cand"]
    report = {"config": cfg, "key": cfg_key(cfg)}
    report.update(checker.check(cand, cand._mla_split_kv, cfg, check_shapes(checker.toml, which)))
    return report


def geomeans(rows, n_shapes):
    keys = {r["key"] for r in rows}
    geo = []
    for k in keys:
        ts = [r["median_us"] for r in rows if r["key"] == k]
        if len(ts) == n_shapes:
            geo.append((math.exp(sum(math.log(t) for t in ts) / len(ts)), k, ts))
    return sorted(geo)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sweep", default="r1")
    ap.add_argument("--configs", help="json file: a list of configs (instead of --sweep)")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    ap.add_argument("--jobs", type=int, default=10)
    ap.add_argument("--baselines", action="store_true")
    ap.add_argument("--compile-side", action="store_true", help="warm torch.compile in a side process")
    ap.add_argument("--rep-ms", type=int, default=60)
    ap.add_argument("--check-timeout", type=float, default=120)
    ap.add_argument("--heldout-top", type=int, default=0, help="check held-out shapes for the N best configs only")
    ap.add_argument("--compile-wait", type=float, default=150, help="seconds from start to wait for the side compile")
    args = ap.parse_args()
    out_dir = Path(args.out)
    t_start = time.time()

    side = None
    if args.compile_side:
        side = subprocess.Popen([sys.executable, str(TASK_DIR / "tune.py"), "--_warm-compile"],
                                stdout=open(out_dir / "compile_side.log", "w"), stderr=subprocess.STDOUT)

    configs = json.loads(Path(args.configs).read_text()) if args.configs else sweep(args.sweep)
    print(f"[tune] {len(configs)} configs, {args.jobs} check workers", flush=True)
    ctx = mp.get_context("spawn")
    pool = ctx.Pool(args.jobs, initializer=_worker_init)
    first = ("shapes",) if args.heldout_top else ("shapes", "heldout")

    def run_checks(cfgs, which, timeout):
        pend = [(c, pool.apply_async(check_config, (c, which))) for c in cfgs]
        deadline = time.time() + timeout
        res = []
        for c, r in pend:
            try:
                res.append(r.get(timeout=max(1.0, deadline - time.time())))
            except mp.TimeoutError:
                res.append({"config": c, "key": cfg_key(c), "ok": False, "error": "check timed out (hang?)"})
        return res

    reports = run_checks(configs, first, args.check_timeout)
    n_ok = sum(r["ok"] for r in reports)
    print(f"[tune] check {first} done in {time.time() - t_start:.0f}s: {n_ok}/{len(reports)} correct", flush=True)
    for r in reports:
        if not r["ok"]:
            bad = {k: v for k, v in r.get("shapes", {}).items() if not v["ok"]}
            print("  FAIL", r["key"], r.get("error", "")[-300:], json.dumps(bad)[:300], flush=True)

    if DEVICE != "cuda":
        print(json.dumps(reports[:2], indent=1)[:3000])
        return
    import torch
    task, toml = task_and_toml()
    cand = load_mod(SEED, "mla_seed")
    timed = list(toml["shapes"].items())
    rows = []
    data = {}
    for name, shape in timed:
        inp = task.make_inputs(shape, 5, "cuda", torch.bfloat16)
        spec = task.output_spec(shape, inp)
        data[name] = (inp, spec)
        rf = task.roofline(shape)
        for r in reports:
            if not r["ok"]:
                continue
            cfg = r["config"]
            out = {k: torch.full(s, float("nan"), dtype=d, device="cuda") for k, (s, d) in spec.items()}
            try:
                med, spread, n = bench(lambda: cand.mla_decode(inp, out, cfg), args.rep_ms)
            except Exception as e:  # noqa: BLE001
                print("  bench failed", r["key"], name, str(e)[:200], flush=True)
                continue
            rows.append(dict(shape=name, impl="splitkv", key=r["key"], config=cfg, median_us=med,
                             spread_pct=spread, n=n, gbps=rf["bytes"] / med / 1e3,
                             mode=r["shapes"][name]["mode"], ns=r["shapes"][name]["ns"]))
        print(f"[tune] timed {name} ({time.time() - t_start:.0f}s)", flush=True)

    if args.heldout_top:
        # held-out shapes for the per-shape winners and the best geomean configs
        chosen = {}
        for name, _ in timed:
            for r in sorted([r for r in rows if r["shape"] == name], key=lambda r: r["median_us"])[:2]:
                chosen[r["key"]] = r["config"]
        for _, k, _ in geomeans(rows, len(timed))[:args.heldout_top]:
            chosen[k] = next(r["config"] for r in rows if r["key"] == k)
        hrep = run_checks(list(chosen.values()), ("heldout",), 60)
        for h in hrep:
            bad = {k: v for k, v in h.get("shapes", {}).items() if not v["ok"]}
            print(f"[tune] heldout {h['key']}: {'ok' if h['ok'] else 'FAIL'} {h.get('error', '')[-200:]} "
                  f"{json.dumps(bad)[:300]}", flush=True)
            for r in reports:
                if r["key"] == h["key"]:
                    r["heldout"] = h
    pool.terminate()

    env = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__,
               triton=__import__("triton").__version__,
               driver=subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                     capture_output=True, text=True).stdout.strip(),
               date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    base_rows = []

    def dump():
        (out_dir / "sweep.json").write_text(json.dumps(dict(env=env, reports=reports, rows=rows,
                                                            baselines=base_rows), indent=1))
    dump()
    if args.baselines:
        # copy bandwidth: 2 GiB device-to-device, bytes read + written
        x = torch.empty(1 << 30, dtype=torch.int16, device="cuda")
        y = torch.empty_like(x)
        med, spread, _ = bench(lambda: y.copy_(x), 100)
        copy_tbs = 2 * x.numel() * 2 / med / 1e6
        del x, y
        base_rows.append(dict(shape="copy_2GiB", impl="copy", median_us=med, spread_pct=spread, tbps=copy_tbs))
        print(f"[tune] copy bandwidth {copy_tbs:.2f} TB/s", flush=True)
        compile_ready = True
        if side is not None:
            try:
                side.wait(timeout=max(1, args.compile_wait - (time.time() - t_start)))
            except subprocess.TimeoutExpired:
                side.kill()
                compile_ready = False
                print("[tune] torch.compile side process did not finish: torch_compile not timed", flush=True)
        for name, shape in timed:
            inp, spec = data[name]
            rf = task.roofline(shape)
            for impl, fname in toml["baselines"].items():
                if impl == "torch_compile" and not compile_ready:
                    continue
                fn = getattr(task, fname)
                try:
                    t0 = time.time()
                    fn(**inp)  # first call: compile (torch.compile), timed apart
                    torch.cuda.synchronize()
                    t_first = time.time() - t0
                    med, spread, n = bench(lambda: fn(**inp), args.rep_ms)
                    base_rows.append(dict(shape=name, impl=impl, median_us=med, spread_pct=spread, n=n,
                                          gbps=rf["bytes"] / med / 1e3, first_call_s=t_first))
                except Exception as e:  # noqa: BLE001
                    base_rows.append(dict(shape=name, impl=impl, error=f"{type(e).__name__}: {str(e)[:200]}"))
            print(f"[tune] baselines {name} ({time.time() - t_start:.0f}s)", flush=True)

            dump()
    dump()

    # ------------------------------------------------------------ table
    print("\n== best configs per shape (median us, spread %, GB/s) ==")
    for name, _ in timed:
        rs = sorted([r for r in rows if r["shape"] == name], key=lambda r: r["median_us"])
        for r in rs[:6]:
            print(f"{name:12s} {r['median_us']:8.2f} {r['spread_pct']:5.1f}% {r['gbps']:7.0f}  mode{r['mode']} "
                  f"ns{r['ns']:<3d} {r['key']}")
    geo = geomeans(rows, len(timed))
    print("\n== best geomean over the timed shapes ==")
    for g, k, ts in geo[:8]:
        print(f"{g:8.2f}  {' '.join(f'{t:8.2f}' for t in ts)}  {k}")
    for b in base_rows:
        print("baseline", json.dumps(b))
    print(f"[tune] total {time.time() - t_start:.0f}s")


def warm_compile(only=None):
    """Side process: compile torch.compile's max-autotune version for the timed shapes (or one)."""
    import torch
    task, toml = task_and_toml()
    for name, shape in toml["shapes"].items():
        if only and name != only:
            continue
        t0 = time.time()
        inp = task.make_inputs(shape, 5, "cuda", torch.bfloat16)
        task.baseline_torch_compile(**inp)
        torch.cuda.synchronize()
        print(f"compiled {name} in {time.time() - t0:.1f}s", flush=True)


if __name__ == "__main__":
    if "--_warm-compile" in sys.argv:
        warm_compile(sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None)
    else:
        main()
