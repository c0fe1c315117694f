#!/usr/bin/env bash
# Session 3, device call 1 (2026-12-01): the sandbox and the judge/runner harness on the H200,
# from a pre-merge integration tree carried in .device/int (branches sandbox + judge) with its
# release binaries in .device/int/target/release. Everything lands in one tarball + summaries.
set -uo pipefail
root=$PWD; T=$root/.device/int; R=/tmp/s3c1; rm -rf $R; mkdir -p $R/sb $R/jc
trap 'tar -C /tmp -czf $OUT/s3c1.tgz s3c1; cp $R/sb/sandbox_check.json $R/jc/summary.json $OUT/ 2>/dev/null' EXIT
export PYTHONUNBUFFERED=1
cd $T
# keep the judge's whole environment (no secrets in it by design) for the direct judge check
sed -i 's|cut -d= -f1 > "$OUT/judge_env_names.txt"|cat > "$OUT/judge_env.txt"|' scripts/gpu/sandbox_check.sh
echo "== sandbox_check $(date +%T)"
OUT=$R/sb timeout 150 bash scripts/gpu/sandbox_check.sh 2>&1 | tail -20
echo "== judge_check $(date +%T)"
if [ -s $R/sb/judge_env.txt ]; then
  while IFS= read -r kv; do case "$kv" in KERNELD_*) export "$kv";; esac; done < $R/sb/judge_env.txt
fi
echo "launcher: ${KERNELD_RUNNER_LAUNCHER:-unset}" | cut -c1-400
OUT=$R/jc BUDGET_S=${JC_BUDGET:-130} bash scripts/gpu/judge_check.sh 2>&1 | tail -30
echo "== end $(date +%T)"
