"""A worker never outlives its daemon: it exits (with its process group) when its stdin
closes or its parent dies, even while a candidate spins forever in Python."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

from hpaths import DEMO, WORKER

from test_worker_protocol import HERE, Worker

HANG = str(HERE / "faults" / "python_hang.py")
HANG_REQUEST = {"id": 1, "op": "evaluate", "task_dir": str(DEMO), "candidate": HANG, "config": {"X": 1},
                "shapes": ["m512"], "baseline": "torch_fp32", "seeds": [1]}


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (init may be slow to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def cpu_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0
    return int(fields[11]) + int(fields[12])  # utime + stime


def descendants(pid: int) -> set[int]:
    """Every live process below pid (the judge's runners and whatever they started)."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    out, todo = set(), [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def wait_spinning(pid: int, limit_s: float = 120.0) -> set[int]:
    """Waits until the candidate's endless loop is surely running: one of the judge's runners
    has burnt 1.5 s of CPU since the request (setting up takes a fraction of that), however
    loaded the machine is. Returns the judge's descendants at that moment."""
    t0 = time.time()
    start: dict[int, int] = {}
    while time.time() - t0 < limit_s:
        time.sleep(0.2)
        kids = descendants(pid)
        for k in kids:
            start.setdefault(k, cpu_ticks(k))
            if cpu_ticks(k) - start[k] >= 150:
                return kids
    raise AssertionError("the hanging candidate never started")


def gone_within(pid: int, limit_s: float) -> float:
    t0 = time.time()
    while time.time() - t0 < limit_s:
        if not alive(pid):
            return time.time() - t0
        time.sleep(0.05)
    raise AssertionError(f"worker {pid} still running {limit_s} s later")


def test_stdin_eof_ends_a_worker_stuck_in_a_python_loop():
    w = Worker(cwd="/tmp")
    try:
        w.send_raw((json.dumps(HANG_REQUEST) + "\n").encode())
        runners = wait_spinning(w.p.pid)
        assert w.p.poll() is None
        w.p.stdin.close()
        t0 = time.time()
        code = w.p.wait(timeout=2.0)
        print(f"exited {time.time() - t0:.2f} s after stdin closed, status {code}")
        # it killed its own group, itself included, and its runners' groups
        assert code == -signal.SIGKILL
        for r in runners:
            gone_within(r, 2.0)
    finally:
        if w.p.poll() is None:
            w.p.kill()
            w.p.wait()


def test_parent_death_ends_the_worker_while_stdin_stays_open():
    """The parent dies but the pipe to the worker's stdin is still open elsewhere (so only
    the re-parenting tells): the worker must go anyway."""
    read_end, write_end = os.pipe()
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    # A stand-in daemon: starts the worker as kerneld does (own process group, stdin a pipe)
    # and says its pid; then sleeps until killed.
    parent_src = textwrap.dedent(f"""
        import subprocess, sys, time
        w = subprocess.Popen([sys.executable, "-u", {str(WORKER)!r}], stdin={read_end},
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, process_group=0)
        sys.stdout.write(w.stdout.readline().decode())
        sys.stdout.flush()
        time.sleep(3600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", parent_src], stdout=subprocess.PIPE, env=env,
                              pass_fds=(read_end,), cwd="/tmp")
    os.close(read_end)
    worker_pid = None
    try:
        ready = json.loads(parent.stdout.readline())
        assert ready["event"] == "ready", ready
        worker_pid = ready["pid"]
        os.write(write_end, (json.dumps(HANG_REQUEST) + "\n").encode())
        runners = wait_spinning(worker_pid)
        parent.kill()
        parent.wait()
        took = gone_within(worker_pid, 2.0)
        for r in runners:
            gone_within(r, 2.0)
        print(f"worker gone {took:.2f} s after its parent was killed")
    finally:
        os.close(write_end)
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if worker_pid is not None and alive(worker_pid):
            os.killpg(worker_pid, signal.SIGKILL)
