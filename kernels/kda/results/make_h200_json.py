"""Fold the raw tune.py outputs of GPU runs 2 and 3 into h200.json (and print the README table)."""
import json
from pathlib import Path
r2 = json.loads(Path(__file__).with_name('h200_run2_raw.json').read_text())
r3 = json.loads(Path(__file__).with_name('h200_run3_raw.json').read_text())
BEST = {"PREP": "fused", "C": 64, "BC": 16, "BK": 32, "PREP_WARPS": 4, "BV": 32, "SCAN_WARPS": 4,
        "SCAN_STAGES": 3, "INTER": "lowp", "SCAN_DOT": "lowp", "PREP_DOT": "tf32"}
def clean_env(e):
    e = dict(e)
    if e.get("driver"): e["driver"] = e["driver"].split("\n")[0]
    return e
def full(cfg):
    c = {"PREP": "fused"}; c.update(cfg or {}); return c
def label(cfg):
    cfg = full(cfg)
    if cfg == BEST: return "seed"
    return "seed[" + ",".join(f"{k}={v}" for k, v in cfg.items() if BEST.get(k) != v) + "]"
out_rows = []
for run, d, host in (("run3", r3, "2-GPU H200 host (GPU 0 only)"), ("run2", r2, "1-GPU H200 host")):
    rows = d["rows"]
    checks = {(x["shape"], x["impl"]): x for x in rows if x.get("stage") == "check"}
    for t in (x for x in rows if x.get("stage") == "time"):
        impl = t["impl"]
        key = "seed" if impl.startswith("seed") else ("fla" if impl == "fla_cudagraph" else impl)
        chk = checks.get((t["shape"], key))
        name = label(t["config"]) if impl.startswith("seed") else impl
        row = {"shape": t["shape"], "impl": name, "median_us": round(t["median_us"], 1),
               "spread_pct": round(t["spread_pct"], 2),
               "correct": True if impl == "seed_tuned" else (chk or {}).get("correct"),
               "rel_rmse_o": (chk or {}).get("rel_rmse_o"), "rel_rmse_final_state": (chk or {}).get("rel_rmse_final_state"),
               "max_err_o": (chk or {}).get("max_err_o"),
               "speedup_vs_fla": round(t["speedup_vs_fla"], 3) if t.get("speedup_vs_fla") else None,
               "speedup_vs_fla_cudagraph": round(t["speedup_vs_fla_cudagraph"], 3) if t.get("speedup_vs_fla_cudagraph") else None,
               "config": full(t["config"]) if impl.startswith("seed") else None, "run": run, "host": host,
               "env": clean_env(t["env"]), "commit": t["commit"], "date": t["date"]}
        out_rows.append(row)
