"""MLA decode (absorbed / MQA form), split-KV, v4: a Gluon (Hopper) core that keeps DRAM busy through L2 prefetch.

Math, per batch b and head h (one query token):
    s[h, t] = scale * q[h, :] . c[t, :]          (D = D_LATENT + D_ROPE = 576 dims)
    p[h, :] = softmax_t(s[h, :])
    o[h, :] = sum_t p[h, t] * c[t, :D_LATENT]     (512 dims)
    lse[h]  = log sum_t exp(s[h, t])               (natural log)
One CTA per (KV split, batch, group of 64 heads); each cache tile is loaded once and is the key (all D dims) and the
value (its first D_LATENT dims). Splits write normalised partials o_j and base-2 lse_j, merged exactly:
lse = log2 sum_j 2^lse_j, o = sum_j 2^(lse_j - lse) o_j.

Where v3 stood (NOTES.md): 70 % of copy bandwidth at b64 / b128, because each SM had ONE 74 KB tile in flight.
Little's law on the H200: 132 x 74 KB = 9.7 MB in flight against 4.3 TB/s x (0.8 us unloaded latency + 2.3 us to drain
9.7 MB) gives ~3.1 TB/s, i.e. ~3.3 us per 64-row tile and SM (measured: 3.3). Shared memory cannot hold more: q
(64 heads x 576 x 2 B = 72 KB) + 2 tiles (2 x 72 KB) + p (8 KB) = 224 KB of the 227 KB, and any schedule that works on
two tiles at once (a ping-pong of two warpgroups, or issuing tile i+1's scores before tile i's p.V) holds BOTH ring
slots and leaves nothing in flight. So v4 keeps v3's one-tile-at-a-time consumer and adds bytes in flight where they
cost no shared memory:
  * L2 prefetch (cp.async.bulk.prefetch.L2) of the tiles PF_DIST past the newest ring load: with PF_DIST = 2 each SM
    has ~3 tiles (220 KB, 29 MB in all) requested from DRAM, enough for ~90 % of its bandwidth; the TMA load into the
    ring then hits L2 (~1 us for 74 KB), inside one tile's compute (~1.7 us: 0.85 us of score wgmma, bound by shared
    memory since both warpgroups read all of q, ~0.3 us softmax, 0.5 us p.V). 29 MB fit the 50 MB L2 beside 9 MB of q.
  * the prologue requests the split's first STAGES tiles and PF_DIST more BEFORE q (v3: q first, then one tile), so
    a split of <= STAGES + PF_DIST tiles (B = 1: one tile at S = 8192, four at S = 32768) is wholly in flight at once.
  * the row sum l is accumulated element-wise (LAZY_L) and reduced once at the end: one cross-warpgroup reduction
    (shared memory + two CTA barriers) per tile fewer than v3; the row max still needs one per tile (both warpgroups
    must scale p by the same max before the p.V product that sums over both halves of the tile).
Tile core (as v3): score [64 heads, BLOCK_N rows], the two warpgroups split the rows (N = 32 each); output [64, 512]
fp32, the warpgroups split the dims (256 each, 128 registers per thread); p via shared memory; o stored row by row.

Merges (MERGE): "last" (one launch: the last CTA of a group to arrive merges it: for 2-4 splits, b64_s8192's 2 per
batch), "spin" (one launch: all CTAs of a group meet at a counter barrier, then each merges a slice; every CTA must be
resident, so only when the grid fits one wave: B = 1's 128 splits, one merge item per CTA with MERGE_TILE 32768),
"launch" (a second kernel). "auto": direct for one split, last up to LAST_MAX_NS splits, else spin (one wave) or
launch. Counters are never reset: each launch adds NS per group (an int64 "epoch"), so no CTA pays a departure atomic.
The Gluon core runs where TMA can (CUDA, 16-bit q / kv with contiguous rows, H a multiple of 64, D_LATENT 128/256/512,
D_ROPE 16/32/64); everything else, and the interpreter, runs the `tl` core (v3's, also CORE="tl").
Host: plans, layouts, scratch and counters cached; LAUNCH="cached" relaunches the compiled kernel without the JIT binder.
"""
import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma
from triton.experimental.gluon.language.nvidia.hopper import warpgroup_mma, warpgroup_mma_init, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

SPACE = {
    "CORE": ["gluon", "tl"],          # gluon: TMA ring + L2 prefetch (when the shape allows); tl: v3's tl core
    "PF_DIST": [2, 1, 3, 4, 0],       # gluon: tiles prefetched into L2 past the ring's newest load
    "LAZY_L": ["on", "off"],          # gluon: row sums accumulated element-wise, reduced once (off: per tile, as v3)
    "MERGE": ["auto", "spin", "last", "launch"],
    "LAST_MAX_NS": [4, 2, 8],         # "auto": the last CTA merges alone up to this many splits
    "WAVES": [1, 2],                  # target CTAs = WAVES * SMs when choosing the split count
    "MIN_SPLIT_TILES": [1, 2, 4, 8, 1000],      # tiles per split at least (1000: never split)
    "LAT_GROUPS": [8, 0, 32],         # a problem with at most this many (batch, head group) pairs is "small"
    "LAT_MIN_SPLIT_TILES": [1, 2, 4], # MIN_SPLIT_TILES for small problems (B = 1: 128 splits of 1 tile, or fewer)
    "PARTIAL": ["input", "fp32"],     # dtype of the split partials o_j
    "MERGE_TILE": [32768, 16384, 8192],         # elements per merge step (32768: one step per CTA at 128 splits)
    "O_STORE": ["rows", "mma"],       # gluon: o / o_j stored row by row through smem, or in the wgmma layout
    "LAUNCH": ["jit", "cached"],      # cached: relaunch the compiled kernel directly (skips the JIT's binder)
    "BLOCK_N": [64, 32, 16],          # KV rows per tile (gluon: the ring depth follows from 227 KB: 2, 4, 8)
    "BLOCK_H": [64, 32, 16],          # tl: heads per CTA
    "num_warps": [8, 4],              # tl (gluon: 8, two warpgroups)
    "num_stages": [2, 3],             # tl: Triton's cp.async pipeline
}
DEFAULT = {"CORE": "gluon", "PF_DIST": 2, "LAZY_L": "on", "MERGE": "auto", "LAST_MAX_NS": 4, "WAVES": 1,
           "MIN_SPLIT_TILES": 1, "LAT_GROUPS": 8, "LAT_MIN_SPLIT_TILES": 1, "PARTIAL": "input", "MERGE_TILE": 32768,
           "O_STORE": "rows", "LAUNCH": "jit", "BLOCK_N": 64, "BLOCK_H": 64, "num_warps": 8, "num_stages": 2}
