"""The static rules' tables (static_check.py): what a candidate may import and reach, what each
refused capability is called, and what to use instead. docs/HARNESS.md section 4 is this file in
prose; change both together.

The rules are defence in depth behind the runner's OS sandbox, tuned for honest code: a
candidate is a Triton kernel plus a launcher, written the way people write them (driver and
target queries, `torch.autograd.Function` wrappers, version checks, small stdlib helpers), so
those pass; capabilities that let a candidate reach the host, the judge or the timing refuse.
"""
from __future__ import annotations

WILDCARD = "*"          # any name the module itself defines (re-exports of other modules refused)
FREE = "free"           # a class: any attribute (what a candidate does with its methods is runtime's)

# -- rules, in the order a line's violations are reported (most specific first) -----------------
RULES = ("syntax", "banned-import", "torch-heavy-math", "concurrency", "timer", "io", "introspection",
         "allow-list")

# What to do instead, per rule: every refusal carries one (the message may add a more specific one).
FIX = {
    "syntax": "fix the syntax error",
    "banned-import": "write the kernel in Triton in this one file; candidates may import only torch, triton, "
                     "numpy, math and the small stdlib helpers of docs/HARNESS.md section 4",
    "torch-heavy-math": "do the task's heavy math (matmul, attention, softmax, the task's banned calls) in a "
                        "Triton kernel; PyTorch may allocate, view, copy and do elementwise work and small "
                        "reductions",
    "concurrency": "launch on the current stream from the calling thread; the judge owns streams, graphs "
                   "and timing",
    "timer": "leave timing to the judge; autotune with triton.autotune's own benchmarking (warmup=, rep=)",
    "io": "compute everything from the inputs; files, processes, sockets and the environment are off "
          "limits (only TRITON_* environment variables may be read)",
    "introspection": "use public APIs on your own objects; frames, globals, interpreter and PyTorch "
                     "internals, dispatch hooks and tensor subclasses are off limits",
    "allow-list": "use the documented API (docs/HARNESS.md section 4 lists what a candidate may use)",
}

# -- modules a candidate may reach, and the names it may use in each ----------------------------
_DTYPES = {"float16", "bfloat16", "float32", "float64", "float", "half", "double", "int8", "int16", "int32",
           "int64", "int", "long", "short", "uint8", "uint16", "uint32", "uint64", "bool", "float8_e4m3fn",
           "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2",
           "complex64", "complex128", "cfloat", "cdouble"}
