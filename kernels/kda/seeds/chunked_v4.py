"""KDA forward, chunked (WY / UT form), v4: v3 with the A / P dots stacked (one dot per K slice).

Math (per batch b, head h; chunk of C = 64 tokens in NB = 4 sub-blocks of BC = 16 rows; G = in-chunk
inclusive cumsum of g, G <= 0, decreasing down the chunk; scale = 1/sqrt(K)):

    A[i,j] = beta_i sum_d k_id k_jd exp(G_id - G_jd)   (j < i)    strictly lower, C x C
    P[i,j] = scale sum_d q_id k_jd exp(G_id - G_jd)    (j <= i)   lower, C x C
    Tm     = (I + A)^-1
    W      = Tm (beta exp(G) * K)        U~ = Tm (beta V)
    Q^     = scale exp(G) * Q            K^ = exp(G_last - G) * K        gamma = exp(G_last)
  scan over chunks, S the state at the chunk's start (v1's `_kda_scan`, unchanged):
    U = U~ - W S ;  O = Q^ S + P U ;  S <- gamma * S + K^^T U

What changed against v3 (seeds/chunked_v3.py: 447-470 us at b1_t8192_h16, of it the preparation
305 us, latency-bound at 2 programs of 4 warps per SM):
  * A / P: v3 issues NB = 4 dots per matrix and K slice (row block r's rows times its column tile),
    each behind its own operand stores, fence and wgmma wait; 32 such steps per chunk at BK = 32.
    v4 stacks them on the contraction axis: X[i, (r, d)] = x_id e^{G_id - p_r} only in slot
    r = block(i), Y[j, (r, d)] = k_jd e^{p_r - G_jd} (the same factors as v3), so A = X Y^T is one
    64 x 64 x (NB BK) dot per matrix and slice: 8 steps per chunk, the same tensor FLOPs, and all
    tiles are 4-D [NB, BC, NB, BK] from the load on (no layout conversion into the stacked form).
    Offline (sm_90, BEST): 8.2 k SASS per thread, 81 barriers (v3: 8.2 k, 133), 255 registers.
  * P = "own" / "role": Q^ and P in programs of their own (one accumulator each), in a first
    launch or interleaved in the same one; INV = "split" as in v3; WU_LOAD = "early": W / U~'s
    right-hand sides loaded before the inverse; INV_ORDER = "left": (T A_b) T.
  * SCAN = "transition": a third launch forms M = -K^^T W, Q' = Q^ - P W, O~ = P U~, and the scan
    runs S <- gamma * S + M S + K^^T U~, O = Q' S + O~: one dependent dot per chunk, not two. The Neumann inverse of v3's SPACE is not offered
    (wrong by 1e12 with nearly parallel keys, tests/emulate_inv.py).
  NOT MEASURED ON A GPU (no device time was left in session 4): BEST is the offline choice.

Numerics (per-step g >= -5 as the task's gates; fp32 and bf16 hold e^{+-88}): as v3.
  exp(G_i - G_j) = exp(G_i - p_r) * exp(p_r - G_j), p_r = G before i's block r: the row factor is
  <= 1; the column factor is a product of factors <= 1 for j before block r (an underflow only
  drops a term below 2^-126) and <= e^{BC*5} = e^80 inside the block (safe for g >= -5.5);
  later blocks are zero columns, later rows of block r are masked after the dot. Every G_i is a
  prefix sum of rows <= i and p_r a sum of rows < r0: no gate after row i reaches row i
  (causality bit-exact). In CPU mode (fp16 inputs: no bf16 in the interpreter), "lowp" A / P
  operands are fp32: fp16 cannot hold e^80.
"""
import torch
import triton
import triton.language as tl

