"""Does a task's baseline run here? One call of it on one goal shape, on the GPU, the way the
judge's _probe_baseline runs it; prints OK and the seconds, or the whole traceback.

    python scripts/gpu/probe/baseline_probe.py kernels/mla [torch_compile] [shape]

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
    shape_name, shape = next(iter(task.shapes.items())) if len(sys.argv) <= 3 else (sys.argv[3], task.shapes[sys.argv[3]])
    inputs = task.make_inputs(shape, 7, "cuda", torch.bfloat16)
    fn(**inputs)
    torch.cuda.synchronize()
    print(f"OK {name} on {shape_name} in {time.time() - t0:.1f} s")
except BaseException:
    traceback.print_exc()
    print(f"FAILED after {time.time() - t0:.1f} s")
    sys.exit(1)
