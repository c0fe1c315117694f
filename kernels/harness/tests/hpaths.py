"""Paths the harness tests use (a uniquely named module: several test folders have a conftest)."""
from pathlib import Path

KERNELS = Path(__file__).resolve().parents[2]
REPO = KERNELS.parent
DEMO = KERNELS / "demo"
ADV = Path(__file__).resolve().parent / "adversarial"
WORKER = KERNELS / "harness" / "worker.py"
