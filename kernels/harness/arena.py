"""Shared tensor arenas: the judge allocates every tensor a runner touches (inputs and outputs)
in one block per shape, and the runner maps the same block. The judge reads outputs and
checks inputs in its own mapping: nothing comes back "by word".

GPU mode: one cuMemAlloc block of its own (driver API through ctypes, outside PyTorch's
caching allocator), so the CUDA IPC handle the runner gets covers exactly that block and
never a neighbouring judge allocation (a caching-allocator segment can hold other tensors);
the runner opens it with cuIpcOpenMemHandle. Both sides wrap the pointer with
`__cuda_array_interface__`. The judge frees it once the runner is gone (a killed importer
needs no cooperation: the driver drops its mapping with its context).
CPU mode: a file in the runner's scratch, mapped shared (`torch.from_file(shared=True)`).
"""
from __future__ import annotations

import base64
import ctypes
import os

import torch

from .runner_protocol import Arena, TensorRef

ALIGN = 512
GPU_GRANULE = 2 * 2**20

_DT = {name: getattr(torch, name) for name in ("float16", "bfloat16", "float32", "float64", "int8", "int16",
                                               "int32", "int64", "uint8", "bool")}
for _n in ("float8_e4m3fn", "float8_e5m2"):
    if hasattr(torch, _n):
        _DT[_n] = getattr(torch, _n)


def dtype_name(dt: torch.dtype) -> str:
    for k, v in _DT.items():
        if v == dt:
            return k
    raise ValueError(f"dtype {dt} cannot be shared with a runner")


def dtype_of(name: str) -> torch.dtype:
    return _DT[name]


class IpcHandle(ctypes.Structure):
    """CUipcMemHandle: 64 opaque bytes, passed BY VALUE to cuIpcOpenMemHandle."""
    _fields_ = [("reserved", ctypes.c_char * 64)]


class _Cuda:
    """The few CUDA driver calls arenas need (the judge's and the runner's own code, never a
    candidate's). The primary context torch made current on this thread is the one used."""
    _lib = None

    @classmethod
    def lib(cls):
        if cls._lib is None:
            lib = ctypes.CDLL("libcuda.so.1")
            u64p = ctypes.POINTER(ctypes.c_uint64)
            sig = {"cuMemAlloc_v2": [u64p, ctypes.c_size_t], "cuMemFree_v2": [ctypes.c_uint64],
                   "cuIpcGetMemHandle": [ctypes.POINTER(IpcHandle), ctypes.c_uint64],
                   "cuIpcOpenMemHandle_v2": [u64p, IpcHandle, ctypes.c_uint],
                   "cuIpcCloseMemHandle": [ctypes.c_uint64]}
            for name, args in sig.items():
                f = getattr(lib, name)
                f.restype = ctypes.c_int
                f.argtypes = args
            cls._lib = lib
        return cls._lib

    @classmethod
    def check(cls, rc, what):
        if rc != 0:
            raise RuntimeError(f"CUDA driver call {what} failed with error {rc}")


class _Iface:
    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
                                         "version": 3, "strides": None}


def _wrap_cuda(ptr: int, nbytes: int) -> torch.Tensor:
    return torch.as_tensor(_Iface(ptr, nbytes), device="cuda")


def _layout(specs: dict) -> tuple[dict, int]:
    refs, off = {}, 0
    for key, (shape, dt) in specs.items():
        n = 1
        for s in shape:
            n *= int(s)
        nbytes = n * torch.empty((), dtype=dt).element_size()
        refs[key] = TensorRef(off, [int(s) for s in shape], dtype_name(dt))
        off += (nbytes + ALIGN - 1) // ALIGN * ALIGN or ALIGN
    return refs, max(off, ALIGN)


def views(buf: torch.Tensor, refs: dict) -> dict:
    """key -> a contiguous tensor viewing `buf` (uint8) at the reference's offset."""
    out = {}
    for key, r in refs.items():
        dt = dtype_of(r.dtype)
        n = 1
        for s in r.shape:
            n *= s
        nb = n * torch.empty((), dtype=dt).element_size()
        if r.offset + nb > buf.numel():
            raise ValueError(f"tensor {key} ({r.offset}+{nb} bytes) lies outside the arena ({buf.numel()} bytes)")
        out[key] = buf[r.offset:r.offset + nb].view(dt).view(r.shape)
    return out


class JudgeArena:
    """Judge side: allocate, describe for the runner, free."""

    def __init__(self, specs: dict, gpu: bool, scratch: str, tag: str):
        self.refs, size = _layout(specs)
        self.gpu = gpu
        self._ptr = None
        if gpu:
            size = (size + GPU_GRANULE - 1) // GPU_GRANULE * GPU_GRANULE
            lib = _Cuda.lib()
            ptr = ctypes.c_uint64()
            _Cuda.check(lib.cuMemAlloc_v2(ctypes.byref(ptr), size), "cuMemAlloc")
            self._ptr = ptr.value
            handle = IpcHandle()
            _Cuda.check(lib.cuIpcGetMemHandle(ctypes.byref(handle), self._ptr), "cuIpcGetMemHandle")
            self.buf = _wrap_cuda(self._ptr, size)
            raw = ctypes.string_at(ctypes.addressof(handle), 64)  # (.reserved would stop at a NUL)
            self.desc = Arena("cuda_ipc", size, ipc={"handle": base64.b64encode(raw).decode()})
        else:
            path = os.path.join(scratch, f"arena-{tag}.bin")
            self.buf = torch.from_file(path, shared=True, size=size, dtype=torch.uint8)
            self.desc = Arena("file", size, path=path)
            self.path = path
        self.nbytes = size
        self.t = views(self.buf, self.refs)

    def free(self):
        self.t = {}
        self.buf = None
        if self._ptr is not None:
            torch.cuda.synchronize()
            _Cuda.lib().cuMemFree_v2(self._ptr)
            self._ptr = None
        elif getattr(self, "path", None):
            try:
                os.unlink(self.path)
            except OSError:
                pass


class RunnerArena:
    """Runner side: map what the judge described."""

    def __init__(self, desc: Arena, refs: dict):
        self._ptr = None
        if desc.kind == "file":
            self.buf = torch.from_file(desc.path, shared=True, size=desc.nbytes, dtype=torch.uint8)
        else:
            raw = base64.b64decode(desc.ipc["handle"])
            if len(raw) != 64:
                raise ValueError("a CUDA IPC handle has 64 bytes")
            handle = IpcHandle.from_buffer_copy(raw)
            ptr = ctypes.c_uint64()
            lib = _Cuda.lib()
            # CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1
            _Cuda.check(lib.cuIpcOpenMemHandle_v2(ctypes.byref(ptr), handle, 1), "cuIpcOpenMemHandle")
            self._ptr = ptr.value
            self.buf = _wrap_cuda(self._ptr, desc.nbytes)
        self.t = views(self.buf, refs)

    def close(self):
        self.t = {}
        self.buf = None
        if self._ptr is not None:
            torch.cuda.synchronize()
            _Cuda.lib().cuIpcCloseMemHandle(self._ptr)
            self._ptr = None
