#!/usr/bin/env python3
"""Run one candidate call on one shape (the process `ncu` profiles for profile={"ncu": true}).

    python3 kernels/harness/ncu_run.py TASK_DIR CANDIDATE CONFIG_JSON SHAPE
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402

from harness.candidate import load_candidate  # noqa: E402
from harness.correctness import alloc_poisoned  # noqa: E402
from harness.taskload import load_task  # noqa: E402


def main():
    task_dir, cand_path, cfg, shape_name = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
    task = load_task(task_dir)
    cand = load_candidate(cand_path, task.banned_calls)
    fn = cand.entry(task.entry)
    shape = task.shapes[shape_name]
    inputs = task.make_inputs(shape, 4242, "cuda", torch.bfloat16)
    out = alloc_poisoned(task.output_spec(shape, inputs), "cuda")
    fn(dict(inputs), dict(out), cand.resolve_config(cfg))  # warm-up / compile (skipped by --launch-skip)
    torch.cuda.synchronize()
    fn(dict(inputs), dict(out), cand.resolve_config(cfg))
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
