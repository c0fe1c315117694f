"""In-process evaluation for TRUSTED code only (bench.py over the shipped seeds, ncu_run.py): the
candidate runs in this process. The daemon's path is the judge (evaluate.py + runner.py)."""
from __future__ import annotations

import torch

from . import device as dev
from . import timing
from .correctness import alloc_poisoned, clone_inputs, compare, unwritten_count
# bench.py imports these from here; one definition, the judge's
from .evaluate import _probe_baseline as probe_baseline  # noqa: F401
from .evaluate import low_dtype, sync_fn  # noqa: F401


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


def _repoison(t):
    from .correctness import _POISON
    if t.dtype in _POISON:
        idt, bits = _POISON[t.dtype]
        t.view(idt).fill_(bits)
    elif t.dtype.is_floating_point:
        t.fill_(float("nan"))
