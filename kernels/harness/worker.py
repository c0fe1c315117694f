#!/usr/bin/env python3
"""The JUDGE (server half of docs/HARNESS.md section 3; PROCESS_MODEL.md).

    python3 -u kernels/harness/worker.py      # from any directory

One JSON object per line on stdin/stdout. stdout carries protocol lines only: the real fd 1 is
duplicated for the protocol and fd 1 is pointed at stderr. This process never imports
candidate code: each evaluation gets a fresh one-shot runner (runner.py, started through
KERNELD_RUNNER_LAUNCHER when set), and a spare is kept warm. A runner that crashes, hangs or
breaks the protocol is killed with its process group and the evaluation answered (`crashed`,
`timed_out`, `error [runner-protocol]`); the judge goes on. Only a CUDA error in the judge's
own work (a baseline) ends it with status 3.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import traceback

EXIT_FATAL_CUDA = 3
MAX_LINE = 4 * 2**20

# SIGINT from the daemon means "abandon the request in flight" (a pause or cancel): the judge
# kills the runner, answers that request with `aborted` and stays usable. Between requests the
# signal is ignored. The judge itself only ever waits on a runner's pipe or runs trusted code,
# so the signal is handled promptly.
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


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    kernels_dir = os.path.dirname(here)
    # run as a script, sys.path[0] is this directory: its modules must not shadow the stdlib
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    if kernels_dir not in sys.path:
        sys.path.insert(0, kernels_dir)
    from harness import proc
    # First, before the slow imports: a daemon that dies while we start must not leave us behind.
    proc._watch_for_orphaning(sys.stdin.fileno() if sys.stdin is not None else None)
    proc._prefer_oom_kill()
    nondumpable = proc.set_nondumpable()
    proto = proc._protocol_stream()
    # never let a judge (or its runners) talk to systemd
    os.environ.pop("NOTIFY_SOCKET", None)
    limits = proc._limits()

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

    # Before torch is imported: the baseline's compile caches persist across judges (issue #12).
    from harness import judge_cache
    judge_cache.apply()

    import platform

    import torch
    import triton

    from harness import device as dev
    from harness import evaluate as ev
    from harness.correctness import Abandon, FatalCudaError

    signal.signal(signal.SIGINT, _on_sigint)
    from harness import strays
    strays.become_subreaper()  # what a candidate forks out of its runner's group dies with it
    cpu = dev.cpu_mode()
    if not cpu:
        torch.cuda.init()
        torch.empty(1, device="cuda")  # create the context now, not in the first evaluation
    if not cpu:
        # the first evaluation's runner starts while we wait for it. Not in CPU mode (tests, CI on
        # 2 cores): an idle judge there would only double the start-up load; the spare is started
        # ahead from the first evaluation on.
        ev.POOL.prestart()
    send({"event": "ready", "pid": os.getpid(), "mode": "cpu" if cpu else "gpu", "torch": torch.__version__,
          "triton": triton.__version__, "python": platform.python_version(), "device": dev.identity(),
          "cuda": None if cpu else torch.version.cuda, "driver": None if cpu else dev.driver_version(),
          "limits": limits, "role": "judge", "nondumpable": nondumpable,
          "runner_launcher": bool(os.environ.get("KERNELD_RUNNER_LAUNCHER"))})

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
                ev.AHEAD.discard()
                ev.POOL.shutdown()
                return 0
            if op == "ping":
                send({"id": rid, "ok": True, "pid": os.getpid()})
            elif op == "describe":
                with _Busy():
                    reply = {"id": rid, "ok": True, **ev.describe(req)}
                send(reply)
            elif op == "prepare":
                with _Busy():
                    reply = {"id": rid, "ok": True, **ev.prepare(req)}
                send(reply)
            elif op in ("evaluate", "retime"):
                if op == "retime":
                    req = dict(req, retime=True)
                with _Busy():
                    reply = {"id": rid, "ok": True, "result": ev.evaluate(req)}
                send(reply)
            else:
                send({"id": rid, "ok": False,
                      "error": f"unknown op {op!r} (describe | prepare | evaluate | retime | ping | shutdown)"})
        except Abandon:
            # the runner is already killed (the evaluation's finally); let our own work finish
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
            # a harness or task problem in the judge; if its CUDA context is poisoned we must not go on
            if not cpu and dev.is_fatal_cuda_error(e):
                _fatal(send, rid, f"{type(e).__name__}: {e}")
                return EXIT_FATAL_CUDA
            traceback.print_exc()
            send({"id": rid, "ok": False, "error": f"internal error: {type(e).__name__}: {e}"})
        if not cpu and not _cuda_healthy():
            print("judge: CUDA context unhealthy after request; exiting", file=sys.stderr)
            return EXIT_FATAL_CUDA
    ev.AHEAD.discard()
    ev.POOL.shutdown()
    return 0


def _fatal(send, rid, message):
    print(f"judge: fatal CUDA error in the judge's own work, exiting: {message}", file=sys.stderr)
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
