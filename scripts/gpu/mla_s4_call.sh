#!/usr/bin/env bash
# MLA GPU call(s) written in session 4 (which had no device time left to run them). Each phase < 240 s.
#   bash scripts/gpu/mla_s4_call.sh [all]    sweep (~110 s) + pick + bench.py on the winner (what is left of 232 s)
#   bash scripts/gpu/mla_s4_call.sh sweep    sweep only, longer timing budget (two-call plan, call 1)
#   bash scripts/gpu/mla_s4_call.sh bench CONFIG_JSON   bench.py only (two-call plan, call 2; CONFIG_JSON: a file)
# The sweep is kernels/mla/tune_v2.py --set s4: v3 BEST against PF_DIST, the launch merge for b64, LAUNCH=cached,
# and the tl core's B=1 options TILE_FIRST / TL_PF_TILES / SPIN_BARRIER; checked in bf16 on the goal + held-out
# shapes, do_bench medians (L2 flushed), host us, CUDA-graph us at B=1. pick_best.py takes the geomean winner.
# Everything lands under $OUT: sweep_s4.{json,txt}, best_config.json, h200_v3.{json,md}.
set -u
OUT=${OUT:-/tmp/mla_out}
mkdir -p "$OUT"
T0=$(date +%s)
PY=${PY:-python3}
PHASE=${1:-all}
if [ "$PHASE" != bench ]; then
    BUDGET=$([ "$PHASE" = sweep ] && echo 190 || echo 95)
    PYTHONUNBUFFERED=1 timeout $((BUDGET + 25)) $PY kernels/mla/tune_v2.py --set s4 --out "$OUT" --jobs 14 \
        --budget-s "$BUDGET" --check-timeout 60 --rep-ms 25 2>&1 | grep -v "^\s*$" | tail -100
    $PY kernels/mla/pick_best.py "$OUT/sweep_s4.json" "$OUT/best_config.json"
    [ "$PHASE" = sweep ] && exit 0
    CFG="$OUT/best_config.json"
else
    CFG=${2:?bench needs a config file}
fi
LEFT=$(( 232 - ($(date +%s) - T0) ))
echo "[mla_s4] bench.py with $(cat "$CFG"), ${LEFT}s left"
timeout "$LEFT" $PY kernels/harness/bench.py --task kernels/mla --candidate kernels/mla/seeds/splitkv_v3.py \
    --config "$(cat "$CFG")" --seeds 11,12 --out "$OUT/h200_v3.json" --table "$OUT/h200_v3.md" 2>&1 | tail -40
cat "$OUT/h200_v3.md" 2>/dev/null | tail -30