# PREDICTED, not measured yet (NOTES.md "v4" has the per-shape predictions): the Gluon core everywhere it runs,
# PF_DIST 2, the last-arrival merge at b64's two splits and the spin merge at B = 1's 128. LAUNCH stays "jit" (the
# path every GPU run so far took); "cached" only changes host time, not the GPU-time figure.
BEST = dict(DEFAULT)

LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)
MAX_SPLITS = 128          # partial buffers and the merge tile grow with the split count
SMEM_LIMIT = 227 * 1024   # per CTA on sm_90
MODE_DIRECT, MODE_LAUNCH, MODE_LAST, MODE_SPIN = 0, 1, 2, 3


# ------------------------------------------------------------------------------------------------
# Gluon core (sm_90)
@gluon.jit
def _load_tile(kv_desc_n, kv_desc_r, c_n, c_r, bar, slot, row, pred, DL: gl.constexpr, TILE_BYTES: gl.constexpr):
    """TMA of cache rows [row, row + BLOCK_N) into ring slot `slot` (latent and rotary parts, one mbarrier)."""
    mbarrier.expect(bar, TILE_BYTES, pred=pred)
    tma.async_copy_global_to_shared(kv_desc_n, [row, 0], bar, c_n.index(slot), pred=pred)
    tma.async_copy_global_to_shared(kv_desc_r, [row, DL], bar, c_r.index(slot), pred=pred)


@gluon.jit
def _prefetch_l2(split_ptr, tile, ok, TILE_ELEMS: gl.constexpr):
    """cp.async.bulk.prefetch.L2 of tile `tile` of the split (rows are contiguous: one byte range). Lane 0 of each of
    the 8 warps prefetches an eighth (9 KB at BLOCK_N = 64): one bulk op per warp, not per thread."""
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [8], [0])
    t = gl.arange(0, 256, layout=lay)
    on = ((t % 32 == 0) & ok).to(gl.int32)
    nbytes = gl.full([256], TILE_ELEMS // 8 * 2, gl.int32, layout=lay)
    addr = split_ptr + tile * TILE_ELEMS + (t // 32) * (TILE_ELEMS // 8)
    gl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.b32 p, $3, 0; @p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
        "=r,l,r,r", [addr, nbytes, on], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _attend(q_n, q_r, c_n, c_r, bars, p_smem, kv_desc_n, kv_desc_r, split_ptr, row0, start, end, n_tiles, qk_scale,
            mma_s: gl.constexpr, mma_o: gl.constexpr, DL: gl.constexpr, DR: gl.constexpr, BLOCK_H: gl.constexpr,
            BLOCK_N: gl.constexpr, STAGES: gl.constexpr, EVEN_N: gl.constexpr, PF_DIST: gl.constexpr,
            LAZY_L: gl.constexpr):
    """Online softmax over the split's tiles (the ring already holds tiles 0..STAGES-1 in flight, q has landed).
    Iteration i: wait p.V(i-1) in both warpgroups (CTA barrier), refill its slot with tile i+STAGES-1 and prefetch tile
    i+STAGES-1+PF_DIST into L2, then score(i) -> softmax -> p (smem) -> p.V(i), left running into iteration i+1."""
    row_s: gl.constexpr = gl.SliceLayout(1, mma_s)
    row_o: gl.constexpr = gl.SliceLayout(1, mma_o)
    TILE_ELEMS: gl.constexpr = BLOCK_N * (DL + DR)
    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=row_s)
    if LAZY_L:
        l_acc = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, layout=mma_s)
    else:
        l_acc = gl.zeros([BLOCK_H], gl.float32, layout=row_s)
    acc = warpgroup_mma_init(gl.zeros([BLOCK_H, DL], gl.float32, layout=mma_o))
    s_zero = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, layout=mma_s)
    offs_n0 = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma_s))
    for i in range(n_tiles):
        acc_t = warpgroup_mma_wait(0, deps=[acc])
        gl.thread_barrier()                 # both warpgroups are done with tile i-1's slot (and p)
        nxt = i + STAGES - 1
        _load_tile(kv_desc_n, kv_desc_r, c_n, c_r, bars.index(nxt % STAGES), nxt % STAGES, row0 + nxt * BLOCK_N,
                   (i > 0) & (nxt < n_tiles), DL, TILE_ELEMS * 2)
        if PF_DIST > 0:
            pf = nxt + PF_DIST              # never past the split (the last tile of a split may be partial)
            _prefetch_l2(split_ptr, pf, (i > 0) & ((pf + 1) * BLOCK_N <= end - start), TILE_ELEMS)
        slot = i % STAGES
        mbarrier.wait(bars.index(slot), (i // STAGES) & 1)
        cn = c_n.index(slot)
        s = warpgroup_mma(q_n, cn.permute((1, 0)), s_zero, use_acc=False, is_async=True)
        s = warpgroup_mma(q_r, c_r.index(slot).permute((1, 0)), s, is_async=True)
        s = warpgroup_mma_wait(0, deps=[s])
        s = s * qk_scale
        if not EVEN_N:
            # rows past the split's end: the next split's / batch's rows, or TMA's zero fill
            s = gl.where(gl.expand_dims(start + i * BLOCK_N + offs_n0 < end, 0), s, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(s, axis=1))    # finite: every tile holds >= 1 valid row
        alpha = gl.exp2(m_i - m_new)
        p = gl.exp2(s - gl.expand_dims(m_new, 1))
        if LAZY_L:
            l_acc = l_acc * gl.expand_dims(alpha, 1) + p
        else:
            l_acc = l_acc * alpha + gl.sum(p, axis=1)
        m_i = m_new
        acc_t = acc_t * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
        p_smem.store(p.to(p_smem.dtype))
        fence_async_shared()
        gl.thread_barrier()
        acc = warpgroup_mma(p_smem, cn, acc_t, is_async=True)
    acc_t = warpgroup_mma_wait(0, deps=[acc])
    if LAZY_L:
        l_i = gl.sum(l_acc, axis=1)
    else:
        l_i = l_acc
    return acc_t, m_i, l_i


@gluon.jit
def _store_tile(base_ptr, row_stride, x, BLOCK_H: gl.constexpr, DL: gl.constexpr, st: gl.constexpr):
    """x [BLOCK_H, DL] stored at base_ptr + h * row_stride + d, in layout `st` (one row per warp instruction when
    st is the blocked row layout: the wgmma layout writes 4-byte pieces of 8 rows, half of every 32-byte sector)."""
    offs_h = gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, st))
    offs_d = gl.arange(0, DL, layout=gl.SliceLayout(0, st))
    gl.store(base_ptr + gl.expand_dims(offs_h, 1) * row_stride + gl.expand_dims(offs_d, 0),
             gl.convert_layout(x.to(base_ptr.dtype.element_ty), st))


