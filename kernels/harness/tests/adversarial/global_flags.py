"""Cheat: flip PyTorch's global state so the baseline runs slower (deterministic algorithms) or
in another precision. Expected: rejected [introspection]."""
import torch

SPACE = {"X": [1]}
torch.use_deterministic_algorithms(True)


def matmul(inputs, out, config):
    out["c"].zero_()
