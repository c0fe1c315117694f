#!/usr/bin/env bash
# Fuzzes the control plane (fuzz/fuzz_targets/rpc.rs: framing, JSON-RPC parsing and
# dispatch through a real connection on a real redb log) with libFuzzer.
#
#   scripts/fuzz.sh          # 10 minutes
#   scripts/fuzz.sh 60       # CI's bounded run
#   scripts/fuzz.sh --build  # only build the target (scripts/test.sh does it beside the tests)
#
# fuzz/ is a cargo-fuzz project (`cargo +nightly fuzz run rpc` works too). This script
# builds the same target without installing cargo-fuzz, which CI would otherwise compile
# from source on every fresh machine: the flags below are the coverage instrumentation
# cargo-fuzz passes, without AddressSanitizer (the control plane is safe Rust; a panic,
# a hang or running out of memory is what this run looks for). It needs a nightly
# toolchain (installed through rustup when missing). The seed corpus (fuzz/corpus/rpc) is
# copied aside, so a run does not grow the repository; a crash or hang is saved under
# fuzz/artifacts/rpc/ and fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-600}"
if ! rustup toolchain list | grep -q '^nightly'; then
    rustup toolchain install nightly --profile minimal
fi
host=$(rustc +nightly -vV | sed -n 's/^host: //p')
echo "== build the rpc fuzz target (nightly, $host, coverage instrumentation)"
# --target keeps the flags off build scripts and proc-macros, as cargo-fuzz does.
(
    cd fuzz
    RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks" \
        cargo +nightly build --release --locked --target "$host" --bin rpc
)
[ "$secs" = --build ] && exit 0
bin="fuzz/target/$host/release/rpc"
corpus=$(mktemp -d /tmp/kd-fuzz-corpus.XXXXXX)
trap 'rm -rf "$corpus"' EXIT
cp fuzz/corpus/rpc/* "$corpus/"
log="$corpus/fuzz.log"
mkdir -p fuzz/artifacts/rpc
echo "== fuzz rpc for ${secs}s ($(nproc) cores)"
status=0
"$bin" "$corpus" -artifact_prefix=fuzz/artifacts/rpc/ -max_total_time="$secs" -timeout=30 \
    -rss_limit_mb=4096 -print_final_stats=1 >"$log" 2>&1 || status=$?
grep -E "^(Done|stat::number_of_executed_units|stat::peak_rss_mb)|ERROR|SUMMARY|panicked|deadly signal|^==.*timeout" "$log" | head -20 || true
runs=$(grep -oE '^Done [0-9]+ runs' "$log" | grep -oE '[0-9]+' | head -1 || true)
runs=${runs:-0}
crashes=$(ls fuzz/artifacts/rpc 2>/dev/null | grep -c -E '^(crash|timeout|oom|leak)-' || true)
echo "fuzz figures: {\"runs\": $runs, \"seconds\": $secs, \"crashes_and_hangs\": $crashes, \"exit\": $status}"
if [ "$status" -ne 0 ] || [ "$crashes" -ne 0 ]; then
    tail -40 "$log"
    exit 1
fi
