"""CPU-mode correctness of the MLA seed(s) under Triton's interpreter (fp16 and fp32).

Run: TRITON_INTERPRET=1 .venv/bin/python -m pytest kernels/mla/tests -q
(the module sets TRITON_INTERPRET itself when it is imported first).
"""
import math
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from mlacheck import SEEDS, TOL, TOML, check, compile_sm90, load_seed, ref_any_dims, run, static_violations, task  # noqa: E402,E501

# configs that between them take every code path: direct write, separate merge launch,
# last-CTA merge (the interpreter's stand-in for "spin"), masked and unmasked tiles
CONFIGS = [
    {"BLOCK_H": 64, "BLOCK_N": 16, "COMBINE": "spin", "WAVES": 2},
    {"BLOCK_H": 16, "BLOCK_N": 32, "COMBINE": "launch", "WAVES": 4},
    {"BLOCK_H": 32, "BLOCK_N": 16, "COMBINE": "last", "MIN_SPLIT_TILES": 2},
    {"BLOCK_H": 16, "BLOCK_N": 128, "WAVES": 1, "MIN_SPLIT_TILES": 8},
]


@pytest.mark.parametrize("seed_path", SEEDS, ids=lambda p: p.stem)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
@pytest.mark.parametrize("shape_name", list(TOML["smoke"]))
@pytest.mark.parametrize("ci", range(len(CONFIGS)))
def test_smoke_shapes(seed_path, dtype, shape_name, ci):
    mod = load_seed(seed_path)
    shape = TOML["smoke"][shape_name]
    cfg = CONFIGS[ci]
    for k, v in cfg.items():
        assert v in mod.SPACE[k], f"{k}={v} not in SPACE"
    inputs = task.make_inputs(shape, 7 + ci, "cpu", dtype)
    out = run(mod, inputs, task.output_spec(shape, inputs), cfg)
    check(out, task.reference(**inputs), TOL[dtype])


def test_every_mode_is_exercised():
    mod = load_seed(SEEDS[0])
    modes = set()
    for shape in TOML["smoke"].values():
        B, S, H = shape["B"], shape["S"], shape.get("H", 64)
        for cfg in CONFIGS:
            modes.add(mod.plan(B, H, S, shape.get("D_LATENT", 512), 64, cfg, torch.device("cpu"))["mode"])
    assert {mod.MODE_DIRECT, mod.MODE_LAUNCH, mod.MODE_LAST} <= modes


@pytest.mark.parametrize("dl,dr,H,S", [(24, 8, 3, 50), (40, 20, 20, 33)])
def test_generic_head_dims(dl, dr, H, S):
    """The kernel takes D_LATENT from o and D_ROPE = D - D_LATENT: any sizes, masked to powers of two."""
    mod = load_seed(SEEDS[0])
    g = torch.Generator().manual_seed(dl)
    q = torch.randn((2, 1, H, dl + dr), generator=g)
    kv = torch.randn((2, S, dl + dr), generator=g)
    scale = torch.tensor([1 / math.sqrt(dl + dr)])
    for cfg in CONFIGS[1:3]:
        out = {"o": torch.full((2, 1, H, dl), float("nan")), "lse": torch.full((2, H), float("nan"))}
        mod.mla_decode({"q": q, "kv": kv, "scale": scale}, out, cfg)
        check(out, ref_any_dims(q, kv, scale, dl), TOL[torch.float32])


def test_counters_left_at_zero():
    """The single-launch merges reuse a cached counter buffer: each call must leave it zeroed."""
    mod = load_seed(SEEDS[0])
    shape = TOML["smoke"]["s130_h8"]
    inputs = task.make_inputs(shape, 3, "cpu", torch.float32)
    ref = task.reference(**inputs)
    for _ in range(2):      # the second call only works if the first reset the counters
        out = run(mod, inputs, task.output_spec(shape, inputs), CONFIGS[2])
        check(out, ref, TOL[torch.float32])
    assert int(mod._counters(torch.device("cpu"), 1).abs().sum()) == 0


def test_static_rules():
    for p in SEEDS:
        v = static_violations(p)
        assert not v, v


# ---------------------------------------------------------------------------------------------
# The interpreter accepts code the GPU compiler rejects (run 1 on the H200 lost every config to a
# plain Python global read inside @jit). Triton compiles for sm_90 without a GPU (it ships ptxas),
# so CI also compiles the seed's launch modes for the H200 and checks its resource budget. It runs
# in a subprocess: Triton cannot mix interpreted and compiled kernels in one process.
def test_compiles_for_h200():
    cases = [{"B": B, "S": S, "config": {"COMBINE": combine}}
             for B, S, combine in [(1, 8192, "spin"), (1, 8192, "launch"), (128, 4096, "launch"), (3, 4097, "last")]]
    launch = load_seed(SEEDS[0]).MODE_LAUNCH
    for r in compile_sm90(SEEDS[0], cases):
        assert r["shared"] <= 227 * 1024, r
        assert r["wgmma"] > 0, r
        if r["mode"] == launch:
            assert r["merge_regs"], r   # the second kernel of the launch mode compiles too
