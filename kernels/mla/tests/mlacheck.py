"""Shared by the MLA CPU tests: the task, loading a seed, running it into NaN-poisoned outputs with
its inputs checked unchanged, the comparison against the oracle, a float64 reference for any head
sizes, the static rules, and the sm_90 compile report (compile_sm90.py, in a subprocess)."""
import importlib.util
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")   # before triton is imported (compile_sm90 unsets it)

import pytest  # noqa: E402
import torch  # noqa: E402

__all__ = ["TASK_DIR", "TOML", "SEEDS", "TOL", "task", "load_seed", "outputs", "run", "check", "ref_any_dims",
           "static_violations", "compile_sm90", "check_space", "smoke_case"]

TASK_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TASK_DIR))
import task  # noqa: E402

TOML = tomllib.loads((TASK_DIR / "task.toml").read_text())
SEEDS = [TASK_DIR / s for s in TOML["seeds"]]
# Under the interpreter. fp16: o is rounded to fp16 (2^-11) and p to fp16 before p.V;
# fp32: the interpreter's dots are exact fp32. (The task's own tolerances are for bf16 on the GPU.)
TOL = {torch.float16: (3e-3, 3e-3), torch.float32: (1e-5, 1e-5)}


def load_seed(path: Path):
    spec = importlib.util.spec_from_file_location(f"mla_seed_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def outputs(spec):
    """Outputs poisoned with NaN, so an element never written fails the check."""
    return {k: torch.full(s, float("nan"), dtype=d) for k, (s, d) in spec.items()}


def run(mod, inputs, spec, cfg):
    """Runs a seed's entry point into poisoned outputs; asserts the inputs are unchanged."""
    out = outputs(spec)
    snapshot = {k: v.clone() for k, v in inputs.items()}
    getattr(mod, TOML["entry"])(inputs, out, cfg)
    for k, v in inputs.items():
        assert torch.equal(v, snapshot[k]), f"input {k} modified"
    return out


def check(out, ref, tol):
    rel_tol, max_tol = tol
    for k, r in ref.items():
        a, r = out[k].float(), r.float()
        assert torch.isfinite(a).all(), f"{k}: NaN/Inf (unwritten or broken)"
        rel = ((a - r).norm() / r.norm()).item()
        mx = ((a - r).abs().max() / r.abs().max()).item()
        assert rel <= rel_tol and mx <= max_tol, f"{k}: rel_rmse {rel:.2e}, max {mx:.2e}"


def check_space(mod, configs):
    """DEFAULT and BEST set every SPACE key to one of its values; every test config uses SPACE values only."""
    for name in ("DEFAULT", "BEST"):
        cfg = getattr(mod, name)
        assert set(cfg) == set(mod.SPACE), name
        for k, v in cfg.items():
            assert v in mod.SPACE[k], f"{name}[{k}]={v} not in SPACE"
    for cfg in configs:
        for k, v in cfg.items():
            assert v in mod.SPACE[k], f"{k}={v} not in SPACE"


def smoke_case(mod, shape_name, cfg, dtype, seed, calls=1):
    """One smoke shape through a seed (`calls` times: later calls reuse its cached plans, scratch and counters),
    each checked against the oracle."""
    shape = TOML["smoke"][shape_name]
    inputs = task.make_inputs(shape, seed, "cpu", dtype)
    ref = task.reference(**inputs)
    for _ in range(calls):
        check(run(mod, inputs, task.output_spec(shape, inputs), cfg), ref, TOL[dtype])


def ref_any_dims(q, kv, scale, dl):
    """The math in float64 for any latent / rotary split (the task's shapes fix the rotary part)."""
    s = torch.einsum("bhd,bsd->bhs", q[:, 0].double(), kv.double()) * scale
    lse = torch.logsumexp(s, -1)
    o = torch.einsum("bhs,bsd->bhd", torch.exp(s - lse[..., None]), kv[..., :dl].double())
    return {"o": o.unsqueeze(1), "lse": lse}


def static_violations(path: Path):
    """The harness's static rules on a seed (skips when the harness is not importable)."""
    sys.path.insert(0, str(TASK_DIR.parents[1]))
    try:
        from kernels.harness.static_check import check_source
    except ImportError:
        pytest.skip("harness static checker not importable")
    return [str(x) for x in check_source(path.read_text(), banned_calls=TOML.get("banned_calls", []))]


def compile_sm90(seed: Path, cases):
    """compile_sm90.py's rows for `cases` (skips when Triton's NVIDIA backend is unavailable).
    A subprocess: Triton cannot mix interpreted and compiled kernels in one process."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, str(Path(__file__).with_name("compile_sm90.py")), str(seed),
                          json.dumps(cases)], capture_output=True, text=True, env=env, timeout=300)
    if res.returncode == 3:
        pytest.skip(res.stdout.strip())
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])
