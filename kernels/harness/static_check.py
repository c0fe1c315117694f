"""Static rules checked on a candidate's source before it is imported (HARNESS.md section 4).

Every rejection names its rule and line: `rejected [banned-import] line 3: imports flash_attn`.
The rules are deliberately strict: a candidate is a Triton kernel plus a thin launcher, so
anything beyond torch/triton/math/numpy/functools/typing/dataclasses is suspect.
"""
from __future__ import annotations

import ast
import os
from dataclasses import dataclass

ALLOWED_IMPORTS = {"torch", "triton", "math", "numpy", "functools", "typing", "dataclasses", "__future__"}

THIRD_PARTY_KERNEL_LIBS = {
    "fla", "flash_attn", "flash_attn_interface", "flashinfer", "xformers", "flash_mla", "flashmla",
    "vllm", "sglang", "apex", "liger_kernel", "deepspeed", "cutlass", "cutlass_library", "tilelang",
    "thunderkittens", "tk", "triton_kernels", "unsloth", "megatron", "transformer_engine", "sageattention",
}
CONCURRENCY_MODULES = {"threading", "_thread", "multiprocessing", "subprocess", "asyncio", "concurrent",
                       "sched", "queue"}
INTROSPECTION_MODULES = {"gc", "inspect", "builtins", "__builtin__", "traceback", "weakref", "types", "dis",
                         "code", "codeop", "pdb", "bdb", "trace", "tracemalloc", "atexit", "sysconfig",
                         "copyreg", "ctypes", "cffi", "_ctypes"}
IO_MODULES = {"os", "sys", "socket", "pickle", "io", "pathlib", "shutil", "tempfile", "marshal", "shelve",
              "urllib", "http", "requests", "mmap", "resource", "signal", "select", "fcntl", "posix",
              "glob", "json", "csv", "sqlite3", "zipfile", "tarfile", "logging", "ssl", "ftplib", "smtplib",
              "dill", "cloudpickle", "platform", "pty", "tty", "termios", "errno", "stat", "fileinput"}
TIMER_MODULES = {"time", "timeit", "datetime", "cProfile", "profile", "pstats"}
DYNAMIC_CODE_BUILTINS = {"__import__", "exec", "eval", "compile"}
IO_BUILTINS = {"open", "input", "breakpoint", "exit", "quit", "help", "SystemExit", "KeyboardInterrupt"}
# PyTorch global state a candidate could flip to slow the baseline or change its precision
TORCH_GLOBAL_SETTERS = {"use_deterministic_algorithms", "set_float32_matmul_precision", "set_default_dtype",
                        "set_default_tensor_type", "set_num_threads", "set_num_interop_threads",
                        "set_flush_denormal", "set_per_process_memory_fraction", "set_sync_debug_mode",
                        "set_default_device", "set_deterministic_debug_mode", "set_rng_state", "set_warn_always",
                        "preferred_linalg_library", "preferred_blas_library", "set_allocator_settings"}
INTROSPECTION_BUILTINS = {"globals", "locals", "vars", "getattr", "setattr", "delattr", "id", "memoryview",
                          "__builtins__", "__loader__", "__spec__", "object"}
# frame / code / traceback attributes: reading the harness's state through the stack
FRAME_ATTRS = {"f_back", "f_locals", "f_globals", "f_code", "f_builtins", "gi_frame", "cr_frame", "ag_frame",
               "tb_frame", "tb_next", "co_consts", "co_code", "_getframe", "_current_frames", "settrace",
               "setprofile", "_getframemodulename"}
# memory identity: the tools of output caching by pointer
POINTER_ATTRS = {"data_ptr", "untyped_storage", "storage", "_storage", "_cdata", "set_", "storage_offset",
                 "_typed_storage", "share_memory_"}
ALLOWED_DUNDERS = {"__init__", "__name__", "__doc__", "__post_init__", "__all__", "__repr__"}

