"""Timing, judged: the candidate's batches run in its runner, the baseline's in the judge,
alternating (ABAB) on the same GPU; the judge checks what it can see from outside.

Per shape:
- Inputs: a few variants from secret seeds (os.urandom; never the daemon's correctness seeds),
  and before every candidate batch each slot gets NEW contents (a random convex mix of two
  variants: no call sees inputs another call saw, so caches by pointer, object or
  fingerprint miss). Each call of a batch has its own input slot and output buffer, all
  re-poisoned: identity and call count say nothing about which call is checked.
- After each batch: every output buffer fully written, every input slot unchanged (checksum;
  exact for the sampled ones), and randomly chosen calls (>= 3 per shape in all) compared
  with the reference for the contents that call saw (`timed-output`).
- The timer cross-check (`timer`): the judge times each batch's wall clock from outside and
  runs the very same loop with a no-op in its own process (the loop's fixed cost F, at the
  same hold). Honest: wall/n - F ~ the call's device time (the hold hides the host launch).
  A runner that reports a per-call time R with  factor * R < wall/n - F - allowance  is lying
  (or let more than the allowance leak); one whose wall is under half the loop's fixed cost
  skipped the loop. HARNESS.md section 6 gives the bound.
- The work-shift check (`timer`): the figure is the per-call median, but every call of a batch
  can reach every slot of the shared arena (a view or a Triton pointer is enough), so one call
  could do the batch's work and the others nothing: the median would then time almost nothing
  while the batch mean stays honest. The calls of one batch do the same work on the same
  shape, so the median over batches of (batch mean / batch median) of the runner's reported
  times must stay under `timer_skew_max` (lower median; HARNESS.md section 6).
"""
from __future__ import annotations

import contextlib
import math
import os
import statistics
import time
from dataclasses import dataclass

import torch

from . import device as dev
from . import runner_protocol as rp
from . import spawn
from . import timing
from .correctness import CheckFailure, _same, clone_inputs, unwritten_count
from .judge_battery import judge_outputs, mix_into
from .session import failed

GPU_SLOT_BUDGET = 2 * 2**30
CPU_SLOT_BUDGET = 64 * 2**20
MAX_SLOTS = 8
HOLD_CAP_US = 5000.0
# CPU mode times 2 pairs of batches, and up to this many while the work-shift skew is over
# its limit (a disturbed batch, not a shifter, should not decide).
CPU_MAX_PAIRS = 6


