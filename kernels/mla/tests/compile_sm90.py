"""Compile an MLA seed's split kernel for sm_90 (H200) without a GPU; print its resources as JSON.

    python3 compile_sm90.py SEED.py '[{"B": 64, "S": 8192, "config": {...}}, ...]' [DUMP_DIR]

Works for seeds/splitkv.py (v1), seeds/splitkv_v2.py and seeds/splitkv_v3.py (whose plan picks its Gluon or its
tl core; the row's "core" says which). TRITON_INTERPRET must be unset. Per case:
launch plan (mode, splits), registers / spills / shared memory (cuobjdump of the cubin, Triton's
bundled copy), and what the PTX uses: wgmma, its waits, cp.async, TMA (cp.async.bulk.tensor),
plain 16-byte global loads. With DUMP_DIR the TTGIR / PTX / SASS of every case are written there.
Exit 3 (with a message) when Triton's NVIDIA backend is unavailable.
"""
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile

import torch


def _compile(fn, types: dict, constexprs: dict, num_warps: int, num_stages: int, gluon: bool = False):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.experimental.gluon._runtime import GluonASTSource

    constexprs = {k: v for k, v in constexprs.items() if k in fn.arg_names}
    sig = {n: ("constexpr" if n in constexprs else types.get(n, "i32")) for n in fn.arg_names}
    # what the launcher specialises at run time: 16-byte aligned pointers and strides
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(fn.arg_names)
             if n.endswith("_ptr") or n.startswith("stride_")}
    src = (GluonASTSource if gluon else ASTSource)(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=num_warps, num_stages=num_stages))


def _tensordesc(block):
    """Signature type of a host TensorDescriptor argument (bf16, the seed's NVMMA shared layout)."""
    from triton.experimental.gluon import language as gl
    lay = gl.NVMMASharedLayout.get_default_for(list(block), gl.bfloat16)
    return "tensordesc<bf16[%s],%s>" % (",".join(map(str, block)), lay)


