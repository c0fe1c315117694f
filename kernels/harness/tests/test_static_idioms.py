"""Honest idioms pass, capabilities do not (issue 25): one snippet per class of construct, written
for this project (the public corpus itself is test_static_corpus.py). Every refusal names a rule
and a fix."""
import pytest

from harness.static_check import check_source

H = "import torch\nimport triton\nimport triton.language as tl\n"

HONEST = {
    "driver and target queries": H + (
        "DEVICE = triton.runtime.driver.active.get_active_torch_device()\n"
        "def is_hip():\n    return triton.runtime.driver.active.get_current_target().backend == 'hip'\n"
        "props = triton.runtime.driver.active.utils.get_device_properties(0)\nNUM_SM = props['multiprocessor_count']\n"
        "from triton.runtime import driver\nt = driver.active.get_current_target()\n"
        "from triton.runtime.driver import driver as d2\nd2.active.get_current_device()\n"),
    "autograd.Function wrapper": H + (
        "from torch.autograd.function import once_differentiable\n"
        "class F(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x):\n"
        "        ctx.save_for_backward(x)\n        return x\n    @staticmethod\n    @once_differentiable\n"
        "    def backward(ctx, g):\n        (x,) = ctx.saved_tensors\n        return g\n"),
    "version checks": H + (
        "from packaging import version\nNEW = version.parse(triton.__version__) >= version.parse('3.0')\n"
        "from packaging.version import Version\nT24 = Version(torch.__version__) > Version('2.4')\n"
        "HIP = torch.version.hip is not None\nCU = torch.version.cuda\n"),
    "stdlib helpers": H + (
        "import operator, warnings, contextlib, enum, heapq, functools, math, itertools\n"
        "from collections.abc import Sequence\nfrom typing import TYPE_CHECKING, Optional\n"
        "if TYPE_CHECKING:\n    pass\nclass K(enum.Enum):\n    A = 1\nwarnings.warn('x')\nx = operator.ge(1, 2)\n"
        "heapq.heappush([], 1)\n@functools.lru_cache(maxsize=None)\ndef f(n):\n    return math.ceil(n)\n"
        "with contextlib.nullcontext():\n    pass\nimport logging\nlogger = logging.getLogger(__name__)\n"),
    "device context and other backends": H + (
        "def f(x):\n    with torch.cuda.device(x.device.index):\n        pass\n"
        "if torch.xpu.is_available():\n    pass\nlib = torch.xpu if torch.xpu.is_available() else torch.cuda\n"
        "n = lib.device_count()\nwith lib.device(0):\n    pass\n"),
    "TMA allocator": H + ("def alloc_fn(size, alignment, stream):\n"
                          "    return torch.empty(size, device='cuda', dtype=torch.int8)\ntriton.set_allocator(alloc_fn)\n"),
    "amp decorators": H + (
        "@torch.amp.custom_fwd(device_type='cuda')\ndef f(ctx, x):\n    return x\nimport functools\n"
        "fwd = functools.partial(torch.amp.custom_fwd, device_type='cuda')\n@torch.cuda.amp.custom_bwd\n"
        "def g(ctx, x):\n    return x\n"),
    "feature probes": H + ("HAS = hasattr(tl, 'make_tensor_descriptor')\nfdiv = getattr(tl, 'fdiv', None)\n"
                           "if hasattr(triton.language, '_experimental_make_tensor_descriptor'):\n"
                           "    mk = triton.language._experimental_make_tensor_descriptor\n"),
    "Triton's environment knobs": H + (
        "import os\nINTERP = os.environ.get('TRITON_INTERPRET', '0') == '1'\nx = os.getenv('TRITON_DEBUG')\n"
        "y = os.environ['TRITON_CACHE_DIR'] if 'TRITON_CACHE_DIR' in os.environ else None\n"
        "def z(s):\n    return os.environ.get(f'TRITON_AUTOTUNE_{s}')\n"),
    "host-side elementwise functional": H + (
        "import torch.nn.functional as F\ndef f(x, w):\n    return F.pad(F.silu(x), (0, 1)) + F.layer_norm(x, w.shape)\n"),
    "annotations and isinstance read classes": H + (
        "from typing import Optional\n"
        "def f(x: torch.LongTensor, y: Optional[torch.FloatTensor] = None) -> 'torch.Tensor':\n"
        "    return isinstance(x, (torch.Tensor, torch.nn.Parameter))\n"),
    "locals named like builtins": H + ("def f(input, id=None):\n    return input + id\n"
                                       "def g(x):\n    input = x\n    return input\n"),
    "imports in several branches": H + (
        "try:\n    from triton.language.extra.libdevice import tanh\nexcept ImportError:\n"
        "    from triton.language.math import tanh\n@triton.jit\ndef k(x):\n    return tanh(x)\n"),
    "compiler.disable, literal str.format, nn.Module": H + (
        "@torch.compiler.disable\ndef f(x):\n    return '{} {:.2f} {name!r}'.format(1, 2.0, name='x')\n"
        "class M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.w = torch.nn.Parameter(torch.ones(3))\n        self._cache = {}\n"
        "    def _get(self):\n        return self._cache\n"),
    "autotune with harmless keywords": H + (
        "def hook(nargs):\n    nargs['y'].zero_()\n"
        "@triton.autotune(configs=[triton.Config({'B': 32}, num_warps=4, pre_hook=hook)], key=['n'],\n"
        "                 reset_to_zero=['y'], warmup=5, rep=20, use_cuda_graph=False, cache_results=True)\n"
        "@triton.jit\ndef k(x, y, n, B: tl.constexpr):\n    pass\n"),
    "compiled kernel metadata": H + ("@triton.jit\ndef k(x, B: tl.constexpr):\n    pass\n"
                                     "kernel = k.warmup(1, B=16, grid=(1,))\nkernel._init_handles()\n"
                                     "n_regs = kernel.n_regs\n"),
    "matmul inside a Triton kernel": H + ("@triton.jit\ndef k(a, b):\n    return a @ b\n"),
    "gluon": ("from triton.experimental import gluon\nfrom triton.experimental.gluon import language as gl\n"
              "L = gl.BlockedLayout\n@gluon.jit\ndef k(x):\n    pass\n"),
    "inline PTX": H + ("@triton.jit\ndef cos_approx(x):\n    return tl.inline_asm_elementwise(\n"
                       "        'cos.approx.f32 $0, $1;', constraints='=f,f', args=[x], dtype=tl.float32,\n"
                       "        is_pure=True, pack=1)\n"),
    "wrap_triton": H + ("@triton.jit\ndef k(x):\n    pass\ndef f(x):\n    torch.library.wrap_triton(k)[(1,)](x)\n"),
}

