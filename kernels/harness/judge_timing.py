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

import math
import statistics
import time

import torch

from . import device as dev
from . import runner_protocol as rp
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


def time_shape(sess, task, slots, shape_name, shape, base, cand_vars: list, base_vars: list, tcfg: dict,
               gpu: bool, rng, device, dtype) -> dict:
    """Returns {"candidate": stats, "baseline": stats|None, "timer": {...}, "checked": n, ...};
    raises CheckFailure (timed-output, timer, or a failure the runner reported)."""
    ph = sess.phases
    n = slots.n
    mix = bool(task.raw.get("timing", {}).get("mix_inputs", True)) if isinstance(task.raw.get("timing"), dict) else True
    min_reps = int(tcfg.get("min_reps", 20))
    max_reps = max(min_reps, int(tcfg.get("max_reps", 200)))
    target = float(tcfg.get("target_noise_pct", 1.0))
    factor = float(tcfg.get("timer_factor", 1.4))
    allow_us = float(tcfg.get("timer_allow_us", 10.0 if gpu else 300.0))
    # On the H200 (2026-12-01, session 3) honest runners read 12-33 % of the loop's fixed cost F
    # above the judge's own no-op calibration (MLA b64_s8192: reported 282 us, the known truth,
    # observed 516 us beyond F = 1578 us): 5 % of F rejected every honest seed. Half of F keeps
    # honest candidates clear with margin; on a GPU the bound then catches only gross lies (more
    # than F/2 per call), and re-timing in a fresh runner before a new best does the rest.
    allow_frac = float(tcfg.get("timer_allow_frac", 0.5 if gpu else 0.25))
    trace = bool(tcfg.get("trace", False))
    # honest batches read 1.0-1.1 (a preempted call lifts one batch, not the median over
    # batches); CPU mode has 3 interpreted calls per batch on a shared CPU, hence the margin
    skew_max = float(tcfg.get("timer_skew_max", 1.25 if gpu else 1.6))
    skews: list[float] = []
    sync = timing._sync if gpu else (lambda: None)
    recipes = [None] * n
    sums = [None] * n

    def freshen():
        with ph("transfers"):
            for j in range(n):
                a, b = rng.sample(range(len(cand_vars)), 2)
                alpha = rng.uniform(0.3, 0.7) if mix else 1.0
                mix_into(slots.tin(j), cand_vars[a], cand_vars[b], alpha)
                recipes[j] = (a, b, alpha)
                sums[j] = _checksum(slots.tin(j))
                slots.poison(j)
            sync()

    def recipe_inputs(j):
        a, b, alpha = recipes[j]
        x = clone_inputs(cand_vars[a])
        mix_into({k: x[k] for k in slots.names}, cand_vars[a], cand_vars[b], alpha)
        return x

    calls = [{"inputs": slots.in_keys(j), "outputs": slots.out_keys(j)} for j in range(n)]
    sess.use(slots)

    def cand_batch(hold, warmup=False):
        freshen()
        t0 = time.perf_counter()
        with ph("timing"):
            rep = sess.r.request(rp.Time(0, calls, hold, flush=not warmup, warmup=warmup, scalars=slots.scalars),
                                 sess.timeout)
        wall = time.perf_counter() - t0
        failed(rep)
        if len(rep.stream_us or []) != n or len(rep.host_us or []) != n or (gpu and len(rep.device_us or []) != n):
            raise CheckFailure("error", f"shape {shape_name}: the runner reported {len(rep.stream_us or [])} timed "
                               f"calls for a batch of {n}", "runner-protocol")
        if rep.integrity:
            raise CheckFailure("rejected", f"rejected [timer] shape {shape_name}: the candidate replaced "
                               f"{', '.join(rep.integrity)}", "timer")
        return rep, wall

    checked = [0]

    def check_batch(pair, extra=0):
        with ph("timed_checks"):
            for j in range(n):
                for name, t in slots.tout(j).items():
                    u = unwritten_count(t)
                    if u:
                        raise CheckFailure("wrong_result", f"shape {shape_name}: timed call {j} of batch {pair} "
                                           f"left {u} of {t.numel()} elements of {name!r} unwritten: the candidate "
                                           f"behaves differently when timed", "timed-output")
                if _checksum(slots.tin(j)) != sums[j]:
                    raise CheckFailure("wrong_result", f"shape {shape_name}: timed call {j} of batch {pair} modified "
                                       f"its inputs", "input-mutated")
            # CPU mode checks every timed call (cheap at smoke shapes); on a GPU 2 per batch in the
            # first two batches, then 1: a candidate that skips a fraction p of its timed calls is
            # caught with probability 1 - (1-p)^checked
            k = n if not gpu else (2 if pair < 2 else 1) + extra
            for j in rng.sample(range(n), min(k, n)):
                x = recipe_inputs(j)
                for name in slots.names:
                    if not _same(slots.tin(j)[name], x[name]):
                        raise CheckFailure("wrong_result", f"shape {shape_name}: timed call {j} of batch {pair} "
                                           f"modified input {name!r}", "input-mutated")
                ref = task.reference(x)
                sync()
                try:
                    judge_outputs(task, slots.tout(j), ref, f"shape {shape_name}: timed call {j} of batch {pair}")
                except CheckFailure as e:
                    raise CheckFailure("wrong_result", f"{e.message}: the output of a TIMED call is wrong (the "
                                       f"candidate behaves differently when timed)", "timed-output") from None
                checked[0] += 1

    # -- the baseline (trusted code, in this process) ---------------------------------------------
    bsets, keep = [], []
    if base is not None:
        bsets = [clone_inputs(v) for v in base_vars]
        bname, bfn_ = base

        def bfn(i):
            keep.append(bfn_(**bsets[i % len(bsets)]))
            if len(keep) > 2:
                keep.pop(0)

    def noop(i):
        return None

    # -- warm-up, holds, calibration ------------------------------------------------------------
    rep, _ = cand_batch(0.0, warmup=True)
    hf, hmin = float(tcfg.get("hold_factor", 1.5)), float(tcfg.get("hold_min_us", 20.0))
    hold_c = _hold_for(rep.host_us[1:] or rep.host_us, hf, hmin) if gpu else 0.0
    hold_b = 0.0
    if base is not None:
        with ph("baseline"):
            wb = timing.run_batch(bfn, max(5, n), 0.0, gpu, flush=False)
            sync()
        hold_b = _hold_for(wb["host_us"][1:], hf, hmin) if gpu else 0.0
    null_us = None
    if gpu:
        with ph("timing"):
            _ramp(float(tcfg.get("ramp_ms", 50)))
            null_us = _null_us()
    pings = []
    for _ in range(5):
        t0 = time.perf_counter()
        r = sess.r.request(rp.Ping(0), 30.0)
        pings.append(time.perf_counter() - t0)
        failed(r)
    ping_s = min(min(pings), 0.002)   # the pipe's round trip; capped: a slow runner gains no slack

    cs, cd, bs, bd = [], [], [], []
    per_batch, fixed, log = [], [], []
    leaked = discarded = 0
    top_clock = 0
    pair = 0
    cpu_pairs = 2
    while True:
        order = ("c", "b") if pair % 2 == 0 else ("b", "c")
        for side in order:
            if side == "b" and base is None:
                continue
            m0 = _clock_state() if gpu else (None, None, None)
            if side == "c":
                rep, wall = cand_batch(hold_c)
                check_batch(pair)
                good_s, good_d = [], []
                for i in range(n):
                    if gpu and rep.host_us[i] > 0.9 * hold_c:
                        leaked += 1
                        continue
                    good_s.append(rep.stream_us[i])
                    if gpu:
                        good_d.append(rep.device_us[i])
                per_batch.append((wall, sum(rep.stream_us) / n))
                skews.append(_skew(rep.stream_us))
                if gpu and len(good_s) < n:
                    hold_c = min(HOLD_CAP_US, 1.5 * max(rep.host_us) + 20.0)
            else:
                with ph("baseline"):
                    r = timing.run_batch(bfn, n, hold_b, gpu, flush=True)
                    sync()
                good_s, good_d = [], []
                for i in range(n):
                    if gpu and r["host_us"][i] > 0.9 * hold_b:
                        leaked += 1
                        continue
                    good_s.append(r["stream_us"][i])
                    if gpu:
                        good_d.append(r["device_us"][i])
                if gpu and len(good_s) < n:
                    hold_b = min(HOLD_CAP_US, 1.5 * max(r["host_us"]) + 20.0)
            m1 = _clock_state() if gpu else (None, None, None)
            bad = dev.reasons((m0[0] or 0) | (m1[0] or 0), bad_only=True)
            clk = min([c for c in (m0[1], m1[1]) if c is not None] or [0])
            if clk:
                top_clock = max(top_clock, clk)
                if clk < 0.85 * top_clock:
                    bad = bad + ["clock_below_85pct_of_run_max"]
            if trace:
                log.append({"pair": pair, "side": side, "sm_mhz": clk or None, "mem_mhz": m1[2],
                            "bad": bad, "median_us": statistics.median(good_s) if good_s else None,
                            "hold_us": round(hold_c if side == "c" else hold_b, 1)})
            if bad:
                discarded += len(good_s)
                continue
            (cs if side == "c" else bs).extend(good_s)
            (cd if side == "c" else bd).extend(good_d)
        # the loop's fixed cost at the candidate's hold, in this process (no candidate here)
        with ph("timing"):
            fixed.append(_calibrate(calls, slots, hold_c, gpu, noop))
        pair += 1
        if not gpu:
            # One call the OS preempted makes a batch of three look like shifted work, and on a
            # busy machine both batches can be hit. An honest candidate's later batches are
            # alike again; a work-shifter's are not. So while the skew is over its limit, time
            # a few more pairs (the same rule then judges them all).
            if pair >= cpu_pairs and (statistics.median_low(skews) <= skew_max or pair >= CPU_MAX_PAIRS):
                break
            continue
        total = pair * n
        if total >= max_reps:
            break
        if len(cs) >= min_reps and (base is None or len(bs) >= min_reps):
            cis = [timing.summarize(cs)["ci_pct"]] + ([timing.summarize(bs)["ci_pct"]] if base is not None else [])
            if all(c is not None and c <= target for c in cis):
                break
    if checked[0] < 3:
        check_batch(pair, extra=3 - checked[0])
    timer = _timer_check(per_batch, fixed, ping_s, n, factor, allow_us, allow_frac, shape_name)
    timer["skew"] = _skew_check(skews, skew_max, shape_name)
    keep.clear()
    return {"candidate": _stats(cs, cd, null_us), "baseline": _stats(bs, bd, null_us) if base is not None else None,
            "timer": timer, "checked": checked[0], "leaked_samples": leaked, "discarded": discarded,
            "hold_us": round(hold_c, 1), "batches": pair, "calls_per_batch": n, "trace": log if trace else None}


def _calibrate(calls, slots, hold, gpu, noop) -> float:
    """Seconds per call of what a runner does for a `time` request besides the candidate: the
    request and reply lines (encoded and parsed), the argument dicts, the loop itself with a
    no-op, the integrity check. Run here, where no candidate is, with the same code; only the
    pipe's round trip is left out (the ping's)."""
    t0 = time.perf_counter()
    req = rp.parse_request(rp.encode(rp.Time(0, calls, hold, flush=True, scalars=slots.scalars)))
    t = slots.arena.t
    args = [({k: t[v] for k, v in c["inputs"].items()}, {k: t[v] for k, v in c["outputs"].items()})
            for c in req.calls]
    r = timing.run_batch(noop, len(args), hold, gpu, flush=True)
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
