#!/usr/bin/env bash
# Session 6, device call 1 (#12): the compile-only warm-up on the GPU (test_warmup_gpu.py), then
# the shipped mla.toml through the real daemon (release binaries in .device/bin, sandbox as the
# daemon finds it) with compile-ahead depth 6 and warm-up: throughput.sh MODE=start, which leaves
# the daemon running for session6_call2.sh (the next call, within the machine's idle window).
set -uo pipefail
t0=$(date +%s)
src=$PWD; K=/tmp/kd6; rm -rf $K; mkdir -p $K
cp -r kernels scripts $K/; cp -r .device/bin $K/bin; cp .device/commit.txt $OUT/ 2>/dev/null
chmod -R a+rX $K
export PYTHONUNBUFFERED=1 NO_COLOR=1
PY=/opt/torch/.venv/bin/python3; [ -x $PY ] || PY=$(command -v python3)
id kerneld-runner >/dev/null 2>&1 || useradd --system --user-group --no-create-home --shell /usr/sbin/nologin kerneld-runner
{ nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader; $PY -c 'import torch,triton;print("torch",torch.__version__,"triton",triton.__version__)'; uname -r; nproc; date -u +%FT%TZ; } > $OUT/env.txt 2>&1
echo "== warm-up on the GPU $(date +%T)"
( cd $K/kernels && timeout 150 $PY -m pytest -q -s -p no:cacheprovider harness/tests/test_warmup_gpu.py ) > $OUT/warmup_gpu.txt 2>&1
tail -5 $OUT/warmup_gpu.txt
echo "== throughput, MODE=start $(date +%T)"
left=$(( 575 - ($(date +%s) - t0) ))
MODE=start BUDGET_S=$left BIN=$K/bin KERNELD_PYTHON=$PY bash $K/scripts/gpu/throughput.sh 2>&1 | tail -40
$K/bin/kernelctl --socket "$(. /tmp/kerneld-throughput.run; echo $W)/k.sock" version > $OUT/version.txt 2>&1
echo "== end $(date +%T)"
