"""The correctness battery (HARNESS.md; FIELD_NOTES section 6 lists the cheats it defends).

Per checked shape and seed:
  1. fresh inputs from task.make_inputs(shape, seed); the candidate gets its own copy, held in
     the same buffers for every seed of a shape (same pointers, new contents: an output cache
     keyed by pointer goes stale and fails);
  2. candidate FIRST, on fresh poisoned outputs, before any reference ran for this seed
     (nothing correct exists in freed memory for it to inherit);
  3. the reference on its own copy; its outputs stay alive from here on;
  4. the candidate AGAIN on fresh poisoned outputs (reference-then-candidate order).
After every candidate call: inputs unchanged, output tensors still the harness's own plain
torch.Tensor objects (same storage, shape, dtype), every element written (poison gone), no
NaN/Inf, relative RMSE and max error within the task's tolerance. While the candidate runs, a
TorchDispatchMode audits the ATen ops it issues: matmul/softmax/attention-class ops (and the
task's banned_calls) are PyTorch doing the heavy math, whatever name reached them.
"""
from __future__ import annotations

import math
import traceback

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import timing
from .device import is_fatal_cuda_error


class FatalCudaError(Exception):
    """The CUDA context is poisoned: the worker must reply and exit."""


class Abandon(BaseException):
    """The daemon asked (SIGINT) to abandon the request in flight; never a candidate's verdict."""


class CheckFailure(Exception):
    def __init__(self, cls: str, message: str, rule: str | None = None):
        super().__init__(message)
        self.cls, self.message, self.rule = cls, message, rule


# ATen ops (overload packet names) that are the heavy math of a task, however they were reached
HEAVY_ATEN = {
    "mm", "bmm", "addmm", "addbmm", "baddbmm", "matmul", "dot", "vdot", "mv", "addmv", "addr", "outer", "ger",
    "_softmax", "softmax", "_log_softmax", "log_softmax", "_safe_softmax", "einsum", "tensordot", "kron",
    "linear", "_addmm_activation", "_scaled_mm", "_int_mm", "convolution", "_convolution", "cudnn_convolution",
    "scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_attention_math", "_flash_attention_forward", "_efficient_attention_forward",
    "_scaled_dot_product_fused_attention_overrideable", "_fused_sdp_choice", "linalg_vecdot", "chain_matmul",
    "_weight_int4pack_mm", "_weight_int8pack_mm", "cdist", "_cdist_forward",
}


class HeavyOpAudit(TorchDispatchMode):
    def __init__(self, banned=()):
        super().__init__()
        self.banned = set(banned)
        self.hits: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in HEAVY_ATEN or name in self.banned:
            self.hits.append(name)
        return func(*args, **(kwargs or {}))


# quiet-NaN bit patterns with a recognisable payload: "poison still here" = never written
_POISON = {
    torch.float32: (torch.int32, 0x7FC5A5A5),
    torch.float16: (torch.int16, 0x7E5A),
    torch.bfloat16: (torch.int16, 0x7FDA),
    torch.float64: (torch.int64, 0x7FF8A5A5A5A5A5A5),
}


def alloc_poisoned(spec: dict, device: str) -> dict:
    out = {}
    for name, (shape, dtype) in spec.items():
        t = torch.empty(tuple(shape), dtype=dtype, device=device)
        if dtype in _POISON:
            idt, bits = _POISON[dtype]
            t.view(idt).fill_(bits)
        elif dtype == torch.bool:
            t.fill_(True)
        elif dtype.is_floating_point:  # fp8 and friends
            t.fill_(float("nan"))
        else:
            t.fill_(torch.iinfo(dtype).min + 7)
        out[name] = t
    return out


def unwritten_count(t: torch.Tensor) -> int:
    if t.dtype in _POISON:
        idt, bits = _POISON[t.dtype]
        return int((t.view(idt) == bits).sum().item())
    return 0


def _meta(t):
    return (type(t), t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype, t.device)


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.dtype.is_floating_point or a.dtype.is_complex:
            return bool(((a == b) | (a.isnan() & b.isnan())).all().item())
        return torch.equal(a, b)
    return a == b


def clone_inputs(inputs: dict) -> dict:
    return {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}


def _same_layout(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor) and (x.shape != y.shape or x.dtype != y.dtype or x.stride() != y.stride()):
            return False
        if not isinstance(x, torch.Tensor) and x != y:
            return False
    return True


