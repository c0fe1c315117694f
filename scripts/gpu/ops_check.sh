#!/usr/bin/env bash
# Issue #29 on the H200, one device call (at most about 145 s; give it timeout 150 s):
#   1. `kerneld gpu-health`: every GPU's fault readings through NVML (Xid event set, ECC
#      counters, remapped rows, pending retirement), with nvidia-smi's view beside them;
#      no fault is expected: the readings must be there and clean.
#   2. a GPU daemon (setsid, the interpreter's absolute path) with `metrics_listen`, the
#      shipped config/goals/demo.toml enqueued, /metrics scraped twice while the goal runs
#      (and once more at the end), `kernelctl gpus` (the readings as the daemon shows them).
#   3. the verdict (check.txt): each scrape parses (Prometheus's Python client where the
#      machine has it, else a strict line parser), the goal's series are there, the GPU's
#      Xid/ECC/remapped-row series are there with no new fault, and `gpus` carries them.
#
# From the repository root, with the release binaries in .device/bin:
#   cargo build --release --locked -p kerneld -p kernelctl \
#     && mkdir -p .device/bin && cp target/release/kerneld target/release/kernelctl .device/bin/
#   OUT=/tmp/out bash scripts/gpu/ops_check.sh
# Files under $OUT: nvidia-smi.csv, nvidia-smi-faults.txt, gpu-health.txt, gpu-health.json,
# kerneld.toml, metrics-1.txt, metrics-2.txt, metrics-end.txt, gpus.txt, gpus.json,
# status.txt, events.jsonl, report.png, report.html, diff.txt (the best's lineage), kerneld.log,
# check.txt. Exit 0 only when the verdict is clean.
set -u
OUT="${OUT:?set OUT}"
BUDGET_S="${BUDGET_S:-130}"
root="$(cd "$(dirname "$0")/../.." && pwd)"; cd "$root"
t0=$(date +%s)
left() { echo $((BUDGET_S - ($(date +%s) - t0))); }
mkdir -p "$OUT"
BIN="$(cd .device/bin 2>/dev/null && pwd)"
[ -x "$BIN/kerneld" ] && [ -x "$BIN/kernelctl" ] || { echo "no kerneld/kernelctl in .device/bin (see the header of $0)" >&2; exit 2; }
# The daemon starts its worker with a cleared environment: the interpreter's own path.
PY="${KERNELD_PYTHON:-$(python3 -c 'import sys; print(sys.executable)')}"
export PYTHONUNBUFFERED=1 NO_COLOR=1

echo "== [$(( $(date +%s) - t0 )) s] GPU fault readings"
nvidia-smi --query-gpu=index,uuid,name,driver_version,ecc.mode.current --format=csv > "$OUT/nvidia-smi.csv" 2>&1
nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT > "$OUT/nvidia-smi-faults.txt" 2>&1
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
W="$(mktemp -d /tmp/kdops.XXXX)"
port=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
printf 'eval_timeout = "3m"\nworker_start_timeout = "2m"\ngpus = ["%s"]\nmetrics_listen = "127.0.0.1:%s"\n' \
    "$uuid" "$port" > "$W/kerneld.toml"
cp "$W/kerneld.toml" "$OUT/kerneld.toml"
# Listening 5 s for Xid events; the JSON is what the verdict reads.
timeout 30 "$BIN/kerneld" --config "$W/kerneld.toml" gpu-health --wait 5s --json > "$OUT/gpu-health.json" 2>&1
health_rc=$?
timeout 20 "$BIN/kerneld" --config "$W/kerneld.toml" gpu-health --wait 1s > "$OUT/gpu-health.txt" 2>&1
cat "$OUT/gpu-health.txt"

echo "== [$(( $(date +%s) - t0 )) s] daemon with metrics at 127.0.0.1:$port"
setsid "$BIN/kerneld" --config "$W/kerneld.toml" --state-dir "$W/state" --socket "$W/k.sock" \
    --kernels "$root/kernels" --python "$PY" >> "$W/kerneld.log" 2>&1 < /dev/null &
pid=$!
ctl="$BIN/kernelctl --socket $W/k.sock"
for _ in $(seq 150); do $ctl version >/dev/null 2>&1 && break; sleep 0.2; done
id=$($ctl enqueue config/goals/demo.toml 2>&1 | tail -1)
echo "goal $id"
scrape() {   # $1 = file
  "$PY" - "$port" "$1" <<'EOF'
import sys, urllib.request
body = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=10).read()
open(sys.argv[2], "wb").write(body)
EOF
}
events() { $ctl --json events "$id" 2>/dev/null; }
# Scrape 1 once an evaluation has started, scrape 2 once one has finished (the goal still
# running where it can be: the demo goal's budget is 6 iterations).
for _ in $(seq 400); do
  [ "$(left)" -gt 60 ] || break
  events | grep -q '"evaluation_started"' && break
  sleep 0.25
done
scrape "$OUT/metrics-1.txt"; echo "scrape 1 at $(( $(date +%s) - t0 )) s"
for _ in $(seq 400); do
  [ "$(left)" -gt 35 ] || break
  events | grep -q '"evaluation_finished"' && break
  sleep 0.25
done
scrape "$OUT/metrics-2.txt"; echo "scrape 2 at $(( $(date +%s) - t0 )) s"
$ctl gpus > "$OUT/gpus.txt" 2>&1
$ctl --json gpus > "$OUT/gpus.json" 2>&1
cat "$OUT/gpus.txt"
# The goal to its end, while the budget lasts.
while [ "$(left)" -gt 20 ]; do
  $ctl --json status "$id" 2>/dev/null | "$PY" -c 'import json, sys
