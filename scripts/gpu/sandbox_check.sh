#!/usr/bin/env bash
# Issue #24: the evaluation sandbox on a GPU machine at its strictest, through the real
# daemon. As root, in the repository root, with release binaries in .device/bin (kerneld,
# kernelctl, kerneld-sandbox; else $BIN, else target/release). At most BUDGET_S seconds
# (default 225; every step is bounded, a failed step is recorded and the next one runs).
#   a. the runner user kerneld-runner (useradd when missing)
#   c. daemon A, GPU mode, allow_unsandboxed off: `kernelctl version` (its start-up trial),
#      `gpus`
#   e. on A, an llm goal (a scripted endpoint on 127.0.0.1, sandbox_check.py endpoint) and
#      a hybrid goal on the demo task, until each has >= 2 correct, timed evaluations of
#      code its agent wrote
#   b. meanwhile, kerneld-sandbox directly with the runner launcher A's judge got: over
#      probe/cuda_init.py as is (cuInit, torch, a Triton kernel), and over
#      probe/proc_grant.py with --proc-write none / task / pid / all (threads made after the
#      rule name themselves? again after the dentry cache is dropped), and with --no-unix
#   d. daemon B in sandbox-only mode (KERNELD_UNSAFE_SKIP_STATIC_CHECKS=1): one goal of every
#      `# expect-sandboxed:` hostile candidate, then the honest seed, with the checks of
#      tests/tests/isolation.rs (sandbox_check.py hostile)
# Writes under $OUT: steps.tsv (step, exit code, seconds), probe.json, version.json/.txt,
# gpus.txt, launcher.json, direct_*.txt, goals.json, show_*.txt, events_A.jsonl,
# hostile.json, events_B.jsonl, kerneld_A.log, kerneld_hostile.log, sandbox_check.json; the
# summary (sandbox_check.py summary) is printed last.
set -u
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-225}
OUT=${OUT:-/tmp/sandbox-check-out}
mkdir -p "$OUT"
: > "$OUT/steps.tsv"
cd "$(dirname "$0")/../.." || exit 2
REPO=$(pwd)
left() { echo $((BUDGET_S - ($(date +%s) - T0))); }
# cap C [RESERVE]: C, or what is left of the budget after RESERVE seconds (at least 5)
cap() {
    local c=$1 l=$(($(left) - ${2:-0}))
    ((l < c)) && c=$l
    ((c < 5)) && c=5
    echo "$c"
}
# step NAME LIMIT CMD...: CMD bounded by LIMIT seconds; its exit code and time go to steps.tsv
step() {
    local name=$1 limit=$2 t rc
    shift 2
    t=$(date +%s%N)
    timeout -k 5 "$limit" "$@"
    rc=$?
    t=$((($(date +%s%N) - t) / 1000000))
    printf '%s\t%s\t%d.%03d\n' "$name" "$rc" $((t / 1000)) $((t % 1000)) >> "$OUT/steps.tsv"
    return $rc
}
say() { echo "== [+$(($(date +%s) - T0))s] $*"; }

BIN=${BIN:-}
for d in "$BIN" .device/bin target/release; do
    [ -n "$d" ] && [ -x "$d/kerneld" ] && [ -x "$d/kernelctl" ] && [ -x "$d/kerneld-sandbox" ] && { BIN=$d; break; }
