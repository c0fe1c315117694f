#!/usr/bin/env bash
# Issue 24: which layer stops a task's baseline (torch.compile) in the sandboxed judge? On the
# H200 (2026-12-03) every mla evaluation's baseline failed there while the candidate's runner
# worked. Three runs of baseline_probe.py at once, each bounded (LIMIT_S): bare in the judge's
# cleared environment; under kerneld-sandbox with every path readable and executable (seccomp,
# no network, /proc writable: the filters alone); and with the judge's kind of path rules
# (system trees, the Python environment, the repository; scratch writable). Output under $OUT.
set -u
OUT=${OUT:?}; LIMIT_S=${LIMIT_S:-45}; TASK=${TASK:-kernels/mla}; ARGS=${ARGS:-}   # ARGS: [baseline [shape]]
cd "$(dirname "$0")/../../.." || exit 2
PY=${KERNELD_PYTHON:-$(python3 -c "import sys; print(sys.executable)")}
VENV=$("$PY" -c 'import sys; print(sys.prefix)')
BASE=$("$PY" -c 'import sys; print(sys.base_prefix)')   # where a venv's interpreter really is
SB=.device/bin/kerneld-sandbox
base=$(mktemp -d /tmp/bprobe.XXXX)
envs() {   # the judge's kind of environment, scratch $1
    mkdir -p "$1"/{home,tmp,cache,triton,inductor,nv}
    echo PATH=/usr/local/bin:/usr/bin:/bin HOME="$1/home" TMPDIR="$1/tmp" XDG_CACHE_HOME="$1/cache" \
        TRITON_CACHE_DIR="$1/triton" TORCHINDUCTOR_CACHE_DIR="$1/inductor" CUDA_CACHE_PATH="$1/nv" \
        TORCHINDUCTOR_COMPILE_THREADS=1 PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
        ${PROBE_DEVICE:+PROBE_DEVICE=$PROBE_DEVICE} \
        ${LIBCUDA:+TRITON_LIBCUDA_PATH=$LIBCUDA}
}
LIBCUDA=$("$PY" -c 'from triton.backends.nvidia.driver import libcuda_dirs; print(libcuda_dirs()[0])' 2>/dev/null)
devs=()
for d in /dev/null /dev/zero /dev/full /dev/random /dev/urandom /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-uvm-tools /dev/nvidia[0-9]*; do
    [ -e "$d" ] && devs+=(--dev "$d")
done
sbenv() { for kv in $(envs "$1"); do printf -- '--env\n%s\n' "$kv"; done; }
s1=$base/bare; s2=$base/filters; s3=$base/paths
env -i $(envs "$s1") timeout "$LIMIT_S" "$PY" scripts/gpu/probe/baseline_probe.py "$TASK" $ARGS > "$OUT/bare.txt" 2>&1 &
mapfile -t E2 < <(sbenv "$s2")
timeout "$LIMIT_S" "$SB" "${E2[@]}" --no-net --proc-write all --ro / --exec / --rw "$s2" "${devs[@]}" \
    -- "$PY" scripts/gpu/probe/baseline_probe.py "$TASK" $ARGS > "$OUT/filters.txt" 2>&1 &
mapfile -t E3 < <(sbenv "$s3")
ro=(); for p in /usr /lib /lib64 /bin /sbin /etc /proc /sys "$VENV" "$BASE" "$(pwd)"; do [ -e "$p" ] && ro+=(--ro "$p"); done
timeout "$LIMIT_S" "$SB" "${E3[@]}" --no-net --proc-write all "${ro[@]}" --exec /usr --exec "$VENV" --exec "$BASE" --rw "$s3" "${devs[@]}" \
    -- "$PY" scripts/gpu/probe/baseline_probe.py "$TASK" $ARGS > "$OUT/paths.txt" 2>&1 &
wait
for f in bare filters paths; do echo "== $f"; tail -6 "$OUT/$f.txt"; done
