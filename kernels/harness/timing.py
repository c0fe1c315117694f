"""Timing: CUDA events with an L2 flush per call, ABAB interleaving, noise-targeted median.

Per sample (GPU): refresh the input buffers in place from one of a few pre-generated variants
(new contents, same pointers: caches keyed by pointer go stale), re-poison the outputs, write a
256 MB buffer (evicts the 60 MB L2), spin the GPU for 1.5x the side's measured host launch time
(torch.cuda._sleep, like nvbench's blocking kernel: the call is fully enqueued before the start
event is reached, so host launch cost is not timed), then

    start.record(); fn(); end_stream.record(); torch.cuda.synchronize(); end_device.record()

`end_stream - start` is the usual event time. `end_device - start` minus the same figure for a
no-op call is the time until the WHOLE DEVICE was idle: work left on a side stream or a thread
shows up there. When it exceeds the stream time by more than 10 % + 3 us, it is the reported
time (and `outlasted_stream` is set). Samples taken while NVML reports thermal/power throttling
are discarded. Candidate and baseline alternate AB BA AB ... in the same process; sampling stops
once the 95 % confidence half-width of each median (1.57 IQR / sqrt(n)) is below the target
noise, or at max_reps. CPU mode: perf_counter, a few reps, `interpreted: true`.

References to the timers are taken when this module is imported, before any candidate is.
"""
from __future__ import annotations

import gc
import math
import statistics
import time

import torch

from . import device as dev

_perf = time.perf_counter
_Event = torch.cuda.Event
_elapsed = torch.cuda.Event.elapsed_time
_record = torch.cuda.Event.record
_event_sync = torch.cuda.Event.synchronize
_sync = torch.cuda.synchronize
# a kernel that spins for N clock cycles: holds the GPU busy while the host launches the call
_gpu_sleep = getattr(torch.cuda, "_sleep", None)
_CUDAGraph = torch.cuda.CUDAGraph
_Stream = torch.cuda.Stream
_stream_ctx = torch.cuda.stream
_current_stream = torch.cuda.current_stream

FLUSH_BYTES = 256 * 2**20
_flush_buf = None


def integrity_snapshot() -> dict:
    """Identity of every function the timer and checker rely on; compared after candidate runs."""
    return {"time.perf_counter": time.perf_counter, "torch.cuda.Event": torch.cuda.Event,
            "Event.elapsed_time": torch.cuda.Event.elapsed_time, "Event.record": torch.cuda.Event.record,
            "Event.synchronize": torch.cuda.Event.synchronize, "torch.cuda.synchronize": torch.cuda.synchronize,
            "torch.allclose": torch.allclose, "torch.isfinite": torch.isfinite, "torch.equal": torch.equal,
            "Tensor.__sub__": torch.Tensor.__sub__, "Tensor.abs": torch.Tensor.abs,
            "linalg.vector_norm": torch.linalg.vector_norm, "Tensor.copy_": torch.Tensor.copy_,
            "Tensor.fill_": torch.Tensor.fill_, "Tensor.zero_": torch.Tensor.zero_}


_BASELINE_INTEGRITY = integrity_snapshot()


_OWNERS = {"time.perf_counter": (time, "perf_counter"), "torch.cuda.Event": (torch.cuda, "Event"),
           "Event.elapsed_time": (torch.cuda.Event, "elapsed_time"), "Event.record": (torch.cuda.Event, "record"),
           "Event.synchronize": (torch.cuda.Event, "synchronize"),
           "torch.cuda.synchronize": (torch.cuda, "synchronize"), "torch.allclose": (torch, "allclose"),
           "torch.isfinite": (torch, "isfinite"), "torch.equal": (torch, "equal"),
           "Tensor.__sub__": (torch.Tensor, "__sub__"), "Tensor.abs": (torch.Tensor, "abs"),
           "linalg.vector_norm": (torch.linalg, "vector_norm"), "Tensor.copy_": (torch.Tensor, "copy_"),
           "Tensor.fill_": (torch.Tensor, "fill_"), "Tensor.zero_": (torch.Tensor, "zero_")}


