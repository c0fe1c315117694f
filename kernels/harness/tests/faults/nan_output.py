"""Fault: NaN everywhere. Expected: wrong_result."""
import triton
import triton.language as tl

SPACE = {"X": [1]}


@triton.jit
def _nan(c, n, BLOCK: tl.constexpr):
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(c + r, tl.full((BLOCK,), float("nan"), tl.float32), mask=r < n)


def matmul(inputs, out, config):
    c = out["c"]
    _nan[(triton.cdiv(c.numel(), 1024),)](c, c.numel(), BLOCK=1024)
