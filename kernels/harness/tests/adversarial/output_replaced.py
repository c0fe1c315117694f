"""Cheat that passes the static rules: replace the harness's output tensor in the dict with
another object (e.g. a view of an input). Expected: wrong_result [output-contract]."""
SPACE = {"X": [1]}


def matmul(inputs, out, config):
    out["c"] = inputs["a"][:, :1].expand(out["c"].shape[0], out["c"].shape[1])
