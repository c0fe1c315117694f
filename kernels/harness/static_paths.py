"""Judging one dotted path rooted at an imported module (static_check.py): the table of
static_policy.py walked along the path, with static_resolve.py saying what each step denotes.

A path is `Path(start, attrs)`: `start` is a module name as the import system finds it
(`from triton.runtime.driver import driver` starts at the module `triton.runtime.driver`, whose
`driver` attribute differs from the package attribute `triton.runtime.driver`), `attrs` the
attribute names read from it. Positions say how the candidate uses the path:

    call    called (or applied as a decorator)       value   stored, passed, returned, compared
    base    an attribute is read from it at once      bind    bound to a name (import, `x = a.b`)
    type    an annotation, isinstance's class, except   probe   hasattr's object

Reading is harmless where nothing is called: `type` and `probe` positions may name any class,
function or constant of the allowed packages (`x: torch.LongTensor`); a heavy-math function is
only refused where it can be called (call, value, bind).
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass

from . import static_policy as P
from . import static_resolve as R

R.preimport(sorted(P.MODULES))

READ_ONLY = ("type", "probe")
HOLDS = ("base", "bind", "import")  # positions that keep a module/object under the rules' eyes


@dataclass(frozen=True)
class Path:
    start: str
    attrs: tuple = ()

    def __str__(self) -> str:
        return ".".join((self.start,) + tuple(self.attrs))

    def child(self, name: str) -> "Path":
        return Path(self.start, tuple(self.attrs) + (name,))

    @property
    def top(self) -> str:
        return self.start.split(".")[0]


@dataclass(frozen=True)
class Finding:
    rule: str
    message: str
    fix: str = ""


def in_table(mod: str) -> bool:
    return mod in P.MODULES or any(mod == w or mod.startswith(w + ".") for w in P.WILDCARD_PACKAGES)


def spec(mod: str):
    if any(mod == w or mod.startswith(w + ".") for w in P.WILDCARD_PACKAGES):
        return P.WILDCARD
    return P.MODULES.get(mod)


def module_rule(mod: str) -> str:
    """The rule of reaching module `mod` (what it gives access to)."""
    best = None
    for pre, rule in P.MODULE_RULES.items():
        if (mod == pre or mod.startswith(pre + ".")) and (best is None or len(pre) > len(best[0])):
            best = (pre, rule)
    if best:
        return best[1]
    top = mod.split(".")[0].lstrip("_")
    if top in P.IMPORT_MACHINERY or top == "frozen_importlib" or top in P.THIRD_PARTY_KERNEL_LIBS:
        return "banned-import"
    for mods, rule in ((P.IO_MODULES, "io"), (P.CONCURRENCY_MODULES, "concurrency"),
                       (P.INTROSPECTION_MODULES, "introspection"), (P.TIMER_MODULES, "timer")):
        if top in mods:
            return rule
    return "allow-list"


def module_fix(mod: str, rule: str) -> str:
    for pre, fix in P.MODULE_FIX.items():
        if mod == pre or mod.startswith(pre + "."):
            return fix
    return P.FIX[rule]


def _start_ref(path: Path) -> R.Ref:
    """The start module: from sys.modules as `import` finds it, else attribute by attribute."""
    ref = R.root(path.start)
    if ref.obj is R.UNKNOWN and "." in path.start:
        parts = path.start.split(".")
        ref = R.root(parts[0])
        for p in parts[1:]:
            ref = R.attr(ref, p)
    return ref


def _own(key: str, obj) -> bool:
    """Whether a wildcard module's name is its package's own (not another library's re-export)."""
    if R.is_data(obj):
        return True
    if R.is_module(obj):
        return False
    home = R.home(obj) if (R.is_class(obj) or R.is_function(obj)) else R.home(type(obj))
    if home is None:
        return False
    own_top = key.split(".")[0]
    return home.split(".")[0] == own_top or (own_top == "math" and home == "math")


def _anchors():
    out = {}
    for anchor, suffixes in P.OBJECT_PATHS.items():
        ref = R.resolve(anchor)
        if ref.obj is not R.ABSENT and ref.obj is not R.UNKNOWN:
            out[id(ref.obj)] = (anchor, frozenset(suffixes))
    return out


def _keyword_ids():
    """id(callee) -> (name, rules, callee, its parameter names): read once from the judge's own
    trusted functions, never from anything a candidate names."""
    out = {}
    for name, rules in P.KEYWORD_POLICY.items():
        ref = R.resolve(name)
        if ref.obj is R.ABSENT or ref.obj is R.UNKNOWN:
            continue
        try:
            params = list(inspect.signature(ref.obj).parameters)
        except (TypeError, ValueError):
            params = []
        if params and params[0] == "self":
            params = params[1:]
        out[id(ref.obj)] = (name, rules, ref.obj, params)
    return out


ANCHORS = _anchors()
KEYWORDS = _keyword_ids()


def keyword_policy(obj):
    """(name, [(keyword, rule, why, harmless value)], parameter names) for a callee with keyword rules."""
    hit = KEYWORDS.get(id(obj))
    if hit is None or hit[2] is not obj:
        return None
    return hit[0], hit[1], hit[3]


def _pre_checks(path: Path, position: str, banned) -> Finding | None:
    """Capabilities named by the path's own words, before the table (a side stream is a side stream
    wherever torch keeps the class)."""
    full = str(path)
    parts = full.split(".")
    top, last = parts[0], parts[-1]
    if top not in ("torch", "triton", "numpy") or len(parts) < 2 or position in READ_ONLY:
        return None
    if top == "torch":
        for p in P.HEAVY_MODULE_PREFIXES:
            if full == p or full.startswith(p + "."):
                return Finding("torch-heavy-math", f"uses {full} (PyTorch compute for the task's heavy math)",
                               P.FIX["torch-heavy-math"])
        autocast = "autocast" in last and not last.startswith(("is_", "get_"))  # queries read the state only
        if last in P.TORCH_GLOBAL_SETTERS or last.startswith("set_") or autocast or "backends" in parts[1:]:
            return Finding("introspection", f"uses {full} (PyTorch global state)", module_fix("torch.backends",
                                                                                                "introspection"))
        if last in P.HEAVY_NAMES or last in banned:
            return Finding("torch-heavy-math", f"calls {full} (PyTorch compute for the task's heavy math)",
                           P.FIX["torch-heavy-math"])
        if any(p in P.CONCURRENCY_ATTRS for p in parts[1:]):
            return Finding("concurrency", f"uses {full} (side streams / CUDA graphs)", P.FIX["concurrency"])
    if any(p in P.TIMER_ATTRS for p in parts[1:]) or full.startswith("triton.testing"):
        return Finding("timer", f"uses {full} (timers / benchmarking)", P.FIX["timer"])
    if top in ("torch", "numpy") and last in P.IO_TORCH_ATTRS:
        return Finding("io", f"uses {full} (file I/O)", P.FIX["io"])
    return None


def _unlisted(key: str, name: str, nxt: R.Ref, full: str, position: str) -> Finding | None:
    """A name a (non-wildcard) table module does not list: harmless constants and absent names
    pass; reading only passes; the rest is refused by what it is."""
    rule = module_rule(key)
    if rule != "allow-list":  # every name of `os` is io, ...
        return Finding(rule, f"uses {full}", module_fix(key, rule))
    kind = nxt.kind
    if kind in ("data", "absent"):
        return None
    if kind == "unknown":
        rule = module_rule(f"{key}.{name}")
        return Finding(rule, f"{full} cannot be checked without importing or running code (a module "
                       f"not loaded, or a lazily created attribute)", module_fix(f"{key}.{name}", rule))
    if position in READ_ONLY:
        return None
    if kind == "function" and key in P.MATH_NAMESPACES:
        return Finding("torch-heavy-math", f"calls {full}, which is not on the allow-list of PyTorch/NumPy calls a "
                       f"candidate may make (allocation, views, copies, elementwise, small reductions)",
                       P.FIX["torch-heavy-math"])
    listed = P.MODULES.get(key)
    hint = f"; {key} offers: {', '.join(sorted(listed)[:12])}{', ...' if len(listed) > 12 else ''}" \
        if isinstance(listed, set) and listed else ""
    return Finding("allow-list", f"{full} is not on the allow-list of attribute paths{hint}", P.FIX["allow-list"])


def _leaf(ref: R.Ref, rest: tuple, full: str, position: str, listed: bool) -> Finding | None:
    """After the table's last name: functions, classes and constants are the candidate's to use;
    objects with properties only through the paths OBJECT_PATHS lists."""
    kind = ref.kind
    private = [r for r in rest if r.startswith("_") and r not in P.ALLOWED_DUNDER_ATTRS]
    if private:  # a class's or function's internals (JITFunction._do_compile)
        return Finding("introspection", f"private API {full}", P.FIX["introspection"])
    hit = ANCHORS.get(id(ref.obj)) if kind == "object" else None
    if hit is not None:
        anchor, allowed = hit
        suffix = ".".join(rest)
        if suffix in allowed and (rest or position in HOLDS + READ_ONLY):
            return None
        if position in HOLDS and (not rest or any(a.startswith(suffix + ".") for a in allowed)):
            return None
        return Finding("allow-list", f"{full}: below {anchor} only these are checked: "
                       f"{', '.join(anchor + '.' + a for a in sorted(allowed))}",
                       f"call one of them with its full path (e.g. {anchor}.{sorted(allowed)[0]}())")
    if not rest or kind in ("function", "class", "data") or (listed and kind in ("absent", "unknown")):
        return None
    if kind == "object" and R.home(type(ref.obj)) and R.home(type(ref.obj)).split(".")[0] == "triton" \
            and any(full.startswith(w) for w in ("triton.language", "triton.experimental.gluon")):
        return None  # a value of Triton's language (a dtype, a layout)
    return Finding("allow-list", f"{full}: {'.'.join(full.split('.')[:-len(rest)])} is an object whose attributes "
                   f"the rules cannot check", P.FIX["allow-list"])


@functools.lru_cache(maxsize=8192)
def judge(path: Path, position: str, banned=frozenset()) -> tuple[Finding | None, R.Ref | None]:
    """The finding for `path` used at `position` (None: it passes), and what it denotes. A pure
    function of its arguments and of the modules' static state (kernels name `tl.load` hundreds of
    times), so it is memoised."""
    full = str(path)
    pre = _pre_checks(path, position, banned)
    if pre is not None:
        return pre, None
    ref = _start_ref(path)
    key = R.module_name(ref.obj) if ref.kind == "module" else path.start
    if not in_table(key):
        rule = module_rule(key)
        return Finding(rule, f"imports {key}" if not path.attrs else f"{full} reaches the module {key}",
                       module_fix(key, rule)), ref
    attrs = tuple(path.attrs)
    reading = False  # following a public module off the table, only to read a class in a type position
    for i, name in enumerate(attrs):
        nxt = R.attr(ref, name)
        rest = attrs[i + 1:]
        here = f"{key}.{name}"
        s = None if reading else spec(key)
        private = name.startswith("_") and name not in P.ALLOWED_DUNDER_ATTRS
        if private and s is not P.WILDCARD:
            return Finding("introspection", f"private API {full}", P.FIX["introspection"]), nxt
        if key == "os" and name in ("environ", "getenv") and not rest and position in ("import", "bind"):
            return None, nxt  # `from os import environ`: its reads are checked where they happen
        if nxt.kind == "module" or (nxt.kind == "unknown" and here in P.MODULES):
            mod = nxt.module or here
            if in_table(mod) and not reading:
                ref, key = nxt, mod
                continue
            if position in READ_ONLY and mod.split(".")[0] == path.top and "._" not in "." + mod:
                ref, key, reading = nxt, mod, True  # an annotation may name a class of any public submodule
                continue
            rule = module_rule(mod)
            return Finding(rule, f"{full} reaches the module {mod} (not on the allow-list)",
                           module_fix(mod, rule)), nxt
        if reading:
            return None, nxt
        if s is P.FREE:
            return None, nxt
        if s is P.WILDCARD:
            if nxt.kind == "absent":
                return None, nxt  # not in this version: the runner's import or read fails, nothing runs
            if nxt.kind == "unknown":
                return Finding("allow-list", f"{full} cannot be checked without running code",
                               P.FIX["allow-list"]), nxt
            if not _own(key, nxt.obj):
                h = R.home(nxt.obj) or R.home(type(nxt.obj)) or "another module"
                rule = module_rule(h)
                return Finding(rule if rule != "allow-list" else "introspection",
                               f"{full} is {h}'s {name!r}, re-exported by {key} (only {key}'s own names are on "
                               f"the allow-list)", f"import it from {h} if that module is allowed"), nxt
            return _leaf(nxt, rest, full, position, True), _end(nxt, rest)
        if name not in s:
            found = _unlisted(key, name, nxt, full, position)
            if found is None and rest and nxt.kind not in ("data", "absent"):
                return _leaf(nxt, rest, full, position, False), _end(nxt, rest)
            return found, _end(nxt, rest)
        return _leaf(nxt, rest, full, position, True), _end(nxt, rest)
    return None, ref


def _end(ref: R.Ref, rest: tuple) -> R.Ref:
    """What the whole path denotes: the leaf, or, below it, whatever the attributes resolve to
    statically (UNKNOWN past a property)."""
    for name in rest:
        ref = R.attr(ref, name)
    return ref