def _torch_flags() -> dict:
    """PyTorch global state a candidate could change to slow a baseline or alter its precision."""
    f = {"float32_matmul_precision": torch.get_float32_matmul_precision(),
         "deterministic": torch.are_deterministic_algorithms_enabled(),
         "default_dtype": torch.get_default_dtype(),
         "cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
         "cuda.matmul.allow_fp16_reduced_precision_reduction":
             torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
         "cuda.matmul.allow_bf16_reduced_precision_reduction":
             torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
         "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32, "cudnn.enabled": torch.backends.cudnn.enabled,
         "cudnn.benchmark": torch.backends.cudnn.benchmark}
    return f


def _restore_flags(f: dict):
    torch.set_float32_matmul_precision(f["float32_matmul_precision"])
    torch.use_deterministic_algorithms(f["deterministic"])
    torch.set_default_dtype(f["default_dtype"])
    torch.backends.cuda.matmul.allow_tf32 = f["cuda.matmul.allow_tf32"]
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = \
        f["cuda.matmul.allow_fp16_reduced_precision_reduction"]
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = \
        f["cuda.matmul.allow_bf16_reduced_precision_reduction"]
    torch.backends.cudnn.allow_tf32 = f["cudnn.allow_tf32"]
    torch.backends.cudnn.enabled = f["cudnn.enabled"]
    torch.backends.cudnn.benchmark = f["cudnn.benchmark"]


def flag_changes(before: dict) -> list[str]:
    """PyTorch global flags that differ from `before` (a _torch_flags() snapshot taken just before
    the candidate ran); restored. Checked around candidate code only: a task's own reference or
    baseline may legitimately set flags."""
    now = _torch_flags()
    changed = [k for k, v in before.items() if now[k] != v]
    if changed:
        _restore_flags(before)
    return changed


def integrity_violations(restore: bool = True) -> list[str]:
    """Names of harness-critical functions a candidate replaced; restored, so the worker stays usable."""
    now = integrity_snapshot()
    bad = [k for k, v in _BASELINE_INTEGRITY.items() if now[k] is not v]
    if restore:
        for k in bad:
            owner, attr = _OWNERS[k]
            try:
                setattr(owner, attr, _BASELINE_INTEGRITY[k])
            except (AttributeError, TypeError):
                pass
    return bad


class _PersistingL2:
    """Persisting L2 lines survive the 256 MB flush: a candidate that reserves a carve-out
    (cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE) + an access-policy window on its stream or
    kernels) keeps its inputs in L2 from call to call (a public exploit of exactly this flush;
    on the H200 a 24 MB input read in 15.1 us instead of 17.3, results/gpu/probe-20261203).
    Before every timed call the carve-out is set to 0 and every persisting line demoted to
    normal (cuCtxResetPersistingL2Cache), as nvbench's --disable-persistent-l2-cache does; the
    flush then evicts them. Driver calls through ctypes (PyTorch exposes neither), bound when
    this module is imported, before any candidate."""
    LIMIT = 0x06   # CU_LIMIT_PERSISTING_L2_CACHE_SIZE

    def __init__(self):
        self._set = self._reset = self._get = None
        try:
            import ctypes
            lib = ctypes.CDLL("libcuda.so.1")
            self._set, self._reset, self._get = lib.cuCtxSetLimit, lib.cuCtxResetPersistingL2Cache, lib.cuCtxGetLimit
            self._set.argtypes = [ctypes.c_int, ctypes.c_size_t]
            self._value = ctypes.c_size_t(0)
            self._ref = ctypes.byref(self._value)
        except (OSError, AttributeError):   # no driver (CPU mode): nothing can persist
            pass

    def reset(self):
        """Carve-out 0, every persisting line demoted. Once per batch: the reset costs the GPU
        about 20 us each time (H200, results/gpu/probe-20261203/graph_batch_costs.json)."""
        if self._set is not None:
            self._set(self.LIMIT, 0)
            self._reset()

    def ensure_zero(self):
        """Before every call: with the carve-out at 0 no line can become persisting (such
        accesses are treated as normal), so only a carve-out the candidate set since the last
        check needs the reset: a query, and the reset only then."""
        if self._get is not None:
            self._value.value = 0
            if self._get(self._ref, self.LIMIT) != 0 or self._value.value != 0:
                self.reset()


_persisting_l2 = _PersistingL2()


def reset_persisting_l2():
    _persisting_l2.reset()


