"""One `describe` / `evaluate` request, judged (PROCESS_MODEL.md): this process never imports
candidate code. It checks the source statically, hands it to a fresh runner, makes every
input, computes the references, compares the outputs in its own mapping of the shared slots,
times the baselines itself (ABAB with the runner's batches) and decides the verdict.
"""
from __future__ import annotations

import ast
import hashlib
import math
import os
import random
import time
from pathlib import Path

import torch

from . import ahead
from . import device as dev
from . import profiling as prof
from . import runner_protocol as rp
from . import static_check
from . import timing
from . import warmup
from .correctness import CheckFailure, FatalCudaError
from .judge_battery import run_battery
from .ref_pool import RefPool
from .judge_timing import ShapeJob, nslots, time_shape
from .session import Phases, Session, failed
from .spawn import Pool, RunnerDied
from .taskload import TaskError, load_task

DEFAULT_SEEDS = [11, 12, 13]
DEFAULT_TIMING = {"warmup_ms": 25, "min_reps": 20, "max_reps": 200, "target_noise_pct": 1.0}
POOL = Pool()   # the spare runner lives as long as this judge
AHEAD = ahead.Ahead()   # the next candidate's runner, prepared while this one is timed
# Secret seeds with kept references (issue #12); KERNELD_REF_POOL=0: nothing kept.
REFS = RefPool(keep=os.environ.get("KERNELD_REF_POOL", "1") != "0")
_STATIC: dict = {}        # (source hash, banned calls, allowed imports) -> violations | None
STATIC_CACHE_MAX = 256


class RequestError(Exception):
    """The request itself is bad (reply ok:false)."""


def low_dtype(cpu: bool):
    # the interpreter has no bf16 (FIELD_NOTES 8): CPU mode uses fp16
    return torch.float16 if cpu else torch.bfloat16


def sync_fn(cpu: bool):
    return (lambda: None) if cpu else torch.cuda.synchronize


def _result(cls, message=None, **kw):
    r = {"class": cls, "message": message, "correct": cls == "ok", "interpreted": dev.cpu_mode(),
         "speedup": None, "spread_pct": None, "shapes": [], "checks": [], "profile": None, "device": None}
    r.update(kw)
    return r


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


def _source(req) -> tuple[Path, str]:
    p = Path(_path(req, "candidate")).resolve()
    try:
        return p, p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise RequestError(f"cannot read candidate {p}: {e}")


def _static(src: str, task):
    """Violations, or None. KERNELD_UNSAFE_SKIP_STATIC_CHECKS=1 is for the harness's own fault suite."""
    if os.environ.get("KERNELD_UNSAFE_SKIP_STATIC_CHECKS") == "1":
        return None
    # A pure function of the source and the rules; a search goal sends the same seed source
    # with every configuration (and once more in its `prepare`): checked once per judge.
    key = (hashlib.sha256(src.encode()).hexdigest(), tuple(task.banned_calls),
           os.environ.get("KERNELD_STATIC_ALLOW_IMPORTS", ""))
    if key not in _STATIC:
        if len(_STATIC) >= STATIC_CACHE_MAX:
            _STATIC.pop(next(iter(_STATIC)))
        _STATIC[key] = static_check.check_source(src, task.banned_calls) or None
    return _STATIC[key]


def _literal_space(src: str):
    """SPACE / DEFAULT when they are literals (they always are in practice): describe then needs
    no runner. None when a runner must import the module to tell."""
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return None
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in ("SPACE", "DEFAULT"):
                try:
                    found[name] = ast.literal_eval(node.value)
                except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                    return None
    space = found.get("SPACE", {})
    if not isinstance(space, dict) or not all(isinstance(v, (list, tuple)) and v for v in space.values()):
        return None
    default = found.get("DEFAULT")
    if default is None:
        default = {k: v[0] for k, v in space.items()}
    if not isinstance(default, dict):
        return None
    return {k: list(v) for k, v in space.items()}, dict(default)


