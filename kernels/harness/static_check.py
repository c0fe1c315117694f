"""Static rules checked on a candidate's source before it is imported (HARNESS.md section 4).

Every rejection names its rule, its line and what to do instead:
`rejected [banned-import] line 3: imports flash_attn (a third-party kernel library); instead: ...`.
The rules are defence in depth behind the runner's OS sandbox and are tuned for honest code:
the tables are static_policy.py, paths are judged by static_paths.py on a static description of
the modules (static_resolve.py: nothing a candidate names is ever looked up with getattr, so
reading a candidate runs nothing), the walk is static_walk.py.
"""
from __future__ import annotations

import ast
import os
import sys
import warnings
from dataclasses import dataclass

from . import static_policy as P
from .static_walk import Walker


@dataclass
class Violation:
    rule: str
    line: int
    message: str
    fix: str = ""

    def __str__(self) -> str:
        tail = f"; instead: {self.fix}" if self.fix else ""
        return f"rejected [{self.rule}] line {self.line}: {self.message}{tail}"


def _check(src: str, banned_calls=(), extra_allowed_imports=()) -> list[Violation]:
    """The rules proper; raises only on a bug of the checker (the fuzz calls this directly)."""
    try:
        with warnings.catch_warnings():  # the parser's SyntaxWarnings are the candidate's, not the judge's log
            warnings.simplefilter("ignore")
            tree = ast.parse(src)
    except SyntaxError as e:
        return [Violation("syntax", e.lineno or 0, f"syntax error: {e.msg}", P.FIX["syntax"])]
    except ValueError as e:  # e.g. NUL bytes
        return [Violation("syntax", 0, f"syntax error: {e}", P.FIX["syntax"])]
    except (RecursionError, MemoryError):
        return [Violation("syntax", 0, "the source nests too deeply to be parsed", "flatten the expression")]
    try:
        w = Walker(tree, banned_calls, extra_allowed_imports)
        w.visit(tree)
        w.finish()
    except RecursionError:
        return [Violation("syntax", 0, "the source nests too deeply for the static rules",
                          "flatten deeply nested expressions")]
    seen, out = set(), []
    # on one line, name the most specific rule first
    prio = {r: i for i, r in enumerate(P.RULES)}
    for rule, line, msg, fix in sorted(w.found, key=lambda f: (f[1], prio.get(f[0], 99))):
        if (rule, line, msg) not in seen:
            seen.add((rule, line, msg))
            out.append(Violation(rule, line, msg, fix))
    return out


def check_source(src: str, banned_calls=(), extra_allowed_imports=None) -> list[Violation]:
    """All violations in `src`, sorted by line. Empty list: the candidate may be imported.
    Never raises: a fault of the checker itself is a rejection that says so (and is logged), so the
    judge always answers with a verdict."""
    if extra_allowed_imports is None:
        extra_allowed_imports = [m for m in os.environ.get("KERNELD_STATIC_ALLOW_IMPORTS", "").split(",") if m]
    try:
        return _check(src, tuple(banned_calls or ()), tuple(extra_allowed_imports))
    except Exception as e:  # noqa: BLE001 - see above; the property fuzz holds _check to raising nothing
        print(f"static_check: internal fault {type(e).__name__}: {e}", file=sys.stderr)
        return [Violation("allow-list", 0, f"the static rules could not be applied to this source "
                          f"({type(e).__name__}); this is a fault of the checker, please report it",
                          "simplify the construct on the line the checker stumbled over")]


def format_violations(vs: list[Violation], limit: int = 5) -> str:
    lines = [str(v) for v in vs[:limit]]
    if len(vs) > limit:
        lines.append(f"... and {len(vs) - limit} more")
    return "; ".join(lines)
