"""Property fuzz of the static rules (issue 25): for random sources (snippets built from a small
grammar, mutations of real candidates) and random dotted paths into torch/triton/numpy in every
position a candidate can put them, the checker (a) raises nothing and (b) runs nothing: no
property or module `__getattr__` is called, no module is imported.

Seeded and bounded: KERNELD_FUZZ_SECONDS (default 8) and KERNELD_FUZZ_SEED (default: a fixed seed;
`random` picks a new one and prints it). A failure prints the source that caused it.
"""
import ast
import os
import random
import sys
import time
import types

import pytest
from hpaths import ADV, DEMO, KERNELS

from harness import static_check
from harness import static_resolve as R

SECONDS = float(os.environ.get("KERNELD_FUZZ_SECONDS", "8"))
_SEED = os.environ.get("KERNELD_FUZZ_SEED", "25")
SEED = random.randrange(1 << 30) if _SEED == "random" else int(_SEED)
BANNED = [[], ["addmm", "baddbmm"], ["logsumexp", "exp", "exp2"], ["cumsum", "tril", "linalg", "solve_triangular"]]
ROOTS = {"torch": "torch", "triton": "triton", "tl": "triton.language", "np": "numpy", "F": "torch.nn.functional",
         "libdevice": "triton.language.extra.libdevice", "gl": "triton.experimental.gluon.language", "math": "math",
         "os": "os", "functools": "functools", "typing": "typing"}
JUNK = ["__globals__", "__class__", "__dict__", "__getattr__", "_C", "os", "sys", "environ", "system", "_private",
        "fuzzprobe", "missing_name", "active", "utils", "get_current_target", "format", "mro", "data_ptr", "jit",
        "matmul", "cumsum", "exp", "Stream", "Event", "graph", "library", "custom_op", "__version__", "modules",
        "builtins", "inspect", "ctypes", "load_binary", "get_benchmarker", "knobs", "__subclasses__", "ir"]


class Probe:
    """Records every call of a property getter or module `__getattr__` the fuzz installs."""

    def __init__(self):
        self.calls = []

    def prop(self, tag):
        def get(obj):
            self.calls.append(tag)
            raise RuntimeError(f"{tag} was evaluated")
        return property(get)

    def module_getattr(self, tag):
        def __getattr__(name):
            self.calls.append(f"{tag}.__getattr__({name})")
            raise AttributeError(name)
        return __getattr__


@pytest.fixture
def probe(monkeypatch):
    """Tripwires on objects candidates can name: the driver's `active` property (the one that
    built Triton's CUDA driver and failed in CPU mode), a property on classes whose instances
    are reachable (tl.dtype, triton.Config, torch.cuda.device), module `__getattr__` hooks."""
    import torch
    import triton
    import triton.language as tl
    from triton.runtime.driver import DriverConfig
    p = Probe()
    monkeypatch.setattr(DriverConfig, "active", p.prop("DriverConfig.active"))
    for cls in (tl.dtype, triton.Config, torch.cuda.device, tl.constexpr):
        monkeypatch.setattr(cls, "fuzzprobe", p.prop(f"{cls.__name__}.fuzzprobe"), raising=False)
    for mod in (sys.modules["triton.language.extra.cuda"], sys.modules["triton.runtime"], torch.version):
        monkeypatch.setattr(mod, "__getattr__", p.module_getattr(mod.__name__), raising=False)
    return p


def _names(mod_name, rnd):
    """Names found statically in a module/class (never through getattr), and some junk."""
    obj = sys.modules.get(mod_name)
    names = list(JUNK)
    if obj is not None:
        try:
            names += list(R._MODULE_DICT.__get__(obj))
        except Exception:  # noqa: BLE001
            pass
    return names


def random_path(rnd):
    alias = rnd.choice(list(ROOTS))
    parts = [alias]
    mod = ROOTS[alias]
    for _ in range(rnd.randint(0, 5)):
        name = rnd.choice(_names(mod, rnd))
        if not isinstance(name, str) or not name.isidentifier():
            name = "x"
        parts.append(name)
        nxt = f"{mod}.{name}"
        mod = nxt if nxt in sys.modules else mod
    return alias, ".".join(parts)


