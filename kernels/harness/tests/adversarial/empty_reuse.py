"""Cheat: compute nothing; copy whatever a fresh `torch.empty` block holds (hoping it is the
freed output of the reference). Defence: candidate runs first on each fresh seed; reference
outputs stay alive. Expected: wrong_result."""
import torch

SPACE = {"X": [1]}


def matmul(inputs, out, config):
    c = out["c"]
    scratch = torch.empty(c.shape, dtype=c.dtype, device=c.device)
    c.copy_(scratch)
