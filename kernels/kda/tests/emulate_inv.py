"""Offline numerics of (I + A)^-1 for seeds/chunked_v4.py's INV_ALGO choices (no GPU needed).

    python3 tests/emulate_inv.py            (prints a table; ~10 s on a CPU)

A is built in float64 from the task's own inputs (make_inputs, both gate regimes) and from an
adversarial case (keys nearly parallel: k = normalise(k0 + 0.1 noise), beta ~ 0.95, no decay),
where |A| is far from small. The inverse is then formed as the kernel forms it: every dot with
operands rounded to tf32 (10-bit mantissa, round to nearest) and fp32 accumulation, the result
rounded to bf16 as the kernel stores Tm; both `doubling` (exact block forward substitution) and
`neumann` (prod_k (I + (-A)^(2^k)), two shorter chains) are compared with the float64 inverse
by the relative Frobenius error of Tm and of W = Tm X for a random X (what the scan consumes).
"""
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))
import task  # noqa: E402

C = 64


def tf32(x):
    """fp32 -> tf32 (round to nearest even on the 13 dropped mantissa bits), kept as fp32."""
    i = x.float().contiguous().view(torch.int32)
    lsb = (i >> 13) & 1
    return ((i + 0x0FFF + lsb) & ~0x1FFF).view(torch.float32)


def dot(a, b):
    return tf32(a) @ tf32(b)


def inv_doubling(a):
    n = a.shape[-1]
    r = torch.arange(n)
    ri, cj = r[:, None], r[None, :]
    t = torch.eye(n).expand_as(a).clone()
    lvl = 0
    while (1 << lvl) < n:
        b = 1 << lvl
        couple = ((ri // (2 * b)) == (cj // (2 * b))) & ((ri // b) % 2 == 1) & ((cj // b) % 2 == 0)
        a_b = torch.where(couple, a, torch.zeros_like(a))
        t = t - a_b if lvl == 0 else t - dot(t, dot(a_b, t))
        lvl += 1
    return t


def inv_neumann(a):
    n = a.shape[-1]
    eye = torch.eye(n)
    p = -a
    t = eye + p
    k = 1
    while (1 << k) < n:
        p = dot(p, p)
        t = dot(t, eye + p)
        k += 1
    return t


def a_matrices(shape, seed, adversarial=False):
    """A per chunk (float64) from the task's inputs: A[i,j] = beta_i sum_d k_id k_jd e^{G_id - G_jd}, j < i."""
    inp = task.make_inputs(shape, seed, "cpu", torch.float32)
    k, g, beta = inp["k"].double(), inp["g"].double(), inp["beta"].double()
    B, T, H, K = k.shape
    if adversarial:
        gen = torch.Generator().manual_seed(seed)
        k0 = torch.randn(B, 1, H, K, generator=gen, dtype=torch.float64)
        k = k0 + 0.1 * torch.randn(B, T, H, K, generator=gen, dtype=torch.float64)
        k = k / k.norm(dim=-1, keepdim=True)
        g = torch.zeros_like(g)
        beta = torch.full_like(beta, 0.95)
    n = T // C
    k = k[:, :n * C].reshape(B, n, C, H, K).permute(0, 3, 1, 2, 4)       # [B, H, n, C, K]
    g = g[:, :n * C].reshape(B, n, C, H, K).permute(0, 3, 1, 2, 4)
    beta = beta[:, :n * C].reshape(B, n, C, H).permute(0, 3, 1, 2)
    G = g.cumsum(-2)
    d = G[..., :, None, :] - G[..., None, :, :]                           # [.., i, j, K]
    low = torch.tril(torch.ones(C, C, dtype=torch.bool), -1)
    e = torch.where(low[..., None], d, torch.full_like(d, -torch.inf)).exp()
    a = beta[..., None] * torch.einsum("...id,...jd,...ijd->...ij", k, k, e)
    return a.reshape(-1, C, C)


def main():
    cases = [("mild   T1024 H4", dict(B=1, T=1024, H=4, gate="mild"), False),
             ("strong T1024 H4", dict(B=1, T=1024, H=4, gate="strong"), False),
             ("parallel keys, no decay", dict(B=1, T=1024, H=4, gate="mild"), True)]
    print("| case | max abs A | doubling: rel err Tm / W | neumann: rel err Tm / W | max abs (-A)^(2^k) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, shape, adv in cases:
        a64 = a_matrices(shape, 3, adv)
        ref = torch.linalg.inv(torch.eye(C, dtype=torch.float64) + a64)
        x = torch.randn(a64.shape[0], C, 64, dtype=torch.float64)
        a = a64.float()
        out = []
        for fn in (inv_doubling, inv_neumann):
            t = fn(a).bfloat16().double()
            e_t = ((t - ref).norm() / ref.norm()).item()
            e_w = ((t @ x - ref @ x).norm() / (ref @ x).norm()).item()
            out.append(f"{e_t:.1e} / {e_w:.1e}")
        p, pmax = -a64, 0.0
        for _ in range(5):
            p = p @ p
            pmax = max(pmax, p.abs().max().item())
        print(f"| {name} | {a64.abs().max().item():.2f} | {out[0]} | {out[1]} | {pmax:.1e} |")


if __name__ == "__main__":
    main()