@gluon.jit
def _merge_tile_g(op_ptr, lsep_ptr, o_ptr, lse_ptr, b, h0, d0, H, NS, stride_ob, stride_oh, stride_lb,
                  DL: gl.constexpr, HC: gl.constexpr, DC: gl.constexpr, BLOCK_S: gl.constexpr, ML: gl.constexpr):
    """Merge the NS partials of heads [h0, h0+HC) x dims [d0, d0+DC) of batch b (all splits in one load).
    ML: (dims per thread, threads along splits / heads / dims, warps along splits / heads), from _merge_layout, so that
    the [BLOCK_S, HC, DC] tile is spread over the threads without replication."""
    L3: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 1, ML[0]], threads_per_warp=[ML[1], ML[2], ML[3]],
                                        warps_per_cta=[ML[4], ML[5], 1], order=[2, 1, 0])
    S2: gl.constexpr = gl.SliceLayout(2, L3)                  # [BLOCK_S, HC]
    O2: gl.constexpr = gl.SliceLayout(0, L3)                  # [HC, DC]
    offs_s = gl.arange(0, BLOCK_S, layout=gl.SliceLayout(1, S2))
    offs_h = h0 + gl.arange(0, HC, layout=gl.SliceLayout(0, S2))
    offs_d = d0 + gl.arange(0, DC, layout=gl.SliceLayout(0, O2))
    row = (b * NS + gl.expand_dims(offs_s, 1)) * H + gl.expand_dims(offs_h, 0)
    mask_sh = gl.expand_dims(offs_s < NS, 1) & gl.expand_dims(offs_h < H, 0)
    # .cg: read from L2; other CTAs wrote these (L1 is not coherent across SMs)
    lse_j = gl.load(lsep_ptr + row, mask=mask_sh, other=float("-inf"), cache_modifier=".cg")
    offs_d3 = gl.expand_dims(gl.expand_dims(offs_d, 0), 0)
    part = gl.load(op_ptr + gl.expand_dims(row, 2) * DL + offs_d3, mask=gl.expand_dims(mask_sh, 2),
                   other=0.0, cache_modifier=".cg")
    m = gl.max(lse_j, axis=0)
    w = gl.exp2(lse_j - gl.expand_dims(m, 0))
    den = gl.sum(w, axis=0)
    o = gl.sum(gl.expand_dims(w, 2) * part.to(gl.float32), axis=0)
    o = o / gl.expand_dims(gl.convert_layout(den, gl.SliceLayout(1, O2)), 1)
    offs_ho = h0 + gl.arange(0, HC, layout=gl.SliceLayout(1, O2))
    gl.store(o_ptr + b * stride_ob + gl.expand_dims(offs_ho, 1) * stride_oh + gl.expand_dims(offs_d, 0),
             o.to(o_ptr.dtype.element_ty))
    if d0 == 0:
        gl.store(lse_ptr + b * stride_lb + offs_h, (m + gl.log2(den)) * LN2)


