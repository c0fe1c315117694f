"""Offline numerics of seeds/chunked_v4.py's two scans (SCAN = plain / transition), no GPU needed.

    python3 tests/emulate_scan.py          (a table; ~30 s on a CPU)

The chunk intermediates are formed in fp32 from the task's inputs (bf16 q, k, v, beta) and stored
in bf16 as the kernels store them (Q^, K^, W, U~, P; gamma in fp32); both scans are then replayed
in PyTorch with the GPU's roundings: bf16 dot operands (the state S included), fp32 accumulation,
    plain:       U = U~ - W S ; O = Q^ S + P bf(U) ; S <- gamma S + K^^T bf(U)
    transition:  M = bf(-K^^T W), Q' = bf(Q^ - P W), O~ = bf(P U~), h = K^^T U~ (fp32, in the scan) ;
                 O = Q' S + O~ ; S <- gamma S + M S + h
and both are compared with the task's fp32 oracle (relative RMSE of o and of the final state).
"""
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))
import task  # noqa: E402

C = 64


def bf(x):
    return x.bfloat16().float()


def intermediates(inp):
    """[B, H, n, C, *] fp32 chunk tensors, stored in bf16 where the kernels store bf16."""
    q, k, v = (inp[n].float() for n in ("q", "k", "v"))
    g, beta = inp["g"].float(), inp["beta"].float()
    B, T, H, K = q.shape
    n = -(-T // C)
    pad = n * C - T

    def ch(x):  # [B, T, H, D] -> [B, H, n, C, D], zero-padded
        x = torch.nn.functional.pad(x, (0, 0, 0, 0, 0, pad))
        return x.reshape(B, n, C, H, -1).permute(0, 3, 1, 2, 4)
    q, k, v, g = ch(q), ch(k), ch(v), ch(g)
    beta = ch(beta[..., None])[..., 0]
    G = g.cumsum(-2)
    d = G[..., :, None, :] - G[..., None, :, :]                      # [.., i, j, K]
    low = torch.tril(torch.ones(C, C, dtype=torch.bool), -1)
    lowe = torch.tril(torch.ones(C, C, dtype=torch.bool))
    e = lambda m: torch.where(m[..., None], d, torch.full_like(d, -torch.inf)).exp()
    a = beta[..., None] * torch.einsum("...id,...jd,...ijd->...ij", k, k, e(low))
    p = K ** -0.5 * torch.einsum("...id,...jd,...ijd->...ij", q, k, e(lowe))
    tm = torch.linalg.inv(torch.eye(C) + a)
    eg = G.exp()
    w = tm @ (beta[..., None] * eg * k)
    ut = tm @ (beta[..., None] * v)
    qh = K ** -0.5 * eg * q
    kh = (G[..., -1:, :] - G).exp() * k
    gam = G[..., -1, :].exp()
    return dict(qh=bf(qh), kh=bf(kh), w=bf(w), ut=bf(ut), p=bf(p), gam=gam, T=T)


def scan(x, h0, mode):
    qh, kh, w, ut, p, gam = (x[n] for n in ("qh", "kh", "w", "ut", "p", "gam"))
    B, H, n, _, K = qh.shape
    V = ut.shape[-1]
    S = h0.float().clone() if h0 is not None else torch.zeros(B, H, K, V)
    khT = kh.transpose(-1, -2)
    if mode == "transition":
        m = bf(-(khT @ w))
        h = khT @ ut
        qp = bf(qh - p @ w)
        ot = bf(p @ ut)
    outs = []
    for c in range(n):
        sb = bf(S)
        if mode == "plain":
            u = ut[:, :, c] - w[:, :, c] @ sb
            o = qh[:, :, c] @ sb + p[:, :, c] @ bf(u)
            S = gam[:, :, c, :, None] * S + khT[:, :, c] @ bf(u)
        else:
            o = qp[:, :, c] @ sb + ot[:, :, c]
            S = gam[:, :, c, :, None] * S + m[:, :, c] @ sb + h[:, :, c]
        outs.append(bf(o))
    o = torch.stack(outs, 2).permute(0, 2, 3, 1, 4).reshape(B, n * C, H, V)[:, :x["T"]]
    return o, S


def main():
    print("| case | plain: rel o / state | transition: rel o / state |")
    print("| --- | ---: | ---: |")
    for name, shape in [("mild T2048 H2", dict(B=1, T=2048, H=2, gate="mild")),
                        ("strong T2048 H2 h0", dict(B=1, T=2048, H=2, gate="strong", h0=True)),
                        ("mild T1000 H2 h0", dict(B=1, T=1000, H=2, gate="mild", h0=True))]:
        inp = task.make_inputs(shape, 5, "cpu", torch.bfloat16)
        ref = task.reference(**{n: x.float() if x.is_floating_point() else x for n, x in inp.items()})
        x = intermediates(inp)
        cells = []
        for mode in ("plain", "transition"):
            o, s = scan(x, inp.get("h0"), mode)
            r = lambda a, b: ((a - b.float()).norm() / b.float().norm()).item()
            cells.append(f"{r(o, ref['o']):.4f} / {r(s, ref['final_state']):.4f}")
        print(f"| {name} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
