"""Fault: a kernel that spins forever on a flag nobody sets (the driver never times it out
on a data-center GPU). Expected: timed_out (the daemon kills the process group)."""
import torch
import triton
import triton.language as tl

SPACE = {"X": [1]}


@triton.jit
def _spin(flag, c):
    x = tl.load(flag, volatile=True)
    while x == 0:
        x = tl.load(flag, volatile=True)
    tl.store(c, x.to(tl.float32))


def matmul(inputs, out, config):
    flag = torch.zeros(1, dtype=torch.int32, device=out["c"].device)
    _spin[(1,)](flag, out["c"])
