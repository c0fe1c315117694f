"""In-process evaluation for TRUSTED code only (bench.py over the shipped seeds, ncu_run.py): the
candidate runs in this process. The daemon's path is the judge (evaluate.py + runner.py)."""
from __future__ import annotations

import math
import time

import torch

from . import device as dev
from . import profiling as prof
from . import timing
from .candidate import ImportFailed, Rejected, load_candidate
from .correctness import (CheckFailure, FatalCudaError, alloc_poisoned, call_candidate, clone_inputs, compare,
                          run_battery, unwritten_count)
from .taskload import TaskError, load_task

DEFAULT_SEEDS = [11, 12, 13]
DEFAULT_TIMING = {"warmup_ms": 25, "min_reps": 20, "max_reps": 200, "target_noise_pct": 1.0}


class RequestError(Exception):
    """The request itself is bad (reply ok:false)."""


def low_dtype(cpu: bool):
    # the interpreter has no bf16 (FIELD_NOTES 8): CPU mode uses fp16
    return torch.float16 if cpu else torch.bfloat16


def sync_fn(cpu: bool):
    return (lambda: None) if cpu else timing._sync


def _result(cls, message=None, **kw):
    r = {"class": cls, "message": message, "correct": cls == "ok", "interpreted": dev.cpu_mode(),
         "speedup": None, "spread_pct": None, "shapes": [], "checks": [], "profile": None, "device": None}
    r.update(kw)
    return r


def describe(req: dict) -> dict:
    task = _task(req)
    try:
        cand = load_candidate(_path(req, "candidate"), task.banned_calls)
    except Rejected as e:
        return {"space": {}, "default": {}, "class": "rejected", "message": e.message, "rule": e.rule}
    except ImportFailed as e:
        return {"space": {}, "default": {}, "class": "error", "message": str(e)}
    except FileNotFoundError as e:
        raise RequestError(str(e))
    if not callable(getattr(cand.module, task.entry, None)):
        return {"space": cand.space, "default": cand.default, "class": "error",
                "message": f"the candidate defines no function {task.entry!r} (the task's entry)"}
    return {"space": cand.space, "default": cand.default, "class": "ok", "message": None}


def _path(req, key):
    v = req.get(key)
    if not isinstance(v, str) or not v:
        raise RequestError(f"`{key}` (a path) is required")
    return v


def _task(req):
    try:
        return load_task(_path(req, "task_dir"))
    except TaskError as e:
        raise RequestError(str(e))


def time_shape(task, cand_fn, config, shape_name, shape, baselines: list, timing_cfg: dict, cpu: bool,
               seed0: int = 1000) -> dict:
    """Time the candidate and baselines [(name, fn)] on one shape, ABAB interleaved (see time_impls)."""
    cands = [("candidate", cand_fn, config)] if cand_fn else []
    res = time_impls(task, cands, baselines, shape_name, shape, timing_cfg, cpu, seed0)
    res["late_check"] = res["late_checks"].get("candidate")
    return res


