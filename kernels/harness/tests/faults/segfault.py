"""Fault: a segfault in host code (needs KERNELD_STATIC_ALLOW_IMPORTS=ctypes). Expected: crashed."""
import ctypes

SPACE = {"X": [1]}


def matmul(inputs, out, config):
    ctypes.string_at(0)
