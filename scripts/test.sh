#!/usr/bin/env bash
# Runs every test: the Rust checks (scripts/lint.sh: fmt, clippy, rust-version), the
# Rust workspace (unit tests and the end-to-end tests that start the real kerneld and
# kernelctl binaries, the kill-torture among them), a bounded fuzz run of the control
# plane, and the Python harness and task tests under Triton's interpreter (CPU; they run
# beside `cargo test`, their log printed at the end). Installs what it needs on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step says when it starts (seconds since this script began): CI has a time limit,
# and its log should show where the time goes.
step() { echo "== [$(date +%T), +${SECONDS}s] $*"; }
# $? is read first: the $(date) below would reset it.
trap 'rc=$?; echo "== [$(date +%T), +${SECONDS}s] end (exit $rc)"' EXIT
# A run from scratch gains nothing from incremental builds, whose files take gigabytes
# (4.0 of a working tree's 8.7 GB target/ here); disk is CI's scarcest resource: a run
# once ran out of it.
export CARGO_INCREMENTAL=0
disk() { df -h --output=avail,size . | tail -1 | awk '{print "disk free here: " $1 " of " $2}'; }
step "$(disk)"
source scripts/python-env.sh

step "lint (fmt, lock files, clippy)"
scripts/lint.sh --no-msrv

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
# The Python suites are CPU work under Triton's interpreter, while much of `cargo test` waits
# on daemons, Slurm and time-outs: they run beside it (CI has a time limit), into a log that
# is printed when both are done.
pylog=$(mktemp /tmp/kerneld-python-tests.XXXXXX.log)
step "python tests start in the background (TRITON_INTERPRET=1, $KERNELD_PYTHON; log $pylog)"
(
    export TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES=""
    # One pytest process per folder: each task's tests import their own `task` module.
    status=0
    for suite in kernels/harness kernels/mla kernels/kda; do
        step "-- $suite"
        "$KERNELD_PYTHON" -m pytest -q -p no:cacheprovider "$suite" || status=1
    done
    step "python tests done (exit $status)"
    exit $status
) > "$pylog" 2>&1 &
py_pid=$!
# The rust-version check and the fuzz target's build (nightly, release) only compile: they
# run beside the tests too, at the lowest priority, so they take what the tests leave idle.
bglog=$(mktemp /tmp/kerneld-builds.XXXXXX.log)
step "rust-version check and fuzz build start in the background (nice 19; log $bglog)"
(
    status=0
    nice -n 19 scripts/lint.sh --msrv-only || status=1
    nice -n 19 scripts/fuzz.sh --build || status=1
    step "background builds done (exit $status)"
    exit $status
) > "$bglog" 2>&1 &
bg_pid=$!
trap 'rc=$?; kill $py_pid $bg_pid 2>/dev/null; echo "== [$(date +%T), +${SECONDS}s] end (exit $rc)"' EXIT

step "cargo test (workspace)"
rust_status=0
cargo test --workspace --locked || rust_status=1
step "background builds: waiting for them"
bg_status=0
wait $bg_pid || bg_status=1
cat "$bglog"
rm -f "$bglog"
[ $bg_status -eq 0 ] || rust_status=1
# The control plane under libFuzzer, bounded (installs nightly if missing;
# scripts/fuzz.sh 600 for a longer run).
if [ $rust_status -eq 0 ]; then
    step "fuzz rpc (${KERNELD_FUZZ_SECONDS:-60} s)"
    scripts/fuzz.sh "${KERNELD_FUZZ_SECONDS:-60}" || rust_status=1
fi

step "python tests: waiting for them ($(disk))"
py_status=0
wait $py_pid || py_status=1
trap 'rc=$?; echo "== [$(date +%T), +${SECONDS}s] end (exit $rc)"' EXIT
cat "$pylog"
rm -f "$pylog"
[ $rust_status -eq 0 ] && [ $py_status -eq 0 ]