def time_impls(task, cands: list, baselines: list, shape_name, shape, timing_cfg: dict, cpu: bool,
               seed0: int = 1000) -> dict:
    """Time candidates [(name, fn, config)] and baselines [(name, fn)] interleaved on one shape.

    Every side gets its own input contents (disjoint seeds, so no side can inherit another's
    freed results), refreshed in place before every sample; candidates' outputs are re-poisoned
    every sample. After timing, each candidate's last output is checked against the reference
    for the contents it last saw. Returns {"sides": {name: stats}, "late_checks": {name: msg}, ...}.
    """
    device, dtype = dev.device_str(), low_dtype(cpu)
    sync = sync_fn(cpu)
    nvar = 2
    sides, state = [], {}
    impls = [(n, f, c, True) for n, f, c in cands] + [(n, f, None, False) for n, f in baselines]
    for si, (name, fn, config, is_cand) in enumerate(impls):
        variants = [task.make_inputs(shape, seed0 + 97 * si + v, device, dtype) for v in range(nvar)]
        st = {"variants": variants, "buf": clone_inputs(variants[0]), "last": 0, "keep": []}
        if is_cand:
            st["out"] = alloc_poisoned(task.output_spec(shape, variants[0]), device)

        def prep(rep, st=st):
            v = rep % nvar
            for k, x in st["variants"][v].items():
                if isinstance(x, torch.Tensor):
                    st["buf"][k].copy_(x)
            for t in st.get("out", {}).values():
                _repoison(t)
            st["last"] = v

        if is_cand:
            def run(st=st, fn=fn, config=config):
                fn(dict(st["buf"]), dict(st["out"]), config)
        else:
            def run(st=st, fn=fn):
                # keep the two latest results alive: their blocks are never handed to another side
                st["keep"].append(fn(**st["buf"]))
                if len(st["keep"]) > 2:
                    st["keep"].pop(0)
        state[name] = st
        sides.append(timing.Side(name, run, prep))
    if timing_cfg.get("interleave", True):
        res = timing.time_sides(sides, timing_cfg, gpu=not cpu)
    else:  # one side after the other (to measure what interleaving buys)
        res = None
        for s in sides:
            r1 = timing.time_sides([s], timing_cfg, gpu=not cpu)
            if res is None:
                res = r1
            else:
                res["sides"].update(r1["sides"])
    sync()
    late = {}
    for name, fn, config, is_cand in impls:
        if not is_cand:
            continue
        st = state[name]
        ref = task.reference(clone_inputs(st["variants"][st["last"]]))
        for oname, t in st["out"].items():
            rel, mx, bad = compare(t, ref[oname])
            if unwritten_count(t) or bad or not (rel <= task.rel_rmse and mx <= task.max_abs):
                late[name] = (f"shape {shape_name}: the output of the last TIMED call is wrong (rel_rmse {rel:.3g}, "
                              f"max_err {mx:.3g}, non-finite {bad}): the candidate behaves differently when timed")
                break
        del ref
    for st in state.values():
        st.clear()
    res["late_checks"] = late
    return res


def probe_baseline(task, fn, shape, cpu) -> str | None:
    """Run a baseline once; a failing baseline (a library missing in CPU mode, say) must not
    fail the candidate's evaluation: it is timed without it and the error reported."""
    try:
        inputs = task.make_inputs(shape, 7, dev.device_str(), low_dtype(cpu))
        fn(**inputs)
        sync_fn(cpu)()
        return None
    except Exception as e:
        if not cpu and dev.is_fatal_cuda_error(e):
            raise FatalCudaError(f"baseline: {type(e).__name__}: {e}")
        return f"{type(e).__name__}: {str(e)[:300]}"


def _repoison(t):
    from .correctness import _POISON
    if t.dtype in _POISON:
        idt, bits = _POISON[t.dtype]
        t.view(idt).fill_(bits)
    elif t.dtype.is_floating_point:
        t.fill_(float("nan"))


