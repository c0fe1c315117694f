"""Cheat: walk up the stack (without importing anything) to read the harness's locals.
Expected: rejected [introspection]."""
SPACE = {"X": [1]}


def matmul(inputs, out, config):
    try:
        raise RuntimeError
    except RuntimeError as e:
        frame = e.__traceback__.tb_frame.f_back
    ref = frame.f_locals.get("ref")
    if ref is not None:
        out["c"].copy_(ref["c"])
