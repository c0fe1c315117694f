"""Shared by the KDA CPU tests: load a seed, run it into NaN-poisoned outputs, and measure
it against the oracle with the task's own tolerances (read from task.toml, never restated)."""
import importlib.util
import tomllib
from pathlib import Path

import torch

TASK_DIR = Path(__file__).resolve().parent.parent
_TOL = tomllib.loads((TASK_DIR / "task.toml").read_text())["tolerance"]
TOL = _TOL["rel_rmse"]     # relative RMSE, per output
MAX = _TOL["max_abs"]      # max |err| / max |ref|, per output


def shape(B=1, T=77, H=2, K=16, V=16, gate="mild", h0=False):
    """A shape small enough for the interpreter (T=77: a partial last chunk)."""
    return dict(B=B, T=T, H=H, K=K, V=V, gate=gate, h0=h0)


def load_seed(name: str):
    spec = importlib.util.spec_from_file_location(f"kda_seed_{Path(name).stem}", TASK_DIR / "seeds" / name)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def rel(out, ref):
    """(relative RMSE, max error relative to max |ref|); NaN/Inf fail outright."""
    out, ref = out.float(), ref.float()
    assert torch.isfinite(out).all(), "NaN/Inf in output (unwritten or overflow)"
    d = out - ref
    return (d.norm() / ref.norm()).item(), (d.abs().max() / ref.abs().max()).item()


def assert_matches(out, ref, *context):
    """Both outputs (o, final_state) within the task's tolerances of the oracle's."""
    for n in ("o", "final_state"):
        r, m = rel(out[n], ref[n])
        assert r < TOL and m < MAX, (*context, n, r, m)


def run(seed, inputs, cfg):
    """Runs a seed's `kda` into freshly poisoned outputs and returns them."""
    B, T, H, K = inputs["q"].shape
    V = inputs["v"].shape[-1]
    out = {"o": torch.full((B, T, H, V), float("nan"), dtype=inputs["v"].dtype),
           "final_state": torch.full((B, H, K, V), float("nan"), dtype=torch.float32)}
    seed.kda(inputs, out, cfg)
    return out


def assert_space_declared(seed):
    """BEST == DEFAULT, both inside the declared SPACE, key for key."""
    assert set(seed.BEST) == set(seed.SPACE) and seed.DEFAULT == seed.BEST
    for k, v in seed.BEST.items():
        assert v in seed.SPACE[k], k


def static_violations(path: Path, banned_calls):
    """The harness's static rules on a seed's source (None when the checker is not importable)."""
    import sys
    sys.path.insert(0, str(TASK_DIR.parents[1]))
    try:
        from kernels.harness.static_check import check_source
    except ImportError:
        return None
    return [str(x) for x in check_source(path.read_text(), banned_calls=banned_calls)]


def compile_sm90_rows(seed_path: Path, *args):
    """Runs tests/compile_sm90.py on a seed in a subprocess (Triton cannot mix interpreted and
    compiled kernels in one process): its rows by kernel name, or None (with the reason) when
    Triton's NVIDIA backend is unavailable."""
    import json
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, str(Path(__file__).with_name("compile_sm90.py")), str(seed_path), *args],
                         capture_output=True, text=True, env=env, timeout=600)
    if res.returncode == 3:
        return None, res.stdout.strip()
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    return {r["kernel"]: r for r in json.loads(res.stdout.strip().splitlines()[-1])}, ""
