"""The GPU timing loop's logic, on a CPU, with the CUDA events and NVML faked by a host clock:
interleaving, noise-targeted stopping, throttled/low-clock samples discarded, and work that
outlives the candidate's stream (a side stream) counted instead of hidden."""
import time

import pytest

from harness import device as dev
from harness import timing


class FakeGPU:
    def __init__(self):
        self.pending_until = 0.0   # "side stream" work that only a device-wide sync waits for
        self.clock = 1980
        self.mask = 0

    def event(self, enable_timing=True):
        return {"t": None}

    def record(self, ev, stream=None):
        ev["t"] = time.perf_counter()

    def elapsed(self, a, b):
        return (b["t"] - a["t"]) * 1e3

    def sync(self):
        while time.perf_counter() < self.pending_until:
            pass


def spin(us):
    t = time.perf_counter() + us * 1e-6
    while time.perf_counter() < t:
        pass


@pytest.fixture
def gpu(monkeypatch):
    g = FakeGPU()
    monkeypatch.setattr(timing, "_Event", g.event)
    monkeypatch.setattr(timing, "_record", g.record)
    monkeypatch.setattr(timing, "_elapsed", g.elapsed)
    monkeypatch.setattr(timing, "_event_sync", lambda ev: None)
    monkeypatch.setattr(timing, "_sync", g.sync)
    monkeypatch.setattr(timing, "_flush", lambda: None)
    g.holds = []
    monkeypatch.setattr(timing, "_gpu_sleep", lambda cycles: g.holds.append(cycles))
    monkeypatch.setattr(dev, "max_sm_clock_mhz", lambda: 1980)
    monkeypatch.setattr(dev, "sm_clock_mhz", lambda: g.clock)
    monkeypatch.setattr(dev, "throttle_mask", lambda: g.mask)
    # no CUDA graphs on a CPU: every side takes the hold path unless a test fakes a graph
    monkeypatch.setattr(timing, "capture", lambda fn, n: "fake GPU: no graphs")
    g.resets, g.checks = [], []
    monkeypatch.setattr(timing, "reset_persisting_l2", lambda: g.resets.append(1))
    monkeypatch.setattr(timing, "ensure_no_persisting_l2", lambda: g.checks.append(1))
    return g


class FakeGraph:
    """A captured call: replaying runs the host function again and reports its host time as the
    GPU time (what a graph's inner events would see), with none of the hold."""

    def __init__(self, fn):
        self.fn, self.replays = fn, 0

    def run(self, flush=True):
        t0 = time.perf_counter()
        self.fn(0)
        self.replays += 1
        us = (time.perf_counter() - t0) * 1e6
        return {"stream_us": [us], "device_us": [us], "host_us": [1.0]}

    def close(self):
        pass


CFG = {"warmup_ms": 1, "ramp_ms": 1, "min_reps": 10, "max_reps": 60, "target_noise_pct": 2.0}


def test_interleaved_ratio(gpu):
    a = timing.Side("candidate", lambda: spin(400))
    b = timing.Side("base", lambda: spin(800))
    r = timing.time_sides([a, b], CFG, gpu=True)
    ca, cb = r["sides"]["candidate"], r["sides"]["base"]
    assert 350 < ca["median_us"] < 700 and 750 < cb["median_us"] < 1300
    assert not ca["outlasted_stream"] and not cb["outlasted_stream"]
    assert ca["n"] >= 5 and ca["spread_pct"] is not None
    # the host time of one call is measured: at least the spin (a wall-clock floor no load can
    # lower) and not a whole warm-up's worth of calls (a busy 2-core CI machine preempts the
    # spins, so the ceiling is a gross-error bound, not a tight one)
    assert 400 <= ca["host_launch_us"] < 2000 and 800 <= cb["host_launch_us"] < 4000
    # the GPU is held for 1.5x the measured host time + 20 us before each start event
    expected = {side: int(min(5000.0, 1.5 * c["host_launch_us"] + 20.0) * 1980) for side, c in
                (("candidate", ca), ("base", cb))}
    near = lambda c, e: abs(c - e) <= 1980 * 0.02   # host_launch_us is rounded to 0.01 us
    assert gpu.holds and all(any(near(c, e) for e in expected.values()) for c in gpu.holds)
    assert all(any(near(c, e) for c in gpu.holds) for e in expected.values()), expected


