"""Cheat: cache outputs keyed by input pointers. Expected: rejected [introspection] (data_ptr)."""
SPACE = {"X": [1]}
_cache = {}


def matmul(inputs, out, config):
    key = (inputs["a"].data_ptr(), inputs["b"].data_ptr())
    if key in _cache:
        out["c"].copy_(_cache[key])
        return
    out["c"].zero_()
    _cache[key] = out["c"].clone()