def compare(out: torch.Tensor, ref: torch.Tensor):
    """(rel_rmse, max_err, n_nonfinite): max_err is max|out-ref| / max|ref|."""
    o = out.detach().to(torch.float64)
    r = ref.detach().to(device=o.device, dtype=torch.float64)
    bad = int((~torch.isfinite(o)).sum().item())
    if bad:
        return float("inf"), float("inf"), bad
    d = o - r
    ref_norm = float(torch.linalg.vector_norm(r).item())
    err_norm = float(torch.linalg.vector_norm(d).item())
    ref_max = float(r.abs().max().item()) if r.numel() else 0.0
    err_max = float(d.abs().max().item()) if d.numel() else 0.0
    rel = err_norm / ref_norm if ref_norm > 0 else err_norm
    mx = err_max / ref_max if ref_max > 0 else err_max
    return rel, mx, 0


def _frames_from(e: BaseException) -> list:
    return traceback.extract_tb(e.__traceback__) if e.__traceback__ else []


def _is_triton_compile_error(e: BaseException) -> bool:
    mod = type(e).__module__ or ""
    name = type(e).__name__
    if mod.startswith("triton.compiler") or name in ("CompilationError", "OutOfResources",
                                                     "CompileTimeAssertionFailure"):
        return True
    if "PassManager::run failed" in str(e):
        return True
    if name == "InterpreterError" and e.__cause__ is not None:
        # the interpreter wraps what would be a compile error on a GPU (shapes, dtypes,
        # constexpr rules) raised from triton.language: classify it the same way
        return any("/triton/language/" in f.filename for f in _frames_from(e.__cause__)[-3:])
    return False


def _short_tb(e: BaseException) -> str:
    frames = [f for f in _frames_from(e) if "/kernels/harness/" not in f.filename]
    cause = e.__cause__
    if cause is not None:
        frames += [f for f in _frames_from(cause) if "/kernels/harness/" not in f.filename]
    frames = [f for f in frames if "/site-packages/" not in f.filename] or frames[-2:]
    lines = [f"  {f.filename}:{f.lineno} in {f.name}: {(f.line or '').strip()}" for f in frames[-4:]]
    return "\n".join(lines)


def classify_exception(e: BaseException, where: str) -> CheckFailure:
    if is_fatal_cuda_error(e):
        raise FatalCudaError(f"{where}: {type(e).__name__}: {e}")
    name = type(e).__name__
    if _is_triton_compile_error(e):
        return CheckFailure("compile_error", f"{where}: Triton compilation failed: {name}: {str(e)[-1500:]}\n"
                            f"{_short_tb(e)}")
    if isinstance(e, torch.cuda.OutOfMemoryError):
        return CheckFailure("error", f"{where}: GPU out of memory: {str(e)[:500]}")
    return CheckFailure("error", f"{where}: {name}: {str(e)[:1500]}\n{_short_tb(e)}")