# PyTorch calls that do the heavy math of our tasks (matmul / attention / softmax families)
HEAVY_NAMES = {
    "matmul", "mm", "bmm", "einsum", "softmax", "log_softmax", "addmm", "baddbmm", "addbmm", "addmv", "addr",
    "mv", "dot", "vdot", "tensordot", "inner", "outer", "ger", "kron", "chain_matmul", "multi_dot",
    "scaled_dot_product_attention", "linear", "bilinear", "conv1d", "conv2d", "conv3d", "cdist",
    "multi_head_attention_forward", "flex_attention", "_scaled_mm", "__matmul__", "__rmatmul__",
    "compile", "softmin", "gumbel_softmax", "attention",
}
HEAVY_MODULE_PREFIXES = ("torch.linalg", "torch.nn.attention", "torch.jit", "torch._inductor", "torch._dynamo",
                         "torch.func", "torch.ops", "torch.fx", "torch.export", "torch.nn.Linear",
                         "torch.nn.MultiheadAttention", "torch.sparse")
CONCURRENCY_ATTRS = {"Stream", "stream", "ExternalStream", "set_stream", "StreamContext", "graph", "CUDAGraph",
                     "graphs", "fork", "Thread", "Process", "Pool", "make_graphed_callables", "_DeviceGuard"}
TIMER_ATTRS = {"Event", "elapsed_time", "perf_counter", "perf_counter_ns", "monotonic", "do_bench",
               "do_bench_cudagraph", "profiler", "benchmark", "Timer", "nvtx"}
IO_TORCH_ATTRS = {"save", "load", "hub", "from_file", "fromfile", "tofile", "savez", "loadtxt", "savetxt",
                  "memmap", "DataLoader"}
TRITON_ROOTS = ("triton.language", "tl")
# methods that write files whatever object they hang off (ndarray.tofile / ndarray.dump: a pickle)
METHOD_IO = {"tofile", "dump"}

# -- the allow-list of attribute paths (defence in depth: the OS sandbox is the boundary) ---------
# A path rooted at an imported module must be listed here ("*": any public name of that module
# that is not itself a module outside ALLOWED_SUBMODULES). Everything else is rejected with the
# rule of what it reaches (io / concurrency / introspection) or `allow-list`.
_DTYPES = {"float16", "bfloat16", "float32", "float64", "float", "half", "double", "int8", "int16", "int32",
           "int64", "int", "long", "short", "uint8", "bool", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
           "float8_e5m2fnuz", "complex64"}
ALLOWED_PATHS = {
    "torch": _DTYPES | {
        "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
        "arange", "tensor", "as_tensor", "Tensor", "Size", "dtype", "device", "finfo", "iinfo", "cat", "stack",
        "where", "maximum", "minimum", "clamp", "abs", "sqrt", "rsqrt", "exp", "exp2", "log", "log2", "sigmoid",
        "tanh", "sum", "amax", "amin", "max", "min", "mean", "round", "floor", "ceil", "sign", "isnan", "isinf",
        "isfinite", "nan_to_num", "add", "sub", "mul", "div", "neg", "pow", "is_tensor", "numel", "no_grad",
        "inference_mode", "cuda", "narrow", "split", "chunk", "flatten", "reshape", "transpose", "permute",
        "squeeze", "unsqueeze", "broadcast_to", "allclose", "equal", "is_floating_point", "promote_types",
        "result_type", "get_default_dtype"},
    "torch.cuda": {"current_device", "get_device_properties", "get_device_capability", "device_count",
                   "is_available", "synchronize", "OutOfMemoryError"},
    "torch.Tensor": {"*"},
    "triton": {"jit", "autotune", "Config", "cdiv", "next_power_of_2", "heuristics", "language", "constexpr", "experimental",
               "__version__"},
    "triton.language": {"*"},
    "math": {"*"},
    "numpy": _DTYPES | {"prod", "ceil", "floor", "log2", "sqrt", "pi", "e", "inf", "nan", "float32", "float16",
                        "int32", "int64", "array", "asarray", "arange", "zeros", "ones", "cumsum", "ndarray", "dtype",
                        "isclose", "allclose", "maximum", "minimum", "exp", "log", "abs", "round", "sum", "max", "min"},
    "functools": {"lru_cache", "cache", "partial", "reduce", "wraps", "cached_property", "cmp_to_key"},
    "typing": {"Any", "Optional", "Dict", "List", "Tuple", "Callable", "Union", "Sequence", "Mapping", "Iterable",
               "Iterator", "Literal", "Final", "ClassVar", "NamedTuple", "TypeVar", "Set", "FrozenSet", "Type"},
    "dataclasses": {"dataclass", "field", "fields", "replace", "asdict", "astuple"},
}
# Triton's own kernel languages, every submodule: what candidates are written in
ALLOWED_MODULE_PREFIXES = ("triton.language.", "triton.experimental.gluon")
ALLOWED_PATHS["triton.experimental"] = {"gluon"}
ALLOWED_SUBMODULES = {"triton.experimental", "torch", "torch.cuda", "triton", "triton.language", "triton.language.math",
                      "triton.language.extra", "triton.language.extra.cuda", "triton.language.extra.libdevice",
                      "triton.language.extra.cuda.libdevice", "math", "numpy", "functools", "typing", "dataclasses"}
