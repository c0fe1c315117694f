"""CPU-mode tests of seeds/splitkv_v3.py, plus an sm_90 compile of its Gluon core (no GPU needed).

Run: .venv/bin/python -m pytest kernels/mla/tests -q
What runs where: the interpreter has no Gluon, so under TRITON_INTERPRET=1 every config runs v3's `tl` core
(checked here in fp16 / fp32 on the smoke shapes, every merge mode, the small-problem overrides); the Gluon
core is compiled for sm_90 here (layouts, shared-memory budget, no spills, TMA + wgmma + the spin barrier's
acquire in the PTX) and checked for correctness on the GPU only (tune_v2.py --set v3, the harness battery).
The plan tests pin down which core and split each goal shape gets on an H200.
"""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from mlacheck import TASK_DIR, TOML, check_space, compile_sm90, load_seed, smoke_case, static_violations  # noqa: E402

V3 = TASK_DIR / "seeds" / "splitkv_v3.py"
MOD = load_seed(V3)
H200 = torch.device("cuda", 0)

# on the CPU all of these run the tl core: spin (-> last), launch, last, direct, mma with M = 16 / 32 / 64,
# both partial dtypes, merge tiles, the small-problem overrides
CONFIGS = [
    {},
    {"COMBINE": "launch", "PARTIAL": "fp32"},
    {"COMBINE": "last", "BLOCK_H": 16, "BLOCK_N": 16, "MERGE_TILE": 4096},
    {"CORE": "tl", "BLOCK_H": 32, "BLOCK_N": 32, "num_stages": 3, "MIN_SPLIT_TILES": 2, "MERGE_TILE": 32768},
    {"MIN_SPLIT_TILES": 1000},                                                     # one split: direct write
    {"LAT_CORE": "tl", "LAT_MIN_SPLIT_TILES": 2, "LAT_GROUPS": 32, "COMBINE": "launch", "LAUNCH": "jit"},
    {"TILE_FIRST": "on", "TL_PF_TILES": 4, "SPIN_BARRIER": "epoch"},  # one-tile splits: tile before q, no loop
    {"TILE_FIRST": "on", "COMBINE": "launch", "BLOCK_H": 32},
]


def test_space_default_best():
    check_space(MOD, CONFIGS)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
@pytest.mark.parametrize("shape_name", list(TOML["smoke"]))
@pytest.mark.parametrize("ci", range(len(CONFIGS)))
def test_smoke(dtype, shape_name, ci):
    smoke_case(MOD, shape_name, CONFIGS[ci], dtype, 23 + ci, calls=2)


def test_cpu_paths_are_exercised():
    modes, tile_first = set(), set()
    for shape in TOML["smoke"].values():
        for cfg in CONFIGS:
            P = MOD.plan(shape["B"], shape.get("H", 64), shape["S"], shape.get("D_LATENT", 512), 64, cfg,
                         torch.device("cpu"))
            assert P["core"] == "tl" and P["PF_LINES"] == 0         # no inline PTX under the interpreter
            modes.add(P["mode"])
            if P["TILE_FIRST"]:
                tile_first.add((P["mode"], P["EVEN_N"]))
    assert {MOD.MODE_DIRECT, MOD.MODE_LAUNCH, MOD.MODE_LAST} <= modes
    # the one-tile path in every merge mode, with a partial last tile too
    assert {m for m, _ in tile_first} == {MOD.MODE_DIRECT, MOD.MODE_LAUNCH, MOD.MODE_LAST}, tile_first
    assert (MOD.MODE_LAST, False) in tile_first, tile_first


def _plan(B, S, H=64, **cfg):
    MOD._SM_COUNT[0] = 132        # an H200, without touching CUDA
    return MOD.plan(B, H, S, 512, 64, cfg, H200)


def test_h200_plans():
    """Which core, split and merge each goal shape gets on an H200 with BEST's defaults."""
    p = _plan(64, 8192)
    assert (p["core"], p["ns"], p["mode"], p["stages"]) == ("gluon", 2, MOD.MODE_SPIN, 2)
    p = _plan(128, 4096)                          # 128 CTAs, one split each: no merge
    assert (p["core"], p["ns"], p["mode"]) == ("gluon", 1, MOD.MODE_DIRECT)
    p = _plan(1, 8192)
    assert (p["ns"], p["mode"], p["split_len"]) == (128, MOD.MODE_SPIN, 64)
    assert _plan(1, 8192, LAT_CORE="tl")["core"] == "tl"
    assert _plan(64, 8192, LAT_CORE="tl")["core"] == "gluon"        # not a small problem
    assert _plan(1, 8192, LAT_MIN_SPLIT_TILES=2)["ns"] == 64
    assert _plan(1, 8192, COMBINE="last")["mode"] == MOD.MODE_LAUNCH  # the Gluon core has no "last"
    assert _plan(5, 77, H=16)["core"] == "tl"                        # heads not a multiple of 64
    assert _plan(2, 2049, H=128)["NUM_HG"] == 2
    # the ring depth is clamped to what fits next to q and p in 227 KB
    assert [_plan(64, 8192, BLOCK_N=n, STAGES=8)["stages"] for n in (64, 32, 16)] == [2, 4, 8]
    assert _plan(64, 8192, BLOCK_N=128)["BLOCK_N"] == 64
    assert not MOD.plan(64, 64, 8192, 512, 64, {}, H200, gluon_ok=False)["core"] == "gluon"
    # TILE_FIRST: only the tl core's one-tile splits (b1_s8192: 128 x 64 rows); b1_s32768 has 4 tiles per split
    assert _plan(1, 8192, LAT_CORE="tl", TILE_FIRST="on")["TILE_FIRST"]
    assert not _plan(1, 32768, LAT_CORE="tl", TILE_FIRST="on")["TILE_FIRST"]
    assert not _plan(1, 8192, LAT_CORE="gluon", TILE_FIRST="on")["TILE_FIRST"]
    # L2 prefetch: 128-byte lines covering the first tiles of a split (4 x 64 rows x 1152 B = 2304 -> 4096)
    assert _plan(1, 32768, LAT_CORE="tl", TL_PF_TILES=4)["PF_LINES"] == 4096
    assert _plan(1, 8192, LAT_CORE="tl", TL_PF_TILES=4)["PF_LINES"] == 1024      # the split is one tile
    assert _plan(64, 8192, TL_PF_TILES=4)["PF_LINES"] == 0                       # Gluon core: PF_DIST instead
    # the never-reset barrier: the tl core's spin merge only
    assert _plan(1, 8192, LAT_CORE="tl", SPIN_BARRIER="epoch")["EPOCH"]
    assert not _plan(1, 8192, LAT_CORE="tl", SPIN_BARRIER="epoch", LAT_COMBINE="launch")["EPOCH"]
    assert not _plan(64, 8192, SPIN_BARRIER="epoch")["EPOCH"]                   # Gluon core
    assert not MOD.plan(1, 64, 8192, 512, 64, {"SPIN_BARRIER": "epoch"}, torch.device("cpu"))["EPOCH"]


