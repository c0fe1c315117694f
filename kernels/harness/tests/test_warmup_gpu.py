"""warmup.compile_only on a real GPU (skipped without one; the device run of issue #12 runs it):
a launch inside compiles and caches its kernel and runs nothing; an autotuner compiles every
config and picks none; the launch after it compiles nothing and computes the right result."""
import os
import time

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1",
                                reason="needs a GPU and compiled Triton")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from harness import warmup  # noqa: E402


@triton.jit
def _plus_one(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1.0, mask=i < n)


@triton.autotune(configs=[triton.Config({"BLOCK": 128}), triton.Config({"BLOCK": 256})], key=["n"])
@triton.jit
def _plus_two(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + i, tl.load(x_ptr + i, mask=i < n) + 2.0, mask=i < n)


def _cached(fn) -> int:
    return sum(len(c[0]) for c in fn.device_caches.values())


def test_a_launch_under_compile_only_compiles_and_runs_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    compiles = []
    real_compile = _plus_one._do_compile
    monkeypatch.setattr(_plus_one, "_do_compile", lambda *a, **k: compiles.append(1) or real_compile(*a, **k))
    n = 1000
    x = torch.zeros(n, device="cuda")
    out = torch.full((n,), -5.0, device="cuda")
    before = _cached(_plus_one)
    t0 = time.perf_counter()
    with warmup.compile_only():
        _plus_one[(triton.cdiv(n, 64),)](x, out, n, BLOCK=64)
    compile_s = time.perf_counter() - t0
    torch.cuda.synchronize()
    assert _cached(_plus_one) == before + 1
    assert torch.all(out == -5.0), "a kernel ran under compile_only"
    t1 = time.perf_counter()
    _plus_one[(triton.cdiv(n, 64),)](x, out, n, BLOCK=64)
    torch.cuda.synchronize()
    launch_s = time.perf_counter() - t1
    assert torch.all(out == 1.0)
    assert _cached(_plus_one) == before + 1, "the real launch compiled again"
    # Triton's compiler ran once, under compile_only, and not for the launch. (Comparing the two
    # durations said nothing: on the H200 the first real launch builds the kernel's C launcher,
    # 230 ms, while a small kernel compiles in 50 ms; 2026-12-03.)
    assert len(compiles) == 1
    print(f"compile {compile_s * 1e3:.1f} ms, launch after it {launch_s * 1e3:.2f} ms")


def test_an_autotuner_compiles_every_config_and_keeps_no_pick():
    n = 4096
    x = torch.zeros(n, device="cuda")
    out = torch.full((n,), -5.0, device="cuda")
    with warmup.compile_only():
        _plus_two[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, out, n)
    torch.cuda.synchronize()
    assert _cached(_plus_two.fn) == 2
    assert not _plus_two.cache, "a pick made on compile-only timings would stick"
    assert torch.all(out == -5.0)
    _plus_two[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, out, n)
    torch.cuda.synchronize()
    assert torch.all(out == 2.0) and len(_plus_two.cache) == 1