SPACE = {
    "C": [64],                   # chunk length (tokens per scan step)
    "BC": [16],                  # sub-block of the exp split (e^{BC * 5} must fit fp32 and bf16)
    "BK": [32, 16],              # K slice of the A / P pass (stacked tiles: [C, 4 BK])
    "PREP_WARPS": [4, 8],
    "MAXNREG": [0, 168],         # ptxas register cap of the preparation (168: 3 programs of 4 warps/SM)
    "BVP": [64, 32, 128],        # column slice of W = Tm (.) and U~ = Tm (beta V) (WU_LOAD late)
    "WU_LOAD": ["late", "early"],  # W / U~ right-hand sides loaded after the inverse (by slices),
                                 # or whole before it (their latency behind the dot chain)
    "AP_DOT": ["tf32", "lowp"],  # A / P dot operands: fp32 via tf32, or bf16 (fp32 in CPU mode)
    "P": ["fused", "own", "role"],  # Q^ / P in the A program, in a launch of their own (first), or
                                 # in programs of their own in the same launch (grid axis 2)
    "INV": ["fused", "split"],   # (I + A)^-1 and W / U~ in the A program, or in a second launch
    "INV_WARPS": [4, 8],         # warps of that second launch
    "INV_DOT": ["tf32", "tf32x3"],  # precision of the doubling dots of (I + A)^-1
    "INV_ORDER": ["right", "left"],  # T_b A_b T_b as T_b (A_b T_b), or (T_b A_b) T_b (A_b, known
                                 # up front, is a B operand: one operand store per level off the chain)
    "BV": ["auto", 32, 16, 64],  # scan: V tile of the state per program (B*H*V/BV programs);
                                 # auto: 16 while B*H*V/16 <= 132 (H200 SMs), else 32
    "SCAN": ["plain", "transition"],  # v1's scan (2 dependent dots per chunk), or M = -K^^T W,
                                 # Q' = Q^ - P W, O~ = P U~ formed by a third launch (1 dependent dot)
    "SCAN_WARPS": [4, 8],
    "SCAN_STAGES": [3, 2, 1],
}
BEST = {"C": 64, "BC": 16, "BK": 32, "PREP_WARPS": 4, "MAXNREG": 0, "BVP": 64, "WU_LOAD": "late",
        "AP_DOT": "tf32",
        "P": "fused", "INV": "fused", "INV_WARPS": 4, "INV_DOT": "tf32", "INV_ORDER": "right",
        "BV": "auto", "SCAN": "plain", "SCAN_WARPS": 4, "SCAN_STAGES": 3}
DEFAULT = dict(BEST)