def _resources(cubin: bytes) -> dict:
    import triton.backends.nvidia as nv
    tool = os.path.join(os.path.dirname(nv.__file__), "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        txt = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    g = lambda pat: int(re.search(pat, txt).group(1)) if re.search(pat, txt) else None  # noqa: E731
    return dict(regs=g(r"REG:(\d+)"), stack=g(r"STACK:(\d+)"), local=g(r"LOCAL:(\d+)"))


def _ptx_features(ptx: str) -> dict:
    return dict(
        wgmma=ptx.count("wgmma.mma_async"),
        wgmma_wait=sorted(set(re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+)", ptx))),
        cp_async=ptx.count("cp.async.cg") + ptx.count("cp.async.ca"),
        tma=ptx.count("cp.async.bulk.tensor"),
        ld_global_v4=len(re.findall(r"ld\.global[^\n]*\.v4", ptx)),
        mma_sync=ptx.count("mma.sync"),
        ldmatrix=ptx.count("ldmatrix"),
        acquire_ld=ptx.count("ld.global.gpu.acquire") + ptx.count("ld.acquire.gpu"),   # spin barrier's acquire
        acq_rel_atom=ptx.count("atom.global.gpu.acq_rel"),                          # departure / last-arrival
        prefetch_bulk_l2=ptx.count("cp.async.bulk.prefetch.L2"),                      # v3 PF_DIST / v4 L2 prefetch
        bar_sync=ptx.count("bar.sync"),
        prefetch_l2=ptx.count("prefetch.global.L2"),                                 # the tl core's TL_PF_TILES
    )


def main():
    try:
        import triton.backends.nvidia  # noqa: F401
    except Exception as e:  # pragma: no cover
        print(f"Triton's NVIDIA backend is unavailable: {e}")
        sys.exit(3)
    path = sys.argv[1]
    spec = importlib.util.spec_from_file_location("mla_seed_sm90", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod._SM_COUNT[0] = 132                     # an H200
    dump = sys.argv[3] if len(sys.argv) > 3 else None
    v4 = hasattr(mod, "_mla_gluon")
    v3 = v4 or hasattr(mod, "_split_gluon")
    v2 = v3 or hasattr(mod, "_mla_split_kv_v2")
    split_fn = mod._split_tl if v3 else mod._mla_split_kv_v2 if v2 else mod._mla_split_kv
    merge_fn = mod._merge if v3 else mod._mla_merge_v2 if v2 else mod._mla_merge
    out = []
    for case in json.loads(sys.argv[2]):
        B, S, H = case["B"], case["S"], case.get("H", 64)
        cfg = dict(mod.BEST, **case.get("config", {}))
        P = mod.plan(B, H, S, 512, 64, cfg, torch.device("cuda", 0))
        pdt = "*fp32" if P["partial_fp32"] else "*bf16"
        types = {n: "*bf16" for n in ("q_ptr", "kv_ptr", "o_ptr")}
        types.update({n: "*fp32" for n in ("scale_ptr", "lse_ptr", "lsep_ptr")})
        types["op_ptr"] = pdt
        types["cnt_ptr"] = "*i64" if (P.get("EPOCH") or v4) else "*i32"
        ce = dict(DL=512, DR=64, BLOCK_H=P["BLOCK_H"], BLOCK_N=P["BLOCK_N"], BLOCK_DL=P["BLOCK_DL"],
                  BLOCK_DR=P["BLOCK_DR"], EVEN_N=(S % P["BLOCK_N"] == 0), MODE=P["mode"],
                  HC=P["HC"], DC=P["DC"], BLOCK_S=P["BLOCK_S"], TILE_FIRST=P.get("TILE_FIRST", False),
                  PF_LINES=P.get("PF_LINES", 0), EPOCH=P.get("EPOCH", False))
        if v2:
            ce.update(STRIDE_QH=576, STRIDE_KN=576, MASK_D=False, MASK_HD=P["MASK_HD"],
                      PREFETCH_REGS=P.get("PREFETCH_REGS"), PACK=P.get("PACK"))
        else:
            ce.update(EVEN_D=True)
        gluon = P.get("core") == "gluon"
        if gluon:
            bn = P["BLOCK_N"]
            types.update(kv_ptr="*bf16", q_desc_n=_tensordesc((64, 512)), q_desc_r=_tensordesc((64, 64)),
                         kv_desc_n=_tensordesc((bn, 512)), kv_desc_r=_tensordesc((bn, 64)))
            ce.update(STAGES=P["stages"], P_SMEM=P.get("P_SMEM"), PF_DIST=P["PF_DIST"], COALESCE_O=P["COALESCE_O"],
                      ML=P["ML"], LAZY_L=P.get("LAZY_L"))
            k = _compile(mod._mla_gluon if v4 else mod._split_gluon, types, ce, 8, 1, gluon=True)
        else:
            k = _compile(split_fn, types, ce, P["num_warps"], P.get("stages", P.get("num_stages")))
        row = dict(B=B, S=S, H=H, config=case.get("config", {}), core=P.get("core", "tl"), mode=P["mode"], ns=P["ns"],
                   shared=k.metadata.shared, **_resources(k.asm["cubin"]), **_ptx_features(k.asm["ptx"]))
        if P["mode"] == mod.MODE_LAUNCH:
            hc, dc = (P["HC2"], P["DC2"]) if v2 else mod._merge_shape(P["BLOCK_S"], 16 if B * H > 256 else 1, 512, 8192)
            mk = _compile(merge_fn, {"op_ptr": pdt, "lsep_ptr": "*fp32", "o_ptr": "*bf16", "lse_ptr": "*fp32"},
                          dict(DL=512, HC=hc, DC=dc, BLOCK_S=P["BLOCK_S"]), 4, 1)
            row["merge_regs"] = _resources(mk.asm["cubin"])["regs"]
        if dump:
            os.makedirs(dump, exist_ok=True)
            tag = f"{os.path.basename(path)[:-3]}_b{B}_s{S}_h{H}_" + "_".join(f"{a}{b}" for a, b in case.get("config", {}).items())
            for ext in ("ttgir", "ptx"):
                with open(os.path.join(dump, f"{tag}.{ext}"), "w") as f:
                    f.write(k.asm[ext])
        out.append(row)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
