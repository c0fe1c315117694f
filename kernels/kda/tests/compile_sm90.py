"""Compile the KDA seeds' kernels for sm_90 (H200) without a GPU; print their resources as JSON.

    python3 compile_sm90.py [SEED.py ...] [--cfg '{"BK": 16}'] [--all] [--no-scan]   (TRITON_INTERPRET unset)

With no seed, compiles seeds/chunked.py (BEST) and seeds/chunked_v2.py (BEST). --cfg overrides
the config of every seed; --all adds v2's preparation at each value of its prep-side SPACE keys
(one key varied at a time). Per kernel: registers, spills (bytes of local memory), static shared
memory, whether the PTX uses wgmma, and instruction counts (SASS) of the costly kinds.
Registers and spills come from `cuobjdump -res-usage` on the cubin (Triton's bundled binary).
Exit 3 (with a message) when Triton's NVIDIA backend is unavailable. Used by test_kda_v2_cpu.py.
"""
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
SHAPE = dict(K=128, V=128)          # the goal shapes' head dims


def _compile(fn, types: dict, constexprs: dict, num_warps: int, num_stages: int, div16=(), **opts):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = {n: ("constexpr" if n in constexprs else types.get(n, "i32")) for n in fn.arg_names}
    # what the launcher specialises at run time: 16-byte aligned pointers (and the integer
    # arguments named in div16, multiples of 16 at the goal shapes)
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(fn.arg_names)
             if types.get(n, "").startswith("*") or n in div16}
    return triton.compile(ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs),
                          target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=num_warps, num_stages=num_stages, **opts))


def _tool(name):
    import triton
    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name)


