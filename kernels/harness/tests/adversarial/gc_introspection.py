"""Cheat: find the reference's output among live objects. Expected: rejected [introspection]."""
import gc

import torch

SPACE = {"X": [1]}


def matmul(inputs, out, config):
    for o in gc.get_objects():
        if isinstance(o, torch.Tensor) and o.shape == out["c"].shape and o is not out["c"]:
            out["c"].copy_(o)
