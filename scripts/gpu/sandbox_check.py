"""Helpers of scripts/gpu/sandbox_check.sh (issue #24); standard library only.

  endpoint PORT_FILE SEED        a scripted OpenAI-compatible endpoint on 127.0.0.1 (the
                                 tests' chat_reply format): each request gets the demo seed,
                                 marked with its number, and a config; serves until killed
  wait OUT DEADLINE CTL... -- ID...   polls `kernelctl --json events` until each goal has
                                 >= 2 correct, timed evaluations of code its agent wrote
                                 (or is finished, or the deadline passes)
  hostile OUT DEADLINE SOCKET STATE SCRATCH_ROOT CONFIG ENV_TOKEN CTL...
                                 the hostile suite in sandbox-only mode against a running
                                 daemon (tests/tests/isolation.rs's world and checks, one
                                 goal: every `# expect-sandboxed:` file, then the honest seed)
  summary OUT                    reads what the steps wrote, writes OUT/sandbox_check.json
                                 and prints the short summary
"""
import glob
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
HOSTILE = os.path.join(REPO, "kernels", "harness", "tests", "hostile")
SUCCESS_MARK = "HOSTILE-SUCCEEDED"


def dump(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, default=str)


def events(ctl, goal=None):
    """The daemon's events (of one goal), as dicts; [] when kernelctl fails."""
    argv = ctl + ["--json", "events"] + ([goal] if goal else [])
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    evs = []
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                evs.append(json.loads(line))
            except ValueError:
                pass
    return evs


# -- endpoint ----------------------------------------------------------------------------------
def endpoint(port_file, seed_path):
    seed = open(seed_path).read()
    count = [0]
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(n)
            with lock:
                count[0] += 1
                k = count[0]
            block = [16, 32, 64][k % 3]
            source = seed + "\n# proposal %d of the scripted endpoint\n" % k
            content = "Proposal %d.\n```python\n%s\n```\n```json\n%s\n```\n" % (
                k, source, json.dumps({"BLOCK_M": block}))
            body = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}],
                               "usage": {"prompt_tokens": 50, "completion_tokens": 50, "total_tokens": 100}})
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.replace(port_file + ".tmp", port_file)
    srv.serve_forever()


# -- wait --------------------------------------------------------------------------------------
def goal_figures(evs, goal):
    """What a goal's events say: its state, and its evaluations (agent, class, speedup)."""
    agent_of, evals, state = {}, [], None
    for e in evs:
        if e.get("goal") != goal:
            continue
        t = e.get("type")
        if t == "candidate_proposed":
            agent_of[e.get("candidate")] = (e.get("agent"), bool(e.get("source")))
        elif t == "evaluation_finished":
            r = e.get("result") or {}
            agent, written = agent_of.get(e.get("candidate"), (None, False))
            evals.append({"agent": agent, "written_by_agent": written, "class": r.get("class"),
                          "correct": bool(r.get("correct")), "interpreted": bool(r.get("interpreted")),
                          "speedup": r.get("speedup"), "spread_pct": r.get("spread_pct"),
                          "message": (r.get("message") or "")[:300]})
        elif t == "goal_state_changed":
            state = e.get("state") or e.get("to")
    # Code the agent wrote (a proposal with its own source), judged correct and timed.
    good = [x for x in evals if x["correct"] and x["speedup"] is not None and x["written_by_agent"]]
    return {"state": state, "evaluations": evals, "correct_timed_by_agent": len(good)}


def wait(out, deadline, ctl, goals, need=2):
    figures = {}
    while True:
        evs = events(ctl)
        figures = {g: goal_figures(evs, g) for g in goals}
        done = all(f["correct_timed_by_agent"] >= need or f["state"] in ("completed", "failed", "cancelled")
                   for f in figures.values())
        if done or time.time() > deadline:
            break
        time.sleep(2)
    dump(out, {"need": need, "goals": figures, "timed_out": not done})
    ok = all(f["correct_timed_by_agent"] >= need for f in figures.values())
    return 0 if ok else 1


# -- hostile -----------------------------------------------------------------------------------
EXPECT = re.compile(r"^# expect-sandboxed: (.*)$", re.M)


def hostile_files():
    out = []
    for path in sorted(glob.glob(os.path.join(HOSTILE, "*.py"))):
        text = open(path).read()
        head = "\n".join(text.splitlines()[:6])
        m = EXPECT.search(head)
        if not m:
            continue
        v = m.group(1).strip()
        want = None
        if v != "no-effect":
            kv = dict(p.split("=", 1) for p in v.split() if "=" in p)
            want = (kv.get("class"), kv.get("rule", ""))
        what = re.search(r"^# hostile: (.*)$", head, re.M)
        out.append({"name": os.path.basename(path), "text": text, "want": want,
                    "what": what.group(1) if what else ""})
    return out


