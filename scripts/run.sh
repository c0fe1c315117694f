#!/usr/bin/env bash
# The main job, end to end: build kerneld and kernelctl, start a daemon on a fresh
# state directory, enqueue a goal, watch it run, show the status and the best kernel.
#
# With a Hopper GPU it runs the MLA decode goal (kernels/mla/mla.toml, shortened to a
# few iterations: KERNELD_ITERATIONS); without one the daemon falls back to CPU mode
# and runs the demo goal under Triton's interpreter.
#
#   scripts/run.sh                 # state in a temporary directory, removed at the end
#   KERNELD_STATE=DIR scripts/run.sh   # keep the state (and the log) in DIR
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
source scripts/python-env.sh

cargo build --release --locked --bins
bin="$root/target/release"

state="${KERNELD_STATE:-$(mktemp -d /tmp/kerneld-run.XXXXXX)}"
mkdir -p "$state"
sock="$state/kerneld.sock"
"$bin/kerneld" --state-dir "$state/state" --socket "$sock" --kernels "$root/kernels" \
    --python "$KERNELD_PYTHON" >"$state/kerneld.log" 2>&1 &
daemon=$!
cleanup() {
    kill -TERM "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null || true
    [ -n "${KERNELD_STATE:-}" ] || rm -rf "$state"
}
trap cleanup EXIT
ctl() { "$bin/kernelctl" --socket "$sock" "$@"; }
for _ in $(seq 100); do ctl version >/dev/null 2>&1 && break; sleep 0.1; done
ctl version

mode=$(ctl --json gpus | "$KERNELD_PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["mode"])')
iterations="${KERNELD_ITERATIONS:-}"
if [ "$mode" = gpu ] && [ -f kernels/mla/mla.toml ]; then
    goal_src=kernels/mla/mla.toml; iterations="${iterations:-8}"
else
    goal_src=config/goals/demo.toml; iterations="${iterations:-6}"
fi
# The same goal with a short iteration budget, so this demonstration ends.
goal="$state/$(basename "$goal_src")"
"$KERNELD_PYTHON" - "$goal_src" "$goal" "$iterations" <<'PY'
import re, sys
src, dst, n = sys.argv[1], sys.argv[2], sys.argv[3]
text = open(src).read()
if re.search(r'(?m)^iterations\s*=', text):
    text = re.sub(r'(?m)^iterations\s*=.*$', f'iterations = {n}', text)
else:
    text = text.replace('[budget]', f'[budget]\niterations = {n}', 1) if '[budget]' in text else text + f'\n[budget]\niterations = {n}\n'
open(dst, 'w').write(text)
PY
echo "== enqueue $goal_src ($mode mode, $iterations iterations)"
id=$(ctl enqueue "$goal")
echo "goal $id"
ctl watch "$id" || true
echo "== status"
ctl status
echo "== best kernel of $id"
ctl best "$id" -o "$state/best.py"
sed -n '1,400p' "$state/best.py" | tail -n 12
echo "(full source: $state/best.py$([ -n "${KERNELD_STATE:-}" ] || echo ', removed on exit; set KERNELD_STATE to keep it'))"