res = {
  "task": "kda", "dtype": "bfloat16", "K": 128, "V": 128,
  "timing": "triton.testing.do_bench median (L2 flushed before each rep), two interleaved rounds (seed, variants, fla, torch_chunked), lower median reported; spread_pct = max(q80-q20 over q50, round-to-round difference)",
  "note": "seed = seeds/chunked.py at BEST (PREP=fused). run2 and run3 ran the same kernel code for the fused preparation and the scan. "
          "FLA as called includes its host overhead, which differed between the two hosts (1310 vs 644 us at b1_t8192_h16); "
          "FLA from a CUDA graph (GPU time alone, task.extra_rows) matched on both (601 us). correct for seed rows = goal-shape check of the "
          "run's default config (same numerics) plus held-out shapes and causality of the timed config (see checks).",
  "env": clean_env(r3["env"]),
  "results": out_rows,
  "checks": [x for x in r3["rows"] if x.get("stage") in ("check", "heldout", "causality")],
  "profile_us_per_call": [{k: x.get(k) for k in ("shape", "impl", "kernel", "us_per_call")} | {"run": run}
                          for run, d in (("run3", r3), ("run2", r2)) for x in d["rows"] if x.get("stage") == "profile"],
  "kernel_info": [x for x in r2["rows"] + r3["rows"] if x.get("stage") == "kernel_info"],
  "sweep": [{k: x.get(k) for k in ("shape", "label", "config", "median_us", "spread_pct", "correct", "rel_rmse_o", "error")} | {"run": run}
            for run, d in (("run3", r3), ("run2", r2)) for x in d["rows"] if x.get("stage") == "sweep"],
}
# v3 (seeds/chunked_v3.py): run 5's bench.py figures (environment in every row) and run 4's
# tune_v3.py sweep (whole forward, preparation alone, scan alone) at b1_t8192_h16
r4 = json.loads(Path(__file__).with_name('h200_run4_v3_raw.json').read_text())
r5 = json.loads(Path(__file__).with_name('h200_run5_bench_v3.json').read_text())
r5ab = json.loads(Path(__file__).with_name('h200_run5_ab_v3.json').read_text())
res["v3"] = {
  "note": "bench.py (run 5, commit 593d026's tree; full battery at seed 11, FLA baseline): chunked_v3 BEST timed on every "
          "goal shape but marked correct=False: the battery's causality check at b1_t8192_h16 found a 1.9e-6 prefix "
          "difference (t = 4093), traced to p_ex = cumsum(block totals) - block total (a later gate added and subtracted "
          "again); fixed after the run (masked sum of the earlier blocks only), not re-measured on the GPU: the fix "
          "changes a [4, 4, 32] sum per K slice, not the timing. The battery stopped at that check, so the held-out "
          "shapes were not run on the GPU for v3.",
  "bench_run5": r5,
  "sweep_run4": [x for x in r4["rows"] if x.get("stage") in ("check", "time", "pick")],
  "ab_run5": [x for x in r5ab["rows"] if x.get("stage") in ("check", "time", "pick")],
  "env_run4": clean_env(r4["env"]),
}
# v4 (seeds/chunked_v4.py): two planned calls (the retired scripts/gpu/kda_s5_call1.sh: tune_v4.py's
# rows; kda_s5_call2.sh: bench.py's rows), folded in when their raw outputs are copied here
s5 = {"sweep_s5_call1": "h200_s5_call1_v4.json", "bench_s5_call2": "h200_s5_call2_bench.json"}
s5 = {k: Path(__file__).with_name(f) for k, f in s5.items()}
if any(p.exists() for p in s5.values()):
    res["v4"] = {"note": "tune_v4.py (call 1: every v4 variant, v3 BEST, FLA's CUDA graph) and bench.py "
                         "(call 2: full battery at seed 11, FLA baseline) on the H200",
                 **{k: json.loads(p.read_text()) for k, p in s5.items() if p.exists()}}
# v5 (seeds/chunked_split.py): scripts/gpu/kda_bench.sh's $OUT/h200_v5.json (battery on v5 at every goal
# and held-out shape, harness timing of v5 / v4 / FLA, the environment), copied here as h200_v5.json
v5 = Path(__file__).with_name('h200_v5.json')
if v5.exists():
    res["v5"] = json.loads(v5.read_text())
Path(__file__).with_name('h200.json').write_text(json.dumps(res, indent=1))
print("| shape | impl | median µs | spread % | correct | rel-RMSE o | vs FLA as called | vs FLA graph | run |")
print("| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | --- |")
for r in out_rows:
    if not (r["impl"] in ("seed", "fla", "fla_cudagraph", "torch_chunked")): continue
    f = lambda x: f"{x:.2f}×" if x else "-"
    e = f"{r['rel_rmse_o']:.4f}" if r["rel_rmse_o"] else "-"
    print(f"| {r['shape']} | {r['impl']} | {r['median_us']:.0f} | {r['spread_pct']:.1f} | {r['correct']} | {e} | {f(r['speedup_vs_fla'])} | {f(r['speedup_vs_fla_cudagraph'])} | {r['run']} |")
