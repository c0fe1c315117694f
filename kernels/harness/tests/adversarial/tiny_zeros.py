"""Cheat: write zeros (an absolute tolerance passes when outputs are small).
Defence: relative RMSE and max error relative to max|ref|. Expected: wrong_result (tolerance)."""
SPACE = {"X": [1]}


def matmul(inputs, out, config):
    out["c"].zero_()
