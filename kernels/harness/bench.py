#!/usr/bin/env python3
"""Benchmark figures for a task: every seed candidate and every baseline on every goal shape.

    python3 kernels/harness/bench.py --task kernels/mla [--candidate FILE ...] [--config JSON ...]
        [--shapes a,b] [--baselines a,b] [--seeds 11,12,13] [--timing JSON]
        --out results.json --table results.md

Candidates run with --config (one for all, or one per --candidate in order), else the
candidate's BEST dict if it declares one, else its DEFAULT. Each candidate goes through the full
correctness battery (goal shapes + held-out shapes, several seeds), then every (shape, impl) is
timed in one ABAB-interleaved loop (harness.timing), after a device-to-device copy bandwidth
measurement in the same process. A task may define `extra_rows(shape, inputs) -> [dict(impl,
median_us, spread_pct, note)]` in task.py for figures the harness cannot take itself (e.g. a
library replayed from a CUDA graph). Without a GPU (or with TRITON_INTERPRET=1) the smoke
shapes are used and the figures are marked interpreted.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != str(HERE)]
sys.path.insert(0, str(HERE.parent))

import torch  # noqa: E402
import triton  # noqa: E402

from harness import device as dev  # noqa: E402
from harness import profiling as prof  # noqa: E402
from harness import timing  # noqa: E402
from harness.candidate import ImportFailed, Rejected, load_candidate  # noqa: E402
from harness.correctness import CheckFailure, run_battery  # noqa: E402
from harness.inprocess import low_dtype, sync_fn, time_impls  # noqa: E402
from harness.taskload import load_task  # noqa: E402

BENCH_TIMING = {"warmup_ms": 50, "min_reps": 30, "max_reps": 300, "target_noise_pct": 0.5}


def environment() -> dict:
    commit = None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
        if commit and (len(commit) != 40 or any(ch not in "0123456789abcdef" for ch in commit)):
            commit = None
    except Exception:
        pass
    ident = dev.identity() or {}
    return {"gpu": ident.get("name") or "cpu (interpreted)", "gpu_uuid": ident.get("uuid"),
            "driver": dev.driver_version(), "torch": torch.__version__, "triton": triton.__version__,
            "commit": commit or os.environ.get("KERNELD_COMMIT"),
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}


def _fmt(x, nd=1):
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "**NO**"
    if isinstance(x, float):
        if not math.isfinite(x):
            return "–"
        return f"{x:.{nd}f}" if abs(x) >= 10 ** (-nd) or x == 0 else f"{x:.2g}"
    return str(x)


def markdown(rows: list[dict], env: dict, baselines: list[str], copy_gbps) -> str:
    cols = ["shape", "impl", "median µs", "spread %", "correct", "GB/s", "TFLOP/s", "% roofline", "% copy BW"]
    cols += [f"× vs {b}" for b in baselines]
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        vals = [r["shape"], r["impl"] + (f" ({r['note']})" if r.get("note") else ""), _fmt(r.get("median_us"), 2),
                _fmt(r.get("spread_pct"), 1), _fmt(r.get("correct")), _fmt(r.get("gbps"), 0),
                _fmt(r.get("tflops"), 2), _fmt(r.get("pct_roofline"), 1), _fmt(r.get("pct_copy_bw"), 1)]
        vals += [_fmt(r.get(f"speedup_vs_{b}"), 2) for b in baselines]
        out.append("| " + " | ".join(vals) + " |")
    out.append("")
    how = ("perf_counter under the Triton interpreter: NOT meaningful" if rows and rows[0].get("interpreted")
           else "medians of CUDA-event times with a 256 MB L2 flush per call, implementations interleaved")
    out.append(f"{env['gpu']}, driver {env['driver']}, torch {env['torch']}, triton {env['triton']}, "
               f"commit {env['commit']}, {env['date']}; device-to-device copy {_fmt(copy_gbps, 0)} GB/s. "
               f"Timing: {how}; spread = IQR/median.")
    fails = [r for r in rows if r.get("error")]
    for r in fails:
        out.append(f"- {r['impl']} @ {r['shape']}: {r['error'][:300]}")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", required=True)
    ap.add_argument("--candidate", action="append", default=[])
    ap.add_argument("--config", action="append", default=[], help="JSON config (one for all, or one per candidate)")
    ap.add_argument("--shapes", default=None, help="comma-separated goal shapes (default: all [shapes])")
    ap.add_argument("--baselines", default=None, help="comma-separated baselines (default: all)")
    ap.add_argument("--seeds", default="11,12,13")
    ap.add_argument("--timing", default=None, help="JSON overriding " + json.dumps(BENCH_TIMING))
    ap.add_argument("--no-check", action="store_true", help="skip the correctness battery")
    ap.add_argument("--out", default=None)
    ap.add_argument("--table", default=None)
    a = ap.parse_args(argv)

    task = load_task(a.task)
    cpu = dev.cpu_mode()
    device, dtype, sync = dev.device_str(), low_dtype(cpu), sync_fn(cpu)
    if cpu:
        shape_list = list(task.smoke.items())
        checked = shape_list
    else:
        names = a.shapes.split(",") if a.shapes else list(task.shapes)
        shape_list = [(n, task.shapes[n]) for n in names]
        checked = shape_list + list(task.heldout.items())
    base_names = a.baselines.split(",") if a.baselines else list(task.baselines)
    baselines = [(b, task.baseline_fn(b)) for b in base_names]
    seeds = [int(s) for s in a.seeds.split(",") if s]
    tcfg = dict(BENCH_TIMING)
    if a.timing:
        tcfg.update(json.loads(a.timing))
    cand_paths = [Path(p) for p in a.candidate] or list(task.seeds)
    configs = [json.loads(c) for c in a.config]
    if configs and len(configs) not in (1, len(cand_paths)):
        ap.error("--config: give one for all candidates or one per --candidate")

    env = environment()
    t0 = time.time()
    copy_gbps = timing.copy_bandwidth_gbps() if not cpu else None
    print(f"[bench] {task.name}: {len(cand_paths)} candidate(s), baselines {base_names}, shapes "
          f"{[n for n, _ in shape_list]}, copy bandwidth {_fmt(copy_gbps, 0)} GB/s", file=sys.stderr)

    cands, status = [], {}
    for i, p in enumerate(cand_paths):
        label = p.stem
        try:
            c = load_candidate(p, task.banned_calls)
            cfg = configs[i if len(configs) > 1 else 0] if configs else getattr(c.module, "BEST", None) or c.default
            cfg = c.resolve_config(cfg)
            fn = c.entry(task.entry)
        except Rejected as e:
            status[label] = {"correct": False, "error": e.message}
            continue
        except (ImportFailed, ValueError) as e:
            status[label] = {"correct": False, "error": str(e)}
            continue
        st = {"correct": True, "error": None, "config": cfg, "module": c.module}
        if not a.no_check:
            try:
                rows = run_battery(task, fn, cfg, checked, seeds, device, dtype, sync)
                st["worst_rel_rmse"] = max((r["rel_rmse"] or 0) for r in rows) if rows else None
            except CheckFailure as e:
                st.update(correct=False, error=f"{e.cls}: {e.message}")
        status[label] = st
        print(f"[bench] {label} config {cfg}: correct={st['correct']}" + (f" ({st['error'][:200]})" if st["error"] else ""),
              file=sys.stderr)
        cands.append((label, fn, cfg))

    rows = []
    for sname, shape in shape_list:
        roof = task.roofline(shape)
        from harness.inprocess import probe_baseline
        ok_bl, bad_bl = [], {}
        for b, bfn in baselines:
            err = probe_baseline(task, bfn, shape, cpu)
            if err:
                bad_bl[b] = err
                print(f"[bench] {sname}: baseline {b} failed: {err}", file=sys.stderr)
            else:
                ok_bl.append((b, bfn))
        try:
            res = time_impls(task, cands, ok_bl, sname, shape, tcfg, cpu)
        except Exception as e:  # one shape failing must not lose the others
            print(f"[bench] {sname}: timing failed: {type(e).__name__}: {e}", file=sys.stderr)
            for name in [c[0] for c in cands] + base_names:
                rows.append({"shape": sname, "impl": name, "error": f"timing failed: {type(e).__name__}: {e}"})
            continue
        base_us = {b: (res["sides"][b]["median_us"] if b in res["sides"] else None) for b in base_names}
        impl_rows = []
        for name, fn, cfg in cands:
            s = res["sides"][name]
            st = status[name]
            err = st["error"] or res["late_checks"].get(name)
            impl_rows.append({"impl": name, "kind": "candidate", "config": cfg, "median_us": s["median_us"],
                              "spread_pct": s["spread_pct"], "ci_pct": s["ci_pct"], "n": s["n"],
                              "correct": st["correct"] and name not in res["late_checks"],
                              "outlasted_stream": s["outlasted_stream"], "discarded_samples": s["discarded_samples"],
                              "error": err})
        for name, st in status.items():
            if "module" not in st:  # rejected or failed to import: say so in every shape's table
                impl_rows.append({"impl": name, "kind": "candidate", "median_us": None, "correct": False,
                                  "error": st["error"]})
        for b in base_names:
            if b in bad_bl:
                impl_rows.append({"impl": b, "kind": "baseline", "median_us": None, "error": bad_bl[b]})
                continue
            s = res["sides"][b]
            impl_rows.append({"impl": b, "kind": "baseline", "median_us": s["median_us"], "spread_pct": s["spread_pct"],
                              "ci_pct": s["ci_pct"], "n": s["n"], "correct": True if b == "reference" else None,
                              "discarded_samples": s["discarded_samples"]})
        extra = getattr(task.module, "extra_rows", None) or getattr(task.module, "bench_extra", None)
        if extra is not None:
            try:
                inputs = task.make_inputs(shape, 999, device, dtype)
                for x in extra(dict(shape), inputs) or []:
                    impl_rows.append({"impl": x["impl"], "kind": "extra", "median_us": x.get("median_us"),
                                      "spread_pct": x.get("spread_pct"), "correct": x.get("correct"),
                                      "note": x.get("note")})
                del inputs
            except Exception as e:
                impl_rows.append({"impl": "extra_rows", "kind": "extra", "error": f"{type(e).__name__}: {e}"})
        for r in impl_rows:
            r["shape"] = sname
            r.update(prof.roofline_figures(roof, r.get("median_us"), copy_gbps))
            for b in base_names:
                r[f"speedup_vs_{b}"] = (base_us[b] / r["median_us"]) if r.get("median_us") and base_us[b] else None
            r["sm_clock_mhz"] = res.get("sm_clock_mhz")
            r["throttle_reasons"] = res.get("throttle_reasons")
            r["interpreted"] = cpu
            r["copy_gbps"] = copy_gbps
            r.update(env)
            rows.append({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()})
        print(f"[bench] {sname}: " + ", ".join(f"{r['impl']} {_fmt(r.get('median_us'), 2)} us" for r in impl_rows),
              file=sys.stderr)
    # kernel resources of each candidate (registers / spills / shared), on the first shape
    if not cpu and shape_list:
        for name, fn, cfg in cands:
            sname, shape = shape_list[0]
            try:
                from harness.correctness import alloc_poisoned
                inputs = task.make_inputs(shape, 4242, device, dtype)
                out = alloc_poisoned(task.output_spec(shape, inputs), device)
                ks = prof.kernel_stats(status[name]["module"], lambda: (fn(inputs, out, cfg), sync()))
            except Exception as e:
                ks = [{"name": f"unavailable: {e}"}]
            for r in rows:
                if r["impl"] == name:
                    r["kernels"] = ks
    text = markdown(rows, env, base_names, copy_gbps)
    if a.out:
        Path(a.out).write_text(json.dumps(rows, indent=1, default=str) + "\n")
    if a.table:
        Path(a.table).write_text(text)
    print(text)
    print(f"[bench] done in {time.time() - t0:.1f} s", file=sys.stderr)
    return 0 if all(s.get("correct") for s in status.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