def nslots(task, shape, gpu: bool, sample: dict | None = None) -> int:
    """Calls per timed batch = input slots = output buffers, bounded by memory."""
    if sample is None:
        return 2 if not gpu else MAX_SLOTS
    nb = sum(t.numel() * t.element_size() for t in sample.values() if isinstance(t, torch.Tensor))
    for shp, dt in task.output_spec(shape, sample).values():
        nb += math.prod(shp) * torch.empty((), dtype=dt).element_size()
    budget = GPU_SLOT_BUDGET if gpu else CPU_SLOT_BUDGET
    return max(3 if not gpu else 2, min(MAX_SLOTS if gpu else 3, budget // max(nb, 1)))


def _checksum(ts: dict) -> list[float]:
    return [float(t.double().sum().item()) if t.dtype.is_floating_point else float(t.long().sum().item())
            for t in ts.values()]


def _hold_for(host_us: list[float], factor: float = 1.5, floor_us: float = 20.0) -> float:
    """The launch-hiding hold: `factor` x the side's median host time + floor_us (capped). A
    sample whose host time still exceeds it is discarded and the hold raised (leaked_samples)."""
    if not host_us:
        return floor_us
    return min(HOLD_CAP_US, factor * statistics.median(host_us) + floor_us)


def _null_us() -> float:
    null = []
    for _ in range(15):
        timing._flush()
        a, b = timing._Event(enable_timing=True), timing._Event(enable_timing=True)
        timing._record(a)
        timing._sync()
        timing._record(b)
        timing._event_sync(b)
        null.append(timing._elapsed(a, b) * 1e3)
    return statistics.median(null)


def _ramp(ramp_ms: float):
    """An idle GPU sits at a low clock: keep it busy (the judge's own spin kernels) until the SM
    clock is near its maximum and at least ramp_ms have passed (bounded at 0.5 s)."""
    max_clock = dev.max_sm_clock_mhz()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.5:
        c = dev.sm_clock_mhz() if max_clock else None
        if (time.perf_counter() - t0) * 1e3 >= ramp_ms and (c is None or c >= 0.9 * max_clock):
            break
        timing._flush()
        timing.hold_gpu(2000)
        timing._sync()


def _clock_state():
    return dev.throttle_mask(), dev.sm_clock_mhz(), dev.mem_clock_mhz()


@dataclass
class ShapeJob:
    """One timed shape of one evaluation: what `time_shape` needs, in one value."""
    sess: object           # session.Session: the runner, its phases and timeout
    task: object           # taskload.Task
    slots: object          # session.Slots: the shape's shared arena
    name: str
    shape: dict
    base: tuple | None     # (name, fn) of the baseline, or None
    cand_vars: list        # input variants (secret seeds) the candidate's slots are mixed from
    base_vars: list        # the baseline's own variants
    tcfg: dict             # timing settings (evaluate.DEFAULT_TIMING + the request's `timing`)
    gpu: bool
    rng: object            # random.Random seeded from the OS


def time_shape(job: ShapeJob) -> dict:
    """Returns {"candidate": stats, "baseline": stats|None, "timer": {...}, "checked": n, "mode",
    "note", ...}; raises CheckFailure (timed-output, timer, or a failure the runner reported)."""
    return _ShapeTimer(job).run()


class _ShapeTimer:
    def __init__(self, job: ShapeJob):
        self.j = job
        t, gpu = job.tcfg, job.gpu
        self.n = job.slots.n
        mode = (t.get("mode") or "gpu") if gpu else "interpreted"
        if mode not in timing.MODES + ("interpreted",):
            raise CheckFailure("error", f"timing mode {mode!r}: one of {', '.join(timing.MODES)}", "request")
        self.mode = mode
        timing_raw = job.task.raw.get("timing")
        self.mix = bool(timing_raw.get("mix_inputs", True)) if isinstance(timing_raw, dict) else True
        self.min_reps = int(t.get("min_reps", 20))
        self.max_reps = max(self.min_reps, int(t.get("max_reps", 200)))
        self.target = float(t.get("target_noise_pct", 1.0))
        self.factor = float(t.get("timer_factor", 1.4))
        # graph mode: on the H200 an honest runner's batch took 85 us per call more from outside
        # than the judge's no-op graph loop (2026-12-03, the demo seed at m512: 21 us reported,
        # 106 us beyond F = 127 us); the allowance keeps such a runner clear with margin, and
        # beyond it the bound still catches a 1.4x lie (results/gpu/probe-20261203)
        self.allow_us = float(t.get("timer_allow_us", 10.0 if gpu else 300.0))
        self.allow_us_graph = float(t.get("timer_allow_us_graph", 100.0))
        # as called: the runner's audit of each call (its setup and checks, outside the call's
        # events, inside the batch's wall) is not in the judge's no-op loop: the demo seed at m512
        # read 84.6 us per call and 209.7 us beyond F = 93.9 us from outside (H200, 2026-12-03)
        self.allow_us_called = float(t.get("timer_allow_us_called", 250.0))
        # On the H200 (2026-12-01, session 3) honest runners read 12-33 % of the loop's fixed cost F
        # above the judge's own no-op calibration (MLA b64_s8192: reported 282 us, the known truth,
        # observed 516 us beyond F = 1578 us): 5 % of F rejected every honest seed. Half of F keeps
        # honest candidates clear with margin; on a GPU the bound then catches only gross lies (more
        # than F/2 per call), and re-timing in a fresh runner before a new best does the rest.
        self.allow_frac = float(t.get("timer_allow_frac", 0.5 if gpu else 0.25))
        self.trace = bool(t.get("trace", False))
        # honest batches read 1.0-1.1 (a preempted call lifts one batch, not the median over
        # batches); CPU mode has 3 interpreted calls per batch on a shared CPU, hence the margin
        self.skew_max = float(t.get("timer_skew_max", 1.25 if gpu else 1.6))
        self.sync = timing._sync if gpu else (lambda: None)
        self.recipes = [None] * self.n
        self.sums = [None] * self.n
        self.calls = [{"inputs": job.slots.in_keys(j), "outputs": job.slots.out_keys(j)} for j in range(self.n)]
        self.checked = 0
        self.keep = []
        self.bsets = [clone_inputs(v) for v in job.base_vars] if job.base is not None else []
        self.method = "hold"       # the objective's method for both sides: "graph" or "hold"
        self.bgraph = None         # the baseline's GraphBatch
        self.note = None

    # -- the candidate's batches (in its runner) -------------------------------------------------
    def freshen(self):
        j = self.j
        with j.sess.phases("transfers"):
            for k in range(self.n):
                a, b = j.rng.sample(range(len(j.cand_vars)), 2)
                alpha = j.rng.uniform(0.3, 0.7) if self.mix else 1.0
                mix_into(j.slots.tin(k), j.cand_vars[a], j.cand_vars[b], alpha)
                self.recipes[k] = (a, b, alpha)
                self.sums[k] = _checksum(j.slots.tin(k))
                j.slots.poison(k)
            self.sync()

    def recipe_inputs(self, k):
        a, b, alpha = self.recipes[k]
        x = clone_inputs(self.j.cand_vars[a])
        mix_into({name: x[name] for name in self.j.slots.names}, self.j.cand_vars[a], self.j.cand_vars[b], alpha)
        return x

    def cand_batch(self, hold, warmup=False, method="hold"):
        j = self.j
        self.freshen()
        t0 = time.perf_counter()
        with j.sess.phases("timing"):
            rep = j.sess.r.request(rp.Time(0, self.calls, hold, flush=not warmup, warmup=warmup,
                                           scalars=j.slots.scalars, method=method), j.sess.timeout)
        wall = time.perf_counter() - t0
        failed(rep)
        n = self.n
        if len(rep.stream_us or []) != n or len(rep.host_us or []) != n or (j.gpu and len(rep.device_us or []) != n):
            raise CheckFailure("error", f"shape {j.name}: the runner reported {len(rep.stream_us or [])} timed "
                               f"calls for a batch of {n}", "runner-protocol")
        if rep.integrity:
            raise CheckFailure("rejected", f"rejected [timer] shape {j.name}: the candidate replaced "
                               f"{', '.join(rep.integrity)}", "timer")
        return rep, wall

    def check_batch(self, pair, extra=0):
        j = self.j
        with j.sess.phases("timed_checks"):
            for k in range(self.n):
                for name, t in j.slots.tout(k).items():
                    u = unwritten_count(t)
                    if u:
                        raise CheckFailure("wrong_result", f"shape {j.name}: timed call {k} of batch {pair} "
                                           f"left {u} of {t.numel()} elements of {name!r} unwritten: the candidate "
                                           f"behaves differently when timed", "timed-output")
                if _checksum(j.slots.tin(k)) != self.sums[k]:
                    raise CheckFailure("wrong_result", f"shape {j.name}: timed call {k} of batch {pair} modified "
                                       f"its inputs", "input-mutated")
            # CPU mode checks every timed call (cheap at smoke shapes); on a GPU 2 per batch in the
            # first two batches, then 1: a candidate that skips a fraction p of its timed calls is
            # caught with probability 1 - (1-p)^checked
            kk = self.n if not j.gpu else (2 if pair < 2 else 1) + extra
            for k in j.rng.sample(range(self.n), min(kk, self.n)):
                x = self.recipe_inputs(k)
                for name in j.slots.names:
                    if not _same(j.slots.tin(k)[name], x[name]):
                        raise CheckFailure("wrong_result", f"shape {j.name}: timed call {k} of batch {pair} "
                                           f"modified input {name!r}", "input-mutated")
                ref = j.task.reference(x)
                self.sync()
                try:
                    judge_outputs(j.task, j.slots.tout(k), ref, f"shape {j.name}: timed call {k} of batch {pair}")
                except CheckFailure as e:
                    raise CheckFailure("wrong_result", f"{e.message}: the output of a TIMED call is wrong (the "
                                       f"candidate behaves differently when timed)", "timed-output") from None
                self.checked += 1

    # -- the baseline (trusted code, in this process) ----------------------------------------------
    def bfn(self, i):
        self.keep.append(self.j.base[1](**self.bsets[i % len(self.bsets)]))
        if len(self.keep) > 2:
            self.keep.pop(0)

    def base_batch(self, hold, method):
        if method == "graph":
            r = self.bgraph.run(flush=True)
        else:
            r = timing.run_batch(self.bfn, self.n, hold, self.j.gpu, flush=True, sync_each=method != "called")
        self.sync()
        return r

    # -- the whole shape ---------------------------------------------------------------------------
    def setup(self):
        """Warm-up batches, captures, holds; decides the objective's method. Returns (hold_c, hold_b)."""
        j, gpu = self.j, self.j.gpu
        want_graph = gpu and self.mode in timing.MODES
        rep, _ = self.cand_batch(0.0, warmup=True, method="graph" if want_graph else "hold")
        hf, hmin = float(j.tcfg.get("hold_factor", 1.5)), float(j.tcfg.get("hold_min_us", 20.0))
        hold_c = _hold_for(rep.host_us[1:] or rep.host_us, hf, hmin) if gpu else 0.0
        hold_b = 0.0
        if j.base is not None:
            with j.sess.phases("baseline"):
                wb = timing.run_batch(self.bfn, max(5, self.n), 0.0, gpu, flush=False)
                self.sync()
                if want_graph:
                    self.bgraph = timing.capture(self.bfn, self.n)
            hold_b = _hold_for(wb["host_us"][1:], hf, hmin) if gpu else 0.0
        self.cand_captured = want_graph and rep.capture == "ok"
        self.base_captured = j.base is None or isinstance(self.bgraph, timing.GraphBatch)
        if self.mode == "gpu":
            if self.cand_captured and self.base_captured:
                self.method = "graph"
                return 0.0, 0.0
            why = [f"the candidate: {rep.capture}" for _ in [0] if not self.cand_captured]
            why += [f"the baseline: {self.bgraph}" for _ in [0] if not self.base_captured]
            # both sides the same way, so the ratio compares like with like
            self.note = (f"not capturable in a CUDA graph ({'; '.join(why)[:600]}): both sides timed with the "
                         f"launch hidden by a spin, gaps between launches counted")
            return hold_c, hold_b
        if self.mode == "as_called":
            self.method = "called"
        return 0.0, 0.0   # as_called (and CPU mode): each call as a user's loop launches it

    def run(self) -> dict:
        j, gpu, n = self.j, self.j.gpu, self.n
        self.sess = j.sess
        j.sess.use(j.slots)
        hold_c, hold_b = self.setup()
        null_us = None
        if gpu:
            with j.sess.phases("timing"):
                _ramp(float(j.tcfg.get("ramp_ms", 50)))
                null_us = _null_us()
        ping_s = self.ping_s()
        st = {"cs": [], "cd": [], "bs": [], "bd": [], "per_batch": [], "fixed": [], "log": [], "skews": [],
              "leaked": 0, "discarded": 0, "top_clock": 0}
        pair = 0
        with quiet_siblings(j.sess.r, gpu):
            while True:
                for side in (("c", "b") if pair % 2 == 0 else ("b", "c")):
                    if side == "b" and j.base is None:
                        continue
                    if side == "c":
                        hold_c = self.time_cand(pair, hold_c, st)
                    else:
                        hold_b = self.time_base(hold_b, st)
                with j.sess.phases("timing"):
                    st["fixed"].append(_calibrate(self.calls, j.slots, hold_c, gpu, self.method))
                pair += 1
                if self.done(pair, st):
                    break
            beside = self.beside(hold_c, hold_b) if gpu else (None, None)
        if self.checked < 3:
            self.check_batch(pair, extra=3 - self.checked)
        allow_us = {"graph": self.allow_us_graph, "called": self.allow_us_called}.get(self.method, self.allow_us)
        timer = _timer_check(st["per_batch"], st["fixed"], ping_s, n, self.factor, allow_us, self.allow_frac, j.name)
        timer["skew"] = _skew_check(st["skews"], self.skew_max, j.name)
        self.keep.clear()
        if self.bgraph is not None and isinstance(self.bgraph, timing.GraphBatch):
            self.bgraph.close()
        nu = None if self.method == "graph" else null_us
        cand = _stats(st["cs"], st["cd"], nu)
        base = _stats(st["bs"], st["bd"], nu) if j.base is not None else None
        objective = "gpu" if self.mode == "gpu" else self.mode
        for res, other in ((cand, beside[0]), (base, beside[1])):
            if res is None:
                continue
            res["timing"] = objective
            res["gpu_us"] = res["median_us"] if objective == "gpu" else other
            res["as_called_us"] = res["median_us"] if objective == "as_called" else other
        return {"candidate": cand, "baseline": base, "timer": timer, "checked": self.checked,
                "leaked_samples": st["leaked"], "discarded": st["discarded"], "hold_us": round(hold_c, 1),
                "batches": pair, "calls_per_batch": n, "mode": objective, "method": self.method, "note": self.note,
                "trace": st["log"] if self.trace else None}

    def ping_s(self) -> float:
        pings = []
        for _ in range(5):
            t0 = time.perf_counter()
            r = self.j.sess.r.request(rp.Ping(0), 30.0)
            pings.append(time.perf_counter() - t0)
            failed(r)
        return min(min(pings), 0.002)   # the pipe's round trip; capped: a slow runner gains no slack

    def time_cand(self, pair, hold_c, st) -> float:
        gpu, n = self.j.gpu, self.n
        m0 = _clock_state() if gpu else (None, None, None)
        rep, wall = self.cand_batch(hold_c, method=self.method)
        self.check_batch(pair)
        good_s, good_d = [], []
        for i in range(n):
            # a call whose host time outlasted the hold let its launch into the interval
            if gpu and hold_c > 0 and rep.host_us[i] > 0.9 * hold_c:
                st["leaked"] += 1
                continue
            good_s.append(rep.stream_us[i])
            if gpu:
                good_d.append(rep.device_us[i])
        st["per_batch"].append((wall, sum(rep.stream_us) / n))
        st["skews"].append(_skew(rep.stream_us))
        if gpu and hold_c > 0 and len(good_s) < n:
            hold_c = min(HOLD_CAP_US, 1.5 * max(rep.host_us) + 20.0)
        self.keep_side("c", m0, good_s, good_d, hold_c, st)
        return hold_c

    def time_base(self, hold_b, st) -> float:
        gpu, n = self.j.gpu, self.n
        m0 = _clock_state() if gpu else (None, None, None)
        with self.j.sess.phases("baseline"):
            r = self.base_batch(hold_b, self.method)
        good_s, good_d = [], []
        for i in range(n):
            if gpu and hold_b > 0 and r["host_us"][i] > 0.9 * hold_b:
                st["leaked"] += 1
                continue
            good_s.append(r["stream_us"][i])
            if gpu:
                good_d.append(r["device_us"][i])
        if gpu and hold_b > 0 and len(good_s) < n:
            hold_b = min(HOLD_CAP_US, 1.5 * max(r["host_us"]) + 20.0)
        self.keep_side("b", m0, good_s, good_d, hold_b, st)
        return hold_b

    def keep_side(self, side, m0, good_s, good_d, hold, st):
        """Keep a batch's samples unless the GPU throttled or its clock sagged meanwhile."""
        gpu = self.j.gpu
        m1 = _clock_state() if gpu else (None, None, None)
        bad = dev.reasons((m0[0] or 0) | (m1[0] or 0), bad_only=True)
        clk = min([c for c in (m0[1], m1[1]) if c is not None] or [0])
        if clk:
            st["top_clock"] = max(st["top_clock"], clk)
            if clk < 0.85 * st["top_clock"]:
                bad = bad + ["clock_below_85pct_of_run_max"]
        if self.trace:
            st["log"].append({"side": side, "sm_mhz": clk or None, "mem_mhz": m1[2], "bad": bad,
                              "median_us": statistics.median(good_s) if good_s else None, "hold_us": round(hold, 1)})
        if bad:
            st["discarded"] += len(good_s)
            return
        (st["cs"] if side == "c" else st["bs"]).extend(good_s)
        (st["cd"] if side == "c" else st["bd"]).extend(good_d)

    def done(self, pair, st) -> bool:
        if not self.j.gpu:
            # One call the OS preempted makes a batch of three look like shifted work, and on a
            # busy machine both batches can be hit. An honest candidate's later batches are
            # alike again; a work-shifter's are not. So while the skew is over its limit, time
            # a few more pairs (the same rule then judges them all).
            return pair >= 2 and (statistics.median_low(st["skews"]) <= self.skew_max or pair >= CPU_MAX_PAIRS)
        if pair * self.n >= self.max_reps:
            return True
        if len(st["cs"]) >= self.min_reps and (self.j.base is None or len(st["bs"]) >= self.min_reps):
            cis = [timing.summarize(st["cs"])["ci_pct"]]
            if self.j.base is not None:
                cis.append(timing.summarize(st["bs"])["ci_pct"])
            return all(c is not None and c <= self.target for c in cis)
        return False

    def beside(self, hold_c, hold_b):
        """The method the objective did not use, one batch per side: (candidate median, baseline
        median) as called beside GPU time, or GPU time (graphs) beside as called. Its outputs are
        checked like every timed batch's; its times judge nothing."""
        if self.mode == "gpu":
            method, hc = "called", 0.0
        elif self.cand_captured and self.base_captured:
            method, hc = "graph", 0.0
        else:
            return None, None
        rep, _ = self.cand_batch(hc, method=method)
        self.check_batch(99)
        c = statistics.median(rep.stream_us)
        b = None
        if self.j.base is not None:
            with self.j.sess.phases("baseline"):
                b = statistics.median(self.base_batch(0.0, method)["stream_us"])
        return c, b


@contextlib.contextmanager
def quiet_siblings(runner, on: bool = True):
    """The slot's own other work must not disturb its timing: while a shape is timed, every other
    runner of this judge (the prepared ones importing and warming up candidates, the warm spare
    starting, a re-time's own) is stopped (SIGSTOP; spawn.stop_others says why not its group)
    and continued after. Their GPU work (CUDA contexts, warm-up allocations) would share the GPU with
    the timed calls, and their CPU work the host with the judge. KERNELD_TIMING_QUIET=0 (for
    the A/B that shows what it buys) turns it off."""
    if not on or os.environ.get("KERNELD_TIMING_QUIET", "1") == "0":
        yield []
        return
    stopped = spawn.stop_others(runner)
    try:
        yield stopped
    finally:
        spawn.continue_runners(stopped)


_NOOP_GRAPHS: dict = {}   # calls per batch -> a GraphBatch of no-ops (the graph loop's fixed cost)


def _noop(i):
    return None


def _calibrate(calls, slots, hold, gpu, method="hold") -> float:
    """Seconds per call of what a runner does for a `time` request besides the candidate: the
    request and reply lines (encoded and parsed), the argument dicts, the loop itself with a
    no-op (a captured no-op for method "graph"), the integrity check. Run here, where no
    candidate is, with the same code; only the pipe's round trip is left out (the ping's)."""
    t0 = time.perf_counter()
    req = rp.parse_request(rp.encode(rp.Time(0, calls, hold, flush=True, scalars=slots.scalars, method=method)))
    t = slots.arena.t
    args = [({k: t[v] for k, v in c["inputs"].items()}, {k: t[v] for k, v in c["outputs"].items()})
            for c in req.calls]
    if method == "graph":
        g = _NOOP_GRAPHS.get(len(args))
        if g is None:
            t_cap = time.perf_counter()
            g = _NOOP_GRAPHS[len(args)] = timing.GraphBatch(_noop, len(args))
            t0 += time.perf_counter() - t_cap   # captured once per judge, not per batch
        r = g.run(flush=True)
    else:
        r = timing.run_batch(_noop, len(args), hold, gpu, flush=True, sync_each=method != "called")
    timing.integrity_violations(restore=False)
    line = rp.encode(rp.reply(0, True, stream_us=r["stream_us"], device_us=r["device_us"] or None,
                              host_us=r["host_us"]))
    rp.parse_reply(line, 0)
    return (time.perf_counter() - t0) / len(args)


def _stats(stream, device, null_us):
    st = timing.summarize(stream)
    if not device or null_us is None:
        st.update({"stream_median_us": st["median_us"], "device_median_us": None, "outlasted_stream": False})
        return st
    dv = timing.summarize([max(0.0, x - null_us) for x in device])
    outlasted = bool(dv["median_us"] is not None and st["median_us"] is not None
                     and dv["median_us"] > 1.10 * st["median_us"] + 3.0)
    res = dict(timing.summarize(device)) if outlasted else dict(st)
    res.update({"stream_median_us": st["median_us"], "device_median_us": dv["median_us"],
                "outlasted_stream": outlasted})
    return res


def _skew(stream_us: list) -> float:
    """A batch's mean over its median per-call time (every reported call, leaked ones too: a
    call that does the others' work may well outlast the hold)."""
    med = statistics.median(stream_us)
    mean = sum(stream_us) / len(stream_us)
    return mean / med if med > 0 else (math.inf if mean > 0 else 1.0)


def _skew_check(skews: list, skew_max: float, shape_name) -> float:
    """Raises CheckFailure when the calls of the candidate's batches are not alike (module
    docstring: work done in some calls for the others); returns the median skew."""
    # the lower median: with two batches (CPU mode) one disturbed batch cannot reject an honest
    # candidate, and a candidate that shifts work in fewer than half its batches gains nothing
    # (most of its calls still do their own work, so the per-call median is honest)
    sk = statistics.median_low(skews) if skews else 1.0
    if sk > skew_max:
        raise CheckFailure("rejected", f"rejected [timer] shape {shape_name}: the calls of a timed batch are not "
                           f"alike (the batch mean is {sk:.2f}x the median call, limit {skew_max:g}x; every call "
                           f"does the same work on the same shape): some calls do the work of others, and the "
                           f"per-call median would hide it. Do each call's work in that call", "timer")
    return round(sk, 3) if math.isfinite(sk) else None


def _timer_check(per_batch, fixed, ping_s, n, factor, allow_us, allow_frac, shape_name) -> dict:
    """What the runner said vs what the judge saw (module docstring). Raises CheckFailure."""
    f_us = statistics.median(fixed) * 1e6
    walls = [((w - ping_s) / n) * 1e6 for w, _ in per_batch]
    e_us = statistics.median([w - f_us for w in walls])
    r_us = statistics.median([r for _, r in per_batch])
    allow = allow_us + allow_frac * f_us
    out = {"observed_us": round(e_us, 2), "reported_us": round(r_us, 2), "fixed_us": round(f_us, 2),
           "allowance_us": round(allow, 2), "factor": factor}
    if statistics.median(walls) < 0.5 * f_us:
        raise CheckFailure("rejected", f"rejected [timer] shape {shape_name}: the timed batches took "
                           f"{statistics.median(walls):.1f} us per call from outside, less than half the timing "
                           f"loop's own fixed cost ({f_us:.1f} us): the runner did not run the loop it was given",
                           "timer")
    if factor * r_us < e_us - allow:
        raise CheckFailure("rejected", f"rejected [timer] shape {shape_name}: the runner reported {r_us:.1f} us per "
                           f"call, but from outside each call took {e_us:.1f} us beyond the loop's fixed cost "
                           f"({f_us:.1f} us; allowance {allow:.1f} us): its timer does not tell the truth", "timer")
    return out
