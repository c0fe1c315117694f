#!/usr/bin/env python3
"""Issue 23, probe: can the judge time a call's GPU work so that host load cannot move it?

Per (impl, shape), REPEATS repeats of SAMPLES samples each, two methods:
  as_called  the judge's current loop: flush L2, spin (hold) 1.5x host time + 20 us, event, fn(),
             event, synchronize (timing.run_batch);
  graph      fn() captured once into a CUDA graph between two timing events recorded INSIDE the
             graph (external event nodes); per sample: flush L2 (outside the graph), replay.
             The events are stamped when the GPU reaches them, so the host's launch time and any
             preemption before the replay is not in the interval.
First on an idle host, then with BUSY processes spinning on the CPUs. Also: does a persisting-L2
window survive the 256 MB flush, and does cuCtxResetPersistingL2Cache + limit 0 remove it?
Writes $OUT/timing_probe.json; prints a table.
"""
import ctypes
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "kernels"))
sys.path.insert(0, os.path.join(ROOT, "kernels", "mla"))
from harness import timing  # noqa: E402

OUT = os.environ.get("OUT", "/tmp")
REPEATS = int(os.environ.get("REPEATS", "6"))
SAMPLES = int(os.environ.get("SAMPLES", "40"))
BUSY = int(os.environ.get("BUSY", "12"))


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


task = load(os.path.join(ROOT, "kernels/mla/task.py"), "mla_task")
v3 = load(os.path.join(ROOT, "kernels/mla/seeds/splitkv_v3.py"), "splitkv_v3")
SHAPES = {"b1_s8192": {"B": 1, "S": 8192}, "b128_s4096": {"B": 128, "S": 4096}}


def impls(shape):
    inp = task.make_inputs(shape, 1, "cuda", torch.bfloat16)
    spec = task.output_spec(shape, inp)
    out = {k: torch.empty(s, dtype=d, device="cuda") for k, (s, d) in spec.items()}
    keep = []

    def cand():
        v3.mla_decode(inp, out, v3.BEST)

    def base():
        keep.append(task.baseline_torch_compile(**inp))
        if len(keep) > 2:
            keep.pop(0)
    return {"splitkv_v3": cand, "torch_compile": base}


def as_called(fn, n):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    host = []
    for _ in range(5):
        t0 = time.perf_counter()
        fn()
        host.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    hold = min(5000.0, 1.5 * statistics.median(host) + 20.0)
    r = timing.run_batch(lambda i: fn(), n, hold, True, flush=True)
    return statistics.median(r["stream_us"])


class Graphed:
    def __init__(self, fn):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        self.a = torch.cuda.Event(enable_timing=True, external=True)
        self.b = torch.cuda.Event(enable_timing=True, external=True)
        self.g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            self.g.capture_begin()
            self.a.record()
            fn()
            self.b.record()
            self.g.capture_end()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()

    def sample(self):
        timing._flush()
        self.g.replay()
        self.b.synchronize()
        return self.a.elapsed_time(self.b) * 1e3


def graph_time(gr, n):
    xs = []
    for _ in range(n):
        xs.append(gr.sample())
    return statistics.median(xs)


def stats(xs):
    med = statistics.median(xs)
    cv = statistics.pstdev(xs) / statistics.mean(xs) * 100
    return {"median_us": round(med, 3), "cv_pct": round(cv, 3),
            "max_dev_pct": round(max(abs(x - med) / med for x in xs) * 100, 3), "repeats": [round(x, 3) for x in xs]}


