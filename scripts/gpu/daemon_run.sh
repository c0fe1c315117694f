#!/usr/bin/env bash
# The daemon on real GPUs (run on the H200 machine through the device tool, with the
# release binaries carried in .device/bin): the real kerneld and kernelctl schedule MLA
# goals, then scripts/gpu/utilization.py reads the event log for the figures.
#
# Phase "one": one H200 (allow-list), two equal goals share it; then one is paused and
#              the lease hand-over is timed.
# Phase "two": both H200s (when there are two): a gpus=2 goal, a gpus=1 goal and a
#              higher-priority gpus=1 goal.
# Each phase: the daemon starts (workers warm up), goals are enqueued, it runs PHASE_S
# seconds, then everything is read back over the socket. Results go to $OUT.
set -u
PHASE_S="${PHASE_S:-120}"
root="$PWD"; bin="$root/.device/bin"; W=/tmp/kdgpu; rm -rf "$W"; mkdir -p "$W" "$OUT"
# The device tool returns at most 8 files: everything goes into $W/results, packed at the end.
FINAL_OUT="$OUT"; OUT="$W/results"; mkdir -p "$OUT"
trap 'tar -C "$W" -czf "$FINAL_OUT/daemon_run.tgz" results' EXIT
export PYTHONUNBUFFERED=1 NO_COLOR=1
nvidia-smi --query-gpu=index,uuid,name,driver_version,clocks.sm --format=csv,noheader > "$OUT/gpus.csv"
mapfile -t uuids < <(nvidia-smi --query-gpu=uuid --format=csv,noheader)
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' | tee "$OUT/env.txt"

goal() { # name gpus priority
  cat > "$W/$1.toml" <<G
name = "$1"
task = "mla"
baseline = "torch_eager"
shapes = ["b1_s8192", "b64_s8192"]
[budget]
wall = "1h"
iterations = 10000
[agent]
kind = "search"
[resources]
gpus = $2
priority = $3
G
}

phase() { # tag allow-list(uuid or "") goal...
  local tag=$1 allow=$2; shift 2
  local sock="$W/$tag.sock" cfg="$W/$tag.kerneld.toml"
  printf 'eval_timeout = "5m"\nworker_start_timeout = "3m"\n' > "$cfg"
  [ -n "$allow" ] && printf 'gpus = ["%s"]\n' "$allow" >> "$cfg"
  "$bin/kerneld" --config "$cfg" --state-dir "$W/$tag" --socket "$sock" --kernels "$root/kernels" \
      --python python3 > "$OUT/$tag.kerneld.log" 2>&1 &
  local pid=$!
  local ctl="$bin/kernelctl --socket $sock"
  for _ in $(seq 200); do $ctl version >/dev/null 2>&1 && break; sleep 0.1; done
  # A long-running daemon has warm workers: wait until every device has one (torch + CUDA init).
  for _ in $(seq 600); do
    $ctl --json gpus | python3 -c 'import json,sys; d=json.load(sys.stdin)["devices"]; sys.exit(0 if all(x.get("worker_pid") for x in d) else 1)' && break
    sleep 0.2
  done
  $ctl gpus > "$OUT/$tag.gpus_ready.txt" 2>&1
  for g in "$@"; do $ctl enqueue "$W/$g.toml"; done
  sleep $((PHASE_S / 2)); $ctl gpus > "$OUT/$tag.gpus.txt" 2>&1
  sleep $((PHASE_S / 2))
  if [ "$tag" = one ]; then
    # Pause the goal holding the GPU and time until the other goal holds it.
    local holder; holder=$($ctl --json gpus | python3 -c 'import json,sys; d=json.load(sys.stdin)["devices"][0]["lease"]; print(d["goal"] if d else "")')
    [ -n "$holder" ] || holder=g1
    local t0; t0=$(date +%s.%N); $ctl pause "$holder" >/dev/null
    for _ in $(seq 600); do
      cur=$($ctl --json gpus | python3 -c 'import json,sys; d=json.load(sys.stdin)["devices"][0]["lease"]; print(d["goal"] if d else "")')
      [ -n "$cur" ] && [ "$cur" != "$holder" ] && break; sleep 0.02
    done
    python3 -c "import time; print(f'handover_s {time.time()-$t0:.3f} paused $holder')" | tee "$OUT/$tag.handover.txt"
    sleep 5
  fi
  $ctl status > "$OUT/$tag.status.txt" 2>&1; $ctl --json status > "$OUT/$tag.status.json"
  $ctl --json events > "$OUT/$tag.events.jsonl"
  $ctl best g1 -o "$OUT/$tag.best_g1.py" 2>>"$OUT/$tag.status.txt"
  kill -TERM $pid; wait $pid
  python3 scripts/gpu/utilization.py "$OUT/$tag.events.jsonl" | tee "$OUT/$tag.utilization.txt"
}

goal mla-a 1 0; goal mla-b 1 0
phase one "${uuids[0]}" mla-a mla-b
if [ ${#uuids[@]} -ge 2 ]; then
  goal mla-wide 2 0; goal mla-narrow 1 0; goal mla-urgent 1 1
  phase two "" mla-wide mla-narrow mla-urgent
fi