def _defines(src: str, name: str) -> bool:
    try:
        return any(isinstance(n, ast.FunctionDef) and n.name == name for n in ast.parse(src).body)
    except SyntaxError:
        return False


def describe(req: dict, pool: Pool | None = None) -> dict:
    task = _task(req)
    _, src = _source(req)
    vs = _static(src, task)
    if vs:
        return {"space": {}, "default": {}, "class": "rejected", "message": static_check.format_violations(vs),
                "rule": vs[0].rule}
    lit = _literal_space(src)
    if lit is not None and _defines(src, task.entry):
        return {"space": lit[0], "default": lit[1], "class": "ok", "message": None}
    # not literal: a runner imports it (and is thrown away, like every runner)
    runner = (pool or POOL).take()
    try:
        runner.wait_ready()
        (pool or POOL).prestart()
        rep = runner.request(rp.Load(0, src, task.entry, {}, list(task.banned_calls), _allowed_aten(task)), 600)
    except RunnerDied as e:
        return {"space": {}, "default": {}, "class": "error", "message": f"runner: {e.message}"}
    finally:
        runner.kill()
    if rep.failure:
        return {"space": rep.space or {}, "default": rep.default or {}, "class": rep.failure.cls,
                "message": rep.failure.message, "rule": rep.failure.rule}
    return {"space": rep.space or {}, "default": rep.default or {}, "class": "ok", "message": None}


def _load(src: str, task, config: dict) -> rp.Load:
    return rp.Load(0, src, task.entry, config, list(task.banned_calls), _allowed_aten(task), skip_flag_check=False)


def prepare(req: dict, pool: Pool | None = None) -> dict:
    """`prepare` (ahead.py): a runner for this candidate starts and imports it now, in a thread;
    the `evaluate` of the same task, source and config gets it. Answers at once."""
    task = _task(req)
    _, src = _source(req)
    config = req.get("config") or {}
    if not isinstance(config, dict):
        raise RequestError("`config` must be an object")
    shapes = req.get("shapes") or None
    if shapes is not None and (not isinstance(shapes, list) or not all(isinstance(s, str) for s in shapes)):
        raise RequestError("`shapes` must be a list of shape names")
    depth = req.get("ahead", 1)
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise RequestError("`ahead` must be a positive integer")
    if _static(src, task):
        return {"accepted": False, "message": "the static checks reject it (its evaluation says why)"}
    cpu = dev.cpu_mode()
    try:
        _, checked = task.resolve_shapes(shapes, cpu)
    except TaskError as e:
        raise RequestError(str(e))
    warm = None
    if _warm_up(cpu):
        def warm():
            return warmup.warm_calls(task, checked, low_dtype(cpu))
    AHEAD.prepare(ahead.key(req["task_dir"], src, config), _load(src, task, config), pool or POOL, depth, warm)
    return {"accepted": True, "message": None}


def _warm_up(cpu: bool) -> bool:
    """KERNELD_WARM_UP: auto (the default: on the GPU, where Triton compiles; the interpreter
    compiles nothing and would only run the kernels twice), 1 (always: the CPU tests), 0 (never)."""
    v = os.environ.get("KERNELD_WARM_UP", "auto")
    return v == "1" or (v == "auto" and not cpu)


def _allowed_aten(task) -> list:
    v = task.raw.get("allowed_aten", [])
    return [x for x in v if isinstance(x, str)] if isinstance(v, list) else []


def _secret_seeds(rng, k, avoid) -> list[int]:
    out = []
    while len(out) < k:
        s = rng.getrandbits(62)
        if s not in avoid and s not in out:
            out.append(s)
    return out


