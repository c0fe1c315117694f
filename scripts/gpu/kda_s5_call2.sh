#!/bin/bash
# KDA, next session's device call 2: bench.py (full battery, FLA baseline) on the seed given as
# $1 (default seeds/chunked_v4.py at its BEST: set BEST to call 1's winner first), writing
# $OUT/bench.json + bench.md; afterwards copy bench.json to kernels/kda/results/h200_s5_call2_bench.json
# and run kernels/kda/results/make_h200_json.py (key "v4" of h200.json). carry [".whl"].
seed=${1:-kernels/kda/seeds/chunked_v4.py}
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export FLA_FLASH_KDA=0 PYTHONUNBUFFERED=1
timeout 228 python3 kernels/harness/bench.py --task kernels/kda --candidate "$seed" \
  --baselines fla --seeds 11 --timing '{"max_reps": 100}' \
  --out "$OUT/bench.json" --table "$OUT/bench.md" 2>&1 | grep -v -i warning | tail -25
cat "$OUT/bench.md" 2>/dev/null
