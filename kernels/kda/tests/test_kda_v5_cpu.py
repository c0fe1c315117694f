"""CPU-mode tests of seeds/chunked_split.py (v5; TRITON_INTERPRET=1, fp16 / fp32 inputs, tiny shapes),
plus an offline sm_90 compile of every v5 kernel (no GPU: Triton's bundled ptxas).

Every code path:
- preparation: C = 16 (`_prep_c16`, 64-row tiles of 4 chunks) and C = 32 / 64 (`_prep_stk`);
  BK / BVP / INV_DOT variants;
- scan: PASS 0 (no split), the split's PASS 1 (segment 0 exact from h0, segments from zero and, in
  extra column tiles, from the identity: the transition), `_combine` (serial over segments, with
  NS = 2, where its loop is empty, and NS > 2) and PASS 3 (re-run from state_in, last segment
  writes the final state); BV / SCAN_STAGES variants;
- `segments` (the cost model): auto splits at b1_t8192_h16 and not at b8_t4096_h16; explicit
  SPLIT clamps to the chunk count; ragged last segments;
- edge lengths: T = 1, 15, 16, 17, 64, 65, lengths whose last segment is shorter;
- exactness of the split: split = no split to fp32 rounding with gates ~0 (the carried state is
  everything), and with h0;
- bit-exact causality with and without the split, at a segment boundary and inside a chunk.
"""
import os
import sys
import tomllib
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))
import task  # noqa: E402

SEED = HERE / "seeds" / "chunked_split.py"
from kdacheck import (assert_matches, assert_space_declared, compile_sm90_rows, load_seed, run,  # noqa: E402
                      shape, static_violations)

seed = load_seed(SEED.name)
TOML = tomllib.loads((HERE / "task.toml").read_text())


