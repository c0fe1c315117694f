#!/usr/bin/env bash
# Session 6, device call 2 (#12), after call 1 (634 evaluations/hour, compile 9.9 s -> 0.4 s):
# the warm-up's GPU tests (KERNELD_GPU_TESTS=1: call 1 ran them under the CPU conftest, skipped),
# a cProfile of the judge over warm MLA evaluations (scripts/gpu/judge_profile.py: where the
# remaining ~4 s per evaluation go), then throughput.sh MODE=start on a fresh daemon, left
# running for session6_call3.sh.
set -uo pipefail
t0=$(date +%s)
K=/tmp/kd6; rm -rf $K; mkdir -p $K
cp -r kernels scripts $K/; cp -r .device/bin $K/bin; cp .device/commit.txt $OUT/ 2>/dev/null
chmod -R a+rX $K
export PYTHONUNBUFFERED=1 NO_COLOR=1
PY=/opt/torch/.venv/bin/python3; [ -x $PY ] || PY=$(command -v python3)
id kerneld-runner >/dev/null 2>&1 || useradd --system --user-group --no-create-home --shell /usr/sbin/nologin kerneld-runner
echo "== warm-up on the GPU $(date +%T)"
( cd $K/kernels && KERNELD_GPU_TESTS=1 timeout 120 $PY -m pytest -q -s -p no:cacheprovider harness/tests/test_warmup_gpu.py ) > $OUT/warmup_gpu.txt 2>&1
tail -4 $OUT/warmup_gpu.txt
echo "== judge profile $(date +%T)"
( cd /tmp && timeout 150 $PY $K/scripts/gpu/judge_profile.py --out $OUT/judge_profile.json --n 3 ) > $OUT/judge_profile.txt 2>&1
grep -E "^(cold|warm) " $OUT/judge_profile.txt | cut -c1-400
echo "== throughput, MODE=start $(date +%T)"
left=$(( 560 - ($(date +%s) - t0) ))
MODE=start BUDGET_S=$left BIN=$K/bin KERNELD_PYTHON=$PY bash $K/scripts/gpu/throughput.sh 2>&1 | tail -32
echo "== end $(date +%T)"
