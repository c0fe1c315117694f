"""One-call GPU comparison of MLA seed configs: v2 configs against v1 BEST (--set v2, the default), or
v3 (Gluon core) configs against v2 BEST (--set v3).

    PYTHONUNBUFFERED=1 python3 kernels/mla/tune_v2.py --out $OUT [--set v3] [--jobs 12] [--rep-ms 40] [--configs FILE]

Budget: < 4 minutes on one H200 (16 CPU cores), no network, no torch.compile.
1. check (process pool, spawn): every config is compiled and checked in bf16 on every goal AND
   held-out shape (fresh seed, NaN-poisoned outputs, two calls each so the cached counters and
   scratch buffers are exercised, inputs checked unchanged); registers / spills / shared memory of
   each compiled split kernel are recorded. Triton's on-disk cache then serves the timing process.
2. time (this process): do_bench medians (L2 flushed before every call) of the correct configs on
   the goal shapes; spread = (p80 - p20) / median.
   Also per row: host µs per call (launch path, no sync) and, at B=1, the median of CUDA-graph replays
   (GPU time alone, L2 warm): v1's B=1 figures were flat at 35-40 µs across very different configs and
   ~+22 µs per extra launch, which smells of launch cost rather than GPU work.
3. table: per shape, every config's median, GB/s and % of the 4.27 TB/s copy bandwidth, speedup
   over v1 BEST, host and graph µs; geomean over the goal shapes. Writes sweep_v2.json (+ the table).
MLA_TUNE_DEVICE=cpu: dry run of the check phase on the smoke shapes under the interpreter.
"""
import argparse
import json
import math
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tunekit import DEVICE, TASK_DIR, Checker, bench, check_shapes, load_mod, task_and_toml  # noqa: E402

SEEDS = {"v1": TASK_DIR / "seeds" / "splitkv.py", "v2": TASK_DIR / "seeds" / "splitkv_v2.py",
         "v3": TASK_DIR / "seeds" / "splitkv_v3.py"}
KERNELS = {"v1": ("_mla_split_kv",), "v2": ("_mla_split_kv_v2",), "v3": ("_split_gluon", "_split_tl")}
COPY_TBS = 4.27                       # H200 device-to-device copy, measured (FIELD_NOTES section 1)

