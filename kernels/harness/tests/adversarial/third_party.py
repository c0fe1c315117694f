"""Cheat: import a third-party kernel library. Expected: rejected [banned-import]."""
import flash_attn  # noqa: F401

SPACE = {"X": [1]}


def matmul(inputs, out, config):
    pass
