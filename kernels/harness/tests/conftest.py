"""CPU test setup: Triton's interpreter, no GPU, the harness importable as `harness`."""
import os
import sys
from pathlib import Path

# KERNELD_GPU_TESTS=1 (the device scripts only, e.g. for test_warmup_gpu.py): the real GPU.
if os.environ.get("KERNELD_GPU_TESTS") != "1":
    os.environ["TRITON_INTERPRET"] = "1"
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
_HERE = Path(__file__).resolve().parent
for p in (str(_HERE.parents[1]), str(_HERE)):  # kernels/ (for `harness`) and this folder (hpaths)
    if p not in sys.path:
        sys.path.insert(0, p)


def pytest_configure(config):
    # the interpreter's own numpy deprecation noise
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning")