# PyTorch on the host: allocation, views, copies, indexing, elementwise and small reductions.
_TORCH = _DTYPES | {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "arange", "linspace", "tensor", "as_tensor", "as_strided", "from_numpy", "Tensor", "Size", "dtype", "device",
    "finfo", "iinfo", "Generator", "cat", "concat", "concatenate", "stack", "hstack", "vstack", "where",
    "maximum", "minimum", "clamp", "clamp_min", "clamp_max", "clip", "abs", "sqrt", "rsqrt", "exp", "exp2",
    "expm1", "log", "log2", "log1p", "sigmoid", "tanh", "sin", "cos", "erf", "sum", "amax", "amin", "max",
    "min", "mean", "var", "std", "prod", "argmax", "argmin", "round", "floor", "ceil", "sign", "square",
    "reciprocal", "isnan", "isinf", "isfinite", "nan_to_num", "add", "sub", "mul", "div", "neg", "pow",
    "remainder", "fmod", "lerp", "logical_and", "logical_or", "logical_not", "bitwise_and", "bitwise_or",
    "is_tensor", "numel", "no_grad", "enable_grad", "inference_mode", "is_grad_enabled", "cuda", "xpu",
    "narrow", "split", "chunk", "unbind", "flatten", "reshape", "transpose", "permute", "squeeze", "unsqueeze",
    "broadcast_to", "broadcast_tensors", "expand_copy", "repeat_interleave", "gather", "scatter", "index_select",
    "masked_fill", "flip", "roll", "cumsum", "cumprod", "tril", "triu", "sort", "argsort", "topk", "bincount",
    "searchsorted", "diff", "nonzero", "unique", "count_nonzero", "all", "any", "allclose", "isclose", "equal",
    "is_floating_point", "is_complex", "promote_types", "result_type", "get_default_dtype", "view_as_real",
    "view_as_complex", "rand", "randn", "randint", "rand_like", "randn_like", "autograd", "nn", "amp",
    "version", "compiler", "__version__", "logsumexp", "norm", "e", "pi", "inf", "nan",
    # read-only queries of PyTorch's state
    "are_deterministic_algorithms_enabled", "is_deterministic_algorithms_warn_only_enabled", "is_autocast_enabled",
    "get_float32_matmul_precision", "is_inference_mode_enabled", "is_storage", "get_device", "get_autocast_gpu_dtype",
    "get_autocast_dtype", "get_autocast_cpu_dtype",
}
MODULES: dict[str, object] = {
    "torch": _TORCH,
    "torch.cuda": {"current_device", "get_device_properties", "get_device_capability", "get_device_name",
                   "device_count", "is_available", "is_bf16_supported", "is_tf32_supported", "synchronize",
                   "OutOfMemoryError", "device", "device_of", "current_stream", "default_stream", "mem_get_info",
                   "memory_allocated", "max_memory_allocated", "empty_cache", "amp", "manual_seed",
                   "is_initialized"},
    "torch.xpu": {"is_available", "device_count", "current_device", "get_device_properties", "get_device_name",
                  "device", "synchronize", "current_stream"},
    "torch.version": WILDCARD,
    "torch.Tensor": FREE,
    "torch.autograd": {"Function", "function", "grad_mode"},
    "torch.autograd.function": {"Function", "FunctionCtx", "once_differentiable"},
    "torch.autograd.grad_mode": {"no_grad", "enable_grad", "inference_mode"},
    "torch.amp": {"custom_fwd", "custom_bwd"},
    "torch.cuda.amp": {"custom_fwd", "custom_bwd"},
    # wrap_triton registers nothing: it marks a Triton kernel for graph tracing and launches it as is
    # (custom_op, Library, triton_op, register_* in torch.library register dispatch hooks: refused)
    "torch.library": {"wrap_triton"},
    "torch.compiler": {"disable", "is_compiling", "is_dynamo_compiling", "allow_in_graph"},
    "torch.nn": {"Module", "Parameter", "functional", "ModuleList", "ModuleDict", "Identity", "init", "Dropout",
                 "LayerNorm", "RMSNorm", "GroupNorm", "SiLU", "GELU", "ReLU", "Sigmoid", "Tanh", "Softplus"},
    "torch.nn.init": {"ones_", "zeros_", "constant_", "normal_", "uniform_", "trunc_normal_"},
    # elementwise activations, padding and normalisations (small reductions): host-side glue and
    # references around a kernel, never the heavy math of a matmul/attention task
    "torch.nn.functional": {"pad", "silu", "gelu", "relu", "sigmoid", "softplus", "tanh", "elu", "leaky_relu",
                            "mish", "hardswish", "hardsigmoid", "logsigmoid", "relu6", "selu", "celu",
                            "softsign", "one_hot", "dropout", "normalize", "layer_norm", "rms_norm", "group_norm"},
    "triton": {"jit", "autotune", "Config", "cdiv", "next_power_of_2", "heuristics", "language", "constexpr",
               "experimental", "__version__", "set_allocator", "runtime", "tools", "constexpr_function",
               "must_use_result", "OutOfResources", "CompilationError", "TritonError", "JITFunction",
               "KernelInterface"},
    "triton.runtime": {"driver", "Config", "autotune", "heuristics", "jit", "JITFunction", "Autotuner",
                       "Heuristics", "OutOfResources", "KernelInterface"},
    "triton.runtime.jit": {"JITFunction", "jit", "KernelInterface", "TensorWrapper", "reinterpret"},
    "triton.runtime.autotuner": {"Autotuner", "Config", "Heuristics", "autotune", "heuristics"},
    "triton.runtime.driver": {"driver"},
    "triton.tools": {"tensor_descriptor"},
    "triton.tools.tensor_descriptor": {"TensorDescriptor"},
    "triton.experimental": {"gluon"},
    "math": WILDCARD,
    "numpy": _DTYPES | {"prod", "ceil", "floor", "log2", "sqrt", "pi", "e", "inf", "nan", "array", "asarray",
                        "arange", "zeros", "ones", "cumsum", "ndarray", "dtype", "isclose", "allclose", "maximum",
                        "minimum", "exp", "log", "abs", "round", "sum", "max", "min", "float32", "float16",
                        "int32", "int64", "finfo", "iinfo", "__version__"},
    "functools": {"lru_cache", "cache", "partial", "reduce", "wraps", "cached_property", "cmp_to_key",
                  "total_ordering", "update_wrapper"},
    "typing": {"Any", "Optional", "Dict", "List", "Tuple", "Callable", "Union", "Sequence", "Mapping", "Iterable",
               "Iterator", "Literal", "Final", "ClassVar", "NamedTuple", "TypeVar", "Set", "FrozenSet", "Type",
               "TYPE_CHECKING", "cast", "overload", "Protocol", "Generic", "Annotated", "NoReturn", "TypedDict",
               "Generator", "Hashable", "Sized", "MutableMapping", "MutableSequence", "DefaultDict",
               "OrderedDict", "ParamSpec", "Concatenate", "TypeAlias", "Self", "Never", "AnyStr", "SupportsInt",
               "runtime_checkable", "final", "no_type_check"},
    "dataclasses": {"dataclass", "field", "fields", "replace", "asdict", "astuple", "InitVar", "is_dataclass"},
    "__future__": WILDCARD,
    # small stdlib helpers honest launchers use
    "operator": {"add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "neg", "eq", "ne", "lt", "le", "gt",
                 "ge", "and_", "or_", "xor", "not_", "index", "itemgetter", "mul", "matmul", "iadd", "imul",
                 "contains", "truth", "is_", "is_not", "abs", "invert", "lshift", "rshift", "concat"},
    "warnings": {"warn", "simplefilter", "filterwarnings", "catch_warnings"},
    "contextlib": {"contextmanager", "nullcontext", "suppress", "ExitStack", "closing", "AbstractContextManager"},
    "enum": {"Enum", "IntEnum", "Flag", "IntFlag", "auto", "unique", "StrEnum"},
    "collections": {"namedtuple", "OrderedDict", "defaultdict", "deque", "Counter", "abc"},
    "collections.abc": {"Callable", "Iterable", "Iterator", "Sequence", "Mapping", "MutableMapping",
                        "Hashable", "Sized", "Generator", "Collection", "Container", "Set", "MutableSequence"},
    "heapq": {"heappush", "heappop", "heapify", "heapreplace", "heappushpop", "nlargest", "nsmallest", "merge"},
    "itertools": {"product", "chain", "accumulate", "repeat", "count", "cycle", "islice", "combinations",
                  "permutations", "groupby", "starmap", "zip_longest", "pairwise", "takewhile", "dropwhile"},
    "bisect": {"bisect", "bisect_left", "bisect_right", "insort", "insort_left", "insort_right"},
    "abc": {"ABC", "ABCMeta", "abstractmethod"},
    "copy": {"copy", "deepcopy"},
    "numbers": {"Number", "Integral", "Real", "Complex"},
    # loggers write to the runner's stderr, as print does; handlers that write files are refused
    "logging": {"getLogger", "Logger", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL", "debug", "info", "warning",
                "error"},
    "packaging": {"version"},
    "packaging.version": {"parse", "Version", "InvalidVersion"},
    # `os` itself imports (it is loaded in every Python); only literal TRITON_* environment reads pass
    # (static_walk.py); every other os path is `io`
    "os": set(),
}
# Triton's own kernel languages: every module under these is a WILDCARD table module
WILDCARD_PACKAGES = ("triton.language", "triton.experimental.gluon")