class World:
    """isolation.rs's world: secrets the daemon's user has, places a candidate must not
    write, a TCP listener and unix sockets of "another service" that must get nothing."""

    def __init__(self, base, state, scratch_root, config, env_token):
        self.base = base
        os.makedirs(base, exist_ok=True)
        os.chmod(base, 0o755)
        self.tokens = [env_token]
        self.secret = os.path.join(base, "secret.txt")
        self.tokens.append("KDTOKEN-file-" + secrets.token_hex(8))
        with open(self.secret, "w") as f:
            f.write(self.tokens[-1])
        os.chmod(self.secret, 0o600)
        self.marker = os.path.join(base, "marker")
        os.makedirs(self.marker, exist_ok=True)
        with open(os.path.join(self.marker, "keep"), "w") as f:
            f.write("keep")
        self.state, self.scratch_root, self.config = state, scratch_root, config
        try:  # the config file's own token (a comment the script put there)
            self.tokens += re.findall(r"KDTOKEN-[a-z]+-[0-9a-f]+", open(config).read())
        except OSError:
            pass
        slot = os.path.join(scratch_root, "slot9")
        os.makedirs(slot, exist_ok=True)
        os.chmod(slot, 0o755)
        self.tokens.append("KDTOKEN-slot-" + secrets.token_hex(8))
        with open(os.path.join(slot, "other-slot.txt"), "w") as f:
            f.write(self.tokens[-1])
        os.chmod(os.path.join(slot, "other-slot.txt"), 0o644)
        self.tcp = socket.socket()
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen(8)
        self.tcp.setblocking(False)
        self.unix_path = os.path.join(base, "service.sock")
        self.dgram_path = os.path.join(base, "dgram.sock")
        for p in (self.unix_path, self.dgram_path):
            if os.path.exists(p):
                os.unlink(p)
        self.unix = socket.socket(socket.AF_UNIX)
        self.unix.bind(self.unix_path)
        self.unix.listen(8)
        self.dgram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.dgram.bind(self.dgram_path)
        for p in (self.unix_path, self.dgram_path):
            os.chmod(p, 0o777)
        self.abstract_name = "kd-gpu-hostile-%d" % os.getpid()
        self.abstract = socket.socket(socket.AF_UNIX)
        self.abstract.bind("\0" + self.abstract_name)
        self.abstract.listen(8)
        for s in (self.unix, self.dgram, self.abstract):
            s.setblocking(False)

    def substitute(self, text, daemon_socket):
        for k, v in {"@@SECRET_FILE@@": self.secret, "@@SECRET_ENV@@": "KD_HOSTILE_API_KEY",
                     "@@MARKER_DIR@@": self.marker, "@@STATE_DIR@@": self.state,
                     "@@TCP_PORT@@": str(self.tcp.getsockname()[1]),
                     "@@DAEMON_SOCKET@@": daemon_socket, "@@UNIX_SOCKET@@": self.unix_path,
                     "@@UNIX_DGRAM@@": self.dgram_path, "@@ABSTRACT_SOCKET@@": self.abstract_name,
                     "@@SCRATCH_ROOT@@": self.scratch_root}.items():
            text = text.replace(k, v)
        return text

    def reached(self):
        got = []
        for name, s, op in [("the TCP listener", self.tcp, "accept"), ("the named unix socket", self.unix, "accept"),
                            ("the abstract unix socket", self.abstract, "accept"),
                            ("the named datagram socket", self.dgram, "recv")]:
            while True:
                try:
                    s.accept() if op == "accept" else s.recv(64)
                    got.append(name)
                except OSError:
                    break
        return got


OUTSIDE = ["/tmp/kerneld-hostile-write", "/var/tmp/kerneld-hostile-write", "/root/kerneld-hostile-write"]


def survivors():
    pids = []
    for d in os.listdir("/proc"):
        try:
            if d.isdigit() and open("/proc/%s/comm" % d).read().strip() == "kd-survivor":
                pids.append(int(d))
        except OSError:
            pass
    return pids


def tree(d):
    out = set()
    for root, dirs, files in os.walk(d):
        for n in dirs + files:
            out.add(os.path.relpath(os.path.join(root, n), d))
    return out


