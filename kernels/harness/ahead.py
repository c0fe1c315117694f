"""Compile-ahead (issue #12): the next candidate's runner is started and its candidate checked and
imported while the GPU times the current one (docs/HARNESS.md section 3, `prepare`).

The daemon sends `prepare` (task_dir, candidate, config) just before the `evaluate` of the
candidate before it. The judge answers at once and, in a thread of its own, takes the warm spare
runner (or starts one), waits for it and sends it the candidate's `load` (import, SPACE/DEFAULT,
the flag and integrity checks). The `evaluate` that names the same task, source and config then
gets that runner with its load reply instead of a spare; anything else discards it.

Isolation is unchanged: a prepared runner is an ordinary fresh runner (own sandbox, own scratch,
one candidate, never reused); it has only run the candidate's import earlier. The judge never
imports the candidate. At most one runner is prepared per judge.

What is not taken ahead: Triton compiles on a kernel's first call with real arguments, which
needs the GPU (and inputs only the judge owns), so `compile` stays on the critical path; what
moves off it is the runner's start (when the spare was not ready), the static checks and the
import. A candidate's import-time code runs while another candidate is timed: it can at most
disturb that timing (candidate and baseline alternate, so both sides are hit, and a would-be
best is re-timed in a fresh runner, with no prepare in flight, before it counts).
"""
from __future__ import annotations

import hashlib
import json
import threading
import time

from . import runner_protocol as rp
from .spawn import Pool, Runner, RunnerDied

LOAD_TIMEOUT_S = 600.0


def key(task_dir: str, src: str, config) -> str:
    """What an `evaluate` must match to get the prepared runner."""
    cfg = json.dumps(config or {}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(f"{task_dir}\0{cfg}\0{src}".encode()).hexdigest()


class Prepared:
    """One runner loaded ahead in a thread: `wait()` gives (runner, load reply | RunnerDied, seconds)."""

    def __init__(self, k: str, runner: Runner, load: rp.Load):
        self.key, self.runner = k, runner
        self.reply: rp.Reply | None = None
        self.error: RunnerDied | None = None
        self.start_s = 0.0     # the runner's start this evaluation did not wait for
        self.import_s = 0.0    # the load (import) done ahead
        self._t = threading.Thread(target=self._run, args=(load,), name="prepare", daemon=True)
        self._t.start()

    def _run(self, load: rp.Load):
        try:
            t0 = time.perf_counter()
            self.runner.wait_ready()
            self.start_s = time.perf_counter() - t0
            t1 = time.perf_counter()
            self.reply = self.runner.request(load, LOAD_TIMEOUT_S)
            self.import_s = time.perf_counter() - t1
        except RunnerDied as e:
            self.error = e
        except Exception as e:  # a harness bug must not kill the judge's thread silently
            self.error = RunnerDied("crashed", f"preparing the runner failed: {type(e).__name__}: {e}")

    def wait(self):
        self._t.join()
        return self.runner, (self.error or self.reply)

    def discard(self):
        # kill first: the thread waits on the runner's pipe, which the kill closes
        self.runner.kill()
        self._t.join(timeout=15)


class Ahead:
    """The judge's prepared runners, oldest first: at most MAX_PREPARED.

    The daemon prepares candidate N+1 just before it sends N's `evaluate`, so when N's
    `evaluate` arrives, the runner for N (prepared during N-1) and the one for N+1 are both
    held; N's is taken, N+1's stays. An `evaluate` takes only its own; a runner prepared for
    a candidate never evaluated (another goal got the slot) is dropped once two newer ones
    are prepared, or when the judge stops.
    """

    MAX_PREPARED = 2

    def __init__(self):
        self.held: list[Prepared] = []

    def prepare(self, k: str, load: rp.Load, pool: Pool) -> None:
        for p in [p for p in self.held if p.key == k]:
            self.held.remove(p)
            p.discard()
        while len(self.held) >= self.MAX_PREPARED:
            self.held.pop(0).discard()
        # The warm spare becomes this candidate's runner; the next spare is started once a
        # prepared runner is taken by its evaluation (runners starting at once slow each other).
        self.held.append(Prepared(k, pool.take(), load))

    def take(self, k: str):
        """The prepared (runner, reply | RunnerDied, start_s, import_s) for key `k`, or None."""
        p = next((p for p in self.held if p.key == k), None)
        if p is None:
            return None
        self.held.remove(p)
        try:
            runner, reply = p.wait()
        except BaseException:  # SIGINT (an abandoned request) while waiting: nothing may leak
            p.discard()
            raise
        return runner, reply, p.start_s, p.import_s

    def discard(self):
        while self.held:
            self.held.pop().discard()
