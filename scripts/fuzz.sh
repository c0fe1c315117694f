#!/usr/bin/env bash
# Fuzzes the control plane (fuzz/fuzz_targets/rpc.rs: framing, JSON-RPC parsing and
# dispatch through a real connection on a real redb log) with cargo-fuzz (libFuzzer).
#
#   scripts/fuzz.sh          # 10 minutes
#   scripts/fuzz.sh 60       # CI's bounded run
#
# Needs a nightly toolchain and cargo-fuzz: installed here through rustup and cargo when
# missing. The seed corpus (fuzz/corpus/rpc) is copied aside, so a run does not grow the
# repository; a crash or hang is saved under fuzz/artifacts/rpc/ and fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-600}"
if ! rustup toolchain list | grep -q '^nightly'; then
    rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
corpus=$(mktemp -d /tmp/kd-fuzz-corpus.XXXXXX)
trap 'rm -rf "$corpus"' EXIT
cp fuzz/corpus/rpc/* "$corpus/"
log="$corpus/fuzz.log"
cd fuzz
echo "== fuzz rpc for ${secs}s ($(nproc) cores)"
status=0
cargo +nightly fuzz run rpc "$corpus" -- -max_total_time="$secs" -timeout=30 \
    -rss_limit_mb=4096 -print_final_stats=1 >"$log" 2>&1 || status=$?
grep -E "^(Done|stat::number_of_executed_units|stat::peak_rss_mb)|ERROR|SUMMARY|panicked|deadly signal|^==.*timeout" "$log" | head -20 || true
runs=$(grep -oE '^Done [0-9]+ runs' "$log" | grep -oE '[0-9]+' | head -1 || true)
runs=${runs:-0}
crashes=$(ls artifacts/rpc 2>/dev/null | grep -c -E '^(crash|timeout|oom|leak)-' || true)
echo "fuzz figures: {\"runs\": $runs, \"seconds\": $secs, \"crashes_and_hangs\": $crashes, \"exit\": $status}"
if [ "$status" -ne 0 ] || [ "$crashes" -ne 0 ]; then
    tail -40 "$log"
    exit 1
fi
