#!/usr/bin/env bash
# The judge/runner harness on the GPU in one device call (<= 5 min on the H200): the hostile
# and adversarial suites in GPU mode through the judge directly, the MLA and KDA seeds
# (correctness + timing + a re-time, per-phase seconds), and the noise experiment
# (FIELD_NOTES 1b). JSON under $OUT; a short table last.
# Works with and without KERNELD_RUNNER_LAUNCHER (set it to the real kerneld-sandbox and its
# policy to run the runners sandboxed: e.g.
#   KERNELD_RUNNER_LAUNCHER='["/path/kerneld-sandbox","--ro","/usr","--exec","'"$(which python3)"'",
#     "--dev","/dev","--rw","/dev/shm","--no-net","--best-effort"]'
#   OUT=/tmp/out bash scripts/gpu/judge_check.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:?set OUT}"
BUDGET_S="${BUDGET_S:-270}"
PY="${KERNELD_PYTHON:-python3}"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,uuid,clocks.sm,clocks.mem,pstate --format=csv > "$OUT/nvidia-smi.csv" 2>&1
echo "== judge_check ($(date +%T)) launcher: ${KERNELD_RUNNER_LAUNCHER:-unset}"
timeout $((BUDGET_S + 25)) "$PY" kernels/harness/judge_gpu_check.py --out "$OUT" --budget-s "$BUDGET_S" \
    ${JUDGE_CHECK_ARGS:-} 2> "$OUT/judge_check.stderr.log"
rc=$?
tail -n 15 "$OUT/judge_check.stderr.log"
echo "== done ($(date +%T)) rc=$rc"
exit $rc
