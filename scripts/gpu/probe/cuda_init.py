"""CUDA initialisation as a candidate's runner does it: cuInit, a tensor, a Triton kernel."""
import ctypes
import sys

rc = ctypes.CDLL("libcuda.so.1").cuInit(0)
print("cuInit", rc, flush=True)
if rc != 0:
    sys.exit(3)
import torch
import triton
import triton.language as tl


@triton.jit
def _add(x, y, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + i, tl.load(x + i, mask=i < n) + 1, mask=i < n)


x = torch.ones(1000, device="cuda")
y = torch.empty_like(x)
_add[(4,)](x, y, 1000, BLOCK=256)
torch.cuda.synchronize()
print("cuda ok", float(y.sum()), flush=True)