def hostile(out, deadline, daemon_socket, state, scratch_root, config, env_token, ctl):
    world = World(os.path.join(os.path.dirname(state), "hostile-world"), state, scratch_root, config, env_token)
    files = hostile_files()
    goal_dir = os.path.join(world.base, "goal")
    os.makedirs(goal_dir, exist_ok=True)
    os.chmod(goal_dir, 0o755)
    seeds = []
    for h in files:
        with open(os.path.join(goal_dir, h["name"]), "w") as f:
            f.write(world.substitute(h["text"], daemon_socket))
        seeds.append(h["name"])
    honest = open(os.path.join(REPO, "kernels", "demo", "seeds", "tiled.py")).read()
    with open(os.path.join(goal_dir, "honest_tiled.py"), "w") as f:
        f.write(honest)
    seeds.append("honest_tiled.py")
    goal_file = os.path.join(goal_dir, "goal.toml")
    with open(goal_file, "w") as f:
        f.write('name = "hostile-gpu"\ntask = "demo"\nseed = [%s]\n[budget]\niterations = %d\n'
                % (", ".join('"%s"' % s for s in seeds), len(seeds)))
    state_before = tree(state)
    r = subprocess.run(ctl + ["enqueue", goal_file], capture_output=True, text=True, timeout=60)
    goal = r.stdout.strip()
    result = {"files": [h["name"] for h in files], "enqueue": {"rc": r.returncode, "stderr": r.stderr[-2000:]},
              "goal": goal}
    verdicts, finished = {}, False
    seen_reached, first_seen, seen_survivors = [], {}, []

    def look_for_survivors():
        # A process takes the name once its runner is gone; one still there a second and a
        # half later was not killed with its runner (the judge kills strays at once).
        now = time.time()
        for p in survivors():
            t = first_seen.setdefault(p, now)
            if now - t >= 1.5 and p not in seen_survivors:
                seen_survivors.append(p)
    while goal and r.returncode == 0 and time.time() < deadline:
        evs = events(ctl, goal)
        seed_of = {}
        for e in evs:
            t = e.get("type")
            if t == "seed_described" and e.get("rejected"):
                verdicts[e.get("seed")] = {"class": "rejected", "rule": "", "message": e.get("rejected")}
            elif t == "candidate_proposed":
                seed_of[e.get("candidate")] = e.get("seed")
            elif t == "evaluation_finished" and e.get("candidate") in seed_of:
                res = e.get("result") or {}
                verdicts[seed_of[e["candidate"]]] = {"class": res.get("class"), "rule": res.get("rule") or "",
                                                     "message": (res.get("message") or "")[:600],
                                                     "speedup": res.get("speedup")}
            elif t == "goal_state_changed" and (e.get("state") or e.get("to")) in ("completed", "failed", "cancelled"):
                finished = True
        seen_reached += world.reached()
        look_for_survivors()
        if finished:
            break
        time.sleep(1)
    for _ in range(3):  # the last runner's strays: a second and a half at least
        look_for_survivors()
        time.sleep(1)
    seen_reached += world.reached()
    for p in seen_survivors:
        try:
            os.kill(p, 9)
        except OSError:
            pass
    visible = json.dumps(events(ctl, goal))
    for args in (["show", goal], ["best", goal], ["status"]):
        visible += subprocess.run(ctl + args, capture_output=True, text=True, timeout=30).stdout
    try:
        visible += open(os.path.join(os.path.dirname(out), "kerneld_hostile.log"), errors="replace").read()
    except OSError:
        pass
    failures = []
    for h in files:
        v = verdicts.get(h["name"])
        if v is None:
            failures.append("%s: no verdict" % h["name"])
        elif h["want"] and (v["class"], v["rule"]) != h["want"]:
            failures.append("%s: expected class=%s rule=%s, got %s [%s]: %s" % (
                h["name"], h["want"][0], h["want"][1], v["class"], v["rule"], v["message"]))
    hv = verdicts.get("honest_tiled.py")
    if not hv or hv["class"] != "ok":
        failures.append("the honest seed after them: %s" % (hv,))
    if SUCCESS_MARK in visible:
        at = visible.index(SUCCESS_MARK)
        failures.append("an attack worked: " + visible[at:at + 400])
    failures += ["token %s is visible" % t for t in world.tokens if t and t in visible]
    if sorted(os.listdir(world.marker)) != ["keep"]:
        failures.append("the marker directory changed: %s" % sorted(os.listdir(world.marker)))
    planted = [p for p in tree(state) - state_before
               if not (p.startswith("sources") or p.startswith("kerneld.redb") or p.startswith("cache"))]
    if planted:
        failures.append("new files in the state directory: %s" % planted)
    for p in OUTSIDE:
        if os.path.exists(p):
            failures.append("%s was written" % p)
            os.unlink(p)
    failures += ["%s got something" % w for w in sorted(set(seen_reached))]
    failures += ["a process outlived its runner (pid %d)" % p for p in seen_survivors]
    result.update({"verdicts": verdicts, "finished": finished, "failures": failures,
                   "timed_out": not finished})
    dump(out, result)
    return 0 if finished and not failures else 1


