"""Cheat: end the worker (and the measurement) by raising SystemExit. Expected: rejected [io]
(static); with the static rules skipped, a result of class error (the worker survives)."""
SPACE = {"X": [1]}


def matmul(inputs, out, config):
    raise SystemExit(0)