# attribute names that reach the OS or the interpreter whatever object they hang off
# (np.ndarray.ctypes, a module's os/sys, str.format reading attributes, typing's evaluator)
REACH_ATTRS = {
    "os": "io", "sys": "io", "subprocess": "concurrency", "socket": "io", "ctypes": "introspection",
    "ctypeslib": "introspection", "builtins": "introspection", "_C": "introspection", "environ": "io",
    "getenv": "io", "system": "io", "popen": "io", "Popen": "concurrency", "spawn": "concurrency",
    "execv": "io", "execve": "io", "read_text": "io", "read_bytes": "io", "write_text": "io",
    "write_bytes": "io", "load_library": "introspection", "cdll": "introspection", "CDLL": "introspection",
    "dlopen": "introspection", "importlib": "banned-import", "import_module": "banned-import",
    "get_type_hints": "introspection", "ForwardRef": "introspection", "mro": "introspection",
    "format": "introspection", "format_map": "introspection", "shutil": "io", "pathlib": "io", "Path": "io",
    "tempfile": "io", "pickle": "io", "marshal": "io", "mmap": "io", "signal": "io", "resource": "io",
    "threading": "concurrency", "multiprocessing": "concurrency", "asyncio": "concurrency",
}


@dataclass
class Violation:
    rule: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"rejected [{self.rule}] line {self.line}: {self.message}"