def ensure_no_persisting_l2():
    _persisting_l2.ensure_zero()


def _flush():
    global _flush_buf
    if _flush_buf is None:
        _flush_buf = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    _flush_buf.zero_()


def _quantiles(xs):
    if len(xs) < 4:
        return min(xs), statistics.median(xs), max(xs)
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[1], q[2]


def summarize(xs: list[float]) -> dict:
    if not xs:
        return {"median_us": None, "spread_pct": None, "ci_pct": None, "n": 0}
    q1, med, q3 = _quantiles(xs)
    iqr = q3 - q1
    lo, hi = median_ci(xs)
    # ci_pct: the 95 % interval of the median, half-width relative to it. The old figure
    # (1.57 IQR / sqrt(n), McGill's notch) assumes a normal shape; a bimodal run (FIELD_NOTES 1b)
    # is exactly where it misleads, so the order-statistic interval is reported, with the
    # notch kept under its own name.
    return {"median_us": med, "spread_pct": 100.0 * iqr / med if med > 0 else None,
            "ci_pct": 100.0 * (hi - lo) / 2 / med if med > 0 else None,
            "ci_low_us": lo, "ci_high_us": hi,
            "notch_pct": 100.0 * 1.57 * iqr / math.sqrt(len(xs)) / med if med > 0 else None,
            "n": len(xs), "min_us": min(xs)}


class Side:
    """One implementation being timed: fn() runs it; prepare(rep) refreshes its buffers."""

    def __init__(self, name, fn, prepare=None):
        self.name, self.fn = name, fn
        self.prepare = prepare or (lambda rep: None)
        self.stream_us: list[float] = []
        self.device_us: list[float] = []
        self.discarded = 0


MODES = ("gpu", "as_called")
AS_CALLED_SAMPLES = 10   # the figure beside the objective's: a few samples per side