CAPABILITIES = [
    ("environment variable by another name", "import os\nx = os.environ.get('KERNELD_SECRET')\n", "io"),
    ("environment write", "import os\nos.environ['TRITON_X'] = '1'\n", "io"),
    ("other os paths", "import os\np = os.path.join('a', 'b')\n", "io"),
    ("driver benchmarker", H + "b = triton.runtime.driver.active.get_benchmarker()\n", "timer"),
    ("driver loader", H + "m = triton.runtime.driver.active.utils.load_binary\n", "allow-list"),
    ("driver object passed on", H + "def f(d):\n    return d\nf(triton.runtime.driver)\n", "allow-list"),
    ("tuning in CUDA graphs", H + "@triton.autotune(configs=[], key=[], use_cuda_graph=True)\n@triton.jit\n"
                                  "def k(x):\n    pass\n", "concurrency"),
    ("own tuner timer", H + "def b(fn, quantiles=None):\n    return 1.0\n"
                            "@triton.autotune(configs=[], key=[], do_bench=b)\n@triton.jit\ndef k(x):\n    pass\n",
     "timer"),
    ("unseen tuner keywords", H + "kw = {'use_cuda_graph': True}\n@triton.autotune(configs=[], key=[], **kw)\n"
                                  "@triton.jit\ndef k(x):\n    pass\n", "allow-list"),
    ("tuner keywords through partial", H + "import functools\n"
                                           "at = functools.partial(triton.autotune, use_cuda_graph=True)\n",
     "concurrency"),
    ("IR from a file", H + "c = triton.Config({}, ir_override='/tmp/x.ttgir')\n", "io"),
    ("custom op (dispatch hook)", H + "@torch.library.custom_op('x::y', mutates_args=())\n"
                                      "def f(x: torch.Tensor) -> torch.Tensor:\n    return x\n", "introspection"),
    ("__torch_function__", H + "class T:\n    @classmethod\n    def __torch_function__(cls, func, types, args=(), "
                               "kwargs=None):\n        return func(*args)\n", "introspection"),
    ("frames", "import inspect\nf = inspect.currentframe()\n", "introspection"),
    ("multiprocessing import", "import torch.multiprocessing as mp\n", "concurrency"),
    ("subprocess", "import subprocess\nsubprocess.run(['id'])\n", "concurrency"),
    ("Triton module's foreign re-export", H + "tl.extra.modules['subprocess'].run(['id'])\n", "introspection"),
    ("attribute by computed name", H + "def f(name):\n    return getattr(torch, name)\n", "introspection"),
    ("builtin used before a module-level rebinding", "x = open('/etc/passwd')\nopen = None\n", "io"),
    ("a local getattr is not the builtin", H + "def f():\n    getattr = lambda m, n: m\n"
                                               "    return getattr(tl.core, 'x')\n", "introspection"),
    ("a local isinstance may call its argument", H + "def f(a):\n    isinstance = lambda x, g: g(x, x)\n"
                                                     "    return isinstance(a, torch.matmul)\n", "torch-heavy-math"),
    ("nested literal getattr", H + "m = getattr(getattr(tl, 'core'), 'inspect')\n", "introspection"),
    ("class swap", H + "def f(t, C):\n    t.__class__ = C\n", "introspection"),
    ("private internals of objects", H + "def f(t):\n    return t._version\n", "introspection"),
    ("private internals of a listed class", H + "c = triton.runtime.jit.JITFunction._do_compile\n", "introspection"),
    ("format string reading attributes", "def f(g):\n    return '{0.__globals__}'.format(g)\n", "introspection"),
    ("heavy math through an alias", H + "mm = torch.matmul\ny = mm(1, 2)\n", "torch-heavy-math"),
    ("matmul outside a kernel", "def f(a, b):\n    return a @ b\n", "torch-heavy-math"),
    ("distributed", "from torch.distributed.tensor import DTensor\n", "concurrency"),
    ("CUDA graph", H + "g = torch.cuda.CUDAGraph()\n", "concurrency"),
    ("side stream", H + "s = torch.cuda.Stream()\n", "concurrency"),
    ("logging to a file", "import logging\nh = logging.FileHandler('/tmp/x')\n", "io"),
    ("autocast switched", H + "with torch.autocast('cuda'):\n    pass\n", "introspection"),
    ("a clock read in inline PTX", H + "@triton.jit\ndef k(x):\n    return tl.inline_asm_elementwise("
                                       "'mov.u64 $0, %globaltimer;', '=l', [x], dtype=tl.int64, is_pure=False, "
                                       "pack=1)\n", "timer"),
    ("inline assembly built at run time", H + "A = 'cos.approx.f32 $0, $1;'\n@triton.jit\ndef k(x):\n"
                                              "    return tl.inline_asm_elementwise(A, '=f,f', [x], "
                                              "dtype=tl.float32, is_pure=True, pack=1)\n", "allow-list"),
]


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_idiom_passes(name):
    assert check_source(HONEST[name]) == [], [str(v) for v in check_source(HONEST[name])]


@pytest.mark.parametrize("name,src,rule", CAPABILITIES, ids=[c[0] for c in CAPABILITIES])
def test_capability_is_refused_with_a_fix(name, src, rule):
    vs = check_source(src)
    assert vs and vs[0].rule == rule, [str(v) for v in vs]
    assert all(v.fix and v.line >= 1 for v in vs), [str(v) for v in vs]


def test_private_internals_anywhere_in_a_chain():
    assert [v.rule for v in check_source("def f(t):\n    return t._base.shape\n")] == ["introspection"]
    assert check_source("class A:\n    def __init__(self):\n        self._b = 1\n    def f(self):\n"
                        "        return self._b.real\n") == []
