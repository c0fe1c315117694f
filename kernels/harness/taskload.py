"""Loading a task directory: task.toml (via tomllib) and task.py (imported once, cached)."""
from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

try:
    import tomllib
except ModuleNotFoundError:  # python < 3.11
    import tomli as tomllib  # type: ignore

SHAPE_NAME = re.compile(r"^[a-z0-9_]+$")


class TaskError(Exception):
    """The task directory is missing or malformed (a bad request, not a bad candidate)."""


@dataclass
class Task:
    dir: Path
    name: str
    entry: str
    description: str
    default_shapes: list[str]
    default_baseline: str
    seeds: list[Path]
    banned_calls: list[str]
    rel_rmse: float
    max_abs: float
    baselines: dict[str, str]
    shapes: dict[str, dict]
    heldout: dict[str, dict]
    smoke: dict[str, dict]
    module: ModuleType
    raw: dict = field(repr=False, default_factory=dict)

    # -- task.py functions -------------------------------------------------
    def make_inputs(self, shape: dict, seed: int, device: str, dtype):
        return self.module.make_inputs(dict(shape), seed, device, dtype)

    def output_spec(self, shape: dict, inputs: dict):
        return self.module.output_spec(dict(shape), inputs)

    def reference(self, inputs: dict):
        return self.module.reference(**inputs)

    def baseline_fn(self, name: str):
        if name not in self.baselines:
            raise TaskError(f"task {self.name!r} has no baseline {name!r} (has: {sorted(self.baselines)})")
        fn = getattr(self.module, self.baselines[name], None)
        if fn is None:
            raise TaskError(f"task.py has no function {self.baselines[name]!r} for baseline {name!r}")
        return fn

    def roofline(self, shape: dict) -> dict | None:
        fn = getattr(self.module, "roofline", None)
        return fn(dict(shape)) if fn else None

    # -- shape resolution ----------------------------------------------------
    def resolve_shapes(self, requested: list[str] | None, cpu_mode: bool):
        """Return (timed, checked) as lists of (name, dict).

        GPU mode: timed = the requested goal shapes (default_shapes when none), checked =
        timed + every held-out shape. CPU mode: the smoke shapes replace both.
        """
        if cpu_mode:
            if not self.smoke:
                raise TaskError(f"task {self.name!r} has no [smoke.*] shapes for CPU mode")
            smoke = list(self.smoke.items())
            return smoke, smoke
        names = list(requested) if requested else list(self.default_shapes or self.shapes)
        timed = []
        for n in names:
            if n not in self.shapes:
                raise TaskError(f"task {self.name!r} has no shape {n!r} (has: {sorted(self.shapes)})")
            timed.append((n, self.shapes[n]))
        checked = timed + [(n, s) for n, s in self.heldout.items()]
        return timed, checked


_CACHE: dict[str, tuple[tuple, Task]] = {}


def _stamp(d: Path) -> tuple:
    out = []
    for f in ("task.toml", "task.py"):
        p = d / f
        try:
            st = p.stat()
            out.append((f, st.st_mtime_ns, st.st_size))
        except FileNotFoundError:
            out.append((f, None, None))
    return tuple(out)


def _shape_table(raw: dict, key: str) -> dict[str, dict]:
    tab = raw.get(key, {}) or {}
    if not isinstance(tab, dict):
        raise TaskError(f"[{key}] must be a table of shape tables")
    for name, s in tab.items():
        if not SHAPE_NAME.match(name):
            raise TaskError(f"shape name {name!r} in [{key}] must match [a-z0-9_]+")
        if not isinstance(s, dict):
            raise TaskError(f"[{key}.{name}] must be a table")
        for k, v in s.items():
            if not isinstance(v, (int, float, str, bool)):
                raise TaskError(f"[{key}.{name}] {k}: only integers, floats, strings and booleans")
    return tab


def load_task(task_dir: str | Path) -> Task:
    d = Path(task_dir).resolve()
    if not (d / "task.toml").is_file():
        raise TaskError(f"no task.toml in {d}")
    if not (d / "task.py").is_file():
        raise TaskError(f"no task.py in {d}")
    stamp = _stamp(d)
    hit = _CACHE.get(str(d))
    if hit and hit[0] == stamp:
        return hit[1]
    try:
        raw = tomllib.loads((d / "task.toml").read_text())
    except Exception as e:  # tomllib.TOMLDecodeError and I/O
        raise TaskError(f"{d / 'task.toml'}: {e}") from e
    for k in ("name", "entry"):
        if not isinstance(raw.get(k), str):
            raise TaskError(f"task.toml: `{k}` (string) is required")
    tol = raw.get("tolerance", {}) or {}
    shapes = _shape_table(raw, "shapes")
    task = Task(
        dir=d,
        name=raw["name"],
        entry=raw["entry"],
        description=raw.get("description", ""),
        default_shapes=list(raw.get("default_shapes", []) or list(shapes)),
        default_baseline=raw.get("default_baseline", "reference"),
        seeds=[d / s for s in raw.get("seeds", [])],
        banned_calls=list(raw.get("banned_calls", [])),
        rel_rmse=float(tol.get("rel_rmse", 1e-3)),
        max_abs=float(tol.get("max_abs", 5e-2)),
        baselines=dict(raw.get("baselines", {"reference": "reference"}) or {}),
        shapes=shapes,
        heldout=_shape_table(raw, "heldout"),
        smoke=_shape_table(raw, "smoke"),
        module=_import_task_py(d),
        raw=raw,
    )
    for fn in ("make_inputs", "output_spec", "reference"):
        if not callable(getattr(task.module, fn, None)):
            raise TaskError(f"task.py must define {fn}()")
    _CACHE[str(d)] = (stamp, task)
    return task


def _import_task_py(d: Path) -> ModuleType:
    path = d / "task.py"
    h = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    modname = f"kerneld_task_{re.sub(r'[^a-zA-Z0-9_]', '_', d.name)}_{h}"
    spec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(spec)
    # task.py may import helpers that sit beside it
    sys.path.insert(0, str(d))
    try:
        sys.modules[modname] = mod
        spec.loader.exec_module(mod)
    except Exception as e:
        sys.modules.pop(modname, None)
        raise TaskError(f"importing {path} failed: {type(e).__name__}: {e}") from e
    finally:
        try:
            sys.path.remove(str(d))
        except ValueError:
            pass
    return mod
