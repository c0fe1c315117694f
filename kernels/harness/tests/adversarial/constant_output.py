"""Cheat: write a constant that happened to match one fixed input. Expected: wrong_result."""
SPACE = {"X": [1]}


def matmul(inputs, out, config):
    out["c"].fill_(1.2345)
