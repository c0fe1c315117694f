"""Mode (gpu / cpu), device identity, NVML clocks and throttle reasons (pynvml, optional)."""
from __future__ import annotations

import os

import torch

_NVML = None          # the pynvml module once initialised, False when unavailable
_HANDLE = None

# throttle reasons that make a timing sample untrustworthy (idle / app-clock settings are benign)
BAD_THROTTLE = {
    0x0000000000000004: "sw_power_cap",
    0x0000000000000008: "hw_slowdown",
    0x0000000000000020: "sw_thermal_slowdown",
    0x0000000000000040: "hw_thermal_slowdown",
    0x0000000000000080: "hw_power_brake_slowdown",
}
ALL_THROTTLE = {
    0x0000000000000001: "gpu_idle",
    0x0000000000000002: "applications_clocks_setting",
    0x0000000000000010: "sync_boost",
    0x0000000000000100: "display_clock_setting",
    **BAD_THROTTLE,
}

CUDA_FATAL_MARKERS = (
    "illegal memory access", "an illegal instruction", "unspecified launch failure", "device-side assert triggered",
    "misaligned address", "CUDA error: an illegal", "invalid program counter", "uncorrectable ECC",
    "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED", "hardware stack error", "invalid address space",
    "operation not permitted when stream is capturing", "Triton Error [CUDA]: an illegal",
    "Triton Error [CUDA]: unspecified launch failure", "Triton Error [CUDA]: misaligned",
    "CUDA error: unknown error", "CUDA error: launch timeout",
)


def cpu_mode() -> bool:
    return os.environ.get("TRITON_INTERPRET", "") == "1" or not torch.cuda.is_available()


def device_str() -> str:
    return "cpu" if cpu_mode() else "cuda"


def is_fatal_cuda_error(exc: BaseException) -> bool:
    """A CUDA error after which the context cannot be trusted. torch raises AcceleratorError for
    any CUDA runtime error (out-of-memory is a different type and is survivable): restart on all."""
    if type(exc).__name__ == "AcceleratorError":
        return True
    msg = f"{type(exc).__name__}: {exc}"
    return any(m.lower() in msg.lower() for m in CUDA_FATAL_MARKERS)


def _nvml():
    global _NVML, _HANDLE
    if _NVML is None:
        try:
            import pynvml  # nvidia-ml-py
            pynvml.nvmlInit()
            uuid = torch.cuda.get_device_properties(0).uuid if torch.cuda.is_available() else None
            h = None
            if uuid is not None:
                want = "GPU-" + str(uuid)
                for i in range(pynvml.nvmlDeviceGetCount()):
                    hi = pynvml.nvmlDeviceGetHandleByIndex(i)
                    u = pynvml.nvmlDeviceGetUUID(hi)
                    u = u.decode() if isinstance(u, bytes) else u
                    if u == want:
                        h = hi
                        break
                if h is None and pynvml.nvmlDeviceGetCount() == 1:
                    h = pynvml.nvmlDeviceGetHandleByIndex(0)
            _NVML, _HANDLE = pynvml, h
        except Exception:
            _NVML, _HANDLE = False, None
    return _NVML if _NVML else None


def identity() -> dict | None:
    """{name, uuid, cc} of the visible device, or None in CPU mode."""
    if cpu_mode():
        return None
    p = torch.cuda.get_device_properties(0)
    return {"name": p.name, "uuid": "GPU-" + str(p.uuid), "cc": f"{p.major}.{p.minor}",
            "sms": p.multi_processor_count, "memory_gib": round(p.total_memory / 2**30, 1)}


def _device_query(query) -> int | None:
    """query(nvml, handle) for the visible device; None without NVML or when it fails."""
    nv = _nvml()
    if nv is None or _HANDLE is None:
        return None
    try:
        return int(query(nv, _HANDLE))
    except Exception:
        return None


def sm_clock_mhz() -> int | None:
    return _device_query(lambda nv, h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))


def mem_clock_mhz() -> int | None:
    return _device_query(lambda nv, h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM))


_MAX_SM_CLOCK: list = []


def max_sm_clock_mhz() -> int | None:
    """The device's maximum SM clock: a constant of the part, so asked once (an NVML call took
    1.5 ms on the H200, and the timer asks per batch: issue #12's judge profile)."""
    if not _MAX_SM_CLOCK:
        v = _device_query(lambda nv, h: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM))
        if v is None:
            return None   # NVML not up yet (or absent): ask again next time
        _MAX_SM_CLOCK.append(v)
    return _MAX_SM_CLOCK[0]


def throttle_mask() -> int | None:
    # renamed "clocks event reasons" in newer NVML bindings
    return _device_query(lambda nv, h: (getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
                                        or nv.nvmlDeviceGetCurrentClocksThrottleReasons)(h))


def reasons(mask: int | None, bad_only=False) -> list[str]:
    if not mask:
        return []
    table = BAD_THROTTLE if bad_only else ALL_THROTTLE
    return [name for bit, name in table.items() if mask & bit]


def driver_version() -> str | None:
    nv = _nvml()
    if nv is None:
        return None
    try:
        v = nv.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else v
    except Exception:
        return None


def snapshot() -> dict:
    ident = identity() or {}
    mask = throttle_mask()
    return {"uuid": ident.get("uuid"), "name": ident.get("name"), "sm_clock_mhz": sm_clock_mhz(),
            "throttle_reasons": reasons(mask), "discarded_samples": 0}