@triton.jit
def _ap_slice(qb, kb, gb, betab, q_hat, k_hat, w, gamma, k0, acc_a, acc_p, crow0, grow0, H, HK,
              scale, T, c,
              K: tl.constexpr, C: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr,
              AP_DT: tl.constexpr, DO_A: tl.constexpr, DO_P: tl.constexpr):
    """One K slice: the gate factors, its part of A (DO_A: with K^, beta e^G K, gamma) and of P
    (DO_P: with Q^), all NB row blocks of a matrix in ONE dot (v3: NB dots per matrix and slice).

    The contraction index is (r, d): the row tile of block s sits in slot r = s only (block
    diagonal), the column tile holds every slot's factors,
        Y[j in block s, (r, d)] = k_jd e^{p_r - G_jd}: e_dg (s = r), e_rv e^{p_r - p_{s+1}} (s < r), 0,
    so A += X Y^T gives exactly v3's products (the same factors) with 1 operand store and 1 dot.
    Every tile is 4-D, [NB (block s), BC (row), NB (slot r), BK (channel)], from the load on: the
    slot axis is a broadcast (size 1) until the stacked tiles, so no layout conversion is needed.
    """
    NB: tl.constexpr = C // BC
    out_dt = q_hat.dtype.element_ty
    s4 = tl.arange(0, NB)[:, None, None, None]                          # row block s
    r4 = tl.arange(0, NB)[None, None, :, None]                          # slot r
    row4 = s4 * BC + tl.arange(0, BC)[None, :, None, None]             # [NB, BC, 1, 1] chunk row
    kc4 = (k0 + tl.arange(0, BK))[None, None, None, :]
    ld = c * C + row4 < T
    io = row4 * HK + kc4
    so = crow0 * K + row4 * K + kc4
    gs = tl.load(gb + io, mask=ld, other=0.0).to(tl.float32) * 1.4426950408889634
    ks = tl.load(kb + io, mask=ld, other=0.0).to(tl.float32)
    s_in = tl.cumsum(gs, axis=1)                                        # in-block prefix, <= 0
    tot = tl.sum(gs, axis=1, keep_dims=True)                            # [NB, 1, 1, BK]
    # G just before block r, a masked sum of the EARLIER blocks' totals only (causal: a
    # cumsum(tot) - tot adds block r's later rows and subtracts them again, and the rounding
    # leaks them into row i, v3 run 5), on the slot axis; on the block axis by an exact pick
    p_sl = tl.sum(tl.where(s4 < r4, tot, 0.0), axis=0, keep_dims=True)       # [1, 1, NB, BK]
    p_rw = tl.sum(tl.where(s4 == r4, p_sl, 0.0), axis=2, keep_dims=True)     # [NB, 1, 1, BK]
    p_nx = p_rw + tot                                                   # G at each block's last row
    # every exp from three tiles, each factor <= 1 except e_dg (<= e^{BC * 5}):
    #   e_in = exp(G - p_s), e_rv = exp(p_{s+1} - G), e_dg = exp(p_s - G) (s: the row's block)
    e_in = tl.exp2(s_in)
    e_rv = tl.exp2(tot - s_in)
    e_g = e_in * tl.exp2(p_rw)                                          # exp(G)
    k_rv = ks * e_rv
    if DO_A:
        beta4 = tl.load(betab + row4 * H, mask=ld, other=0.0).to(tl.float32)   # [NB, BC, 1, 1]
        g_last = tl.sum(tot, axis=0, keep_dims=True)                    # [1, 1, 1, BK]
        tl.store(k_hat + so, (k_rv * tl.exp2(g_last - p_nx)).to(out_dt))
        tl.store(w + so, (beta4 * ks * e_g).to(w.dtype.element_ty))
        tl.store(gamma + grow0 * K + kc4, tl.exp2(g_last))
    # rows of block s against columns of block s' <= s: exp(G_i - G_j) = exp(G_i - p_s) exp(p_s - G_j),
    # the column factor e_dg (s' = s) or e_rv exp(p_s - p_{s'+1}) (s' < s, both <= 1: an underflow
    # only drops a term below 2^-126); later blocks are zero, later rows of block s masked after
    f4 = tl.exp2(tl.where(s4 < r4, p_sl - p_nx, float("-inf")))        # [NB, 1, NB, BK], <= 1
    y4 = tl.where(s4 == r4, ks * tl.exp2(-s_in), k_rv * f4)             # [NB, BC, NB, BK]
    y_t = tl.trans(tl.reshape(y4.to(AP_DT), [C, NB * BK]))             # [NB * BK, C]
    if DO_A:
        xk = tl.reshape(tl.where(s4 == r4, ks * e_in, 0.0).to(AP_DT), [C, NB * BK])
        acc_a = tl.dot(xk, y_t, acc_a, input_precision="tf32")
    if DO_P:
        qs = tl.load(qb + io, mask=ld, other=0.0).to(tl.float32)
        tl.store(q_hat + so, (scale * qs * e_g).to(out_dt))
        xq = tl.reshape(tl.where(s4 == r4, qs * e_in, 0.0).to(AP_DT), [C, NB * BK])
        acc_p = tl.dot(xq, y_t, acc_p, input_precision="tf32")
    return acc_a, acc_p


