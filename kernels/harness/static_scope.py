"""What the static rules need to know about a candidate's names before walking it
(static_walk.py): which names are function locals (a parameter called `input` is not the
builtin), which names alias a module path (`import torch.nn.functional as F`, `lib = torch.cuda`,
every branch of a try/except import), which attribute names the candidate defines itself, and how
each expression is used (its position: static_paths.py).
"""
from __future__ import annotations

import ast

from .static_paths import Path

FUNC_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
               ast.GeneratorExp)


def function_locals(scope) -> frozenset:
    """Names a function-like scope binds itself (so they never mean a builtin inside it): its
    parameters and every name it assigns, imports, defines or catches, minus `global` ones."""
    bound, glob = set(), set()
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        a = scope.args
        for arg in a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x]:
            bound.add(arg.arg)
        body = scope.body if isinstance(scope.body, list) else [scope.body]
    else:
        body = [g.target for g in scope.generators]
    stack = list(body)
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Global):
            glob.update(n.names)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            bound.add(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name.split(".")[0]) for a in n.names)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(n.name)
            stack.extend(n.decorator_list)  # their bodies are other scopes
            continue
        elif isinstance(n, ast.ExceptHandler) and n.name:
            bound.add(n.name)
        elif isinstance(n, (ast.MatchAs, ast.MatchStar)) and n.name:
            bound.add(n.name)
        elif isinstance(n, ast.MatchMapping) and n.rest:
            bound.add(n.rest)
        if isinstance(n, FUNC_SCOPES[2:]):
            continue  # a nested lambda/comprehension binds its own
        stack.extend(ast.iter_child_nodes(n))
    return frozenset(bound - glob)


def path_of(node, alias) -> list:
    """The module paths an expression denotes: a Name aliasing paths, or attributes read from one."""
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in alias:
        return []
    return [Path(p.start, tuple(p.attrs) + tuple(reversed(attrs))) for p in alias[node.id]]


def _alias_rhs(node, alias):
    """The paths a simple assignment's value denotes (a path, or an `a if c else b` of paths)."""
    if isinstance(node, ast.IfExp):
        left, right = _alias_rhs(node.body, alias), _alias_rhs(node.orelse, alias)
        return left + right if left and right else []
    return path_of(node, alias)


def import_paths(node) -> list:
    """(bound name, Path, whole-statement module) for every name an import binds."""
    out = []
    if isinstance(node, ast.Import):
        for a in node.names:
            parts = a.name.split(".")
            if a.asname:
                out.append((a.asname, Path(parts[0], tuple(parts[1:])), a.name))
            else:
                out.append((parts[0], Path(parts[0]), a.name))
    elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
        for a in node.names:
            if a.name != "*":
                out.append((a.asname or a.name, Path(node.module, (a.name,)), node.module))
    return out


def collect_aliases(tree) -> tuple[dict, set]:
    """name -> {Path} for every import and every simple `name = <path>` assignment anywhere (all
    branches: a name imported in try and except keeps both). Returns (aliases, the value nodes of
    alias assignments, which therefore do not make a module escape)."""
    alias: dict[str, set] = {}
    bound_values: set = set()
    for n in ast.walk(tree):
        for name, path, _ in import_paths(n):
            alias.setdefault(name, set()).add(path)
    assigns = [n for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None]
    for _ in range(6):  # chains (`a = torch; b = a.cuda`) settle in a few rounds
        changed = False
        for n in assigns:
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            if len(targets) != 1 or not isinstance(targets[0], ast.Name):
                continue
            paths = _alias_rhs(n.value, alias)
            if paths:
                bound_values.update(_alias_nodes(n.value))
                have = alias.setdefault(targets[0].id, set())
                if not set(paths) <= have:
                    have.update(paths)
                    changed = True
        if not changed:
            break
    return alias, bound_values


def _alias_nodes(node):
    if isinstance(node, ast.IfExp):
        return _alias_nodes(node.body) + _alias_nodes(node.orelse)
    return [node]


def own_attribute_names(tree) -> frozenset:
    """Attribute names the candidate defines itself: assigned on any object (`self._x = ...`,
    `setattr(o, "_x", v)`), or defined in one of its class bodies."""
    names = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
            names.add(n.attr)
        elif isinstance(n, ast.ClassDef):
            for b in n.body:
                if isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(b.name)
                elif isinstance(b, ast.Assign):
                    names.update(t.id for t in b.targets if isinstance(t, ast.Name))
                elif isinstance(b, ast.AnnAssign) and isinstance(b.target, ast.Name):
                    names.add(b.target.id)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "setattr" \
                and len(n.args) >= 2 and isinstance(n.args[1], ast.Constant) and isinstance(n.args[1].value, str):
            names.add(n.args[1].value)
    return frozenset(names)