def test_side_stream_work_is_counted(gpu):
    def hidden():
        spin(20)
        gpu.pending_until = time.perf_counter() + 2e-3   # 2 ms left running "elsewhere"
    a = timing.Side("candidate", hidden)
    r = timing.time_sides([a], CFG, gpu=True)
    c = r["sides"]["candidate"]
    assert c["outlasted_stream"] is True
    assert c["stream_median_us"] < 500
    assert c["median_us"] >= 2000          # the hidden 2 ms is in the reported time


def test_throttled_and_low_clock_samples_discarded(gpu):
    n = {"i": 0}

    def fn():
        n["i"] += 1
        # every third call: a thermal slowdown bit, every fifth: the clock sagging to 60 %
        gpu.mask = 0x20 if n["i"] % 3 == 0 else 0
        gpu.clock = 1200 if n["i"] % 5 == 0 else 1980
        spin(100)
    r = timing.time_sides([timing.Side("candidate", fn)], CFG, gpu=True)
    c = r["sides"]["candidate"]
    assert c["discarded_samples"] > 0
    assert "sw_thermal_slowdown" in r["throttle_reasons"]


def test_work_shift_check_bounds_the_median_by_the_batch_mean():
    """judge_timing's work-shift check (NOTES.md, red team session 4): alike calls pass, one
    disturbed batch of two passes (lower median), a batch whose first call does every call's
    work is refused, and the loop runs with the garbage collector off."""
    import gc

    from harness.correctness import CheckFailure
    from harness.judge_timing import _skew, _skew_check
    honest = [_skew([40.0, 44.0, 38.0]), _skew([37.0, 37.0, 405.0])]
    assert _skew_check(honest, 1.6, "s") < 1.2
    shifted = [_skew([120.0, 1.5, 1.4]), _skew([118.0, 1.6, 1.3])]
    with pytest.raises(CheckFailure) as e:
        _skew_check(shifted, 1.6, "s")
    assert e.value.rule == "timer" and "not alike" in e.value.message
    assert _skew([0.0, 0.0, 0.0]) == 1.0
    seen = []
    timing.run_batch(lambda i: seen.append(gc.isenabled()), 3, 0.0, gpu=False)
    assert seen == [False] * 3 and gc.isenabled()


def test_gpu_mode_times_the_graph_and_reports_as_called_beside(gpu, monkeypatch):
    graphs = []

    def fake_capture(fn, n):
        graphs.append(FakeGraph(fn))
        return graphs[-1]
    monkeypatch.setattr(timing, "capture", fake_capture)
    monkeypatch.setattr(timing, "GraphBatch", FakeGraph)
    a = timing.Side("candidate", lambda: spin(300))
    r = timing.time_sides([a], CFG, gpu=True)
    c = r["sides"]["candidate"]
    assert r["mode"] == "gpu" and c["timing"] == "gpu" and c["timing_note"] is None
    assert graphs and graphs[0].replays >= 10          # the samples came from replays
    assert 250 < c["median_us"] < 900 and c["gpu_us"] == c["median_us"]
    assert c["as_called_us"] is not None and c["as_called_us"] >= 250
    assert not gpu.holds                                # a graph needs no launch-hiding spin
    # the as-called batch beside it: the persisting-L2 reset once, the check before every call
    assert len(gpu.resets) >= 1 and len(gpu.checks) >= timing.AS_CALLED_SAMPLES


def test_uncapturable_side_falls_back_to_the_hold_and_says_why(gpu):
    a = timing.Side("candidate", lambda: spin(200))
    c = timing.time_sides([a], CFG, gpu=True)["sides"]["candidate"]
    assert c["timing"] == "gpu" and "cannot be captured" in c["timing_note"] and "fake GPU" in c["timing_note"]
    assert gpu.holds


def test_as_called_mode_has_no_hold(gpu):
    a = timing.Side("candidate", lambda: spin(200))
    r = timing.time_sides([a], dict(CFG, mode="as_called"), gpu=True)
    c = r["sides"]["candidate"]
    assert r["mode"] == "as_called" and c["timing"] == "as_called" and c["as_called_us"] == c["median_us"]
    assert c["gpu_us"] is None                           # not capturable here: no GPU figure beside
    assert not gpu.holds


def test_unknown_mode_is_refused(gpu):
    with pytest.raises(ValueError, match="timing mode"):
        timing.time_sides([timing.Side("c", lambda: None)], dict(CFG, mode="wall"), gpu=True)
