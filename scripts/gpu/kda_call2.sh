#!/bin/bash
# KDA device call 2 (2026-12-01): bench.py on seeds/chunked_v3.py (BEST) against FLA on every goal
# shape with the full correctness battery, then, in the time left, an A/B of INV = fused / split
# at the headline shape (tune_v3.py --ab). Needs fla-core's wheel in .whl/ (carry [".whl"]).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export FLA_FLASH_KDA=0 PYTHONUNBUFFERED=1
timeout 215 python3 kernels/harness/bench.py --task kernels/kda --candidate kernels/kda/seeds/chunked_v3.py \
  --baselines fla --seeds 11 --timing '{"max_reps": 100}' \
  --out "$OUT/bench_v3.json" --table "$OUT/bench_v3.md" 2>&1 | grep -v -i warning | tail -25
echo "bench done at ${SECONDS}s"
left=$((258 - SECONDS))
if [ "$left" -gt 45 ]; then
  timeout "$left" python3 kernels/kda/tune_v3.py --ab --budget-s $((left - 10)) --out "$OUT/ab_v3.json" \
    --variants '[{"INV": "split"}, {"INV": "split", "INV_WARPS": 8}]' 2>&1 | grep -v -i warning | tail -12
fi
cat "$OUT/bench_v3.md" 2>/dev/null
