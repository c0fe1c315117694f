"""CPU-mode tests of seeds/splitkv_v4.py, plus sm_90 compiles of its Gluon core (no GPU needed).

Run: TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES= .venv/bin/python -m pytest -q kernels/mla/tests/test_mla_v4_cpu.py
What runs where: the interpreter has no Gluon, so every config here runs v4's `tl` core on the smoke shapes in fp16 /
fp32, through every merge the interpreter can run: direct (one split), "launch" (second kernel), "last" (the last
CTA of a group merges; "spin" becomes "last" there, CTAs run one after another) with the never-reset int64 counters
over two calls, one and several merge items, fp32 / input-dtype partials, non-contiguous cache rows. The Gluon core
is compiled for sm_90 (resources, wgmma + TMA + bulk L2 prefetch + the barriers' atomics in the PTX) and its index
arithmetic (ring slots, mbarrier phases, L2 prefetch coverage) is replayed in Python; its host side (TMA descriptors,
scratch, counters, every launch argument by name, the merge launch, the fallback when TMA cannot address a base) runs
on CPU tensors with the launches recorded instead of run; its results are checked on the GPU only (scripts/gpu/mla_bench.sh: the harness battery on every goal and held-out shape).
"""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from mlacheck import (TASK_DIR, TOML, TOL, check, check_space, compile_sm90, load_seed, run, smoke_case,  # noqa: E402
                      static_violations, task)

V4 = TASK_DIR / "seeds" / "splitkv_v4.py"
MOD = load_seed(V4)
H200 = torch.device("cuda", 0)
CPU = torch.device("cpu")

# every path the interpreter can run (plans on the smoke shapes: test_cpu_paths_are_exercised)
CONFIGS = [
    {},                                                                            # BEST: direct / last
    {"MERGE": "launch", "PARTIAL": "fp32", "BLOCK_N": 32},
    {"MERGE": "last", "BLOCK_H": 16, "BLOCK_N": 16, "MERGE_TILE": 8192, "WAVES": 2},  # several merge items
    {"MERGE": "spin", "BLOCK_H": 32, "BLOCK_N": 32, "num_stages": 3, "LAT_GROUPS": 0, "MIN_SPLIT_TILES": 2},
    {"MIN_SPLIT_TILES": 1000, "LAT_MIN_SPLIT_TILES": 4, "num_warps": 4},            # fewer / no splits
]


def _plan(B, S, H=64, dev=H200, **cfg):
    MOD._SM_COUNT[0] = 132        # an H200, without touching CUDA
    return MOD.plan(B, H, S, 512, 64, cfg, dev)


def test_space_default_best():
    check_space(MOD, CONFIGS)
    assert MOD.BEST == MOD.DEFAULT    # a prediction until measured (NOTES.md "v4")


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
@pytest.mark.parametrize("shape_name", list(TOML["smoke"]))
@pytest.mark.parametrize("ci", range(len(CONFIGS)))
def test_smoke(dtype, shape_name, ci):
    smoke_case(MOD, shape_name, CONFIGS[ci], dtype, 31 + ci, calls=2)


