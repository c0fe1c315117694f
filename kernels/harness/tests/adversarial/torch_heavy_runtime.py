"""Cheat that slips past the static list: an ATen op that runs mm inside (matrix_power).
Defence: the runtime ATen audit. Expected: rejected [torch-heavy-math]."""
import torch

SPACE = {"X": [1]}


def matmul(inputs, out, config):
    a = inputs["a"]
    k = min(a.shape)
    sq = torch.matrix_power(a[:k, :k], 2)
    out["c"].zero_()
    out["c"][:k, :k].copy_(sq[: out["c"].shape[0], : out["c"].shape[1]][:k, :k])
