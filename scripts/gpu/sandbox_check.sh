#!/usr/bin/env bash
# GPU check of the evaluation sandbox (issue #10), as root on the H200 (≤ 3 min).
# Needs target/release/{kerneld,kernelctl,kerneld-sandbox} built on the CPU machine and
# carried along. Writes $OUT/sandbox_check.json (+ logs) and prints a short table.
#   1. kerneld-sandbox --probe
#   2. the real daemon (GPU mode) with the runner user: version/gpus --json, and the demo
#      goal (installed seeds, search agent) evaluated end to end by a sandboxed judge;
#      KERNELD_RUNNER_LAUNCHER taken from that judge's environment
#   3. python under exactly that runner policy: import torch, a CUDA matmul, a fresh Triton
#      kernel compiled and launched, torch.compile of a small function; then a read of a
#      root-only file, a write to /root and /tmp, a TCP connect to a 127.0.0.1 listener, an
#      exec of /bin/sh: each must be refused.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/sandbox-check-out}; mkdir -p "$OUT"
PY=${KERNELD_PYTHON:-/opt/torch/.venv/bin/python3}
W=/tmp/kerneld-check; rm -rf "$W"; mkdir -p "$W/bin"; chmod 755 "$W"
# Everything the runner user must reach lives outside any 0700 home directory.
cp target/release/kerneld target/release/kernelctl target/release/kerneld-sandbox "$W/bin/"
cp -r kernels "$W/kernels"; chmod -R a+rX "$W"
id kerneld-runner >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin kerneld-runner
SB="$W/bin/kerneld-sandbox"; CTL="$W/bin/kernelctl --socket $W/sock"
"$SB" --probe > "$OUT/probe.json"; echo "probe: $(cat "$OUT/probe.json")"

cat > "$W/kerneld.toml" <<TOML
python = "$PY"
scratch_dir = "$W/scratch"
eval_timeout = "5m"
TOML
KD_SECRET_KEY=kd-secret-token-$$ "$W/bin/kerneld" --config "$W/kerneld.toml" --state-dir "$W/state" \
    --socket "$W/sock" --kernels "$W/kernels" > "$OUT/kerneld.log" 2>&1 &
KD=$!
for _ in $(seq 100); do $CTL version >/dev/null 2>&1 && break; sleep 0.2; done
$CTL version --json > "$OUT/version.json"; $CTL gpus > "$OUT/gpus.txt"; $CTL gpus --json > "$OUT/gpus.json"
cat "$OUT/gpus.txt"
printf 'name = "demo-check"\ntask = "demo"\n[budget]\niterations = 2\n[agent]\nkind = "search"\n' > "$W/demo.toml"
GOAL=$($CTL enqueue "$W/demo.toml")
JUDGE=""
for _ in $(seq 450); do
    [ -z "$JUDGE" ] && JUDGE=$(pgrep -P $KD | head -1)
    st=$($CTL status --json 2>/dev/null | "$PY" -c 'import json,sys; print(json.load(sys.stdin)[0]["state"])' 2>/dev/null)
    [ "$st" = completed ] || [ "$st" = failed ] && break; sleep 0.4
done
$CTL show "$GOAL" --json > "$OUT/demo_goal.json" 2>&1
$CTL events --json > "$OUT/events.json" 2>&1
LAUNCHER=""; JUDGE_UID=""
if [ -n "$JUDGE" ] && [ -r /proc/$JUDGE/environ ]; then
    LAUNCHER=$(tr '\0' '\n' < /proc/$JUDGE/environ | sed -n 's/^KERNELD_RUNNER_LAUNCHER=//p')
    JUDGE_UID=$(awk '/^Uid:/{print $2}' /proc/$JUDGE/status)
    tr '\0' '\n' < /proc/$JUDGE/environ | cut -d= -f1 > "$OUT/judge_env_names.txt"
fi
echo "$LAUNCHER" > "$OUT/runner_launcher.json"

# 3. the runner policy, by hand, as the judge would start a runner
SCR="$W/scratch/check-runner"; mkdir -p "$SCR"; chown kerneld-runner: "$SCR"; chmod 700 "$SCR"
echo "kd-root-only-$$" > /root/kerneld-check-secret; chmod 600 /root/kerneld-check-secret
"$PY" - "$SCR" > "$W/listener.port" <<'PYL' &
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(5); print(s.getsockname()[1], flush=True)
s.settimeout(170)
try:
    c, _ = s.accept(); open(sys.argv[1] + "/../LISTENER_ACCEPTED", "w").write("yes")
except OSError:
    pass
PYL
LPID=$!; sleep 1; PORT=$(cat "$W/listener.port")
cat > "$SCR/check.py" <<'PYC'
import json, os, socket, subprocess, sys, time
r = {}
def step(name, f):
    t = time.time()
    try:
        v = f(); r[name] = {"ok": True, "value": v, "s": round(time.time() - t, 2)}
    except BaseException as e:
        r[name] = {"ok": False, "error": f"{type(e).__name__}: {e}"[:300], "s": round(time.time() - t, 2)}
import torch, triton, triton.language as tl
def matmul():
    a = torch.randn(2048, 2048, device="cuda"); b = torch.randn(2048, 2048, device="cuda")
    c = a @ b; torch.cuda.synchronize(); return float((c - a.double().matmul(b.double()).float()).abs().max())
