"""kerneld evaluation harness: the Python half of docs/HARNESS.md.

Modules: taskload (task.toml + task.py), static_check (ast rules), candidate
(loading a candidate module), correctness (the check battery), timing (CUDA-event /
perf_counter timing), profile (roofline and compiled-kernel stats), device (NVML),
evaluate (one `evaluate` request), worker (the protocol loop), bench (figures).
"""
