"""Cheat (GPU): the demo reference computes a float64 product and frees it; a float64
`torch.empty` of that size, taken right after the reference ran, receives that block from
the caching allocator. Passes when the reference runs first; the candidate-first order on a
fresh seed catches it. Expected: wrong_result."""
import torch

SPACE = {"X": [1]}


def matmul(inputs, out, config):
    c = out["c"]
    scratch = torch.empty(c.shape, dtype=torch.float64, device=c.device)
    c.copy_(scratch)