# Objects the table reaches whose attributes the rules cannot resolve statically (properties
# that create things): only these attribute paths below them pass.
OBJECT_PATHS = {
    # triton.runtime.driver (a DriverConfig): `active` is a property that instantiates the backend's
    # driver; these are its read-only device and target queries
    "triton.runtime.driver": {"active.get_current_target", "active.get_active_torch_device",
                              "active.get_current_device", "active.get_current_stream",
                              "active.get_device_interface", "active.utils.get_device_properties"},
}

# Private attributes a candidate may read on objects it did not define: the compiled kernel that
# `kernel.warmup(...)` returns loads its module lazily (`_init_handles`, then `n_regs`, `n_spills`;
# the official fused-softmax tutorial's occupancy calculation); namedtuple's public API is spelled
# with an underscore so that it cannot clash with field names.
OBJECT_PRIVATE_OK = {"_init_handles", "_replace", "_asdict", "_fields", "_make", "_field_defaults"}

# -- what the rules name when a path leaves the table -------------------------------------------
THIRD_PARTY_KERNEL_LIBS = {
    "fla", "flash_attn", "flash_attn_interface", "flashinfer", "xformers", "flash_mla", "flashmla",
    "vllm", "sglang", "apex", "liger_kernel", "deepspeed", "cutlass", "cutlass_library", "tilelang",
    "thunderkittens", "tk", "triton_kernels", "unsloth", "megatron", "transformer_engine", "sageattention",
    "mamba_ssm", "lightning_attn", "causal_conv1d", "einops", "cuda", "cupy", "numba", "jax", "tensorrt",
}
IMPORT_MACHINERY = {"importlib", "pkgutil", "runpy", "zipimport", "imp", "modulefinder"}
CONCURRENCY_MODULES = {"threading", "_thread", "multiprocessing", "subprocess", "asyncio", "concurrent",
                       "sched", "queue", "selectors"}