def _resources(ck, name):
    """registers / spills from cuobjdump, shared from Triton's metadata, SASS census."""
    row = dict(kernel=name, shared=ck.metadata.shared, num_warps=ck.metadata.num_warps,
               wgmma="wgmma" in ck.asm["ptx"])
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(ck.asm["cubin"])
        path = f.name
    try:
        res = subprocess.run([_tool("cuobjdump"), "-res-usage", path], capture_output=True, text=True).stdout
        m = re.search(r"REG:(\d+)", res)
        row["registers"] = int(m.group(1)) if m else None
        m = re.search(r"STACK:(\d+)", res)
        row["stack"] = int(m.group(1)) if m else None
        m = re.search(r"LOCAL:(\d+)", res)
        row["local"] = int(m.group(1)) if m else None
        sass = subprocess.run([_tool("cuobjdump"), "-sass", path], capture_output=True, text=True).stdout
        ops = re.findall(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", sass, re.M)
        cnt = lambda *ks: sum(1 for o in ops if any(o.startswith(k) for k in ks))
        row["sass"] = dict(total=len(ops), LDG=cnt("LDG"), STG=cnt("STG"), LDL=cnt("LDL"), STL=cnt("STL"),
                           HGMMA=cnt("HGMMA"), HMMA=cnt("HMMA"), MUFU=cnt("MUFU"), BAR=cnt("BAR"),
                           LDS=cnt("LDS", "LDSM"), STS=cnt("STS"), FFMA=cnt("FFMA"))
    finally:
        os.unlink(path)
    # programs per SM by registers (65536 per SM, allocation granule 8 per thread) and shared
    regs = row["registers"] or 255
    threads = 32 * row["num_warps"]
    by_regs = 65536 // (((regs + 7) // 8) * 8 * threads)
    by_smem = (228 * 1024) // max(row["shared"] + 1024, 1)
    row["programs_per_sm"] = min(by_regs, by_smem, 64 // row["num_warps"])
    return row


def _load(path: Path):
    spec = importlib.util.spec_from_file_location("kda_seed_sm90_" + path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def compile_v1(mod, cfg):
    import triton.language as tl  # noqa: F401
    K, V = SHAPE["K"], SHAPE["V"]
    ptr = {n: "*bf16" for n in ("q", "k", "v", "beta", "q_hat", "k_hat", "w", "u_tilde", "p_mat", "o")}
    ptr.update({n: "*fp32" for n in ("g", "gamma", "t_scr", "g_scr", "h0", "h_final")})
    ptr["scale"] = "fp32"
    rows = []
    if cfg["PREP"] == "fused":
        ck = _compile(mod._kda_prep, ptr, dict(K=K, V=V, C=cfg["C"], BC=cfg["BC"], BK=cfg["BK"], BVP=64,
                                               PREP_DOT=cfg["PREP_DOT"]), cfg["PREP_WARPS"], cfg["PREP_STAGES"])
        rows.append(_resources(ck, "v1._kda_prep"))
    ck = _compile(mod._kda_scan, ptr, dict(K=K, V=V, C=cfg["C"], BV=cfg["BV"], HAS_H0=False,
                                           SCAN_DOT=cfg["SCAN_DOT"], STAGES=cfg["SCAN_STAGES"]),
                  cfg["SCAN_WARPS"], 1)
    rows.append(_resources(ck, "v1._kda_scan"))
    return rows


def compile_v2(mod, cfg, scan=True):
    import torch
    K, V = SHAPE["K"], SHAPE["V"]
    ptr = {n: "*bf16" for n in ("q", "k", "v", "beta", "q_hat", "k_hat", "w", "u_tilde", "p_mat", "o")}
    ptr.update({n: "*fp32" for n in ("g", "gamma", "h0", "h_final")})
    ptr["scale"] = "fp32"
    pa = mod.prep_args(torch.empty(0, dtype=torch.bfloat16), cfg)
    ce = dict(K=K, V=V, C=cfg["C"], BC=cfg["BC"], BK=min(cfg["BK"], K), BVP=min(cfg["BVP"], V), **pa)
    ck = _compile(mod._kda_prep_v2, ptr, ce, cfg["PREP_WARPS"], cfg["PREP_STAGES"], **mod.prep_launch(cfg))
    rows = [_resources(ck, "v2._kda_prep_v2")]
    if scan:
        ck = _compile(mod._kda_scan, ptr, dict(K=K, V=V, C=cfg["C"], BV=cfg["BV"], HAS_H0=False,
                                               SCAN_DOT=cfg["SCAN_DOT"], STAGES=cfg["SCAN_STAGES"]),
                      cfg["SCAN_WARPS"], 1)
        rows.append(_resources(ck, "v2._kda_scan"))
    return rows


def _ptr_types():
    """Argument types of v3's / v4's kernels (bf16 tensors, fp32 gates / states / scratch)."""
    ptr = {n: "*bf16" for n in ("q", "k", "v", "beta", "q_hat", "k_hat", "w", "u_tilde", "p_mat", "o")}
    ptr.update({n: "*fp32" for n in ("g", "gamma", "h0", "h_final", "a_scr")})
    ptr.update({n: "*bf16" for n in ("m_mat", "o_til")})
    ptr["scale"] = "fp32"
    return ptr


def _scan_row(mod, cfg, name):
    """v3's scan (v4 keeps it), at BV 32 for BV = auto (the multi-head shapes')."""
    bv = 32 if cfg["BV"] == "auto" else cfg["BV"]
    ck = _compile(mod._kda_scan, _ptr_types(), dict(K=SHAPE["K"], V=SHAPE["V"], C=cfg["C"], BV=bv, HAS_H0=False,
                                                   STAGES=cfg["SCAN_STAGES"]), cfg["SCAN_WARPS"], 1)
    return _resources(ck, name)


def compile_v3(mod, cfg, scan=True):
    import torch
    K, V = SHAPE["K"], SHAPE["V"]
    ptr = _ptr_types()
    split = cfg["INV"] == "split"
    pa = mod.prep_args(torch.empty(0, dtype=torch.bfloat16), cfg)
    ce = dict(K=K, V=V, C=cfg["C"], BC=cfg["BC"], BK=min(cfg["BK"], K), BVP=min(cfg["BVP"], V),
              SPLIT=split, **pa)
    launch = mod.prep_launch(cfg)
    ck = _compile(mod._kda_prep_v3, ptr, ce, launch.pop("num_warps"), 1, **launch)
    rows = [_resources(ck, "v3._kda_prep_v3")]
    if split:
        ck = _compile(mod._kda_inv_wu, ptr, dict(K=K, V=V, C=cfg["C"], BVP=min(cfg["BVP"], V),
                                                 INV_DOT=cfg["INV_DOT"], INV_ALGO=cfg["INV_ALGO"]),
                      cfg["INV_WARPS"], 1)
        rows.append(_resources(ck, "v3._kda_inv_wu"))
    if scan:
        rows.append(_scan_row(mod, cfg, "v3._kda_scan"))
    return rows


def compile_v4(mod, cfg, scan=True):
    """v4: the A program, the Q^ / P program (P = "own"), the split inverse, the scan (v3's)."""
    import torch
    K, V = SHAPE["K"], SHAPE["V"]
    ptr = _ptr_types()
    split = cfg["INV"] == "split"
    pa = mod.prep_args(torch.empty(0, dtype=torch.bfloat16), cfg)
    bk = min(cfg["BK"], K)
    launch = mod.prep_launch(cfg)
    warps = launch.pop("num_warps")
    rows = []
    if cfg["P"] == "own":
        ck = _compile(mod._kda_qp_v4, ptr, dict(K=K, C=cfg["C"], BC=cfg["BC"], BK=bk, AP_DT=pa["AP_DT"]),
                      warps, 1, **launch)
        rows.append(_resources(ck, "v4._kda_qp_v4"))
    ce = dict(K=K, V=V, C=cfg["C"], BC=cfg["BC"], BK=bk, BVP=min(cfg["BVP"], V), SPLIT=split, **pa)
    rows.append(_resources(_compile(mod._kda_prep_v4, ptr, ce, warps, 1, **launch), "v4._kda_prep_v4"))
    if split:
        ck = _compile(mod._kda_inv_wu, ptr, dict(K=K, V=V, C=cfg["C"], BVP=min(cfg["BVP"], V),
                                                 INV_DOT=cfg["INV_DOT"], EARLY=pa["EARLY"], LEFT=pa["LEFT"]),
                      cfg["INV_WARPS"], 1)
        rows.append(_resources(ck, "v4._kda_inv_wu"))
    if cfg["SCAN"] == "transition":
        ck = _compile(mod._kda_trans_v4, ptr, dict(K=K, V=V, C=cfg["C"], BN=64), 4, 1)
        rows.append(_resources(ck, "v4._kda_trans_v4"))
        if scan:
            bv = 32 if cfg["BV"] == "auto" else cfg["BV"]
            ck = _compile(mod._kda_scan_tr, ptr, dict(K=K, V=V, C=cfg["C"], BV=bv, HAS_H0=False,
                                                      STAGES=cfg["SCAN_STAGES"]), cfg["SCAN_WARPS"], 1)
            rows.append(_resources(ck, "v4._kda_scan_tr"))
    elif scan:
        rows.append(_scan_row(mod, cfg, "v4._kda_scan"))
    return rows


def compile_v5(mod, cfg, scan=True):
    """v5 (chunked_split.py): the preparation (C = 16: `_prep_c16`, else `_prep_stk`), the scan's
    three passes (0: no split, 1: segments from zero / identity, 3: re-run from state_in) and the
    combine; integers specialised as at the goal shapes (T, H, TP multiples of 16)."""
    K, V = SHAPE["K"], SHAPE["V"]
    ptr = {n: "*bf16" for n in ("q", "k", "v", "beta", "q_hat", "k_hat", "w", "u_til", "p_mat", "o")}
    ptr.update({n: "*fp32" for n in ("g", "gamma", "s_in", "s_out", "seg_state", "state_in")})
    ptr["scale"] = "fp32"
    div = ("T", "H", "TP")
    C = cfg["C"]
    opts = {"maxnreg": cfg["MAXNREG"]} if cfg["MAXNREG"] else {}
    ce = dict(K=K, V=V, BK=min(cfg["BK"], K), BVP=min(cfg["BVP"], V), INV_DOT=cfg["INV_DOT"])
    if C == 16:
        ck = _compile(mod._prep_c16, ptr, ce, cfg["PREP_WARPS"], 1, div, **opts)
        rows = [_resources(ck, "v5._prep_c16")]
    else:
        ck = _compile(mod._prep_stk, ptr, dict(ce, C=C, LEVELS=C.bit_length() - 1), cfg["PREP_WARPS"], 1, div, **opts)
        rows = [_resources(ck, f"v5._prep_stk(C={C})")]
    if scan:
        bv = min(cfg["BV"], V)
        for p in (0, 1, 3):
            ck = _compile(mod._scan, ptr, dict(K=K, V=V, C=C, BV=bv, PASS=p, HAS_H0=False, STAGES=cfg["SCAN_STAGES"]),
                          cfg["SCAN_WARPS"], 1, div)
            rows.append(_resources(ck, f"v5._scan(PASS={p})"))
        ck = _compile(mod._combine, ptr, dict(K=K, V=V, BV=32, BJ=32), 4, 1)
        rows.append(_resources(ck, "v5._combine"))
    return rows


def main():
    try:
        import triton.backends.nvidia  # noqa: F401
    except Exception as e:  # pragma: no cover
        print(f"Triton's NVIDIA backend is unavailable: {e}")
        sys.exit(3)
    if os.environ.get("TRITON_INTERPRET"):
        print("unset TRITON_INTERPRET: the interpreter cannot compile for sm_90")
        sys.exit(3)
    args = sys.argv[1:]
    over = {}
    if "--cfg" in args:
        i = args.index("--cfg")
        over = json.loads(args[i + 1])
        del args[i:i + 2]
    sweep = "--all" in args
    with_scan = "--no-scan" not in args            # v4 keeps v3's scan: its tests skip it
    args = [a for a in args if a not in ("--all", "--no-scan")]
    seeds = [Path(a) for a in args] or [HERE / "seeds" / "chunked.py", HERE / "seeds" / "chunked_v2.py"]
    out = []
    for path in seeds:
        mod = _load(path)
        cfg = dict(mod.BEST)
        cfg.update({k: v for k, v in over.items() if k in cfg})
        v2 = hasattr(mod, "_kda_prep_v2")
        if hasattr(mod, "_prep_c16"):
            rows = compile_v5(mod, cfg, scan=with_scan)
        elif hasattr(mod, "_kda_prep_v4"):
            rows = compile_v4(mod, cfg, scan=with_scan)
        elif hasattr(mod, "_kda_prep_v3"):
            rows = compile_v3(mod, cfg)
            for key in (("BK", "PREP_WARPS", "MAXNREG", "PREP_STAGES", "BVP", "AP_DOT", "INV", "INV_DOT", "INV_ALGO")
                        if sweep else ()):
                for val in mod.SPACE[key]:
                    if val != cfg[key]:
                        try:
                            rs = compile_v3(mod, dict(cfg, **{key: val}), scan=False)
                        except Exception as e:
                            rs = [dict(kernel="v3._kda_prep_v3", error=f"{type(e).__name__}: {str(e)[:300]}")]
                        for r in rs:
                            r["vary"] = {key: val}
                        rows += rs
        else:
            rows = compile_v2(mod, cfg) if v2 else compile_v1(mod, cfg)
        for r in rows:
            r["config"] = {k: cfg[k] for k in cfg if k not in ("C", "BC")}
        out += rows
        if v2 and sweep:
            for key in ("BK", "PREP_WARPS", "PREP_STAGES", "PREP_MAXNREG", "BVP", "AP_DOT", "INV_DOT", "WU_DOT"):
                for val in mod.SPACE[key]:
                    if val == cfg[key]:
                        continue
                    c = dict(cfg, **{key: val})
                    try:
                        r = compile_v2(mod, c, scan=False)[0]
                    except Exception as e:
                        r = dict(kernel="v2._kda_prep_v2", error=f"{type(e).__name__}: {str(e)[:300]}")
                    r["config"] = {key: val}
                    out.append(r)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
