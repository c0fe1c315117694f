"""Cheat: patch CUDA event timing so every call looks fast. Expected: rejected [timer]."""
import torch

SPACE = {"X": [1]}
torch.cuda.Event.elapsed_time = lambda self, other: 1e-3


def matmul(inputs, out, config):
    out["c"].zero_()
