"""Loading a candidate module: static checks first, then import (cached by source hash)."""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from . import static_check


class Rejected(Exception):
    def __init__(self, rule: str, message: str):
        super().__init__(message)
        self.rule = rule
        self.message = message


class ImportFailed(Exception):
    pass


@dataclass
class Candidate:
    path: Path
    sha: str
    module: ModuleType
    space: dict
    default: dict

    def entry(self, name: str):
        fn = getattr(self.module, name, None)
        if not callable(fn):
            raise ImportFailed(f"candidate defines no function {name!r}")
        return fn

    def resolve_config(self, config: dict | None) -> dict:
        cfg = dict(self.default)
        for k, v in (config or {}).items():
            if self.space and k not in self.space:
                raise ValueError(f"config key {k!r} is not in SPACE {sorted(self.space)}")
            if self.space and v not in self.space[k]:
                raise ValueError(f"config {k}={v!r} is not in SPACE[{k!r}] = {self.space[k]}")
            cfg[k] = v
        return cfg


_CACHE: dict[str, Candidate] = {}


def _json_clean(d):
    import json
    return json.loads(json.dumps(d))


def load_candidate(path: str | Path, banned_calls=()) -> Candidate:
    """Static-check then import. Raises Rejected (static rule) or ImportFailed."""
    p = Path(path).resolve()
    try:
        src = p.read_text()
    except OSError as e:
        raise FileNotFoundError(f"cannot read candidate {p}: {e}") from e
    sha = hashlib.sha256((src + "\0" + ",".join(sorted(banned_calls))).encode()).hexdigest()
    hit = _CACHE.get(sha)
    if hit is not None:
        return hit
    # test-only escape hatch (gpu_suite.py uses it to show the runtime defences behind the
    # static ones); the daemon never sets it
    skip = os.environ.get("KERNELD_UNSAFE_SKIP_STATIC_CHECKS") == "1"
    vs = [] if skip else static_check.check_source(src, banned_calls)
    if vs:
        raise Rejected(vs[0].rule, static_check.format_violations(vs))
    modname = f"kerneld_cand_{sha[:16]}"
    spec = importlib.util.spec_from_file_location(modname, p)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod  # triton.jit needs the module importable by name (for source lookup)
    from . import timing
    flags = timing._torch_flags()
    try:
        spec.loader.exec_module(mod)
        changed = timing.flag_changes(flags)
        if changed:
            sys.modules.pop(modname, None)
            raise Rejected("introspection", f"rejected [introspection] importing the candidate changed PyTorch "
                           f"global state ({', '.join(changed)}; restored)")
    except Rejected:
        raise
    except BaseException as e:  # SystemExit at import time must not end the worker either
        if type(e).__name__ == "Abandon":   # the daemon's SIGINT (harness.correctness.Abandon)
            raise
        sys.modules.pop(modname, None)
        raise ImportFailed(f"importing the candidate failed: {type(e).__name__}: {e}") from e
    space = getattr(mod, "SPACE", {}) or {}
    if not isinstance(space, dict) or not all(isinstance(v, (list, tuple)) and v for v in space.values()):
        raise ImportFailed("SPACE must be a dict of non-empty lists")
    default = getattr(mod, "DEFAULT", None)
    if default is None:
        default = {k: v[0] for k, v in space.items()}
    try:
        space, default = _json_clean({k: list(v) for k, v in space.items()}), _json_clean(dict(default))
    except (TypeError, ValueError) as e:
        raise ImportFailed(f"SPACE/DEFAULT must be JSON values: {e}") from e
    cand = Candidate(p, sha, mod, space, default)
    _CACHE[sha] = cand
    return cand
