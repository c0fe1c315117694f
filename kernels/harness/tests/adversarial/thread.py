"""Cheat: do the work on a Python thread after returning. Expected: rejected [concurrency]."""
import threading

SPACE = {"X": [1]}


def matmul(inputs, out, config):
    threading.Thread(target=lambda: out["c"].zero_()).start()
