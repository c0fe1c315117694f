"""CPU-mode tests of the KDA task and its Triton seed (TRITON_INTERPRET=1, fp16/fp32, tiny shapes).

What they pin down: the task's oracle against an independent float64 recurrence, the
torch_chunked baseline against the oracle, the seed against the oracle in both gate regimes
with and without an initial state (and at chunk sizes 16/32/64, ragged lengths), that every
output element is written, that inputs are left untouched, and causality.
"""
import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))
import task  # noqa: E402

from kdacheck import assert_matches, load_seed, rel, run  # noqa: E402

seed = load_seed("chunked.py")

def run_seed(inputs, cfg=None):
    return run(seed, inputs, cfg or {})


def shape(B=1, T=77, H=2, K=16, V=16, gate="mild", h0=False):
    return dict(B=B, T=T, H=H, K=K, V=V, gate=gate, h0=h0)


def test_oracle_matches_float64_recurrence():
    inp = task.make_inputs(shape(T=40, gate="strong", h0=True), 3, "cpu", torch.float32)
    ref = task.reference(**inp)
    q, k, v, g, beta, h0 = (inp[n].double() for n in ("q", "k", "v", "g", "beta", "h0"))
    S = h0.clone()
    o = torch.zeros(v.shape, dtype=torch.float64)
    for t in range(q.shape[1]):
        for b in range(q.shape[0]):
            for h in range(q.shape[2]):
                s = S[b, h] * g[b, t, h].exp()[:, None]
                kt = k[b, t, h]
                s = s + beta[b, t, h] * torch.outer(kt, v[b, t, h] - s.T @ kt)
                S[b, h] = s
                o[b, t, h] = s.T @ (q[b, t, h] * q.shape[-1] ** -0.5)
    assert rel(ref["o"], o)[0] < 1e-5
    assert rel(ref["final_state"], S)[0] < 1e-5


def test_inputs_are_sane():
    inp = task.make_inputs(shape(T=200, gate="strong", h0=True), 1, "cpu", torch.float16)
    assert set(inp) == {"q", "k", "v", "g", "beta", "h0"}
    assert torch.allclose(inp["q"].float().norm(dim=-1), torch.ones(1), atol=2e-3)
    assert inp["g"].dtype == torch.float32 and inp["g"].max() <= 0 and inp["g"].min() > -5.0
    assert inp["g"].min() < -3.0                       # the strong regime reaches deep decays
    mild = task.make_inputs(shape(T=200), 1, "cpu", torch.float16)["g"]
    assert -0.2 < mild.mean() < 0 and "h0" not in task.make_inputs(shape(), 1, "cpu", torch.float16)
    assert 0 < inp["beta"].min() and inp["beta"].max() < 1


@pytest.mark.parametrize("gate", ["mild", "strong"])
@pytest.mark.parametrize("h0", [False, True])
def test_torch_chunked_matches_oracle(gate, h0):
    inp = task.make_inputs(shape(B=2, T=150, K=32, V=16, gate=gate, h0=h0), 5, "cpu", torch.float16)
    ref = task.reference(**inp)
    out = task.baseline_torch_chunked(**inp)
    assert_matches(out, ref)


@pytest.mark.parametrize("gate", ["mild", "strong"])
@pytest.mark.parametrize("h0", [False, True])
def test_seed_matches_oracle(gate, h0):
    inp = task.make_inputs(shape(B=2, T=100, K=32, V=32, gate=gate, h0=h0), 7, "cpu", torch.float16)
    before = {n: x.clone() for n, x in inp.items()}
    ref = task.reference(**inp)
    out = run_seed(inp, {"BK": 16, "BV": 16})
    assert_matches(out, ref)
    for n, x in inp.items():
        assert torch.equal(x, before[n]), f"input {n} modified"


@pytest.mark.parametrize("cfg", [
    {"C": 16, "BK": 16, "BV": 16},
    {"C": 32, "BK": 32, "BV": 32, "PREP": "fused"},
    {"C": 64, "BK": 16, "BV": 16, "PREP": "fused", "INTER": "fp32", "SCAN_DOT": "tf32"},
])
def test_seed_configs(cfg):
    inp = task.make_inputs(shape(B=1, T=130, K=32, V=32, gate="strong", h0=True), 9, "cpu", torch.float16)
    ref = task.reference(**inp)
    out = run_seed(inp, cfg)
    assert_matches(out, ref, cfg)


def test_seed_space_is_declared():
    assert set(seed.BEST) == set(seed.SPACE) and seed.DEFAULT == seed.BEST
    for k, v in seed.BEST.items():
        assert v in seed.SPACE[k], k


@pytest.mark.parametrize("gate", ["mild", "strong"])
def test_seed_is_causal(gate):
    inp = task.make_inputs(shape(T=77, gate=gate, h0=True), 11, "cpu", torch.float16)
    res = task.causality_check(lambda i: run_seed(i, {"C": 32, "BK": 16, "BV": 16}), inp, t=40)
    assert res["passed"], res


def test_causality_check_catches_a_leak():
    def leaky(i):
        out = task.reference(**i)
        out["o"] = out["o"] + 1e-3 * out["o"].roll(-1, dims=1)  # reads token t+1
        return out
    inp = task.make_inputs(shape(T=50), 2, "cpu", torch.float16)
    assert not task.causality_check(leaky, inp, t=20)["passed"]


def test_extra_checks_hook():
    rows = task.extra_checks(lambda i: task.baseline_torch_chunked(**i), shape(T=70, gate="strong"), 4,
                             "cpu", torch.float16)
    assert rows and all(r["passed"] for r in rows)