def evaluate(req: dict, pool: Pool | None = None) -> dict:
    t_start = time.perf_counter()
    phases = Phases()
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
    if timing_cfg.get("mode") is None:
        timing_cfg["mode"] = "gpu"
    if timing_cfg["mode"] not in timing.MODES:
        raise RequestError(f"`timing.mode` must be one of {', '.join(timing.MODES)}, not {timing_cfg['mode']!r}")
    retime = bool(req.get("retime", False))
    profile_req = False if retime else req.get("profile", True)
    want_ncu = isinstance(profile_req, dict) and bool(profile_req.get("ncu"))
    config_req = req.get("config") or {}
    if not isinstance(config_req, dict):
        raise RequestError("`config` must be an object")
    path, src = _source(req)
    if retime:  # the wins that hold: timed shapes only, one correctness seed, no profile
        checked, seeds = list(timed), seeds[:1]

    ran = {}

    def done(r):
        r.update(ran)
        r["phases"] = phases.rounded()
        r["elapsed_s"] = round(time.perf_counter() - t_start, 3)
        if retime:
            r["retimed"] = True
        if r.get("device") is None and not cpu:
            r["device"] = dev.snapshot()
        return r

    with phases("static"):
        vs = _static(src, task)
    if vs:
        return done(_result("rejected", static_check.format_violations(vs), rule=vs[0].rule))

    pool = pool or POOL
    with phases("runner_wait"):
        if retime:
            # A re-time leaves the prepared runners for the next candidates in place, but is
            # measured only once none of them runs candidate code (import, warm-up) beside
            # it. Its own fresh runner starts, imports and warms up (timed shapes only) while
            # that settles: the wait and the compile overlap, nothing is timed meanwhile.
            warm = None
            if _warm_up(cpu):
                def warm():
                    return warmup.warm_calls(task, timed, low_dtype(cpu))
            mine = ahead.Prepared("retime", pool.take(), _load(src, task, config_req), warm)
            try:
                AHEAD.settle()
            except BaseException:  # SIGINT (an abandoned request): its runner must not leak
                mine.discard()
                raise
            prepared = AHEAD.finish(mine)
        else:
            prepared = AHEAD.take(ahead.key(req["task_dir"], src, config_req))
    if prepared is not None:
        runner, pre, start_s, import_s, warm_note = prepared
        if not retime:   # a re-time's own start and warm-up are inside its runner_wait
            phases.add("ahead", start_s + import_s)
        if warm_note:
            ran["warm_up"] = warm_note
        pool.prestart()
        ready = runner.ready
        if ready is None:
            msg = pre.message if isinstance(pre, RunnerDied) else "no ready line"
            return done(_result("error", f"the runner did not start: {msg}", rule="runner-start"))
    else:
        pre = None
        with phases("runner_wait"):
            runner = pool.take()
            ready = None
            try:
                ready = runner.wait_ready()
            except RunnerDied as e:
                return done(_result("error", f"the runner did not start: {e.message}", rule="runner-start"))
            finally:
                pool.prestart()  # the next candidate's runner starts while this one works
    phases.add("runner_start", runner.ready_s or 0.0)
    ran["runner"] = {"pid": ready.pid, "sandbox": ready.sandbox}
    rt = req.get("runner_timeout_s")
    if rt is not None and (isinstance(rt, bool) or not isinstance(rt, (int, float)) or rt <= 0):
        raise RequestError("`runner_timeout_s` must be a positive number of seconds")
    sess = Session(runner, not cpu, phases, rt)
    device, dtype, sync = dev.device_str(), low_dtype(cpu), sync_fn(cpu)
    rng = random.Random(int.from_bytes(os.urandom(16), "little"))
    checks: list[dict] = []
    try:
        with phases("import"):
            if isinstance(pre, RunnerDied):
                raise pre
            rep = pre or runner.request(_load(src, task, config_req), sess.first_timeout)
        if rep.failure:
            return done(_result(rep.failure.cls, rep.failure.message, rule=rep.failure.rule))
        failed(rep)
        config = rep.config or {}
        ran["config"] = config
        timed_names = {n for n, _ in timed}
        sizes = {}

        def nslots_for(name):
            return sizes.get(name, 1)

        for name, shape in timed:
            sample = task.make_inputs(shape, seeds[0], device, dtype)
            sizes[name] = nslots(task, shape, not cpu, sample)
            del sample
        # The request's seeds, topped up from the judge's pool of secret seeds with kept
        # references (ref_pool.py); a re-time keeps its one fresh seed only.
        refs = None if retime else REFS
        checks = run_battery(sess, task, checked, seeds, device, dtype, sync, nslots_for, refs)
        shape_rows, spreads, speedups = [], [], []
        disc, clocks, reasons = 0, [], set()
        baseline_error = None
        avoid = set(seeds)
        for name, shape in timed:
            assert name in timed_names
            bl = (base_name, base_fn)
            with phases("baseline"):
                err = _probe_baseline(task, base_fn, shape, cpu)
            if err:
                baseline_error = _baseline_failed(base_name, name, err, cpu)
                bl = None
            secrets = _secret_seeds(rng, 5, avoid)
            with phases("transfers"):
                cand_vars = [task.make_inputs(shape, s, device, dtype) for s in secrets[:3]]
                base_vars = [task.make_inputs(shape, s, device, dtype) for s in secrets[3:]] if bl else []
            slots = sess.slots_for(task, name, shape, cand_vars[0], sizes[name])
            res = time_shape(ShapeJob(sess, task, slots, name, shape, bl, cand_vars, base_vars, timing_cfg, not cpu,
                                      rng))
            del cand_vars, base_vars
            c = res["candidate"]
            b = res["baseline"] or {"median_us": None, "spread_pct": None}
            _require_samples(name, res, c, b if bl else None)
            sp = b["median_us"] / c["median_us"] if c["median_us"] and b["median_us"] else None
            row = {"shape": name, "median_us": _r(c["median_us"]), "spread_pct": _r(c["spread_pct"]),
                   "ci_pct": _r(c["ci_pct"]), "ci_low_us": _r(c.get("ci_low_us")), "ci_high_us": _r(c.get("ci_high_us")),
                   "n": c["n"], "baseline_us": _r(b["median_us"]), "baseline_spread_pct": _r(b["spread_pct"]),
                   "baseline_ci_pct": _r(b.get("ci_pct")), "speedup": _r(sp, 4),
                   "stream_us": _r(c["stream_median_us"]), "device_us": _r(c["device_median_us"]),
                   "outlasted_stream": c["outlasted_stream"], "discarded_samples": res["discarded"],
                   "leaked_samples": res["leaked_samples"], "timed_outputs_checked": res["checked"],
                   "hold_us": res["hold_us"], "calls_per_batch": res["calls_per_batch"], "batches": res["batches"],
                   "timer_check": res["timer"],
                   # what median_us / baseline_us are (timing.MODES, or "interpreted"), both methods'
                   # figures when measured, and why a side was timed otherwise than asked
                   "timing": res["mode"], "timing_note": res["note"],
                   "gpu_us": _r(c.get("gpu_us")), "baseline_gpu_us": _r(b.get("gpu_us")),
                   "as_called_us": _r(c.get("as_called_us")), "baseline_as_called_us": _r(b.get("as_called_us"))}
            if res.get("trace") is not None:
                row["trace"] = res["trace"]
            row.update(prof.roofline_figures(task.roofline(shape), c["median_us"]))
            shape_rows.append(row)
            spreads += [x for x in (c["spread_pct"], b["spread_pct"]) if x is not None]
            if sp:
                speedups.append(sp)
            disc += res["discarded"]
        profile = None
        if profile_req:
            with phases("profile"):
                profile = {"kernels": _kernels(sess, task, timed, seeds, device, dtype), "ncu": None}
                if want_ncu and not cpu and os.environ.get("KERNELD_RUNNER_LAUNCHER"):
                    # ncu_run.py imports the candidate in a process of its own: never outside the sandbox
                    profile["ncu"] = {"error": "ncu is off while runners are sandboxed (ncu_run.py would import "
                                               "the candidate outside the runner)"}
                elif want_ncu and not cpu:
                    profile["ncu"] = prof.ncu_summary(str(task.dir), str(path), config, timed[0][0])
        devinfo = None
        if not cpu:
            devinfo = dev.snapshot()
            devinfo["discarded_samples"] = disc
        geo = math.exp(sum(math.log(s) for s in speedups) / len(speedups)) if speedups else None
        modes = sorted({row["timing"] for row in shape_rows})
        ran["timing"] = modes[0] if len(modes) == 1 else None
        # a CPU-mode baseline that failed (a library missing): timed without it, and said
        return done(_result("ok", baseline_error, correct=True, speedup=_r(geo, 4), spread_pct=_r(max(spreads) if spreads else None),
                            shapes=shape_rows, checks=checks, profile=profile, device=devinfo,
                            baseline=base_name, config=config, baseline_error=baseline_error))
    except CheckFailure as e:
        rows = getattr(e, "rows", checks)
        return done(_result(e.cls, e.message, rule=e.rule, checks=rows, correct=False))
    except RunnerDied as e:
        if e.kind == "protocol":
            return done(_result("error", f"rejected runner output: {e.message}", rule="runner-protocol",
                                checks=checks))
        cls = "timed_out" if e.kind == "timed_out" else "crashed"
        return done(_result(cls, f"the candidate's runner {'timed out' if cls == 'timed_out' else 'crashed'}: "
                            f"{e.message}", rule=None, checks=checks, fatal_runner=e.fatal))
    finally:
        sess.close()


