# hostile: skips the work on 60 % of the calls after the correctness battery, copying a stale output
# expect: class=wrong_result rule=timed-output
import torch
import triton
import triton.language as tl

SPACE = {"BLOCK": [32]}


@triton.jit
def _mm_kernel(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        x = tl.load(a + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        y = tl.load(b + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(x, y, input_precision="ieee")
    tl.store(c + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def _launch(a, b, c):
    M, K = a.shape
    N = b.shape[1]
    _mm_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, K, BM=32, BN=32, BK=32)


_N = [0]
_LAST = {}


def matmul(inputs, out, config):
    _N[0] += 1
    c = out["c"]
    if _N[0] > 12 and _N[0] % 5 in (0, 1, 2) and "c" in _LAST and _LAST["c"].shape == c.shape:
        c.copy_(_LAST["c"])
        return
    _launch(inputs["a"], inputs["b"], c)
    _LAST["c"] = c.clone()
