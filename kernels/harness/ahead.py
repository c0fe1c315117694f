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

Compile ahead: once imported, a prepared runner also gets a `warm` request (warmup.py): the
candidate's entry is called on tensors of every shape its evaluation uses, with each Triton
launch turned into a compile, so the kernels are compiled on a CPU core while the GPU times
another candidate; the evaluation's first calls then launch at once. A candidate's import- and
warm-up-time code runs while another candidate is timed: it can at most disturb that timing
(candidate and baseline alternate, so both sides are hit, and a would-be best is re-timed in a
fresh runner before it counts, once every prepared runner is quiet: `settle`). A runner whose warm-up crashed or
timed out is dropped: its evaluation starts a fresh runner as if nothing had been prepared.

How many are held: the daemon keeps `depth` candidates prepared per slot (kerneld.toml
`compile_ahead_depth`) and says so in each `prepare`; the judge holds one more than that (the
one being evaluated) and drops the oldest beyond it.
"""
from __future__ import annotations

import hashlib
import json
import threading
import time

from . import runner_protocol as rp
from . import warmup
from .spawn import Pool, Runner, RunnerDied

LOAD_TIMEOUT_S = 600.0
SETTLE_TIMEOUT_S = 60.0   # a re-time waits at most this long for prepared runners to go quiet
MAX_DEPTH = 16          # a bound on what a daemon may ask to hold: each is a process with a CUDA context


def key(task_dir: str, src: str, config) -> str:
    """What an `evaluate` must match to get the prepared runner."""
    cfg = json.dumps(config or {}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(f"{task_dir}\0{cfg}\0{src}".encode()).hexdigest()


class Prepared:
    """One runner loaded ahead in a thread: `wait()` gives (runner, load reply | RunnerDied, seconds)."""

    def __init__(self, k: str, runner: Runner, load: rp.Load, warm=None):
        self.key, self.runner = k, runner
        self.reply: rp.Reply | None = None
        self.error: RunnerDied | None = None
        self.unusable = False  # the warm-up broke the runner: the evaluation takes a fresh one
        self.start_s = 0.0     # the runner's start this evaluation did not wait for
        self.import_s = 0.0    # the load (import) done ahead
        self.warm_s = 0.0      # the compile-only warm-up done ahead
        self.warm_note: str | None = None
        self._t = threading.Thread(target=self._run, args=(load, warm), name="prepare", daemon=True)
        self._t.start()

    def _run(self, load: rp.Load, warm):
        try:
            t0 = time.perf_counter()
            self.runner.wait_ready()
            self.start_s = time.perf_counter() - t0
            t1 = time.perf_counter()
            self.reply = self.runner.request(load, LOAD_TIMEOUT_S)
            self.import_s = time.perf_counter() - t1
        except RunnerDied as e:
            self.error = e
            return
        except Exception as e:  # a harness bug must not kill the judge's thread silently
            self.error = RunnerDied("crashed", f"preparing the runner failed: {type(e).__name__}: {e}")
            return
        if warm is None or self.reply.failure is not None:
            return
        t2 = time.perf_counter()
        try:
            calls = warm()   # the judge's specs (warmup.warm_calls), built here: off the critical path
        except Exception as e:  # the task's make_inputs: the runner is fine, only not warmed
            self.warm_note = f"no warm-up: the task's inputs: {type(e).__name__}: {str(e)[:300]}"
            return
        if not calls:
            return
        try:
            rep = self.runner.request(rp.Warm(0, calls), warmup.WARM_TIMEOUT_S)
        except RunnerDied as e:
            self.unusable, self.warm_note = True, f"warm-up: {e.kind}: {e.message[:300]}"
            return
        except Exception as e:
            self.unusable, self.warm_note = True, f"warm-up failed: {type(e).__name__}: {str(e)[:300]}"
            return
        finally:
            self.warm_s = time.perf_counter() - t2
        if rep.failure is not None:   # rejected: a flag or timer changed while warming up
            self.reply = rep
        else:
            self.warm_note = rep.error

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

    MAX_PREPARED = 2   # with depth 1 (the daemon's default before `ahead` was sent)

    def __init__(self):
        self.held: list[Prepared] = []

    def prepare(self, k: str, load: rp.Load, pool: Pool, depth: int = 1, warm=None) -> None:
        for p in [p for p in self.held if p.key == k]:
            self.held.remove(p)
            p.discard()
        cap = max(self.MAX_PREPARED, min(int(depth), MAX_DEPTH) + 1)
        while len(self.held) >= cap:
            self.held.pop(0).discard()
        # The warm spare becomes this candidate's runner; the next spare is started once a
        # prepared runner is taken by its evaluation (runners starting at once slow each other).
        self.held.append(Prepared(k, pool.take(), load, warm))

    def take(self, k: str):
        """The prepared (runner, reply | RunnerDied, start_s, import_s + warm_s, warm note) for
        key `k`, or None (none prepared, or its warm-up broke it: then it is killed here)."""
        p = next((p for p in self.held if p.key == k), None)
        if p is None:
            return None
        self.held.remove(p)
        return self.finish(p)

    @staticmethod
    def finish(p: "Prepared"):
        """`take`'s answer for a runner prepared here or by the caller (a re-time's own)."""
        try:
            runner, reply = p.wait()
        except BaseException:  # SIGINT (an abandoned request) while waiting: nothing may leak
            p.discard()
            raise
        if p.unusable:
            p.discard()
            return None
        return runner, reply, p.start_s, p.import_s + p.warm_s, p.warm_note

    def settle(self, timeout_s: float = SETTLE_TIMEOUT_S) -> float:
        """Wait until no prepared runner is still starting, importing or warming up (a re-time
        is measured with no candidate code running beside it); one still busy after the
        timeout is dropped. Returns the seconds waited."""
        t0 = time.perf_counter()
        for p in list(self.held):
            p._t.join(max(0.0, timeout_s - (time.perf_counter() - t0)))
            if p._t.is_alive():
                self.held.remove(p)
                p.discard()
        return time.perf_counter() - t0

    def discard(self):
        while self.held:
            self.held.pop().discard()
