#!/usr/bin/env bash
# Issue #29 on the H200 ("a sick GPU cannot judge"): the real kerneld reads every GPU's
# fault readings through NVML, as its health check does, and nvidia-smi's view is kept
# beside them to compare. Run it on the GPU machine through the device tool, with the
# release binary carried in .device/bin:
#   cargo build --release -p kerneld --bin kerneld && mkdir -p .device/bin \
#     && cp target/release/kerneld .device/bin/
#   OUT=/tmp/out bash scripts/gpu/gpu_health_check.sh
# Expected on a healthy H200 (no fault expected): every reading present (Xid event set,
# ECC counters, remapped rows) and clean; exit 0. Files under $OUT: nvidia-smi-faults.txt,
# gpu-health.txt (people), gpu-health.json (kerneld's readings), check.txt (the verdict).
set -u
bin="${KERNELD_BIN:-$PWD/.device/bin/kerneld}"
OUT="${OUT:?set OUT}"
mkdir -p "$OUT"
[ -x "$bin" ] || { echo "no kerneld at $bin (see the header of $0)" >&2; exit 2; }
nvidia-smi --query-gpu=index,uuid,name,driver_version,ecc.mode.current --format=csv > "$OUT/nvidia-smi.csv" 2>&1
nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT > "$OUT/nvidia-smi-faults.txt" 2>&1
echo "== kerneld gpu-health (listening 10 s for Xid events)"
"$bin" gpu-health --wait 10s | tee "$OUT/gpu-health.txt"
"$bin" gpu-health --wait 2s --json > "$OUT/gpu-health.json"
rc=$?
python3 - "$OUT/gpu-health.json" <<'PY' | tee "$OUT/check.txt"
import json, sys
d = json.load(open(sys.argv[1]))
bad = []
for dev in d["devices"]:
    r = dev["readings"] or {}
    for part in ("xid", "ecc", "remapped_rows"):
        if r.get(part) is None:
            bad.append(f"{dev['uuid']}: no {part} reading ({'; '.join(r.get('unavailable', [])) or 'none given'})")
    if not dev["clean"]:
        bad.append(f"{dev['uuid']}: not clean: {'; '.join(dev['problems'])}")
if not d["devices"]:
    bad.append("no GPU")
print("\n".join(bad) if bad else f"readings present and clean on {len(d['devices'])} GPU(s)")
sys.exit(1 if bad else 0)
PY
verdict=${PIPESTATUS[0]}
echo "== done: kerneld gpu-health exit $rc, verdict exit $verdict"
[ "$rc" = 0 ] && [ "$verdict" = 0 ]
