"""What both MLA tuning scripts (tune.py: the v1 sweep; tune_v2.py: v2 against v1) share: loading
a seed, the check of one configuration on a list of shapes, and the do_bench figure.

The check is the tuning scripts' own quick battery, not the harness's: one fresh seed per shape,
outputs poisoned with NaN, every call made twice (cached counters and scratch buffers must be
reset by the first), inputs checked unchanged, the task's tolerances.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

TASK_DIR = Path(__file__).resolve().parent
DEVICE = os.environ.get("MLA_TUNE_DEVICE", "cuda")   # "cpu": dry run of the check phase (interpreter)
CHECK_SEED = 11


def load_mod(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def task_and_toml():
    import tomllib
    if str(TASK_DIR) not in sys.path:
        sys.path.insert(0, str(TASK_DIR))
    import task
    return task, tomllib.loads((TASK_DIR / "task.toml").read_text())


def check_shapes(toml, which):
    """The shapes a check runs on: the toml sections named, or the smoke shapes off the GPU."""
    if DEVICE != "cuda":
        return list(toml["smoke"].items())
    return [kv for w in which for kv in toml[w].items()]


class Checker:
    """One per check process: the task, and inputs + oracle outputs cached per shape."""

    def __init__(self):
        import torch
        self.torch = torch
        self.task, self.toml = task_and_toml()
        self.data = {}

    def inputs(self, name, shape):
        if name not in self.data:
            dtype = self.torch.bfloat16 if DEVICE == "cuda" else self.torch.float16
            inp = self.task.make_inputs(shape, CHECK_SEED, DEVICE, dtype)
            self.data[name] = (inp, self.task.reference(**inp))
        return self.data[name]

    def check(self, mod, kernel, cfg, shapes) -> dict:
        """{"ok", "shapes": {name: figures}, "kernels": regs/spills/smem | why not} or "error"."""
        torch, task = self.torch, self.task
        tol = self.toml["tolerance"]
        rep = {"ok": True, "shapes": {}}
        try:
            for name, shape in shapes:
                inp, ref = self.inputs(name, shape)
                snap = {k: v.clone() for k, v in inp.items()}
                spec = task.output_spec(shape, inp)
                for _ in range(2):
                    out = {k: torch.full(s, float("nan"), dtype=d, device=DEVICE) for k, (s, d) in spec.items()}
                    mod.mla_decode(inp, out, cfg)
                    if DEVICE == "cuda":
                        torch.cuda.synchronize()
                    ok, res = compare(out, ref, tol["rel_rmse"], tol["max_abs"])
                    if not ok:
                        break
                for k in inp:
                    if not torch.equal(inp[k], snap[k]):
                        ok = False
                        res["input_modified"] = k
                P = mod.plan(shape["B"], shape.get("H", 64), shape["S"], shape.get("D_LATENT", 512), 64, cfg,
                             torch.device(DEVICE))
                rep["shapes"][name] = dict(ok=ok, mode=P["mode"], ns=P["ns"], **res)
                rep["ok"] &= ok
            rep["kernels"] = kernel_info(kernel)
        except Exception as e:  # noqa: BLE001  compile errors (out of resources) and the like
            rep["ok"] = False
            rep["error"] = root_error(e)
        return rep


def compare(out, ref, tol_rel, tol_max):
    res, ok = {}, True
    for k, r in ref.items():
        a, r = out[k].float(), r.float()
        finite = bool(a.isfinite().all())
        rel = float((a - r).norm() / r.norm())
        mx = float((a - r).abs().max() / r.abs().max())
        passed = finite and rel <= tol_rel and mx <= tol_max
        ok &= passed
        res[k] = dict(rel_rmse=rel, max_err=mx, finite=finite, passed=passed)
    return ok, res


def kernel_info(kernel):
    """Registers / spills / shared memory of each compiled variant of a @triton.jit (or @gluon.jit) kernel,
    or of each kernel of a list."""
    kernels = kernel if isinstance(kernel, (list, tuple)) else [kernel]
    try:
        return [dict(kernel=k.__name__, regs=ck.n_regs, spills=ck.n_spills, shared=ck.metadata.shared)
                for k in kernels for dc in k.device_caches.values() for ck in dc[0].values()]
    except Exception as e:  # noqa: BLE001  the interpreter has no compiled kernels
        return str(e)[:100]


def root_error(e):
    """The exception and its root cause, in one line (Triton wraps out-of-resources errors)."""
    c = e
    while c.__cause__ is not None:
        c = c.__cause__
    return f"{type(e).__name__}: {type(c).__name__}: {str(c)[-400:]}"


def bench(fn, rep_ms, warmup=20):
    """do_bench with the L2 flushed before every call: median µs, (p80 - p20) / median %, samples."""
    import torch
    from triton.testing import do_bench
    t = torch.tensor(do_bench(fn, warmup=warmup, rep=rep_ms, return_mode="all"), dtype=torch.float64)
    med = float(t.median())
    return med * 1e3, 100.0 * float(t.quantile(0.8) - t.quantile(0.2)) / med, len(t)