def path_snippet(rnd):
    alias, path = random_path(rnd)
    imports = "import torch\nimport triton\nimport triton.language as tl\nimport numpy as np\n" \
              "import torch.nn.functional as F\nfrom triton.language.extra import libdevice\nimport math, os\n" \
              "import functools, typing\nfrom triton.experimental.gluon import language as gl\n"
    last = path.rsplit(".", 1)
    uses = [
        f"x = {path}", f"x = {path}(1, 2)", f"def f(a: {path}) -> {path}:\n    return a", f"y = isinstance(1, {path})",
        f"y = hasattr({path}, 'n')", f"y = getattr({path}, 'n', None)", f"y = getattr({last[0]}, {last[-1]!r})",
        f"{path} = 1", f"del {path}", f"@{path}\ndef g():\n    pass", f"class C({path}):\n    pass",
        f"with {path}():\n    pass", f"f({path})", f"z = [{path}]", f"import {path.replace(alias, ROOTS[alias], 1)}",
        f"from {ROOTS[alias]} import {last[-1]}", f"q = {path}\nq.a.b()", f"x: '{path}' = 1",
        f"y = {path}.format(1)", f"y = {path}[0]", f"y = {path} if 1 else {path}", f"match x:\n    case {path}():\n"
        f"        pass", f"@triton.jit\ndef k(a):\n    return {path}(a)", f"os.environ.get({path!r})",
        f"y = functools.partial({path}, use_cuda_graph=True)", f"triton.autotune(configs=[], key=[], do_bench={path})",
    ]
    return imports + "\n".join(rnd.sample(uses, rnd.randint(1, 4))) + "\n"


_LEAVES = ["x", "y", "input", "id", "open", "getattr", "self", "torch", "tl", "triton", "os", "1", "'s'", "None",
           "'TRITON_X'", "f'{x}'", "...", "b'b'", "__import__", "globals", "type", "object", "super"]


def expr(rnd, depth=0):
    if depth > 4 or rnd.random() < 0.3:
        return rnd.choice(_LEAVES)
    e = lambda: expr(rnd, depth + 1)  # noqa: E731
    forms = [
        lambda: f"{e()}.{rnd.choice(JUNK)}", lambda: f"{e()}({e()}, k={e()})", lambda: f"{e()}[{e()}]",
        lambda: f"({e()} @ {e()})", lambda: f"(lambda a, input=1: {e()})", lambda: f"[{e()} for input in {e()}]",
        lambda: f"{{{e()}: {e()}}}", lambda: f"({e()} if {e()} else {e()})", lambda: f"(w := {e()})",
        lambda: f"getattr({e()}, {e()})", lambda: f"hasattr({e()}, 'n')", lambda: f"f'{{{e()}!r:>{{{e()}}}}}'",
        lambda: f"not {e()}", lambda: f"({e()}, *{e()})", lambda: f"{e()} in {e()}", lambda: f"-{e()}",
        lambda: f"'{{0.x}}'.format({e()})", lambda: f"type({e()}, {e()}, {e()})", lambda: f"setattr({e()}, 'a', 1)",
    ]
    return rnd.choice(forms)()


def stmt(rnd, depth=0, indent=""):
    if depth > 3 or rnd.random() < 0.35:
        simple = [f"x = {expr(rnd)}", f"{expr(rnd)}", f"del x", f"x += {expr(rnd)}", f"x.{rnd.choice(JUNK)} = 1",
                  "global y", "import os", "from torch import cuda", "return x", "pass", f"assert {expr(rnd)}",
                  f"raise {expr(rnd)}", f"x: {expr(rnd)} = 1", "nonlocal x", f"await {expr(rnd)}",
                  "from triton.language import *", "from . import x", "import torch.utils.cpp_extension as c"]
        return indent + rnd.choice(simple) + "\n"
    body = lambda: "".join(stmt(rnd, depth + 1, indent + "    ") for _ in range(rnd.randint(1, 3)))  # noqa: E731
    name = rnd.choice(["f", "__torch_function__", "__getattr__", "input", "_k", "__init__"])
    forms = [
        lambda: f"{indent}def {name}(input, id=1, *a, **k):\n{body()}",
        lambda: f"{indent}@triton.jit\n{indent}def {name}(a):\n{body()}",
        lambda: f"{indent}class C({expr(rnd)}):\n{body()}",
        lambda: f"{indent}if {expr(rnd)}:\n{body()}{indent}else:\n{body()}",
        lambda: f"{indent}for input in {expr(rnd)}:\n{body()}",
        lambda: f"{indent}with {expr(rnd)} as id:\n{body()}",
        lambda: f"{indent}try:\n{body()}{indent}except {expr(rnd)} as input:\n{body()}",
        lambda: f"{indent}match {expr(rnd)}:\n{indent}    case {{'a': x, **rest}}:\n{body()}",
        lambda: f"{indent}async def a():\n{body()}",
    ]
    return rnd.choice(forms)()


