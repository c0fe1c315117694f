# Sourced by the other scripts: sets KERNELD_PYTHON to a Python that has torch and
# triton, creating the repository's .venv from the package registry when none has.
#
# Versions are pinned to the H200 machine's (torch 2.11.0, triton 3.6.0); numpy must
# stay below 2.3 for Triton's interpreter (FIELD_NOTES section 8).

_kerneld_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

_has_torch_triton() {
    "$1" -c 'import torch, triton' >/dev/null 2>&1
}

if [ -n "${KERNELD_PYTHON:-}" ] && _has_torch_triton "$KERNELD_PYTHON"; then
    :
elif [ -x "$_kerneld_root/.venv/bin/python" ] && _has_torch_triton "$_kerneld_root/.venv/bin/python"; then
    KERNELD_PYTHON="$_kerneld_root/.venv/bin/python"
elif command -v python3 >/dev/null && _has_torch_triton python3 && python3 -c 'import pytest' >/dev/null 2>&1; then
    KERNELD_PYTHON="$(command -v python3)"
else
    echo "setting up $_kerneld_root/.venv (torch 2.11.0 + triton 3.6.0, about 5 GB, a few minutes)..." >&2
    python3 -m venv "$_kerneld_root/.venv" || { echo "error: python3 -m venv failed (apt-get install python3-venv?)" >&2; exit 1; }
    # --no-cache-dir: a cache would keep a second copy of the wheels (torch's CUDA
    # dependencies make .venv 4.8 GB).
    "$_kerneld_root/.venv/bin/pip" install -q --disable-pip-version-check --no-cache-dir \
        torch==2.11.0 triton==3.6.0 "numpy<2.3" pytest prometheus_client==0.26.0 \
        || { echo "error: installing torch/triton into .venv failed" >&2; exit 1; }
    KERNELD_PYTHON="$_kerneld_root/.venv/bin/python"
fi
# The metrics tests (tests/tests/metrics.rs) parse kerneld's /metrics with Prometheus's own
# Python client: installed into the same Python when missing (a .venv made before it).
if ! "$KERNELD_PYTHON" -c 'import prometheus_client' >/dev/null 2>&1; then
    "$KERNELD_PYTHON" -m pip install -q --disable-pip-version-check --no-cache-dir \
        prometheus_client==0.26.0 \
        || { echo "error: installing prometheus_client into $KERNELD_PYTHON failed" >&2; exit 1; }
fi
export KERNELD_PYTHON