def reldiff(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@pytest.mark.parametrize("gate,h0", [("mild", False), ("strong", True)])
def test_v5_matches_oracle(gate, h0):
    inp = task.make_inputs(shape(B=2, T=100, K=32, V=32, gate=gate, h0=h0), 7, "cpu", torch.float16)
    before = {n: x.clone() for n, x in inp.items()}
    out = run(seed, inp, {})
    assert_matches(out, task.reference(**inp))
    for n, x in inp.items():
        assert torch.equal(x, before[n]), f"input {n} modified"


def test_v5_strong_gates_at_the_bound():
    """Every step at g = -4.99 (the strong regime's floor): C = 16's column factor e^{16 * 4.99}
    stays finite, and so does C = 64's per-sub-block factor."""
    inp = task.make_inputs(shape(T=64, K=16, V=16, gate="strong", h0=True), 3, "cpu", torch.float16)
    inp["g"] = torch.full_like(inp["g"], -4.99)
    for cfg in ({}, {"C": 64}):
        assert_matches(run(seed, inp, cfg), task.reference(**inp), cfg)


@pytest.mark.parametrize("cfg", [
    {"BK": 32, "BVP": 128, "INV_DOT": "tf32x3"},
    {"C": 32, "BK": 16, "BV": 32, "SCAN_STAGES": 2},
    {"C": 64, "BK": 64, "BV": 128, "SCAN_WARPS": 8, "PREP_WARPS": 8},
    {"C": 32, "SPLIT": 4, "BV": 16},
    {"C": 64, "SPLIT": 8},
])
def test_v5_configs(cfg):
    inp = task.make_inputs(shape(B=1, T=130, K=32, V=32, gate="strong", h0=True), 9, "cpu", torch.float16)
    assert_matches(run(seed, inp, cfg), task.reference(**inp), cfg)


# ---- the sequence split -------------------------------------------------------------------------
@pytest.mark.parametrize("T,split,K,V", [
    (130, 4, 32, 32),     # 9 chunks of 16: 3 segments of 3 (combine loop runs once)
    (150, 4, 16, 32),     # 10 chunks: segments of 3, the last of 1; K != V (transition tiles)
    (100, 2, 32, 16),     # NS = 2: the combine's loop is empty; V < K
    (130, 16, 16, 16),    # SPLIT > chunks: one chunk per segment (9 segments)
])
def test_v5_split_equals_no_split(T, split, K, V):
    """Gates ~0 and an initial state: every segment's input state is the whole history, so a wrong
    transition, combine or re-run is visible. fp32 inputs (fp32 intermediates, fp32 interpreter
    dots): split and no split agree to rounding, and both match the oracle."""
    inp = task.make_inputs(shape(B=2, T=T, H=1, K=K, V=V, gate="mild", h0=True), 21, "cpu", torch.float32)
    inp["g"] = inp["g"] * 1e-2                  # mean ~ -5e-4 per step: the state hardly decays
    ref = task.reference(**inp)
    a = run(seed, inp, {"SPLIT": 1})
    b = run(seed, inp, {"SPLIT": split})
    assert_matches(a, ref)
    assert_matches(b, ref, split)
    for n in ("o", "final_state"):
        d = reldiff(b[n], a[n])
        assert d < 1e-5, (n, d)


def test_v5_split_without_h0_and_strong_gates():
    inp = task.make_inputs(shape(B=1, T=200, H=2, K=16, V=16, gate="strong"), 4, "cpu", torch.float16)
    assert_matches(run(seed, inp, {"SPLIT": 4}), task.reference(**inp))


def test_v5_auto_split_runs_at_a_small_shape():
    """`auto` splits a long single-head sequence (B*H = 1 leaves SMs idle): the path the goal
    shapes take, here at K = V = 16."""
    B, T, H, K, V = 1, 1000, 1, 16, 16
    ntc = -(-T // 16)
    assert seed.segments(seed.BEST, B * H, ntc, K, V, min(seed.BEST["BV"], V, K), 16) > 1
    inp = task.make_inputs(shape(B=B, T=T, H=H, K=K, V=V, gate="mild", h0=True), 5, "cpu", torch.float16)
    assert_matches(run(seed, inp, {}), task.reference(**inp))


def test_v5_segments_cost_model():
    """What `auto` picks at the goal shapes (K = V = 128, BV 64): a split where B*H*V/BV programs
    leave most SMs idle (b1 H16 / H32, b2 T16384), none at B*H = 128 (b8_t4096_h16); explicit
    values clamp to the chunk count; at least 8 chunks per segment under auto."""
    cfg = dict(seed.BEST)
    pick = lambda B, T, H: seed.segments(cfg, B * H, T // 16, 128, 128, 64, 16)  # noqa: E731
    assert pick(1, 8192, 16) > 1 and pick(2, 16384, 16) > 1 and pick(1, 8192, 32) > 1
    assert pick(8, 4096, 16) == 1
    assert seed.segments(dict(cfg, SPLIT=16), 1, 9, 128, 128, 64, 16) == 9
    assert seed.segments(dict(cfg, SPLIT=1), 1, 512, 128, 128, 64, 16) == 1
    assert seed.segments(cfg, 1, 40, 128, 128, 64, 16) * 8 <= 40


@pytest.mark.parametrize("T", [1, 15, 16, 17, 64, 65])
def test_v5_edge_lengths(T):
    """Lengths around the chunk (16) and tile (64) sizes, with the split forced (clamped to the
    chunk count: T = 1..16 is one chunk, no split) and without."""
    inp = task.make_inputs(shape(B=2, T=T, H=1, K=16, V=16, gate="strong", h0=True), 13, "cpu", torch.float16)
    ref = task.reference(**inp)
    for cfg in ({}, {"SPLIT": 4}):
        assert_matches(run(seed, inp, cfg), ref, T, cfg)


@pytest.mark.parametrize("cfg,ts", [({}, (29, 47)), ({"SPLIT": 4}, (47, 48, 71)), ({"C": 64, "SPLIT": 2}, (63,))])
def test_v5_is_causal(cfg, ts):
    """Bit-exact prefix under a perturbed suffix: inside a chunk, at a chunk's last row, and at
    segment boundaries (SPLIT 4 at T = 130: segments of 48 tokens). fp32 inputs make o sensitive to
    a one-ulp leak that an fp16 output would round away."""
    inp = task.make_inputs(shape(T=130, K=32, gate="strong", h0=True), 11, "cpu", torch.float32)
    for t in ts:
        res = task.causality_check(lambda i: run(seed, i, cfg), inp, t=t)
        assert res["passed"], (t, res)


def test_v5_space_is_declared():
    assert_space_declared(seed)


def test_v5_static_rules():
    v = static_violations(SEED, TOML.get("banned_calls", []))
    if v is None:
        pytest.skip("harness static checker not importable")
    assert not v, v


# The interpreter accepts code the GPU compiler rejects; Triton compiles for sm_90 without a GPU (it
# ships ptxas). A subprocess: Triton cannot mix interpreted and compiled kernels in one process.
def test_v5_compiles_for_h200():
    rows, why = compile_sm90_rows(SEED)
    if rows is None:
        pytest.skip(why)
    for name in ("v5._prep_c16", "v5._scan(PASS=0)", "v5._scan(PASS=1)", "v5._scan(PASS=3)", "v5._combine"):
        r = rows[name]
        assert r["local"] == 0 and r["stack"] == 0, r
        assert r["shared"] <= 227 * 1024 and r["wgmma"], r
    # the cost model's residency figures are the census's
    assert rows["v5._prep_c16"]["programs_per_sm"] >= 3, rows["v5._prep_c16"]
    assert rows["v5._scan(PASS=0)"]["programs_per_sm"] >= seed.SCAN_PER_SM[16], rows["v5._scan(PASS=0)"]
