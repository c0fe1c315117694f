"""Static resolution of dotted paths for the static rules (static_check.py): what a name such as
`triton.runtime.driver.active` or `tl.core.builtins` denotes, found WITHOUT running anything.

Why: a candidate chooses which attributes the checker looks up. A plain `getattr` runs
properties, descriptors and module `__getattr__` hooks of the judge's own torch/triton
(`triton.runtime.driver.active` is a property that instantiates Triton's CUDA driver: in CPU mode
it raised "0 active drivers" and the judge answered `internal error`). So every lookup here reads
dictionaries only:

- roots come from `sys.modules` (never imported on a candidate's behalf; the fixed PREIMPORT list
  below is imported once, when this module is, so the answer does not depend on what the judge
  happened to import before);
- attributes come from `inspect.getattr_static` (instance and class `__dict__`s along the MRO: a
  property comes back as the property object, never called);
- kinds and home modules are read through the C-level slots of `type` and of function objects,
  never through an object's own (overridable) attribute machinery.

Nothing here raises for any input: unknown things resolve to UNKNOWN / ABSENT.
"""
from __future__ import annotations

import importlib
import inspect
import sys
import types
from dataclasses import dataclass
from importlib.machinery import PathFinder

# Modules imported once, when the rules are loaded, by a fixed list (the allowed modules of
# static_policy.py plus Triton's language packages that load on demand, such as
# `triton.language.extra.libdevice`): so every name resolves the same in every judge, whatever it
# happened to import before. Nothing a candidate writes adds to this list.
PREIMPORT = ("torch", "numpy", "triton", "triton.language", "triton.language.extra.libdevice",
             "triton.experimental.gluon", "triton.experimental.gluon.language", "triton.tools.tensor_descriptor",
             "packaging.version")


def preimport(names) -> None:
    for m in names:
        try:
            importlib.import_module(m)
        except Exception:  # noqa: BLE001 - an optional package (or a class path): its names resolve UNKNOWN
            pass


preimport(PREIMPORT)


class _Sentinel:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name


ABSENT = _Sentinel("ABSENT")    # the module/class has no such name (it would raise at runtime)
UNKNOWN = _Sentinel("UNKNOWN")  # not knowable without running code (a property's result, a module not loaded)

_MRO = type.__dict__["__mro__"]
_TYPE_DICT = type.__dict__["__dict__"]
_TYPE_MODULE = type.__dict__["__module__"]
_TYPE_NAME = type.__dict__["__name__"]
_FUNC_MODULE = types.FunctionType.__dict__["__module__"]
_BUILTIN_MODULE = types.BuiltinFunctionType.__dict__["__module__"]
_MODULE_DICT = types.ModuleType.__dict__["__dict__"]
_FUNCTION_TYPES = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.WrapperDescriptorType,
                   types.MethodDescriptorType, types.ClassMethodDescriptorType, types.MethodWrapperType)
_DATA_TYPES = (int, float, complex, str, bytes, bool, type(None), type(Ellipsis))


def mro(t) -> tuple:
    """The MRO of a type, read from its C slot (no metaclass code runs)."""
    try:
        return _MRO.__get__(t)
    except Exception:  # noqa: BLE001 - not a type
        return ()


def _is_sub(t, base) -> bool:
    return base in mro(t)


def is_module(obj) -> bool:
    return _is_sub(type(obj), types.ModuleType)


def is_class(obj) -> bool:
    return _is_sub(type(obj), type)


def module_name(mod) -> str | None:
    """A module's `__name__`, from its own dict (a module subclass cannot intercept it)."""
    try:
        name = _MODULE_DICT.__get__(mod).get("__name__")
    except Exception:  # noqa: BLE001
        return None
    return name if type(name) is str else None


def _data_types() -> tuple:
    extra = []
    torch = sys.modules.get("torch")
    if torch is not None:
        for n in ("dtype", "device", "Size", "finfo", "iinfo"):
            t = _static(torch, n)
            if is_class(t):
                extra.append(t)
    return _DATA_TYPES + tuple(extra)


_DATA = None


def is_data(obj, depth=0) -> bool:
    """An inert value: a number, string, dtype, device, or a tuple/frozenset of them. Reading one
    gives no capability, so a candidate may read such attributes anywhere they are reached."""
    global _DATA
    if _DATA is None:
        _DATA = _data_types()
    t = type(obj)
    if t in _DATA:
        return True
    if t in (tuple, frozenset) and depth < 3:
        try:
            return len(obj) <= 64 and all(is_data(x, depth + 1) for x in obj)
        except Exception:  # noqa: BLE001
            return False
    return False


def is_function(obj) -> bool:
    t = type(obj)
    return any(_is_sub(t, f) for f in _FUNCTION_TYPES)


def _static(obj, name: str):
    try:
        return inspect.getattr_static(obj, name)
    except AttributeError:
        return ABSENT
    except Exception:  # noqa: BLE001 - getattr_static reads dicts only; anything odd is "not knowable"
        return UNKNOWN


