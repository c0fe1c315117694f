"""Static rules: each family fires with its rule name and line; honest sources pass."""
import pytest
from hpaths import DEMO

from harness.static_check import check_source


def rules(src, **kw):
    return [(v.rule, v.line) for v in check_source(src, **kw)]


def test_seed_passes():
    assert check_source((DEMO / "seeds" / "tiled.py").read_text()) == []


@pytest.mark.parametrize("src,rule", [
    ("import flash_attn", "banned-import"),
    ("from fla.ops import chunk_kda", "banned-import"),
    ("import importlib\nm = importlib.import_module('x')", "banned-import"),
    ("x = eval('1')", "banned-import"),
    ("import scipy", "banned-import"),
    ("import torch\ny = torch.einsum('ij,jk->ik', a, b)", "torch-heavy-math"),
    ("import torch.nn.functional as F\ny = F.scaled_dot_product_attention(q, k, v)", "torch-heavy-math"),
    ("y = a @ b", "torch-heavy-math"),
    ("y = q.softmax(-1)", "torch-heavy-math"),
    ("from torch import bmm", "torch-heavy-math"),
    ("import torch\nf = torch.compile(g)", "torch-heavy-math"),
    ("import inspect", "introspection"),
    ("import torch\ntorch.cuda.synchronize = None", "introspection"),
    ("g = globals()", "introspection"),
    ("x = f.__globals__", "introspection"),
    ("import torch\nclass T(torch.Tensor):\n    pass", "introspection"),
    ("def __torch_function__(cls, func, types, args=(), kwargs=None):\n    pass", "introspection"),
    ("import torch\nx = torch._C._cuda_getCurrentStream", "introspection"),
    ("import subprocess", "concurrency"),
    ("import torch\ns = torch.cuda.Stream()", "concurrency"),
    ("import asyncio", "concurrency"),
    ("import os\nos.system('id')", "io"),
    ("import sys", "io"),
    ("f = open('x')", "io"),
    ("import pickle", "io"),
    ("import time", "timer"),
    ("import torch\ne = torch.cuda.Event(enable_timing=True)", "timer"),
    ("from triton.testing import do_bench", "timer"),
])
def test_rule_fires(src, rule):
    found = rules(src)
    assert found, src
    assert found[0][0] == rule, found
    assert found[0][1] >= 1


def test_task_banned_calls():
    assert rules("import torch\nc = torch.addmm(c, a, b)", banned_calls=["addmm"])[0][0] == "torch-heavy-math"
    assert rules("c = x.cumsum(0)", banned_calls=["cumsum"])[0][0] == "torch-heavy-math"
    assert rules("c = x.cumsum(0)") == []


def test_triton_language_is_allowed():
    src = ("import triton\nimport triton.language as tl\n@triton.jit\ndef k(x):\n"
           "    a = tl.dot(x, x)\n    b = tl.softmax(a)\n    c = tl.sum(b, 0)\n")
    assert rules(src) == []


def test_line_numbers_and_message():
    vs = check_source("import torch\n\n\nimport threading\n")
    assert str(vs[0]).startswith("rejected [concurrency] line 4:")


def test_syntax_error():
    assert rules("def f(:\n")[0][0] == "syntax"


@pytest.mark.parametrize("src,rule", [
    ("import torch\nx = torch.os.environ", "io"),
    ("import numpy as np\nlib = np.ctypeslib", "introspection"),
    ("import triton\ntriton.runtime.build.subprocess.run(['id'])", "concurrency"),
    ("import numpy as np\nnp.testing.socket.create_connection(('127.0.0.1', 1))", "io"),
    ("import torch\nt = torch.empty(1)\nt.numpy().ctypes.data", "introspection"),
    ("import typing\ndef f(x: \"__import__('os')\"):\n    pass\ntyping.get_type_hints(f)", "introspection"),
    ("def f(g):\n    match g:\n        case object(__globals__=x):\n            pass", "introspection"),
    ("def f(g):\n    return '{0.__globals__}'.format(g)", "introspection"),
    ("import torch\nx = torch.conv_tbc", "torch-heavy-math"),
    ("import torch\nx = torch.nn.functional.embedding_bag", "torch-heavy-math"),
    ("import torch\ntorch.set_autocast_enabled(True)", "introspection"),
    ("import triton\nx = triton.knobs", "allow-list"),
])
def test_allow_list_rejects(src, rule):
    found = rules(src)
    assert found and found[0][0] == rule, found