def grammar_snippet(rnd):
    return "import torch\nimport triton\nimport triton.language as tl\n" + \
        "".join(stmt(rnd) for _ in range(rnd.randint(1, 4)))


_REAL = [p.read_text() for p in sorted((KERNELS / "harness" / "tests" / "hostile").glob("*.py"))
         + sorted(ADV.glob("*.py")) + [DEMO / "seeds" / "tiled.py"]]


def mutated_snippet(rnd):
    """A real candidate with lines dropped, duplicated, swapped or re-indented: mostly broken code."""
    lines = rnd.choice(_REAL).splitlines()
    for _ in range(rnd.randint(1, 6)):
        if not lines:
            break
        i, j = rnd.randrange(len(lines)), rnd.randrange(len(lines))
        op = rnd.randrange(4)
        if op == 0:
            del lines[i]
        elif op == 1:
            lines.insert(i, lines[j])
        elif op == 2:
            lines[i], lines[j] = lines[j], lines[i]
        else:
            lines[i] = "    " + lines[i]
    return "\n".join(lines) + "\n"


def deep_snippet(rnd):
    n = rnd.choice([50, 500, 5000])
    return rnd.choice([f"x = {'(' * n}1{')' * n}\n", "x = " + " + ".join(["1"] * n) + "\n",
                       "x = " + "a." * n + "b\n", "x = " + "[" * n + "]" * n + "\n", "\0import os\n",
                       "def f():\n" + "".join("    " * (k + 1) + "if x:\n" for k in range(min(n, 90))) + "    " * 92 + "pass\n"])


GENERATORS = [path_snippet, path_snippet, grammar_snippet, mutated_snippet, deep_snippet]


def test_fuzz_the_checker_raises_nothing_and_runs_nothing(probe, capsys):
    rnd = random.Random(SEED)
    t0, n, outcomes = time.monotonic(), 0, {"accepted": 0, "rejected": 0}
    modules_before = set(sys.modules)
    while time.monotonic() - t0 < SECONDS:
        src = rnd.choice(GENERATORS)(rnd)
        banned = rnd.choice(BANNED)
        try:
            vs = static_check._check(src, banned, ())
        except Exception as e:  # noqa: BLE001 - the property under test
            pytest.fail(f"seed {SEED}, case {n}: {type(e).__name__}: {e}\n--- source ---\n{src}")
        assert not probe.calls, f"seed {SEED}, case {n}: ran {probe.calls}\n--- source ---\n{src}"
        assert all(v.rule and v.fix for v in vs), vs
        outcomes["rejected" if vs else "accepted"] += 1
        n += 1
    assert set(sys.modules) == modules_before, f"the checker imported {set(sys.modules) - modules_before}"
    assert n >= 100, f"only {n} cases in {SECONDS} s"
    with capsys.disabled():
        print(f"\nstatic-rules fuzz: seed {SEED}, {n} sources in {time.monotonic() - t0:.1f} s, {outcomes}")


def test_the_driver_path_is_never_evaluated(probe):
    """The path that raised `0 active drivers` in CPU mode: every driver query, in every form."""
    src = ("import triton\nfrom triton.runtime import driver\nfrom triton.runtime.driver import driver as d\n"
           "T = triton.runtime.driver.active.get_current_target()\nD = driver.active.get_active_torch_device()\n"
           "P = d.active.utils.get_device_properties(0)\nX = triton.runtime.driver.active.fuzzprobe\n"
           "Y = getattr(triton.runtime.driver.active, 'utils')\n")
    vs = static_check.check_source(src)
    assert not probe.calls
    # fuzzprobe is not a listed driver query; a getattr'd driver object is a value the rules lose
    assert [(v.rule, v.line) for v in vs] == [("allow-list", 7), ("allow-list", 8)], vs


def test_the_judge_answers_a_driver_query_candidate_with_a_verdict(tmp_path):
    """describe() on a candidate that starts the way the official tutorials do: a verdict, not an
    internal error (CPU mode has no active driver)."""
    from harness.evaluate import describe
    src = (DEMO / "seeds" / "tiled.py").read_text().replace(
        "import triton.language as tl\n",
        "import triton.language as tl\nDEVICE_Q = triton.runtime.driver.active.get_current_target\n", 1)
    cand = tmp_path / "cand.py"
    cand.write_text(src)
    d = describe({"task_dir": str(DEMO), "candidate": str(cand)})
    assert d["class"] in ("ok", "rejected"), d
