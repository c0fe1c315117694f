#!/usr/bin/env python3
"""The persistent evaluation worker (server half of docs/HARNESS.md section 3).

    python3 -u kernels/harness/worker.py      # from any directory

One JSON object per line on stdin/stdout. stdout carries protocol lines only: the real fd 1 is
duplicated for the protocol and fd 1 is pointed at stderr, so prints from candidates, Triton
and CUDA libraries land in the log. A candidate that raises is a result class, never a worker
death; a CUDA error that poisons the context is answered (class "crashed", "fatal": true) and
the worker exits with status 3 so the daemon starts a fresh one.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import traceback

EXIT_FATAL_CUDA = 3
EXIT_ORPHANED = 4

# SIGINT from the daemon means "abandon the request in flight" (a pause or cancel): the
# worker answers that request with `aborted` and stays usable, which spares the next
# evaluation a worker restart. Between requests the signal is ignored. A kernel that never
# returns keeps Python from handling it; the daemon then kills the process group.
_busy = False


def _on_sigint(signum, frame):
    if _busy:
        from harness.correctness import Abandon
        raise Abandon()


class _Busy:
    def __enter__(self):
        global _busy
        _busy = True

    def __exit__(self, *exc):
        global _busy
        _busy = False
        return False


MAX_LINE = 4 * 2**20
ORPHAN_POLL_S = 0.2


def _exit_with_group(reason: str) -> None:
    """Exit now, taking along whatever this worker started (a compiler, a forked candidate)."""
    try:
        print(f"worker: {reason}; exiting", file=sys.stderr, flush=True)
    except Exception:
        pass  # stderr is the dead daemon's pipe too
    pgid = os.getpgrp()
    # Only when we lead our own group (the daemon starts us so): otherwise the group is
    # whoever ran us by hand, and it is not ours to kill. SIGKILL reaches us as well.
    if pgid == os.getpid():
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(EXIT_ORPHANED)


def _watch_for_orphaning(stdin_fd: int | None) -> None:
    """Exit when the daemon is gone: the write end of our stdin closed (EOF), or we were
    re-parented (the daemon died; its children go to init or a subreaper).

    A daemon thread, so it runs while the main thread is stuck in a candidate: a pure-Python
    endless loop hands the GIL over every switch interval (5 ms), and CUDA synchronisation
    releases it. PR_SET_PDEATHSIG is no substitute: it fires when the *thread* that forked
    us exits, and the daemon's runtime retires its blocking threads. (A C extension that
    spins holding the GIL starves this thread too; only the daemon's kill helps then.)
    """
    import select
    import threading
    import time

    parent = os.getppid()
    poller = select.poll()
    if stdin_fd is not None:
        # Event mask 0: report only hang-up and errors, not data waiting for the main thread.
        poller.register(stdin_fd, 0)
    gone = select.POLLHUP | select.POLLERR | select.POLLNVAL

    def stdin_hung_up() -> bool:
        if stdin_fd is None:
            time.sleep(ORPHAN_POLL_S)
            return False
        return any(ev & gone for _, ev in poller.poll(ORPHAN_POLL_S * 1000))

    def watch():
        while True:
            if stdin_hung_up():
                _exit_with_group("stdin closed (the daemon is gone or let go of this worker)")
            if os.getppid() != parent:
                _exit_with_group(f"parent process {parent} is gone")

    threading.Thread(target=watch, name="orphan-watch", daemon=True).start()


def _prefer_oom_kill() -> None:
    """Under memory pressure the kernel should take a worker (a crashed evaluation, a fresh
    worker next) rather than the daemon. Raising one's own score needs no privilege."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("500")
    except OSError:
        pass


def _protocol_stream():
    """Keep the real stdout for protocol lines; everything else written to fd 1 goes to stderr."""
    sys.stdout.flush()
    proto_fd = os.dup(1)
    os.dup2(2, 1)
    proto = os.fdopen(proto_fd, "w", buffering=1, encoding="utf-8", newline="\n")
    sys.stdout = sys.stderr
    return proto


def _limits():
    """Resource limits from env (KERNELD_WORKER_MAX_FILES, _MAX_PROCS, _MAX_AS_MB); AS only in CPU mode."""
    try:
        import resource
    except ImportError:
        return {}
    applied = {}

    def setlim(res, env, default, scale=1):
        v = os.environ.get(env, default)
        if v in (None, "", "0", "unlimited"):
            return
        soft, hard = resource.getrlimit(res)
        want = int(v) * scale
        if hard != resource.RLIM_INFINITY:
            want = min(want, hard)
        try:
            resource.setrlimit(res, (want, hard))
            applied[env] = want
        except (ValueError, OSError):
            pass

    setlim(resource.RLIMIT_NOFILE, "KERNELD_WORKER_MAX_FILES", "4096")
    setlim(resource.RLIMIT_NPROC, "KERNELD_WORKER_MAX_PROCS", None)
    if os.environ.get("TRITON_INTERPRET") == "1" or os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        setlim(resource.RLIMIT_AS, "KERNELD_WORKER_MAX_AS_MB", None, 2**20)
    setlim(resource.RLIMIT_CORE, "KERNELD_WORKER_MAX_CORE", "0")
    return applied