def time_sides(sides: list[Side], timing: dict, gpu: bool) -> dict:
    """Time every side (candidate first, then baselines) interleaved. Each side's prepare(rep)
    refreshes its inputs/outputs before each sample (outside the timed region).

    timing["mode"] (default "gpu"): "gpu" times each side's GPU work from a CUDA graph of one
    call (GraphBatch; a side that cannot be captured falls back to the launch-hiding hold, and
    its `timing_note` says why); "as_called" times each call as a user's code launches it
    (flush, start event, call, end event: the host's launch cost lands in the figure when it
    exceeds the flush, as under triton's do_bench). The other method's median is reported
    beside it (`gpu_us` / `as_called_us`)."""
    warmup_ms = float(timing.get("warmup_ms", 25))
    min_reps = int(timing.get("min_reps", 20))
    max_reps = max(min_reps, int(timing.get("max_reps", 200)))
    target = float(timing.get("target_noise_pct", 1.0))
    mode = timing.get("mode") or "gpu"
    if mode not in MODES:
        raise ValueError(f"timing mode {mode!r}: one of {', '.join(MODES)}")
    if not gpu:
        return _time_cpu(sides, int(timing.get("cpu_reps", 3)))
    for s in sides:
        _warm_side(s, warmup_ms)
    max_clock = dev.max_sm_clock_mhz()
    _ramp_sides(sides, float(timing.get("ramp_ms", 50)) / 1e3, max_clock)
    null_us = _null_sync_us()
    for s in sides:
        s.graph, s.note = None, None
        if mode == "gpu":
            g = capture(lambda i, s=s: s.fn(), 1)
            if isinstance(g, GraphBatch):
                s.graph = g
            else:
                s.note = (f"cannot be captured in a CUDA graph ({g}): GPU time with the launch hidden by a "
                          f"spin, gaps between its launches counted")
    hold_of = {id(s): (min(5000.0, 1.5 * s.host_us + 20.0) if mode == "gpu" else 0.0) for s in sides}
    clocks, reasons_seen = [], set()
    top = [0]
    rep = 0
    while rep < max_reps:
        for s in (sides if rep % 2 == 0 else sides[::-1]):
            mask0, clk0 = dev.throttle_mask(), dev.sm_clock_mhz()
            if mode == "as_called":
                samples = _called(s, CALLED_PER_SAMPLE, rep)
            else:
                s.prepare(rep)
                samples = [_sample(s, hold_of[id(s)], max_clock)]
            mask1, clk1 = dev.throttle_mask(), dev.sm_clock_mhz()
            bad = dev.reasons((mask0 or 0) | (mask1 or 0), bad_only=True)
            reasons_seen.update(dev.reasons((mask0 or 0) | (mask1 or 0)))
            clk = min(c for c in (clk0, clk1, 10**9) if c is not None)
            if clk < 10**9:
                clocks.append(clk)
                top[0] = max(top[0], clk)
                if clk < 0.85 * top[0]:
                    bad = bad + ["clock_below_85pct_of_run_max"]
            if bad:
                s.discarded += len(samples)
                s.__dict__.setdefault("bad", []).extend(samples)
                continue
            s.stream_us.extend(x[0] for x in samples)
            s.device_us.extend(x[1] for x in samples)
        rep += 1
        if rep >= min_reps and all(len(s.stream_us) >= min_reps // 2 for s in sides):
            cis = [summarize(s.stream_us)["ci_pct"] for s in sides]
            if all(c is not None and c <= target for c in cis):
                break
    out = {s.name: _side_result(s, mode, null_us, max_clock) for s in sides}
    for s in sides:
        if s.graph is not None:
            s.graph.close()
            s.graph = None
    return {"sides": out, "null_sync_us": null_us, "reps": rep, "mode": mode,
            "sm_clock_mhz": int(statistics.median(clocks)) if clocks else dev.sm_clock_mhz(),
            "max_sm_clock_mhz": max_clock, "throttle_reasons": sorted(reasons_seen)}


def _warm_side(s, warmup_ms):
    """Compile, autotune, fill caches; at least 5 calls, so the median host time per call (Python
    wrapper, Triton launcher, dynamo guards, ...) survives one call preempted by the OS."""
    t0, n, host = _perf(), 0, []
    while n < 5 or (_perf() - t0) * 1e3 < warmup_ms:
        s.prepare(n)
        h0 = _perf()
        s.fn()
        host.append((_perf() - h0) * 1e6)
        n += 1
        if n >= 1000:
            break
    _sync()
    s.host_us = statistics.median(host[1:])


def _ramp_sides(sides, ramp_s, max_clock):
    """An idle GPU sits at a low clock and ramps up under load (seen: 345 MHz idle on the H200):
    keep it busy until the SM clock is near its maximum (bounded: a power-capped GPU never is),
    and for at least ramp_s: on the H200, evaluations that started on an idle GPU showed 20-60 %
    IQR at ~30 us kernels while warmed-up ones showed 2-6 %."""
    t0 = _perf()
    while (_perf() - t0) < 0.5:
        c = dev.sm_clock_mhz() if max_clock else None
        if (_perf() - t0) >= ramp_s and (c is None or c >= 0.9 * max_clock):
            break
        for s in sides:
            _flush()
            s.fn()
        _sync()


def _null_sync_us():
    """start -> synchronize -> end_device with nothing launched: the sync round trip."""
    null = []
    for _ in range(15):
        _flush()
        a, b = _Event(enable_timing=True), _Event(enable_timing=True)
        _record(a)
        _sync()
        _record(b)
        _event_sync(b)
        null.append(_elapsed(a, b) * 1e3)
    return statistics.median(null)


def _sample(s, hold_us, max_clock):
    """One timed call of side s: (stream us, start-to-device-idle us)."""
    if s.graph is not None:
        us = s.graph.run(flush=True)["stream_us"][0]
        return us, us
    ensure_no_persisting_l2()
    _flush()
    # Every hold-path sample ends with a synchronize, so the GPU queue is empty when the next
    # one starts: a spin kernel after the flush holds the GPU for 1.5x the side's host time +
    # 20 us (like nvbench's blocking kernel), so the call is fully enqueued before the start
    # event is reached (the "gpu" mode's fallback for a side no graph can hold).
    if hold_us > 0 and _gpu_sleep is not None:
        _gpu_sleep(int(hold_us * (max_clock or 2000)))
    a, e1, e2 = _Event(enable_timing=True), _Event(enable_timing=True), _Event(enable_timing=True)
    _record(a)
    s.fn()
    _record(e1)
    _sync()
    _record(e2)
    _event_sync(e2)
    return _elapsed(a, e1) * 1e3, _elapsed(a, e2) * 1e3


CALLED_PER_SAMPLE = 4


def _called(s, k, rep=0):
    """k calls of side s as a user's loop issues them (run_batch with sync_each=False): [(us, us)]."""
    r = run_batch(lambda i: s.fn(), k, 0.0, True, flush=True, sync_each=False,
                  prepare=lambda i: s.prepare(rep * k + i))
    return list(zip(r["stream_us"], r["device_us"]))


def _other_median(s, mode, max_clock):
    """The median of the method the objective did not use: as called beside GPU time, or GPU
    time (a graph, when the side can be captured) beside as called."""
    if mode == "gpu":
        return statistics.median(x[0] for x in _called(s, AS_CALLED_SAMPLES))
    g = capture(lambda i: s.fn(), 1)
    if not isinstance(g, GraphBatch):
        return None
    s.graph = g
    xs = []
    for i in range(AS_CALLED_SAMPLES):
        s.prepare(i)
        xs.append(_sample(s, 0.0, max_clock)[0])
    return statistics.median(xs)


def _side_result(s, mode, null_us, max_clock) -> dict:
    throttled = False
    if len(s.stream_us) < max(3, s.discarded // 2) and getattr(s, "bad", None):
        # throttled nearly all the time: keep the samples, but say so
        for a_, b_ in s.bad:
            s.stream_us.append(a_)
            s.device_us.append(b_)
        throttled = True
    st = summarize(s.stream_us)
    raw = summarize(s.device_us)          # start -> whole device idle, uncorrected
    dv = summarize([max(0.0, x - null_us) for x in s.device_us])
    # Hold path: work that outlasts the candidate's stream (a side stream, a thread) is counted:
    # the uncorrected start-to-device-idle time is reported instead (it includes the host's
    # synchronize round trip, so hidden work never comes out ahead). Not a rejection by itself:
    # a GPU shared with a dying context (after a fault) can also stretch it, and the static
    # rules already ban streams and threads. A graph cannot outlast its end event (a capture
    # with an unjoined side stream fails).
    outlasted = bool(s.graph is None and dv["median_us"] is not None and st["median_us"] is not None
                     and dv["median_us"] > 1.10 * st["median_us"] + 3.0)
    res = dict(raw) if outlasted else dict(st)
    other = _other_median(s, mode, max_clock)
    gpu_us = res["median_us"] if mode == "gpu" else other
    called_us = other if mode == "gpu" else res["median_us"]
    res.update({"stream_median_us": st["median_us"], "device_median_us": dv["median_us"],
                "host_launch_us": round(getattr(s, "host_us", 0.0), 2), "timing": mode,
                "timing_note": s.note, "gpu_us": gpu_us, "as_called_us": called_us,
                "outlasted_stream": outlasted, "discarded_samples": s.discarded, "throttled": throttled})
    return res


def _time_cpu(sides, reps):
    for s in sides:
        s.prepare(0)
        s.fn()  # warm-up (interpreter caches)
    for rep in range(reps):
        for s in (sides if rep % 2 == 0 else sides[::-1]):
            s.prepare(rep)
            t0 = _perf()
            s.fn()
            s.stream_us.append((_perf() - t0) * 1e6)
    out = {}
    for s in sides:
        r = summarize(s.stream_us)
        r.update({"stream_median_us": r["median_us"], "device_median_us": None, "outlasted_stream": False,
                  "discarded_samples": 0, "throttled": False, "timing": "interpreted", "timing_note": None,
                  "gpu_us": None, "as_called_us": None})
        out[s.name] = r
    return {"sides": out, "null_sync_us": None, "reps": reps, "mode": "interpreted", "sm_clock_mhz": None,
            "throttle_reasons": []}


def copy_bandwidth_gbps(nbytes: int = 1 << 30, reps: int = 20) -> float | None:
    """Device-to-device copy bandwidth (read + write counted), median of `reps`, GB/s."""
    if not torch.cuda.is_available():
        return None
    src = torch.empty(nbytes // 4, dtype=torch.int32, device="cuda").random_()
    dst = torch.empty_like(src)
    ts = []
    for _ in range(reps + 3):
        a, b = _Event(enable_timing=True), _Event(enable_timing=True)
        _record(a)
        dst.copy_(src)
        _record(b)
        _event_sync(b)
        ts.append(_elapsed(a, b) * 1e-3)
    t = statistics.median(ts[3:])
    del src, dst
    return 2 * nbytes / t / 1e9


# -- one timed batch (the judge/runner process model) ---------------------------------------------
def hold_gpu(us: float, cycles_per_us: float | None = None) -> None:
    """Spin the GPU for `us` microseconds (torch.cuda._sleep counts cycles: sized at the max clock,
    so at a lower clock it holds longer, never shorter)."""
    if _gpu_sleep is not None and us > 0:
        _gpu_sleep(int(min(us, 20000.0) * (cycles_per_us or dev.max_sm_clock_mhz() or 2000)))


def run_batch(fn, ncalls: int, hold_us: float, gpu: bool, flush: bool = True, sync_each: bool = True,
              prepare=None, pre=None, post=None) -> dict:
    """_run_batch with Python's garbage collector off (as timeit does): a full collection in a
    process that imported torch pauses it for 0.3-0.5 s in CPU mode (measured: the same timed
    call of every evaluation read 10x its neighbours), which on a GPU leaks into a call or lifts
    the hold. The deferred collection runs after the batch, outside every timed window."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _run_batch(fn, ncalls, hold_us, gpu, flush, sync_each, prepare, pre, post)
    finally:
        if was_enabled:
            gc.enable()


def _run_batch(fn, ncalls: int, hold_us: float, gpu: bool, flush: bool = True, sync_each: bool = True,
               prepare=None, pre=None, post=None) -> dict:
    """Time fn(i) for i in range(ncalls), one sample per call. The SAME code runs in a runner
    (the candidate), in the judge (a baseline) and in the judge with a no-op fn (the loop's fixed
    cost, for the timer cross-check), so the three are comparable.

    GPU, per call: prepare(i) (new input contents: before the flush), the persisting-L2 check,
    flush L2, hold the GPU for hold_us (the launch-hiding spin), pre(i) (host only: the audit's
    setup), start event, fn(i), end event on the stream, then (sync_each) device-wide
    synchronize and an end event after it, then post(i) (the audit's checks). Only fn(i) is
    between the events. sync_each=False is the "as called"
    batch: the calls follow one another as a user's loop issues them (like triton's do_bench),
    one synchronize at the end, and the host's launch time lands in a call's figure whenever
    the host falls behind the GPU. CPU: the perf_counter around fn(i). host_us is the host time
    of fn(i) itself: a call whose host time exceeds the hold let its launch leak into the
    timed interval.
    """
    stream, device, host = [], [], []
    if not gpu:
        for i in range(ncalls):
            if prepare is not None:
                prepare(i)
            if pre is not None:
                pre(i)
            t0 = _perf()
            fn(i)
            t1 = _perf()
            if post is not None:
                post(i)
            stream.append((t1 - t0) * 1e6)
            host.append((t1 - t0) * 1e6)
        return {"stream_us": stream, "device_us": [], "host_us": host}
    evs = []
    cyc = dev.max_sm_clock_mhz() or 2000   # once per batch: an NVML query is not free
    reset_persisting_l2()
    for i in range(ncalls):
        if prepare is not None:
            prepare(i)
        ensure_no_persisting_l2()
        if flush:
            _flush()
        hold_gpu(hold_us, cyc)
        if pre is not None:
            pre(i)
        a, e1 = _Event(enable_timing=True), _Event(enable_timing=True)
        _record(a)
        h0 = _perf()
        fn(i)
        h1 = _perf()
        _record(e1)
        e2 = None
        if sync_each:
            e2 = _Event(enable_timing=True)
            _sync()
            _record(e2)
            _event_sync(e2)
        if post is not None:
            post(i)
        evs.append((a, e1, e2))
        host.append((h1 - h0) * 1e6)
    if not sync_each:
        _sync()
    for a, e1, e2 in evs:
        stream.append(_elapsed(a, e1) * 1e3)
        device.append(_elapsed(a, e2) * 1e3 if e2 is not None else stream[-1])
    return {"stream_us": stream, "device_us": device, "host_us": host}


class CaptureFailed(Exception):
    """The calls cannot be captured into a CUDA graph (a host sync, a CPU read of a device value,
    an allocation the graph's pool cannot serve, an unjoined side stream...): `reason` says why."""


class GraphBatch:
    """GPU time of each call, isolated from the host: call i is captured ONCE into its own CUDA
    graph between two timing events recorded INSIDE the graph (external event nodes), then every
    sample replays it. The events are stamped when the GPU reaches them, so nothing the host does
    (launch cost, a preempted thread, a busy machine) lands between them: on the H200, 12 busy
    CPU processes left the figure within 0.3 % (results/gpu/probe-20261203). A call whose work
    forks a side stream must join it before it returns (capture fails otherwise), so the end
    event follows all of it. The host code of the call runs at capture only: replays are the
    same launches on the same pointers with new contents (the judge checks their outputs).

    Per batch: the persisting-L2 reset; per sample: the persisting-L2 check, the L2 flush (outside
    the graph), the replay; one synchronize after the batch. The graphs share one memory pool (replayed in capture order,
    never concurrently) and live as long as this object.
    """

    def __init__(self, fn, ncalls: int):
        self.n = ncalls
        self.graphs, self.events = [], []
        _sync()
        side = _Stream()
        side.wait_stream(_current_stream())
        pool = None
        try:
            with _stream_ctx(side):
                for i in range(ncalls):
                    g = _CUDAGraph()
                    a, b = _Event(enable_timing=True, external=True), _Event(enable_timing=True, external=True)
                    # thread_local: only this thread's unsafe calls break the capture (a runner has
                    # watcher threads that must not)
                    g.capture_begin(pool=pool, capture_error_mode="thread_local")
                    try:
                        _record(a)
                        fn(i)
                        _record(b)
                    except BaseException as e:
                        _end_capture(g)
                        raise CaptureFailed(f"call {i}: {type(e).__name__}: {str(e)[:300]}") from None
                    try:
                        g.capture_end()
                    except RuntimeError as e:
                        raise CaptureFailed(f"call {i}: ending the capture: {str(e)[:300]}") from None
                    pool = g.pool()
                    self.graphs.append(g)
                    self.events.append((a, b))
        finally:
            _current_stream().wait_stream(side)
        _sync()

    def run(self, flush: bool = True) -> dict:
        """One sample per call: {"stream_us", "device_us" (the same figure), "host_us" (the
        replay's own host time, reported for the record)}."""
        host = []
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            reset_persisting_l2()
            for g in self.graphs:
                ensure_no_persisting_l2()
                if flush:
                    _flush()
                h0 = _perf()
                g.replay()
                host.append((_perf() - h0) * 1e6)
            _sync()
        finally:
            if was_enabled:
                gc.enable()
        us = [_elapsed(a, b) * 1e3 for a, b in self.events]
        return {"stream_us": us, "device_us": list(us), "host_us": host}

    def close(self):
        for g in self.graphs:
            g.reset()
        self.graphs, self.events = [], []


def _end_capture(g):
    """A capture interrupted by an exception: end it so the stream leaves capture mode (the
    graph is invalid and dropped)."""
    try:
        g.capture_end()
    except Exception:
        pass


def capture(fn, ncalls: int) -> "GraphBatch | str":
    """A GraphBatch, or why the calls cannot be captured (the CUDA context is checked after a
    failed capture: a sticky error there is the caller's FatalCudaError, not a reason)."""
    try:
        return GraphBatch(fn, ncalls)
    except CaptureFailed as e:
        _sync()   # raises if the failed capture left the context broken
        return str(e)


def median_ci(xs: list[float], z: float = 1.96) -> tuple[float | None, float | None]:
    """Distribution-free 95 % confidence interval of the median: the order statistics at ranks
    n/2 -/+ z*sqrt(n)/2 (the binomial normal approximation). Needs n >= 6; else (min, max)."""
    n = len(xs)
    if n == 0:
        return None, None
    s = sorted(xs)
    if n < 6:
        return s[0], s[-1]
    half = z * math.sqrt(n) / 2
    lo = max(0, int(math.floor(n / 2 - half)))
    hi = min(n - 1, int(math.ceil(n / 2 + half)) - 1)
    return s[lo], s[hi]
