"""The judge <-> runner protocol (PROCESS_MODEL.md), typed once: one JSON object per line.

The judge (worker.py) trusts nothing a runner says: every line is size-limited, parsed as
JSON (never pickle) and validated here field by field; anything else is a protocol error
(the runner is killed; class `error`, rule `runner-protocol`). The golden examples in
protocol/golden/runner/*.json are checked against these definitions by the Python tests.

Judge -> runner requests (`op`): load, warm, map, call, time, profile, ping, exit.
Runner -> judge: one `ready` line, then exactly one reply per request, echoing `id`.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

MAX_LINE = 8 * 2**20
DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool",
          "float8_e4m3fn", "float8_e5m2")
RESULT_CLASSES = ("ok", "rejected", "compile_error", "wrong_result", "error", "crashed", "timed_out")


class ProtocolError(Exception):
    """A line that is not a valid protocol message."""


def _req(d: dict, key: str, types, where: str, optional=False):
    if key not in d or d[key] is None:
        if optional:
            return None
        raise ProtocolError(f"{where}: field `{key}` is missing")
    v = d[key]
    if isinstance(v, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise ProtocolError(f"{where}: field `{key}` must be {types}, not a boolean")
    if not isinstance(v, types):
        raise ProtocolError(f"{where}: field `{key}` has type {type(v).__name__}")
    return v


def _num_list(v, where, key, limit=100_000):
    if not isinstance(v, list) or len(v) > limit:
        raise ProtocolError(f"{where}: `{key}` must be a list of at most {limit} numbers")
    for x in v:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or x != x or x < 0 or x > 1e12:
            raise ProtocolError(f"{where}: `{key}` holds {x!r} (finite non-negative numbers only)")
    return [float(x) for x in v]


# -- tensors --------------------------------------------------------------------------------------
@dataclass
class TensorRef:
    """A view into the arena: contiguous, at a byte offset."""
    offset: int
    shape: list
    dtype: str

    @staticmethod
    def parse(d: Any, where: str) -> "TensorRef":
        if not isinstance(d, dict):
            raise ProtocolError(f"{where}: a tensor reference must be an object")
        off = _req(d, "offset", int, where)
        shape = _req(d, "shape", list, where)
        dt = _req(d, "dtype", str, where)
        if off < 0 or dt not in DTYPES or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                                   for s in shape) or len(shape) > 8:
            raise ProtocolError(f"{where}: bad tensor reference {d!r}")
        return TensorRef(off, list(shape), dt)


@dataclass
class Arena:
    """One shared block: `file` (CPU mode: a file in the runner's scratch, mapped shared) or
    `cuda_ipc` (GPU mode: base64 of a storage's _share_cuda_() fields)."""
    kind: str
    nbytes: int
    path: str | None = None
    ipc: dict | None = None

    @staticmethod
    def parse(d: Any, where: str) -> "Arena":
        if not isinstance(d, dict):
            raise ProtocolError(f"{where}: the arena must be an object")
        kind = _req(d, "kind", str, where)
        nb = _req(d, "nbytes", int, where)
        if kind not in ("file", "cuda_ipc") or nb <= 0:
            raise ProtocolError(f"{where}: bad arena {kind!r}/{nb}")
        path = _req(d, "path", str, where, optional=(kind != "file"))
        ipc = _req(d, "ipc", dict, where, optional=(kind != "cuda_ipc"))
        return Arena(kind, nb, path, ipc)


# -- requests -------------------------------------------------------------------------------------
@dataclass
class Load:
    op = "load"
    id: int
    source: str
    entry: str
    config: dict
    banned_aten: list = field(default_factory=list)
    allowed_aten: list = field(default_factory=list)
    skip_flag_check: bool = False


@dataclass
class Map:
    op = "map"
    id: int
    arena: Arena
    tensors: dict  # key -> TensorRef


@dataclass
class Call:
    """Run the candidate once (audited): inputs name -> tensor key (or a JSON scalar under
    `scalars`), outputs name -> tensor key."""
    op = "call"
    id: int
    inputs: dict
    outputs: dict
    where: str
    scalars: dict = field(default_factory=dict)


TIME_METHODS = ("hold", "graph", "called")


@dataclass
class Time:
    """A timed batch: call i uses inputs[i] / outputs[i] (dicts like Call's).

    method "hold": each call launched from Python between two events, a synchronize after each;
    hold_us: how long to hold the GPU before each call's start event (the launch-hiding spin).
    method "called": the calls one after another as a user's loop issues them, one synchronize
    at the end (timing.run_batch's sync_each=False; hold_us is 0). method "graph": each call
    replayed from the CUDA graph captured for these very calls (timing.GraphBatch); a `warmup`
    batch with method "graph" runs the calls (hold path), then captures them and replies
    `capture` ("ok" or why not)."""
    op = "time"
    id: int
    calls: list
    hold_us: float
    flush: bool = True
    warmup: bool = False
    scalars: dict = field(default_factory=dict)
    method: str = "hold"


@dataclass
class Profile:
    op = "profile"
    id: int
    inputs: dict
    outputs: dict
    scalars: dict = field(default_factory=dict)


@dataclass
class Warm:
    """Compile ahead (warmup.py): call the candidate once per entry of `calls` on tensors the
    runner allocates itself, every Triton launch a compile only. A call: {where, inputs,
    outputs, scalars}, where inputs / outputs map names to a TensorSpec ({shape, dtype,
    values?}). Nothing is timed or checked; the reply says how long it took."""
    op = "warm"
    id: int
    calls: list


MAX_WARM_CALLS = 64
MAX_WARM_VALUES = 1 << 20   # values per tensor (warmup.INT_VALUES_MAX_NUMEL)


def _tensor_spec(d: Any, where: str) -> dict:
    if not isinstance(d, dict):
        raise ProtocolError(f"{where}: a tensor spec must be an object")
    shape = _req(d, "shape", list, where)
    dt = _req(d, "dtype", str, where)
    if dt not in DTYPES or len(shape) > 8 or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                                     for s in shape):
        raise ProtocolError(f"{where}: bad tensor spec {str(d)[:200]}")
    out = {"shape": list(shape), "dtype": dt}
    vals = d.get("values")
    if vals is not None:
        n = 1
        for s in shape:
            n *= s
        if not isinstance(vals, list) or len(vals) != n or n > MAX_WARM_VALUES:
            raise ProtocolError(f"{where}: `values` must list the tensor's {n} elements (at most {MAX_WARM_VALUES})")
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vals):
            raise ProtocolError(f"{where}: `values` must be numbers")
        out["values"] = vals
    return out


