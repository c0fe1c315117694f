#!/usr/bin/env bash
# Session 3, device call 2: why CUDA init fails under the runner policy (error 304), one
# dimension of the policy relaxed at a time; then the judge/runner harness on the GPU with
# unsandboxed runners (hostile suite, seeds, noise).
set -uo pipefail
root=$PWD; T=$root/.device/int; R=/tmp/s3c2; rm -rf $R; mkdir -p $R
trap 'tar -C /tmp -czf $OUT/s3c2.tgz s3c2; cp $R/jc/summary.json $R/diag.txt $OUT/ 2>/dev/null' EXIT
export PYTHONUNBUFFERED=1
W=/tmp/kerneld-check; mkdir -p $W/bin $W/scratch/d; cp $T/target/release/* $W/bin/; cp -r $T/kernels $W/kernels; chmod -R a+rX $W
id kerneld-runner >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin kerneld-runner
U=$(id -u kerneld-runner)
{ ls -la /dev/nvidia* /dev/nvidia-caps 2>&1; ls -la /usr/local/nvidia /usr/local/nvidia/lib* 2>&1 | head -30; ldconfig -p | grep -E "libcuda|libnvidia-ml"; cat /proc/self/mountinfo | grep -iE "nvidia|dev" | head; } > $R/env.txt 2>&1
mapfile -t L < <(grep RUNNER_LAUNCHER $T/judge_env_call1.txt | cut -d= -f2- | python3 -c 'import json,sys; print("\n".join(json.load(sys.stdin)))')
L=("${L[@]//999/$U}")
S=$W/scratch/d; chown $U: $S
PY=/opt/torch/.venv/bin/python3
ENV=(--env PATH=/usr/bin:/bin --env HOME=$S --env TMPDIR=$S --env CUDA_CACHE_PATH=$S/nv --env CUDA_VISIBLE_DEVICES=$(nvidia-smi --query-gpu=uuid --format=csv,noheader|head -1))
probe='import torch; x=torch.ones(4,device="cuda"); print("CUDA-OK", float(x.sum()))'
drop() { local out=() skip=0; for a in "${L[@]}"; do if [ $skip -gt 0 ]; then skip=$((skip-1)); continue; fi; for d in "$@"; do [ "$a" = "$d" ] && { case $a in --no-net|--no-unix) ;; *) skip=1;; esac; continue 2; }; done; out+=("$a"); done; printf '%s\n' "${out[@]}"; }
try() { local name=$1; shift; echo "== $name" >> $R/diag.txt; ( cd $S && timeout 40 "$@" -- $PY -c "$probe" ) >> $R/diag.txt 2>&1; echo "rc=$? $name" | tee -a $R/diag.txt; }
try full "${L[@]}" --rw $S "${ENV[@]}"
try dev_all "${L[@]}" --dev /dev --rw $S "${ENV[@]}"
mapfile -t A < <(drop --no-net --no-unix); try no_seccomp_net "${A[@]}" --rw $S "${ENV[@]}"
try ro_nvidia_run_etc "${L[@]}" --ro /usr/local/nvidia --ro /run --ro /var/run --ro /etc --rw $S "${ENV[@]}"
mapfile -t A < <(drop --uid --gid); try as_root "${A[@]}" --rw $S "${ENV[@]}"
try ro_root_dev_all "${L[@]}" --ro / --dev /dev --rw $S "${ENV[@]}"
mapfile -t A < <(drop --no-net --no-unix); try ro_root_dev_all_nonet "${A[@]}" --ro / --dev /dev --rw $S "${ENV[@]}"
try bare $W/bin/kerneld-sandbox --best-effort --ro / --exec / --dev /dev --rw $S "${ENV[@]}"
grep "^rc=" $R/diag.txt
echo "== judge_check, unsandboxed runners $(date +%T)"
cd $W/.. ; rm -rf /tmp/jtree; mkdir /tmp/jtree; cp -r $T/kernels $T/scripts $T/protocol /tmp/jtree/ 2>/dev/null; cd /tmp/jtree
unset KERNELD_RUNNER_LAUNCHER
OUT=$R/jc; mkdir -p $OUT; OUT=$OUT BUDGET_S=${JC_BUDGET:-150} bash scripts/gpu/judge_check.sh 2>&1 | tail -40
echo "== end $(date +%T)"
