"""Compile the split-KV seed for sm_90 (H200) on a machine without a GPU; print resources as JSON.

    python3 compile_sm90.py SEED.py '[[B, S, "spin"], ...]'      (TRITON_INTERPRET must be unset)

Exit 3 (with a message) when Triton's NVIDIA backend is unavailable. Used by test_mla_cpu.py.
"""
import importlib.util
import json
import sys

import torch


def _compile(fn, types: dict, constexprs: dict, num_warps: int, num_stages: int):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = {n: ("constexpr" if n in constexprs else types.get(n, "i32")) for n in fn.arg_names}
    # what the launcher specialises at run time: 16-byte aligned pointers and strides
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(fn.arg_names)
             if n.endswith("_ptr") or n.startswith("stride_")}
    return triton.compile(ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs),
                          target=GPUTarget("cuda", 90, 32), options=dict(num_warps=num_warps, num_stages=num_stages))


def main():
    try:
        import triton.backends.nvidia  # noqa: F401
    except Exception as e:  # pragma: no cover
        print(f"Triton's NVIDIA backend is unavailable: {e}")
        sys.exit(3)
    spec = importlib.util.spec_from_file_location("mla_seed_sm90", sys.argv[1])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod._SM_COUNT[0] = 132                     # an H200
    out = []
    for B, S, combine in json.loads(sys.argv[2]):
        cfg = dict(mod.BEST, COMBINE=combine)
        P = mod.plan(B, 64, S, 512, 64, cfg, torch.device("cuda", 0))
        types = {n: "*bf16" for n in ("q_ptr", "kv_ptr", "o_ptr")}
        types.update({n: "*fp32" for n in ("scale_ptr", "lse_ptr", "op_ptr", "lsep_ptr")})
        types["cnt_ptr"] = "*i32"
        ce = dict(DL=512, DR=64, BLOCK_H=P["BLOCK_H"], BLOCK_N=P["BLOCK_N"], BLOCK_DL=P["BLOCK_DL"],
                  BLOCK_DR=P["BLOCK_DR"], EVEN_N=(S % P["BLOCK_N"] == 0), EVEN_D=True, MODE=P["mode"],
                  HC=P["HC"], DC=P["DC"], BLOCK_S=P["BLOCK_S"])
        k = _compile(mod._mla_split_kv, types, ce, P["num_warps"], P["num_stages"])
        row = dict(B=B, S=S, combine=combine, mode=P["mode"], ns=P["ns"], shared=k.metadata.shared,
                   wgmma="wgmma" in k.asm["ptx"])
        if P["mode"] == mod.MODE_LAUNCH:
            hc, dc = mod._merge_shape(P["BLOCK_S"], 1, 512, 8192)
            _compile(mod._mla_merge, {"op_ptr": "*fp32", "lsep_ptr": "*fp32", "o_ptr": "*bf16", "lse_ptr": "*fp32"},
                     dict(DL=512, HC=hc, DC=dc, BLOCK_S=P["BLOCK_S"]), 4, 1)
            row["merge_kernel"] = "ok"
        out.append(row)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