@dataclass
class Ping:
    op = "ping"
    id: int


@dataclass
class Exit:
    op = "exit"
    id: int


REQUESTS = {c.op: c for c in (Load, Warm, Map, Call, Time, Profile, Ping, Exit)}


def _keys(d, where, key):
    if not isinstance(d, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in d.items()):
        raise ProtocolError(f"{where}: `{key}` must map names to tensor keys")
    return d


def parse_request(line: str | bytes) -> Any:
    """Runner side: a judge request, validated."""
    d = _load(line)
    op = d.get("op")
    if op not in REQUESTS:
        raise ProtocolError(f"unknown op {op!r}")
    where = f"request {op}"
    rid = _req(d, "id", int, where)
    if op == "load":
        return Load(rid, _req(d, "source", str, where), _req(d, "entry", str, where), _req(d, "config", dict, where),
                    list(d.get("banned_aten") or []), list(d.get("allowed_aten") or []),
                    bool(d.get("skip_flag_check", False)))
    if op == "map":
        tens = _req(d, "tensors", dict, where)
        return Map(rid, Arena.parse(d.get("arena"), where),
                   {str(k): TensorRef.parse(v, f"{where} tensor {k}") for k, v in tens.items()})
    if op == "call":
        return Call(rid, _keys(d.get("inputs"), where, "inputs"), _keys(d.get("outputs"), where, "outputs"),
                    _req(d, "where", str, where), dict(d.get("scalars") or {}))
    if op == "time":
        calls = _req(d, "calls", list, where)
        for c in calls:
            if not isinstance(c, dict):
                raise ProtocolError(f"{where}: every call must be an object")
            _keys(c.get("inputs"), where, "inputs")
            _keys(c.get("outputs"), where, "outputs")
        method = d.get("method", "hold")
        if method not in TIME_METHODS:
            raise ProtocolError(f"{where}: method {method!r} (one of {', '.join(TIME_METHODS)})")
        return Time(rid, calls, float(_req(d, "hold_us", (int, float), where)), bool(d.get("flush", True)),
                    bool(d.get("warmup", False)), dict(d.get("scalars") or {}), method)
    if op == "warm":
        calls = _req(d, "calls", list, where)
        if len(calls) > MAX_WARM_CALLS:
            raise ProtocolError(f"{where}: at most {MAX_WARM_CALLS} calls")
        out = []
        for i, c in enumerate(calls):
            w = f"{where} call {i}"
            if not isinstance(c, dict):
                raise ProtocolError(f"{w}: must be an object")
            ins, outs = _req(c, "inputs", dict, w), _req(c, "outputs", dict, w)
            out.append({"where": str(c.get("where") or f"warm-up {i}")[:200],
                        "inputs": {str(k): _tensor_spec(v, f"{w} input {k}") for k, v in ins.items()},
                        "outputs": {str(k): _tensor_spec(v, f"{w} output {k}") for k, v in outs.items()},
                        "scalars": dict(c.get("scalars") or {})})
        return Warm(rid, out)
    if op == "profile":
        return Profile(rid, _keys(d.get("inputs"), where, "inputs"), _keys(d.get("outputs"), where, "outputs"),
                       dict(d.get("scalars") or {}))
    return REQUESTS[op](rid)


