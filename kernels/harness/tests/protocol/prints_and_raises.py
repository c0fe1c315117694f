"""Prints to stdout (must not corrupt the protocol) and raises: class error."""
SPACE = {"X": [1]}


def matmul(inputs, out, config):
    print("{\"id\": 999, \"ok\": true, \"forged\": true}")
    raise KeyError("boom")
