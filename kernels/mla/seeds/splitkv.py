"""MLA decode (absorbed / MQA form), split-KV, in Triton.

Math, per batch b and head h (one query token):
    s[h, t] = scale * q[h, :] . c[t, :]          (D = D_LATENT + D_ROPE = 576 dims)
    p[h, :] = softmax_t(s[h, :])
    o[h, :] = sum_t p[h, t] * c[t, :D_LATENT]     (512 dims)
    lse[h]  = log sum_t exp(s[h, t])               (natural log)

The latent cache row c[t] is both the key (all 576 dims) and the value (its first 512):
each tile of BLOCK_N rows is loaded ONCE and feeds both tensor-core products.

Pipeline. The KV sequence is cut into NS splits of whole BLOCK_N tiles; one CTA owns
(split, batch, group of BLOCK_H heads) and runs an online softmax over its tiles:
    scores [BLOCK_H, BLOCK_N] = q_nope @ c_nope^T + q_pe @ c_pe^T   (tl.dot, fp32 accumulate)
    acc    [BLOCK_H, D_LATENT] = sum p @ c_nope                       (tl.dot, p cast to the input dtype)
Each split yields a partial (o_j = acc / l_j, lse_j = m_j + log2 l_j, base 2) and the
splits are merged exactly:  lse = log2 sum_j 2^lse_j,  o = sum_j 2^(lse_j - lse) o_j.

The merge ("COMBINE") is a variant switch, because at B=1 launch latency is most of the time:
  "launch": a second kernel merges the partials (two launches, nothing shared).
  "last":   one launch; every CTA bumps a per-(batch, head-group) counter after writing its
            partial and the CTA that arrives last merges the whole group (serial, cheap only
            when the partials are small).
  "spin":   one launch; every CTA of a group waits at a counter barrier, then merges its own
            slice of the group's output (parallel merge). All CTAs must be resident at once,
            so it is used only when the grid fits in one wave (grid <= SM count); otherwise
            the launcher falls back to "launch". Never used in the interpreter (CTAs run one
            after another there, a barrier would never open): "last" is used instead.
With one split (large batches) the kernel writes the final o and lse directly.
"""
import torch
import triton
import triton.language as tl

SPACE = {
    "BLOCK_H": [64, 32, 16],          # heads per CTA: the M dim of both products
    "BLOCK_N": [64, 32, 128, 16],     # KV rows per tile: N of q.c^T, K of p.c
    "num_warps": [8, 4],
    "num_stages": [2, 1, 3],
    "WAVES": [1, 2, 4],               # target CTAs = WAVES * SMs when choosing the split count
    "MIN_SPLIT_TILES": [1, 2, 4, 8, 1000],  # tiles per split at least (bounds partial traffic; 1000: no split)
    "COMBINE": ["spin", "launch", "last"],
    "PARTIAL": ["fp32", "input"],     # dtype of the per-split o_j: fp32, or the input dtype (half the traffic)
    "MERGE_TILE": [4096, 8192, 2048], # elements per merge step (BLOCK_S x heads x dims), fp32 in registers
}
DEFAULT = {"BLOCK_H": 64, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2, "WAVES": 1,
           "MIN_SPLIT_TILES": 1, "COMBINE": "spin", "PARTIAL": "fp32", "MERGE_TILE": 4096}
# Measured best on the H200 (GPU run 2, 36 configs, geomean over the 4 goal shapes: 39 / 278 / 99 /
# 284 us for b1_s8192 / b64_s8192 / b1_s32768 / b128_s4096); the benchmark uses it.
BEST = {"BLOCK_H": 64, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2, "WAVES": 1, "MIN_SPLIT_TILES": 1,
        "COMBINE": "spin", "PARTIAL": "fp32", "MERGE_TILE": 4096}

LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)
MAX_SPLITS = 128          # partial buffers and the merge tile grow with the split count

MODE_DIRECT, MODE_LAUNCH, MODE_LAST, MODE_SPIN = 0, 1, 2, 3


