#!/usr/bin/env bash
# Issue 24, probe: what CUDA's initialisation does with AF_UNIX sockets and /proc, and which
# refusals it tolerates. Runs cuda_init.py under the LD_PRELOAD shim (cuda_calls_shim.c) with
# each fault; writes $OUT/cuda_calls.txt.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
so=/tmp/cuda_calls_shim.so
gcc -shared -fPIC -O1 -o $so "$here/cuda_calls_shim.c" -ldl 2>/dev/null || cp "$here/cuda_calls_shim.so" $so
out="${OUT:-/tmp}/cuda_calls.txt"
{
echo "## uname / driver"; uname -a; nvidia-smi --query-gpu=name,driver_version,persistence_mode --format=csv
echo "## persistenced"; ls -la /var/run/nvidia-persistenced /run/nvidia-persistenced 2>&1; pgrep -a nvidia 2>&1
echo "## listening unix sockets (/proc/net/unix, paths)"; awk 'NR>1 && $8 != "" {print $6, $8}' /proc/net/unix | sort -u | head -40
for v in "log" "SHIM_CONNECT_ERRNO=13" "SHIM_CONNECT_ERRNO=2" "SHIM_CONNECT_ERRNO=111" "SHIM_SOCKET_UNIX_ERRNO=1" "SHIM_SOCKET_UNIX_ERRNO=97" "SHIM_PROC_WRITE_ERRNO=13"; do
  echo "## variant $v"
  log=$(mktemp); rm -f $log
  envs=(SHIM_LOG=$log LD_PRELOAD=$so TRITON_CACHE_DIR=$(mktemp -d))
  [ "$v" != log ] && envs+=("$v")
  env "${envs[@]}" timeout 120 python3 "$here/cuda_init.py" 2>&1 | tail -3
  echo "exit ${PIPESTATUS[0]}"
  echo "-- calls (unique, $(wc -l < $log 2>/dev/null) lines)"
  sed -E 's/pid=[0-9]+//; s/= [0-9]+ \(errno/= N (errno/; s/\(([0-9]+),/(FD,/' $log 2>/dev/null | sort | uniq -c | sort -rn | head -40
done
} > "$out" 2>&1
cat "$out" | head -150