step("cuda_matmul", matmul)
def triton_fresh():
    @triton.jit
    def k(x_ptr, y_ptr, n, SCALE: tl.constexpr, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + i, tl.load(x_ptr + i, mask=i < n) * SCALE, mask=i < n)
    x = torch.randn(10000, device="cuda"); y = torch.empty_like(x)
    k[(triton.cdiv(10000, 256),)](x, y, 10000, SCALE=float(os.getpid() % 97 + 1), BLOCK=256)
    torch.cuda.synchronize(); return bool(torch.allclose(y, x * (os.getpid() % 97 + 1)))
step("triton_compile_launch", triton_fresh)
def compiled():
    f = torch.compile(lambda x: torch.sin(x) * 2 + x.cos())
    x = torch.randn(4096, device="cuda"); return bool(torch.allclose(f(x), torch.sin(x) * 2 + x.cos(), atol=1e-5))
step("torch_compile", compiled)
step("read_root_only", lambda: open("/root/kerneld-check-secret").read())
step("read_etc_hostname", lambda: open("/etc/hostname").read())
step("write_root", lambda: open("/root/kerneld-check-write", "w").write("x"))
step("write_tmp", lambda: open("/tmp/kerneld-check-write", "w").write("x"))
step("tcp_connect", lambda: socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5) and "connected")
step("udp_socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM) and "made")
step("exec_sh", lambda: subprocess.run(["/bin/sh", "-c", "id"], capture_output=True).stdout.decode())
step("uid", lambda: os.getuid())
step("env_names", lambda: sorted(os.environ))
print(json.dumps(r))
PYC
chmod 644 "$SCR/check.py"
RUNNER_ENV=(--env PATH=/usr/bin:/bin --env PYTHONDONTWRITEBYTECODE=1 --env HOME=$SCR --env TMPDIR=$SCR
            --env TRITON_CACHE_DIR=$SCR/triton --env TORCHINDUCTOR_CACHE_DIR=$SCR/inductor
            --env CUDA_CACHE_PATH=$SCR/nv --env XDG_CACHE_HOME=$SCR/cache
            --env CUDA_VISIBLE_DEVICES=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1))
if [ -n "$LAUNCHER" ]; then
    mapfile -t L < <("$PY" -c 'import json,sys; print("\n".join(json.loads(sys.argv[1])))' "$LAUNCHER")
else
    echo "no launcher from the judge: using the probe's defaults"; L=("$SB" --no-net --ro /usr --exec "$PY")
fi
( cd "$SCR" && timeout 150 "${L[@]}" --rw "$SCR" "${RUNNER_ENV[@]}" -- "$PY" -u "$SCR/check.py" "$PORT" \
    > "$OUT/runner_check.json" 2> "$OUT/runner_check.stderr" ); echo "runner rc=$?"
kill $LPID 2>/dev/null; kill $KD 2>/dev/null; wait $KD 2>/dev/null
ls "$W/scratch" > /dev/null
"$PY" - "$OUT" "$W" <<'PYS'
import json, os, sys
out, w = sys.argv[1], sys.argv[2]
def load(p, default=None):
    try:
        return json.load(open(os.path.join(out, p)))
    except Exception as e:
        return default if default is not None else {"unreadable": str(e)}
runner = load("runner_check.json")
version = load("version.json")
goal = load("demo_goal.json")
def events():
    text = open(os.path.join(out, "events.json")).read()
    try:
        v = json.loads(text); return v if isinstance(v, list) else [v]
    except ValueError:  # one object per line
        return [json.loads(l) for l in text.splitlines() if l.strip().startswith("{")]
try:
    evs = events()
except Exception:
    evs = []
classes = [(e.get("result") or {}).get("class") for e in evs
           if isinstance(e, dict) and e.get("type") == "evaluation_finished"]
def refused(k):
    v = runner.get(k, {}); return (not v.get("ok", True)) and ("Permission" in v.get("error", "") or "Operation not permitted" in v.get("error", ""))
summary = {
    "probe": load("probe.json"),
    "sandbox": version.get("daemon", {}).get("sandbox"),
    "demo_goal_classes": classes,
    "runner_launcher": open(os.path.join(out, "runner_launcher.json")).read().strip(),
    "runner": runner,
    "listener_accepted": os.path.exists(os.path.join(w, "scratch", "LISTENER_ACCEPTED")),
    "root_write_landed": os.path.exists("/root/kerneld-check-write"),
    "tmp_write_landed": os.path.exists("/tmp/kerneld-check-write"),
}
checks = {
    "cuda_matmul": runner.get("cuda_matmul", {}).get("ok", False),
    "triton_compile_launch": runner.get("triton_compile_launch", {}).get("value") is True,
    "torch_compile": runner.get("torch_compile", {}).get("value") is True,
    "read_root_only_refused": refused("read_root_only"),
    "write_root_refused": refused("write_root") and not summary["root_write_landed"],
    "write_tmp_refused": refused("write_tmp") and not summary["tmp_write_landed"],
    "tcp_refused": refused("tcp_connect") and not summary["listener_accepted"],
    "udp_refused": refused("udp_socket"),
    "exec_sh_refused": refused("exec_sh"),
    "runner_not_root": runner.get("uid", {}).get("value") not in (0, None),
    "sandbox_complete": bool((summary["sandbox"] or {}).get("complete")),
    "demo_goal_ok": bool(classes) and all(c == "ok" for c in classes),
}
summary["checks"] = checks
json.dump(summary, open(os.path.join(out, "sandbox_check.json"), "w"), indent=1)
for k, v in checks.items():
    print(f"{k:26s} {'PASS' if v else 'FAIL'}")
PYS
rm -f /root/kerneld-check-secret /root/kerneld-check-write /tmp/kerneld-check-write
