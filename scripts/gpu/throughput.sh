#!/usr/bin/env bash
# Issue #12's benchmark: the shipped kernels/mla/mla.toml through the real daemon (release
# binaries), then scripts/gpu/throughput.py prints evaluations/hour after warm-up, the
# GPU-busy fraction, the daemon's overhead per evaluation, the first evaluation's latency
# from enqueue and the per-phase breakdown (means, and the first evaluation's), JSON under $OUT.
#
#   A. a fresh daemon on an empty state directory (judge compile caches empty: the truly
#      fresh cost), the goal enqueued once its worker is up, run until RESTART_S are left;
#   B. the daemon restarted on the same state directory (caches kept, as after a reboot or
#      an upgrade) and a copy of the goal under another name enqueued: its first evaluation
#      is the warm-cache latency. With B_CONFIG (a kerneld.toml fragment, e.g.
#      "compile_ahead = false") B runs under another configuration and keeps running until
#      the budget ends: the "before" figures beside A's "after".
#
# The issue asks for >= 10 minutes after warm-up, more than one device call (10 min) holds.
# MODE splits A over two calls on the same (warm) machine:
#   MODE=start     A only; the daemon is started in a session of its own (setsid), so it
#                  outlives the call, and is left running; its events so far are saved.
#   MODE=continue  the daemon MODE=start left (same machine, next call within its idle
#                  window): A goes on until RESTART_S are left, then B.
#   MODE=full      (default) A then B in one call.
#
# Binaries: $BIN, else .device/bin, else the first .device/*/target/release holding kerneld
# (how the lead carries them, see session3_call3.sh), else target/release (built if cargo is
# there). Python: $KERNELD_PYTHON, else /opt/torch/.venv/bin/python3, else python3.
# CPU check (no GPU): GOAL_FILE=kernels/demo/... KERNELD_ARGS="--cpu --allow-unsandboxed".
# Files under $OUT: throughput.json, events.jsonl, events_restart.jsonl, status.json,
# show.txt, report.txt, kerneld.log, gpus.csv, util.csv.
set -u
OUT="${OUT:?set OUT}"
BUDGET_S="${BUDGET_S:-510}"; WARMUP_S="${WARMUP_S:-60}"; RESTART_S="${RESTART_S:-110}"
MODE="${MODE:-full}"; B_CONFIG="${B_CONFIG:-}"
RUN_FILE=/tmp/kerneld-throughput.run   # what MODE=start leaves for MODE=continue
root="$(cd "$(dirname "$0")/../.." && pwd)"; cd "$root"
GOAL_FILE="${GOAL_FILE:-$root/kernels/mla/mla.toml}"
t_start=$(date +%s)
left() { echo $((BUDGET_S - ($(date +%s) - t_start))); }