INTROSPECTION_MODULES = {"gc", "inspect", "builtins", "__builtin__", "traceback", "weakref", "types", "dis",
                         "code", "codeop", "pdb", "bdb", "trace", "tracemalloc", "atexit", "sysconfig",
                         "copyreg", "ctypes", "cffi", "_ctypes", "linecache", "faulthandler", "string"}
IO_MODULES = {"os", "sys", "socket", "pickle", "io", "pathlib", "shutil", "tempfile", "marshal", "shelve",
              "urllib", "http", "requests", "mmap", "resource", "signal", "select", "fcntl", "posix",
              "glob", "json", "csv", "sqlite3", "zipfile", "tarfile", "ssl", "ftplib", "smtplib",
              "dill", "cloudpickle", "platform", "pty", "tty", "termios", "errno", "stat", "fileinput",
              "posixpath", "genericpath", "getpass", "pwd", "grp", "uuid", "webbrowser", "email", "xml"}
TIMER_MODULES = {"time", "timeit", "datetime", "cProfile", "profile", "pstats"}

# modules inside the allowed packages, by what they give access to (longest prefix wins)
MODULE_RULES = {
    "torch.multiprocessing": "concurrency", "torch.distributed": "concurrency", "torch.cuda.graphs": "concurrency",
    "torch.cuda.streams": "concurrency", "torch.cuda.nccl": "concurrency", "torch.utils.data": "io",
    "torch.utils.cpp_extension": "io", "torch.hub": "io", "torch.serialization": "io", "torch.package": "io",
    "torch.onnx": "io", "torch.profiler": "timer", "torch.autograd.profiler": "timer", "torch.cuda.nvtx": "timer",
    "torch.utils.benchmark": "timer", "triton.testing": "timer", "torch.cuda.profiler": "timer",
    "torch.library": "introspection", "torch.overrides": "introspection", "torch.backends": "introspection",
    "torch.utils.hooks": "introspection", "torch._C": "introspection", "torch.autograd.graph": "introspection",
    "torch.autograd.forward_ad": "introspection", "torch.linalg": "torch-heavy-math",
    "torch.nn.attention": "torch-heavy-math", "torch.jit": "torch-heavy-math", "torch._inductor": "torch-heavy-math",
    "torch._dynamo": "torch-heavy-math", "torch.func": "torch-heavy-math", "torch.ops": "torch-heavy-math",
    "torch.fx": "torch-heavy-math", "torch.export": "torch-heavy-math", "torch.sparse": "torch-heavy-math",
    "torch.special": "torch-heavy-math", "torch.fft": "torch-heavy-math", "torch.nested": "torch-heavy-math",
    "numpy.linalg": "torch-heavy-math", "numpy.fft": "torch-heavy-math", "numpy.ctypeslib": "introspection",
    "numpy.lib.format": "io", "triton.runtime.build": "concurrency", "triton.runtime.cache": "io",
    "logging": "io",
}
MODULE_FIX = {
    "torch.library": "write the kernel as a plain function; custom ops register dispatch hooks in PyTorch",
    "torch.distributed": "a candidate runs on one GPU: no process groups",
    "torch.backends": "leave PyTorch's global flags alone (the judge checks them); state precision in the kernel",
    "triton.testing": "leave timing to the judge; autotune with triton.autotune(..., warmup=, rep=)",
}
# Paths into PyTorch that are the heavy math whatever position they are in
HEAVY_MODULE_PREFIXES = ("torch.linalg", "torch.nn.attention", "torch.jit", "torch._inductor", "torch._dynamo",
                         "torch.func", "torch.ops", "torch.fx", "torch.export", "torch.nn.Linear",
                         "torch.nn.MultiheadAttention", "torch.sparse", "torch.special", "torch.fft")