def noise_run(label):
    res = {}
    for sname, shape in SHAPES.items():
        for iname, fn in impls(shape).items():
            gr = Graphed(fn)
            ac, gp = [], []
            for _ in range(REPEATS):
                ac.append(as_called(fn, SAMPLES))
                gp.append(graph_time(gr, SAMPLES))
            res[f"{sname}/{iname}"] = {"as_called": stats(ac), "graph": stats(gp)}
            print(f"{label:5s} {sname:11s} {iname:13s} as_called {stats(ac)['median_us']:8.2f} us cv "
                  f"{stats(ac)['cv_pct']:6.2f}% maxdev {stats(ac)['max_dev_pct']:6.2f}% | graph "
                  f"{stats(gp)['median_us']:8.2f} us cv {stats(gp)['cv_pct']:6.2f}% maxdev {stats(gp)['max_dev_pct']:6.2f}%",
                  flush=True)
    return res


# -- persisting L2 ---------------------------------------------------------------------------------
def persisting_l2():
    cu = ctypes.CDLL("libcuda.so.1")
    LIMIT = 0x06    # CU_LIMIT_PERSISTING_L2_CACHE_SIZE
    out = {}
    prop = torch.cuda.get_device_properties(0)
    out["l2_bytes"] = getattr(prop, "L2_cache_size", None)
    x = torch.randn(6 * 2**20, device="cuda")          # 24 MB
    torch.cuda.synchronize()
    r = cu.cuCtxSetLimit(LIMIT, ctypes.c_size_t(32 * 2**20))
    v = ctypes.c_size_t(0)
    cu.cuCtxGetLimit(ctypes.byref(v), LIMIT)
    out["set_limit_rc"], out["limit_after_set"] = r, v.value

    class Window(ctypes.Structure):
        _fields_ = [("base_ptr", ctypes.c_void_p), ("num_bytes", ctypes.c_size_t), ("hitRatio", ctypes.c_float),
                    ("hitProp", ctypes.c_int), ("missProp", ctypes.c_int)]
    buf = (ctypes.c_byte * 64)()
    w = Window.from_buffer(buf)
    w.base_ptr, w.num_bytes, w.hitRatio, w.hitProp, w.missProp = x.data_ptr(), x.numel() * 4, 1.0, 2, 0
    stream = torch.cuda.current_stream().cuda_stream
    out["set_window_rc"] = cu.cuStreamSetAttribute(ctypes.c_void_p(stream), 1, ctypes.byref(buf))

    def t_sum(reset):
        xs = []
        for _ in range(30):
            if reset:
                cu.cuCtxResetPersistingL2Cache()
                cu.cuCtxSetLimit(LIMIT, ctypes.c_size_t(0))
            timing._flush()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            x.sum()
            b.record()
            b.synchronize()
            xs.append(a.elapsed_time(b) * 1e3)
            if reset:
                cu.cuCtxSetLimit(LIMIT, ctypes.c_size_t(32 * 2**20))
        return statistics.median(xs)
    out["sum_us_window_persisting"] = t_sum(False)
    out["sum_us_reset_each"] = t_sum(True)
    w.hitProp = 0
    cu.cuStreamSetAttribute(ctypes.c_void_p(stream), 1, ctypes.byref(buf))
    cu.cuCtxResetPersistingL2Cache()
    cu.cuCtxSetLimit(LIMIT, ctypes.c_size_t(0))
    out["sum_us_no_window"] = t_sum(False)
    out["reset_rc"] = cu.cuCtxResetPersistingL2Cache()
    print("persisting L2:", json.dumps(out), flush=True)
    return out


def main():
    env = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cpus": os.cpu_count(),
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "driver": subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True).stdout.strip()}
    import triton
    env["triton"] = triton.__version__
    result = {"env": env, "repeats": REPEATS, "samples": SAMPLES, "busy_procs": BUSY}
    try:
        result["persisting_l2"] = persisting_l2()
    except Exception as e:  # a probe: record and go on
        result["persisting_l2"] = {"error": repr(e)}
    result["idle"] = noise_run("idle")
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(BUSY)]
    try:
        time.sleep(1.0)
        result["busy"] = noise_run("busy")
    finally:
        for p in procs:
            p.kill()
    with open(os.path.join(OUT, "timing_probe.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