class _Checker(ast.NodeVisitor):
    def __init__(self, banned_calls, extra_allowed):
        self.v: list[Violation] = []
        self.alias: dict[str, str] = {}       # local name -> dotted module/object path
        self.banned_calls = set(banned_calls)
        self.allowed = ALLOWED_IMPORTS | set(extra_allowed)
        self.extra_allowed = set(extra_allowed)
        self.jit_depth = 0

    def add(self, rule, node, msg):
        self.v.append(Violation(rule, getattr(node, "lineno", 0), msg))

    # -- imports ---------------------------------------------------------------
    def _check_module(self, node, mod: str):
        top = mod.split(".")[0]
        low = top.lower()
        if top in self.extra_allowed:
            return
        if low in THIRD_PARTY_KERNEL_LIBS:
            self.add("banned-import", node, f"imports {mod} (third-party kernel library)")
        elif top == "importlib":
            self.add("banned-import", node, f"imports {mod} (dynamic imports)")
        elif top in CONCURRENCY_MODULES:
            self.add("concurrency", node, f"imports {mod} (threads/processes)")
        elif top in INTROSPECTION_MODULES:
            self.add("introspection", node, f"imports {mod} (interpreter/memory introspection)")
        elif top in IO_MODULES:
            self.add("io", node, f"imports {mod} (files, processes, sockets)")
        elif top in TIMER_MODULES:
            self.add("timer", node, f"imports {mod} (timers)")
        elif top not in self.allowed:
            self.add("banned-import", node, f"imports {mod} (allowed: {', '.join(sorted(ALLOWED_IMPORTS - {'__future__'}))})")
        else:
            self._check_dotted(node, mod, imported=True)

    def visit_Import(self, node):
        for a in node.names:
            self._check_module(node, a.name)
            if a.asname:
                self.alias[a.asname] = a.name
            else:
                self.alias[a.name.split(".")[0]] = a.name.split(".")[0]
        self.generic_visit(node)

    def visit_ImportFrom(self, node):
        mod = node.module or ""
        if node.level:
            self.add("banned-import", node, "relative import")
            return
        self._check_module(node, mod)
        for a in node.names:
            full = f"{mod}.{a.name}"
            if a.name == "*":
                self.add("banned-import", node, f"star import from {mod}")
                continue
            self._check_dotted(node, full, imported=True)
            self.alias[a.asname or a.name] = full
        self.generic_visit(node)

    # -- names and attributes --------------------------------------------------
    def _dotted(self, node) -> str | None:
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name):
            root = self.alias.get(node.id, node.id)
            return ".".join([root] + parts[::-1])
        return None

    def _check_dotted(self, node, dotted: str, imported=False):
        parts = dotted.split(".")
        root = parts[0]
        is_module_root = root in ("torch", "triton", "numpy", "math", "functools", "typing", "dataclasses")
        if dotted.startswith(TRITON_ROOTS) and ".".join(parts[:2]) in ("triton.language",):
            # Triton's own language (tl.dot, tl.softmax, ...) is what candidates are for
            if any(p.startswith("_") and p not in ALLOWED_DUNDERS for p in parts[2:]):
                self.add("introspection", node, f"private Triton API {dotted}")
                return
            # ... but its modules import the interpreter's (tl.core.builtins, tl.core.inspect,
            # tl.extra.pkgutil, tl.core.knobs): the path is resolved like any other
            self._allow_listed(node, dotted)
            return
        if dotted.startswith("triton.testing"):
            self.add("timer", node, f"uses {dotted} (benchmarking/timers)")
            return
        if root == "torch":
            if any(dotted == p or dotted.startswith(p + ".") for p in HEAVY_MODULE_PREFIXES):
                self.add("torch-heavy-math", node, f"uses {dotted} (PyTorch compute for the task's heavy math)")
                return
        if is_module_root:
            last = parts[-1]
            if root == "torch" and (last in TORCH_GLOBAL_SETTERS or last.startswith("set_") or "autocast" in last
                                    or "backends" in parts[1:]):
                self.add("introspection", node, f"uses {dotted} (PyTorch global state shared with the baseline)")
            elif root == "torch" and last in HEAVY_NAMES | self.banned_calls:
                self.add("torch-heavy-math", node, f"calls {dotted} (PyTorch compute for the task's heavy math)")
            elif root == "torch" and any(p in CONCURRENCY_ATTRS for p in parts[1:]):
                self.add("concurrency", node, f"uses {dotted} (side streams / graphs)")
            elif any(p in TIMER_ATTRS for p in parts[1:]):
                self.add("timer", node, f"uses {dotted} (timers)")
            elif root in ("torch", "numpy") and last in IO_TORCH_ATTRS:
                self.add("io", node, f"uses {dotted} (file I/O)")
            elif any(p.startswith("_") and p not in ALLOWED_DUNDERS for p in parts[1:]):
                self.add("introspection", node, f"private API {dotted}")
            else:
                self._allow_listed(node, dotted)

    def _allow_listed(self, node, dotted: str):
        """The allow-list of attribute paths: resolved on the real modules (this process imports
        torch/triton anyway; getattr on a module runs none of the candidate's code)."""
        parts = dotted.split(".")
        if len(parts) == 1:
            return
        import importlib
        import types
        try:
            obj = importlib.import_module(parts[0])
        except ImportError:
            return
        mod_path = parts[0]
        # what the path reaches names the rule (a.b.subprocess.run is `concurrency` wherever it fails)
        reach = next((REACH_ATTRS[p] for p in parts[1:] if p in REACH_ATTRS), None)
        for i, p in enumerate(parts[1:], start=1):
            if not hasattr(obj, p) and isinstance(obj, types.ModuleType):
                sub = f"{obj.__name__}.{p}"
                if sub in ALLOWED_SUBMODULES or sub.startswith(ALLOWED_MODULE_PREFIXES):
                    try:  # a subpackage nobody imported yet (triton.experimental.gluon)
                        importlib.import_module(sub)
                    except ImportError:
                        pass
            if not hasattr(obj, p):
                self.add(reach or "allow-list", node, f"{dotted}: {'.'.join(parts[:i])} has no attribute {p!r} "
                         f"(not on the allow-list of attribute paths)")
                return
            allowed = {"*"} if mod_path.startswith(ALLOWED_MODULE_PREFIXES) else ALLOWED_PATHS.get(mod_path)
            if allowed is None or not ("*" in allowed or p in allowed):
                nxt = getattr(obj, p, None)
                if isinstance(nxt, types.ModuleType):
                    top = nxt.__name__.split(".")[0]
                    rule = reach or REACH_ATTRS.get(top) or ("torch-heavy-math" if top == "torch" else "io" if top in IO_MODULES
                                                    else "concurrency"
                                                    if top in CONCURRENCY_MODULES else "introspection"
                                                    if top in INTROSPECTION_MODULES else "allow-list")
                    self.add(rule, node, f"{dotted} reaches the module {nxt.__name__} (not on the allow-list of "
                             f"attribute paths; files, processes, sockets and the interpreter are off limits)")
                elif parts[0] in ("torch", "numpy") and callable(nxt):
                    self.add("torch-heavy-math", node, f"calls {dotted}, which is not on the allow-list of PyTorch/"
                             f"NumPy calls a candidate may make (allocation, views, copies, elementwise, small "
                             f"reductions): the task's heavy math must be in Triton")
                else:
                    self.add("allow-list", node, f"{dotted} is not on the allow-list of attribute paths a candidate "
                             f"may use (e.g. torch.empty, torch.float16, tl.*, triton.jit, triton.cdiv, math.*)")
                return
            obj = getattr(obj, p)
            if isinstance(obj, types.ModuleType):
                if obj.__name__ not in ALLOWED_SUBMODULES and not obj.__name__.startswith(ALLOWED_MODULE_PREFIXES):
                    top = obj.__name__.split(".")[0]
                    rule = reach or REACH_ATTRS.get(top) or ("torch-heavy-math" if top == "torch"
                                                             else _module_rule(top))
                    self.add(rule, node, f"{dotted} reaches the module {obj.__name__} (not on the allow-list)")
                    return
                mod_path = obj.__name__
            elif mod_path.startswith(ALLOWED_MODULE_PREFIXES) and _foreign(obj):
                # a wildcard module's public name that is another library's function or class
                # (tl.extra.module_from_spec is importlib's; tl.core.contextmanager contextlib's)
                home = _foreign(obj)
                self.add(reach or _module_rule(home.split(".")[0].lstrip("_").replace("frozen_importlib", "importlib")),
                         node, f"{dotted} is {home}'s {p!r}, re-exported by {mod_path} (not on the allow-list of "
                         f"attribute paths: only Triton's own language is)")
                return
            elif mod_path in ("torch", "numpy") and isinstance(obj, type):
                mod_path = f"{mod_path}.{p}" if f"{mod_path}.{p}" in ALLOWED_PATHS else mod_path
                if mod_path not in ALLOWED_PATHS:
                    return
            else:
                return  # a function, a dtype, a class: what the candidate does with it is runtime's business

    def _module_escapes(self, node, dotted: str | None):
        """A module bound to a name, passed, returned or stored (`q = tl.core`): later paths
        through it (`q.inspect.stack()`) are not dotted paths the rules resolve, so a module may
        only be used where an attribute is read from it at once (`tl.core.xyz`)."""
        if dotted is None or getattr(node, "_kd_base", False) or isinstance(getattr(node, "ctx", None), ast.Store):
            return
        parts = dotted.split(".")
        if parts[0] not in ("torch", "triton", "numpy", "math", "functools", "typing", "dataclasses"):
            return
        import importlib
        import types
        try:
            obj = importlib.import_module(parts[0])
            for p in parts[1:]:
                obj = getattr(obj, p)
        except (ImportError, AttributeError):
            return
        allowed = obj.__name__ in ALLOWED_SUBMODULES or obj.__name__.startswith(ALLOWED_MODULE_PREFIXES) \
            if isinstance(obj, types.ModuleType) else False
        if allowed:  # (a module off the allow-list is refused by the path rules already)
            self.add("introspection", node, f"{dotted} is used as a value (the module is bound to a name, passed "
                     f"or stored): use modules only through dotted paths such as tl.math.exp, or import the "
                     f"submodule (`from triton.language.extra import libdevice`)")

    def visit_Attribute(self, node):
        a = node.attr
        dotted = self._dotted(node)
        self._module_escapes(node, dotted)
        if a in METHOD_IO:
            self.add("io", node, f"method .{a}() (writes a file: numpy's ndarray.tofile/dump)")
        if a in REACH_ATTRS:
            self.add(REACH_ATTRS[a], node, f"attribute .{a} (reaches the OS or the interpreter: files, processes, "
                     f"sockets, native code or attribute reads through format strings)")
        elif a.startswith("__") and a.endswith("__") and a not in ALLOWED_DUNDERS:
            self.add("introspection", node, f"dunder attribute .{a}")
        elif a in FRAME_ATTRS:
            self.add("introspection", node, f"frame/trace attribute .{a}")
        elif a in POINTER_ATTRS:
            self.add("introspection", node, f".{a} (memory identity; outputs must not be cached by pointer)")
        elif dotted is not None and dotted.split(".")[0] in ("torch", "triton", "numpy", "math", "functools",
                                                            "typing", "dataclasses"):
            self._check_dotted(node, dotted)
        elif dotted is None or dotted.split(".")[0] not in ("tl",):
            # a method on some tensor: x.matmul(y), x.softmax(-1), q.bmm(k) ...
            if not (dotted and dotted.startswith(TRITON_ROOTS)):
                if a in HEAVY_NAMES or a in self.banned_calls:
                    self.add("torch-heavy-math", node, f"method .{a}() (PyTorch compute for the task's heavy math)")
                elif a in ("elapsed_time", "record", "Event", "perf_counter"):
                    self.add("timer", node, f".{a} (timers)")
                elif a in ("Stream", "stream", "wait_stream", "record_stream", "set_stream"):
                    self.add("concurrency", node, f".{a} (side streams)")
        # only walk into the base if it is not a simple dotted chain (already resolved)
        if dotted is None:
            self.generic_visit(node)

    def visit_Name(self, node):
        n = node.id
        if n in self.alias and self.alias[n] != n:
            self._module_escapes(node, self.alias[n])
        elif n in self.alias:
            self._module_escapes(node, n)
        if n in DYNAMIC_CODE_BUILTINS:
            self.add("banned-import", node, f"{n}() (dynamic code / imports)")
        elif n in IO_BUILTINS:
            self.add("io", node, f"{n}() (I/O)")
        elif n in INTROSPECTION_BUILTINS:
            self.add("introspection", node, f"{n} (reflection on harness state)")
        elif n.startswith("__") and n.endswith("__") and n not in ALLOWED_DUNDERS:
            self.add("introspection", node, f"dunder name {n}")
        elif isinstance(node.ctx, ast.Load) and n in self.alias and n != self.alias[n]:
            self._check_dotted(node, self.alias[n])

    def visit_Call(self, node):
        if isinstance(node.func, ast.Name) and node.func.id == "type" and len(node.args) == 3:
            self.add("introspection", node, "type(name, bases, dict) (dynamic class creation)")
        self.generic_visit(node)

    def visit_BinOp(self, node):
        if isinstance(node.op, ast.MatMult):
            self.add("torch-heavy-math", node, "the @ operator (matrix product outside a Triton kernel)")
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        if isinstance(node.op, ast.MatMult):
            self.add("torch-heavy-math", node, "the @= operator")
        self._check_target(node.target)
        self.generic_visit(node)

    def _check_target(self, t):
        if isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts:
                self._check_target(e)
            return
        if isinstance(t, ast.Attribute):
            base = t.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in self.alias:
                self.add("introspection", t, f"assigns {self._dotted(t)} (patching a module)")
            elif isinstance(base, ast.Name) and base.id in ("inputs", "out", "config"):
                self.add("introspection", t, f"assigns an attribute of {base.id}")

    def visit_Assign(self, node):
        for t in node.targets:
            self._check_target(t)
        self.generic_visit(node)

    def visit_Delete(self, node):
        for t in node.targets:
            self._check_target(t)
        self.generic_visit(node)

    def visit_Global(self, node):
        self.generic_visit(node)

    def visit_ClassDef(self, node):
        for b in node.bases + [k.value for k in node.keywords]:
            d = self._dotted(b)
            if d and d.startswith("torch"):
                self.add("introspection", node, f"class {node.name} subclasses {d} (tensor subclasses / hooks)")
        self.generic_visit(node)

    def _visit_func(self, node):
        if node.returns is not None:
            self._annotation(node.returns)
        if node.name.startswith("__") and node.name.endswith("__") and node.name not in ALLOWED_DUNDERS:
            self.add("introspection", node, f"defines {node.name} (hooks into Python/PyTorch protocols)")
        self.generic_visit(node)

    visit_FunctionDef = _visit_func
    visit_AsyncFunctionDef = _visit_func

    def visit_MatchClass(self, node):
        # `case object(__globals__=g)` reads attributes by name: the builtins through a function
        if node.kwd_attrs:
            self.add("introspection", node, f"match class pattern reading attribute(s) {', '.join(node.kwd_attrs)} "
                     f"(attribute access the rules cannot see)")
        self.generic_visit(node)

    def _annotation(self, ann):
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            try:
                expr = ast.parse(ann.value, mode="eval").body
            except SyntaxError:
                self.add("introspection", ann, "a string annotation that is not an expression")
                return
            probe = expr
            while isinstance(probe, ast.Attribute):
                probe = probe.value
            if not isinstance(probe, ast.Name):
                self.add("introspection", ann, f"string annotation {ann.value[:60]!r} is code (typing evaluates "
                         f"annotations with the module's builtins)")
            else:
                self.visit(expr)

    def visit_arg(self, node):
        if node.annotation is not None:
            self._annotation(node.annotation)
        self.generic_visit(node)

    def visit_AnnAssign(self, node):
        self._annotation(node.annotation)
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_Await(self, node):
        self.add("concurrency", node, "await (async code)")
        self.generic_visit(node)