def evaluate(req: dict) -> dict:
    t_start = time.perf_counter()
    task = _task(req)
    cpu = dev.cpu_mode()
    shapes = req.get("shapes")
    if shapes is not None and (not isinstance(shapes, list) or not all(isinstance(s, str) for s in shapes)):
        raise RequestError("`shapes` must be a list of shape names")
    try:
        timed, checked = task.resolve_shapes(shapes, cpu)
    except TaskError as e:
        raise RequestError(str(e))
    base_name = req.get("baseline") or task.default_baseline
    try:
        base_fn = task.baseline_fn(base_name)
    except TaskError as e:
        raise RequestError(str(e))
    seeds = req.get("seeds") or DEFAULT_SEEDS
    if not isinstance(seeds, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise RequestError("`seeds` must be a list of integers")
    timing_cfg = dict(DEFAULT_TIMING)
    if isinstance(req.get("timing"), dict):
        timing_cfg.update(req["timing"])
    profile_req = req.get("profile", True)
    want_profile = bool(profile_req)
    want_ncu = isinstance(profile_req, dict) and bool(profile_req.get("ncu"))
    config_req = req.get("config") or {}
    if not isinstance(config_req, dict):
        raise RequestError("`config` must be an object")

    ran = {}

    def done(r):
        r.update(ran)
        r["elapsed_s"] = round(time.perf_counter() - t_start, 3)
        if r.get("device") is None and not cpu:
            r["device"] = dev.snapshot()
        return r

    try:
        cand = load_candidate(_path(req, "candidate"), task.banned_calls)
    except Rejected as e:
        return done(_result("rejected", e.message, rule=e.rule))
    except ImportFailed as e:
        return done(_result("error", str(e)))
    except FileNotFoundError as e:
        raise RequestError(str(e))
    try:
        config = cand.resolve_config(config_req)
        fn = cand.entry(task.entry)
    except (ValueError, ImportFailed) as e:
        return done(_result("error", str(e)))
    ran["config"] = config  # every result from here on names the full configuration run

    device, dtype, sync = dev.device_str(), low_dtype(cpu), sync_fn(cpu)
    checks: list[dict] = []
    bad = timing.integrity_violations()  # patched at import time?
    if bad:
        return done(_integrity_result(bad, []))
    try:
        checks = run_battery(task, fn, config, checked, seeds, device, dtype, sync)
        bad = timing.integrity_violations()
        if bad:
            return done(_integrity_result(bad, checks))
        # timing and profile
        shape_rows, spreads, speedups = [], [], []
        disc, clocks, reasons = 0, [], set()
        baseline_error = None
        for name, shape in timed:
            bl = [(base_name, base_fn)]
            err = probe_baseline(task, base_fn, shape, cpu)
            if err:
                baseline_error = f"baseline {base_name!r} failed on shape {name}: {err}"
                bl = []
            res = time_shape(task, fn, config, name, shape, bl, timing_cfg, cpu)
            if res["late_check"]:
                return done(_result("wrong_result", res["late_check"], rule="timed-output", checks=checks))
            c = res["sides"]["candidate"]
            b = res["sides"].get(base_name) or {"median_us": None, "spread_pct": None, "discarded_samples": 0}
            sp = b["median_us"] / c["median_us"] if c["median_us"] and b["median_us"] else None
            row = {"shape": name, "median_us": _r(c["median_us"]), "spread_pct": _r(c["spread_pct"]),
                   "ci_pct": _r(c["ci_pct"]), "n": c["n"], "baseline_us": _r(b["median_us"]),
                   "baseline_spread_pct": _r(b["spread_pct"]), "speedup": _r(sp, 4),
                   "stream_us": _r(c["stream_median_us"]), "device_us": _r(c["device_median_us"]),
                   "outlasted_stream": c["outlasted_stream"], "discarded_samples": c["discarded_samples"]}
            row.update(prof.roofline_figures(task.roofline(shape), c["median_us"]))
            shape_rows.append(row)
            spreads += [x for x in (c["spread_pct"], b["spread_pct"]) if x is not None]
            if sp:
                speedups.append(sp)
            disc += c["discarded_samples"] + b["discarded_samples"]
            if res.get("sm_clock_mhz"):
                clocks.append(res["sm_clock_mhz"])
            reasons.update(res.get("throttle_reasons") or [])
        bad = timing.integrity_violations()
        if bad:
            return done(_integrity_result(bad, checks))
        profile = None
        if want_profile:
            profile = {"kernels": _kernels(task, cand, fn, config, timed, cpu), "ncu": None}
            if want_ncu and not cpu:
                profile["ncu"] = prof.ncu_summary(str(task.dir), str(cand.path), config, timed[0][0])
        devinfo = None
        if not cpu:
            devinfo = dev.snapshot()
            devinfo["sm_clock_mhz"] = clocks[0] if clocks else devinfo["sm_clock_mhz"]
            devinfo["throttle_reasons"] = sorted(reasons)
            devinfo["discarded_samples"] = disc
        geo = math.exp(sum(math.log(s) for s in speedups) / len(speedups)) if speedups else None
        return done(_result("ok", None, correct=True, speedup=_r(geo, 4), spread_pct=_r(max(spreads) if spreads else None),
                            shapes=shape_rows, checks=checks, profile=profile, device=devinfo,
                            baseline=base_name, config=config, baseline_error=baseline_error))
    except CheckFailure as e:
        rows = getattr(e, "rows", checks)
        return done(_result(e.cls, e.message, rule=e.rule, checks=rows, correct=False))
    except FatalCudaError:
        raise


def _integrity_result(bad: list, checks: list) -> dict:
    return _result("rejected", f"rejected [timer] the candidate replaced {', '.join(bad)} (restored)",
                   rule="timer", checks=checks)


def _kernels(task, cand, fn, config, timed, cpu):
    if cpu:
        return prof.interpreted_kernels(cand.module)
    name, shape = timed[0]
    inputs = task.make_inputs(shape, 4242, "cuda", torch.bfloat16)
    out = alloc_poisoned(task.output_spec(shape, inputs), "cuda")
    try:
        return prof.kernel_stats(cand.module, lambda: (fn(inputs, out, config), timing._sync()))
    except Exception as e:  # profiling must never fail an evaluation
        return [{"name": f"(kernel stats unavailable: {type(e).__name__}: {e})"}]


def _r(x, nd=3):
    if x is None:
        return None
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return round(float(x), nd) if abs(x) >= 1e-3 or x == 0 else float(f"{x:.3g}")
