"""Cheat: a lazy tensor subclass that pushes the work into whoever reads it.
Expected: rejected [introspection]."""
import torch

SPACE = {"X": [1]}


class Lazy(torch.Tensor):
    pass


def matmul(inputs, out, config):
    out["c"] = Lazy()