# (label, seed, config overrides on top of that seed's BEST). Each v2 row changes one thing from v2
# BEST, or tries one of the new tile cores; NOTES.md "v2" has the prediction for each.
REGS = {"PREFETCH": "regs", "num_stages": 1}
CONFIGS = [
    ("v1_best", "v1", {}),
    ("v2_best", "v2", {}),
    ("v2_fp32_partial", "v2", {"PARTIAL": "fp32"}),
    ("v2_merge4k", "v2", {"MERGE_TILE": 4096}),
    ("v2_merge32k", "v2", {"MERGE_TILE": 32768}),
    ("v2_split2", "v2", {"MIN_SPLIT_TILES": 2}),
    ("v2_launch", "v2", {"COMBINE": "launch"}),
    ("v2_launch_w2", "v2", {"COMBINE": "launch", "WAVES": 2}),
    ("v2_n32_s4", "v2", {"BLOCK_N": 32, "num_stages": 4}),
    ("v2_n32_s3", "v2", {"BLOCK_N": 32, "num_stages": 3}),
    ("v2_n128_s1", "v2", {"BLOCK_N": 128, "num_stages": 1}),
    ("v2_regs_n32", "v2", dict(REGS, BLOCK_N=32)),
    ("v2_regs_n16", "v2", dict(REGS, BLOCK_N=16)),
    ("v2_regs_n64", "v2", dict(REGS, BLOCK_N=64)),
    ("v2_regs_n32_split2", "v2", dict(REGS, BLOCK_N=32, MIN_SPLIT_TILES=2)),
    ("v2_h16_regs_w4", "v2", dict(REGS, BLOCK_H=16, BLOCK_N=64, num_warps=4)),
    # mma.sync cores: 128 registers and 112 KB of smem at BLOCK_H=32 / 8 warps, i.e. 2 CTAs per SM
    ("v2_h32_w8", "v2", {"BLOCK_H": 32}),
    ("v2_h32_w8_split2", "v2", {"BLOCK_H": 32, "MIN_SPLIT_TILES": 2}),
    ("v2_h16_w4_split4", "v2", {"BLOCK_H": 16, "num_warps": 4, "MIN_SPLIT_TILES": 4}),
]
# v3: the Gluon core's ring depth / tile size / p path, and the split and merge choices (NOTES.md "v3")
CONFIGS_V3 = [
    ("v2_best", "v2", {}),
    ("g64", "v3", {"LAT_CORE": "same"}),
    ("g64_regs", "v3", {"P_VIA": "regs"}),
    ("g32s4", "v3", {"BLOCK_N": 32, "STAGES": 4}),
    ("g32s4_regs", "v3", {"BLOCK_N": 32, "STAGES": 4, "P_VIA": "regs"}),
    ("g16s8", "v3", {"BLOCK_N": 16, "STAGES": 8}),
    ("g64_launch", "v3", {"COMBINE": "launch"}),
    ("g64_split2", "v3", {"MIN_SPLIT_TILES": 2}),
    ("g64_split4", "v3", {"MIN_SPLIT_TILES": 4}),
    ("g64_w2", "v3", {"WAVES": 2}),
    ("g64_fp32", "v3", {"PARTIAL": "fp32"}),
    ("v3_tl", "v3", {"CORE": "tl"}),
    ("g64_lat_tl", "v3", {"LAT_CORE": "tl"}),
    ("g32s4_split2", "v3", {"BLOCK_N": 32, "STAGES": 4, "MIN_SPLIT_TILES": 2}),
]
# v3b (GPU call 2): around call 1's winner (Gluon core for batches, tl core for B=1): L2 prefetch distance,
# merge in a second launch for batches, JIT vs cached relaunch, B=1 split / core / merge choices
LAT_TL = {"LAT_CORE": "tl"}
CONFIGS_V3B = [
    ("v2_best", "v2", {}),
    ("a_mma", "v3", dict(LAT_TL, O_STORE="mma")),        # exactly call 1's winner (g64_lat_tl)
    ("a", "v3", LAT_TL),
    ("a_pf1", "v3", dict(LAT_TL, PF_DIST=1)),
    ("a_pf2", "v3", dict(LAT_TL, PF_DIST=2)),
    ("a_pf3", "v3", dict(LAT_TL, PF_DIST=3)),
    ("a_launch", "v3", dict(LAT_TL, COMBINE="launch", LAT_COMBINE="spin")),
    ("a_launch_pf2", "v3", dict(LAT_TL, COMBINE="launch", LAT_COMBINE="spin", PF_DIST=2)),
    ("a_pf2_regs", "v3", dict(LAT_TL, PF_DIST=2, P_VIA="regs")),
    ("a_jit", "v3", dict(LAT_TL, LAUNCH="jit")),
    ("a_lat_h32", "v3", dict(LAT_TL, BLOCK_H=32, LAT_MIN_SPLIT_TILES=2)),
    ("a_lat_split2", "v3", dict(LAT_TL, LAT_MIN_SPLIT_TILES=2)),
    ("g_pf2", "v3", {"LAT_CORE": "gluon", "PF_DIST": 2}),
    ("g_pf2_m32k", "v3", {"LAT_CORE": "gluon", "PF_DIST": 2, "MERGE_TILE": 32768}),
    ("g_pf2_latlaunch", "v3", {"LAT_CORE": "gluon", "PF_DIST": 2, "LAT_COMBINE": "launch"}),
]
# s4 (written in session 4, not yet run): v3b's rows that never ran (PF_DIST, launch merge for b64, cached relaunch)
# and the tl core's B=1 options (TILE_FIRST: the one tile before q; TL_PF_TILES: L2 prefetch before q; SPIN_BARRIER
# "epoch": no departure counter).
# "_launch" rows against their spin twins separate the merge's cost; host us and graph us separate launch cost.
CONFIGS_S4 = [
    ("v3_best", "v3", {}),
    ("pf1", "v3", {"PF_DIST": 1}),
    ("pf2", "v3", {"PF_DIST": 2}),
    ("pf3", "v3", {"PF_DIST": 3}),
    ("launch", "v3", {"COMBINE": "launch", "LAT_COMBINE": "spin"}),
    ("launch_pf2", "v3", {"COMBINE": "launch", "LAT_COMBINE": "spin", "PF_DIST": 2}),
    ("tf", "v3", {"TILE_FIRST": "on"}),
    ("tf_latlaunch", "v3", {"TILE_FIRST": "on", "LAT_COMBINE": "launch"}),
    ("tf_m32k", "v3", {"TILE_FIRST": "on", "MERGE_TILE": 32768}),
    ("tlpf4", "v3", {"TL_PF_TILES": 4}),
    ("tf_tlpf4", "v3", {"TILE_FIRST": "on", "TL_PF_TILES": 4}),
    ("tf_epoch", "v3", {"TILE_FIRST": "on", "SPIN_BARRIER": "epoch"}),
    ("tf_tlpf4_epoch", "v3", {"TILE_FIRST": "on", "TL_PF_TILES": 4, "SPIN_BARRIER": "epoch"}),
    ("tf_tlpf4_pf2", "v3", {"TILE_FIRST": "on", "TL_PF_TILES": 4, "PF_DIST": 2}),
    # every B=1 option at once (with TILE_FIRST's smaller register budget, MERGE_TILE=32768 compiles without spills)
    ("b1_all", "v3", {"TILE_FIRST": "on", "TL_PF_TILES": 4, "SPIN_BARRIER": "epoch", "MERGE_TILE": 32768}),
    ("b1_all_pf2", "v3", {"TILE_FIRST": "on", "TL_PF_TILES": 4, "SPIN_BARRIER": "epoch", "MERGE_TILE": 32768,
                          "PF_DIST": 2}),
    ("tf_tlpf4_pf2_cached", "v3", {"TILE_FIRST": "on", "TL_PF_TILES": 4, "PF_DIST": 2, "LAUNCH": "cached"}),
    ("cached", "v3", {"LAUNCH": "cached"}),
    ("g_lat_pf2_cached", "v3", {"LAT_CORE": "gluon", "LAT_COMBINE": "launch", "PF_DIST": 2, "LAUNCH": "cached"}),
]
# call 1 ran with BEST == DEFAULT of then (LAT_CORE "same", o stored in the wgmma layout): keep the set as it ran
CONFIGS_V3 = [(lab, seed, dict({"LAT_CORE": "same", "O_STORE": "mma"} if seed == "v3" else {}, **over))
              for lab, seed, over in CONFIGS_V3]