@triton.jit
def _merge_tile(op_ptr, lsep_ptr, o_ptr, lse_ptr, b, h0, d0, H, NS,
                stride_ob, stride_oh, stride_lb,
                DL: tl.constexpr, HC: tl.constexpr, DC: tl.constexpr, BLOCK_S: tl.constexpr):
    """Merge the NS partials of heads [h0, h0+HC) x dims [d0, d0+DC) of batch b.

    Partials: op [B, NS, H, DL] fp32 or input dtype (normalised o_j), lsep [B, NS, H] fp32 (base-2 lse_j).
    All splits are loaded at once ([BLOCK_S, HC, DC]): one memory round trip, not NS.
    """
    offs_s = tl.arange(0, BLOCK_S)
    offs_h = h0 + tl.arange(0, HC)
    offs_d = d0 + tl.arange(0, DC)
    mask_s = offs_s < NS
    mask_h = offs_h < H
    mask_d = offs_d < DL
    row = (b * NS + offs_s[:, None]) * H + offs_h[None, :]                     # [BLOCK_S, HC]
    mask_sh = mask_s[:, None] & mask_h[None, :]
    # .cg: read from L2; other CTAs wrote these (L1 is not coherent across SMs)
    lse_j = tl.load(lsep_ptr + row, mask=mask_sh, other=float("-inf"), cache_modifier=".cg")
    m = tl.max(lse_j, 0)
    m = tl.where(m == float("-inf"), 0.0, m)                                   # padded heads
    w = tl.exp2(lse_j - m[None, :])                                             # [BLOCK_S, HC]
    den = tl.sum(w, 0)
    part = tl.load(op_ptr + row[:, :, None] * DL + offs_d[None, None, :],
                   mask=mask_sh[:, :, None] & mask_d[None, None, :], other=0.0, cache_modifier=".cg").to(tl.float32)
    den = tl.where(mask_h, den, 1.0)                                            # padded heads
    o = tl.sum(w[:, :, None] * part, 0) / den[:, None]                          # [HC, DC]
    o_ptrs = o_ptr + b * stride_ob + offs_h[:, None] * stride_oh + offs_d[None, :]
    tl.store(o_ptrs, o.to(o_ptr.dtype.element_ty), mask=mask_h[:, None] & mask_d[None, :])
    if d0 == 0:
        tl.store(lse_ptr + b * stride_lb + offs_h, (m + tl.log2(den)) * LN2, mask=mask_h)