def main() -> int:
    # First, before the slow imports: a daemon that dies while we start must not leave us behind.
    _watch_for_orphaning(sys.stdin.fileno() if sys.stdin is not None else None)
    _prefer_oom_kill()
    proto = _protocol_stream()
    here = os.path.dirname(os.path.abspath(__file__))
    kernels_dir = os.path.dirname(here)
    # run as a script, sys.path[0] is this directory: its modules must not shadow the stdlib
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    if kernels_dir not in sys.path:
        sys.path.insert(0, kernels_dir)
    # never let a worker talk to systemd
    os.environ.pop("NOTIFY_SOCKET", None)
    limits = _limits()

    def clean(x):
        # JSON has no NaN/Infinity: a non-finite figure is "not measured"
        if isinstance(x, float):
            return x if x == x and x not in (float("inf"), float("-inf")) else None
        if isinstance(x, dict):
            return {str(k): clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        return x

    def send(obj):
        line = json.dumps(clean(obj), allow_nan=False, default=str)
        proto.write(line + "\n")
        proto.flush()

    import platform

    import torch
    import triton

    from harness import device as dev
    from harness import evaluate as ev
    from harness.correctness import Abandon, FatalCudaError

    signal.signal(signal.SIGINT, _on_sigint)
    cpu = dev.cpu_mode()
    if not cpu:
        torch.cuda.init()
        torch.empty(1, device="cuda")  # create the context now, not in the first evaluation
    send({"event": "ready", "pid": os.getpid(), "mode": "cpu" if cpu else "gpu", "torch": torch.__version__,
          "triton": triton.__version__, "python": platform.python_version(), "device": dev.identity(),
          "limits": limits})

    for raw in sys.stdin.buffer:
        if len(raw) > MAX_LINE:
            send({"id": None, "ok": False, "error": f"request line longer than {MAX_LINE} bytes"})
            continue
        line = raw.decode("utf-8", errors="replace").strip()
        if not line:
            continue
        rid = None
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise ValueError("a request must be a JSON object")
            rid = req.get("id")
            op = req.get("op")
            if op == "shutdown":
                send({"id": rid, "ok": True})
                return 0
            if op == "ping":
                send({"id": rid, "ok": True, "pid": os.getpid()})
            elif op == "describe":
                with _Busy():
                    reply = {"id": rid, "ok": True, **ev.describe(req)}
                send(reply)
            elif op == "evaluate":
                with _Busy():
                    reply = {"id": rid, "ok": True, "result": ev.evaluate(req)}
                send(reply)
            else:
                send({"id": rid, "ok": False, "error": f"unknown op {op!r} (describe | evaluate | shutdown)"})
        except Abandon:
            # Let whatever was launched finish, so the next request starts on an idle GPU.
            if not cpu:
                torch.cuda.synchronize()
            send({"id": rid, "ok": False, "aborted": True, "error": "request abandoned at the daemon's request"})
            continue
        except FatalCudaError as e:
            _fatal(send, rid, str(e))
            return EXIT_FATAL_CUDA
        except ev.RequestError as e:
            send({"id": rid, "ok": False, "error": str(e)})
        except (json.JSONDecodeError, ValueError, TypeError, KeyError) as e:
            send({"id": rid, "ok": False, "error": f"bad request: {type(e).__name__}: {e}"})
        except Exception as e:
            # anything else: a harness or task problem; if CUDA is poisoned we must not go on
            if not cpu and dev.is_fatal_cuda_error(e):
                _fatal(send, rid, f"{type(e).__name__}: {e}")
                return EXIT_FATAL_CUDA
            traceback.print_exc()
            send({"id": rid, "ok": False, "error": f"internal error: {type(e).__name__}: {e}"})
        if not cpu and not _cuda_healthy():
            print("worker: CUDA context unhealthy after request; exiting", file=sys.stderr)
            return EXIT_FATAL_CUDA
    return 0


def _fatal(send, rid, message):
    print(f"worker: fatal CUDA error, exiting: {message}", file=sys.stderr)
    try:
        send({"id": rid, "ok": True, "fatal": True, "result": {
            "class": "crashed", "message": f"CUDA context poisoned: {message[:2000]}", "correct": False,
            "interpreted": False, "speedup": None, "spread_pct": None, "shapes": [], "checks": [],
            "profile": None, "device": None}})
    except Exception:
        pass


def _cuda_healthy() -> bool:
    import torch
    try:
        torch.cuda.synchronize()
        return True
    except Exception:
        return False


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    # os._exit: skip interpreter teardown (CUDA/Triton atexit handlers can hang in a bad context)
    os._exit(code)
