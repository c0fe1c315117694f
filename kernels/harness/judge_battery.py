"""The correctness battery, judged: inputs made and the reference computed in the judge, the
candidate run in the runner on the judge's shared slots, outputs read back from the judge's
own mapping (FIELD_NOTES section 6 lists the cheats; correctness.py the in-process original).

Per checked shape and seed: fill slot 0 with the seed's inputs; candidate first on poisoned
outputs, then the reference (in the judge), then the candidate again on freshly poisoned
outputs; each time the inputs must be unchanged and every output fully written, finite and
within the task's tolerance. The task's extra_checks hook runs once per shape (first seed).
"""
from __future__ import annotations

from .correctness import CheckFailure, _finite, _same, clone_inputs, compare, unwritten_count


def judge_outputs(task, outs: dict, ref: dict, where: str, row_for=None):
    """Compare outputs (judge-side tensors) with the reference; raise CheckFailure or return rows."""
    rows = {}
    for name, t in outs.items():
        unwritten = unwritten_count(t)
        rel, mx, nonfinite = compare(t, ref[name])
        row = rows[name] = {"rel_rmse": rel, "max_err": mx, "passed": True}
        msg = None
        if unwritten:
            msg = (f"{unwritten} of {t.numel()} elements never written (poison left)", "unwritten")
        elif nonfinite:
            msg = (f"{nonfinite} NaN/Inf elements", "nonfinite")
        elif not (rel <= task.rel_rmse):
            msg = (f"rel_rmse {rel:.3g} > {task.rel_rmse:g}", "tolerance")
        elif not (mx <= task.max_abs):
            msg = (f"max_err {mx:.3g} > {task.max_abs:g} (relative to max|ref|)", "tolerance")
        if msg:
            row["passed"] = False
            err = CheckFailure("wrong_result", f"{where} output {name}: {msg[0]}", msg[1])
            err.row = (name, row)
            raise err
    return rows


def run_battery(sess, task, checked: list, seeds: list, device: str, dtype, sync, nslots_for) -> list[dict]:
    rows: list[dict] = []
    for shape_name, shape in checked:
        for seed in seeds:
            inputs = task.make_inputs(shape, seed, device, dtype)
            slots = sess.slots_for(task, shape_name, shape, inputs, nslots_for(shape_name))
            if not slots.fits(inputs):
                raise RuntimeError(f"task.make_inputs returned inputs of another layout for seed {seed} of "
                                   f"shape {shape_name}")
            with sess.phases("transfers"):
                slots.fill(0, inputs)
            ref = None
            per_output: dict[str, dict] = {}
            for order in ("candidate-first", "reference-first"):
                where = f"shape {shape_name} seed {seed} ({order})"
                slots.poison(0)
                sync()
                try:
                    sess.call(slots, 0, where)
                except CheckFailure as e:
                    e.rows = rows
                    raise
                for k, v in slots.tin(0).items():
                    if not _same(v, inputs[k]):
                        err = CheckFailure("wrong_result", f"{where}: the candidate modified input {k!r}",
                                           "input-mutated")
                        err.rows = rows
                        raise err
                if ref is None:
                    with sess.phases("correctness_reference"):
                        ref = task.reference(clone_inputs(inputs))
                        sync()
                    missing = set(slots.out_spec) - set(ref)
                    if missing:
                        raise RuntimeError(f"task.reference did not return {sorted(missing)}")
                try:
                    got = judge_outputs(task, slots.tout(0), ref, where)
                except CheckFailure as e:
                    name, row = e.row
                    rows.append(_finite({"shape": shape_name, "seed": seed, "output": name, **row}))
                    e.rows = rows
                    raise
                for name, row in got.items():
                    acc = per_output.setdefault(name, {"shape": shape_name, "seed": seed, "output": name,
                                                       "rel_rmse": 0.0, "max_err": 0.0, "passed": True})
                    acc["rel_rmse"] = max(acc["rel_rmse"], row["rel_rmse"])
                    acc["max_err"] = max(acc["max_err"], row["max_err"])
            rows.extend(_finite(r) for r in per_output.values())
            del ref
            if seed == seeds[0]:
                rows.extend(_extra_checks(sess, task, slots, shape_name, shape, seed, device, dtype, sync))
    return rows


def _extra_checks(sess, task, slots, shape_name, shape, seed, device, dtype, sync) -> list[dict]:
    """The task's optional extra_checks(run_candidate, shape, seed, device, dtype) hook;
    run_candidate(inputs) runs the candidate in the runner on slot 0 and returns (judge-side
    copies of) its outputs."""
    hook = getattr(task.module, "extra_checks", None)
    if hook is None:
        return []
    where = f"shape {shape_name} seed {seed} (extra check)"

    def run_candidate(inputs: dict) -> dict:
        if not slots.fits(inputs):
            raise RuntimeError("extra_checks: run_candidate() needs inputs of the shape's own layout")
        slots.fill(0, inputs)
        slots.poison(0)
        sync()
        sess.call(slots, 0, where)
        return {k: v.clone() for k, v in slots.tout(0).items()}

    rows = []
    for r in hook(run_candidate, dict(shape), seed, device, dtype) or []:
        name = r.get("check", "extra")
        row = {"shape": shape_name, "seed": seed, "output": f"check:{name}", "rel_rmse": None, "max_err": None,
               "passed": bool(r.get("passed")), "detail": {k: v for k, v in r.items() if k not in ("check", "passed")}}
        rows.append(row)
        if not row["passed"]:
            err = CheckFailure("wrong_result", f"{where}: the task's {name!r} check failed: {row['detail']}",
                               "extra-check")
            err.rows = rows
            raise err
    return rows


def fresh_inputs(task, shape, secret: int, device, dtype) -> dict:
    return task.make_inputs(shape, secret, device, dtype)


def mix_into(dst: dict, a: dict, b: dict, alpha: float):
    """dst = alpha*a + (1-alpha)*b for floating inputs (fp32 arithmetic), a's values otherwise:
    contents no call has seen before, in the value ranges of the task's own inputs."""
    for k, t in dst.items():
        x, y = a[k], b[k]
        if t.dtype.is_floating_point:
            t.copy_(x.float().mul(alpha).add_(y.float(), alpha=1.0 - alpha))
        else:
            t.copy_(x)
