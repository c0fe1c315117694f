"""Issue #24: cuInit under one `--proc-write` variant of kerneld-sandbox, then threads made
after the Landlock rule: does each name itself (/proc/self/task/<tid>/comm, as CUDA names
its threads)? With --drop, a second round after a line on stdin (the caller drops the
kernel's dentry cache first: procfs makes new inodes, which a rule without the descriptor
kerneld-sandbox keeps open would not cover). With --cuda, torch then uses the GPU from a
thread made last. Prints `cuInit N`, `thread ROUND k=v ...` and `cuda ok`."""
import ctypes
import sys
import threading


def attempt(path, what=b"x"):
    try:
        with open(path, "wb") as f:
            f.write(what)
        return "ok"
    except OSError as e:
        return "denied-%d" % e.errno


def one_round(tag):
    got = {}

    def body():
        got["own"] = attempt("/proc/self/task/%d/comm" % threading.get_native_id())
    t = threading.Thread(target=body)
    t.start()
    t.join()
    got["pid-comm"] = attempt("/proc/self/comm")
    got["oom"] = attempt("/proc/self/oom_score_adj", b"0")
    got["init"] = attempt("/proc/1/comm")
    print("thread %s %s" % (tag, " ".join("%s=%s" % kv for kv in got.items())), flush=True)


try:
    rc = ctypes.CDLL("libcuda.so.1").cuInit(0)
    print("cuInit", rc, flush=True)
except OSError as e:  # no driver (a dry run on a CPU machine): the threads still tell
    rc = None
    print("cuInit none:", e, flush=True)
one_round("after-rule")
if "--drop" in sys.argv:
    print("ready", flush=True)
    sys.stdin.readline()
    one_round("after-drop")
if "--cuda" in sys.argv and rc == 0:
    out = []

    def use():
        import torch
        out.append(float(torch.ones(1000, device="cuda").sum()))
    t = threading.Thread(target=use)
    t.start()
    t.join()
    if out == [1000.0]:
        print("cuda ok", flush=True)
sys.exit(0 if rc in (0, None) else 3)
