#!/usr/bin/env bash
# Runs every test: the Rust checks (scripts/lint.sh: fmt, clippy, rust-version), the
# Rust workspace (unit tests and the end-to-end tests that start the real kerneld and
# kernelctl binaries, the kill-torture among them), a bounded fuzz run of the control
# plane, then the Python harness and task tests
# under Triton's interpreter (CPU). Installs what it needs on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step says when it starts (seconds since this script began): CI has a time limit,
# and its log should show where the time goes.
step() { echo "== [$(date +%T), +${SECONDS}s] $*"; }
trap 'echo "== [$(date +%T), +${SECONDS}s] end (exit $?)"' EXIT
source scripts/python-env.sh

step "lint (fmt, clippy, rust-version)"
scripts/lint.sh

# tests/tests/slurm*.rs run against a real one-node Slurm (slurm-wlm + munge, installed
# with apt-get when missing). Those tests are skipped only when it cannot start here.
step "Slurm test cluster"
if scripts/slurm-test-cluster.sh; then
    export KERNELD_REQUIRE_SLURM=1
else
    echo "(the Slurm tests will be skipped: the test cluster could not start)"
fi
step "cargo build (workspace)"
cargo build --workspace --locked
step "cargo test (workspace)"
cargo test --workspace --locked
# The control plane under libFuzzer, bounded (installs nightly and cargo-fuzz if missing;
# scripts/fuzz.sh 600 for a longer run).
step "fuzz rpc (${KERNELD_FUZZ_SECONDS:-60} s)"
scripts/fuzz.sh "${KERNELD_FUZZ_SECONDS:-60}"

step "python tests (TRITON_INTERPRET=1, $KERNELD_PYTHON)"
export TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES=""
# One pytest process per folder: each task's tests import their own `task` module.
status=0
for suite in kernels/harness kernels/mla kernels/kda; do
    step "-- $suite"
    "$KERNELD_PYTHON" -m pytest -q -p no:cacheprovider "$suite" || status=1
done
exit $status