def _baseline_failed(base_name, shape_name, err, cpu) -> str:
    """What a failed baseline means. In CPU mode (a library missing, say) the candidate is timed
    alone and the message says so. On a GPU a speedup is what the night is for: without a
    baseline no evaluation can win, so the evaluation fails with the reason, not the
    candidate's (the daemon's circuit breaker pauses the goal), rather than spend the budget on
    figures with no ratio."""
    msg = f"baseline {base_name!r} failed on shape {shape_name}: {err}"
    if not cpu:
        raise CheckFailure("error", msg + " (the baseline runs in the judge, under its sandbox: `kernelctl "
                           "version` shows the sandbox; kernels/harness/bench.py times it outside)",
                           rule="baseline-failed")
    return msg


def _probe_baseline(task, fn, shape, cpu) -> str | None:
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


def _kernels(sess, task, timed, seeds, device, dtype):
    name, shape = timed[0]
    slots = sess.slots.get(name)
    if slots is None:
        return []
    inputs = task.make_inputs(shape, 4242, device, dtype)
    slots.fill(0, inputs)
    slots.poison(0)
    sess.use(slots)
    try:
        rep = sess.r.request(rp.Profile(0, slots.in_keys(0), slots.out_keys(0), dict(slots.scalars)), 300)
    except RunnerDied as e:
        return [{"name": f"(kernel stats unavailable: {e.message})"}]
    return rep.kernels or []


def _require_samples(name, res, cand, base):
    """A side with no timing sample left has no figure: that is the machine's doing (every batch
    throttled, or every call's launch leaked past the hold), never a figure of 0 or null."""
    for side, st in (("candidate", cand), ("baseline", base)):
        if st is not None and not st.get("median_us"):
            raise CheckFailure(
                "error", f"shape {name}: no timing sample of the {side} survived ({res['discarded']} discarded "
                f"because the GPU throttled or its clock fell below 85 % of the run's highest, "
                f"{res['leaked_samples']} leaked past the hold of {res['hold_us']} us; method {res.get('method')}): "
                "check the GPU's clocks and throttle reasons (nvidia-smi -q -d PERFORMANCE) and re-time",
                rule="timing-samples")


def _r(x, nd=3):
    if x is None:
        return None
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return round(float(x), nd) if abs(x) >= 1e-3 or x == 0 else float(f"{x:.3g}")