# -- summary -----------------------------------------------------------------------------------
def load(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def summary(out):
    steps = []
    try:
        for line in open(os.path.join(out, "steps.tsv")):
            name, rc, secs = line.rstrip("\n").split("\t")[:3]
            steps.append({"step": name, "rc": int(rc), "s": float(secs)})
    except (OSError, ValueError):
        pass
    version = load(os.path.join(out, "version.json"), {})
    sb = (version.get("daemon") or version).get("sandbox") or {}
    direct = {}
    for p in sorted(glob.glob(os.path.join(out, "direct_*.txt"))):
        text = open(p, errors="replace").read()
        m = re.search(r"^rc=(\d+)", text, re.M)
        direct[os.path.basename(p)[7:-4]] = {"rc": int(m.group(1)) if m else None,
                                             "cuinit": (re.findall(r"^cuInit (\d+)", text, re.M) or [None])[0],
                                             "cuda_ok": "cuda ok" in text,
                                             "threads": re.findall(r"^thread .*$", text, re.M)}
    goals = load(os.path.join(out, "goals.json"), {})
    hostile_r = load(os.path.join(out, "hostile.json"), {})
    vb = load(os.path.join(out, "version_hostile.json"), {})
    sb_b = (vb.get("daemon") or vb).get("sandbox") or {}
    checks = {
        "sandbox_complete_gpu": bool(sb.get("complete")) and not sb.get("allow_unsandboxed"),
        "gpu_trial_strict": bool(sb.get("trials")) and bool(sb["trials"][0].get("ok")),
        "direct_strict_cuda": direct.get("strict", {}).get("cuda_ok", False),
        "llm_goal_2_correct_timed": (goals.get("goals") or {}).get(os.environ.get("LLM_GOAL", ""), {}).get("correct_timed_by_agent", 0) >= 2,
        "hybrid_goal_2_correct_timed": (goals.get("goals") or {}).get(os.environ.get("HYBRID_GOAL", ""), {}).get("correct_timed_by_agent", 0) >= 2,
        "hostile_all_stopped": bool(hostile_r) and not hostile_r.get("failures") and bool(hostile_r.get("finished")),
        "hostile_under_full_sandbox": bool(sb_b.get("complete")) and not sb_b.get("allow_unsandboxed"),
    }
    result = {"checks": checks, "steps": steps, "sandbox": sb, "direct": direct, "goals": goals,
              "hostile": {k: hostile_r.get(k) for k in ("files", "verdicts", "failures", "finished")}}
    dump(os.path.join(out, "sandbox_check.json"), result)
    print("== steps (rc, seconds)")
    for s in steps:
        print("  %-28s rc=%-3d %6.1fs" % (s["step"], s["rc"], s["s"]))
    print("== sandbox: %s; widened: %s" % ("complete" if sb.get("complete") else "INCOMPLETE",
                                          [w.get("layer") for w in sb.get("widened") or []] or "nothing"))
    for t in sb.get("trials") or []:
        print("  trial %-40s %s" % (t.get("variant"), "ok" if t.get("ok") else (t.get("error") or "")[:150]))
    print("== direct kerneld-sandbox runs (cuInit rc, CUDA+Triton ok)")
    for k, v in direct.items():
        print("  %-22s rc=%s cuInit=%s cuda_ok=%s %s" % (k, v["rc"], v["cuinit"], v["cuda_ok"], " ".join(v["threads"])))
    print("== hostile suite (daemon B: sandbox %s%s): %d files, %s" % (
        "complete" if sb_b.get("complete") else "INCOMPLETE",
        ", allow_unsandboxed" if sb_b.get("allow_unsandboxed") else "",
        len(hostile_r.get("files") or []),
        "finished" if hostile_r.get("finished") else "NOT finished (budget)"))
    for f in hostile_r.get("failures") or []:
        print("  hostile FAILURE: " + f[:300])
    print("== checks")
    for k, v in checks.items():
        print("  %-28s %s" % (k, "PASS" if v else "FAIL"))
    return 0 if all(checks.values()) else 1


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "endpoint":
        return endpoint(*args[:2])
    if cmd == "wait":
        out, deadline = args[0], float(args[1])
        sep = args.index("--")
        return wait(out, deadline, args[2:sep], args[sep + 1:])
    if cmd == "hostile":
        out, deadline, sock, state, scratch, config, token = args[:7]
        return hostile(out, float(deadline), sock, state, scratch, config, token, args[7:])
    if cmd == "summary":
        return summary(args[0])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
