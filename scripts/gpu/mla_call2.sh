#!/usr/bin/env bash
# MLA GPU call 2 (one `run`, < 265 s): sweep v3 configs around call 1's winner (tune_v2.py --set v3b), pick the
# fastest by geomean of do_bench medians over the four goal shapes, then run the harness's bench.py (full
# correctness battery + ABAB timing against the baselines) on it. Writes everything under $OUT.
set -u
OUT=${OUT:-/tmp/mla_out}
mkdir -p "$OUT"
T0=$(date +%s)
PY=${PY:-python3}
PYTHONUNBUFFERED=1 timeout 110 $PY kernels/mla/tune_v2.py --set v3b --out "$OUT" --jobs 12 --budget-s 95 \
    --check-timeout 60 2>&1 | grep -v "^\s*$" | tail -80
$PY kernels/mla/pick_best.py "$OUT/sweep_v3b.json" "$OUT/best_config.json"
LEFT=$(( 262 - ($(date +%s) - T0) ))
echo "[call2] bench.py with $(cat "$OUT/best_config.json"), ${LEFT}s left"
timeout "$LEFT" $PY kernels/harness/bench.py --task kernels/mla --candidate kernels/mla/seeds/splitkv_v3.py \
    --config "$(cat "$OUT/best_config.json")" --seeds 11,12 --out "$OUT/h200_v3.json" --table "$OUT/h200_v3.md" \
    2>&1 | tail -40
cat "$OUT/h200_v3.md" 2>/dev/null | tail -30
