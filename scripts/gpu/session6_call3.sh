#!/usr/bin/env bash
# Session 6, device call 3 (#12): throughput.sh MODE=continue on the daemon call 2 left running
# (A's window grows past 10 minutes after warm-up), then B: the daemon restarted on the same
# state (caches kept) with compile_ahead = false: the first evaluation with kept caches, and the
# "before" figures (no compile-ahead, no warm-up) for the rest of the call.
set -uo pipefail
K=/tmp/kd6
export PYTHONUNBUFFERED=1 NO_COLOR=1
PY=/opt/torch/.venv/bin/python3; [ -x $PY ] || PY=$(command -v python3)
MODE=continue BUDGET_S=560 RESTART_S=${RESTART_S:-210} B_CONFIG="compile_ahead = false" BIN=$K/bin \
  KERNELD_PYTHON=$PY bash $K/scripts/gpu/throughput.sh 2>&1 | tail -60
echo "== end $(date +%T)"