BIN="${BIN:-}"
if [ -z "$BIN" ]; then
  if [ -x .device/bin/kerneld ]; then BIN=.device/bin
  else
    for d in .device/*/target/release; do [ -x "$d/kerneld" ] && { BIN=$d; break; }; done
    if [ -z "$BIN" ]; then
      BIN=target/release; command -v cargo >/dev/null && cargo build --release -q -p kerneld -p kernelctl
    fi
  fi
fi
BIN="$(cd "$BIN" && pwd)"
PY="${KERNELD_PYTHON:-}"
[ -z "$PY" ] && { [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3 || PY=python3; }
if [ "$MODE" = continue ]; then
  # shellcheck disable=SC1090
  . "$RUN_FILE" || { echo "MODE=continue: no $RUN_FILE (MODE=start ran on another machine?)"; exit 2; }
else
  W="$(mktemp -d /tmp/kdtp.XXXX)"
fi
sock="$W/k.sock"; cfg="$W/kerneld.toml"; state="$W/state"
export PYTHONUNBUFFERED=1 NO_COLOR=1
ctl="$BIN/kernelctl --socket $sock"
uuid=""
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,uuid,name,clocks.sm --format=csv,noheader > "$OUT/gpus.csv" 2>&1
  uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
fi
if [ "$MODE" != continue ]; then
  printf 'eval_timeout = "5m"\nworker_start_timeout = "3m"\n' > "$cfg"
  [ -n "$uuid" ] && printf 'gpus = ["%s"]\n' "$uuid" >> "$cfg"
fi
command -v nvidia-smi >/dev/null && \
  (nvidia-smi --query-gpu=timestamp,utilization.gpu,clocks.sm --format=csv,noheader -lms 1000 >> "$OUT/util.csv" 2>/dev/null &)
# The restart's goal: the same file under another name (a goal's name is unique while active).
warm_goal="$W/$(basename "$GOAL_FILE")"
sed 's/^name *= *"\(.*\)"/name = "\1-restarted"/' "$GOAL_FILE" > "$warm_goal"

pid="${pid:-}"   # MODE=continue: the one MODE=start left
start_daemon() {
  local keep=()
  [ "$MODE" = start ] && keep=(setsid)   # outlives this call (MODE=continue picks it up)
  # shellcheck disable=SC2086
  "${keep[@]}" "$BIN/kerneld" --config "$cfg" --state-dir "$state" --socket "$sock" --kernels "$root/kernels" \
      --python "$PY" ${KERNELD_ARGS:-} >> "$W/kerneld.log" 2>&1 &
  pid=$!
  for _ in $(seq 300); do $ctl version >/dev/null 2>&1 && break; sleep 0.1; done
  # A long-running daemon has a warm worker: wait for it (at most 150 s), so the first
  # evaluation's figure is "from enqueue, the worker already up", as after boot.
  for _ in $(seq 150); do
    $ctl --json gpus | "$PY" -c 'import json,sys; d=json.load(sys.stdin)["devices"]; sys.exit(0 if d and all(x.get("worker_pid") for x in d) else 1)' 2>/dev/null && break
    sleep 1
  done
}
stop_daemon() {
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; pid=""
}
analyse() {
  [ "$MODE" = start ] || stop_daemon
  cp "$W/kerneld.log" "$OUT/kerneld.log" 2>/dev/null
  local extra=()
  [ -s "$OUT/events_restart.jsonl" ] && extra=(--restart-events "$OUT/events_restart.jsonl")
  "$PY" scripts/gpu/throughput.py "$OUT/events.jsonl" --warmup-s "$WARMUP_S" "${extra[@]}" \
      --out "$OUT/throughput.json"
  if [ -n "$B_CONFIG" ] && [ -s "$OUT/events_restart.jsonl" ]; then
    echo "== B's own figures (${B_CONFIG})"
    "$PY" scripts/gpu/throughput.py "$OUT/events_restart.jsonl" --warmup-s 0 --out "$OUT/throughput_b.json"
  fi
}
trap analyse EXIT

if [ "$MODE" = continue ]; then
  echo "== A goes on: daemon $pid, goal $id ($(date +%T))"
  kill -0 "$pid" 2>/dev/null || { echo "the daemon MODE=start left is gone"; pid=""; exit 2; }
else
  echo "== A: fresh daemon, empty caches $(date +%T)"
  start_daemon
  id=$($ctl enqueue "$GOAL_FILE")
  echo "enqueued $id ($(left) s left)"
  printf 'W=%q\npid=%q\nid=%q\n' "$W" "$pid" "$id" > "$RUN_FILE"
fi
stop_at=$RESTART_S; [ "$MODE" = start ] && stop_at=5
while [ "$(left)" -gt "$stop_at" ]; do sleep 5; done
$ctl --json status > "$OUT/status.json"; $ctl show "$id" > "$OUT/show.txt" 2>&1
$ctl report "$id" > "$OUT/report.txt" 2>&1
$ctl --json events "$id" > "$OUT/events.jsonl"
if [ "$MODE" = start ]; then
  echo "== left running for MODE=continue: daemon $pid ($(date +%T))"
  exit 0
fi
$ctl cancel "$id" >/dev/null 2>&1
stop_daemon

echo "== B: restarted on the same state (caches kept${B_CONFIG:+, with: $B_CONFIG}) $(date +%T)"
[ -n "$B_CONFIG" ] && printf '%s\n' "$B_CONFIG" >> "$cfg"
start_daemon
wid=$($ctl enqueue "$warm_goal")
while [ "$(left)" -gt 15 ]; do
  if [ -z "$B_CONFIG" ]; then
    $ctl --json events "$wid" | grep -q '"evaluation_finished"' && break
  fi
  sleep 2
done
$ctl --json events "$wid" > "$OUT/events_restart.jsonl"
$ctl cancel "$wid" >/dev/null 2>&1
echo "== done $(date +%T) ($(left) s of the budget left)"