def home(obj) -> str | None:
    """The module that defined a function or class (its `__module__`), read without running any
    of the object's own code; None for anything else or when it is not a string."""
    try:
        if is_class(obj):
            m = _TYPE_MODULE.__get__(obj)
        elif _is_sub(type(obj), types.FunctionType):
            m = _FUNC_MODULE.__get__(obj)
        elif _is_sub(type(obj), types.BuiltinFunctionType):
            m = _BUILTIN_MODULE.__get__(obj)
        else:
            m = _static(obj, "__module__")
            if m is ABSENT or m is UNKNOWN:
                m = _TYPE_MODULE.__get__(type(obj))
    except Exception:  # noqa: BLE001
        return None
    return m if type(m) is str else None


def static_name(cls) -> str | None:
    """A class's `__name__` from its C slot."""
    try:
        n = _TYPE_NAME.__get__(cls)
    except Exception:  # noqa: BLE001
        return None
    return n if type(n) is str else None


def class_dict_names(cls) -> frozenset:
    """The names a class and its bases define (their own dicts), statically."""
    names = set()
    for c in mro(cls):
        try:
            names.update(k for k in _TYPE_DICT.__get__(c) if type(k) is str)
        except Exception:  # noqa: BLE001
            pass
    return frozenset(names)


@dataclass(frozen=True)
class Ref:
    """What a dotted path denotes: `path` as written (aliases expanded), `obj` the object found or
    ABSENT/UNKNOWN, and `via`: the modules the path passed through, outermost first."""
    path: str
    obj: object
    via: tuple = ()

    @property
    def kind(self) -> str:
        o = self.obj
        if o is ABSENT:
            return "absent"
        if o is UNKNOWN:
            return "unknown"
        if is_module(o):
            return "module"
        if is_class(o):
            return "class"
        if is_function(o):
            return "function"
        if is_data(o):
            return "data"
        return "object"

    @property
    def module(self) -> str | None:
        """The module's name when this is a module."""
        return module_name(self.obj) if self.kind == "module" else None


def root(name: str) -> Ref:
    """A top-level or dotted module name as `import` would bind it, from sys.modules only."""
    mod = sys.modules.get(name)
    if mod is None or not is_module(mod):
        return Ref(name, UNKNOWN)
    return Ref(name, mod, (module_name(mod) or name,))


def attr(ref: Ref, name: str) -> Ref:
    """`ref.name`, statically. A module's missing name that is a submodule file not yet imported is
    UNKNOWN (importing it would run its code), not ABSENT."""
    path = f"{ref.path}.{name}"
    if ref.obj is ABSENT or ref.obj is UNKNOWN:
        return Ref(path, ref.obj, ref.via)
    obj = _static(ref.obj, name)
    if obj is ABSENT and ref.kind == "module":
        mod_name = ref.module
        loaded = sys.modules.get(f"{mod_name}.{name}") if mod_name else None
        if loaded is not None:
            obj = loaded
        elif _submodule_on_disk(ref.obj, name) or _getattr_serves(ref.obj, mod_name, name):
            obj = UNKNOWN
    via = ref.via
    if is_module(obj):
        via = via + (module_name(obj) or path,)
    return Ref(path, obj, via)


# Modules whose `__getattr__` serves only the names listed in these module-level tables (besides
# submodules on disk), so any other missing name raises AttributeError at runtime. Read from the
# module's own dict; a change of the tables' shape makes every name UNKNOWN again (conservative).
GETATTR_TABLES = {"torch": ("_deprecated_attrs", "_lazy_modules")}


def _getattr_serves(mod, mod_name, name: str) -> bool:
    """Whether a module-level `__getattr__` may return something for `name`."""
    try:
        d = _MODULE_DICT.__get__(mod)
        if "__getattr__" not in d:
            return False
        tables = GETATTR_TABLES.get(mod_name)
        if not tables:
            return True
        for t in tables:
            served = d.get(t)
            if type(served) not in (dict, set, frozenset, list, tuple):
                return True
            if name in served:
                return True
        return False
    except Exception:  # noqa: BLE001
        return True


def _submodule_on_disk(mod, name: str) -> bool:
    """Whether `mod.name` would be found by the import system as a submodule (a file lookup in the
    package's `__path__`: nothing is imported or executed)."""
    try:
        d = _MODULE_DICT.__get__(mod)
        paths = d.get("__path__")
        if paths is None:
            return False
        return PathFinder.find_spec(f"{d.get('__name__')}.{name}", list(paths)) is not None
    except Exception:  # noqa: BLE001
        return True  # cannot tell: treat as "a module might load here"


def resolve(path: str) -> Ref:
    """A full dotted path from its root module (longest loaded module prefix, then attributes)."""
    parts = path.split(".")
    ref = root(parts[0])
    for p in parts[1:]:
        ref = attr(ref, p)
    return ref