d = json.load(sys.stdin); d = d[0] if isinstance(d, list) else d
sys.exit(0 if d["state"] in ("completed", "failed", "cancelled") else 1)' 2>/dev/null && break
  sleep 1
done
scrape "$OUT/metrics-end.txt"
$ctl status > "$OUT/status.txt" 2>&1
events > "$OUT/events.jsonl"
# The run's report (README: a PNG of a real H200 run) and the best's lineage.
$ctl report "$id" -o "$OUT/report.png" > /dev/null 2>&1
$ctl report "$id" -o "$OUT/report.html" > /dev/null 2>&1
$ctl diff "$id" > "$OUT/diff.txt" 2>&1
$ctl cancel "$id" > /dev/null 2>&1
kill -TERM "$pid"
for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
cp "$W/kerneld.log" "$OUT/kerneld.log"

echo "== [$(( $(date +%s) - t0 )) s] verdict"
"$PY" - "$OUT" "$id" "$uuid" "$health_rc" <<'EOF' | tee "$OUT/check.txt"
import json, re, sys
out, goal, uuid, health_rc = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
bad, said = [], []

def parse(text):
    try:
        from prometheus_client.parser import text_string_to_metric_families
        return [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples], "prometheus_client"
    except ImportError:
        pass
    line_re = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
    label_re = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = line_re.match(line)
        if not m:
            raise ValueError(f"not a sample line: {line!r}")
        samples.append((m.group(1), dict(label_re.findall(m.group(3) or "")), float(m.group(4))))
    return samples, "a strict line parser (no prometheus_client here)"

def get(samples, name, **labels):
    return [v for n, l, v in samples if n == name and all(l.get(k) == x for k, x in labels.items())]

try:
    h = json.load(open(f"{out}/gpu-health.json"))
    for dev in h["devices"]:
        r = dev["readings"] or {}
        for part in ("xid", "ecc", "remapped_rows"):
            if r.get(part) is None:
                bad.append(f"gpu-health {dev['uuid']}: no {part} reading ({'; '.join(r.get('unavailable', [])) or 'none given'})")
        if not dev["clean"]:
            bad.append(f"gpu-health {dev['uuid']}: not clean: {'; '.join(dev['problems'])}")
    said.append(f"gpu-health: {len(h['devices'])} GPU(s), exit {health_rc}")
    if not h["devices"]:
        bad.append("gpu-health: no GPU")
except Exception as e:
    bad.append(f"gpu-health.json: {e}")

for i, name in ((1, "metrics-1.txt"), (2, "metrics-2.txt"), (3, "metrics-end.txt")):
    try:
        samples, how = parse(open(f"{out}/{name}").read())
    except Exception as e:
        bad.append(f"{name}: {e}")
        continue
    state = [l["state"] for n, l, v in samples if n == "kerneld_goal_state" and l.get("goal") == goal and v == 1]
    said.append(f"{name}: {len(samples)} samples ({how}); goal {goal} {state}; "
                f"evaluations {get(samples, 'kerneld_goal_evaluations_total', goal=goal)}; "
                f"best {get(samples, 'kerneld_goal_best_speedup_ratio', goal=goal)}")
    if i == 3:
        by_class = {l["class"]: v for n, l, v in samples if n == "kerneld_evaluations_total" and v}
        said.append(f"{name}: evaluations by class since the daemon started: {by_class or 'none'}")
    if i == 1 and state != ["running"]:
        bad.append(f"{name}: the goal is not running in it ({state})")
    if i == 2 and state != ["running"]:
        said.append(f"NOTE {name}: the goal had left running ({state}): a short goal's end came first")
    for series in ("kerneld_gpu_xid_errors_total", "kerneld_gpu_ecc_errors_total", "kerneld_gpu_remapped_rows"):
        if not get(samples, series, gpu=uuid):
            bad.append(f"{name}: no {series} for {uuid}")
    if get(samples, "kerneld_gpu_new_faults", gpu=uuid) != [0.0]:
        bad.append(f"{name}: kerneld_gpu_new_faults for {uuid}: {get(samples, 'kerneld_gpu_new_faults', gpu=uuid)}")
    if get(samples, "kerneld_gpu_healthy", gpu=uuid) != [1.0]:
        bad.append(f"{name}: the GPU is not healthy")

try:
    g = json.load(open(f"{out}/gpus.json"))
    dev = next(d for d in g["devices"] if d["uuid"] == uuid)
    r = dev.get("readings") or {}
    said.append(f"gpus: {dev['name']} health {dev['health']}; readings {sorted(r)}")
    for part in ("xid", "ecc", "remapped_rows"):
        if r.get(part) is None:
            bad.append(f"gpus: no {part} reading for {uuid}")
    if r.get("faults"):
        bad.append(f"gpus: faults {r['faults']}")
except Exception as e:
    bad.append(f"gpus.json: {e}")

print("\n".join(said))
print("\n".join("BAD: " + b for b in bad) if bad else "OK: readings present and clean; /metrics scraped during the goal")
sys.exit(1 if bad else 0)
EOF
verdict=${PIPESTATUS[0]}
echo "== [$(( $(date +%s) - t0 )) s] done: verdict exit $verdict"
exit "$verdict"
