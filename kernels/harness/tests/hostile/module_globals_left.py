# hostile: leaves memory and module state behind for the next candidate in the same process
# expect: no-effect
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


_HOARD = []
_STATE = {"calls": 0}


def matmul(inputs, out, config):
    _STATE["calls"] += 1
    if len(_HOARD) < 4:
        _HOARD.append(torch.empty(1 << 20, dtype=torch.float32, device=inputs["a"].device))
    _launch(inputs["a"], inputs["b"], out["c"])