@gluon.jit
def _mla_gluon(q_desc_n, q_desc_r, kv_desc_n, kv_desc_r, kv_ptr, scale_ptr, o_ptr, lse_ptr, op_ptr, lsep_ptr,
               cnt_ptr, S, H, NUM_HG, split_len, NS, GEN_OFF, stride_ob, stride_oh, stride_lb,
               DL: gl.constexpr, DR: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
               EVEN_N: gl.constexpr, PF_DIST: gl.constexpr, LAZY_L: gl.constexpr, COALESCE_O: gl.constexpr,
               MODE: gl.constexpr, HC: gl.constexpr, DC: gl.constexpr, BLOCK_S: gl.constexpr, ML: gl.constexpr):
    BLOCK_H: gl.constexpr = 64
    pid_s = gl.program_id(0)          # split index
    pid_g = gl.program_id(1)          # batch * NUM_HG + head group
    b = pid_g // NUM_HG
    h0 = (pid_g % NUM_HG) * BLOCK_H
    start = pid_s * split_len
    end = gl.minimum(start + split_len, S)
    n_tiles = gl.cdiv(end - start, BLOCK_N)
    row0 = b * S + start              # first cache row of the split in the [B*S, D] view

    # score [BLOCK_H, BLOCK_N]: warpgroups split N; output [BLOCK_H, DL]: warpgroups split DL
    mma_s: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                    instr_shape=[16, BLOCK_N // 2, 16])
    mma_o: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                    instr_shape=[16, DL // 2, 16])
    row_s: gl.constexpr = gl.SliceLayout(1, mma_s)
    row_o: gl.constexpr = gl.SliceLayout(1, mma_o)
    dt: gl.constexpr = kv_desc_n.dtype
    q_n = gl.allocate_shared_memory(dt, [BLOCK_H, DL], q_desc_n.layout)
    q_r = gl.allocate_shared_memory(dt, [BLOCK_H, DR], q_desc_r.layout)
    c_n = gl.allocate_shared_memory(dt, [STAGES, BLOCK_N, DL], kv_desc_n.layout)
    c_r = gl.allocate_shared_memory(dt, [STAGES, BLOCK_N, DR], kv_desc_r.layout)
    p_smem = gl.allocate_shared_memory(dt, [BLOCK_H, BLOCK_N],
                                       gl.NVMMASharedLayout.get_default_for([BLOCK_H, BLOCK_N], dt))
    bars = gl.allocate_shared_memory(gl.int64, [STAGES + 1, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES + 1):
        mbarrier.init(bars.index(i), count=1)
    fence_async_shared()

    # prologue: the cache (DRAM, the critical path) before q (72 KB, the same for all splits: mostly L2 hits)
    TILE_ELEMS: gl.constexpr = BLOCK_N * (DL + DR)
    for t in gl.static_range(STAGES):
        _load_tile(kv_desc_n, kv_desc_r, c_n, c_r, bars.index(t), t, row0 + t * BLOCK_N, t < n_tiles, DL,
                   TILE_ELEMS * 2)
    qbar = bars.index(STAGES)
    mbarrier.expect(qbar, BLOCK_H * (DL + DR) * 2)
    tma.async_copy_global_to_shared(q_desc_n, [b * H + h0, 0], qbar, q_n)
    tma.async_copy_global_to_shared(q_desc_r, [b * H + h0, DL], qbar, q_r)
    split_ptr = kv_ptr + row0.to(gl.int64) * (DL + DR)
    for t in gl.static_range(PF_DIST):
        _prefetch_l2(split_ptr, STAGES + t, (STAGES + t + 1) * BLOCK_N <= end - start, TILE_ELEMS)
    qk_scale = gl.load(scale_ptr) * LOG2E       # softmax in base 2: scale * log2(e) folded into the fp32 scores
    if MODE >= 2:
        gen = gl.load(cnt_ptr + GEN_OFF + pid_g, volatile=True)   # launches of this group so far (see _group_merge)
    mbarrier.wait(qbar, 0)

    acc_t, m_i, l_i = _attend(q_n, q_r, c_n, c_r, bars, p_smem, kv_desc_n, kv_desc_r, split_ptr, row0, start, end,
                              n_tiles, qk_scale, mma_s, mma_o, DL, DR, BLOCK_H, BLOCK_N, STAGES, EVEN_N, PF_DIST, LAZY_L)
    for i in gl.static_range(STAGES + 1):
        mbarrier.invalidate(bars.index(i))
    o = acc_t / gl.expand_dims(gl.convert_layout(l_i, row_o), 1)
    if COALESCE_O:
        st: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [8, 1], [1, 0])
    else:
        st: gl.constexpr = mma_o
    offs_hs = h0 + gl.arange(0, BLOCK_H, layout=row_s)
    if MODE == 0:
        _store_tile(o_ptr + b * stride_ob + h0 * stride_oh, stride_oh, o, BLOCK_H, DL, st)
        gl.store(lse_ptr + b * stride_lb + offs_hs, (m_i + gl.log2(l_i)) * LN2)
    else:
        rows = (b * NS + pid_s) * H
        _store_tile(op_ptr + (rows + h0).to(gl.int64) * DL, DL, o, BLOCK_H, DL, st)
        gl.store(lsep_ptr + rows + offs_hs, m_i + gl.log2(l_i))
        if MODE >= 2:
            _group_merge(op_ptr, lsep_ptr, o_ptr, lse_ptr, cnt_ptr + pid_g, cnt_ptr + GEN_OFF + pid_g, gen, b, h0,
                         pid_s, H, NS, stride_ob, stride_oh, stride_lb, MODE, BLOCK_H, DL, HC, DC, BLOCK_S, ML)


@gluon.jit
def _group_merge(op_ptr, lsep_ptr, o_ptr, lse_ptr, cnt, gen_ptr, gen, b, h0, pid_s, H, NS, stride_ob, stride_oh,
                 stride_lb, MODE: gl.constexpr, BLOCK_H: gl.constexpr, DL: gl.constexpr, HC: gl.constexpr,
                 DC: gl.constexpr, BLOCK_S: gl.constexpr, ML: gl.constexpr):
    """One-launch merge of a group's NS partials. Two int64 words per group, never reset: `cnt` counts arrivals and
    `gen` launches, so cnt == gen * NS between launches and this launch's arrivals end at target = (gen + 1) * NS
    (gen was read at the kernel's start, before this CTA's release arrival: no launch can have bumped it yet). The CTA
    whose arrival reaches the target bumps gen for the next launch. MODE 2 ("last"): that CTA merges every item, the
    others leave. MODE 3 ("spin"): every CTA waits for the target (one thread polls with volatile loads, then one
    acquire load whose result is used, or it is dropped), then merges items pid_s, pid_s + NS, ... (MERGE_TILE 32768 at
    128 splits: one item of [128 splits, 1 head, 256 dims] per CTA, one round trip). No division, no resets, no
    departure counter on the kernel's tail."""
    N_D: gl.constexpr = DL // DC
    N_ITEMS: gl.constexpr = (BLOCK_H // HC) * N_D
    target = (gen + 1) * NS
    gl.thread_barrier()               # every thread's partial stores precede the arrival
    if MODE == 2:
        arrived = gl.atomic_add(cnt, 1, sem="acq_rel", scope="gpu") + 1
        if arrived == target:
            gl.atomic_add(gen_ptr, 1, sem="relaxed", scope="gpu")
            gl.thread_barrier()
            for it in range(0, N_ITEMS):
                _merge_tile_g(op_ptr, lsep_ptr, o_ptr, lse_ptr, b, h0 + (it // N_D) * HC, (it % N_D) * DC, H, NS,
                              stride_ob, stride_oh, stride_lb, DL, HC, DC, BLOCK_S, ML)
    else:
        arrived = gl.atomic_add(cnt, 1, sem="release", scope="gpu") + 1
        if arrived == target:
            gl.atomic_add(gen_ptr, 1, sem="relaxed", scope="gpu")
        # one thread per CTA polls (the CTA's max broadcasts it): at B = 1 all 128 CTAs wait on ONE counter, and 256
        # polling threads each (v3) put 1024 warp requests at a time on its L2 line
        lay: gl.constexpr = gl.BlockedLayout([1], [32], [8], [0])
        z = gl.arange(0, 256, layout=lay)
        while arrived < target:
            arrived = gl.max(gl.load(cnt + z * 0, mask=z == 0, other=0, volatile=True), axis=0)
        arrived = gl.atomic_add(cnt, 0, sem="acquire", scope="gpu")
        while arrived < target:
            arrived = gl.atomic_add(cnt, 0, sem="acquire", scope="gpu")
        gl.thread_barrier()
        for it in range(pid_s, N_ITEMS, NS):
            _merge_tile_g(op_ptr, lsep_ptr, o_ptr, lse_ptr, b, h0 + (it // N_D) * HC, (it % N_D) * DC, H, NS,
                          stride_ob, stride_oh, stride_lb, DL, HC, DC, BLOCK_S, ML)


# ------------------------------------------------------------------------------------------------
# tl core (v3's): any shape, and the interpreter
@triton.jit
def _merge_tile(op_ptr, lsep_ptr, o_ptr, lse_ptr, b, h0, d0, H, NS, stride_ob, stride_oh, stride_lb,
                DL: tl.constexpr, HC: tl.constexpr, DC: tl.constexpr, BLOCK_S: tl.constexpr):
    """Merge the NS partials of heads [h0, h0+HC) x dims [d0, d0+DC) of batch b (all splits in one load)."""
    offs_s = tl.arange(0, BLOCK_S)
    offs_h = h0 + tl.arange(0, HC)
    offs_d = d0 + tl.arange(0, DC)
    mask_h = offs_h < H
    mask_d = offs_d < DL
    row = (b * NS + offs_s[:, None]) * H + offs_h[None, :]                     # [BLOCK_S, HC]
    mask_sh = (offs_s < NS)[:, None] & mask_h[None, :]
    lse_j = tl.load(lsep_ptr + row, mask=mask_sh, other=float("-inf"), cache_modifier=".cg")
    part = tl.load(op_ptr + row[:, :, None] * DL + offs_d[None, None, :],
                   mask=mask_sh[:, :, None] & mask_d[None, None, :], other=0.0, cache_modifier=".cg")
    m = tl.max(lse_j, 0)
    m = tl.where(m == float("-inf"), 0.0, m)                                   # padded heads
    w = tl.exp2(lse_j - m[None, :])
    den = tl.sum(w, 0)
    den = tl.where(mask_h, den, 1.0)                                            # padded heads
    o = tl.sum(w[:, :, None] * part.to(tl.float32), 0) / den[:, None]
    o_ptrs = o_ptr + b * stride_ob + offs_h[:, None] * stride_oh + offs_d[None, :]
    tl.store(o_ptrs, o.to(o_ptr.dtype.element_ty), mask=mask_h[:, None] & mask_d[None, :])
    if d0 == 0:
        tl.store(lse_ptr + b * stride_lb + offs_h, (m + tl.log2(den)) * LN2, mask=mask_h)


@triton.jit
def _step_tl(q_nope, q_pe, kv_base, n0, end, offs_n0, offs_dl, offs_dr, mask_dl, mask_dr, qk_scale, m_i, l_i, acc,
             STRIDE_KN: tl.constexpr, DL: tl.constexpr, EVEN_N: tl.constexpr, MASK_D: tl.constexpr):
    """One tile of the online softmax: rows [n0, n0 + BLOCK_N) are the key (all dims) and the value (latent dims)."""
    off = (n0 + offs_n0)[:, None] * STRIDE_KN
    mask_n = (n0 < end) if EVEN_N else ((n0 + offs_n0) < end)[:, None]
    if MASK_D:
        c_nope = tl.load(kv_base + off + offs_dl[None, :], mask=mask_n & mask_dl[None, :], other=0.0)
        c_pe = tl.load(kv_base + off + DL + offs_dr[None, :], mask=mask_n & mask_dr[None, :], other=0.0)
    else:
        c_nope = tl.load(kv_base + off + offs_dl[None, :], mask=mask_n, other=0.0)
        c_pe = tl.load(kv_base + off + DL + offs_dr[None, :], mask=mask_n, other=0.0)
    s = tl.dot(q_nope, tl.trans(c_nope))
    s = tl.dot(q_pe, tl.trans(c_pe), s)
    s = s * qk_scale
    if not EVEN_N:
        s = tl.where((n0 + offs_n0 < end)[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))              # finite: every tile holds >= 1 valid row
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = tl.dot(p.to(c_nope.dtype), c_nope, acc * alpha[:, None])
    return m_new, l_i, acc


@triton.jit
def _split_tl(q_ptr, kv_ptr, scale_ptr, o_ptr, lse_ptr, op_ptr, lsep_ptr, cnt_ptr,
              S, H, NUM_HG, split_len, NS, GEN_OFF, stride_qb, stride_kb, stride_ob, stride_oh, stride_lb,
              STRIDE_QH: tl.constexpr, STRIDE_KN: tl.constexpr, DL: tl.constexpr, DR: tl.constexpr,
              BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DL: tl.constexpr, BLOCK_DR: tl.constexpr,
              EVEN_N: tl.constexpr, MASK_D: tl.constexpr, MASK_HD: tl.constexpr,
              MODE: tl.constexpr, HC: tl.constexpr, DC: tl.constexpr, BLOCK_S: tl.constexpr):
    pid_s = tl.program_id(0)
    pid_g = tl.program_id(1)
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
    q_rows = q_ptr + b.to(tl.int64) * stride_qb + offs_h[:, None] * STRIDE_QH
    if MASK_HD:
        q_nope = tl.load(q_rows + offs_dl[None, :], mask=mask_h[:, None] & mask_dl[None, :], other=0.0)
        q_pe = tl.load(q_rows + DL + offs_dr[None, :], mask=mask_h[:, None] & mask_dr[None, :], other=0.0)
    else:
        q_nope = tl.load(q_rows + offs_dl[None, :])
        q_pe = tl.load(q_rows + DL + offs_dr[None, :])
    qk_scale = tl.load(scale_ptr) * LOG2E
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_DL], tl.float32)
    for n0 in range(start, end, BLOCK_N):
        m_i, l_i, acc = _step_tl(q_nope, q_pe, kv_base, n0, end, offs_n0, offs_dl, offs_dr, mask_dl, mask_dr,
                                 qk_scale, m_i, l_i, acc, STRIDE_KN, DL, EVEN_N, MASK_D)
    if MODE == 0:
        o_ptrs = o_ptr + b * stride_ob + offs_h[:, None] * stride_oh + offs_dl[None, :]
        tl.store(o_ptrs, (acc / l_i[:, None]).to(o_ptr.dtype.element_ty), mask=mask_h[:, None] & mask_dl[None, :])
        tl.store(lse_ptr + b * stride_lb + offs_h, (m_i + tl.log2(l_i)) * LN2, mask=mask_h)
    else:
        l_safe = tl.where(l_i == 0.0, 1.0, l_i)
        row = (b * NS + pid_s) * H + offs_h
        o_j = (acc / l_safe[:, None]).to(op_ptr.dtype.element_ty)
        tl.store(op_ptr + row[:, None] * DL + offs_dl[None, :], o_j, mask=mask_h[:, None] & mask_dl[None, :])
        tl.store(lsep_ptr + row, tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(l_safe)), mask=mask_h)
        N_D: tl.constexpr = BLOCK_DL // DC
        N_ITEMS: tl.constexpr = (BLOCK_H // HC) * N_D
        if MODE >= 2:
            # the Gluon core's barrier (_group_merge): arrivals and launches counted in two int64 words, never reset
            target = (tl.load(cnt_ptr + GEN_OFF + pid_g, volatile=True) + 1) * NS
            tl.debug_barrier()
            if MODE == 2:
                step = 1
                last = tl.atomic_add(cnt_ptr + pid_g, 1, sem="acq_rel", scope="gpu") + 1 == target
                first = tl.where(last, 0, N_ITEMS)                  # only the last to arrive merges
            else:
                first, step = pid_s, NS
                arrived = tl.atomic_add(cnt_ptr + pid_g, 1, sem="release", scope="gpu") + 1
                last = arrived == target
                while arrived < target:
                    arrived = tl.load(cnt_ptr + pid_g, volatile=True)
                arrived = tl.atomic_add(cnt_ptr + pid_g, 0, sem="acquire", scope="gpu")
                while arrived < target:
                    arrived = tl.atomic_add(cnt_ptr + pid_g, 0, sem="acquire", scope="gpu")
            if last:
                tl.atomic_add(cnt_ptr + GEN_OFF + pid_g, 1, sem="relaxed", scope="gpu")
            tl.debug_barrier()
            for it in range(first, N_ITEMS, step):
                _merge_tile(op_ptr, lsep_ptr, o_ptr, lse_ptr, b, h0 + (it // N_D) * HC, (it % N_D) * DC,
                            H, NS, stride_ob, stride_oh, stride_lb, DL, HC, DC, BLOCK_S)


@triton.jit
def _merge(op_ptr, lsep_ptr, o_ptr, lse_ptr, H, NS, NUM_HC, stride_ob, stride_oh, stride_lb,
           DL: tl.constexpr, HC: tl.constexpr, DC: tl.constexpr, BLOCK_S: tl.constexpr):
    pid = tl.program_id(0)            # batch * NUM_HC + head chunk
    _merge_tile(op_ptr, lsep_ptr, o_ptr, lse_ptr, pid // NUM_HC, (pid % NUM_HC) * HC, tl.program_id(1) * DC, H, NS,
                stride_ob, stride_oh, stride_lb, DL, HC, DC, BLOCK_S)


# ------------------------------------------------------------------------------------------------
# host side
def _next_pow2(x: int) -> int:
    return 1 << max(0, (int(x) - 1).bit_length())


_SM_COUNT: dict = {}
_COUNTERS: dict = {}
_SCRATCH: dict = {}
_PLANS: dict = {}
_LAYOUTS: dict = {}
_LAUNCHED: dict = {}


def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return 4                      # interpreter: a pretend GPU, so small shapes still split
    key = device.index if device.index is not None else torch.cuda.current_device()
    if key not in _SM_COUNT:
        _SM_COUNT[key] = torch.cuda.get_device_properties(key).multi_processor_count
    return _SM_COUNT[key]


def _counters(device: torch.device, n: int, ns: int) -> tuple:
    """(buffer, GEN_OFF): the one-launch merges' int64 words, zeroed once and never reset: arrivals of group g at
    [g], launches of group g at [GEN_OFF + g]. One buffer per split count NS (so arrivals == launches * NS between
    launches); GEN_OFF is fixed per buffer, whatever the group count of a launch (a larger one starts a new buffer)."""
    key = (str(device), ns)
    hit = _COUNTERS.get(key)
    if hit is None or hit[1] < n:
        cap = max(n, 1024)
        hit = (torch.zeros(2 * cap, dtype=torch.int64, device=device), cap)
        _COUNTERS[key] = hit
    return hit


def _scratch(device: torch.device, shape: tuple, dtype: torch.dtype) -> torch.Tensor:
    """Split partials, kept between calls (calls on one stream never overlap); every element a kernel reads was
    written earlier in the same launch."""
    key = (str(device), dtype, shape)
    buf = _SCRATCH.get(key)
    if buf is None:
        buf = torch.empty(shape, dtype=dtype, device=device)
        _SCRATCH[key] = buf
    return buf


def _merge_shape(block_s: int, heads: int, dims: int, tile: int, dc_max: int):
    """Merge item [block_s, HC, DC] of at most `tile` elements: dims first (contiguous rows of the partials), then
    heads; powers of two."""
    dc = min(dims, dc_max)
    while block_s * dc > tile and dc > 16:
        dc //= 2
    hc = max(1, min(heads, tile // (block_s * dc)))
    return 1 << (hc.bit_length() - 1), dc


def _merge_layout(block_s: int, hc: int, dc: int, warps: int = 8) -> tuple:
    """Blocked layout of a [block_s, hc, dc] merge tile: 16-byte vectors along dims, the rest of a warp along heads,
    then splits; warps along heads first, then splits. Splits a thread does not cover are repeated IN the thread, so
    the sum over splits is mostly in registers (b64's two splits: entirely), and no thread holds replicated
    elements (replication spilled in v3's first port; warps along splits first spilled 584 bytes at b64)."""
    spt_d = min(8, dc)
    tpw_d = min(32, dc // spt_d)
    tpw_h = min(32 // tpw_d, hc)
    tpw_s = 32 // (tpw_d * tpw_h)
    wpc_h = min(warps, max(1, hc // tpw_h))
    return (spt_d, tpw_s, tpw_h, tpw_d, warps // wpc_h, wpc_h)


def _gluon_stages(block_n: int, dl: int, dr: int) -> int:
    """Ring depth that fits: q + STAGES tiles + p (+ ~1 KB of barriers and compiler scratch) in 227 KB. BLOCK_N=64:
    2 (v3's compile: 229,912 bytes); BLOCK_N=32: 4."""
    fixed = 64 * (dl + dr) * 2 + 64 * block_n * 2 + 1024
    return max(1, (SMEM_LIMIT - fixed) // (block_n * (dl + dr) * 2))


def plan(B: int, H: int, S: int, DL: int, DR: int, config: dict, device: torch.device,
         gluon_ok: bool = True) -> dict:
    """The launch plan for one call (pure host arithmetic): core, tiles, split count, merge mode."""
    cfg = dict(DEFAULT)
    cfg.update(config or {})
    small = B * triton.cdiv(H, 64) <= int(cfg["LAT_GROUPS"])
    min_tiles = int(cfg["LAT_MIN_SPLIT_TILES"] if small else cfg["MIN_SPLIT_TILES"])
    use_gluon = (cfg["CORE"] == "gluon" and gluon_ok and device.type == "cuda" and H % 64 == 0
                 and DL in (128, 256, 512) and DR in (16, 32, 64))
    BLOCK_N = int(cfg["BLOCK_N"])
    if use_gluon:
        BLOCK_H, stages = 64, _gluon_stages(BLOCK_N, DL, DR)
    else:
        BLOCK_H = min(int(cfg["BLOCK_H"]), max(16, _next_pow2(H)))   # tl.dot needs M >= 16
        stages = int(cfg["num_stages"])
    NUM_HG = triton.cdiv(H, BLOCK_H)
    groups = B * NUM_HG
    n_sm = _sm_count(device)
    # split count: at most WAVES waves of CTAs (rounded down: b128 runs 128 CTAs, one split each, rather than 256 CTAs
    # and a merge; b64 two splits per batch; B = 1 128 splits), each split >= min_tiles tiles, at most MAX_SPLITS
    max_ns = min(MAX_SPLITS, triton.cdiv(S, BLOCK_N * min_tiles))
    ns = max(1, min((int(cfg["WAVES"]) * n_sm) // groups, max_ns))
    merge = cfg["MERGE"]
    if merge == "auto":
        merge = "last" if ns <= int(cfg["LAST_MAX_NS"]) else "spin"
    if merge == "spin":
        if device.type != "cuda":
            merge = "last"            # the interpreter runs CTAs one after another: nobody could wait
        elif groups * ns > n_sm:      # the barrier needs every CTA resident: one wave (1 CTA per SM) or nothing
            if n_sm // groups >= 2:
                ns = min(ns, n_sm // groups)
            else:
                merge = "launch"
    split_len = triton.cdiv(triton.cdiv(S, ns), BLOCK_N) * BLOCK_N
    ns = triton.cdiv(S, split_len)    # whole tiles per split, none empty
    mode = MODE_DIRECT if ns == 1 else {"launch": MODE_LAUNCH, "last": MODE_LAST, "spin": MODE_SPIN}[merge]
    BLOCK_S = max(2, _next_pow2(ns))
    BLOCK_DL, BLOCK_DR = max(16, _next_pow2(DL)), max(16, _next_pow2(DR))
    HC, DC = _merge_shape(BLOCK_S, BLOCK_H, BLOCK_DL, int(cfg["MERGE_TILE"]), BLOCK_DL)
    HC2, DC2 = _merge_shape(BLOCK_S, 16 if B * H > 256 else 1, BLOCK_DL, 8192, 64)
    return dict(core="gluon" if use_gluon else "tl", BLOCK_N=BLOCK_N, BLOCK_H=BLOCK_H, NUM_HG=NUM_HG, groups=groups,
                ns=ns, split_len=split_len, mode=mode, stages=stages, BLOCK_S=BLOCK_S, BLOCK_DL=BLOCK_DL,
                BLOCK_DR=BLOCK_DR, HC=HC, DC=DC, HC2=HC2, DC2=DC2, ML=_merge_layout(BLOCK_S, HC, DC),
                EVEN_N=(S % BLOCK_N == 0), MASK_D=not (DL == BLOCK_DL and DR == BLOCK_DR),
                MASK_HD=not (DL == BLOCK_DL and DR == BLOCK_DR and H % BLOCK_H == 0),
                PF_DIST=int(cfg["PF_DIST"]), LAZY_L=cfg["LAZY_L"] == "on", COALESCE_O=cfg["O_STORE"] == "rows",
                num_warps=8 if use_gluon else int(cfg["num_warps"]), partial_fp32=cfg["PARTIAL"] == "fp32",
                cached=device.type == "cuda" and cfg["LAUNCH"] == "cached")


def _gluon_ok(q, kv) -> bool:
    """TMA needs 16-byte row strides and the [B*S, D] / [B*H, D] views (and 16-byte aligned bases: checked by
    TensorDescriptor itself; the static rules do not let a candidate look at pointers)."""
    B, _, H, D = q.shape
    S = kv.shape[1]
    return (q.dtype in (torch.bfloat16, torch.float16) and kv.dtype == q.dtype
            and kv.stride(2) == 1 and kv.stride(1) == D and kv.stride(0) == S * D
            and q.stride(3) == 1 and q.stride(2) == D and q.stride(0) == H * D
            and (D * 2) % 16 == 0)


def _cached_plan(B, H, S, DL, DR, config, device, gluon_ok):
    """(key, plan): the plan of a (shape, config, device), computed once."""
    key = (B, H, S, DL, DR, str(device), gluon_ok, tuple((config or {}).items()))
    P = _PLANS.get(key)
    if P is None:
        P = plan(B, H, S, DL, DR, config, device, gluon_ok)
        _PLANS[key] = P
    return key, P


def _smem_layout(block: tuple, dtype: torch.dtype):
    """NVMMA shared layout of a TMA block (cached: building one costs host time on every call)."""
    key = (block, dtype)
    lay = _LAYOUTS.get(key)
    if lay is None:
        lay = gl.NVMMASharedLayout.get_default_for(list(block), gl.bfloat16 if dtype == torch.bfloat16 else gl.float16)
        _LAYOUTS[key] = lay
    return lay


def _launch(kernel, grid, args, opts, key, cached: bool):
    """Launch `kernel` over `grid` (three dims: a compiled kernel's launcher indexes all three). With `cached`, the
    first launch of a key goes through the JIT (compile, cache) and later ones call the compiled kernel directly,
    skipping the binder's per-argument specialisation; the key holds what the JIT specialises on (the plan, dtypes,
    descriptor shapes, integer values; 16-byte alignment of every pointer is ASSUMED, as for PyTorch's allocations:
    the static rules do not let a candidate look at pointers, so a misaligned view must use LAUNCH="jit")."""
    ck = _LAUNCHED.get(key) if cached else None
    if ck is not None:
        ck[grid](*args)
        return
    ck = kernel[grid](*args, **opts)
    if cached and ck is not None and hasattr(ck, "function"):
        _LAUNCHED[key] = ck


def _spec_key(args):
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(a.dtype)
        elif isinstance(a, TensorDescriptor):
            out.append((a.base.dtype, tuple(a.shape), tuple(a.strides), tuple(a.block_shape)))
        else:
            out.append(a)
    return tuple(out)


def _descriptors(q, kv, DL, DR, bn):
    """TMA descriptors of q and kv in their [B*H, D] / [B*S, D] views (latent and rotary blocks), or None when a base
    is not 16-byte aligned (TensorDescriptor asserts it)."""
    B, _, H, D = q.shape
    S = kv.shape[1]
    q2, kv2 = q.view(B * H, D), kv.view(B * S, D)
    try:
        return (TensorDescriptor(q2, [B * H, D], [D, 1], [64, DL], _smem_layout((64, DL), q.dtype)),
                TensorDescriptor(q2, [B * H, D], [D, 1], [64, DR], _smem_layout((64, DR), q.dtype)),
                TensorDescriptor(kv2, [B * S, D], [D, 1], [bn, DL], _smem_layout((bn, DL), q.dtype)),
                TensorDescriptor(kv2, [B * S, D], [D, 1], [bn, DR], _smem_layout((bn, DR), q.dtype)))
    except AssertionError:
        return None


def mla_decode(inputs: dict, out: dict, config: dict) -> None:
    q, kv, scale = inputs["q"], inputs["kv"], inputs["scale"]
    o, lse = out["o"], out["lse"]
    B, _, H, D = q.shape
    S = kv.shape[1]
    DL = o.shape[-1]
    DR = D - DL
    assert S >= 1 and DR >= 1 and q.stride(-1) == 1 and kv.stride(-1) == 1 and o.stride(-1) == 1
    gluon_ok = q.device.type == "cuda" and _gluon_ok(q, kv)
    pkey, P = _cached_plan(B, H, S, DL, DR, config, q.device, gluon_ok)
    ns, mode = P["ns"], P["mode"]
    cnt, gen_off = lse, 0     # unused unless a one-launch merge
    if mode == MODE_DIRECT:
        op = lsep = o        # unused
    else:
        op = _scratch(q.device, (B, ns, H, DL), torch.float32 if P["partial_fp32"] else q.dtype)
        lsep = _scratch(q.device, (B, ns, H), torch.float32)
        if mode in (MODE_LAST, MODE_SPIN):
            cnt, gen_off = _counters(q.device, P["groups"], ns)
    descs = _descriptors(q, kv, DL, DR, P["BLOCK_N"]) if P["core"] == "gluon" else None
    if P["core"] == "gluon" and descs is None:     # a base TMA cannot address: the tl core
        return mla_decode(inputs, out, dict(config or {}, CORE="tl"))
    if descs is not None:
        args = descs + (kv, scale, o, lse, op, lsep, cnt, S, H, P["NUM_HG"], P["split_len"], ns, gen_off,
                        o.stride(0), o.stride(2), lse.stride(0), DL, DR, P["BLOCK_N"], P["stages"], P["EVEN_N"],
                        P["PF_DIST"], P["LAZY_L"], P["COALESCE_O"], mode, P["HC"], P["DC"], P["BLOCK_S"], P["ML"])
        _launch(_mla_gluon, (ns, P["groups"], 1), args, dict(num_warps=8), ("g", pkey, _spec_key(args[4:])),
                P["cached"])
    else:
        args = (q, kv, scale, o, lse, op, lsep, cnt, S, H, P["NUM_HG"], P["split_len"], ns, gen_off,
                q.stride(0), kv.stride(0), o.stride(0), o.stride(2), lse.stride(0),
                q.stride(2), kv.stride(1), DL, DR, P["BLOCK_H"], P["BLOCK_N"], P["BLOCK_DL"], P["BLOCK_DR"],
                P["EVEN_N"], P["MASK_D"], P["MASK_HD"], mode, P["HC"], P["DC"], P["BLOCK_S"])
        _launch(_split_tl, (ns, P["groups"], 1), args, dict(num_warps=P["num_warps"], num_stages=P["stages"]),
                ("t", pkey, _spec_key(args)), P["cached"])
    if mode == MODE_LAUNCH:
        num_hc = triton.cdiv(H, P["HC2"])
        args = (op, lsep, o, lse, H, ns, num_hc, o.stride(0), o.stride(2), lse.stride(0),
                DL, P["HC2"], P["DC2"], P["BLOCK_S"])
        _launch(_merge, (B * num_hc, triton.cdiv(DL, P["DC2"]), 1), args, dict(num_warps=4),
                ("m", pkey, _spec_key(args)), P["cached"])