def call_candidate(fn, inputs: dict, out: dict, config: dict, banned, where: str, sync):
    """Run the candidate once under the ATen audit; verify its contract. Raises CheckFailure."""
    in_view, out_view = dict(inputs), dict(out)
    in_meta = {k: _meta(v) for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    out_meta = {k: _meta(v) for k, v in out.items()}
    audit = HeavyOpAudit(banned)
    flags = timing._torch_flags()
    try:
        with audit:
            ret = fn(in_view, out_view, dict(config))
        sync()
    except (CheckFailure, FatalCudaError, Abandon):
        raise
    except Exception as e:
        raise classify_exception(e, where)
    except BaseException as e:  # SystemExit, KeyboardInterrupt raised by a candidate: not ours to obey
        raise CheckFailure("error", f"{where}: the candidate raised {type(e).__name__}: {e}")
    changed = timing.flag_changes(flags)
    if changed:
        raise CheckFailure("rejected", f"rejected [introspection] {where}: the candidate changed PyTorch global "
                           f"state ({', '.join(changed)}; restored)", "introspection")
    if audit.hits:
        ops = sorted(set(audit.hits))
        raise CheckFailure("rejected", f"rejected [torch-heavy-math] {where}: the candidate ran PyTorch "
                           f"op(s) {', '.join(ops)} (the task's heavy math must be in Triton)", "torch-heavy-math")
    if ret is not None:
        raise CheckFailure("wrong_result", f"{where}: the entry must return None and write into `out` "
                           f"(it returned {type(ret).__name__})", "output-contract")
    for k, t in out.items():
        if out_view.get(k) is not t or set(out_view) != set(out):
            raise CheckFailure("wrong_result", f"{where}: output dict entry {k!r} was replaced or removed; write "
                               f"into the pre-allocated tensors", "output-contract")
        if _meta(t) != out_meta[k] or type(t) is not torch.Tensor:
            raise CheckFailure("wrong_result", f"{where}: output {k!r} was re-pointed, resized or re-typed "
                               f"(must stay a plain torch.Tensor on its storage)", "output-contract")
    for k, t in inputs.items():
        if isinstance(t, torch.Tensor) and (_meta(t) != in_meta[k] or in_view.get(k) is not t):
            raise CheckFailure("wrong_result", f"{where}: input {k!r} was re-pointed or replaced", "input-mutated")


def run_battery(task, fn, config: dict, checked: list, seeds: list, device: str, dtype, sync) -> list[dict]:
    """Returns the check rows; raises CheckFailure on the first failure (with the rows so far attached)."""
    rows: list[dict] = []
    banned = list(task.banned_calls)
    for shape_name, shape in checked:
        cand_in = None
        for seed in seeds:
            inputs = task.make_inputs(shape, seed, device, dtype)
            for k, v in inputs.items():
                if isinstance(v, torch.Tensor) and type(v) is not torch.Tensor:
                    raise RuntimeError(f"task.make_inputs returned a {type(v).__name__} for {k!r}")
            spec = task.output_spec(shape, inputs)
            if cand_in is None or not _same_layout(cand_in, inputs):
                cand_in = clone_inputs(inputs)
            else:  # same buffers, new contents
                for k, v in inputs.items():
                    if isinstance(v, torch.Tensor):
                        cand_in[k].copy_(v)
            ref = None
            per_output: dict[str, dict] = {}
            for order in ("candidate-first", "reference-first"):
                where = f"shape {shape_name} seed {seed} ({order})"
                out = alloc_poisoned(spec, device)
                sync()
                call_candidate(fn, cand_in, out, config, banned, where, sync)
                for k, v in inputs.items():
                    if not _same(cand_in[k], v):
                        raise CheckFailure("wrong_result", f"{where}: the candidate modified input {k!r}",
                                           "input-mutated")
                if ref is None:
                    ref_in = clone_inputs(inputs)
                    ref = task.reference(ref_in)
                    sync()
                    missing = set(spec) - set(ref)
                    if missing:
                        raise RuntimeError(f"task.reference did not return {sorted(missing)}")
                for name, (oshape, odtype) in spec.items():
                    t = out[name]
                    if tuple(t.shape) != tuple(oshape) or t.dtype != odtype:
                        raise CheckFailure("wrong_result", f"{where} output {name}: shape/dtype changed")
                    unwritten = unwritten_count(t)
                    rel, mx, nonfinite = compare(t, ref[name])
                    row = per_output.setdefault(name, {"shape": shape_name, "seed": seed, "output": name,
                                                       "rel_rmse": 0.0, "max_err": 0.0, "passed": True})
                    row["rel_rmse"] = max(row["rel_rmse"], rel)
                    row["max_err"] = max(row["max_err"], mx)
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
                        rows.append(_finite(row))
                        err = CheckFailure("wrong_result", f"{where} output {name}: {msg[0]}", msg[1])
                        err.rows = rows
                        raise err
                del out
            rows.extend(_finite(r) for r in per_output.values())
            del ref
            if seed == seeds[0]:
                rows.extend(_extra_checks(task, fn, config, banned, shape_name, shape, seed, device, dtype, sync))
    return rows


def _extra_checks(task, fn, config, banned, shape_name, shape, seed, device, dtype, sync) -> list[dict]:
    """The task's optional `extra_checks(run_candidate, shape, seed, device, dtype)` hook (e.g. KDA's
    causality check), once per checked shape. run_candidate(inputs) runs the candidate (audited,
    on its own copy of the inputs and fresh poisoned outputs) and returns its outputs."""
    hook = getattr(task.module, "extra_checks", None)
    if hook is None:
        return []
    where = f"shape {shape_name} seed {seed} (extra check)"

    def run_candidate(inputs: dict) -> dict:
        cin = clone_inputs(inputs)
        out = alloc_poisoned(task.output_spec(shape, cin), device)
        call_candidate(fn, cin, out, config, banned, where, sync)
        return out

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


def _finite(row: dict) -> dict:
    for k in ("rel_rmse", "max_err"):
        if not math.isfinite(row[k]):
            row[k] = None  # JSON has no inf
    return row
