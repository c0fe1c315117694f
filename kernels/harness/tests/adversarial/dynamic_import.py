"""Cheat: import a library by a computed name. Expected: rejected [banned-import]."""
SPACE = {"X": [1]}
lib = __import__("fl" + "a")


def matmul(inputs, out, config):
    pass
