"""Cheat: patch the clock. Expected: rejected [timer]."""
import time

SPACE = {"X": [1]}
time.perf_counter = lambda: 0.0


def matmul(inputs, out, config):
    out["c"].zero_()