# PyTorch calls that do the heavy math of our tasks (matmul / attention / softmax families)
HEAVY_NAMES = {
    "matmul", "mm", "bmm", "einsum", "softmax", "log_softmax", "addmm", "baddbmm", "addbmm", "addmv", "addr",
    "mv", "dot", "vdot", "tensordot", "inner", "outer", "ger", "kron", "chain_matmul", "multi_dot",
    "scaled_dot_product_attention", "linear", "bilinear", "conv1d", "conv2d", "conv3d", "cdist",
    "multi_head_attention_forward", "flex_attention", "_scaled_mm", "__matmul__", "__rmatmul__",
    "compile", "softmin", "gumbel_softmax", "attention", "scaled_mm", "grouped_mm", "scaled_grouped_mm",
    "_grouped_mm", "matrix_power", "conv_tbc", "embedding_bag",
}
# namespaces whose unlisted functions are PyTorch/NumPy compute (so `torch-heavy-math`, not `allow-list`)
MATH_NAMESPACES = {"torch", "torch.nn.functional", "torch.Tensor", "numpy", "torch.linalg", "torch.special",
                   "torch.fft", "torch.sparse", "torch.nested", "numpy.linalg", "numpy.fft"}
# PyTorch global state a candidate could flip (precision, determinism, allocator)
TORCH_GLOBAL_SETTERS = {"use_deterministic_algorithms", "set_float32_matmul_precision", "set_default_dtype",
                        "set_default_tensor_type", "set_num_threads", "set_num_interop_threads",
                        "set_flush_denormal", "set_per_process_memory_fraction", "set_sync_debug_mode",
                        "set_default_device", "set_deterministic_debug_mode", "set_rng_state", "set_warn_always",
                        "preferred_linalg_library", "preferred_blas_library", "set_allocator_settings"}
# attribute names that name a capability wherever they hang in a torch/triton path
CONCURRENCY_ATTRS = {"Stream", "stream", "ExternalStream", "set_stream", "StreamContext", "graph", "CUDAGraph",
                     "graphs", "fork", "Thread", "Process", "Pool", "make_graphed_callables", "_DeviceGuard",
                     "graph_pool_handle", "get_stream_from_external"}
TIMER_ATTRS = {"Event", "elapsed_time", "perf_counter", "perf_counter_ns", "monotonic", "do_bench",
               "do_bench_cudagraph", "profiler", "benchmark", "Timer", "nvtx", "globaltimer", "clock_rate",
               "get_benchmarker"}
