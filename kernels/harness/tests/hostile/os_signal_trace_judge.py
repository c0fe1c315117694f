# hostile: signals its judge and the daemon above it (kill 0, SIGCONT), ptrace-attaches to the judge, and reads the judge's memory (process_vm_readv, /proc/<judge>/mem)
# expect: no-effect
# expect-sandboxed: no-effect
"""Hostile candidate (OS class, tests/tests/isolation.rs, issue #24): signals its judge and the daemon above it (kill 0, SIGCONT), ptrace-attaches to the judge, and reads the judge's memory (process_vm_readv, /proc/<judge>/mem). The signals are harmless ones, enough to prove a way in.
Otherwise the demo's tiled matmul, so that only the attack can decide its verdict; the sandbox
must make the attack fail quietly (the global checks look for any trace of success)."""
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


def _attack():
    imp = torch.sys.modules["importlib"].import_module
    os, signal, ctypes = torch.os, imp("signal"), imp("ctypes")
    done = []
    judge = os.getppid()
    daemon = None
    try:
        with open("/proc/%d/status" % judge) as f:
            daemon = int([l.split()[1] for l in f if l.startswith("PPid:")][0])
    except (OSError, ValueError, IndexError):
        pass
    for who, pid in [("the judge", judge), ("the daemon", daemon)]:
        if not pid or pid <= 1:
            continue
        for sig in (0, signal.SIGCONT):
            try:
                os.kill(pid, sig)
                done.append("signal %d to %s (%d)" % (sig, who, pid))
            except OSError:
                pass
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(16, judge, None, None) == 0:  # PTRACE_ATTACH
        done.append("ptrace attach to the judge")
        libc.ptrace(17, judge, None, None)  # PTRACE_DETACH
    buf = ctypes.create_string_buffer(8)
    libc.process_vm_readv.restype = ctypes.c_ssize_t

    class IoVec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
    # Where the judge maps anything is unknown here (ASLR): EFAULT means the call got as
    # far as the judge's memory, which is the way in; EPERM is the sandbox.
    addr = 0x400000
    local, remote = IoVec(ctypes.addressof(buf), 8), IoVec(addr, 8)
    n = libc.process_vm_readv(judge, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    if n >= 0 or ctypes.get_errno() == 14:  # EFAULT
        done.append("process_vm_readv of the judge")
    try:  # opening it is the access check (PTRACE_MODE_ATTACH)
        open("/proc/%d/mem" % judge, "rb").close()
        done.append("opened /proc/<judge>/mem")
    except OSError:
        pass
    if done:
        raise RuntimeError("HOSTILE" + "-SUCCEEDED " + "; ".join(done))


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
