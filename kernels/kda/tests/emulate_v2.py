"""Error budget of seeds/chunked_v2.py on the GPU, predicted on the CPU (no Triton).

The Triton interpreter has no bf16, so the CPU tests run v2's A / P dots with fp32 operands. This
script replays v2's algorithm in PyTorch with the GPU's roundings at the same points: bf16 A / P
operands (AP_DOT=lowp; BEST uses tf32), tf32 operands for the C x C inverse dots (INV_DOT=tf32), bf16 Tm and right
sides for W / U~ (WU_DOT=lowp), bf16 storage of Q^, K^, W, U~, P, bf16 scan operands; fp32
accumulation everywhere. Prints rel-RMSE of o and of the final state against task.reference.

    python3 emulate_v2.py [T] [H]          (K = V = 128; ~1 min at T = 2048, H = 2)
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import task  # noqa: E402


def bf(x):
    return x.to(torch.bfloat16).float()


def tf32(x):
    """round fp32 to tf32 (10 explicit mantissa bits), to nearest."""
    i = x.contiguous().view(torch.int32)
    return ((i + 0x1000) & ~0x1FFF).view(torch.float32)


def v2_emulated(q, k, v, g, beta, h0=None, ap="bf16", inv="tf32", wu="bf16", C=64, BC=16):
    B, T, H, K = q.shape
    V = v.shape[-1]
    NB, NT = C // BC, -(-T // C)
    pad = NT * C - T
    scale = K ** -0.5

    def chunked(x):
        x = x.float()
        if pad:
            x = F.pad(x, (0, 0) * (x.dim() - 2) + (0, pad))
        return x.transpose(1, 2).reshape(B, H, NT, C, *x.shape[3:])

    qc, kc, vc, gc = chunked(q), chunked(k), chunked(v), chunked(g)
    bc = chunked(beta.unsqueeze(-1)).squeeze(-1)
    rnd_ap = bf if ap == "bf16" else tf32
    rnd_wu = bf if wu == "bf16" else tf32
    g4 = gc.view(B, H, NT, NB, BC, K)
    G = g4.cumsum(-2) + (g4.sum(-2).cumsum(-2) - g4.sum(-2))[..., None, :]
    g_first = G[..., 0, :]                               # [.., NB, K]
    x = G - g_first[..., None, :]
    F_ = x.exp()
    k4, q4 = kc.view_as(g4), qc.view_as(g4)
    colk = k4 * (-x).exp()
    blk = torch.arange(NB)[:, None, None]
    A = torch.zeros(B, H, NT, C, C)
    P = torch.zeros(B, H, NT, C, C)
    R = torch.where(blk == NB - 1, F_, torch.zeros_like(F_))
    for s in range(NB - 1, -1, -1):
        if s < NB - 1:
            R = torch.where(blk == s, F_, R * (g_first[..., s + 1, :] - g_first[..., s, :]).exp()[..., None, None, :])
        cs = rnd_ap(colk[..., s, :, :])                                       # [.., BC, K]
        A[..., s * BC:(s + 1) * BC] = rnd_ap(k4 * R).reshape(B, H, NT, C, K) @ cs.transpose(-1, -2)
        P[..., s * BC:(s + 1) * BC] = rnd_ap(q4 * R).reshape(B, H, NT, C, K) @ cs.transpose(-1, -2)
    i = torch.arange(C)
    L = torch.where(i[None, :] < i[:, None], bc[..., None] * A, 0.0)
    P = bf(torch.where(i[None, :] <= i[:, None], P * scale, 0.0))
    same = (i[:, None] // BC) == (i[None, :] // BC)
    Ld = torch.where(same, L, 0.0)
    N = torch.where(same, 0.0, L)
    eye = torch.eye(C)
    lp, dinv = Ld, eye - Ld                            # fp32 FMA in the kernel
    for _ in range(3):
        lp = lp @ lp
        dinv = dinv @ (eye + lp)
    mm = (lambda a, b: tf32(a) @ tf32(b)) if inv == "tf32" else (lambda a, b: a @ b)
    m1 = mm(dinv, N)
    m2 = mm(m1, m1)
    Tm = rnd_wu(mm(mm(eye - m1, eye + m2), dinv))
    Gf = G.reshape(B, H, NT, C, K)
    W = bf(Tm @ rnd_wu(bf(bc[..., None] * kc * Gf.exp())))
    Ut = bf(Tm @ rnd_wu(bc[..., None] * vc))
    Qh = bf(scale * qc * Gf.exp())
    glast = Gf[..., -1, :]                                            # [B,H,NT,K]
    Kh = bf(kc * (glast[..., None, :] - Gf).exp())
    gam = glast.exp()
    S = h0.float().clone() if h0 is not None else torch.zeros(B, H, K, V)
    o = torch.empty(B, H, NT, C, V)
    for c in range(NT):
        U = Ut[:, :, c] - W[:, :, c] @ bf(S)
        o[:, :, c] = Qh[:, :, c] @ bf(S) + P[:, :, c] @ bf(U)
        S = gam[:, :, c, :, None] * S + Kh[:, :, c].transpose(-1, -2) @ bf(U)
    o = o.reshape(B, H, NT * C, V)[:, :, :T].transpose(1, 2).to(torch.bfloat16)
    return {"o": o, "final_state": S}


def rel(out, ref):
    d = out.float() - ref.float()
    return (d.norm() / ref.norm()).item(), (d.abs().max() / ref.abs().max()).item()


def main():
    T = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
    H = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    torch.backends.cuda.matmul.allow_tf32 = False
    for gate in ("mild", "strong"):
        for h0 in (False, True):
            shape = dict(B=1, T=T, H=H, gate=gate, h0=h0)
            inp = task.make_inputs(shape, 11, "cpu", torch.bfloat16)
            ref = task.reference(**inp)
            for label, kw in (("v2 BEST", {"ap": "tf32"}), ("AP lowp", {}),
                              ("all fp32", {"ap": "fp32", "inv": "fp32", "wu": "fp32"})):
                if label != "v2 BEST" and h0:
                    continue
                if kw.get("ap") == "fp32":
                    kw = {"ap": "tf32", "inv": "fp32", "wu": "tf32"}
                out = v2_emulated(**inp, **kw)
                ro, mo = rel(out["o"], ref["o"])
                rs, ms = rel(out["final_state"], ref["final_state"])
                print(f"{gate:6s} h0={h0!s:5s} {label:9s} o {ro:.4f} (max {mo:.4f})  state {rs:.4f} (max {ms:.4f})",
                      flush=True)


if __name__ == "__main__":
    main()