IO_TORCH_ATTRS = {"save", "load", "hub", "from_file", "fromfile", "tofile", "savez", "loadtxt", "savetxt",
                  "memmap", "DataLoader", "genfromtxt"}

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
# frame / code / traceback attributes: reading the harness's state through the stack
FRAME_ATTRS = {"f_back", "f_locals", "f_globals", "f_code", "f_builtins", "gi_frame", "cr_frame", "ag_frame",
               "tb_frame", "tb_next", "co_consts", "co_code", "_getframe", "_current_frames", "settrace",
               "setprofile", "_getframemodulename", "currentframe"}
# memory identity: the tools of output caching by pointer
POINTER_ATTRS = {"data_ptr", "untyped_storage", "storage", "_storage", "_cdata", "set_", "storage_offset",
                 "_typed_storage", "share_memory_", "_make_subclass", "_make_wrapper_subclass", "as_subclass"}
# methods that write files whatever object they hang off (ndarray.tofile / ndarray.dump: a pickle)
METHOD_IO = {"tofile", "dump"}
# dunder attributes a candidate may read
ALLOWED_DUNDER_ATTRS = {"__init__", "__name__", "__doc__", "__post_init__", "__all__", "__repr__", "__version__",
                        "__qualname__"}
# dunder methods a candidate's classes may define (Python protocols on its own objects); the rest
# (__torch_function__, __torch_dispatch__, __getattr__, __del__, __array_function__, ...) hook into
# PyTorch, NumPy or the interpreter
ALLOWED_DUNDER_DEFS = {
    "__init__", "__post_init__", "__repr__", "__str__", "__call__", "__enter__", "__exit__", "__len__",
    "__iter__", "__next__", "__getitem__", "__setitem__", "__contains__", "__eq__", "__ne__", "__lt__", "__le__",
    "__gt__", "__ge__", "__hash__", "__bool__", "__add__", "__sub__", "__mul__", "__truediv__", "__floordiv__",
    "__mod__", "__neg__", "__pos__", "__abs__", "__radd__", "__rmul__", "__rsub__", "__and__", "__or__",
    "__xor__", "__invert__", "__index__", "__int__", "__float__", "__new__", "__reversed__", "__format__",
}
DUNDER_NAMES_OK = {"__name__", "__doc__", "__all__", "__version__", "__init__", "__post_init__", "__repr__"}
DYNAMIC_CODE_BUILTINS = {"__import__", "exec", "eval", "compile"}
IO_BUILTINS = {"open", "input", "breakpoint", "exit", "quit", "help", "SystemExit", "KeyboardInterrupt"}
INTROSPECTION_BUILTINS = {"globals", "locals", "vars", "getattr", "setattr", "delattr", "id", "memoryview",
                          "__builtins__", "__loader__", "__spec__", "__file__", "__cached__"}
# base classes from torch a candidate's class may derive from (anything else from torch is a tensor
# subclass, a dispatch mode or a hook)
TORCH_BASES_OK = {"torch.autograd.Function", "torch.autograd.function.Function", "torch.nn.Module",
                  "torch.nn.modules.module.Module"}
# environment variables a candidate may read (literal names only): Triton's own knobs
ENV_PREFIXES = ("TRITON_",)

# Keyword arguments of allowed calls, per callee (resolved by identity, so every alias counts):
# (keyword, rule, what it does, the value that is harmless or None when no value is).
KEYWORD_POLICY = {
    "triton.autotune": [
        ("use_cuda_graph", "concurrency", "launches the tuning runs as CUDA graphs outside the judge's control",
         False),
        ("do_bench", "timer", "replaces the tuner's timer with a function of yours", None),
    ],
    "triton.runtime.autotuner.Autotuner": [
        ("use_cuda_graph", "concurrency", "launches the tuning runs as CUDA graphs outside the judge's control",
         False),
        ("do_bench", "timer", "replaces the tuner's timer with a function of yours", None),
    ],
    "triton.Config": [
        ("ir_override", "io", "loads the kernel's IR from a file", None),
    ],
}
