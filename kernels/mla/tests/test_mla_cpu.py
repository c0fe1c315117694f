"""CPU-mode correctness of the MLA seed(s) under Triton's interpreter (fp16 and fp32).

Run: TRITON_INTERPRET=1 .venv/bin/python -m pytest kernels/mla/tests -q
(the module sets TRITON_INTERPRET itself when it is imported first).
"""
import importlib.util
import math
import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

try:
    import tomllib
except ModuleNotFoundError:  # python < 3.11
    import tomli as tomllib  # type: ignore

TASK_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TASK_DIR))
import task  # noqa: E402

TOML = tomllib.loads((TASK_DIR / "task.toml").read_text())
SEEDS = [TASK_DIR / s for s in TOML["seeds"]]


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"mla_seed_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# configs that between them take every code path: direct write, separate merge launch,
# last-CTA merge (the interpreter's stand-in for "spin"), masked and unmasked tiles
CONFIGS = [
    {"BLOCK_H": 64, "BLOCK_N": 16, "COMBINE": "spin", "WAVES": 2},
    {"BLOCK_H": 16, "BLOCK_N": 32, "COMBINE": "launch", "WAVES": 4},
    {"BLOCK_H": 32, "BLOCK_N": 16, "COMBINE": "last", "MIN_SPLIT_TILES": 2},
    {"BLOCK_H": 16, "BLOCK_N": 128, "WAVES": 1, "MIN_SPLIT_TILES": 8},
]
# fp16: o is rounded to fp16 (2^-11) and p to fp16 before p.V; fp32: interpreter dots are exact fp32
TOL = {torch.float16: (3e-3, 3e-3), torch.float32: (1e-5, 1e-5)}


def _run(mod, inputs, shape_out, cfg):
    out = {k: torch.full(s, float("nan"), dtype=d) for k, (s, d) in shape_out.items()}
    snapshot = {k: v.clone() for k, v in inputs.items()}
    getattr(mod, TOML["entry"])(inputs, out, cfg)
    for k, v in inputs.items():
        assert torch.equal(v, snapshot[k]), f"input {k} modified"
    return out


def _check(out, ref, tol):
    rel_tol, max_tol = tol
    for k, r in ref.items():
        a, r = out[k].float(), r.float()
        assert torch.isfinite(a).all(), f"{k}: NaN/Inf (unwritten or broken)"
        rel = ((a - r).norm() / r.norm()).item()
        mx = ((a - r).abs().max() / r.abs().max()).item()
        assert rel <= rel_tol and mx <= max_tol, f"{k}: rel_rmse {rel:.2e}, max {mx:.2e}"


@pytest.mark.parametrize("seed_path", SEEDS, ids=lambda p: p.stem)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
@pytest.mark.parametrize("shape_name", list(TOML["smoke"]))
@pytest.mark.parametrize("ci", range(len(CONFIGS)))
def test_smoke_shapes(seed_path, dtype, shape_name, ci):
    mod = _load(seed_path)
    shape = TOML["smoke"][shape_name]
    cfg = CONFIGS[ci]
    for k, v in cfg.items():
        assert v in mod.SPACE[k], f"{k}={v} not in SPACE"
    inputs = task.make_inputs(shape, 7 + ci, "cpu", dtype)
    out = _run(mod, inputs, task.output_spec(shape, inputs), cfg)
    _check(out, task.reference(**inputs), TOL[dtype])


def test_every_mode_is_exercised():
    mod = _load(SEEDS[0])
    modes = set()
    for shape in TOML["smoke"].values():
        B, S, H = shape["B"], shape["S"], shape.get("H", 64)
        for cfg in CONFIGS:
            modes.add(mod.plan(B, H, S, shape.get("D_LATENT", 512), 64, cfg, torch.device("cpu"))["mode"])
    assert {mod.MODE_DIRECT, mod.MODE_LAUNCH, mod.MODE_LAST} <= modes


def _ref_any_rope(q, kv, scale, dl):
    s = torch.einsum("bhd,bsd->bhs", q[:, 0].double(), kv.double()) * scale
    lse = torch.logsumexp(s, -1)
    o = torch.einsum("bhs,bsd->bhd", torch.exp(s - lse[..., None]), kv[..., :dl].double())
    return {"o": o.unsqueeze(1), "lse": lse}


@pytest.mark.parametrize("dl,dr,H,S", [(24, 8, 3, 50), (40, 20, 20, 33)])
def test_generic_head_dims(dl, dr, H, S):
    """The kernel takes D_LATENT from o and D_ROPE = D - D_LATENT: any sizes, masked to powers of two."""
    mod = _load(SEEDS[0])
    g = torch.Generator().manual_seed(dl)
    q = torch.randn((2, 1, H, dl + dr), generator=g)
    kv = torch.randn((2, S, dl + dr), generator=g)
    scale = torch.tensor([1 / math.sqrt(dl + dr)])
    for cfg in CONFIGS[1:3]:
        out = {"o": torch.full((2, 1, H, dl), float("nan")), "lse": torch.full((2, H), float("nan"))}
        mod.mla_decode({"q": q, "kv": kv, "scale": scale}, out, cfg)
        _check(out, _ref_any_rope(q, kv, scale, dl), TOL[torch.float32])


def test_counters_left_at_zero():
    """The single-launch merges reuse a cached counter buffer: each call must leave it zeroed."""
    mod = _load(SEEDS[0])
    shape = TOML["smoke"]["s130_h8"]
    inputs = task.make_inputs(shape, 3, "cpu", torch.float32)
    ref = task.reference(**inputs)
    for _ in range(2):      # the second call only works if the first reset the counters
        out = _run(mod, inputs, task.output_spec(shape, inputs), CONFIGS[2])
        _check(out, ref, TOL[torch.float32])
    assert int(mod._counters(torch.device("cpu"), 1).abs().sum()) == 0


def test_static_rules():
    sys.path.insert(0, str(TASK_DIR.parents[1]))
    try:
        from kernels.harness.static_check import check_source
    except ImportError:
        pytest.skip("harness static checker not importable")
    for p in SEEDS:
        v = check_source(p.read_text(), banned_calls=TOML.get("banned_calls", []))
        assert not v, [str(x) for x in v]


# ---------------------------------------------------------------------------------------------
# The interpreter accepts code the GPU compiler rejects (run 1 on the H200 lost every config to a
# plain Python global read inside @jit). Triton compiles for sm_90 without a GPU (it ships ptxas),
# so CI also compiles the seed's launch modes for the H200 and checks its resource budget. It runs
# in a subprocess: Triton cannot mix interpreted and compiled kernels in one process.
def test_compiles_for_h200():
    import json
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cases = [{"B": B, "S": S, "config": {"COMBINE": combine}}
             for B, S, combine in [(1, 8192, "spin"), (1, 8192, "launch"), (128, 4096, "launch"), (3, 4097, "last")]]
    res = subprocess.run([sys.executable, str(Path(__file__).with_name("compile_sm90.py")), str(SEEDS[0]),
                          json.dumps(cases)], capture_output=True, text=True, env=env, timeout=300)
    if res.returncode == 3:
        pytest.skip(res.stdout.strip())
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    launch = _load(SEEDS[0]).MODE_LAUNCH
    for r in json.loads(res.stdout.strip().splitlines()[-1]):
        assert r["shared"] <= 227 * 1024, r
        assert r["wgmma"] > 0, r
        if r["mode"] == launch:
            assert r["merge_regs"], r   # the second kernel of the launch mode compiles too
