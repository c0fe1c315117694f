"""Demo task: C = A @ B in full fp32 (the harness's CPU test bed and a search playground).

A [M, K] and B [K, N] are float32 whatever the task dtype (fp32 inputs stay fp32); the
oracle is computed in float64. Candidates must keep fp32 accuracy: tf32 or fp16 inputs
(~3e-4 relative error) fail the 2e-5 tolerance.
"""
import torch


def make_inputs(shape: dict, seed: int, device: str, dtype: torch.dtype) -> dict:
    g = torch.Generator(device="cpu").manual_seed(int(seed))
    M, N, K = shape["M"], shape["N"], shape["K"]
    # uniform in [-1, 1) plus a per-seed offset: never zeros, and constant outputs cannot pass
    a = torch.rand((M, K), generator=g, dtype=torch.float32) * 2 - 1
    b = torch.rand((K, N), generator=g, dtype=torch.float32) * 2 - 1
    b += 0.1 * (seed % 7 - 3)
    return {"a": a.to(device), "b": b.to(device)}


def output_spec(shape: dict, inputs: dict) -> dict:
    return {"c": ((shape["M"], shape["N"]), torch.float32)}


def reference(a, b) -> dict:
    return {"c": (a.double() @ b.double()).float()}


def baseline_torch_fp32(a, b) -> dict:
    # cuBLAS full-fp32 SGEMM (no tf32): the fair speed baseline
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return {"c": a @ b}
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev


def roofline(shape: dict) -> dict:
    M, N, K = shape["M"], shape["N"], shape["K"]
    # full-fp32 products run on CUDA cores: ~67 TFLOP/s on an H100/H200 (datasheet), not 990
    return {"bytes": 4 * (M * K + K * N + M * N), "flops": 2 * M * N * K, "peak_tflops": 67.0}
