"""The AST walker of the static rules (static_check.py): every node of a candidate, with its
position (static_paths.py) and scope (static_scope.py), against the tables of static_policy.py.
"""
from __future__ import annotations

import ast
import re
import string

from . import static_paths as SP
from . import static_policy as P
from . import static_resolve as R
from . import static_scope as S
from .static_paths import Finding, Path

_TYPE_FUNCS = ("isinstance", "issubclass")
_ATTR_FUNCS = ("getattr", "hasattr", "setattr", "delattr")
_CLOCK_REGISTERS = re.compile(r"%\s*(globaltimer|clock)|s_memtime|s_memrealtime|s_getreg", re.I)
_ROOTS = frozenset(m.split(".")[0] for m in P.MODULES)
_WHAT = {"io": "files, processes, sockets", "concurrency": "threads/processes", "timer": "timers",
         "introspection": "interpreter/memory introspection", "banned-import": "dynamic imports",
         "torch-heavy-math": "PyTorch compute for the task's heavy math"}


class Walker(ast.NodeVisitor):
    def __init__(self, tree, banned_calls, extra_allowed):
        self.found: list[tuple[str, int, str, str]] = []   # rule, line, message, fix
        self.banned = frozenset(banned_calls)
        self.extra = frozenset(extra_allowed)
        self.alias, self.bound_values = S.collect_aliases(tree)
        self.refused_alias: set[str] = set()
        self.own_attrs = S.own_attribute_names(tree)
        self.pos: dict[int, str] = {}          # id(node) -> position other than "value"
        self.env_ok: set[int] = set()          # os.environ / os.getenv nodes of literal TRITON_* reads
        self.scopes: list[frozenset] = []      # locals of the enclosing function-like scopes
        self.jit_depth = 0
        self.os_imports: list = []
        self.os_misused = False
        self.synthetic: dict[int, ast.AST] = {}  # getattr/hasattr/setattr with a literal name -> Attribute
        self._positions(tree)

    # -- bookkeeping --------------------------------------------------------------------------------
    def add(self, rule, node, msg, fix=""):
        self.found.append((rule, getattr(node, "lineno", 0) or 0, msg, fix or P.FIX[rule]))

    def add_finding(self, f: Finding, node):
        self.add(f.rule, node, f.message, f.fix)

    def is_builtin(self, name: str) -> bool:
        """Whether a name here means the builtin: not a local of an enclosing function (module-level
        and class-level bindings are dynamic, so they do not count: `open = ...` after a use)."""
        return not any(name in s for s in self.scopes)

    def _positions(self, tree):
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                self.pos[id(node.value)] = "base"
            elif isinstance(node, ast.Call):
                self.pos[id(node.func)] = "call"
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                for d in node.decorator_list:
                    self.pos[id(d)] = "call"
                if not isinstance(node, ast.ClassDef):
                    if node.returns is not None:
                        self._type_tree(node.returns)
                    a = node.args
                    for arg in a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x]:
                        if arg.annotation is not None:
                            self._type_tree(arg.annotation)
            elif isinstance(node, ast.AnnAssign):
                self._type_tree(node.annotation)
            elif isinstance(node, ast.ExceptHandler) and node.type is not None:
                self._type_tree(node.type)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                self.pos[id(node)] = "import"
        for v in self.bound_values:
            if self.pos.get(id(v)) is None:
                self.pos[id(v)] = "bind"

    def _type_tree(self, node):
        """An annotation (or isinstance's class): read, never called; calls inside it are code."""
        if isinstance(node, (ast.Name, ast.Attribute)):
            self.pos[id(node)] = "type"
        elif isinstance(node, ast.Subscript):
            self._type_tree(node.value)
            self._type_tree(node.slice)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for e in node.elts:
                self._type_tree(e)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            self._type_tree(node.left)
            self._type_tree(node.right)

    def _special_call(self, node: ast.Call):
        """isinstance's class is a type position; getattr/hasattr/setattr/delattr with a literal
        name are the attribute they name. Decided when the call is visited: only the builtins
        (a local `getattr` may do anything with its arguments)."""
        f = node.func
        if not isinstance(f, ast.Name) or not self.is_builtin(f.id):
            return
        if f.id in _TYPE_FUNCS and len(node.args) == 2:
            self._type_tree(node.args[1])
        elif f.id in _ATTR_FUNCS and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                and isinstance(node.args[1].value, str) and node.args[1].value.isidentifier():
            ctx = ast.Store() if f.id == "setattr" else ast.Del() if f.id == "delattr" else ast.Load()
            syn = ast.Attribute(value=node.args[0], attr=node.args[1].value, ctx=ctx)
            ast.copy_location(syn, node)
            self.synthetic[id(node)] = syn
            self.pos[id(node.args[0])] = "base"
            self.pos[id(syn)] = "probe" if f.id == "hasattr" else self.pos.get(id(node), "value")
        elif f.id == "hasattr" and node.args:
            self.pos[id(node.args[0])] = "probe"

    def position(self, node) -> str:
        return self.pos.get(id(node), "value")

    # -- paths ------------------------------------------------------------------------------------------
    def check_path(self, node, path: Path, position: str):
        found, _ = SP.judge(path, position, self.banned)
        if found is not None:
            self.add_finding(found, node)
            if path.top == "os":
                self.os_misused = True
            return
        if position not in SP.HOLDS + SP.READ_ONLY + ("store", "call"):
            self._escape(node, path)

    def finish(self):
        """`import os` passes only when every use of it is a literal TRITON_* read: otherwise the
        import line itself is refused too (it is where the capability comes in)."""
        if self.os_misused:
            for node in self.os_imports:
                self.add("io", node, "imports os for more than reading TRITON_* environment variables "
                         "(files, processes, sockets)")

    def _escape(self, node, path: Path):
        """A module (or a restricted object) used as a value: passed, returned or stored, later
        paths through it would not be paths the rules resolve."""
        _, ref = SP.judge(path, "base", self.banned)
        if ref is None:
            return
        if ref.kind == "module" or (ref.kind == "object" and id(ref.obj) in SP.ANCHORS):
            self.add("introspection", node, f"{path} is used as a value (passed, returned or stored)",
                     "bind it to a name (`lib = torch.cuda`), read from it at once (tl.math.exp), or import "
                     "the submodule (`from triton.language.extra import libdevice`)")

    def _literal_getattr(self, node) -> bool:
        """`getattr(x, "name"[, default])` with the builtin getattr: the attribute x.name."""
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                and self.is_builtin("getattr") and 2 <= len(node.args) <= 3 and not node.keywords
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
                and node.args[1].value.isidentifier())

    def paths(self, node) -> list:
        """The module paths an expression denotes (attributes, literal getattrs, from an alias)."""
        attrs = []
        while True:
            if isinstance(node, ast.Attribute):
                attrs.append(node.attr)
                node = node.value
            elif self._literal_getattr(node):
                attrs.append(node.args[1].value)
                node = node.args[0]
            else:
                break
        if not isinstance(node, ast.Name) or node.id not in self.alias:
            return []
        return [Path(p.start, tuple(p.attrs) + tuple(reversed(attrs))) for p in self.alias[node.id]]

    def root_name(self, node):
        while True:
            if isinstance(node, ast.Attribute):
                node = node.value
            elif self._literal_getattr(node):
                node = node.args[0]
            else:
                return node.id if isinstance(node, ast.Name) else None

    # -- imports ----------------------------------------------------------------------------------------
    def _import_root(self, node, mod: str) -> bool:
        """The top-level module of an import; False when refused."""
        top = mod.split(".")[0]
        if top in self.extra:
            return False  # allowed by the operator (KERNELD_STATIC_ALLOW_IMPORTS): not checked further
        rule = None
        if top.lower() in P.THIRD_PARTY_KERNEL_LIBS:
            rule, why = "banned-import", f"imports {mod} (a third-party kernel library)"
        elif top in P.IMPORT_MACHINERY:
            rule, why = "banned-import", f"imports {mod} (dynamic imports)"
        elif top == "os":
            self.os_imports.append(node)
            return True
        elif top in _ROOTS:
            return True
        elif SP.module_rule(top) != "allow-list":
            rule = SP.module_rule(top)
            why = f"imports {mod} ({_WHAT[rule]})"
        else:
            rule = "banned-import"
            why = f"imports {mod} (allowed: torch, triton, numpy, math and the stdlib helpers of docs/HARNESS.md §4)"
        if rule:
            self.add(rule, node, why, SP.module_fix(top, rule))
            return False
        return True

    def visit_Import(self, node):
        for name, path, mod in S.import_paths(node):
            if not self._import_root(node, mod):
                self.refused_alias.add(name)
                continue
            parts = mod.split(".")
            found, _ = SP.judge(Path(parts[0], tuple(parts[1:])), "import", self.banned)
            if found is None and path != Path(parts[0], tuple(parts[1:])):
                found, _ = SP.judge(path, "import", self.banned)
            if found is not None:
                self.add_finding(found, node)
                self.refused_alias.add(name)

    def visit_ImportFrom(self, node):
        if node.level:
            self.add("banned-import", node, "relative import", "a candidate is one file: paste the helper's code in")
            return
        if not self._import_root(node, node.module or ""):
            self.refused_alias.update(n for n, _, _ in S.import_paths(node))
            return
        mod = node.module
        parts = mod.split(".")
        found, _ = SP.judge(Path(parts[0], tuple(parts[1:])), "import", self.banned)
        if found is not None:
            self.add_finding(found, node)
            self.refused_alias.update(n for n, _, _ in S.import_paths(node))
            return
        for a in node.names:
            if a.name == "*":
                self.add("banned-import", node, f"star import from {mod}", f"import the names you use from {mod}")
                continue
            if not (mod == "os" and a.name in ("environ", "getenv")):
                for rule, msg, *fix in self._name_rules(a.name):
                    self.add(rule, node, msg, *fix)
            found, _ = SP.judge(Path(mod, (a.name,)), "import", self.banned)
            if found is not None:
                self.add_finding(found, node)
                self.refused_alias.add(a.asname or a.name)

    # -- attributes and names -------------------------------------------------------------------------
    def _name_rules(self, a: str, ctx=None) -> list:
        """Rules an attribute name triggers on any object: (rule, message[, fix])."""
        out = []
        if a in P.METHOD_IO:
            out.append(("io", f"method .{a}() (writes a file: numpy's ndarray.tofile/dump)"))
        if a in ("format", "format_map"):
            out.append(("introspection", f".{a}() on a template that is not a literal, or whose fields read "
                        f"attributes or items ({{0.attr}}, {{0[key]}}): format strings can read any attribute",
                        "use an f-string, or a literal template with plain fields"))
        elif a in P.REACH_ATTRS:
            out.append((P.REACH_ATTRS[a], f"attribute .{a} (reaches the OS or the interpreter: files, processes, "
                        f"sockets or native code)"))
        elif a.startswith("__") and a.endswith("__") and a not in P.ALLOWED_DUNDER_ATTRS \
                and not (a == "__class__" and isinstance(ctx, ast.Load)):
            out.append(("introspection", f"dunder attribute .{a} (interpreter internals)",
                        "use the object's public attributes"))
        elif a in P.FRAME_ATTRS:
            out.append(("introspection", f"frame/trace attribute .{a} (reads the harness's state through the stack)"))
        elif a in P.POINTER_ATTRS:
            out.append(("introspection", f".{a} (memory identity: the tool of caching outputs by pointer)",
                        "pass the tensors themselves to the kernel (Triton takes their addresses); keep no "
                        "addresses or storages on the host"))
        return out

    def visit_Attribute(self, node):
        self._attribute(node)
        self.generic_visit(node)

    def _attribute(self, node):
        a = node.attr
        if id(node) not in self.env_ok and not self._format_ok(node):
            for rule, msg, *fix in self._name_rules(a, node.ctx):
                self.add(rule, node, msg, *fix)
        position = self.position(node)
        paths = self.paths(node)
        if not paths:
            self._object_attribute(node, a)  # every link of an object's chain (`t._base.data`)
            return
        if position == "base" or self.root_name(node) in self.refused_alias or id(node) in self.env_ok:
            return  # the outermost attribute of a module path judges the whole path
        for p in paths:  # a store or del judges the path too (and _check_target the patching)
            self.check_path(node, p, position if isinstance(node.ctx, ast.Load) else "store")

    def _object_attribute(self, node, a: str):
        """An attribute of an object (not a module path): methods doing the heavy math, private
        internals of objects the candidate did not define."""
        if self.jit_depth == 0:
            if a in P.HEAVY_NAMES or a in self.banned:
                self.add("torch-heavy-math", node, f"method .{a}() (PyTorch compute for the task's heavy math)")
            elif a in ("elapsed_time", "record", "Event", "perf_counter"):
                self.add("timer", node, f".{a} (timers)")
            elif a in ("Stream", "stream", "wait_stream", "record_stream", "set_stream"):
                self.add("concurrency", node, f".{a} (side streams)")
        if a.startswith("_") and not a.startswith("__") and a not in self.own_attrs and a not in P.OBJECT_PRIVATE_OK:
            self.add("introspection", node, f"private attribute .{a} of an object this file did not define "
                     f"(PyTorch/Triton/Python internals)", "use the object's public API")

    def _format_ok(self, node) -> bool:
        """`"literal".format(...)` whose fields read no attributes or items is plain formatting."""
        if node.attr != "format" or not isinstance(node.value, ast.Constant) or not isinstance(node.value.value, str):
            return False
        try:
            for _, field, spec_, _ in string.Formatter().parse(node.value.value):
                if any(c in (field or "") for c in ".[{") or "{" in (spec_ or ""):
                    return False
        except ValueError:
            return False
        return True

    def visit_Name(self, node):
        n = node.id
        builtin = self.is_builtin(n)
        if n in self.alias and n not in self.refused_alias and self.position(node) not in ("base",):
            if isinstance(node.ctx, ast.Load):
                for p in self.alias[n]:
                    self.check_path(node, p, self.position(node))
        if not builtin:
            return
        if n in _ATTR_FUNCS and self.position(node) == "call" and self._literal_attr_call(node):
            return
        if n in P.DYNAMIC_CODE_BUILTINS:
            self.add("banned-import", node, f"{n}() (dynamic code / imports)", "write the code out")
        elif n in P.IO_BUILTINS:
            self.add("io", node, f"{n}() (I/O)")
        elif n in _ATTR_FUNCS:
            self.add("introspection", node, f"{n}() with a computed attribute name (it can reach any attribute: "
                     f"the rules cannot see which)", f"write the attribute out (obj.attr), or {n}(obj, \"literal\")")
        elif n in P.INTROSPECTION_BUILTINS:
            self.add("introspection", node, f"{n} (reflection on interpreter or harness state)",
                     "keep your own state in your own variables")
        elif n.startswith("__") and n.endswith("__") and n not in P.DUNDER_NAMES_OK:
            self.add("introspection", node, f"dunder name {n}")

    def _literal_attr_call(self, name_node) -> bool:
        return any(id(c.func) == id(name_node) and id(c) in self.synthetic for c in self._calls_here)

    # -- calls ------------------------------------------------------------------------------------------
    _calls_here: list = []

    def visit_Call(self, node):
        if isinstance(node.func, ast.Name) and node.func.id == "type" and len(node.args) == 3:
            self.add("introspection", node, "type(name, bases, dict) (dynamic class creation)", "write a class statement")
        self._env_read(node)
        self._keywords(node)
        self._inline_asm(node)
        self._special_call(node)
        syn = self.synthetic.get(id(node))
        prev = self._calls_here
        self._calls_here = [node]
        self.visit(node.func)
        self._calls_here = prev
        if syn is not None:
            if isinstance(syn.ctx, ast.Load):
                self.visit(syn)  # getattr(x, "n") is x.n; hasattr reads only
            else:
                self._check_target(syn)
                self.visit(syn.value)
            for extra in node.args[2:]:
                self.visit(extra)
        else:
            for a in node.args:
                self.visit(a)
        for k in node.keywords:
            self.visit(k)

    def _env_read(self, node: ast.Call):
        """`os.environ.get("TRITON_X")` / `os.getenv("TRITON_X", d)`: Triton's knobs, read by name."""
        f = node.func
        paths = {str(p) for p in self.paths(f)}
        if not paths & {"os.environ.get", "os.getenv"}:
            return
        if node.args and _env_name_ok(node.args[0]):
            n = f
            while isinstance(n, ast.Attribute):
                self.env_ok.add(id(n))
                n = n.value
            return
        self.os_misused = True
        self.add("io", node, "reads an environment variable whose name is not a literal TRITON_* name",
                 "use a constant or a SPACE parameter; only Triton's own TRITON_* knobs may be read")

    def _inline_asm(self, node: ast.Call):
        """Inline assembly is read as text: a literal, and no clock register (a kernel that reads
        %globaltimer/%clock times itself, as a host timer would)."""
        if not any(str(p).startswith("triton") and str(p).endswith(".inline_asm_elementwise")
                   for p in self.paths(node.func)):
            return
        asm = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "asm"), None)
        if not (isinstance(asm, ast.Constant) and isinstance(asm.value, str)):
            self.add("allow-list", node, "inline assembly that is not a literal string (the rules read it as text)",
                     "write the assembly as one literal string")
        elif _CLOCK_REGISTERS.search(asm.value):
            self.add("timer", node, "inline assembly reads a clock register (%globaltimer, %clock, s_memtime)",
                     P.FIX["timer"])

    def visit_Subscript(self, node):
        # os.environ["TRITON_X"] (a read)
        if isinstance(node.ctx, ast.Load) and {str(p) for p in self.paths(node.value)} == {"os.environ"} \
                and _env_name_ok(node.slice):
            n = node.value
            while isinstance(n, ast.Attribute):
                self.env_ok.add(id(n))
                n = n.value
        self.generic_visit(node)

    def visit_Compare(self, node):
        # "TRITON_X" in os.environ
        if len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)) \
                and _env_name_ok(node.left) \
                and {str(p) for p in self.paths(node.comparators[0])} == {"os.environ"}:
            n = node.comparators[0]
            while isinstance(n, ast.Attribute):
                self.env_ok.add(id(n))
                n = n.value
        self.generic_visit(node)

    def _keywords(self, node: ast.Call):
        """Keyword arguments of allowed calls that hand the judge's job to the candidate."""
        target, kwargs, args = node.func, node.keywords, node.args
        for p in self.paths(target):
            if str(p) == "functools.partial" and args:  # functools.partial(triton.autotune, use_cuda_graph=True)
                target, args = args[0], args[1:]
                break
        for p in self.paths(target):
            _, ref = SP.judge(p, "call", self.banned)
            pol = SP.keyword_policy(ref.obj) if ref is not None else None
            if pol is None:
                continue
            name, rules, params = pol
            given = {k.arg: k.value for k in kwargs if k.arg}
            given.update({params[i]: a for i, a in enumerate(args) if i < len(params) and not isinstance(a, ast.Starred)})
            if any(k.arg is None for k in kwargs) or any(isinstance(a, ast.Starred) for a in args):
                self.add("allow-list", node, f"{name}(...) with *args/**kwargs: its arguments cannot be checked",
                         f"pass {name}'s arguments by name")
            for kw, rule, why, harmless in rules:
                v = given.get(kw)
                if v is None:
                    continue
                if isinstance(v, ast.Constant) and (v.value is harmless or v.value is None):
                    continue
                self.add(rule, v, f"{name}({kw}=...) {why}", P.FIX[rule])
            return

    # -- definitions and statements ---------------------------------------------------------------------
    def _is_jit(self, dec) -> bool:
        d = dec.func if isinstance(dec, ast.Call) else dec
        for p in self.paths(d):
            s = str(p)
            if s.endswith(".jit") and (s.startswith("triton") or "gluon" in s):
                return True
        return False

    def _visit_func(self, node):
        if node.name.startswith("__") and node.name.endswith("__") and node.name not in P.ALLOWED_DUNDER_DEFS:
            self.add("introspection", node, f"defines {node.name} (hooks into Python/PyTorch protocols)",
                     "use an ordinary method name")
        jit = any(self._is_jit(d) for d in node.decorator_list)
        for d in node.decorator_list:
            self.visit(d)
        self.visit(node.args)
        if node.returns is not None:
            self._annotation(node.returns)
        self.scopes.append(S.function_locals(node))
        self.jit_depth += jit
        for b in node.body:
            self.visit(b)
        self.jit_depth -= jit
        self.scopes.pop()

    visit_FunctionDef = _visit_func
    visit_AsyncFunctionDef = _visit_func

    def _scoped(self, node):
        self.scopes.append(S.function_locals(node))
        self.generic_visit(node)
        self.scopes.pop()

    visit_Lambda = _scoped
    visit_ListComp = _scoped
    visit_SetComp = _scoped
    visit_DictComp = _scoped
    visit_GeneratorExp = _scoped

    def visit_ClassDef(self, node):
        for b in node.bases + [k.value for k in node.keywords]:
            for p in self.paths(b):
                if p.top == "torch" and str(p) not in P.TORCH_BASES_OK and str(_canonical(p)) not in P.TORCH_BASES_OK:
                    self.add("introspection", node, f"class {node.name} subclasses {p} (tensor subclasses, dispatch "
                             f"modes and hooks)", "derive from torch.autograd.Function or torch.nn.Module, or from "
                             "nothing")
        self.generic_visit(node)

    def visit_BinOp(self, node):
        if isinstance(node.op, ast.MatMult) and self.jit_depth == 0:
            self.add("torch-heavy-math", node, "the @ operator (matrix product outside a Triton kernel)")
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        if isinstance(node.op, ast.MatMult) and self.jit_depth == 0:
            self.add("torch-heavy-math", node, "the @= operator")
        self._check_target(node.target)
        self.generic_visit(node)

    def _check_target(self, t):
        if isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts:
                self._check_target(e)
            return
        if isinstance(t, ast.Starred):
            self._check_target(t.value)
            return
        if isinstance(t, ast.Attribute):
            if t.attr == "__class__":
                self.add("introspection", t, "assigns .__class__ (changes what an object is)", "make a new object")
            base = t.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in self.alias:
                self.add("introspection", t, f"assigns {'.'.join(_chain(t))} (patching a module)",
                         "keep your own state in your own objects")
            elif isinstance(base, ast.Name) and base.id in ("inputs", "out", "config"):
                self.add("introspection", t, f"assigns an attribute of {base.id}", "write into the output tensors")

    def visit_Assign(self, node):
        for t in node.targets:
            self._check_target(t)
        self.generic_visit(node)

    def visit_Delete(self, node):
        for t in node.targets:
            self._check_target(t)
        self.generic_visit(node)

    def visit_MatchClass(self, node):
        # `case object(__globals__=g)` reads attributes by name: the builtins through a function
        if node.kwd_attrs:
            self.add("introspection", node, f"match class pattern reading attribute(s) {', '.join(node.kwd_attrs)} "
                     f"(attribute access the rules cannot see)", "read attributes with a dotted name")
        self.generic_visit(node)

    def _annotation(self, ann):
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            try:
                expr = ast.parse(ann.value, mode="eval").body
            except (SyntaxError, ValueError):
                self.add("introspection", ann, "a string annotation that is not an expression",
                         "write the annotation without quotes")
                return
            probe = expr
            while isinstance(probe, (ast.Attribute, ast.Subscript)):
                probe = probe.value
            if not isinstance(probe, ast.Name) or any(isinstance(n, (ast.Call, ast.Lambda, ast.NamedExpr))
                                                      for n in ast.walk(expr)):
                self.add("introspection", ann, f"string annotation {ann.value[:60]!r} is code (typing evaluates "
                         f"annotations with the module's builtins)", "annotate with a type name")
            else:
                for n in ast.walk(expr):
                    ast.copy_location(n, ann)
                    if isinstance(n, ast.Attribute):
                        self.pos[id(n.value)] = "base"
                self._type_tree(expr)
                self.visit(expr)
        else:
            self.visit(ann)

    def visit_arg(self, node):
        if node.annotation is not None:
            self._annotation(node.annotation)

    def visit_AnnAssign(self, node):
        self._annotation(node.annotation)
        self._check_target(node.target)
        self.visit(node.target)
        if node.value is not None:
            self.visit(node.value)

    def visit_Await(self, node):
        self.add("concurrency", node, "await (async code)", P.FIX["concurrency"])
        self.generic_visit(node)

    visit_AsyncFor = visit_Await
    visit_AsyncWith = visit_Await


def _env_name_ok(node) -> bool:
    """A literal TRITON_* name, or an f-string that starts with one (f"TRITON_AUTOTUNE_{x}")."""
    if isinstance(node, ast.JoinedStr) and node.values:
        node = node.values[0]
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(P.ENV_PREFIXES)


def _chain(node):
    out = []
    while isinstance(node, ast.Attribute):
        out.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        out.append(node.id)
    return out[::-1]


def _canonical(p: Path) -> Path:
    """A class path by where the class lives (torch.nn.Module and torch.nn.modules.module.Module)."""
    _, ref = SP.judge(p, "type")
    if ref is not None and R.is_class(ref.obj):
        home = R.home(ref.obj)
        name = R.static_name(ref.obj)
        if home and name:
            return Path(home, (name,))
    return p