def test_cpu_paths_are_exercised():
    seen = set()
    for shape in TOML["smoke"].values():
        for cfg in CONFIGS:
            P = MOD.plan(shape["B"], shape.get("H", 64), shape["S"], shape.get("D_LATENT", 512), 64, cfg, CPU)
            assert P["core"] == "tl" and not P["cached"]
            items = (P["BLOCK_H"] // P["HC"]) * (P["BLOCK_DL"] // P["DC"])
            seen.add((P["mode"], P["EVEN_N"], items > 1))
    modes = {m for m, _, _ in seen}
    assert modes == {MOD.MODE_DIRECT, MOD.MODE_LAUNCH, MOD.MODE_LAST}, seen
    assert {(MOD.MODE_LAST, False, False), (MOD.MODE_LAST, True, False)} <= seen, seen


@pytest.mark.parametrize("merge", ["last", "launch"])
def test_merge_items(merge):
    """The one-launch merge loop over several items (the smoke shapes' partials fit one item at every SPACE value of
    MERGE_TILE, so a tile of 1024 elements, outside SPACE, makes two items of [2 splits, 8 heads, 64 dims])."""
    cfg = {"MERGE": merge, "MERGE_TILE": 1024, "BLOCK_H": 16, "BLOCK_N": 16, "WAVES": 2}
    shape = TOML["smoke"]["s64_h16"]
    P = MOD.plan(shape["B"], 16, shape["S"], shape["D_LATENT"], 64, cfg, CPU)
    assert P["ns"] == 2 and (P["BLOCK_H"] // P["HC"]) * (P["BLOCK_DL"] // P["DC"]) == 2, P
    smoke_case(MOD, "s64_h16", cfg, torch.float32, 41, calls=2)


def test_odd_strides_and_three_calls():
    """Cache rows with a stride > D (a view into a wider buffer) and q with padded heads run the tl core everywhere;
    three calls in a row keep the never-reset counters consistent (last merge, 3 splits)."""
    shape = TOML["smoke"]["s130_h8"]
    inp = task.make_inputs(shape, 7, "cpu", torch.float32)
    wide = torch.zeros(inp["kv"].shape[:-1] + (inp["kv"].shape[-1] + 8,))
    wide[..., :inp["kv"].shape[-1]] = inp["kv"]
    inp2 = dict(inp, kv=wide[..., :inp["kv"].shape[-1]])
    assert inp2["kv"].stride(1) != inp2["kv"].shape[-1]
    ref = task.reference(**inp)
    for _ in range(3):
        check(run(MOD, inp2, task.output_spec(shape, inp), {"BLOCK_N": 32}), ref, TOL[torch.float32])


def test_h200_plans():
    """Core, split and merge of every goal and held-out shape on an H200 with BEST."""
    p = _plan(64, 8192)                      # two splits per batch, the last CTA of each pair merges
    assert (p["core"], p["ns"], p["mode"], p["stages"], p["split_len"]) == ("gluon", 2, MOD.MODE_LAST, 2, 4096)
    assert (p["HC"], p["DC"]) == (32, 512)                                      # two merge items of [2, 32, 512]
    p = _plan(128, 4096)                     # 128 CTAs, one split each: no merge
    assert (p["core"], p["ns"], p["mode"]) == ("gluon", 1, MOD.MODE_DIRECT)
    for S, tiles in ((8192, 1), (32768, 4)):  # B = 1: 128 splits, one merge item per CTA, whole split in flight
        p = _plan(1, S)
        assert (p["ns"], p["mode"], p["split_len"] // 64) == (128, MOD.MODE_SPIN, tiles)
        assert (p["HC"], p["DC"]) == (1, 256) and 64 // p["HC"] * (512 // p["DC"]) == p["ns"]
        assert p["stages"] + p["PF_DIST"] >= tiles
    assert _plan(1, 8192, LAT_MIN_SPLIT_TILES=2)["ns"] == 64
    assert _plan(64, 8192, MERGE="spin")["mode"] == MOD.MODE_SPIN
    assert _plan(64, 8192, LAST_MAX_NS=2, MERGE="auto")["mode"] == MOD.MODE_LAST
    assert _plan(1, 8192, MERGE="launch")["mode"] == MOD.MODE_LAUNCH
    assert _plan(1, 8192, WAVES=2)["ns"] == 128                                 # the spin grid stays one wave
    assert [_plan(64, 8192, BLOCK_N=n)["stages"] for n in (64, 32, 16)] == [2, 4, 8]
    assert _plan(1, 8192, CORE="tl")["core"] == "tl"
    assert MOD.plan(64, 64, 8192, 512, 64, {}, H200, gluon_ok=False)["core"] == "tl"
    assert _plan(1, 8192, LAUNCH="cached")["cached"] and not _plan(1, 8192)["cached"]
    # held-out shapes: odd lengths, other head counts; every one-launch merge fits one wave
    for name, sh in TOML["heldout"].items():
        p = _plan(sh["B"], sh["S"], sh.get("H", 64))
        assert p["core"] == ("gluon" if sh.get("H", 64) % 64 == 0 else "tl"), name
        assert p["ns"] * p["split_len"] >= sh["S"] > (p["ns"] - 1) * p["split_len"], name
        if p["mode"] == MOD.MODE_SPIN:
            assert p["ns"] * p["groups"] <= 132, name
    assert _plan(1, 1)["mode"] == MOD.MODE_DIRECT and not _plan(1, 1)["EVEN_N"]


def test_ring_schedule():
    """The Gluon core's index arithmetic, replayed: every tile is loaded once, into a slot whose previous tile's p.V
    was waited, and waited on with the right mbarrier phase; every tile past the prologue's ring loads is L2-prefetched
    once before its TMA load (never past the split); B = 1 at S = 32768 requests its whole split in the prologue."""
    for n_tiles in (1, 2, 3, 4, 5, 64):
        for stages, pf_dist in ((2, 2), (2, 0), (4, 1), (8, 3), (2, 4)):
            slot_of, loaded_at, phase_uses, prefetched = {}, {}, {}, {}
            for t in range(stages):                                   # prologue
                if t < n_tiles:
                    slot_of[t], loaded_at[t] = t, -1
            for t in range(stages, stages + pf_dist):
                if t + 1 <= n_tiles:
                    prefetched[t] = -1
            for i in range(n_tiles):
                nxt = i + stages - 1
                if i > 0 and nxt < n_tiles:
                    assert nxt not in slot_of and nxt % stages == (i - 1) % stages  # the slot of tile i-1 (p.V done)
                    slot_of[nxt], loaded_at[nxt] = nxt % stages, i
                if pf_dist and i > 0 and nxt + pf_dist + 1 <= n_tiles:
                    assert nxt + pf_dist not in prefetched
                    prefetched[nxt + pf_dist] = i
                slot = i % stages
                assert slot_of[i] == slot and loaded_at[i] < i
                phase_uses[slot] = phase_uses.get(slot, -1) + 1
                assert (i // stages) & 1 == phase_uses[slot] & 1       # the k-th completion of the slot's barrier
            assert sorted(slot_of) == list(range(n_tiles))
            if pf_dist:
                assert sorted(prefetched) == list(range(stages, n_tiles))
                assert all(prefetched[t] < loaded_at[t] for t in prefetched)
    p = _plan(1, 32768)
    assert p["stages"] + p["PF_DIST"] >= p["split_len"] // 64


def test_counters_are_int64_per_split_count_with_a_fixed_generation_offset():
    (a, off_a), (b, _) = MOD._counters(CPU, 8, 128), MOD._counters(CPU, 8, 2)
    assert a.dtype == torch.int64 and b.dtype == torch.int64 and a.data_ptr() != b.data_ptr()
    assert MOD._counters(CPU, 64, 128)[0] is a and off_a >= 64 and a.numel() == 2 * off_a
    c, off_c = MOD._counters(CPU, 4096, 128)          # more groups than the buffer holds: a new, zeroed buffer
    assert c is not a and off_c >= 4096 and int(c.abs().sum()) == 0


def test_merge_layout_covers_tile_without_replication():
    shapes = [(sh["B"], sh["S"], sh.get("H", 64)) for sh in list(TOML["shapes"].values()) + list(TOML["heldout"].values())]
    for B, S, H in shapes:
        for tile in MOD.SPACE["MERGE_TILE"]:
            p = _plan(B, S, H, MERGE_TILE=tile)
            spt, ts, th, td, ws, wh = p["ML"]
            bs, hc, dc = p["BLOCK_S"], p["HC"], p["DC"]
            assert ts * th * td == 32 and ws * wh == 8 and bs * hc * dc <= max(tile, bs * 16), (B, S, H, tile)
            assert spt * td <= dc and ts * ws <= bs and th * wh <= hc, (B, S, H, tile, p["ML"])


def test_cached_launch_reuses_the_compiled_kernel():
    calls = []

    class Compiled:
        function = object()

        def __getitem__(self, grid):
            assert len(grid) == 3, grid        # the compiled launcher indexes grid[2]
            return lambda *a: calls.append(("compiled", grid, a))

    class Jit:
        def __getitem__(self, grid):
            def launch(*a, **opts):
                calls.append(("jit", grid, a, opts))
                return Compiled()
            return launch

    MOD._LAUNCHED.clear()
    for _ in range(3):
        MOD._launch(Jit(), (4, 2, 1), (1, "x"), {"num_warps": 8}, ("k", 1), cached=True)
    MOD._launch(Jit(), (4, 2, 1), (1, "x"), {"num_warps": 8}, ("k", 2), cached=False)
    assert [c[0] for c in calls] == ["jit", "compiled", "compiled", "jit"]
    MOD._LAUNCHED.clear()


def test_static_rules():
    v = static_violations(V4)
    assert not v, v


def test_compiles_for_h200():
    """BEST at the four goal shapes and the SPACE corners the device script measures, compiled for sm_90."""
    cases = [{"B": 64, "S": 8192}, {"B": 128, "S": 4096}, {"B": 1, "S": 8192}, {"B": 1, "S": 32768},
             {"B": 64, "S": 8192, "config": {"MERGE": "spin", "PF_DIST": 3}},
             {"B": 128, "S": 4096, "config": {"PF_DIST": 0, "LAZY_L": "off"}},
             {"B": 1, "S": 8192, "config": {"MERGE": "launch", "PARTIAL": "fp32"}},
             {"B": 3, "S": 4097, "config": {"BLOCK_N": 32, "O_STORE": "mma"}},
             {"B": 4, "S": 333, "H": 8}]
    rows = compile_sm90(V4, cases)
    for r in rows:
        assert r["shared"] <= 227 * 1024 and r["stack"] == 0 and r["regs"] <= 255, r
    g = [r for r in rows if r["core"] == "gluon"]
    assert len(g) == 8 and all(r["tma"] > 0 and r["wgmma"] > 0 for r in g), g
    assert all((r["prefetch_bulk_l2"] > 0) == (r["config"].get("PF_DIST", 2) > 0) for r in g), g
    assert rows[0]["mode"] == MOD.MODE_LAST and rows[0]["acq_rel_atom"] == 1, rows[0]
    assert rows[2]["mode"] == MOD.MODE_SPIN and rows[2]["acquire_ld"] >= 1 and rows[2]["acq_rel_atom"] == 0, rows[2]
    assert rows[6]["mode"] == MOD.MODE_LAUNCH and rows[6]["merge_regs"], rows[6]
    assert rows[8]["core"] == "tl", rows[8]


def _record_launches(monkeypatch, gluon_plan=True):
    """mla_decode with its plan computed for an H200 (Gluon core) and every launch recorded, not run: the host side of
    the Gluon path (descriptors, scratch, counters, the argument list) on CPU tensors."""
    calls = []
    real_plan = MOD._cached_plan

    def fake_plan(B, H, S, DL, DR, config, device, gluon_ok):
        if not gluon_plan or (config or {}).get("CORE") == "tl":
            return real_plan(B, H, S, DL, DR, config, device, gluon_ok)
        return ("fake", B, H, S, tuple((config or {}).items())), _plan(B, S, H, **(config or {}))

    monkeypatch.setattr(MOD, "_cached_plan", fake_plan)
    monkeypatch.setattr(MOD, "_launch", lambda kernel, grid, args, opts, key, cached:
                        calls.append((kernel, grid, dict(zip(kernel.arg_names, args)), opts, len(args))))
    return calls


@pytest.mark.parametrize("B,S,H,cfg,mode", [
    (1, 8192, 64, {}, "spin"), (8, 512, 64, {}, "spin"), (64, 512, 64, {}, "last"), (128, 256, 64, {}, "direct"),
    (1, 8192, 64, {"MERGE": "launch", "PARTIAL": "fp32"}, "launch"), (2, 2049, 128, {}, "spin"),
    (1, 1, 64, {}, "direct"), (3, 333, 64, {"BLOCK_N": 32, "O_STORE": "mma", "PF_DIST": 0, "LAZY_L": "off"}, "spin")])
def test_gluon_host_arguments(monkeypatch, B, S, H, cfg, mode):
    """Every argument of the Gluon launch (and of the merge launch) by NAME: a misplaced argument would only show on
    the GPU otherwise (the interpreter runs the tl core)."""
    calls = _record_launches(monkeypatch)
    inp = task.make_inputs({"B": B, "S": S, "H": H}, 1, "cpu", torch.bfloat16)
    spec = task.output_spec({"B": B, "S": S, "H": H}, inp)
    out = {k: torch.empty(s, dtype=d) for k, (s, d) in spec.items()}
    MOD.mla_decode(inp, out, cfg)
    P = _plan(B, S, H, **cfg)
    assert P["mode"] == {"direct": 0, "launch": 1, "last": 2, "spin": 3}[mode] and P["core"] == "gluon", P
    kernel, grid, a, opts, n = calls[0]
    assert kernel is MOD._mla_gluon and n == len(kernel.arg_names) and opts == {"num_warps": 8}
    assert grid == (P["ns"], P["groups"], 1)
    D, DL, bn = 576, 512, P["BLOCK_N"]
    for name, rows, block in (("q_desc_n", B * H, [64, DL]), ("q_desc_r", B * H, [64, D - DL]),
                              ("kv_desc_n", B * S, [bn, DL]), ("kv_desc_r", B * S, [bn, D - DL])):
        assert list(a[name].shape) == [rows, D] and list(a[name].block_shape) == block, name
    assert a["kv_desc_n"].base.data_ptr() == inp["kv"].data_ptr() and a["q_desc_r"].base.data_ptr() == inp["q"].data_ptr()
    assert a["kv_ptr"] is inp["kv"] and a["scale_ptr"] is inp["scale"] and a["o_ptr"] is out["o"]
    assert a["lse_ptr"] is out["lse"]
    assert (a["S"], a["H"], a["NUM_HG"], a["split_len"], a["NS"]) == (S, H, P["NUM_HG"], P["split_len"], P["ns"])
    assert (a["stride_ob"], a["stride_oh"], a["stride_lb"]) == (out["o"].stride(0), out["o"].stride(2),
                                                              out["lse"].stride(0))
    for k in ("BLOCK_N", "EVEN_N", "PF_DIST", "LAZY_L", "COALESCE_O", "HC", "DC", "BLOCK_S", "ML"):
        assert a[k] == P[k], k
    assert (a["DL"], a["DR"], a["STAGES"], a["MODE"]) == (DL, D - DL, P["stages"], P["mode"])
    if mode == "direct":
        assert len(calls) == 1
        return
    assert tuple(a["op_ptr"].shape) == (B, P["ns"], H, DL) and tuple(a["lsep_ptr"].shape) == (B, P["ns"], H)
    assert a["op_ptr"].dtype == (torch.float32 if cfg.get("PARTIAL") == "fp32" else torch.bfloat16)
    if mode in ("last", "spin"):
        cnt, off = MOD._counters(CPU, P["groups"], P["ns"])
        assert a["cnt_ptr"] is cnt and a["GEN_OFF"] == off and cnt.dtype == torch.int64 and len(calls) == 1
        return
    kernel, grid, m, opts, n = calls[1]                              # the launch merge
    assert kernel is MOD._merge and n == len(kernel.arg_names) and opts == {"num_warps": 4}
    num_hc = -(-H // P["HC2"])
    assert grid == (B * num_hc, -(-DL // P["DC2"]), 1)
    assert m["op_ptr"] is a["op_ptr"] and m["lsep_ptr"] is a["lsep_ptr"] and m["o_ptr"] is out["o"]
    assert (m["H"], m["NS"], m["NUM_HC"], m["DL"], m["HC"], m["DC"], m["BLOCK_S"]) == (
        H, P["ns"], num_hc, DL, P["HC2"], P["DC2"], P["BLOCK_S"])


def test_a_base_tma_cannot_address_falls_back_to_the_tl_core(monkeypatch):
    calls = _record_launches(monkeypatch)
    inp = task.make_inputs({"B": 1, "S": 256}, 1, "cpu", torch.bfloat16)
    buf = torch.zeros(inp["kv"].numel() + 1, dtype=torch.bfloat16)
    kv = buf[1:].view(inp["kv"].shape)                  # 2-byte offset: no TMA descriptor
    kv.copy_(inp["kv"])
    assert MOD._gluon_ok(inp["q"], kv) and MOD._descriptors(inp["q"], kv, 512, 64, 64) is None
    spec = task.output_spec({"B": 1, "S": 256}, inp)
    MOD.mla_decode(dict(inp, kv=kv), {k: torch.empty(s, dtype=d) for k, (s, d) in spec.items()}, {})
    assert [c[0] for c in calls][:1] == [MOD._split_tl], calls
    assert not MOD._gluon_ok(inp["q"].float(), inp["kv"].float())
    wide = torch.zeros(1, 256, 584, dtype=torch.bfloat16)[..., :576]      # rows 584 apart: not the [B*S, D] view
    assert not MOD._gluon_ok(inp["q"], wide)