@triton.jit
def _chunk_rows(T, H, NT, C: tl.constexpr, RS: tl.constexpr):
    """This program's chunk c and b*h; the chunk's first token row in [B*T*H], its first row in
    the chunk-contiguous scratch, and its row in gamma. RS = 1: axis 0 interleaves two roles."""
    c = tl.program_id(0) >> RS
    bh = tl.program_id(1)
    tok0 = (((bh // H) * T + c * C) * H + bh % H).to(tl.int64)
    return c, bh, tok0, ((bh * NT + c) * C).to(tl.int64), (bh * NT + c).to(tl.int64)


@triton.jit
def _kda_prep_v4(q, k, v, g, beta, q_hat, k_hat, w, u_tilde, p_mat, gamma, a_scr,
                 T, H, NT, scale,
                 K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, BC: tl.constexpr,
                 BK: tl.constexpr, BVP: tl.constexpr, AP_DT: tl.constexpr, INV_DOT: tl.constexpr,
                 SPLIT: tl.constexpr, DO_P: tl.constexpr, EARLY: tl.constexpr, LEFT: tl.constexpr,
                 ROLES: tl.constexpr):
    """One program per (chunk, b*h): A (and P unless P = "own" / "role"), then the inverse and
    W / U~. ROLES (P = "role"): axis 0 holds 2 programs per chunk, the odd one does Q^ / P (both
    kinds interleaved in one launch: no second launch, its ramp and its tail)."""
    if ROLES:
        if tl.program_id(0) % 2 == 1:
            _qp_body(q, k, g, q_hat, p_mat, T, H, NT, scale, K, C, BC, BK, AP_DT, 1)
        else:
            _a_body(q, k, v, g, beta, q_hat, k_hat, w, u_tilde, p_mat, gamma, a_scr, T, H, NT, scale,
                    K, V, C, BC, BK, BVP, AP_DT, INV_DOT, SPLIT, False, EARLY, LEFT, 1)
    else:
        _a_body(q, k, v, g, beta, q_hat, k_hat, w, u_tilde, p_mat, gamma, a_scr, T, H, NT, scale,
                K, V, C, BC, BK, BVP, AP_DT, INV_DOT, SPLIT, DO_P, EARLY, LEFT, 0)


@triton.jit
def _a_body(q, k, v, g, beta, q_hat, k_hat, w, u_tilde, p_mat, gamma, a_scr, T, H, NT, scale,
            K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, BC: tl.constexpr,
            BK: tl.constexpr, BVP: tl.constexpr, AP_DT: tl.constexpr, INV_DOT: tl.constexpr,
            SPLIT: tl.constexpr, DO_P: tl.constexpr, EARLY: tl.constexpr, LEFT: tl.constexpr,
            RS: tl.constexpr):
    c, bh, tok0, crow0, grow0 = _chunk_rows(T, H, NT, C, RS)
    out_dt = q_hat.dtype.element_ty
    rows = tl.arange(0, C)
    valid = c * C + rows < T
    acc_a = tl.zeros([C, C], dtype=tl.float32)      # sum_d k_i k_j exp(G_i - G_j), block-referenced
    acc_p = tl.zeros([C, C], dtype=tl.float32)      # sum_d q_i k_j exp(G_i - G_j)
    for k0 in tl.static_range(0, K, BK):
        acc_a, acc_p = _ap_slice(q + tok0 * K, k + tok0 * K, g + tok0 * K, beta + tok0, q_hat, k_hat,
                                 w, gamma, k0, acc_a, acc_p, crow0, grow0, H, H * K, scale, T, c,
                                 K, C, BC, BK, AP_DT, True, DO_P)
    ri = rows[:, None]
    cj = rows[None, :]
    if DO_P:
        tl.store(p_mat + crow0 * C + ri * C + cj, tl.where(cj <= ri, acc_p * scale, 0.0).to(out_dt))
    beta_c = tl.load(beta + tok0 + rows * H, mask=valid, other=0.0).to(tl.float32)
    a_mat = tl.where(cj < ri, acc_a * beta_c[:, None], 0.0)
    if SPLIT:                                        # _kda_inv_wu finishes the chunk
        tl.store(a_scr + crow0 * C + ri * C + cj, a_mat)
    else:
        tl.debug_barrier()                           # the parked rows were written by other threads
        _inv_wu(a_mat, beta_c, w, v, u_tilde, tok0, crow0, valid, H, K, V, C, BVP, INV_DOT, EARLY, LEFT)


@triton.jit
def _kda_qp_v4(q, k, g, q_hat, p_mat, T, H, NT, scale,
               K: tl.constexpr, C: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr,
               AP_DT: tl.constexpr):
    """P = "own": Q^ and P in their own launch (one accumulator, fewer live registers)."""
    _qp_body(q, k, g, q_hat, p_mat, T, H, NT, scale, K, C, BC, BK, AP_DT, 0)


@triton.jit
def _qp_body(q, k, g, q_hat, p_mat, T, H, NT, scale,
             K: tl.constexpr, C: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr,
             AP_DT: tl.constexpr, RS: tl.constexpr):
    c, bh, tok0, crow0, grow0 = _chunk_rows(T, H, NT, C, RS)
    acc_p = tl.zeros([C, C], dtype=tl.float32)
    for k0 in tl.static_range(0, K, BK):
        _none, acc_p = _ap_slice(q + tok0 * K, k + tok0 * K, g + tok0 * K, q, q_hat, q_hat, q_hat,
                                 p_mat, k0, acc_p, acc_p, crow0, grow0, H, H * K, scale, T, c,
                                 K, C, BC, BK, AP_DT, False, True)
    rows = tl.arange(0, C)
    ri = rows[:, None]
    cj = rows[None, :]
    tl.store(p_mat + crow0 * C + ri * C + cj, tl.where(cj <= ri, acc_p * scale, 0.0).to(q_hat.dtype.element_ty))


@triton.jit
def _inv_wu(a_mat, beta_c, w, v, u_tilde, tok0, crow0, valid, H,
            K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, BVP: tl.constexpr,
            INV_DOT: tl.constexpr, EARLY: tl.constexpr, LEFT: tl.constexpr):
    """Tm = (I + A)^-1, then W = Tm (beta e^G K) (parked in W's buffer) and U~ = Tm (beta V).

    Blocked doubling: T_2b = T_b - T_b (A_b T_b), A_b coupling each odd b-block to the even one
    before it inside a 2b-block: exact block forward substitution (T_1 = I). v3's alternative, the
    Neumann product prod_k (I + (-A)^(2^k)) (a shorter chain), is not offered: with nearly
    parallel keys and no decay its tf32 powers reach 1e16 and Tm is wrong by 1e12 (relative),
    where doubling keeps 1.4e-3 (tests/emulate_inv.py); random keys would not show it.
    """
    LEVELS: tl.constexpr = 6 if C == 64 else (5 if C == 32 else 4)   # log2(C)
    out_dt = w.dtype.element_ty
    rows = tl.arange(0, C)
    ri = rows[:, None]
    cj = rows[None, :]
    vb = v + tok0 * V
    if EARLY:
        # WU_LOAD = "early": both right-hand sides whole, loaded before the inverse's dot chain so
        # their latency hides behind it (the A / P accumulators are dead by now: registers free)
        kk = tl.arange(0, K)[None, :]
        vv = tl.arange(0, V)[None, :]
        rhs_w = tl.load(w + crow0 * K + ri * K + kk)
        rhs_v = tl.load(vb + ri * (H * V) + vv, mask=valid[:, None], other=0.0)
    t_mat = (ri == cj).to(tl.float32)
    for lvl in tl.static_range(0, LEVELS):
        bsz = 1 << lvl
        couple = ((ri // (2 * bsz)) == (cj // (2 * bsz))) & ((ri // bsz) % 2 == 1) & ((cj // bsz) % 2 == 0)
        a_b = tl.where(couple, a_mat, 0.0)
        if lvl == 0:
            t_mat = t_mat - a_b
        elif LEFT:                                   # (T A_b) T: A_b, fixed, is a B operand
            y = tl.dot(t_mat, a_b, input_precision=INV_DOT)
            t_mat = t_mat - tl.dot(y, t_mat, input_precision=INV_DOT)
        else:                                        # T (A_b T)
            y = tl.dot(a_b, t_mat, input_precision=INV_DOT)
            t_mat = t_mat - tl.dot(t_mat, y, input_precision=INV_DOT)
    t_lp = t_mat.to(out_dt)
    if EARLY:
        tl.debug_barrier()                           # every thread read its rows before any store
        tl.store(w + crow0 * K + ri * K + kk, tl.dot(t_lp, rhs_w.to(out_dt)).to(out_dt))
        u_s = tl.dot(t_lp, (beta_c[:, None] * rhs_v.to(tl.float32)).to(out_dt))
        tl.store(u_tilde + crow0 * V + ri * V + vv, u_s.to(out_dt))
    else:
        for n0 in tl.static_range(0, K, BVP):
            nc = n0 + tl.arange(0, BVP)
            wo = crow0 * K + ri * K + nc[None, :]
            rhs = tl.load(w + wo)
            tl.debug_barrier()                       # every thread read its rows before any store
            tl.store(w + wo, tl.dot(t_lp, rhs.to(out_dt)).to(out_dt))
        for n0 in tl.static_range(0, V, BVP):
            nc = n0 + tl.arange(0, BVP)
            vs = tl.load(vb + ri * (H * V) + nc[None, :], mask=valid[:, None], other=0.0).to(tl.float32)
            u_s = tl.dot(t_lp, (beta_c[:, None] * vs).to(out_dt))
            tl.store(u_tilde + crow0 * V + ri * V + nc[None, :], u_s.to(out_dt))


@triton.jit
def _kda_inv_wu(v, beta, a_scr, w, u_tilde, T, H, NT,
                K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, BVP: tl.constexpr,
                INV_DOT: tl.constexpr, EARLY: tl.constexpr, LEFT: tl.constexpr):
    """INV = "split": the inverse and W / U~ in their own launch (fewer registers per program)."""
    c, bh, tok0, crow0, grow0 = _chunk_rows(T, H, NT, C, 0)
    rows = tl.arange(0, C)
    valid = c * C + rows < T
    beta_c = tl.load(beta + tok0 + rows * H, mask=valid, other=0.0).to(tl.float32)
    a_mat = tl.load(a_scr + crow0 * C + rows[:, None] * C + rows[None, :])
    _inv_wu(a_mat, beta_c, w, v, u_tilde, tok0, crow0, valid, H, K, V, C, BVP, INV_DOT, EARLY, LEFT)


@triton.jit
def _kda_scan(q_hat, k_hat, w, u_tilde, p_mat, gamma, h0, o, h_final,
              T, H, NT,
              K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, BV: tl.constexpr,
              HAS_H0: tl.constexpr, STAGES: tl.constexpr):
    """v1's scan: one program per (b*h, V tile); the [K, BV] state tile stays in fp32 registers."""
    vt = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rows = tl.arange(0, C)
    kr = tl.arange(0, K)
    vc = vt * BV + tl.arange(0, BV)
    s_offs = bh.to(tl.int64) * K * V + kr[:, None] * V + vc[None, :]
    if HAS_H0:
        S = tl.load(h0 + s_offs).to(tl.float32)
    else:
        S = tl.zeros([K, BV], dtype=tl.float32)
    lowp = o.dtype.element_ty
    for c in tl.range(0, NT, num_stages=STAGES):
        crow = (bh * NT + c).to(tl.int64) * C + rows
        kofs = crow[:, None] * K + kr[None, :]
        ut_c = tl.load(u_tilde + crow[:, None] * V + vc[None, :]).to(tl.float32)   # [C, BV]
        gam = tl.load(gamma + (bh * NT + c).to(tl.int64) * K + kr)                  # [K]
        w_c = tl.load(w + kofs).to(lowp)
        qh_c = tl.load(q_hat + kofs).to(lowp)
        kh_c = tl.load(k_hat + kofs).to(lowp)
        p_c = tl.load(p_mat + crow[:, None] * C + rows[None, :]).to(lowp)
        s_op = S.to(lowp)
        u = ut_c - tl.dot(w_c, s_op)                  # U = U~ - W S
        u_op = u.to(lowp)
        o_c = tl.dot(qh_c, s_op)
        o_c = tl.dot(p_c, u_op, o_c)                  # O = Q^ S + P U
        t = c * C + rows
        tok = (b * T + t).to(tl.int64) * H + h
        tl.store(o + tok[:, None] * V + vc[None, :], o_c.to(o.dtype.element_ty),
                 mask=(t < T)[:, None])
        S = gam[:, None] * S + tl.dot(tl.trans(kh_c), u_op)
    tl.store(h_final + s_offs, S)


@triton.jit
def _kda_trans_v4(q_hat, k_hat, w, u_tilde, p_mat, m_mat, o_til, T, H, NT,
                  K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, BN: tl.constexpr):
    """SCAN = "transition": fold W and P into the chunk's transition so that the scan has one
    dependent dot per chunk instead of two:
        M = -K^^T W [K, K] (bf16),  Q' = Q^ - P W (over Q^),  O~ = P U~
    then S <- gamma * S + M S + K^^T U~ and O = Q' S + O~ (the same sums as U = U~ - W S,
    O = Q^ S + P U, S <- gamma * S + K^^T U; K^^T U~ and Q' S do not depend on the chain; P's zeros
    above the diagonal keep O causal, exactly)."""
    c, bh, tok0, crow0, grow0 = _chunk_rows(T, H, NT, C, 0)
    out_dt = q_hat.dtype.element_ty
    rows = tl.arange(0, C)
    kr = tl.arange(0, K)
    ri = rows[:, None]
    mrow = (grow0 * K + kr)[:, None]
    kh_t = tl.trans(tl.load(k_hat + crow0 * K + ri * K + kr[None, :]))       # [K, C]
    p_c = tl.load(p_mat + crow0 * C + ri * C + rows[None, :])                  # [C, C]
    for n0 in tl.static_range(0, K, BN):
        nc = (n0 + tl.arange(0, BN))[None, :]
        w_s = tl.load(w + crow0 * K + ri * K + nc)
        tl.store(m_mat + mrow * K + nc, (-tl.dot(kh_t, w_s)).to(out_dt))
        q_s = tl.load(q_hat + crow0 * K + ri * K + nc).to(tl.float32)
        tl.store(q_hat + crow0 * K + ri * K + nc, (q_s - tl.dot(p_c, w_s)).to(out_dt))
    for n0 in tl.static_range(0, V, BN):
        nc = (n0 + tl.arange(0, BN))[None, :]
        u_s = tl.load(u_tilde + crow0 * V + ri * V + nc)
        tl.store(o_til + crow0 * V + ri * V + nc, tl.dot(p_c, u_s).to(out_dt))


@triton.jit
def _kda_scan_tr(q_hat, k_hat, m_mat, u_tilde, o_til, gamma, h0, o, h_final,
                 T, H, NT,
                 K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, BV: tl.constexpr,
                 HAS_H0: tl.constexpr, STAGES: tl.constexpr):
    """SCAN = "transition": S <- gamma * S + M S + K^^T U~, O = Q' S + O~ (one dependent dot per chunk)."""
    vt = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rows = tl.arange(0, C)
    kr = tl.arange(0, K)
    vc = vt * BV + tl.arange(0, BV)
    s_offs = bh.to(tl.int64) * K * V + kr[:, None] * V + vc[None, :]
    if HAS_H0:
        S = tl.load(h0 + s_offs).to(tl.float32)
    else:
        S = tl.zeros([K, BV], dtype=tl.float32)
    lowp = o.dtype.element_ty
    for c in tl.range(0, NT, num_stages=STAGES):
        gi = (bh * NT + c).to(tl.int64)
        crow = gi * C + rows
        mrow = gi * K + kr
        qp_c = tl.load(q_hat + crow[:, None] * K + kr[None, :]).to(lowp)          # [C, K]  Q'
        oi_c = tl.load(o_til + crow[:, None] * V + vc[None, :]).to(tl.float32)    # [C, BV] O~
        m_c = tl.load(m_mat + mrow[:, None] * K + kr[None, :]).to(lowp)           # [K, K]  M
        kh_c = tl.load(k_hat + crow[:, None] * K + kr[None, :]).to(lowp)          # [C, K]  K^
        ut_c = tl.load(u_tilde + crow[:, None] * V + vc[None, :]).to(lowp)        # [C, BV] U~
        gam = tl.load(gamma + gi * K + kr)
        h_c = tl.dot(tl.trans(kh_c), ut_c)            # K^^T U~: independent of S, off the chain
        s_op = S.to(lowp)
        t = c * C + rows
        tok = (b * T + t).to(tl.int64) * H + h
        tl.store(o + tok[:, None] * V + vc[None, :], tl.dot(qp_c, s_op, oi_c).to(o.dtype.element_ty),
                 mask=(t < T)[:, None])
        S = gam[:, None] * S + tl.dot(m_c, s_op, h_c)
    tl.store(h_final + s_offs, S)


def prep_args(q, cfg):
    """Constexprs of the preparation that depend on the input dtype (CPU mode: fp16)."""
    lowp_ok = q.dtype == torch.bfloat16           # fp16 cannot hold the e^80 column factors
    ap = tl.bfloat16 if (cfg["AP_DOT"] == "lowp" and lowp_ok) else tl.float32
    return dict(AP_DT=ap, INV_DOT=cfg["INV_DOT"], DO_P=cfg["P"] == "fused", EARLY=cfg["WU_LOAD"] == "early",
                LEFT=cfg["INV_ORDER"] == "left", ROLES=cfg["P"] == "role")


def prep_launch(cfg):
    """Launch options of the preparation: warps, and a ptxas register cap (0: none)."""
    opts = dict(num_warps=cfg["PREP_WARPS"])
    if cfg["MAXNREG"]:
        opts["maxnreg"] = cfg["MAXNREG"]
    return opts


def buffers(q, v, cfg):
    """The intermediates, chunk-contiguous per (b, h): Q^, K^, W, U~, P (input dtype), gamma."""
    B, T, H, K = q.shape
    V, C = v.shape[-1], cfg["C"]
    n = B * H * triton.cdiv(T, C)                 # chunks

    def e(rows, cols, dt=q.dtype):
        return torch.empty((rows, cols), device=q.device, dtype=dt)
    tr = cfg["SCAN"] == "transition"
    return dict(q_hat=e(n * C, K), k_hat=e(n * C, K), w=e(n * C, K), u_tilde=e(n * C, V),
                p_mat=e(n * C, C), gamma=e(n, K, torch.float32),
                a_scr=e(n * C, C, torch.float32) if cfg["INV"] == "split" else None,
                m_mat=e(n * K, K) if tr else None, o_til=e(n * C, V) if tr else None)


def prep(q, k, v, g, beta, buf, cfg):
    B, T, H, K = q.shape
    V = v.shape[-1]
    C = cfg["C"]
    NT = triton.cdiv(T, C)
    split = cfg["INV"] == "split"
    bk = min(cfg["BK"], K)
    pa = prep_args(q, cfg)
    if cfg["P"] == "own":                         # Q^ and P first, in their own launch
        _kda_qp_v4[(NT, B * H)](q, k, g, buf["q_hat"], buf["p_mat"], T, H, NT, K ** -0.5,
                                K=K, C=C, BC=cfg["BC"], BK=bk, AP_DT=pa["AP_DT"], **prep_launch(cfg))
    _kda_prep_v4[(NT * (2 if cfg["P"] == "role" else 1), B * H)](
        q, k, v, g, beta, buf["q_hat"], buf["k_hat"], buf["w"], buf["u_tilde"], buf["p_mat"],
        buf["gamma"], buf["a_scr"] if split else buf["gamma"], T, H, NT, K ** -0.5,
        K=K, V=V, C=C, BC=cfg["BC"], BK=bk, BVP=min(cfg["BVP"], K, V), SPLIT=split,
        **pa, **prep_launch(cfg))
    if split:
        inv_wu(v, beta, buf, cfg)
    if cfg["SCAN"] == "transition":               # fold W, U~, P into the chunk's transition
        _kda_trans_v4[(NT, B * H)](buf["q_hat"], buf["k_hat"], buf["w"], buf["u_tilde"], buf["p_mat"],
                                   buf["m_mat"], buf["o_til"], T, H, NT, K=K, V=V, C=C,
                                   BN=min(64, K, V), num_warps=4)


def inv_wu(v, beta, buf, cfg):
    """INV = "split": the second launch of the preparation ((I + A)^-1, W, U~)."""
    B, T, H, V = v.shape
    K, C = buf["w"].shape[1], cfg["C"]
    NT = triton.cdiv(T, C)
    _kda_inv_wu[(NT, B * H)](
        v, beta, buf["a_scr"], buf["w"], buf["u_tilde"], T, H, NT, K=K, V=V, C=C,
        BVP=min(cfg["BVP"], K, V), INV_DOT=cfg["INV_DOT"], EARLY=cfg["WU_LOAD"] == "early",
        LEFT=cfg["INV_ORDER"] == "left", num_warps=cfg["INV_WARPS"])


def scan(q, v, h0, buf, out, cfg):
    B, T, H, K = q.shape
    V = v.shape[-1]
    C = cfg["C"]
    BV = cfg["BV"]
    if BV == "auto":     # one V tile of 16 per program while B*H*V/16 programs fit the 132 SMs
        BV = 16 if B * H * (V // 16) <= 132 else 32
    BV = min(BV, V)
    has_h0 = h0 is not None
    if cfg["SCAN"] == "transition":
        _kda_scan_tr[(V // BV, B * H)](
            buf["q_hat"], buf["k_hat"], buf["m_mat"], buf["u_tilde"], buf["o_til"], buf["gamma"],
            h0.contiguous() if has_h0 else buf["gamma"], out["o"], out["final_state"],
            T, H, triton.cdiv(T, C), K=K, V=V, C=C, BV=BV, HAS_H0=has_h0,
            STAGES=cfg["SCAN_STAGES"], num_warps=cfg["SCAN_WARPS"])
        return
    _kda_scan[(V // BV, B * H)](
        buf["q_hat"], buf["k_hat"], buf["w"], buf["u_tilde"], buf["p_mat"], buf["gamma"],
        h0.contiguous() if has_h0 else buf["gamma"], out["o"], out["final_state"],
        T, H, triton.cdiv(T, C), K=K, V=V, C=C, BV=BV, HAS_H0=has_h0,
        STAGES=cfg["SCAN_STAGES"], num_warps=cfg["SCAN_WARPS"])


def kda(inputs: dict, out: dict, config: dict) -> None:
    cfg = dict(DEFAULT)
    cfg.update(config or {})
    q, k, v, g, beta = (inputs[n].contiguous() for n in ("q", "k", "v", "g", "beta"))
    buf = buffers(q, v, cfg)
    prep(q, k, v, g, beta, buf, cfg)
    scan(q, v, inputs.get("h0"), buf, out, cfg)
