#!/usr/bin/env bash
# MLA decode on one H200 (issue 27), one device call of < 240 s, run from the repo root:
#   OUT=<dir> [KERNELD_COMMIT=<sha>] bash scripts/gpu/mla_bench.sh        (run(timeout_s=240))
# GPU correctness battery (harness, bf16, seeds 11 + 12, every goal and held-out shape) of seeds/splitkv_v4.py and
# seeds/splitkv_v3.py in parallel processes while this one compiles the torch.compile baseline; then
# kernels/harness/bench.py per goal shape (GPU time: CUDA-graph replays, L2 flushed, interleaved) on v4 (if its
# battery passed on the goal shapes), v3 and torch.compile. Writes under $OUT: h200.json (bench.py's rows with the
# environment, `correct` = this run's battery), summary.json, battery_{v4,v3}.{json,log}, bench_<shape>.{json,md},
# log.txt; prints a short summary last. Fail soft: a v4 that does not compile or is wrong is reported, the others
# are still timed.
#   bash scripts/gpu/mla_bench.sh dry     the same logic on a CPU under Triton's interpreter at the smoke shapes
#                                         (torch_eager for the baseline, one seed): catches typos before the call
# Retires scripts/gpu/mla_call2.sh and mla_s4_call.sh (v3's sweeps: tune_v2.py --set v3b / s4 still run by hand).
set -u
OUT=${OUT:-/tmp/mla_bench}
PY=${PY:-python3}
mkdir -p "$OUT"
if [ -z "${KERNELD_COMMIT:-}" ]; then
    KERNELD_COMMIT=$(git rev-parse HEAD 2>/dev/null || true)
fi
export KERNELD_COMMIT PYTHONUNBUFFERED=1
if [ "${1:-}" = dry ]; then
    export TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES=
    BUDGET=${BUDGET_S:-600}
else
    BUDGET=${BUDGET_S:-205}
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.used --format=csv,noheader 2>&1 | head -2
fi
# the Python side keeps its own budget; the timeout is the backstop (a hung CUDA call)
timeout -k 5 $((BUDGET + 20)) $PY scripts/gpu/mla_bench.py run --out "$OUT" --budget-s "$BUDGET" >"$OUT/log.txt" 2>&1
RC=$?
grep -E "^\[(mla_bench|bench)\]|Error|error" "$OUT/log.txt" | grep -v "^=== MLA" | cut -c1-220 | head -40
echo "--- rc $RC; full log: \$OUT/log.txt"
sed -n '/^=== MLA summary/,$p' "$OUT/log.txt"
exit $RC
