#!/usr/bin/env python3
"""MLA decode on one H200 (issue 27): v4's correctness battery, then bench.py GPU time of v4, v3 and torch.compile.

    python3 scripts/gpu/mla_bench.py run --out DIR [--budget-s 225]      (scripts/gpu/mla_bench.sh calls this)
    python3 scripts/gpu/mla_bench.py battery --seed v4 --out FILE         (one seed's battery, one row per shape)

`run`, with one wall-clock budget:
  1. in parallel: the harness battery (kernels/harness/correctness.run_battery: bf16, seeds 11 + 12, both call
     orders, poisoned outputs, the ATen audit) of v4 and of v3 on every goal and held-out shape, each in its own
     process (a CUDA fault or a hang there cannot take this process down; each also fills Triton's disk cache, so
     bench.py compiles nothing); meanwhile this process compiles / autotunes the torch.compile baseline on the goal
     shapes (bench.py runs in this process, so it reuses the compiled baseline).
  2. bench.py (harness timing, mode "gpu": each side's call replayed from a CUDA graph with an L2 flush, sides
     interleaved) once per goal shape, so a shape that fails loses nothing else; v4 is timed only if its battery
     passed on every goal shape (a candidate that raises would lose the whole shape's row, baseline included).
  3. DIR/h200.json (bench.py's rows, each with the environment; `correct` from this run's battery), DIR/summary.json
     (environment, battery, phase times), and a short summary printed last.
Under the interpreter (TRITON_INTERPRET=1, or no GPU) the same code runs at the task's smoke shapes: v4 and v3 take
their `tl` cores there, the baseline is torch_eager (no inductor compile on a CPU), one seed (mla_bench.sh dry).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TASK_DIR = ROOT / "kernels" / "mla"
SEEDS = {"v4": TASK_DIR / "seeds" / "splitkv_v4.py", "v3": TASK_DIR / "seeds" / "splitkv_v3.py"}
LABEL = {k: p.stem for k, p in SEEDS.items()}          # bench.py names a candidate by its file's stem
# issue 27's "done when" (GPU time, µs) and the predictions written in kernels/mla/NOTES.md before the run
TARGET_US = {"b1_s8192": 12.0, "b64_s8192": 175.0, "b1_s32768": 20.0, "b128_s4096": 175.0}
PREDICTED_V4_US = {"b1_s8192": 16.0, "b64_s8192": 178.0, "b1_s32768": 24.0, "b128_s4096": 175.0}
# FIELD_NOTES §1c (GPU time from a CUDA graph of 20 calls, 2026-12-03): v3 BEST and torch.compile, for a cross-check
# (torch.compile autotunes here while the batteries run: a figure far above these means a worse template was picked)
EARLIER_US = {"splitkv_v3": {"b1_s8192": 18.6, "b64_s8192": 207.0, "b1_s32768": 32.3, "b128_s4096": 205.0},
              "torch_compile": {"b1_s8192": 26.8, "b64_s8192": 403.0, "b128_s4096": 409.0}}
# v4 variants timed after bench.py if budget is left (GPU time, interleaved, no baseline): what each change is worth.
# The v4 battery process compiles them once it is done (Triton's disk cache), so the main process only times them.
SWEEP = {"b64_s8192": [{"PF_DIST": 0}, {"PF_DIST": 3}, {"LAZY_L": "off"}, {"MERGE": "launch"}],
         "b1_s8192": [{"MERGE": "launch"}, {"CORE": "tl"}, {"PF_DIST": 0}],
         "b1_s32768": [{"PF_DIST": 0}, {"MERGE": "launch"}]}
SWEEP_SHAPE_S = 20        # a sweep shape is timed only with this much budget left
BATTERY_S = 130          # each battery process: at most this long after the start, then killed (goal shapes run first)
BENCH_SHAPE_S = 12        # a goal shape's bench.py call (~8 s, everything compiled) starts only with this much budget left


def _harness():
    sys.path.insert(0, str(ROOT / "kernels"))
    from harness import device as dev
    from harness.taskload import load_task
    return dev, load_task(TASK_DIR)


def _shapes(task, cpu: bool, with_heldout: bool):
    if cpu:
        return list(task.smoke.items())
    return list(task.shapes.items()) + (list(task.heldout.items()) if with_heldout else [])


# ------------------------------------------------------------------------------------------------
def battery(seed: str, path: Path, out: Path, seeds: list[int]) -> int:
    """One seed's harness battery, shape by shape (run_battery stops at a shape's first failure; the other shapes
    still run). Writes `out` after every shape. A fatal CUDA error ends the process (its context is lost)."""
    import torch
    dev, task = _harness()
    from harness.candidate import load_candidate
    from harness.correctness import CheckFailure, run_battery
    from harness.inprocess import low_dtype, sync_fn
    cpu = dev.cpu_mode()
    res = {"seed": seed, "path": str(path), "seeds": seeds, "shapes": {}, "error": None}

    def dump():
        out.write_text(json.dumps(res, indent=1, default=str) + "\n")

    try:
        c = load_candidate(path, task.banned_calls)
        cfg = c.resolve_config(getattr(c.module, "BEST", None) or c.default)
        fn = c.entry(task.entry)
        res["config"] = cfg
    except Exception as e:  # static rule, import error
        res["error"] = f"{type(e).__name__}: {e}"
        dump()
        return 1
    dump()
    device, dtype, sync = dev.device_str(), low_dtype(cpu), sync_fn(cpu)
    for name, shape in _shapes(task, cpu, with_heldout=True):
        t0 = time.time()
        row = {"goal": name in task.shapes or cpu}
        try:
            rows = run_battery(task, fn, cfg, [(name, shape)], seeds, device, dtype, sync)
            row.update(ok=True, worst_rel_rmse=max((r.get("rel_rmse") or 0.0) for r in rows) if rows else None)
        except CheckFailure as e:
            row.update(ok=False, error=f"{e.cls}: {e.message}"[:600])
        except BaseException as e:  # FatalCudaError, Abandon, a compile error the harness did not classify
            row.update(ok=False, error=f"{type(e).__name__}: {e}"[:600])
            row["seconds"] = round(time.time() - t0, 2)
            res["shapes"][name] = row
            res["error"] = "stopped after a fatal error: " + row["error"][:200]
            dump()
            print(f"[battery {seed}] {name}: FATAL {row['error'][:300]}", flush=True)
            traceback.print_exc()
            return 2
        row["seconds"] = round(time.time() - t0, 2)
        res["shapes"][name] = row
        dump()
        print(f"[battery {seed}] {name}: {'ok' if row['ok'] else 'FAIL ' + row['error'][:300]} ({row['seconds']} s)",
              flush=True)
    if seed == "v4":                   # compile the sweep's variants (one call each) while the GPU work is small
        shapes = dict(_shapes(task, cpu, with_heldout=False))
        for name, cfg in _sweep_cases(task, cpu):
            t0 = time.time()
            try:
                inputs = task.make_inputs(shapes[name], 3, device, dtype)
                outs = {k: torch.empty(sh, dtype=dt, device=device)
                        for k, (sh, dt) in task.output_spec(shapes[name], inputs).items()}
                fn(inputs, outs, c.resolve_config(dict(cfg_best_of(c), **cfg)))
                sync()
                print(f"[battery {seed}] sweep variant {name} {cfg} compiled ({time.time() - t0:.1f} s)", flush=True)
            except Exception as e:
                print(f"[battery {seed}] sweep variant {name} {cfg}: {type(e).__name__}: {e}"[:400], flush=True)
    return 0 if all(r["ok"] for r in res["shapes"].values()) else 1


def cfg_best_of(c) -> dict:
    return dict(getattr(c.module, "BEST", None) or c.default)


def _sweep_cases(task, cpu: bool) -> list:
    """(shape name, config overrides) of the sweep; on a CPU the goal names map onto the smoke shapes."""
    names = [n for n, _ in _shapes(task, cpu, with_heldout=False)]
    out = []
    for i, (name, cfgs) in enumerate(SWEEP.items()):
        out += [(names[i % len(names)] if cpu else name, cfg) for cfg in cfgs]
    return out


def sweep(task, cpu: bool, path: Path, deadline: float) -> dict:
    """v4 BEST against each SWEEP variant on its shape: harness time_impls (bench.py's timing settings, GPU time),
    candidates only; each variant's last timed output checked (late check). {shape: {label: row}}."""
    from harness.candidate import load_candidate
    from harness.inprocess import time_impls
    from harness.timing import copy_bandwidth_gbps  # noqa: F401  (imported by bench.py already)
    bench_timing = _load_bench().BENCH_TIMING
    c = load_candidate(path, task.banned_calls)
    fn, best = c.entry(task.entry), cfg_best_of(c)
    shapes = dict(_shapes(task, cpu, with_heldout=False))
    by_shape: dict = {}
    for name, cfg in _sweep_cases(task, cpu):
        by_shape.setdefault(name, []).append(cfg)
    res = {}
    for name, cfgs in by_shape.items():
        if deadline - time.time() < SWEEP_SHAPE_S:
            res[name] = {"skipped": f"{deadline - time.time():.0f} s of the budget left"}
            continue
        cands = [("best", fn, c.resolve_config(best))]
        cands += [(",".join(f"{k}={v}" for k, v in cfg.items()), fn, c.resolve_config(dict(best, **cfg))) for cfg in cfgs]
        t0 = time.time()
        try:
            r = time_impls(task, cands, [], name, shapes[name], dict(bench_timing), cpu)
            res[name] = {lab: {"median_us": r["sides"][lab]["median_us"], "spread_pct": r["sides"][lab]["spread_pct"],
                               "late_check": r["late_checks"].get(lab)} for lab, _, _ in cands}
        except Exception as e:
            res[name] = {"error": f"{type(e).__name__}: {e}"[:400]}
        res[name]["seconds"] = round(time.time() - t0, 1)
        print(f"[mla_bench] sweep {name}: " + ", ".join(
            f"{k} {v['median_us']:.1f}" for k, v in res[name].items() if isinstance(v, dict) and v.get("median_us"))
            + (f" {res[name].get('error', '')}"), flush=True)
    return res


# ------------------------------------------------------------------------------------------------
def _load_bench():
    spec = importlib.util.spec_from_file_location("mla_bench_harness_bench", ROOT / "kernels" / "harness" / "bench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _spawn(args: list[str], log: Path):
    f = open(log, "w")
    return subprocess.Popen([sys.executable, str(Path(__file__).resolve())] + args, stdout=f, stderr=subprocess.STDOUT,
                            cwd=ROOT, start_new_session=True), f


def _wait(proc, deadline: float) -> str:
    """'exit N', or 'killed (over the budget)' after SIGKILL to its process group."""
    try:
        rc = proc.wait(timeout=max(0.0, deadline - time.time()))
        return f"exit {rc}"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return "killed (over the budget)"


def _read_json(p: Path):
    try:
        return json.loads(p.read_text())
    except Exception:
        return None


def _verdict(bat, goal_names) -> dict:
    """From a battery file: passed everywhere / on the goal shapes; which shapes failed."""
    if not bat:
        return {"all": False, "goal": False, "failed": ["(no battery result)"], "missing": list(goal_names)}
    shapes = bat.get("shapes", {})
    failed = [n for n, r in shapes.items() if not r.get("ok")]
    missing = [n for n in goal_names if n not in shapes]
    goal_ok = not missing and all(shapes[n].get("ok") for n in goal_names)
    return {"all": goal_ok and not failed and not bat.get("error"), "goal": goal_ok, "failed": failed,
            "missing": missing}


def _write_rows(out: Path, rows: list, verdict: dict, bat: dict, seeds: list[int]) -> None:
    """bench.py's rows (each carries the environment) with `correct` from this run's battery (bench.py ran with
    --no-check), as DIR/h200.json."""
    for r in rows:
        seed = next((s for s, lab in LABEL.items() if r.get("impl") == lab), None)
        if seed:
            v = verdict[seed]
            r["correct"] = bool(v["all"]) and r.get("correct") is not False
            r["battery"] = {"all_shapes_ok": v["all"], "failed": v["failed"], "seeds": seeds,
                            "shapes": len((bat[seed] or {}).get("shapes") or {})}
    (out / "h200.json").write_text(json.dumps(rows, indent=1, default=str) + "\n")


def run(out: Path, budget_s: float, seeds: list[int], baseline: str | None, paths: dict) -> int:
    t_start = time.time()
    deadline = t_start + budget_s
    out.mkdir(parents=True, exist_ok=True)
    dev, task = _harness()
    cpu = dev.cpu_mode()
    baseline = baseline or ("torch_eager" if cpu else "torch_compile")
    goal = _shapes(task, cpu, with_heldout=False)
    goal_names = [n for n, _ in goal]
    phases, notes = {}, []
    summary = {"cpu_mode": cpu, "baseline": baseline, "budget_s": budget_s, "phases": phases, "notes": notes}

    # 1. both batteries in their own processes; the baseline's compile here meanwhile
    procs = {}
    for seed in ("v4", "v3"):
        procs[seed] = _spawn(["battery", "--seed", seed, "--path", str(paths[seed]), "--out", str(out / f"battery_{seed}.json"),
                              "--seeds", ",".join(map(str, seeds))], out / f"battery_{seed}.log")
    print(f"[mla_bench] batteries of v4 and v3 started ({len(goal) + (0 if cpu else len(task.heldout))} shapes, "
          f"seeds {seeds}); compiling the {baseline} baseline here", flush=True)
    bench = _load_bench()
    env = bench.environment()
    summary["environment"] = env
    t0 = time.time()
    warm = {}
    import torch
    from harness.inprocess import low_dtype, sync_fn
    bfn, sync = task.baseline_fn(baseline), sync_fn(cpu)
    for name, shape in goal:
        t1 = time.time()
        try:
            inputs = task.make_inputs(shape, 5, dev.device_str(), low_dtype(cpu))
            bfn(**inputs)
            sync()
            warm[name] = round(time.time() - t1, 1)
            del inputs
        except Exception as e:
            warm[name] = f"{type(e).__name__}: {e}"[:300]
            notes.append(f"{baseline} warm-up at {name} failed: {warm[name]}")
    if not cpu:
        torch.cuda.empty_cache()
    phases["baseline_warmup_s"] = round(time.time() - t0, 1)
    phases["baseline_warmup"] = warm
    print(f"[mla_bench] {baseline} ready in {phases['baseline_warmup_s']} s {warm}", flush=True)

    bat, verdict = {}, {}
    for seed, (proc, f) in procs.items():
        how = _wait(proc, min(deadline - 30, t_start + float(os.environ.get("MLA_BENCH_BATTERY_S", BATTERY_S))))
        f.close()
        bat[seed] = _read_json(out / f"battery_{seed}.json")
        verdict[seed] = dict(_verdict(bat[seed], goal_names), process=how)
        if how != "exit 0":
            tail = (out / f"battery_{seed}.log").read_text()[-1500:]
            notes.append(f"battery {seed}: {how}; log tail: {tail}")
    phases["batteries_done_s"] = round(time.time() - t_start, 1)
    summary["battery"] = {s: dict(verdict[s], shapes=(bat[s] or {}).get("shapes"), error=(bat[s] or {}).get("error"))
                          for s in bat}
    print(f"[mla_bench] batteries done at {phases['batteries_done_s']} s: "
          + "; ".join(f"{s}: {'all ok' if v['all'] else 'FAILED ' + ','.join(v['failed'] + v['missing'])} ({v['process']})"
                      for s, v in verdict.items()), flush=True)

    # 2. bench.py per goal shape; a candidate is timed only when its battery passed on every goal shape
    timed = [s for s in ("v4", "v3") if verdict[s]["goal"]]
    for s in ("v4", "v3"):
        if s not in timed:
            notes.append(f"{s} not timed: its battery failed on a goal shape or did not finish")
    rows = []
    if timed:
        for name in goal_names:
            left = deadline - time.time()
            if left < BENCH_SHAPE_S:
                notes.append(f"bench.py at {name} skipped: {left:.0f} s of the budget left")
                continue
            argv = ["--task", str(TASK_DIR), "--baselines", baseline, "--no-check", "--seeds", "11", "--shapes", name,
                    "--out", str(out / f"bench_{name}.json"), "--table", str(out / f"bench_{name}.md")]
            for s in timed:
                argv += ["--candidate", str(paths[s])]
            t1 = time.time()
            try:
                bench.main(argv)
            except BaseException as e:  # noqa: BLE001 - one shape must not lose the others
                notes.append(f"bench.py at {name}: {type(e).__name__}: {e}"[:400])
                traceback.print_exc()
            phases[f"bench_{name}_s"] = round(time.time() - t1, 1)
            # on a CPU bench.py times every smoke shape whatever --shapes says: keep this one's rows
            rows += [r for r in (_read_json(out / f"bench_{name}.json") or []) if r.get("shape") == name]
            _write_rows(out, rows, verdict, bat, seeds)
    # 3. h200.json-shaped output (written after every shape too: a run killed by the backstop keeps what it had)
    _write_rows(out, rows, verdict, bat, seeds)
    # 4. what each v4 change is worth, if there is time (a failure here loses nothing above)
    if "v4" in timed:
        t1 = time.time()
        try:
            summary["sweep_v4"] = sweep(task, cpu, paths["v4"], deadline)
        except BaseException as e:  # noqa: BLE001
            summary["sweep_v4"] = {"error": f"{type(e).__name__}: {e}"[:400]}
            traceback.print_exc()
        phases["sweep_s"] = round(time.time() - t1, 1)
    phases["total_s"] = round(time.time() - t_start, 1)
    summary["rows"] = len(rows)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    print(_summary_text(rows, summary, goal_names, baseline), flush=True)
    return 0 if verdict["v4"]["all"] and rows else 1


def _summary_text(rows, summary, goal_names, baseline) -> str:
    env = summary.get("environment") or {}
    by = {(r.get("shape"), r.get("impl")): r for r in rows}
    imps = [LABEL["v4"], LABEL["v3"], baseline]
    out = ["", "=== MLA summary (bench.py GPU time, µs; % of copy bandwidth for v4) ===",
           f"{env.get('gpu')}, driver {env.get('driver')}, torch {env.get('torch')}, triton {env.get('triton')}, "
           f"commit {env.get('commit')}, {env.get('date')}",
           f"{'shape':<12} {'v4':>9} {'v3':>9} {baseline:>14} {'v4 %copy':>9} {'v4/v3':>6} {'target':>7} "
           f"{'pred v4':>8}  earlier v3 / {baseline}"]
    for n in goal_names:
        vals = [by.get((n, i), {}).get("median_us") for i in imps]
        r4 = by.get((n, imps[0]), {})
        f = lambda x, w=9: (f"{x:>{w}.1f}" if isinstance(x, (int, float)) and math.isfinite(x) else f"{'-':>{w}}")  # noqa
        ratio = vals[0] / vals[1] if vals[0] and vals[1] else None
        out.append(f"{n:<12} {f(vals[0])} {f(vals[1])} {f(vals[2], 14)} {f(r4.get('pct_copy_bw'))} "
                   f"{f(ratio, 6) if ratio is None else f'{ratio:>6.2f}'} {f(TARGET_US.get(n), 7)} "
                   f"{f(PREDICTED_V4_US.get(n), 8)}  {EARLIER_US['splitkv_v3'].get(n, '-')} / "
                   f"{EARLIER_US.get(baseline, {}).get(n, '-')}")
    for s, b in (summary.get("battery") or {}).items():
        ok = [k for k, v in (b.get("shapes") or {}).items() if v.get("ok")]
        bad = {k: v.get("error", "")[:160] for k, v in (b.get("shapes") or {}).items() if not v.get("ok")}
        out.append(f"battery {s}: {len(ok)} shapes ok, failed {bad or 'none'}, missing {b.get('missing') or 'none'} "
                   f"({b.get('process')})")
    for shape, r in (summary.get("sweep_v4") or {}).items():
        if not isinstance(r, dict):
            continue
        parts = [f"{k} {v['median_us']:.1f}" + ("" if not v.get("late_check") else " WRONG")
                 for k, v in r.items() if isinstance(v, dict) and v.get("median_us")]
        out.append(f"v4 sweep {shape}: " + (", ".join(parts) or str(r)[:200]))
    for n in summary.get("notes") or []:
        out.append("note: " + n.replace("\n", " | ")[:600])
    out.append(f"phases: {json.dumps(summary.get('phases'))}")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["run", "battery"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", choices=sorted(SEEDS), default="v4")
    ap.add_argument("--seeds", default=None, help="battery seeds (default 11,12; 11 under the interpreter)")
    ap.add_argument("--path", default=None, help="battery: the seed file (default: the seed's own)")
    ap.add_argument("--v4-path", default=None, help="run: another file for v4 (tests: a broken v4)")
    ap.add_argument("--budget-s", type=float, default=205.0)
    ap.add_argument("--baseline", default=None, help="default torch_compile (torch_eager under the interpreter)")
    a = ap.parse_args(argv)
    cpu = os.environ.get("TRITON_INTERPRET") == "1"
    seeds = [int(x) for x in (a.seeds or ("11" if cpu else "11,12")).split(",") if x]
    if a.what == "battery":
        return battery(a.seed, Path(a.path) if a.path else SEEDS[a.seed], Path(a.out), seeds)
    paths = dict(SEEDS, v4=Path(a.v4_path).resolve() if a.v4_path else SEEDS["v4"])
    return run(Path(a.out), a.budget_s, seeds, a.baseline, paths)


if __name__ == "__main__":
    sys.exit(main())
