"""MLA decode (absorbed / MQA form), split-KV, v2: a cheaper merge, and a register-staged prefetch option.

Math, per batch b and head h (one query token):
    s[h, t] = scale * q[h, :] . c[t, :]          (D = D_LATENT + D_ROPE = 576 dims)
    p[h, :] = softmax_t(s[h, :])
    o[h, :] = sum_t p[h, t] * c[t, :D_LATENT]     (512 dims)
    lse[h]  = log sum_t exp(s[h, t])               (natural log)

Same decomposition as seeds/splitkv.py (one CTA per (KV split, batch, head group); each tile of
BLOCK_N cache rows is the key of q.c^T and, its first D_LATENT dims, the value of p.c; splits are
merged exactly from normalised partials o_j and base-2 lse_j). What v2 changes, and why (NOTES.md):

1. Merge (the B=1 path): input-dtype partials by default (half the partial traffic); merge tiles up
   to 32K elements, so a CTA merges its share of the output in one or two memory round trips
   (v1: eight dependent round trips of 4K elements at 128 splits); the spin barrier polls with plain
   volatile loads from every thread (v1: one thread's acquire load, then a CTA barrier and a shared-
   memory broadcast per poll) and takes one acquire load once it opens.
2. Host: the launch plan is cached per (shape, config, device), the partial buffers per (device,
   shape, dtype): no per-call allocation and no per-call config merging.
3. PREFETCH="regs" (sweep option): tile i+1 is loaded into registers at the TOP of iteration i and
   written to shared memory at the top of i+1, so the whole iteration covers the DRAM latency (v1's
   pipeliner issues the cp.async for i+1 at the END of iteration i and waits at the top of i+1).
   The tile travels as 32-bit words (_unpack_pairs), and row indices are clamped so that load
   addresses are recomputed per tile instead of hoisted. Offline sm_90 compile: no spills of the
   prefetched data at BLOCK_N=32 (loads issued before the tile's MMAs), but the kernel runs at 255
   registers with 50 spill loads per iteration, because with a single shared-memory home for the
   tile every wgmma descriptor is loop-invariant and gets hoisted into registers. At BLOCK_N=64 the
   loaded registers themselves spill right after the load, which serialises the latency: avoid.
4. Row strides are compile-time constants; the KV tile load is one helper for both paths.

The merge modes ("COMBINE") are v1's:
  "launch": a second kernel merges the partials (two launches).
  "last":   one launch; the last CTA of a (batch, head group) to arrive merges the group.
  "spin":   one launch; all CTAs of a group meet at a counter barrier, then each merges its own slice.
            Needs every CTA resident at once: used only when the grid fits in one wave (<= SM count),
            else the launcher falls back to "launch". The interpreter (CTAs run one after another)
            uses "last" instead.
With one split (large batches) the kernel writes the final o and lse directly.
"""
import torch
import triton
import triton.language as tl

SPACE = {
    "BLOCK_H": [64, 32, 16],          # heads per CTA: the M dim of both products (64: wgmma, <64: mma.sync)
    "BLOCK_N": [64, 32, 16, 128],     # KV rows per tile: N of q.c^T, K of p.c
    "PREFETCH": ["none", "regs"],     # none: Triton's cp.async pipeline (num_stages); regs: next tile staged in registers
    "num_warps": [8, 4],
    "num_stages": [2, 1, 3, 4],       # Triton's pipeliner; with PREFETCH=regs use 1. BLOCK_N=32 fits 4 (216 KB)
    "WAVES": [1, 2, 4],               # target CTAs = WAVES * SMs when choosing the split count
    "MIN_SPLIT_TILES": [1, 2, 4, 8, 1000],  # tiles per split at least (bounds partial traffic; 1000: no split)
    "COMBINE": ["spin", "launch", "last"],
    "PARTIAL": ["input", "fp32"],     # dtype of the per-split o_j: the input dtype (half the traffic) or fp32
    "MERGE_TILE": [16384, 8192, 32768, 4096],  # elements per merge step (BLOCK_S x heads x dims), fp32 in registers
}
# Predicted best (NOT measured: written without a GPU; NOTES.md "v2" has the compile figures and the
# reasoning). The tile core is v1's measured best (BLOCK_N=64, 2 cp.async stages: 245 registers, no
# spills); what changes is the split/merge side: input-dtype partials, 2 merge items per CTA instead of
# 8, volatile polling, cached plan and buffers. PREFETCH="regs" compiles with spills at BLOCK_H=64 (see
# NOTES.md), so it is a sweep option, not the default.
DEFAULT = {"BLOCK_H": 64, "BLOCK_N": 64, "PREFETCH": "none", "num_warps": 8, "num_stages": 2, "WAVES": 1,
           "MIN_SPLIT_TILES": 1, "COMBINE": "spin", "PARTIAL": "input", "MERGE_TILE": 16384}
