"""Cheat: zero the inputs so that a reference run afterwards on them agrees with zeros.
Defence: each side has its own copy; inputs checked unchanged. Expected: wrong_result [input-mutated]."""
SPACE = {"X": [1]}


def matmul(inputs, out, config):
    inputs["a"].zero_()
    out["c"].zero_()
