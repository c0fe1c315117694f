"""Cheat (run with static checks skipped): patch CUDA event timing. The harness took its
references to the timers before any candidate was imported, and checks them afterwards.
Expected: rejected [timer]."""
import torch

SPACE = {"X": [1]}
torch.cuda.Event.elapsed_time = lambda self, other: 1e-3


def matmul(inputs, out, config):
    out["c"].zero_()
