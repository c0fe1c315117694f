# hostile: does the work of every call of a timed batch in the batch's first call (it reaches the other calls' slots through as_strided views of the shared arena), so the per-call median times almost nothing
# expect: class=rejected rule=timer
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



def _round(nbytes):
    return (nbytes + 511) // 512 * 512


def _slot_views(a, b, c):
    """[(a_j, b_j, c_j)] for every slot of the arena, in order (the judge lays slots out as
    i{j}.a, i{j}.b, o{j}.c, each 512-byte aligned)."""
    M, K = a.shape
    N = b.shape[1]
    ra, rb, rc = _round(4 * M * K), _round(4 * K * N), _round(4 * M * N)
    stride = (ra + rb + rc) // 4
    got = []
    for j in range(16):
        base = j * stride
        try:
            aj = a.as_strided((M, K), (K, 1), base)
            bj = b.as_strided((K, N), (N, 1), base + ra // 4)
            cj = c.as_strided((M, N), (N, 1), base + (ra + rb) // 4)
        except RuntimeError:
            break
        got.append((aj, bj, cj))
    return got


def matmul(inputs, out, config):
    a, b, c = inputs["a"], inputs["b"], out["c"]
    slots = _slot_views(a, b, c)
    me = next((j for j, (aj, bj, cj) in enumerate(slots) if torch.equal(aj, a) and torch.equal(bj, b)), None)
    if me is None or len(slots) < 2:
        _launch(a, b, c)
        return
    if me == 0:
        # the first call of a batch: every slot's inputs are already filled; do them all
        for aj, bj, cj in slots:
            _launch(aj, bj, cj)
        return
    if torch.isnan(c).any():
        _launch(a, b, c)  # not done by slot 0 in this batch (the battery uses slot 0 only)