def encode(msg) -> str:
    """One protocol line (no newline) for a request dataclass or a reply dict."""
    if hasattr(msg, "__dataclass_fields__"):
        d = {"op": type(msg).op, **{f.name: _plain(getattr(msg, f.name)) for f in fields(msg)}}
    else:
        d = msg
    return json.dumps(d, allow_nan=False, separators=(",", ":"))


def _plain(v):
    if hasattr(v, "__dataclass_fields__"):
        return asdict(v)
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def _load(line) -> dict:
    if isinstance(line, bytes):
        if len(line) > MAX_LINE:
            raise ProtocolError(f"line longer than {MAX_LINE} bytes")
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError(f"not UTF-8: {e}") from None
    try:
        d = json.loads(line)
    except ValueError as e:
        raise ProtocolError(f"not JSON: {e}") from None
    if not isinstance(d, dict):
        raise ProtocolError("a protocol line must be a JSON object")
    return d


# -- replies (runner -> judge) ----------------------------------------------------------------------
@dataclass
class Ready:
    event: str
    pid: int
    mode: str
    torch: str
    triton: str
    python: str
    sandbox: Any = None


@dataclass
class Failure:
    """A candidate failure the runner saw (exception, audit hit, contract breach)."""
    cls: str
    message: str
    rule: str | None = None
    fatal: bool = False


@dataclass
class Reply:
    id: int
    ok: bool
    failure: Failure | None = None
    # load
    config: dict | None = None
    space: dict | None = None
    default: dict | None = None
    # call / time
    seconds: float | None = None
    stream_us: list | None = None
    device_us: list | None = None
    host_us: list | None = None
    integrity: list | None = None
    # time with method "graph" and warmup: "ok", or why the calls cannot be captured
    capture: str | None = None
    # profile
    kernels: list | None = None
    error: str | None = None


def parse_ready(line) -> Ready:
    d = _load(line)
    where = "runner ready line"
    if d.get("event") != "ready":
        raise ProtocolError(f"{where}: expected event=ready, got {str(d)[:200]}")
    mode = _req(d, "mode", str, where)
    if mode not in ("cpu", "gpu"):
        raise ProtocolError(f"{where}: mode {mode!r}")
    sb = d.get("sandbox")
    if sb is not None and not isinstance(sb, (dict, str)):
        raise ProtocolError(f"{where}: sandbox must be null, a string or an object")
    return Ready("ready", _req(d, "pid", int, where), mode, _req(d, "torch", str, where),
                 _req(d, "triton", str, where), _req(d, "python", str, where), sb)


def parse_reply(line, want_id: int) -> Reply:
    """Judge side: a runner reply to request `want_id`, every field checked."""
    d = _load(line)
    where = "runner reply"
    rid = _req(d, "id", int, where)
    if rid != want_id:
        raise ProtocolError(f"{where}: id {rid} answers no request in flight (want {want_id})")
    ok = _req(d, "ok", bool, where)
    r = Reply(rid, ok)
    f = d.get("failure")
    if f is not None:
        if not isinstance(f, dict):
            raise ProtocolError(f"{where}: failure must be an object")
        cls = _req(f, "cls", str, where)
        if cls not in RESULT_CLASSES or cls == "ok":
            raise ProtocolError(f"{where}: failure class {cls!r}")
        rule = _req(f, "rule", str, where, optional=True)
        r.failure = Failure(cls, _req(f, "message", str, where)[:8000], rule[:64] if rule else None,
                            bool(f.get("fatal", False)))
    for k in ("config", "space", "default"):
        if d.get(k) is not None:
            setattr(r, k, _req(d, k, dict, where))
    if d.get("seconds") is not None:
        r.seconds = _num_list([d["seconds"]], where, "seconds")[0]
    for k in ("stream_us", "device_us", "host_us"):
        if d.get(k) is not None:
            setattr(r, k, _num_list(d[k], where, k))
    if d.get("integrity") is not None:
        v = _req(d, "integrity", list, where)
        if not all(isinstance(x, str) and len(x) < 200 for x in v):
            raise ProtocolError(f"{where}: integrity must be a list of names")
        r.integrity = v[:64]
    if d.get("capture") is not None:
        r.capture = _req(d, "capture", str, where)[:1000]
    if d.get("kernels") is not None:
        r.kernels = [k for k in _req(d, "kernels", list, where)[:256] if isinstance(k, dict)]
    if d.get("error") is not None:
        r.error = _req(d, "error", str, where)[:4000]
    return r


def reply(rid: int, ok: bool = True, failure: Failure | None = None, **kw) -> dict:
    """Runner side: a reply dict (encode() it)."""
    d = {"id": rid, "ok": ok}
    if failure is not None:
        d["failure"] = asdict(failure)
    d.update({k: v for k, v in kw.items() if v is not None})
    return d