@pytest.mark.parametrize("src", [
    "import torch\nx = torch.empty((2, 2), dtype=torch.bfloat16, device='cuda')",
    "import triton\nimport triton.language as tl\n@triton.jit\ndef k(x, B: tl.constexpr):\n    tl.store(x, tl.zeros((B,), tl.float32))",
    "from triton.experimental import gluon\nfrom triton.experimental.gluon import language as gl\nL = gl.BlockedLayout",
    "import math\nx = math.ceil(math.log2(7))",
    "import torch\np = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count",
])
def test_allow_list_accepts(src):
    assert rules(src) == []


# Red team, session 4 (NOTES.md): Triton's language modules re-export the interpreter's
# (tl.core.builtins / inspect / typing, tl.extra.pkgutil / module_from_spec, tl.core.knobs / ir),
# modules bound to names escape path resolution, and ndarray methods write files.
_TL = "import triton\nimport triton.language as tl\nimport numpy as np\n"


@pytest.mark.parametrize("src,rule", [
    (_TL + "x = tl.core.builtins.open('/etc/passwd')", "introspection"),
    (_TL + "x = tl.core.inspect.stack()", "introspection"),
    (_TL + "from triton.language.core import inspect as q", "introspection"),
    (_TL + "from triton.language import core\nx = core.inspect.linecache", "introspection"),
    (_TL + "f = tl.extra.pkgutil.resolve_name('subprocess.run')", "banned-import"),
    (_TL + "f = tl.extra.module_from_spec", "banned-import"),
    (_TL + "f = tl.core.contextmanager", "introspection"),
    (_TL + "d = tl.core.knobs.cache.dir", "allow-list"),
    (_TL + "c = tl.core.ir.context()", "allow-list"),
    (_TL + "core = tl.core\nx = core.inspect.stack()", "introspection"),
    (_TL + "def f(m):\n    return m\ng = f(tl.core)", "introspection"),
    (_TL + "mods = [np]", "introspection"),
    (_TL + "def f(a):\n    a.numpy().tofile('/tmp/x')", "io"),
    (_TL + "def f(a):\n    b = np.zeros(3)\n    b.dump('/tmp/x')", "io"),
])
def test_reexports_and_escaping_modules_are_refused(src, rule):
    found = rules(src)
    assert found and found[0][0] == rule, found


def test_triton_language_paths_honest_code_uses_still_pass():
    src = (_TL + "from triton.language.extra import libdevice\n@triton.jit\ndef k(x, BLOCK: tl.constexpr):\n"
           "    o = tl.arange(0, BLOCK)\n    v = tl.load(x + o).to(tl.float32)\n    v = tl.math.exp2(v) + libdevice.exp(v)\n"
           "    v = tl.extra.cuda.libdevice.exp(v) + tl.core.math.sqrt(2.0)\n    tl.store(x + o, v)\n"
           "y = tl.float16.primitive_bitwidth\n")
    assert rules(src) == []


def test_the_judge_checks_a_source_once_and_keeps_the_verdict(monkeypatch):
    """A search goal sends one seed source with every configuration: its verdict is kept
    (issue #12), per source and rules; another source or other rules are checked again."""
    from harness import evaluate as ev
    from harness import static_check
    from harness.taskload import load_task
    from hpaths import DEMO
    task = load_task(DEMO)
    calls = []
    real = static_check.check_source
    monkeypatch.setattr(static_check, "check_source", lambda src, banned: calls.append(src) or real(src, banned))
    monkeypatch.setattr(ev, "_STATIC", {})
    good = (DEMO / "seeds" / "tiled.py").read_text()
    bad = good + "\nimport threading\n"
    assert ev._static(good, task) is None and ev._static(good, task) is None
    assert ev._static(bad, task) and ev._static(bad, task)
    assert len(calls) == 2
    monkeypatch.setenv("KERNELD_STATIC_ALLOW_IMPORTS", "threading")
    assert ev._static(bad, task) is None and len(calls) == 3