def _module_rule(top: str) -> str:
    """The rule of a module a path reached (what it gives access to)."""
    if top in ("importlib", "pkgutil", "runpy", "zipimport") or top in THIRD_PARTY_KERNEL_LIBS:
        return "banned-import"
    for mods, rule in ((IO_MODULES, "io"), (CONCURRENCY_MODULES, "concurrency"),
                       (INTROSPECTION_MODULES | {"linecache", "contextlib", "enum", "warnings", "abc"}, "introspection"),
                       (TIMER_MODULES, "timer")):
        if top in mods:
            return rule
    return "allow-list"


def _foreign(obj) -> str | None:
    """The module that defined obj when it is not Triton or an allowed import, else None."""
    home = getattr(obj, "__module__", None)
    if not isinstance(home, str) or not (callable(obj) or isinstance(obj, type)):
        return None
    top = home.split(".")[0]
    return None if top in ALLOWED_IMPORTS or top == "triton" else home


def check_source(src: str, banned_calls=(), extra_allowed_imports=None) -> list[Violation]:
    """All violations in `src`, sorted by line. Empty list: the candidate may be imported."""
    if extra_allowed_imports is None:
        extra_allowed_imports = [m for m in os.environ.get("KERNELD_STATIC_ALLOW_IMPORTS", "").split(",") if m]
    try:
        tree = ast.parse(src)
    except SyntaxError as e:
        return [Violation("syntax", e.lineno or 0, f"syntax error: {e.msg}")]
    c = _Checker(banned_calls, extra_allowed_imports)
    for n in ast.walk(tree):  # what an attribute is read from (see _module_escapes)
        if isinstance(n, ast.Attribute):
            n.value._kd_base = True
    c.visit(tree)
    seen, out = set(), []
    # on one line, name the most specific rule first
    prio = {r: i for i, r in enumerate(["syntax", "banned-import", "torch-heavy-math", "concurrency", "timer", "io",
                                        "introspection", "allow-list"])}
    for v in sorted(c.v, key=lambda v: (v.line, prio.get(v.rule, 99))):
        key = (v.rule, v.line, v.message)
        if key not in seen:
            seen.add(key)
            out.append(v)
    return out


def format_violations(vs: list[Violation], limit: int = 5) -> str:
    lines = [str(v) for v in vs[:limit]]
    if len(vs) > limit:
        lines.append(f"... and {len(vs) - limit} more")
    return "; ".join(lines)