CONFIG_SETS = {"v2": (CONFIGS, "v1_best"), "v3": (CONFIGS_V3, "v2_best"), "v3b": (CONFIGS_V3B, "v2_best"),
               "s4": (CONFIGS_S4, "v3_best")}


def full_config(mods, seed, over):
    return dict(mods[seed].BEST, **over)


# ---------------------------------------------------------------- check (pool workers)
_W = {}


def _worker_init():
    _W.update(checker=Checker(), mods={k: load_mod(p, f"mla_{k}") for k, p in SEEDS.items()})


def check_config(label, seed, over):
    checker, mods = _W["checker"], _W["mods"]
    mod = mods[seed]
    cfg = full_config(mods, seed, over)
    kernel = [getattr(mod, k) for k in KERNELS[seed]]
    t0 = time.time()
    rep = {"label": label, "seed": seed, "config": cfg}
    rep.update(checker.check(mod, kernel, cfg, check_shapes(checker.toml, ("shapes", "heldout"))))
    rep["check_s"] = round(time.time() - t0, 1)
    return rep


# ---------------------------------------------------------------- timing
def host_us(fn, n=50):
    """Host time per call (launch path only: no synchronisation inside the loop)."""
    import torch
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


def graph_us(fn):
    """GPU time alone: median of CUDA-graph replays (no host launch cost, L2 not flushed)."""
    from triton.testing import do_bench_cudagraph
    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    ap.add_argument("--jobs", type=int, default=12)
    ap.add_argument("--rep-ms", type=int, default=40)
    ap.add_argument("--check-timeout", type=float, default=150)
    ap.add_argument("--budget-s", type=float, default=215, help="stop timing (keep what was measured) after this")
    ap.add_argument("--configs", help="json file: [[label, 'v1'|'v2'|'v3', {overrides}], ...] instead of the set")
    ap.add_argument("--set", default="v2", choices=sorted(CONFIG_SETS))
    ap.add_argument("--graph-all", action="store_true", help="CUDA-graph figure at every shape, not only B=1")
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    configs, base_label = CONFIG_SETS[args.set]
    if args.configs:
        configs = [tuple(c) for c in json.loads(Path(args.configs).read_text())]

    ctx = mp.get_context("spawn")
    pool = ctx.Pool(min(args.jobs, len(configs)), initializer=_worker_init)
    pend = [(c, pool.apply_async(check_config, c)) for c in configs]
    deadline = time.time() + args.check_timeout
    reports = []
    for c, r in pend:
        try:
            reports.append(r.get(timeout=max(1.0, deadline - time.time())))
        except mp.TimeoutError:
            reports.append({"label": c[0], "seed": c[1], "config": c[2], "ok": False, "error": "check timed out"})
    pool.terminate()
    n_ok = sum(r["ok"] for r in reports)
    print(f"[tune_v2] checked {len(reports)} configs in {time.time() - t_start:.0f}s: {n_ok} correct "
          f"on every {'goal + held-out' if DEVICE == 'cuda' else 'smoke'} shape", flush=True)
    for r in reports:
        ks = r.get("kernels")
        kinfo = (" regs " + ",".join(sorted({str(k["regs"]) for k in ks})) + " spills "
                 + ",".join(sorted({str(k["spills"]) for k in ks})) + " smem_KB "
                 + ",".join(sorted({str(k["shared"] // 1024) for k in ks}))) if isinstance(ks, list) else ""
        bad = {k: v for k, v in r.get("shapes", {}).items() if not v["ok"]}
        print(f"  {'ok  ' if r['ok'] else 'FAIL'} {r['label']:22s} {r.get('check_s', '')}s{kinfo} "
              f"{r.get('error', '')[-300:]} {json.dumps(bad)[:300] if bad else ''}", flush=True)
    if DEVICE != "cuda":
        return

    import torch
    task, toml = task_and_toml()
    mods = {k: load_mod(p, f"mla_{k}") for k, p in SEEDS.items()}
    timed = list(toml["shapes"].items())
    rows = []
    for name, shape in timed:
        inp = task.make_inputs(shape, 5, "cuda", torch.bfloat16)
        spec = task.output_spec(shape, inp)
        nbytes = task.roofline(shape)["bytes"]
        for r in reports:
            if not r["ok"]:
                continue
            if time.time() - t_start > args.budget_s:
                print(f"  time budget spent: {r['label']} {name} not timed", flush=True)
                continue
            mod, cfg = mods[r["seed"]], r["config"]
            out = {k: torch.full(s, float("nan"), dtype=d, device="cuda") for k, (s, d) in spec.items()}
            fn = (lambda m, i, o, c: (lambda: m.mla_decode(i, o, c)))(mod, inp, out, cfg)
            try:
                med, spread, n = bench(fn, args.rep_ms, warmup=15)
                host = host_us(fn)
            except Exception as e:  # noqa: BLE001
                print(f"  bench failed {r['label']} {name}: {str(e)[:200]}", flush=True)
                continue
            graph = float("nan")
            if shape["B"] == 1 or args.graph_all:     # latency-bound shapes: is the figure GPU time or launch cost?
                try:
                    graph = graph_us(fn)
                except Exception as e:  # noqa: BLE001
                    print(f"  graph timing failed {r['label']} {name}: {str(e)[:200]}", flush=True)
            sh = r["shapes"][name]
            rows.append(dict(shape=name, label=r["label"], median_us=med, spread_pct=spread, n=n,
                             gbps=nbytes / med / 1e3, mode=sh["mode"], ns=sh["ns"], host_us=host, graph_us=graph))
            print(f"    {name} {r['label']} {med:.2f} us (graph {graph:.2f})", flush=True)
        del inp
        torch.cuda.empty_cache()
        print(f"[tune_v2] timed {name} ({time.time() - t_start:.0f}s)", flush=True)

    env = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__,
               triton=__import__("triton").__version__, date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    lines = []
    base = {r["shape"]: r["median_us"] for r in rows if r["label"] == base_label}
    for name, _ in timed:
        lines.append(f"\n{name}  ({base_label} {base.get(name, float('nan')):.2f} us)")
        lines.append(f"  {'config':22s} {'median us':>10s} {'spread%':>8s} {'GB/s':>7s} {'%copy':>6s} {'x base':>6s} "
                     f"{'host us':>8s} {'graph us':>8s}  mode ns")
        for r in sorted([r for r in rows if r["shape"] == name], key=lambda r: r["median_us"]):
            sp = base.get(name, float("nan")) / r["median_us"]
            lines.append(f"  {r['label']:22s} {r['median_us']:10.2f} {r['spread_pct']:8.1f} {r['gbps']:7.0f} "
                         f"{100 * r['gbps'] / (COPY_TBS * 1e3):6.1f} {sp:6.2f} {r['host_us']:8.1f} {r['graph_us']:8.2f}"
                         f"  {r['mode']:4d} {r['ns']}")
    lines.append("\ngeomean over the goal shapes (us), best first:")
    geo = []
    for lab in {r["label"] for r in rows}:
        ts = [r["median_us"] for r in rows if r["label"] == lab]
        if len(ts) == len(timed):
            geo.append((math.exp(sum(map(math.log, ts)) / len(ts)), lab, ts))
    for g, lab, ts in sorted(geo):
        lines.append(f"  {g:8.2f}  {lab:22s} " + " ".join(f"{t:8.2f}" for t in ts))
    table = "\n".join(lines)
    print(table)
    (out_dir / f"sweep_{args.set}.json").write_text(json.dumps(dict(env=env, reports=reports, rows=rows), indent=1))
    (out_dir / f"sweep_{args.set}.txt").write_text(table + "\n")
    print(f"[tune_v2] total {time.time() - t_start:.0f}s")


if __name__ == "__main__":
    main()
