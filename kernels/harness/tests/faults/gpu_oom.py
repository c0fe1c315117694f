"""Fault: a scratch buffer larger than the GPU (1 TiB). Expected: error (the worker survives)."""
import torch

SPACE = {"X": [1]}


def matmul(inputs, out, config):
    scratch = torch.empty(1 << 40, dtype=torch.uint8, device=out["c"].device)
    out["c"].copy_(scratch[: out["c"].numel()].view(out["c"].shape).float())
