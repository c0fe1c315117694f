"""CPU-mode tests of seeds/chunked_v2.py (TRITON_INTERPRET=1, fp16 inputs, tiny shapes), plus an
offline sm_90 compile of its kernels (no GPU: Triton's bundled ptxas).

What they pin down: v2 against the fp32 oracle in both gate regimes, with and without an initial
state, ragged lengths, every output written (NaN-poisoned outputs), inputs untouched, bit-exact
causality, the off-BEST configs, the declared SPACE, the harness's static rules, and that BEST
compiles for the H200 within its register / shared-memory budget and uses wgmma.
In CPU mode v2's "lowp" A / P operands are fp32 (no bf16 in the interpreter); the bf16 error
budget is predicted by tests/emulate_v2.py instead.
"""
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))
import task  # noqa: E402

SEED = HERE / "seeds" / "chunked_v2.py"
from kdacheck import assert_matches, assert_space_declared, load_seed, run, static_violations  # noqa: E402

seed = load_seed(SEED.name)
TOML = tomllib.loads((HERE / "task.toml").read_text())

SMALL = {"BV": 16}   # smoke shapes have V = 16 / 32


def run_seed(inputs, cfg=None):
    return run(seed, inputs, dict(SMALL, **(cfg or {})))


def shape(B=1, T=77, H=2, K=16, V=16, gate="mild", h0=False):
    return dict(B=B, T=T, H=H, K=K, V=V, gate=gate, h0=h0)


@pytest.mark.parametrize("gate", ["mild", "strong"])
@pytest.mark.parametrize("h0", [False, True])
def test_v2_matches_oracle(gate, h0):
    inp = task.make_inputs(shape(B=2, T=100, K=32, V=32, gate=gate, h0=h0), 7, "cpu", torch.float16)
    before = {n: x.clone() for n, x in inp.items()}
    ref = task.reference(**inp)
    out = run_seed(inp)
    assert_matches(out, ref)
    for n, x in inp.items():
        assert torch.equal(x, before[n]), f"input {n} modified"


@pytest.mark.parametrize("name", list(TOML["smoke"]))
def test_v2_smoke_shapes(name):
    """The task's own CPU shapes (T = 77 / 100 / 130, K != V), as the harness runs them."""
    inp = task.make_inputs(TOML["smoke"][name], 13, "cpu", torch.float16)
    ref = task.reference(**inp)
    out = run_seed(inp)
    assert_matches(out, ref, name)


def test_v2_strong_gates_at_the_bound():
    """Every step at g = -4.99 (the strong regime's floor): the e^{(BC-1)*5} factor stays finite."""
    inp = task.make_inputs(shape(T=64, K=16, V=16, gate="strong", h0=True), 3, "cpu", torch.float16)
    inp["g"] = torch.full_like(inp["g"], -4.99)
    ref = task.reference(**inp)
    out = run_seed(inp)
    assert_matches(out, ref)


@pytest.mark.parametrize("cfg", [
    {"BK": 32, "PREP_WARPS": 4, "PREP_MAXNREG": 0, "AP_DOT": "lowp", "WU_DOT": "tf32"},
    {"BVP": 32, "INV_DOT": "tf32x3", "INTER": "fp32", "SCAN_DOT": "tf32", "PREP_STAGES": 1},
])
def test_v2_configs(cfg):
    inp = task.make_inputs(shape(B=1, T=130, K=32, V=32, gate="strong", h0=True), 9, "cpu", torch.float16)
    ref = task.reference(**inp)
    out = run_seed(inp, cfg)
    assert_matches(out, ref, cfg)


@pytest.mark.parametrize("gate", ["mild", "strong"])
def test_v2_is_causal(gate):
    inp = task.make_inputs(shape(T=77, gate=gate, h0=True), 11, "cpu", torch.float16)
    for t in (40, 63):      # inside a sub-block, and the last row of a chunk
        res = task.causality_check(lambda i: run_seed(i), inp, t=t)
        assert res["passed"], res


def test_v2_space_is_declared():
    assert_space_declared(seed)


def test_v2_static_rules():
    v = static_violations(SEED, TOML.get("banned_calls", []))
    if v is None:
        pytest.skip("harness static checker not importable")
    assert not v, v


# The interpreter accepts code the GPU compiler rejects; Triton compiles for sm_90 without a GPU (it
# ships ptxas), so compile BEST for the H200 and check its budget: the preparation at <= 128
# registers (2 programs of 8 warps per SM; under that cap ptxas parks a few words on the stack,
# none at BEST, 8-16 bytes at some variants, so up to 32 are allowed), shared memory <= 227 KB, wgmma.
# A subprocess: Triton cannot mix interpreted and compiled kernels in one process.
def test_v2_compiles_for_h200():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, str(Path(__file__).with_name("compile_sm90.py")), str(SEED)],
                         capture_output=True, text=True, env=env, timeout=300)
    if res.returncode == 3:
        pytest.skip(res.stdout.strip())
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    rows = {r["kernel"]: r for r in json.loads(res.stdout.strip().splitlines()[-1])}
    prep, scan = rows["v2._kda_prep_v2"], rows["v2._kda_scan"]
    assert prep["registers"] <= 128 and prep["local"] == 0 and prep["stack"] <= 32, prep
    assert prep["programs_per_sm"] >= 2, prep
    for r in (prep, scan):
        assert r["shared"] <= 227 * 1024 and r["wgmma"], r
