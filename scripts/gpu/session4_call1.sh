#!/usr/bin/env bash
# Session 4, device call 1 (lead): what Landlock rule stops CUDA init (strace + bisection over
# the runner policy), then the real daemon in GPU mode with its sandbox on (which ladder level it
# picks), the shipped mla.toml for MLA_S seconds, a re-time of the best (#11 stability), a report
# PNG (#19), and the judge's GPU check with the 0.5·F timer allowance (#11 false rejections).
# Carried: .device/s4/{bin/{kerneld,kernelctl,kerneld-sandbox,strace},lib/*.so*,launcher.json}.
set -uo pipefail
root=$PWD; S4=$root/.device/s4; R=/tmp/s4c1; rm -rf $R; mkdir -p $R/jc $R/mla
FOUT=$OUT
trap 'tar -C /tmp -czf $FOUT/s4c1.tgz s4c1; cp $R/diag.txt $R/summary.txt $FOUT/ 2>/dev/null; cp $R/mla/report.png $FOUT/ 2>/dev/null' EXIT
export PYTHONUNBUFFERED=1 NO_COLOR=1
PY=/opt/torch/.venv/bin/python3; [ -x $PY ] || PY=$(command -v python3)
W=/tmp/kerneld-check; rm -rf $W; mkdir -p $W/bin $W/scratch/d; cp $S4/bin/* $W/bin/; cp -r kernels $W/kernels; chmod -R a+rX $W
id kerneld-runner >/dev/null 2>&1 || useradd --system --user-group --no-create-home --shell /usr/sbin/nologin kerneld-runner
U=$(id -u kerneld-runner); G=$(id -g kerneld-runner)
{ nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader; $PY -c 'import torch,triton;print("torch",torch.__version__,"triton",triton.__version__)'; uname -r; date -u +%FT%TZ; } > $R/env.txt 2>&1
# --- A: which rule stops CUDA (the runner policy of session 3, uid/gid of this machine) ---
mapfile -t L < <($PY -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1]))))' $S4/launcher.json)
for i in "${!L[@]}"; do [ "${L[$i]}" = 999 ] && { [ "${L[$((i-1))]}" = --uid ] && L[$i]=$U || L[$i]=$G; }; done
SC=$W/scratch/d; chown $U:$G $SC; chmod 700 $SC
ENV=(--env PATH=/usr/bin:/bin --env HOME=$SC --env TMPDIR=$SC --env CUDA_CACHE_PATH=$SC/nv)
probe='import torch; x=torch.ones(4,device="cuda"); print("CUDA-OK", float(x.sum()))'
try() { local name=$1; shift; echo "== $name" >> $R/diag.txt; ( cd $SC && timeout 40 "$@" -- $PY -c "$probe" ) 2>&1 | grep -v Warning | tail -2 >> $R/diag.txt; echo "rc=${PIPESTATUS[0]} $name" | tee -a $R/diag.txt; }
echo "== A $(date +%T)"
try policy "${L[@]}" --rw $SC "${ENV[@]}"
try ro_all "${L[@]}" --ro / --rw $SC "${ENV[@]}"
try exec_all "${L[@]}" --exec / --rw $SC "${ENV[@]}"
try read_exec_dev "${L[@]}" --ro / --exec / --dev /dev --rw $SC "${ENV[@]}"
try rw_proc "${L[@]}" --rw /proc --rw $SC "${ENV[@]}"
try rw_sys "${L[@]}" --rw /sys --rw $SC "${ENV[@]}"
try rw_dev "${L[@]}" --rw /dev --dev /dev --rw $SC "${ENV[@]}"
try rw_all "${L[@]}" --rw / "${ENV[@]}"
export LD_LIBRARY_PATH=$S4/lib
( cd $SC && timeout 60 $W/bin/strace -f -qq -o $R/strace.txt "${L[@]}" --rw $SC "${ENV[@]}" -- $PY -c "$probe" ) > /dev/null 2>&1
unset LD_LIBRARY_PATH
{ echo "== strace: failed calls other than ENOENT/EAGAIN under the policy"; grep -E '= -1 E' $R/strace.txt | grep -vE 'ENOENT|EAGAIN|ENOTTY|ECHILD|EEXIST' | sed -E 's/^[0-9]+ +//' | sort | uniq -c | sort -rn | head -60; } >> $R/diag.txt 2>&1
gzip -f $R/strace.txt
# --- C: the daemon in GPU mode, sandbox on: the ladder, then mla.toml ---
echo "== C daemon $(date +%T)"
printf 'python = "%s"\nscratch_dir = "%s/scratch"\neval_timeout = "5m"\nworker_start_timeout = "4m"\nallow_unsandboxed = true\n' $PY $W > $W/kd.toml
ts=$(date +%s%N); $W/bin/kerneld --config $W/kd.toml --state-dir $W/state --socket $W/sock --kernels $W/kernels > $R/mla/kerneld.log 2>&1 &
KD=$!; CTL="$W/bin/kernelctl --socket $W/sock"
for _ in $(seq 300); do $CTL version >/dev/null 2>&1 && break; sleep 0.2; done
echo "daemon answers after $(( ($(date +%s%N) - ts) / 1000000 )) ms" >> $R/summary.txt
$CTL version > $R/mla/version.txt 2>&1; $CTL --json version > $R/mla/version.json 2>&1; $CTL gpus > $R/mla/gpus.txt 2>&1
grep -iE "sandbox|widen|ladder" $R/mla/kerneld.log | cut -c1-400 >> $R/summary.txt
t0=$(date +%s); $CTL enqueue $W/kernels/mla/mla.toml >> $R/summary.txt 2>&1; sleep ${MLA_S:-170}
$CTL status > $R/mla/status.txt 2>&1; $CTL show mla-decode > $R/mla/show.txt 2>&1
$CTL pause mla-decode >/dev/null 2>&1
echo "== retime $(date +%T)"
timeout ${RETIME_S:-90} $CTL --json retime mla-decode best --times ${RETIMES:-8} > $R/mla/retime.json 2> $R/mla/retime.err
echo "retime rc=$?" >> $R/summary.txt
$CTL report mla-decode -o $R/mla/report.png >> $R/summary.txt 2>&1; $CTL report mla-decode -o $R/mla/report.html > /dev/null 2>&1
$CTL --json events > $R/mla/events.jsonl 2>&1; $CTL show mla-decode > $R/mla/show_after.txt 2>&1
kill -TERM $KD; wait $KD
{ echo "mla: $(( $(date +%s) - t0 )) s"; cat $R/mla/status.txt; head -40 $R/mla/show.txt; tail -c 1500 $R/mla/retime.json; tail -3 $R/mla/retime.err; } >> $R/summary.txt
# --- B: the judge's GPU check (hostile + adversarial suites, honest seeds, timer allowance) ---
echo "== B judge_check $(date +%T)"
rm -rf /tmp/jtree; mkdir /tmp/jtree; cp -r kernels scripts protocol /tmp/jtree/
( cd /tmp/jtree && OUT=$R/jc BUDGET_S=${JC_S:-100} bash scripts/gpu/judge_check.sh 2>&1 | grep -v "triton_bmm\|^  bmm\|AUTOTUNE" | tail -14 ) | tee -a $R/summary.txt
echo "== end $(date +%T)"
tail -30 $R/diag.txt