BEST = dict(DEFAULT)

LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)
MAX_SPLITS = 128          # partial buffers and the merge tile grow with the split count

MODE_DIRECT, MODE_LAUNCH, MODE_LAST, MODE_SPIN = 0, 1, 2, 3


@triton.jit
def _merge_tile(op_ptr, lsep_ptr, o_ptr, lse_ptr, b, h0, d0, H, NS,
                stride_ob, stride_oh, stride_lb,
                DL: tl.constexpr, HC: tl.constexpr, DC: tl.constexpr, BLOCK_S: tl.constexpr):
    """Merge the NS partials of heads [h0, h0+HC) x dims [d0, d0+DC) of batch b.

    Partials: op [B, NS, H, DL] (normalised o_j), lsep [B, NS, H] fp32 (base-2 lse_j).
    All splits are loaded at once ([BLOCK_S, HC, DC]): one memory round trip, not NS.
        lse = log2 sum_j 2^lse_j,   o = sum_j 2^(lse_j - lse) o_j
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
    part = tl.load(op_ptr + row[:, :, None] * DL + offs_d[None, None, :],
                   mask=mask_sh[:, :, None] & mask_d[None, None, :], other=0.0, cache_modifier=".cg")
    m = tl.max(lse_j, 0)
    m = tl.where(m == float("-inf"), 0.0, m)                                   # padded heads
    w = tl.exp2(lse_j - m[None, :])                                             # [BLOCK_S, HC]
    den = tl.sum(w, 0)
    den = tl.where(mask_h, den, 1.0)                                            # padded heads
    o = tl.sum(w[:, :, None] * part.to(tl.float32), 0) / den[:, None]           # [HC, DC]
    o_ptrs = o_ptr + b * stride_ob + offs_h[:, None] * stride_oh + offs_d[None, :]
    tl.store(o_ptrs, o.to(o_ptr.dtype.element_ty), mask=mask_h[:, None] & mask_d[None, :])
    if d0 == 0:
        tl.store(lse_ptr + b * stride_lb + offs_h, (m + tl.log2(den)) * LN2, mask=mask_h)


@triton.jit
def _load_tile(kv_base, n, end, last, offs_n0, offs_dl, offs_dr, mask_dl, mask_dr,
               STRIDE_KN: tl.constexpr, DL: tl.constexpr, EVEN_N: tl.constexpr, MASK_D: tl.constexpr):
    """Cache rows [n, n + BLOCK_N) of one batch, split into the latent and rotary parts.

    Rows at or past `end` (the split's end, or a prefetch past the last tile) read as 0 and cost no
    memory traffic; their row index is also clamped to `last` so that no address leaves the split.
    With whole tiles (EVEN_N) the mask is one scalar predicate for all 16-byte loads of the tile.
    (Clamping and constexpr strides were also meant to stop the compiler hoisting per-vector
    addresses out of the loop; the sm_90 compile showed the hoisted values that spill are wgmma
    descriptors, not addresses: NOTES.md "v2".)"""
    row = tl.minimum(n + offs_n0, last)
    off = row[:, None] * STRIDE_KN
    if EVEN_N:
        mask_n = n < end
    else:
        mask_n = ((n + offs_n0) < end)[:, None]
    if MASK_D:
        c_nope = tl.load(kv_base + off + offs_dl[None, :], mask=mask_n & mask_dl[None, :], other=0.0)
        c_pe = tl.load(kv_base + off + DL + offs_dr[None, :], mask=mask_n & mask_dr[None, :], other=0.0)
    else:
        c_nope = tl.load(kv_base + off + offs_dl[None, :], mask=mask_n, other=0.0)
        c_pe = tl.load(kv_base + off + DL + offs_dr[None, :], mask=mask_n, other=0.0)
    return c_nope, c_pe


@triton.jit
def _unpack_pairs(x, dtype: tl.constexpr, R: tl.constexpr, C: tl.constexpr):
    """[R, C // 2] int32, each holding two 16-bit values -> [R, C] of `dtype` (low half first: the
    order in memory). A prefetched 16-bit tile is carried across the loop as 32-bit words: carried as
    16-bit values, each element takes a whole 32-bit register (twice the registers, and spills)."""
    lo = (x & 0xFFFF).to(tl.int16).to(dtype, bitcast=True)
    hi = (x >> 16).to(tl.int16).to(dtype, bitcast=True)
    return tl.reshape(tl.join(lo, hi), [R, C])


@triton.jit
def _mla_split_kv_v2(
    q_ptr, kv_ptr, scale_ptr, o_ptr, lse_ptr,
    op_ptr, lsep_ptr, cnt_ptr,
    S, H, NUM_HG, split_len, NS,
    stride_qb, stride_kb, stride_ob, stride_oh, stride_lb,
    STRIDE_QH: tl.constexpr, STRIDE_KN: tl.constexpr,    # row strides: constants, immediate offsets
    DL: tl.constexpr, DR: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_DL: tl.constexpr, BLOCK_DR: tl.constexpr,
    EVEN_N: tl.constexpr, MASK_D: tl.constexpr, MASK_HD: tl.constexpr,
    PREFETCH_REGS: tl.constexpr, PACK: tl.constexpr,
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

    start = pid_s * split_len
    end = tl.minimum(start + split_len, S)
    kv_base = kv_ptr + b.to(tl.int64) * stride_kb

    if PACK:
        # prefetched tiles travel as 32-bit words (two 16-bit elements each): see _unpack_pairs
        kv_words = kv_base.to(tl.pointer_type(tl.int32))
        offs_dl2 = tl.arange(0, BLOCK_DL // 2)
        offs_dr2 = tl.arange(0, BLOCK_DR // 2)
        mask_dl2 = offs_dl2 < DL // 2
        mask_dr2 = offs_dr2 < DR // 2
    if PREFETCH_REGS:
        # first tile in flight before the query load: the two latencies overlap
        if PACK:
            nxt_nope, nxt_pe = _load_tile(kv_words, start, end, end - 1, offs_n0, offs_dl2, offs_dr2, mask_dl2, mask_dr2,
                                          STRIDE_KN // 2, DL // 2, EVEN_N, MASK_D)
        else:
            nxt_nope, nxt_pe = _load_tile(kv_base, start, end, end - 1, offs_n0, offs_dl, offs_dr, mask_dl, mask_dr,
                                          STRIDE_KN, DL, EVEN_N, MASK_D)

    # the query tile stays resident (shared memory, wgmma A operand) for the whole split
    q_rows = q_ptr + b.to(tl.int64) * stride_qb + offs_h[:, None] * STRIDE_QH
    if MASK_HD:
        q_nope = tl.load(q_rows + offs_dl[None, :], mask=mask_h[:, None] & mask_dl[None, :], other=0.0)
        q_pe = tl.load(q_rows + DL + offs_dr[None, :], mask=mask_h[:, None] & mask_dr[None, :], other=0.0)
    else:
        # no [BLOCK_H, BLOCK_DL] mask kept alive across the loop for the epilogue's stores
        q_nope = tl.load(q_rows + offs_dl[None, :])
        q_pe = tl.load(q_rows + DL + offs_dr[None, :])
    # softmax in base 2: fold scale * log2(e) into the fp32 scores (q stays unrounded)
    qk_scale = tl.load(scale_ptr) * LOG2E

    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_DL], tl.float32)

    for n0 in range(start, end, BLOCK_N):
        offs_n = n0 + offs_n0
        if PREFETCH_REGS:
            # tile i arrived in registers during iteration i-1; issue tile i+1 before any math
            if PACK:
                c_nope = _unpack_pairs(nxt_nope, kv_ptr.dtype.element_ty, BLOCK_N, BLOCK_DL)
                c_pe = _unpack_pairs(nxt_pe, kv_ptr.dtype.element_ty, BLOCK_N, BLOCK_DR)
                nxt_nope, nxt_pe = _load_tile(kv_words, n0 + BLOCK_N, end, end - 1, offs_n0, offs_dl2, offs_dr2, mask_dl2,
                                              mask_dr2, STRIDE_KN // 2, DL // 2, EVEN_N, MASK_D)
            else:
                c_nope, c_pe = nxt_nope, nxt_pe
                nxt_nope, nxt_pe = _load_tile(kv_base, n0 + BLOCK_N, end, end - 1, offs_n0, offs_dl, offs_dr, mask_dl,
                                              mask_dr, STRIDE_KN, DL, EVEN_N, MASK_D)
        else:
            c_nope, c_pe = _load_tile(kv_base, n0, end, end - 1, offs_n0, offs_dl, offs_dr, mask_dl, mask_dr,
                                      STRIDE_KN, DL, EVEN_N, MASK_D)
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
        if MASK_HD:
            tl.store(o_ptrs, o.to(o_ptr.dtype.element_ty), mask=mask_h[:, None] & mask_dl[None, :])
        else:
            tl.store(o_ptrs, o.to(o_ptr.dtype.element_ty))
        tl.store(lse_ptr + b * stride_lb + offs_h, (m_i + tl.log2(l_i)) * LN2, mask=mask_h)
    else:
        # partial of split pid_s: normalised o_j and base-2 lse_j; an empty split (l = 0, cannot
        # happen with the launcher's split sizes) would write o_j = 0, lse_j = -inf
        l_safe = tl.where(l_i == 0.0, 1.0, l_i)
        row = (b * NS + pid_s) * H + offs_h
        o_j = (acc / l_safe[:, None]).to(op_ptr.dtype.element_ty)
        if MASK_HD:
            tl.store(op_ptr + row[:, None] * DL + offs_dl[None, :], o_j, mask=mask_h[:, None] & mask_dl[None, :])
        else:
            tl.store(op_ptr + row[:, None] * DL + offs_dl[None, :], o_j)
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
            # barrier over the NS CTAs of this group (all resident: grid <= SMs). Arrive with a
            # release RMW; every thread polls with a volatile load (v1 polled from one thread with an
            # acquire "atomic_add 0", which Triton lowers to ld.acquire + a CTA barrier + a shared-memory
            # broadcast per poll). Once open, one acquire load (the same "atomic_add 0") synchronises
            # with every arrival. Its result must be used or it is dropped: the second loop never
            # iterates (counts only grow until every CTA has left) but keeps the acquire in the code.
            tl.debug_barrier()
            arrived = tl.atomic_add(cnt_ptr + pid_g, 1, sem="release", scope="gpu") + 1
            while arrived < NS:
                arrived = tl.load(cnt_ptr + pid_g, volatile=True)
            arrived = tl.atomic_add(cnt_ptr + pid_g, 0, sem="acquire", scope="gpu")
            while arrived < NS:
                arrived = tl.atomic_add(cnt_ptr + pid_g, 0, sem="acquire", scope="gpu")
            tl.debug_barrier()
            for it in range(pid_s, N_ITEMS, NS):
                _merge_tile(op_ptr, lsep_ptr, o_ptr, lse_ptr, b, h0 + (it // N_D) * HC, (it % N_D) * DC,
                            H, NS, stride_ob, stride_oh, stride_lb, DL, HC, DC, BLOCK_S)
            # second counter: the last CTA to leave resets both for the next launch (nobody polls
            # the arrival counter any more once all NS have left)
            n_groups = tl.num_programs(1)           # departures live after the arrivals
            left = tl.atomic_add(cnt_ptr + n_groups + pid_g, 1, sem="acq_rel", scope="gpu")
            if left == NS - 1:
                tl.atomic_xchg(cnt_ptr + pid_g, 0)
                tl.atomic_xchg(cnt_ptr + n_groups + pid_g, 0)


@triton.jit
def _mla_merge_v2(op_ptr, lsep_ptr, o_ptr, lse_ptr, H, NS, NUM_HC,
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
_SCRATCH: dict = {}
_PLANS: dict = {}


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


def _scratch(device: torch.device, shape: tuple, dtype: torch.dtype) -> torch.Tensor:
    """Split partials, kept between calls (calls on one stream never overlap): no per-call allocation.
    Every element a kernel reads was written earlier in the same launch."""
    key = (str(device), dtype, shape)
    buf = _SCRATCH.get(key)
    if buf is None:
        buf = torch.empty(shape, dtype=dtype, device=device)
        _SCRATCH[key] = buf
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
    BLOCK_DR = max(16, _next_pow2(DR))
    HC, DC = _merge_shape(BLOCK_S, BLOCK_H, BLOCK_DL, int(cfg["MERGE_TILE"]))
    # separate merge kernel (MODE_LAUNCH): many small programs, one memory round trip each
    HC2, DC2 = _merge_shape(BLOCK_S, 16 if B * H > 256 else 1, BLOCK_DL, 8192)
    return dict(BLOCK_N=BLOCK_N, BLOCK_H=BLOCK_H, NUM_HG=NUM_HG, groups=groups, ns=ns, split_len=split_len,
                mode=mode, BLOCK_S=BLOCK_S, BLOCK_DL=BLOCK_DL, BLOCK_DR=BLOCK_DR, HC=HC, DC=DC, HC2=HC2, DC2=DC2,
                EVEN_N=(S % BLOCK_N == 0), MASK_D=not (DL == BLOCK_DL and DR == BLOCK_DR),
                MASK_HD=not (DL == BLOCK_DL and DR == BLOCK_DR and H % BLOCK_H == 0),
                PREFETCH_REGS=cfg["PREFETCH"] == "regs",
                PACK=cfg["PREFETCH"] == "regs" and DL % 2 == 0 and DR % 2 == 0,   # + 16-bit, even strides
                num_warps=int(cfg["num_warps"]), num_stages=int(cfg["num_stages"]),
                partial_fp32=cfg["PARTIAL"] == "fp32")


def _cached_plan(B, H, S, DL, DR, config, device):
    key = (B, H, S, DL, DR, str(device), tuple(sorted((config or {}).items())))
    P = _PLANS.get(key)
    if P is None:
        P = plan(B, H, S, DL, DR, config, device)
        _PLANS[key] = P
    return P


def mla_decode(inputs: dict, out: dict, config: dict) -> None:
    q, kv, scale = inputs["q"], inputs["kv"], inputs["scale"]
    o, lse = out["o"], out["lse"]
    B, _, H, D = q.shape
    S = kv.shape[1]
    DL = o.shape[-1]
    DR = D - DL
    assert S >= 1 and DR >= 1 and q.stride(-1) == 1 and kv.stride(-1) == 1 and o.stride(-1) == 1
    P = _cached_plan(B, H, S, DL, DR, config, q.device)
    ns, mode, groups = P["ns"], P["mode"], P["groups"]

    if mode == MODE_DIRECT:
        op = lsep = o        # unused
        cnt = lse
    else:
        op = _scratch(q.device, (B, ns, H, DL), torch.float32 if P["partial_fp32"] else q.dtype)
        lsep = _scratch(q.device, (B, ns, H), torch.float32)
        cnt = _counters(q.device, 2 * groups) if mode in (MODE_LAST, MODE_SPIN) else lsep

    _mla_split_kv_v2[(ns, groups)](
        q, kv, scale, o, lse, op, lsep, cnt,
        S, H, P["NUM_HG"], P["split_len"], ns,
        q.stride(0), kv.stride(0), o.stride(0), o.stride(2), lse.stride(0),
        STRIDE_QH=q.stride(2), STRIDE_KN=kv.stride(1),
        DL=DL, DR=DR, BLOCK_H=P["BLOCK_H"], BLOCK_N=P["BLOCK_N"], BLOCK_DL=P["BLOCK_DL"], BLOCK_DR=P["BLOCK_DR"],
        EVEN_N=P["EVEN_N"], MASK_D=P["MASK_D"], MASK_HD=P["MASK_HD"], PREFETCH_REGS=P["PREFETCH_REGS"],
        PACK=P["PACK"] and kv.element_size() == 2 and kv.stride(0) % 2 == 0 and kv.stride(1) % 2 == 0,
        MODE=mode, HC=P["HC"], DC=P["DC"], BLOCK_S=P["BLOCK_S"],
        num_warps=P["num_warps"], num_stages=P["num_stages"],
    )
    if mode == MODE_LAUNCH:
        num_hc = triton.cdiv(H, P["HC2"])
        _mla_merge_v2[(B * num_hc, triton.cdiv(DL, P["DC2"]))](
            op, lsep, o, lse, H, ns, num_hc, o.stride(0), o.stride(2), lse.stride(0),
            DL=DL, HC=P["HC2"], DC=P["DC2"], BLOCK_S=P["BLOCK_S"], num_warps=4,
        )
