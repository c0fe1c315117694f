"""Does a task's baseline run here? One call of it on one goal shape, on the GPU, the way the
judge's _probe_baseline runs it; prints OK and the seconds, or the whole traceback.

    python scripts/gpu/probe/baseline_probe.py kernels/mla [torch_compile] [shape]
    PROBE_DEVICE=cpu ...     (on a machine without a GPU: inductor's CPU path)

Run bare, in the judge's cleared environment and under kerneld-sandbox, it tells which of
them stops a baseline that fails in the sandboxed judge (issue 24).
"""
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "kernels"))
t0 = time.time()
try:
    import torch
    from harness.taskload import load_task
    task = load_task(sys.argv[1])
    name = sys.argv[2] if len(sys.argv) > 2 else task.default_baseline
    fn = task.baseline_fn(name)
    every = {**task.shapes, **getattr(task, "heldout", {}), **task.smoke}
    shape_name = sys.argv[3] if len(sys.argv) > 3 else next(iter(task.shapes))
    shape = every[shape_name]
    device = os.environ.get("PROBE_DEVICE", "cuda")     # cpu: inductor's C++ path instead
    inputs = task.make_inputs(shape, 7, device, torch.bfloat16 if device == "cuda" else torch.float32)
    fn(**inputs)
    if device == "cuda":
        torch.cuda.synchronize()
    print(f"OK {name} on {shape_name} in {time.time() - t0:.1f} s")
except BaseException:
    traceback.print_exc()
    print(f"FAILED after {time.time() - t0:.1f} s")
    sys.exit(1)
