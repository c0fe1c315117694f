"""Cheat: let PyTorch do the heavy math. Expected: rejected [torch-heavy-math]."""
import torch

SPACE = {"X": [1]}


def matmul(inputs, out, config):
    out["c"].copy_(torch.matmul(inputs["a"], inputs["b"]))
