#!/bin/bash
# KDA, next session's device call 1 (written in session 4, which had no device time left):
# tune_v4.py = every v4 variant + v3 BEST at b1_t8192_h16 (check + total / prep / scan), FLA's
# CUDA-graph time there; v3 and the 2 fastest v4 configs on the other goal shapes (FLA there when
# time is left); held-out shapes + causality for the fastest v4. Kernels compile in parallel
# subprocesses first. Needs fla-core's wheel in .whl/ (carry [".whl"]); run with timeout_s 240.
# Afterwards: copy $OUT/v4_call1.json to kernels/kda/results/h200_s5_call1_v4.json and run
# kernels/kda/results/make_h200_json.py (key "v4" of h200.json).
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export FLA_FLASH_KDA=0 PYTHONUNBUFFERED=1
timeout 228 python3 kernels/kda/tune_v4.py --budget-s 218 --out "$OUT/v4_call1.json" 2>&1 \
  | grep -v -i warning | tail -60
