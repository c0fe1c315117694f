"""Compile-only warm-up (issue #12): a prepared runner compiles its candidate's kernels before its
evaluation, while the GPU times another candidate.

Triton compiles a kernel on its first launch with real arguments. That was the largest share of
an evaluation (seconds per new configuration, against ~1 s of GPU work). A prepared runner
(ahead.py) now also gets a `warm` request: it calls the candidate's entry on tensors it
allocates itself, of the shapes and dtypes the evaluation will use, with every Triton launch
turned into a compile (`JITFunction.run(warmup=True)`: compile, cache, return, launch nothing).
The kernels and specializations the wrapper launches land in the runner's in-memory cache, so
the evaluation's first calls launch at once.

Who does what:
- the judge (`warm_calls`): the tensors' shapes, dtypes and, for small or integer tensors, their
  values, from the task's `make_inputs` with a PUBLIC seed on the CPU (cached per task and shape).
  Values matter where a wrapper derives launch parameters from data (lengths, offsets, a scale
  read with `.item()`); large float tensors only need their shape: their contents are never read
  by a kernel here. Nothing secret is involved.
- the runner (`compile_only`, `warm`): the allocation, the audited calls under compile-only.

What the warm-up can and cannot do to the judgement: it runs the candidate's code, in its own
sandboxed runner, like the import does. It launches no Triton kernel; torch ops a wrapper runs
on the GPU (allocations, small copies) are the same disturbance the import could cause, and
candidate and baseline timings alternate, so both sides see it. A warm-up that changes PyTorch's
global flags or replaces a timer function is rejected like the same change at import. Exceptions
are ignored (garbage data can make a wrapper fail; its evaluation runs the real inputs). A runner
whose warm-up crashed or timed out is not used: the evaluation takes a fresh one.
"""
from __future__ import annotations

import contextlib
import threading

import torch

# A tensor's values travel when it is small (any dtype) or an integer tensor of moderate size:
# those are the ones a wrapper may read on the host. Larger float tensors travel as a shape.
VALUES_MAX_NUMEL = 4096
INT_VALUES_MAX_NUMEL = 1 << 18
REQUEST_MAX_BYTES = 4 * 2**20   # half the protocol's line limit: the largest values go first
PUBLIC_SEED = 7            # the baseline probe's seed (evaluate._probe_baseline): public
WARM_TIMEOUT_S = 300.0     # one warm request, every shape: a compile of many specializations

_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)


# -- judge side -----------------------------------------------------------------------------------
_SPECS: dict[tuple, dict] = {}
_SPECS_LOCK = threading.Lock()


def tensor_spec(t: torch.Tensor) -> dict:
    from .arena import dtype_name
    d = {"shape": list(t.shape), "dtype": dtype_name(t.dtype)}
    n = t.numel()
    if n <= VALUES_MAX_NUMEL or (t.dtype in _INT_DTYPES and n <= INT_VALUES_MAX_NUMEL):
        v = t.detach().to("cpu")
        if v.dtype in (torch.bfloat16, torch.float16) or str(v.dtype).startswith("torch.float8"):
            v = v.float()
        d["values"] = v.reshape(-1).tolist()
    return d


def shape_call(task, name: str, shape: dict, dtype: torch.dtype) -> dict:
    """The warm call of one shape: {where, inputs, outputs, scalars}, cached per task and shape."""
    from .taskload import _stamp
    key = (str(task.dir), _stamp(task.dir), name, str(dtype))
    with _SPECS_LOCK:
        hit = _SPECS.get(key)
    if hit is not None:
        return hit
    inputs = task.make_inputs(shape, PUBLIC_SEED, "cpu", dtype)
    tensors = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    scalars = {k: v for k, v in inputs.items() if not isinstance(v, torch.Tensor)}
    outs = task.output_spec(shape, inputs)
    call = {"where": f"warm-up {name}",
            "inputs": {k: tensor_spec(t) for k, t in tensors.items()},
            "outputs": {k: {"shape": list(s), "dtype": _dt(dt)} for k, (s, dt) in outs.items()},
            "scalars": scalars}
    del inputs, tensors
    with _SPECS_LOCK:
        _SPECS[key] = call
    return call


def _dt(dt) -> str:
    from .arena import dtype_name
    return dtype_name(dt)


def warm_calls(task, shapes: list[tuple[str, dict]], dtype: torch.dtype) -> list[dict]:
    """Every shape an evaluation calls the candidate on (timed and held-out), once each."""
    import json
    seen, out = set(), []
    for name, shape in shapes:
        if name not in seen:
            seen.add(name)
            out.append(shape_call(task, name, shape, dtype))
    out = [dict(c, inputs=dict(c["inputs"])) for c in out]   # the cached specs stay whole
    with_values = sorted(((len(v["values"]), i, k) for i, c in enumerate(out) for k, v in c["inputs"].items()
                          if "values" in v), reverse=True)
    size = len(json.dumps(out))
    for n, i, k in with_values:
        if size <= REQUEST_MAX_BYTES:
            break
        spec = out[i]["inputs"][k]
        size -= len(json.dumps(spec["values"]))
        out[i]["inputs"][k] = {"shape": spec["shape"], "dtype": spec["dtype"]}
    return out


# -- runner side ----------------------------------------------------------------------------------
@contextlib.contextmanager
def compile_only():
    """Within: a Triton launch compiles (and caches) its kernel and returns it without running it;
    an autotuner compiles every config it would benchmark and picks none (its cache stays empty,
    so the evaluation's first call benchmarks on real data); a compiled kernel called directly
    launches nothing."""
    from triton.compiler.compiler import CompiledKernel
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    jit_run, tune_run, ck_getitem = JITFunction.run, Autotuner.run, CompiledKernel.__getitem__

    def run(self, *args, grid, warmup, **kwargs):
        return jit_run(self, *args, grid=grid, warmup=True, **kwargs)

    def tune(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args))
        try:
            configs = self.prune_configs(kwargs) if len(self.configs) > 1 else self.configs
            last = None
            for cfg in configs:
                last = self.fn.run(*args, **kwargs, **cfg.all_kwargs())
            return last
        finally:
            self.nargs = None

    def no_launch(self, grid):
        return lambda *args, **kwargs: None

    JITFunction.run, Autotuner.run, CompiledKernel.__getitem__ = run, tune, no_launch
    try:
        yield
    finally:
        JITFunction.run, Autotuner.run, CompiledKernel.__getitem__ = jit_run, tune_run, ck_getitem


def allocate(spec: dict, device: str) -> torch.Tensor:
    from .arena import dtype_of
    dt = dtype_of(spec["dtype"])
    shape = tuple(spec["shape"])
    vals = spec.get("values")
    if vals is not None:
        return torch.tensor(vals, dtype=torch.float32 if dt.is_floating_point else torch.int64) \
            .to(dtype=dt).reshape(shape).to(device)
    # contents never read by a kernel (none is launched); empty: no fill kernel on the GPU
    return torch.empty(shape, dtype=dt, device=device)
