"""Fault: a store far outside any allocation (illegal memory access). Expected: crashed."""
import triton
import triton.language as tl

SPACE = {"X": [1]}


@triton.jit
def _bad_store(c, OFFSET: tl.constexpr):
    r = tl.arange(0, 16)
    tl.store(c + OFFSET + r, r.to(tl.float32))


def matmul(inputs, out, config):
    _bad_store[(1,)](out["c"], OFFSET=1 << 40)
