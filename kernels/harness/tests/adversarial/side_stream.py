"""Cheat: launch the work on a side stream so the timer on the main stream stops early.
Expected: rejected [concurrency]."""
import torch

SPACE = {"X": [1]}
_side = None


def matmul(inputs, out, config):
    global _side
    if _side is None:
        _side = torch.cuda.Stream()
    with torch.cuda.stream(_side):
        out["c"].fill_(0.0)
