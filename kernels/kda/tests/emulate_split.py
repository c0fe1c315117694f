"""Offline numerics of v5 (seeds/chunked_split.py): 16-token chunks and the exact sequence split,
replayed in PyTorch with the GPU's roundings (bf16 intermediates and dot operands, the state
included; fp32 accumulation; the combine state_in_{i+1} = M_i state_in_i + h_i in fp32, M_i formed
as the kernel forms it: the homogeneous scan from S = I with bf16 operands), against the task's
fp32 oracle. Reuses tests/emulate_scan.py's intermediates (exact inverse, fp32 A / P: v5's tf32 dots
add ~0.0002-0.0004, as measured for v3 / v4).

    python3 tests/emulate_split.py        (~1 min on a CPU)

Output (2026-12-03): rel-RMSE o / state
    mild T2048 H2      C64 ns1 0.0035/0.0030 | C16 ns1 0.0037/0.0029 | C16 ns4 0.0037/0.0029 | C16 ns8 0.0037/0.0029
    strong T2048 H2 h0 C64 ns1 0.0029/0.0021 | C16 ns1 0.0030/0.0021 | C16 ns4 0.0030/0.0021 | C16 ns8 0.0030/0.0021
    mild T1000 H2 h0   C64 ns1 0.0034/0.0029 | C16 ns1 0.0035/0.0029 | C16 ns4 0.0035/0.0029 | C16 ns8 0.0035/0.0029
"""
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import emulate_scan as es  # noqa: E402
import task  # noqa: E402

bf = es.bf


def scan_range(x, S, c0, c1, zero_u=False):
    """Chunks c0 .. c1-1 from state S (v5's scan: U = U~ - W bf(S), O = Q^ bf(S) + P bf(U),
    S <- gamma S + K^^T bf(U)); zero_u: the homogeneous recurrence (the transition from S = I)."""
    qh, kh, w, ut, p, gam = (x[n] for n in ("qh", "kh", "w", "ut", "p", "gam"))
    khT = kh.transpose(-1, -2)
    outs = []
    for c in range(c0, c1):
        sb = bf(S)
        u = (0 if zero_u else ut[:, :, c]) - w[:, :, c] @ sb
        outs.append(bf(qh[:, :, c] @ sb + p[:, :, c] @ bf(u)))
        S = gam[:, :, c, :, None] * S + khT[:, :, c] @ bf(u)
    return outs, S


def split(x, h0, ns):
    """v5's three passes: segment 0 from h0; h_i from 0 and M_i from I; state_in by the serial
    combine; every segment >= 1 re-run from its state_in (writes O)."""
    B, H, n, C, K = x["qh"].shape
    V = x["ut"].shape[-1]
    seg = -(-n // ns)
    ns = -(-n // seg)
    S0 = h0.float().clone() if h0 is not None else torch.zeros(B, H, K, V)
    outs, st = scan_range(x, S0, 0, seg)
    for i in range(1, ns):
        c0, c1 = i * seg, min(n, (i + 1) * seg)
        o, end = scan_range(x, st, c0, c1)
        outs += o
        if i < ns - 1:
            _, h = scan_range(x, torch.zeros(B, H, K, V), c0, c1)
            _, M = scan_range(x, torch.eye(K).expand(B, H, K, K).clone(), c0, c1, zero_u=True)
            st = M @ st + h
        else:
            st = end
    o = torch.stack(outs, 2).permute(0, 2, 3, 1, 4).reshape(B, n * C, H, V)[:, :x["T"]]
    return o, st


def main():
    r = lambda a, b: ((a - b.float()).norm() / b.float().norm()).item()  # noqa: E731
    for name, shape in [("mild T2048 H2", dict(B=1, T=2048, H=2, gate="mild")),
                        ("strong T2048 H2 h0", dict(B=1, T=2048, H=2, gate="strong", h0=True)),
                        ("mild T1000 H2 h0", dict(B=1, T=1000, H=2, gate="mild", h0=True))]:
        inp = task.make_inputs(shape, 5, "cpu", torch.bfloat16)
        ref = task.reference(**{n: x.float() if x.is_floating_point() else x for n, x in inp.items()})
        cells = []
        for C, ns in ((64, 1), (16, 1), (16, 4), (16, 8)):
            es.C = C
            x = es.intermediates(inp)
            o, s = split(x, inp.get("h0"), ns)
            cells.append(f"C{C} ns{ns} {r(o, ref['o']):.4f}/{r(s, ref['final_state']):.4f}")
        print(f"{name:20s}", " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
