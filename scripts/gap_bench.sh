#!/usr/bin/env bash
# The daemon's own share per evaluation as a goal's history grows (issue #12): the real daemon
# with the stub worker (tests/fixtures/stub_worker.py: the worker protocol without torch,
# records as large as the H200's), one search goal of N iterations, then the mean and max
# `daemon_gap` per bucket of B evaluations. A benchmark, not a test: it prints figures.
#
#   scripts/gap_bench.sh                       # release binaries of this tree, N=600
#   BIN=path/to/bin N=1000 scripts/gap_bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
N="${N:-600}"; B="${B:-100}"
if [ -z "${BIN:-}" ]; then
  cargo build --release --locked -q -p kerneld -p kernelctl
  BIN="${CARGO_TARGET_DIR:-target}/release"
fi
PY="${KERNELD_PYTHON:-$(command -v python3)}"
W=$(mktemp -d /tmp/kd-gap.XXXXXX); trap 'kill $pid 2>/dev/null; wait 2>/dev/null; rm -rf "$W"' EXIT
# the task is named `ahead`: the stub then accepts `prepare`, as the real judge does
mkdir -p "$W/kernels/harness" "$W/kernels/ahead/seeds"
cp tests/fixtures/stub_worker.py "$W/kernels/harness/worker.py"
cp kernels/demo/task.toml kernels/demo/task.py "$W/kernels/ahead/"; cp kernels/demo/seeds/tiled.py "$W/kernels/ahead/seeds/"
printf 'name = "gap"\ntask = "ahead"\n[budget]\niterations = %s\n[agent]\nkind = "search"\n' "$N" > "$W/gap.toml"
"$BIN/kerneld" --state-dir "$W/state" --socket "$W/sock" --kernels "$W/kernels" --python "$PY" --cpu \
    --allow-unsandboxed > "$W/kerneld.log" 2>&1 &
pid=$!
ctl="$BIN/kernelctl --socket $W/sock"
for _ in $(seq 100); do $ctl version >/dev/null 2>&1 && break; sleep 0.1; done
id=$($ctl enqueue "$W/gap.toml")
t0=$(date +%s)
until $ctl --json status | "$PY" -c 'import json,sys; g=[x for x in json.load(sys.stdin) if x["id"]==sys.argv[1]]; sys.exit(0 if g and g[0]["state"] in ("completed","failed","cancelled") else 1)' "$id"; do
  sleep 2
  [ $(( $(date +%s) - t0 )) -lt 1800 ] || { echo "not done after 30 min"; exit 1; }
done
$ctl --json events "$id" > "$W/events.jsonl"
"$PY" - "$W/events.jsonl" "$B" "$($BIN/kerneld --version 2>/dev/null | head -1)" <<'PY'
import json, sys
evs = []
for line in open(sys.argv[1]):
    line = line.strip()
    if line:
        v = json.loads(line); evs.extend(v if isinstance(v, list) else [v])
b = int(sys.argv[2])
gaps = [e["result"].get("phases", {}).get("daemon_gap") for e in evs if e.get("type") == "evaluation_finished"]
gaps = [g for g in gaps if g is not None]
print(f"{sys.argv[3]}: {len(gaps)} gaps")
print(f"{'evaluations':>14} {'mean ms':>8} {'max ms':>8}")
for i in range(0, len(gaps), b):
    xs = gaps[i:i + b]
    print(f"{i + 1:>6}-{i + len(xs):<7} {1000 * sum(xs) / len(xs):8.2f} {1000 * max(xs):8.2f}")
PY
