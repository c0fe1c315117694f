"""Cheat: read expected outputs from a file. Expected: rejected [io]."""
SPACE = {"X": [1]}


def matmul(inputs, out, config):
    with open("/tmp/expected.bin", "rb") as f:
        f.read()