@triton.jit
def _mla_split_kv(
    q_ptr, kv_ptr, scale_ptr, o_ptr, lse_ptr,
    op_ptr, lsep_ptr, cnt_ptr,
    S, H, NUM_HG, split_len, NS,
    stride_qb, stride_qh, stride_kb, stride_kn, stride_ob, stride_oh, stride_lb,
    DL: tl.constexpr, DR: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_DL: tl.constexpr, BLOCK_DR: tl.constexpr,
    EVEN_N: tl.constexpr, EVEN_D: tl.constexpr,
    MODE: tl.constexpr, HC: tl.constexpr, DC: tl.constexpr, BLOCK_S: tl.constexpr,
):
    pid_s = tl.program_id(0)          # split index
    pid_g = tl.program_id(1)          # batch * NUM_HG + head group
    b = pid_g // NUM_HG
    h0 = (pid_g % NUM_HG) * BLOCK_H

    offs_h = h0 + tl.arange(0, BLOCK_H)
    offs_dl = tl.arange(0, BLOCK_DL)
    offs_dr = tl.arange(0, BLOCK_DR)
    offs_n0 = tl.arange(0, BLOCK_N)
    mask_h = offs_h < H
    mask_dl = offs_dl < DL
    mask_dr = offs_dr < DR

    # the query tile stays resident for the whole split: [BLOCK_H, DL] and [BLOCK_H, DR]
    q_rows = q_ptr + b * stride_qb + offs_h[:, None] * stride_qh
    q_nope = tl.load(q_rows + offs_dl[None, :], mask=mask_h[:, None] & mask_dl[None, :], other=0.0)
    q_pe = tl.load(q_rows + DL + offs_dr[None, :], mask=mask_h[:, None] & mask_dr[None, :], other=0.0)
    # softmax in base 2: fold scale * log2(e) into the fp32 scores (q stays unrounded)
    qk_scale = tl.load(scale_ptr) * LOG2E

    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_DL], tl.float32)

    start = pid_s * split_len
    end = tl.minimum(start + split_len, S)
    kv_base = kv_ptr + b * stride_kb
    for n0 in range(start, end, BLOCK_N):
        offs_n = n0 + offs_n0
        rows = kv_base + offs_n[:, None] * stride_kn
        if EVEN_N and EVEN_D:
            c_nope = tl.load(rows + offs_dl[None, :])
            c_pe = tl.load(rows + DL + offs_dr[None, :])
        else:
            mask_n = offs_n < end
            c_nope = tl.load(rows + offs_dl[None, :], mask=mask_n[:, None] & mask_dl[None, :], other=0.0)
            c_pe = tl.load(rows + DL + offs_dr[None, :], mask=mask_n[:, None] & mask_dr[None, :], other=0.0)
        # one tile, two uses: key (all D dims) ...
        s = tl.dot(q_nope, tl.trans(c_nope))
        s = tl.dot(q_pe, tl.trans(c_pe), s)
        s = s * qk_scale
        if not EVEN_N:
            s = tl.where((offs_n < end)[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))       # finite: every tile holds >= 1 valid row
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        # ... and value (its first DL dims)
        acc = tl.dot(p.to(c_nope.dtype), c_nope, acc * alpha[:, None])
        m_i = m_new

    if MODE == 0:
        # one split: this CTA owns the whole sequence, write the answer
        o = acc / l_i[:, None]
        o_ptrs = o_ptr + b * stride_ob + offs_h[:, None] * stride_oh + offs_dl[None, :]
        tl.store(o_ptrs, o.to(o_ptr.dtype.element_ty), mask=mask_h[:, None] & mask_dl[None, :])
        tl.store(lse_ptr + b * stride_lb + offs_h, (m_i + tl.log2(l_i)) * LN2, mask=mask_h)
    else:
        # partial of split pid_s: normalised o_j (fp32) and base-2 lse_j; an empty split
        # (l = 0, cannot happen with the launcher's split sizes) would write o_j = 0, lse_j = -inf
        l_safe = tl.where(l_i == 0.0, 1.0, l_i)
        row = (b * NS + pid_s) * H + offs_h
        tl.store(op_ptr + row[:, None] * DL + offs_dl[None, :], (acc / l_safe[:, None]).to(op_ptr.dtype.element_ty),
                 mask=mask_h[:, None] & mask_dl[None, :])
        tl.store(lsep_ptr + row, tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(l_safe)), mask=mask_h)

        N_D: tl.constexpr = BLOCK_DL // DC
        N_ITEMS: tl.constexpr = (BLOCK_H // HC) * N_D
        if MODE == 2:
            # last arrival merges the group. The barrier orders every thread's partial stores
            # before the (gpu-scope, release) counter bump; acquire on the other side.
            tl.debug_barrier()
            arrived = tl.atomic_add(cnt_ptr + pid_g, 1, sem="acq_rel", scope="gpu")
            if arrived == NS - 1:
                for it in range(0, N_ITEMS):
                    _merge_tile(op_ptr, lsep_ptr, o_ptr, lse_ptr, b, h0 + (it // N_D) * HC, (it % N_D) * DC,
                                H, NS, stride_ob, stride_oh, stride_lb, DL, HC, DC, BLOCK_S)
                tl.atomic_xchg(cnt_ptr + pid_g, 0)             # ready for the next launch
        elif MODE == 3:
            # barrier over the NS CTAs of this group (all resident: grid <= SMs), then each
            # merges its share of the group's [BLOCK_H, DL] output
            tl.debug_barrier()
            arrived = tl.atomic_add(cnt_ptr + pid_g, 1, sem="acq_rel", scope="gpu") + 1
            while arrived < NS:
                arrived = tl.atomic_add(cnt_ptr + pid_g, 0, sem="acquire", scope="gpu")
            tl.debug_barrier()
            for it in range(pid_s, N_ITEMS, NS):
                _merge_tile(op_ptr, lsep_ptr, o_ptr, lse_ptr, b, h0 + (it // N_D) * HC, (it % N_D) * DC,
                            H, NS, stride_ob, stride_oh, stride_lb, DL, HC, DC, BLOCK_S)
            # second counter: the last CTA to leave the barrier resets both for the next launch
            n_groups = tl.num_programs(1)           # departures live after the arrivals
            left = tl.atomic_add(cnt_ptr + n_groups + pid_g, 1, sem="acq_rel", scope="gpu")
            if left == NS - 1:
                tl.atomic_xchg(cnt_ptr + pid_g, 0)
                tl.atomic_xchg(cnt_ptr + n_groups + pid_g, 0)


@triton.jit
def _mla_merge(op_ptr, lsep_ptr, o_ptr, lse_ptr, H, NS, NUM_HC,
               stride_ob, stride_oh, stride_lb,
               DL: tl.constexpr, HC: tl.constexpr, DC: tl.constexpr, BLOCK_S: tl.constexpr):
    pid = tl.program_id(0)            # batch * NUM_HC + head chunk
    b = pid // NUM_HC
    _merge_tile(op_ptr, lsep_ptr, o_ptr, lse_ptr, b, (pid % NUM_HC) * HC, tl.program_id(1) * DC, H, NS,
                stride_ob, stride_oh, stride_lb, DL, HC, DC, BLOCK_S)


def _next_pow2(x: int) -> int:
    return 1 << max(0, (int(x) - 1).bit_length())


_SM_COUNT: dict = {}
_COUNTERS: dict = {}


def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return 4                      # interpreter: a pretend GPU, so small shapes still split
    key = device.index if device.index is not None else torch.cuda.current_device()
    if key not in _SM_COUNT:
        _SM_COUNT[key] = torch.cuda.get_device_properties(key).multi_processor_count
    return _SM_COUNT[key]


def _counters(device: torch.device, n: int) -> torch.Tensor:
    """Per-group arrival/departure counters. Zeroed once; every kernel leaves them at zero."""
    key = str(device)
    buf = _COUNTERS.get(key)
    if buf is None or buf.numel() < n:
        buf = torch.zeros(max(n, 1024), dtype=torch.int32, device=device)
        _COUNTERS[key] = buf
    return buf


def _merge_shape(block_s: int, heads: int, dims: int, tile: int):
    """Tile [block_s, HC, DC] of at most `tile` elements for merging the partials."""
    dc = min(dims, 64)
    while block_s * dc > tile and dc > 16:
        dc //= 2
    hc = max(1, min(heads, tile // (block_s * dc)))
    return 1 << (hc.bit_length() - 1), dc       # largest power of two <= hc


def plan(B: int, H: int, S: int, DL: int, DR: int, config: dict, device: torch.device) -> dict:
    """The launch plan for one call: tiles, split count and merge mode (pure host arithmetic)."""
    cfg = dict(DEFAULT)
    cfg.update(config or {})
    BLOCK_N = int(cfg["BLOCK_N"])
    BLOCK_H = min(int(cfg["BLOCK_H"]), max(16, _next_pow2(H)))   # tl.dot needs M >= 16
    NUM_HG = triton.cdiv(H, BLOCK_H)
    groups = B * NUM_HG
    n_sm = _sm_count(device)

    # split count: enough CTAs to fill WAVES waves, each split >= MIN_SPLIT_TILES tiles
    max_ns = min(MAX_SPLITS, triton.cdiv(S, BLOCK_N * int(cfg["MIN_SPLIT_TILES"])))
    ns = max(1, min(triton.cdiv(int(cfg["WAVES"]) * n_sm, groups), max_ns))
    combine = cfg["COMBINE"]
    if combine == "spin":
        if device.type != "cuda":
            combine = "last"
        elif groups * ns > n_sm:
            ns_fit = n_sm // groups   # one wave or nothing: the barrier needs every CTA resident
            if ns_fit >= 2:
                ns = ns_fit
            else:
                combine = "launch"
    # whole tiles per split; recount so that no split is empty
    split_len = triton.cdiv(triton.cdiv(S, ns), BLOCK_N) * BLOCK_N
    ns = triton.cdiv(S, split_len)
    mode = MODE_DIRECT if ns == 1 else {"launch": MODE_LAUNCH, "last": MODE_LAST, "spin": MODE_SPIN}[combine]
    BLOCK_S = max(2, _next_pow2(ns))
    BLOCK_DL = max(16, _next_pow2(DL))
    HC, DC = _merge_shape(BLOCK_S, BLOCK_H, BLOCK_DL, int(cfg["MERGE_TILE"]))
    return dict(BLOCK_N=BLOCK_N, BLOCK_H=BLOCK_H, NUM_HG=NUM_HG, groups=groups, ns=ns, split_len=split_len,
                mode=mode, BLOCK_S=BLOCK_S, BLOCK_DL=BLOCK_DL, BLOCK_DR=max(16, _next_pow2(DR)), HC=HC, DC=DC,
                num_warps=int(cfg["num_warps"]), num_stages=int(cfg["num_stages"]),
                partial_fp32=cfg["PARTIAL"] == "fp32")


def mla_decode(inputs: dict, out: dict, config: dict) -> None:
    q, kv, scale = inputs["q"], inputs["kv"], inputs["scale"]
    o, lse = out["o"], out["lse"]
    B, _, H, D = q.shape
    S = kv.shape[1]
    DL = o.shape[-1]
    DR = D - DL
    assert S >= 1 and DR >= 1 and q.stride(-1) == 1 and kv.stride(-1) == 1 and o.stride(-1) == 1
    P = plan(B, H, S, DL, DR, config, q.device)
    ns, mode, groups = P["ns"], P["mode"], P["groups"]

    if mode == MODE_DIRECT:
        op = lsep = o        # unused
        cnt = lse
    else:
        op = torch.empty((B, ns, H, DL), dtype=torch.float32 if P["partial_fp32"] else q.dtype, device=q.device)
        lsep = torch.empty((B, ns, H), dtype=torch.float32, device=q.device)
        cnt = _counters(q.device, 2 * groups) if mode in (MODE_LAST, MODE_SPIN) else lsep

    _mla_split_kv[(ns, groups)](
        q, kv, scale, o, lse, op, lsep, cnt,
        S, H, P["NUM_HG"], P["split_len"], ns,
        q.stride(0), q.stride(2), kv.stride(0), kv.stride(1), o.stride(0), o.stride(2), lse.stride(0),
        DL=DL, DR=DR, BLOCK_H=P["BLOCK_H"], BLOCK_N=P["BLOCK_N"], BLOCK_DL=P["BLOCK_DL"], BLOCK_DR=P["BLOCK_DR"],
        EVEN_N=(S % P["BLOCK_N"] == 0), EVEN_D=(DL == P["BLOCK_DL"] and DR == P["BLOCK_DR"]),
        MODE=mode, HC=P["HC"], DC=P["DC"], BLOCK_S=P["BLOCK_S"],
        num_warps=P["num_warps"], num_stages=P["num_stages"],
    )
    if mode == MODE_LAUNCH:
        # separate merge: many small programs, one memory round trip each
        hc2, dc2 = _merge_shape(P["BLOCK_S"], 16 if B * H > 256 else 1, P["BLOCK_DL"], 8192)
        num_hc = triton.cdiv(H, hc2)
        _mla_merge[(B * num_hc, triton.cdiv(DL, dc2))](
            op, lsep, o, lse, H, ns, num_hc, o.stride(0), o.stride(2), lse.stride(0),
            DL=DL, HC=hc2, DC=dc2, BLOCK_S=P["BLOCK_S"], num_warps=4,
        )
