#!/usr/bin/env bash
# The headline figures in about a minute of GPU time, for a session with little device time
# left: each step is bounded, runs alone on the GPU (timing needs it), and writes its own
# JSON under $OUT, so a step that runs out of time loses only itself. No correctness battery
# (bench.py --no-check); the timed outputs are still checked against the reference
# (late checks), and the full battery runs with `bench.py` without --no-check.
#   OUT=/tmp/out STEP_S=30 bash scripts/gpu/headline.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:?set OUT}"
STEP_S="${STEP_S:-30}"
export PYTHONUNBUFFERED=1
quick='{"warmup_ms":20,"min_reps":20,"max_reps":120,"target_noise_pct":1.0}'
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv > "$OUT/nvidia-smi.csv" 2>&1
bench() {  # name, then bench.py arguments
    local name=$1; shift
    echo "== $name ($(date +%T))"
    timeout "$STEP_S" python3 kernels/harness/bench.py --no-check --timing "$quick" \
        --out "$OUT/$name.json" --table "$OUT/$name.md" "$@" 2>&1 | tail -n 25
}
# 1. the harness's hold-the-GPU timing: demo m512 was 33.9 us before it (expected ~19-21 us)
bench demo --task kernels/demo --shapes m512 --baselines torch_fp32
# 2. MLA v2 against v1 at the latency-bound and the memory-bound shape
bench mla --task kernels/mla --candidate kernels/mla/seeds/splitkv_v2.py \
    --candidate kernels/mla/seeds/splitkv.py --shapes b1_s8192,b64_s8192 --baselines torch_eager
# 3. KDA v2 against v1 at the headline shape
bench kda --task kernels/kda --candidate kernels/kda/seeds/chunked_v2.py \
    --candidate kernels/kda/seeds/chunked.py --shapes b1_t8192_h16 --baselines torch_chunked
echo "== done ($(date +%T))"
