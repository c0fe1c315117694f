"""CPU-mode tests of seeds/splitkv_v2.py under Triton's interpreter (fp16 and fp32), plus an sm_90
compile of its predicted-best and register-prefetch configs (no GPU needed).

Run: .venv/bin/python -m pytest kernels/mla/tests -q   (sets TRITON_INTERPRET itself when imported first)
test_mla_cpu.py also runs v1's configs on every seed listed in task.toml; this file covers what is
new in v2: the register-staged prefetch (with and without 32-bit packing), the plan / buffer caches,
the larger merge tiles and input-dtype partials, odd row strides.
"""
import math
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from mlacheck import TASK_DIR, TOL, TOML, check, check_space, compile_sm90, load_seed, outputs, ref_any_dims, smoke_case, static_violations, task  # noqa: E402,E501

V2 = TASK_DIR / "seeds" / "splitkv_v2.py"
MOD = load_seed(V2)

# between them: both prefetch paths, direct / launch / last (the interpreter's spin), both partial
# dtypes, every merge tile size, masked (odd S) and whole tiles, mma with M = 16, 32, 64
CONFIGS = [
    {},                                                                           # DEFAULT == BEST
    {"PREFETCH": "regs", "num_stages": 1},
    {"PREFETCH": "regs", "num_stages": 1, "BLOCK_N": 32, "COMBINE": "launch", "WAVES": 4, "PARTIAL": "fp32"},
    {"PREFETCH": "regs", "num_stages": 1, "BLOCK_H": 16, "BLOCK_N": 16, "COMBINE": "last", "MERGE_TILE": 4096},
    {"PREFETCH": "none", "num_stages": 4, "BLOCK_H": 32, "BLOCK_N": 32, "MIN_SPLIT_TILES": 2, "MERGE_TILE": 32768},
    {"PREFETCH": "regs", "num_stages": 1, "BLOCK_N": 128, "MIN_SPLIT_TILES": 1000},   # one split: direct write
]

def test_space_default_best():
    check_space(MOD, CONFIGS)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
@pytest.mark.parametrize("shape_name", list(TOML["smoke"]))
@pytest.mark.parametrize("ci", range(len(CONFIGS)))
def test_smoke(dtype, shape_name, ci):
    smoke_case(MOD, shape_name, CONFIGS[ci], dtype, 17 + ci)


def test_paths_are_exercised():
    """The smoke shapes x CONFIGS reach every merge mode and both prefetch paths, packed and not."""
    modes, packs = set(), set()
    for shape in TOML["smoke"].values():
        for cfg in CONFIGS:
            P = MOD.plan(shape["B"], shape.get("H", 64), shape["S"], shape.get("D_LATENT", 512), 64, cfg,
                         torch.device("cpu"))
            modes.add(P["mode"])
            packs.add((P["PREFETCH_REGS"], P["PACK"]))
    assert {MOD.MODE_DIRECT, MOD.MODE_LAUNCH, MOD.MODE_LAST} <= modes
    assert {(True, True), (False, False)} <= packs


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
@pytest.mark.parametrize("dl,dr,H,S", [(24, 8, 3, 50), (40, 20, 20, 33), (23, 9, 5, 21)])
def test_generic_dims_and_strides(dtype, dl, dr, H, S):
    """Any head dims (odd ones turn 32-bit packing off), and a cache whose rows are padded (row stride
    != D, odd for the last case): the row stride is a compile-time constant, packing needs it even."""
    g = torch.Generator().manual_seed(dl + S)
    D = dl + dr
    pad = 1 if dl % 2 else 2
    q = torch.randn((2, 1, H, D), generator=g).to(dtype)
    kv_store = torch.randn((2, S, D + pad), generator=g).to(dtype)
    kv = kv_store[:, :, :D]                      # row stride D + pad
    scale = torch.tensor([1 / math.sqrt(D)])
    for cfg in (CONFIGS[1], CONFIGS[3], CONFIGS[4]):
        out = {"o": torch.full((2, 1, H, dl), float("nan"), dtype=dtype),
               "lse": torch.full((2, H), float("nan"))}
        MOD.mla_decode({"q": q, "kv": kv, "scale": scale}, out, cfg)
        check(out, ref_any_dims(q, kv, scale, dl), TOL[dtype])


def test_caches_reused_and_counters_zero():
    """Second call: same plan object, same scratch buffers, counters back at zero, still correct."""
    shape = TOML["smoke"]["s130_h8"]
    inputs = task.make_inputs(shape, 5, "cpu", torch.float16)
    ref = task.reference(**inputs)
    cfg = CONFIGS[3]
    n_plans = None
    for it in range(3):
        out = outputs(task.output_spec(shape, inputs))
        MOD.mla_decode(inputs, out, cfg)
        check(out, ref, TOL[torch.float16])
        if it == 0:
            n_plans, n_scratch = len(MOD._PLANS), len(MOD._SCRATCH)
    assert len(MOD._PLANS) == n_plans and len(MOD._SCRATCH) == n_scratch
    assert int(MOD._counters(torch.device("cpu"), 1).abs().sum()) == 0


def test_single_token_and_partial_tail():
    """S = 1 (one masked tile) and S = BLOCK_N + 1 (a one-row tail tile in its own split)."""
    for S in (1, 17):
        shape = {"B": 2, "S": S, "H": 4, "D_LATENT": 32}
        inputs = task.make_inputs(shape, 9, "cpu", torch.float32)
        for cfg in (CONFIGS[1], CONFIGS[3]):
            out = outputs(task.output_spec(shape, inputs))
            MOD.mla_decode(inputs, out, cfg)
            check(out, task.reference(**inputs), TOL[torch.float32])


def test_static_rules():
    v = static_violations(V2)
    assert not v, v


# ---------------------------------------------------------------------------------------------
# sm_90 compile (subprocess: the interpreter and the compiler do not mix in one process): BEST on the
# goal shapes' launch modes, and the register-prefetch option; the figures go to NOTES.md.
def test_compiles_for_h200():
    regs = {"PREFETCH": "regs", "num_stages": 1, "BLOCK_N": 32}
    cases = [{"B": 1, "S": 8192}, {"B": 64, "S": 8192}, {"B": 1, "S": 8192, "config": {"COMBINE": "launch"}},
             {"B": 3, "S": 4097, "config": {"COMBINE": "last"}}, {"B": 64, "S": 8192, "config": regs}]
    rows = compile_sm90(V2, cases)
    for r in rows:
        assert r["shared"] <= 227 * 1024, r
        assert r["wgmma"] > 0, r
    assert rows[0]["mode"] == MOD.MODE_SPIN and rows[0]["acquire_ld"] >= 1, rows[0]   # acquire not dropped
    best_b64 = rows[1]
    assert best_b64["cp_async"] > 0 and best_b64["stack"] == 0, best_b64     # v1's core: pipelined, no spills
    assert rows[4]["cp_async"] == 0 and rows[4]["shared"] < 120 * 1024, rows[4]  # regs path: one tile in smem
