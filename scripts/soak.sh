#!/usr/bin/env bash
# A long kill soak: the CI kill-torture test (tests/tests/torture_kills.rs) run for many
# more SIGKILLs of the real daemon. Prints the test's figures (one JSON line) and writes
# them to results/daemon/soak-<date>.json.
#
#   scripts/soak.sh                 # 10,000 kills
#   KILLS=2000 scripts/soak.sh      # fewer
#   SECONDS_LIMIT=900 scripts/soak.sh   # stop after 15 min, whatever the count
#
# The binaries are copied aside first, so rebuilding the workspace meanwhile does not
# change what the soak runs.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python-env.sh
KILLS="${KILLS:-10000}"
# The commit the binaries are built from, taken before the build (the soak runs for an
# hour, and HEAD may move meanwhile); "-dirty" when tracked files differ from it.
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
git diff --quiet HEAD -- 2>/dev/null || commit="$commit-dirty"
# The release binaries, as installed; the test itself is built in release too.
cargo build --release --workspace --locked
exe=$(cargo test --release -p kerneld-e2e --test torture_kills --locked --no-run --message-format=json 2>/dev/null \
    | grep -o '"executable":"[^"]*torture_kills[^"]*"' | tail -1 | cut -d'"' -f4)
soak=$(mktemp -d /tmp/kd-soak.XXXXXX)
trap 'rm -rf "$soak"' EXIT
mkdir -p "$soak/deps"
cp "$exe" "$soak/deps/torture_kills"
target_dir="${CARGO_TARGET_DIR:-target}"
cp "$target_dir/release/kerneld" "$target_dir/release/kernelctl" "$target_dir/release/kerneld-sandbox" "$soak/"
echo "== soak: up to $KILLS kills${SECONDS_LIMIT:+, at most $SECONDS_LIMIT s} ($(nproc) cores, $(uname -r))"
log="$soak/soak.log"
KERNELD_TORTURE_KILLS="$KILLS" KERNELD_TORTURE_SECONDS="${SECONDS_LIMIT:-}" \
    "$soak/deps/torture_kills" --nocapture 2>&1 | tee "$log" | grep -E "torture figures|panicked|test result" || true
figures=$(grep -o 'torture figures: .*' "$log" | sed 's/^torture figures: //' | tail -1 || true)
if [ -z "$figures" ]; then
    # The test's whole message (with the daemon's log) is what says why.
    kept="/tmp/kerneld-soak-failed-$(date -u +%Y%m%dT%H%M%SZ).log"
    cp "$log" "$kept"
    grep -A40 panicked "$log" | head -80 || true
    echo "no figures: the soak failed; its whole log is in $kept"
    exit 1
fi
mkdir -p results/daemon
out="results/daemon/soak-$(date -u +%Y%m%dT%H%MZ).json"
printf '{"machine": "%s", "cores": %s, "commit": "%s", "binaries": "release", "figures": %s}\n' \
    "$(uname -srm) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" "$(nproc)" \
    "$commit" "$figures" > "$out"
echo "figures written to $out"
# Who held the log at a restart (a dead daemon's child, issue #18): the count is in the
# figures; the processes themselves only in the test's output, which goes with $soak.
if grep -q "the log was held at restart by" "$log"; then
    sed -n "/the log was held at restart by/,/torture figures/p" "$log" | grep -v "torture figures" > "${out%.json}.holders.txt"
    echo "holders written to ${out%.json}.holders.txt"
fi