done
PY=${KERNELD_PYTHON:-}
[ -z "$PY" ] && { [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3 || PY=$(command -v python3); }
W=/tmp/kdsbx-check
say "binaries $BIN, python $PY, work $W, budget ${BUDGET_S}s"
# Everything the runner user must reach lives outside any 0700 home directory.
rm -rf "$W"
mkdir -p "$W/bin" "$W/direct"
cp "$BIN/kerneld" "$BIN/kernelctl" "$BIN/kerneld-sandbox" "$W/bin/" || say "copying the binaries failed"
cp -r kernels "$W/kernels"
chmod -R a+rX "$W"
SB=$W/bin/kerneld-sandbox
UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader 2>/dev/null | head -1)
{ uname -a; nvidia-smi --query-gpu=name,driver_version,persistence_mode --format=csv 2>&1; } > "$OUT/machine.txt"
sha256sum "$W"/bin/* >> "$OUT/machine.txt" 2>&1
TOKHEX=$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; }
trap cleanup EXIT

say "a. the runner user"
if ! id kerneld-runner > /dev/null 2>&1; then
    step useradd 20 useradd --system --no-create-home --shell /usr/sbin/nologin kerneld-runner
fi
id kerneld-runner > "$OUT/runner_user.txt" 2>&1
step probe 10 "$SB" --probe > "$OUT/probe.json" 2>&1

# start_daemon TAG [ENV=V...]: a daemon on $W/TAG (its config holds a token the hostile
# suite must never see leak); sets DPID, CTL.
start_daemon() {
    local tag=$1 d=$W/$1
    shift
    mkdir -p "$d"
    {
        echo "# KDTOKEN-config-$TOKHEX"
        echo "python = \"$PY\""
        echo 'eval_timeout = "5m"'
        echo 'worker_start_timeout = "3m"'
        [ -n "$UUID" ] && echo "gpus = [\"$UUID\"]"
        [ -n "${EXTRA_TOML:-}" ] && echo "$EXTRA_TOML"
    } > "$d/kerneld.toml"
    chmod 600 "$d/kerneld.toml"
    env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        ${LD_LIBRARY_PATH:+LD_LIBRARY_PATH=$LD_LIBRARY_PATH} KERNELD_LOG=info "$@" \
        "$W/bin/kerneld" --config "$d/kerneld.toml" --state-dir "$d/state" --socket "$d/sock" \
        --kernels "$W/kernels" > "$OUT/kerneld_$tag.log" 2>&1 &
    DPID=$!
    PIDS+=("$DPID")
    CTL=("$W/bin/kernelctl" --socket "$d/sock")
    for _ in $(seq 100); do "${CTL[@]}" status > /dev/null 2>&1 && break; sleep 0.3; done
}
stop_daemon() {
    kill "$DPID" 2>/dev/null
    for _ in $(seq 40); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$DPID" 2>/dev/null
    wait "$DPID" 2>/dev/null
}

say "c. daemon A (GPU mode, allow_unsandboxed off): its start-up trial, version"
"$PY" scripts/gpu/sandbox_check.py endpoint "$W/port" "$W/kernels/demo/seeds/tiled.py" > "$OUT/endpoint.log" 2>&1 &
PIDS+=($!)
# A_TOML: extra kerneld.toml lines for daemon A (a CPU dry run where the runner user cannot
# reach the Python: `allow_unsandboxed = true`); never on the GPU machine.
EXTRA_TOML=${A_TOML:-} start_daemon A
# `version` waits for the sandbox trial (CUDA in a judge and its runner).
step version 120 "${CTL[@]}" --json version > "$OUT/version.json" 2>&1
"${CTL[@]}" version > "$OUT/version.txt" 2>&1
"${CTL[@]}" gpus > "$OUT/gpus.txt" 2>&1
cat "$OUT/version.txt"
COMPLETE=$("$PY" -c 'import json,sys; v=json.load(open(sys.argv[1])); print(1 if (v.get("daemon") or v)["sandbox"]["complete"] else 0)' "$OUT/version.json" 2>/dev/null || echo 0)

say "e. an llm and a hybrid goal on daemon A"
for _ in $(seq 50); do [ -s "$W/port" ] && break; sleep 0.1; done
URL="http://127.0.0.1:$(cat "$W/port" 2>/dev/null)/v1"
mkdir -p "$W/goals" && chmod 755 "$W/goals"
printf 'name = "sbx-llm"\ntask = "demo"\n[budget]\niterations = 4\n[agent]\nkind = "llm"\nurl = "%s"\nmodel = "scripted"\n' "$URL" > "$W/goals/llm.toml"
printf 'name = "sbx-hybrid"\ntask = "demo"\n[budget]\niterations = 4\n[agent]\nkind = "hybrid"\nproposer = "llm"\ntune_evaluations = 2\nurl = "%s"\nmodel = "scripted"\n' "$URL" > "$W/goals/hybrid.toml"
LLM_GOAL=$("${CTL[@]}" enqueue "$W/goals/llm.toml" 2> "$OUT/enqueue_llm.err")
HYBRID_GOAL=$("${CTL[@]}" enqueue "$W/goals/hybrid.toml" 2> "$OUT/enqueue_hybrid.err")
export LLM_GOAL HYBRID_GOAL
echo "llm goal: ${LLM_GOAL:-refused: $(cat "$OUT/enqueue_llm.err")}"
echo "hybrid goal: ${HYBRID_GOAL:-refused: $(cat "$OUT/enqueue_hybrid.err")}"

say "b. kerneld-sandbox directly, with the runner launcher A's judge got"
JUDGE=""
for _ in $(seq 120); do
    JUDGE=$(pgrep -P "$DPID" | head -1)
    [ -n "$JUDGE" ] && grep -q KERNELD_RUNNER_LAUNCHER "/proc/$JUDGE/environ" 2>/dev/null && break
    JUDGE=""
    sleep 0.5
done
LAUNCHER=""
[ -n "$JUDGE" ] && LAUNCHER=$(tr '\0' '\n' < "/proc/$JUDGE/environ" | sed -n 's/^KERNELD_RUNNER_LAUNCHER=//p')
echo "$LAUNCHER" > "$OUT/launcher.json"
LIBCUDA=$(tr '\0' '\n' < "/proc/$JUDGE/environ" 2>/dev/null | sed -n 's/^TRITON_LIBCUDA_PATH=//p')
# The uid the launcher switches to owns the runner's scratch (no --uid: this uid, as root
# without capabilities: a directory of another uid's would be closed to it).
RUID=$("$PY" -c 'import json,sys; a=json.loads(sys.argv[1]); print(a[a.index("--uid")+1] if "--uid" in a else 0)' "$LAUNCHER" 2>/dev/null || echo 0)
# direct NAME LIMIT PROC_WRITE EXTRA_FLAG SCRIPT ARGS...: the launcher with its
# --proc-write replaced (- keeps it), over SCRIPT in a scratch of the runner user's, for at
# most LIMIT seconds; output in direct_NAME.txt.
direct() {
    local name=$1 limit=$2 pw=$3 extra=$4 script=$5 s=$W/direct/$1 rc
    shift 5
    mkdir -p "$s"
    cp scripts/gpu/probe/cuda_init.py scripts/gpu/probe/proc_grant.py "$s/"
    chown -R "$RUID" "$s"
    chmod 700 "$s"
    local -a L
    # The launcher's own arguments, less its --proc-write when the variant names one.
    mapfile -t L < <("$PY" -c '
import json, sys
argv, keep, out, skip = json.loads(sys.argv[1]), sys.argv[2] == "-", [], False
for a in argv:
    if skip:
        skip = False
    elif a == "--proc-write" and not keep:
        skip = True
    else:
        out.append(a)
print("\n".join(out))' "$LAUNCHER" "$pw" 2>/dev/null)
    [ "${#L[@]}" -eq 0 ] && L=("$SB" --no-net --no-connect)
    [ "$pw" != "-" ] && L+=(--proc-write "$pw")
    [ -n "$extra" ] && L+=("$extra")
    {
        echo "\$ ${L[*]} --rw $s ... -- $PY $script $*"
        step "direct_$name" "$(cap "$limit" 100)" "${L[@]}" --rw "$s" --env PATH=/usr/bin:/bin \
            --env HOME="$s" --env TMPDIR="$s" --env TRITON_CACHE_DIR="$s/triton" \
            --env CUDA_CACHE_PATH="$s/nv" --env XDG_CACHE_HOME="$s/cache" \
            --env PYTHONDONTWRITEBYTECODE=1 --env CUDA_VISIBLE_DEVICES="$UUID" \
            ${LIBCUDA:+--env TRITON_LIBCUDA_PATH=$LIBCUDA} -- "$PY" "$s/$script" "$@" 2>&1
        rc=$?
        echo "rc=$rc"
    } > "$OUT/direct_$name.txt"
    grep -v '^\$ ' "$OUT/direct_$name.txt" | tail -3 | sed "s/^/  $name: /"
}
if [ -n "$UUID" ]; then
    direct strict 60 - "" cuda_init.py
    direct proc-none 25 none "" proc_grant.py
    # The kernel's dentry cache dropped between the two rounds of new threads.
    (sleep 8; echo 2 > /proc/sys/vm/drop_caches; echo go) | direct proc-task 40 task "" proc_grant.py --drop --cuda
    direct proc-pid 25 pid "" proc_grant.py
    direct proc-all 25 all "" proc_grant.py
    direct no-unix 25 task --no-unix proc_grant.py
else
    say "no GPU (nvidia-smi): the direct CUDA runs are skipped"
fi

say "e. waiting for >= 2 correct, timed evaluations of agent-written code in each goal"
step wait_goals "$(cap 100 95)" "$PY" scripts/gpu/sandbox_check.py wait "$OUT/goals.json" \
    "$(($(date +%s) + $(cap 95 95)))" "${CTL[@]}" -- ${LLM_GOAL:-} ${HYBRID_GOAL:-}
for g in ${LLM_GOAL:-} ${HYBRID_GOAL:-}; do "${CTL[@]}" show "$g" > "$OUT/show_$g.txt" 2>&1; done
"${CTL[@]}" --json events > "$OUT/events_A.jsonl" 2>&1
stop_daemon

say "d. daemon B, sandbox-only mode: the hostile suite"
# A sandbox found incomplete still gets its attacks run (and says so in the summary).
EXTRA_TOML=""
[ "$COMPLETE" = 1 ] || EXTRA_TOML="allow_unsandboxed = true"
start_daemon hostile KERNELD_UNSAFE_SKIP_STATIC_CHECKS=1 KD_HOSTILE_API_KEY="KDTOKEN-env-$TOKHEX"
step version_B 120 "${CTL[@]}" --json version > "$OUT/version_hostile.json" 2>&1
step hostile "$(cap 150 8)" "$PY" scripts/gpu/sandbox_check.py hostile "$OUT/hostile.json" \
    "$(($(date +%s) + $(cap 140 12)))" "$W/hostile/sock" "$W/hostile/state" "$W/hostile/state.scratch" \
    "$W/hostile/kerneld.toml" "KDTOKEN-env-$TOKHEX" "${CTL[@]}"
"${CTL[@]}" --json events > "$OUT/events_B.jsonl" 2>&1
stop_daemon

"$PY" scripts/gpu/sandbox_check.py summary "$OUT"
