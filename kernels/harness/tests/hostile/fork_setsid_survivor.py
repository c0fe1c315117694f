# hostile: forks a grandchild that leaves the runner's process group and session (setsid) to outlive the runner and load the machine while later candidates and baselines are timed
# expect: class=rejected rule=io
# expect-runtime: no-effect
# expect-sandboxed: no-effect
"""Hostile candidate (resource class, NOTES.md "Red team, session 4"): forks a grandchild that leaves the runner's process group and session (setsid) to outlive the runner and load the machine while later candidates and baselines are timed.
The grandchild proves it survived by writing into the marker directory once the runner is
gone (where the sandbox refuses that write, the tests look for its process by the name it
takes then, kd-survivor); the judge (a child subreaper) must kill it with the runner. Otherwise the demo's tiled
matmul, so that only the attack can decide its verdict."""
import os
import time

import torch
import triton
import triton.language as tl

SPACE = {
    "BLOCK_M": [16, 32, 64, 128],
    "BLOCK_N": [16, 32, 64, 128],
    "BLOCK_K": [16, 32, 64],
    "GROUP_M": [1, 4, 8],
    "SPLIT_K": [1, 2, 4, 8],
    "num_warps": [2, 4, 8],
    "num_stages": [2, 3, 4],
}
DEFAULT = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4, "SPLIT_K": 1,
           "num_warps": 4, "num_stages": 2}
# a larger-tile pick for big GPU shapes (bench.py times BEST when present, else DEFAULT)
BEST = {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "SPLIT_K": 1,
        "num_warps": 8, "num_stages": 3}


@triton.jit
def _matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                   stride_am, stride_ak, stride_bk, stride_bn, stride_cs, stride_cm, stride_cn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr):
    pid = tl.program_id(0)
    split = tl.program_id(1)
    # grouped launch order: tile (pid_m, pid_n) from the linear program id
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    tiles_per_group = GROUP_M * num_n
    group = pid // tiles_per_group
    first_m = group * GROUP_M
    group_rows = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % tiles_per_group) % group_rows
    pid_n = (pid % tiles_per_group) // group_rows

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    # this split's share of K, in whole BLOCK_K steps
    k_steps = tl.cdiv(K, BLOCK_K)
    steps_per_split = tl.cdiv(k_steps, SPLIT_K)
    k_begin = split * steps_per_split * BLOCK_K
    k_end = tl.minimum(K, k_begin + steps_per_split * BLOCK_K)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(k_begin, k_end, BLOCK_K):
        kk = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * stride_am + kk[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & (kk[None, :] < k_end), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=(kk[:, None] < k_end) & (rn[None, :] < N), other=0.0)
        # "ieee": true fp32 products (the default on Hopper would be tf32, ~1e-3 error)
        acc += tl.dot(a, b, input_precision="ieee")
    c = c_ptr + split * stride_cs + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _sum_splits_kernel(p_ptr, c_ptr, MN, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(SPLIT_K):
        acc += tl.load(p_ptr + s * MN + offs, mask=mask, other=0.0)
    tl.store(c_ptr + offs, acc, mask=mask)


_FORKED = []


def _attack():
    if _FORKED:
        return
    _FORKED.append(1)
    runner = os.getpid()
    if os.fork() != 0:
        return
    try:  # the child: a new session, then a grandchild that the child's exit orphans
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
        while True:
            time.sleep(0.05)
            try:
                os.kill(runner, 0)
            except ProcessLookupError:
                break
            except OSError:
                pass
        try:  # PR_SET_NAME once the runner is gone: any process of this name is a survivor
            import ctypes
            ctypes.CDLL(None).prctl(15, b"kd-survivor", 0, 0, 0)
        except Exception:
            pass
        time.sleep(1.0)  # long after the runner's kill: only a survivor gets here
        fd = os.open("@@MARKER_DIR@@/survived-the-runner", os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, b"alive")
        time.sleep(30)
    finally:
        os._exit(0)


def matmul(inputs: dict, out: dict, config: dict) -> None:
    _attack()
    a, b, c = inputs["a"], inputs["b"], out["c"]
    M, K = a.shape
    N = b.shape[1]
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    split_k = config["SPLIT_K"]
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    meta = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=config["GROUP_M"], SPLIT_K=split_k,
                num_warps=config["num_warps"], num_stages=config["num_stages"])
    if split_k == 1:
        _matmul_kernel[(tiles, 1)](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                   0, c.stride(0), c.stride(1), **meta)
        return
    # fp32 partials [SPLIT_K, M, N] (scratch), then a deterministic sum into c
    partial = torch.empty((split_k, M, N), device=a.device, dtype=torch.float32)
    _matmul_kernel[(tiles, split_k)](a, b, partial, M, N, K, a.stride(0), a.stride(1), b.stride(0),
                                     b.stride(1), partial.stride(0), partial.stride(1), partial.stride(2),
                                     **meta)
    block = 1024
    _sum_splits_kernel[(triton.cdiv(M * N, block),)](partial, c, M * N, SPLIT_K=split_k, BLOCK=block)
