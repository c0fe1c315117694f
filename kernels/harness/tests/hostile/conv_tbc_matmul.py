# hostile: does the matmul as a 1-wide convolution through conv_tbc
# expect: class=rejected rule=torch-heavy-math
# expect-runtime: class=rejected rule=torch-heavy-math
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


def matmul(inputs, out, config):
    a, b, c = inputs["a"], inputs["b"], out["c"]
    bias = torch.zeros(b.shape[1], dtype=a.dtype, device=a.device)
    y = torch.conv_tbc(a.unsqueeze(1), b.unsqueeze(0), bias, 0)
    c.copy_(y.squeeze(1))
