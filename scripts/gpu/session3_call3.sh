#!/usr/bin/env bash
# Session 3, device call 3 (last): (A) which layer of the runner policy stops CUDA init, (B) the
# judge/runner harness on the GPU with unsandboxed runners, (C) KDA v3 bench.py with the full
# battery, (D) the shipped mla.toml through the real daemon (judge harness, sandbox off).
set -uo pipefail
root=$PWD; T=$root/.device/int; R=/tmp/s3c3; rm -rf $R; mkdir -p $R/jc $R/kda $R/mla
FOUT=$OUT
trap 'tar -C /tmp -czf $FOUT/s3c3.tgz s3c3; cp $R/diag.txt $R/jc/judge_check.json $R/kda/bench_v3.md $FOUT/ 2>/dev/null' EXIT
export PYTHONUNBUFFERED=1
W=/tmp/kerneld-check; mkdir -p $W/bin $W/scratch/d; cp $T/target/release/* $W/bin/; cp -r $T/kernels $W/kernels; chmod -R a+rX $W
id kerneld-runner >/dev/null 2>&1 || useradd --system --user-group --no-create-home --shell /usr/sbin/nologin kerneld-runner
U=$(id -u kerneld-runner); G=$(id -g kerneld-runner)
mapfile -t L < <(grep RUNNER_LAUNCHER $T/judge_env_call1.txt | cut -d= -f2- | python3 -c 'import json,sys; print("\n".join(json.load(sys.stdin)))')
for i in "${!L[@]}"; do [ "${L[$i]}" = 999 ] && { [ "${L[$((i-1))]}" = --uid ] && L[$i]=$U || L[$i]=$G; }; done
S=$W/scratch/d; chown $U:$G $S; chmod 700 $S
PY=/opt/torch/.venv/bin/python3
ENV=(--env PATH=/usr/bin:/bin --env HOME=$S --env TMPDIR=$S --env CUDA_CACHE_PATH=$S/nv --env CUDA_VISIBLE_DEVICES=$(nvidia-smi --query-gpu=uuid --format=csv,noheader|head -1))
probe='import torch; x=torch.ones(4,device="cuda"); print("CUDA-OK", float(x.sum()))'
drop() { local out=() skip=0; for a in "${L[@]}"; do if [ $skip -gt 0 ]; then skip=$((skip-1)); continue; fi; for d in "$@"; do [ "$a" = "$d" ] && { case $a in --no-net|--no-unix) ;; *) skip=1;; esac; continue 2; }; done; out+=("$a"); done; printf '%s\n' "${out[@]}"; }
try() { local name=$1; shift; echo "== $name" >> $R/diag.txt; ( cd $S && timeout 30 "$@" -- $PY -c "$probe" ) 2>&1 | grep -v Warning | tail -4 >> $R/diag.txt; echo "rc=${PIPESTATUS[0]} $name" | tee -a $R/diag.txt; }
{ ls -la /dev/nvidia* /dev/shm 2>&1; ls /usr/local/nvidia 2>&1; ldconfig -p | grep -E "libcuda\."; } >> $R/diag.txt 2>&1
echo "== A $(date +%T)"
try plain env -i PATH=/usr/bin:/bin $PY -c "$probe" --
try full "${L[@]}" --rw $S "${ENV[@]}"
try dev_all "${L[@]}" --dev /dev --rw $S "${ENV[@]}"
mapfile -t A < <(drop --no-net --no-unix); try no_seccomp_net "${A[@]}" --rw $S "${ENV[@]}"
try ro_more "${L[@]}" --ro /usr/local/nvidia --ro /run --ro /var/run --ro /etc --rw $S "${ENV[@]}"
try rw_shm_tmp "${L[@]}" --dev /dev --rw /dev/shm --rw /tmp --rw $S "${ENV[@]}"
mapfile -t A < <(drop --uid --gid); try as_root "${A[@]}" --rw $S "${ENV[@]}"
try bare $W/bin/kerneld-sandbox --best-effort --ro / --exec / --dev /dev --rw / "${ENV[@]}"
try bare_nolimits $W/bin/kerneld-sandbox --best-effort --rw / --exec / --dev /dev "${ENV[@]}"
echo "== B judge_check $(date +%T)"
rm -rf /tmp/jtree; mkdir /tmp/jtree; cp -r $T/kernels $T/scripts $T/protocol /tmp/jtree/ 2>/dev/null
( cd /tmp/jtree && unset KERNELD_RUNNER_LAUNCHER && OUT=$R/jc BUDGET_S=110 bash scripts/gpu/judge_check.sh 2>&1 | grep -v "triton_bmm\|^  bmm\|AUTOTUNE" | tail -14 )
echo "== C KDA bench $(date +%T)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
( export PYTHONPATH=/tmp/site FLA_FLASH_KDA=0; timeout 130 python3 kernels/harness/bench.py --task kernels/kda \
  --candidate kernels/kda/seeds/chunked_v3.py --baselines fla --seeds 11 --timing '{"max_reps": 100}' \
  --out $R/kda/bench_v3.json --table $R/kda/bench_v3.md 2>&1 | grep -v -i warning | tail -8 )
echo "== D mla.toml through the daemon $(date +%T)"
printf 'eval_timeout = "5m"\nworker_start_timeout = "3m"\nsandbox_binary = "/nonexistent/kerneld-sandbox"\n' > $W/kd.toml
$W/bin/kerneld --config $W/kd.toml --state-dir $R/mla/state --socket $W/mla.sock --kernels $W/kernels --python $PY > $R/mla/kerneld.log 2>&1 &
KD=$!; CTL="$W/bin/kernelctl --socket $W/mla.sock"
for _ in $(seq 100); do $CTL version >/dev/null 2>&1 && break; sleep 0.2; done
t0=$(date +%s); $CTL enqueue $W/kernels/mla/mla.toml; sleep ${MLA_S:-150}
$CTL status > $R/mla/status.txt 2>&1; $CTL --json status > $R/mla/status.json 2>&1; $CTL --json events > $R/mla/events.jsonl 2>&1
$CTL show mla-decode > $R/mla/show.txt 2>&1; $CTL pause mla-decode >/dev/null 2>&1; sleep 2
kill -TERM $KD; wait $KD; cat $R/mla/status.txt; echo "elapsed $(( $(date +%s) - t0 )) s"
echo "== end $(date +%T)"