def test_epoch_counters_are_int64_and_per_split_count():
    """Each never-reset counter buffer only ever sees launches of one split count, so it stays a multiple of it."""
    dev = torch.device("cpu")
    a, b = MOD._counters(dev, 8, 128), MOD._counters(dev, 8, 64)
    assert a.dtype == torch.int64 and b.dtype == torch.int64 and a.data_ptr() != b.data_ptr()
    assert MOD._counters(dev, 8, 128) is a and MOD._counters(dev, 8).dtype == torch.int32


def test_merge_layout_covers_tile_without_replication():
    for bs, hc, dc in [(2, 64, 64), (128, 2, 64), (64, 4, 64), (4, 16, 64), (128, 1, 16)]:
        spt, ts, th, td, ws, wh = MOD._merge_layout(bs, hc, dc)
        assert ts * th * td == 32 and ws * wh == 8
        assert spt * td <= dc and ts <= bs, (bs, hc, dc)


def test_cached_launch_reuses_the_compiled_kernel():
    """LAUNCH="cached": the first launch of a key goes through the JIT, later ones straight to the compiled
    kernel, with a three-dim grid and the same arguments (the interpreter never takes this path)."""
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
    assert calls[1] == ("compiled", (4, 2, 1), (1, "x")) and calls[0][3] == {"num_warps": 8}
    MOD._LAUNCHED.clear()


def test_best_is_what_bench_measured():
    """BEST is exactly the configuration of the bench.py figures in results/ (GPU call 2); keys added to SPACE
    since (session 4) are at the value that runs the code that was measured."""
    import json
    measured = json.loads((TASK_DIR / "results" / "h200_v3_config.json").read_text())
    assert {k: MOD.BEST[k] for k in measured} == measured
    assert {k: v for k, v in MOD.BEST.items() if k not in measured} == {"TILE_FIRST": "off", "TL_PF_TILES": 0,
                                                                         "SPIN_BARRIER": "reset"}


def test_static_rules():
    v = static_violations(V3)
    assert not v, v


def test_compiles_for_h200():
    """The Gluon core (and the tl core it falls back to) compile for sm_90 within the resource budget."""
    g = {"LAT_CORE": "gluon"}        # compile_sm90 starts from BEST, whose small problems run the tl core
    cases = [{"B": 64, "S": 8192, "config": {"PF_DIST": 2}}, {"B": 1, "S": 8192, "config": g},
             {"B": 128, "S": 4096},
             {"B": 1, "S": 32768, "config": dict(g, COMBINE="launch", PF_DIST=2, MERGE_TILE=32768)},
             {"B": 3, "S": 4097, "config": dict(g, BLOCK_N=32, STAGES=4, P_VIA="regs", PF_DIST=1)},
             {"B": 1, "S": 8192}, {"B": 5, "S": 77, "H": 16},
             {"B": 1, "S": 8192, "config": {"TILE_FIRST": "on", "SPIN_BARRIER": "epoch"}},
             {"B": 1, "S": 32768, "config": {"TL_PF_TILES": 4}}]
    rows = compile_sm90(V3, cases)
    for r in rows:
        assert r["shared"] <= 227 * 1024 and r["stack"] == 0, r
    g = [r for r in rows if r["core"] == "gluon"]
    assert len(g) == 5 and all(r["tma"] > 0 and r["wgmma"] > 0 for r in g), g
    assert rows[0]["mode"] == MOD.MODE_SPIN and rows[0]["acquire_ld"] >= 1, rows[0]   # acquire not dropped
    assert rows[3]["merge_regs"], rows[3]
    assert rows[5]["core"] == "tl" and rows[5]["cp_async"] > 0, rows[5]
    # one tile, no loop: plain loads (tile before q), no cp.async ring, so 147 KB of shared memory
    assert rows[7]["cp_async"] == 0 and rows[7]["shared"] < 150 * 1024 and rows[7]["regs"] < 255, rows[7]
    # epoch barrier: the acquire kept, no departure counter (BEST's barrier has three acq_rel atomics)
    assert rows[7]["acquire_ld"] >= 1 and rows[7]["acq_rel_atom"] == 0 and rows[5]["acq_rel_atom"] == 3, rows[7]
    assert rows[8]["prefetch_l2"] > 0 and rows[8]["cp_async"] > 0, rows[8]
