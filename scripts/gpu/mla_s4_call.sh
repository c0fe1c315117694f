#!/usr/bin/env bash
# MLA: one GPU call (< 240 s) written in session 4 (which had no device time left to run it): sweep the s4 set of
# kernels/mla/tune_v2.py (v3 BEST against PF_DIST, the launch merge for b64, LAUNCH=cached, and the tl core's B=1
# prologue options TILE_FIRST / TL_PF_TILES), pick the fastest by geomean, bench.py (full battery) on it.
# Everything lands under $OUT: sweep_s4.{json,txt}, best_config.json, h200_v3.{json,md}.
#   run(command="bash scripts/gpu/mla_s4_call.sh", timeout_s=240)
set -u
OUT=${OUT:-/tmp/mla_out}
mkdir -p "$OUT"
T0=$(date +%s)
PY=${PY:-python3}
PYTHONUNBUFFERED=1 timeout 120 $PY kernels/mla/tune_v2.py --set s4 --out "$OUT" --jobs 14 --budget-s 105 \
    --check-timeout 70 --rep-ms 25 2>&1 | grep -v "^\s*$" | tail -90
$PY kernels/mla/pick_best.py "$OUT/sweep_s4.json" "$OUT/best_config.json"
LEFT=$(( 232 - ($(date +%s) - T0) ))
echo "[mla_s4] bench.py with $(cat "$OUT/best_config.json"), ${LEFT}s left"
timeout "$LEFT" $PY kernels/harness/bench.py --task kernels/mla --candidate kernels/mla/seeds/splitkv_v3.py \
    --config "$(cat "$OUT/best_config.json")" --seeds 11,12 --out "$OUT/h200_v3.json" --table "$OUT/h200_v3.md" \
    2>&1 | tail -40
cat "$OUT/h200_v3.md" 2>/dev/null | tail -30
