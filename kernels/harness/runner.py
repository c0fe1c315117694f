#!/usr/bin/env python3
"""A one-shot runner (PROCESS_MODEL.md): imports ONE candidate and runs what the judge asks.

    python3 -u kernels/harness/runner.py     # started by the judge, never by hand

Untrusted once the candidate is imported: everything it replies is checked by the judge,
which reads the outputs from its own mapping of the shared arena and times from outside.
Before the candidate: torch, triton and CUDA are initialised, the ready line is printed.
The audit (an allow-list of ATen ops) wraps EVERY candidate call, timed ones included.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import time

EXIT_FATAL_CUDA = 3


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    kernels_dir = os.path.dirname(here)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    if kernels_dir not in sys.path:
        sys.path.insert(0, kernels_dir)
    from harness import proc
    proc.die_with_parent()
    proc._watch_for_orphaning(sys.stdin.fileno() if sys.stdin is not None else None)
    proto = proc._protocol_stream()

    import platform

    import torch
    import triton

    from harness import device as dev
    from harness import runner_protocol as rp

    def send(obj):
        proto.write(rp.encode(obj) + "\n")
        proto.flush()

    cpu = dev.cpu_mode()
    if not cpu:
        torch.cuda.init()
        torch.empty(1, device="cuda")
        # A candidate may not take the GPU's memory from the judge: the reference, the baselines
        # and their autotuning (whose picks last for the judge's life) run there while this runner
        # lives. The arena is the judge's own allocation and does not count. Not yet run on the H200.
        frac = float(os.environ.get("KERNELD_RUNNER_GPU_MEM_FRACTION") or 0.5)
        if 0.0 < frac < 1.0:
            torch.cuda.set_per_process_memory_fraction(frac)
    sandbox = os.environ.get("KERNELD_SANDBOX_INFO") or None
    send({"event": "ready", "pid": os.getpid(), "mode": "cpu" if cpu else "gpu", "torch": torch.__version__,
          "triton": triton.__version__, "python": platform.python_version(), "sandbox": sandbox})
    state = _State(cpu)
    for raw in sys.stdin.buffer:
        if not raw.strip():
            continue
        try:
            req = rp.parse_request(raw)
        except rp.ProtocolError as e:
            send({"id": -1, "ok": False, "error": f"bad request: {e}"})
            continue
        try:
            out = state.handle(req)
        except _Fatal as e:
            send(rp.reply(req.id, False, rp.Failure("crashed", f"CUDA context poisoned: {e}"[:4000], None, True)))
            return EXIT_FATAL_CUDA
        except Exception as e:  # a harness-side problem in the runner: report it, stay up
            send(rp.reply(req.id, False, error=f"runner: {type(e).__name__}: {str(e)[:2000]}"))
            continue
        send(out)
        if req.op == "exit":
            return 0
    return 0


class _Fatal(Exception):
    pass


class _State:
    def __init__(self, cpu: bool):
        self.cpu = cpu
        self.fn = None
        self.config = None
        self.arena = None
        self.audit_args = ((), ())
        self.loaded = False
        self.skip_flags = False
        self.graphs = {}   # json of (calls, scalars) -> timing.GraphBatch: the captured batch

    def handle(self, req):
        from harness import runner_protocol as rp
        op = req.op
        if op == "ping":
            return rp.reply(req.id)
        if op == "exit":
            return rp.reply(req.id)
        if op == "load":
            return self.load(req)
        if op == "map":
            return self.map(req)
        if self.fn is None:
            return rp.reply(req.id, False, error="no candidate loaded")
        if op == "warm":
            return self.warm(req)
        if op == "call":
            return self.call(req)
        if op == "time":
            return self.time(req)
        if op == "profile":
            return self.profile(req)
        return rp.reply(req.id, False, error=f"unhandled op {op}")

    # -- load: the one candidate -----------------------------------------------------------------
    def load(self, req):
        from harness import runner_protocol as rp
        from harness import timing
        if self.loaded:
            return rp.reply(req.id, False, error="a runner loads exactly one candidate")
        self.loaded = True
        self.audit_args = (tuple(req.allowed_aten), tuple(req.banned_aten))
        self.skip_flags = req.skip_flag_check
        sha = hashlib.sha256(req.source.encode()).hexdigest()[:16]
        scratch = os.environ.get("KERNELD_RUNNER_SCRATCH") or os.environ.get("TMPDIR") or "/tmp"
        path = os.path.join(scratch, f"cand_{sha}.py")
        with open(path, "w") as f:
            f.write(req.source)
        modname = f"kerneld_cand_{sha}"
        spec = importlib.util.spec_from_file_location(modname, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[modname] = mod  # triton.jit looks the module up by name
        flags = timing._torch_flags()
        try:
            spec.loader.exec_module(mod)
        except BaseException as e:  # SystemExit at import is a result too
            return rp.reply(req.id, False, rp.Failure("error", f"importing the candidate failed: {type(e).__name__}: {e}"))
        fail = self._state_changed(flags, "importing the candidate")
        if fail is not None:
            return rp.reply(req.id, False, fail)
        space = getattr(mod, "SPACE", {}) or {}
        if not isinstance(space, dict) or not all(isinstance(v, (list, tuple)) and v for v in space.values()):
            return rp.reply(req.id, False, rp.Failure("error", "SPACE must be a dict of non-empty lists"))
        default = getattr(mod, "DEFAULT", None)
        if default is None:
            default = {k: v[0] for k, v in space.items()}
        try:
            space = json.loads(json.dumps({k: list(v) for k, v in space.items()}))
            default = json.loads(json.dumps(dict(default)))
        except (TypeError, ValueError) as e:
            return rp.reply(req.id, False, rp.Failure("error", f"SPACE/DEFAULT must be JSON values: {e}"))
        cfg = dict(default)
        for k, v in req.config.items():
            if space and k not in space:
                return rp.reply(req.id, False, rp.Failure("error", f"config key {k!r} is not in SPACE {sorted(space)}"))
            if space and v not in space[k]:
                return rp.reply(req.id, False, rp.Failure("error", f"config {k}={v!r} is not in SPACE[{k!r}] = {space[k]}"))
            cfg[k] = v
        fn = getattr(mod, req.entry, None)
        if not callable(fn):
            return rp.reply(req.id, False, rp.Failure("error", f"the candidate defines no function {req.entry!r} "
                                                                f"(the task's entry)"), space=space, default=default)
        self.fn, self.config = fn, cfg
        return rp.reply(req.id, config=cfg, space=space, default=default)

    def _state_changed(self, flags: dict, doing: str):
        """A rejection when candidate code run outside a checked call (its import, its warm-up)
        changed PyTorch's global flags or replaced a timer function (both restored), else None."""
        from harness import runner_protocol as rp
        from harness import timing
        changed = timing.flag_changes(flags)
        if changed and not self.skip_flags:
            return rp.Failure("rejected", f"rejected [introspection] {doing} changed PyTorch global state "
                              f"({', '.join(changed)})", "introspection")
        bad = timing.integrity_violations()
        if bad:
            return rp.Failure("rejected", f"rejected [timer] {doing} replaced {', '.join(bad)}", "timer")
        return None

    def map(self, req):
        from harness import runner_protocol as rp
        from harness.arena import RunnerArena
        self._drop_graphs()
        if self.arena is not None:
            self.arena.close()
            self.arena = None
        self.arena = RunnerArena(req.arena, req.tensors)
        return rp.reply(req.id)

    # -- calls -------------------------------------------------------------------------------------
    def _args(self, inputs: dict, outputs: dict, scalars: dict):
        t = self.arena.t if self.arena else {}
        try:
            ins = {k: t[v] for k, v in inputs.items()}
            outs = {k: t[v] for k, v in outputs.items()}
        except KeyError as e:
            raise ValueError(f"unknown tensor key {e}") from None
        ins.update(scalars)
        return ins, outs

    def _one(self, ins: dict, outs: dict, where: str, sync, raise_errors: bool = False):
        """One audited call; returns a Failure or None. raise_errors: an exception propagates
        as it is (a call being captured into a CUDA graph: the capture's caller decides)."""
        a = _Audited(self, ins, outs, where)
        a.enter()
        a.call()
        if a.error is None:
            try:
                sync()
            except Exception as e:
                a.error = e
        return a.exit(raise_errors)

    def _sync(self):
        if self.cpu:
            return lambda: None
        import torch
        return torch.cuda.synchronize

    def call(self, req):
        from harness import runner_protocol as rp
        from harness import timing
        ins, outs = self._args(req.inputs, req.outputs, req.scalars)
        t0 = time.perf_counter()
        fail = self._one(ins, outs, req.where, self._sync())
        secs = time.perf_counter() - t0
        bad = timing.integrity_violations()
        if fail is None and bad:
            fail = rp.Failure("rejected", f"rejected [timer] {req.where}: the candidate replaced {', '.join(bad)}",
                              "timer")
        return rp.reply(req.id, fail is None, fail, seconds=secs, integrity=bad or None)

    def warm(self, req):
        """Compile ahead (warmup.py): every call under compile-only, on the runner's own tensors.
        A candidate exception is not a failure here (the data is not real); a changed global
        flag or timer function is, as at import: it would outlast the warm-up."""
        from harness import runner_protocol as rp
        from harness import timing
        from harness import warmup
        device = "cpu" if self.cpu else "cuda"
        t0 = time.perf_counter()
        flags = timing._torch_flags()
        notes = []
        for c in req.calls:
            try:
                ins = {k: warmup.allocate(v, device) for k, v in c["inputs"].items()}
                outs = {k: warmup.allocate(v, device) for k, v in c["outputs"].items()}
            except (RuntimeError, ValueError, TypeError) as e:
                notes.append(f"{c['where']}: allocating: {type(e).__name__}: {str(e)[:200]}")
                continue
            ins.update(c["scalars"])
            with warmup.compile_only():
                fail = self._one(ins, outs, c["where"], self._sync())
            if fail is not None and fail.rule in ("introspection",):
                return rp.reply(req.id, False, fail)
            if fail is not None:
                notes.append(f"{c['where']}: {fail.message[:300]}")
            del ins, outs
        fail = self._state_changed(flags, "warming up the candidate")
        if fail is not None:
            return rp.reply(req.id, False, fail)
        return rp.reply(req.id, seconds=time.perf_counter() - t0, error="; ".join(notes)[:2000] or None)

    def time(self, req):
        """A timed batch (runner_protocol.Time): launched from Python (method "hold"), or replayed
        from the graph captured for these calls (method "graph"; captured after a warm-up
        batch). The candidate's host code runs at capture only, under the same audit."""
        from harness import runner_protocol as rp
        from harness import timing
        calls = [self._args(c["inputs"], c["outputs"], req.scalars) for c in req.calls]
        key = json.dumps([req.calls, req.scalars], sort_keys=True)
        if req.method == "graph" and not req.warmup:
            g = self.graphs.get(key)
            if not isinstance(g, timing.GraphBatch):
                return rp.reply(req.id, False, error="no CUDA graph was captured for these calls (send a warm-up "
                                                     "batch with method graph first)")
            try:
                r = g.run(flush=req.flush)
            except Exception as e:   # a replay that faults: the context is gone
                raise _Fatal(f"replaying the captured calls: {type(e).__name__}: {e}") from None
            bad = timing.integrity_violations()
            return rp.reply(req.id, True, stream_us=r["stream_us"], device_us=r["device_us"], host_us=r["host_us"],
                            integrity=bad or None)
        fails = []
        audited = [None] * len(calls)

        def pre(i):   # the audit's setup, before the call's start event
            audited[i] = _Audited(self, *calls[i], f"timed call {i}")
            audited[i].enter()

        def fn(i):
            audited[i].call()

        def post(i):  # its checks, after the end event (the loop synchronises itself)
            f = audited[i].exit()
            if f is not None:
                fails.append(f)
                raise _Stop()

        try:
            r = timing.run_batch(fn, len(calls), req.hold_us, gpu=not self.cpu, flush=req.flush,
                                 sync_each=req.method != "called", pre=pre, post=post)
        except _Stop:
            return rp.reply(req.id, False, fails[0])
        finally:
            for a in audited:
                if a is not None:
                    a.leave()
        capture = None
        if req.method == "graph" and req.warmup and not self.cpu:
            capture = self._capture(key, calls, fails)
            if fails:   # audited like every call: a breach while captured is a breach
                return rp.reply(req.id, False, fails[0])
        bad = timing.integrity_violations()
        return rp.reply(req.id, True, stream_us=r["stream_us"], device_us=r["device_us"] or None,
                        host_us=r["host_us"], integrity=bad or None, capture=capture)

    def _capture(self, key, calls, fails) -> str:
        """Capture the batch's calls into a GraphBatch kept for the replays: "ok", or why not."""
        from harness import timing

        def cap(i):
            ins, outs = calls[i]
            f = self._one(ins, outs, f"captured call {i}", lambda: None, raise_errors=True)
            if f is not None:
                fails.append(f)
                raise _Stop()

        self._drop_graphs()
        try:
            g = timing.capture(cap, len(calls))
        except Exception as e:   # the failed capture broke the context
            raise _Fatal(f"capturing the calls: {type(e).__name__}: {e}") from None
        if isinstance(g, timing.GraphBatch):
            self.graphs[key] = g
            return "ok"
        return g

    def _drop_graphs(self):
        for g in self.graphs.values():
            g.close()
        self.graphs = {}

    def profile(self, req):
        from harness import profiling as prof
        from harness import runner_protocol as rp
        ins, outs = self._args(req.inputs, req.outputs, req.scalars)
        mod = sys.modules.get(getattr(self.fn, "__module__", ""), None)
        try:
            if self.cpu:
                ks = prof.interpreted_kernels(mod)
            else:
                import torch
                ks = prof.kernel_stats(mod, lambda: (self.fn(dict(ins), dict(outs), dict(self.config)),
                                                     torch.cuda.synchronize()))
        except Exception as e:
            ks = [{"name": f"(kernel stats unavailable: {type(e).__name__}: {e})"}]
        return rp.reply(req.id, kernels=ks)


class _Stop(Exception):
    pass


class _Audited:
    """One candidate call under the ATen audit, in three steps, so that a timed loop can keep the
    audit's own setup and checks outside its events (an "as called" figure times the call, not
    the harness): enter (audit on, flags and output identities noted), call, exit (audit off;
    the exception, flag, audit and output-contract checks; a Failure or None)."""

    def __init__(self, state, ins: dict, outs: dict, where: str):
        from harness import timing
        from harness.audit import AllowListAudit
        self.state, self.ins, self.outs, self.where = state, ins, outs, where
        self.audit = AllowListAudit(*state.audit_args)
        self.flags = timing._torch_flags()
        self.out_view = dict(outs)
        self.out_meta = {k: _meta(v) for k, v in outs.items()}
        self.ret = self.error = None
        self.entered = False

    def enter(self):
        self.audit.__enter__()
        self.entered = True

    def call(self):
        from harness.correctness import Abandon
        try:
            self.ret = self.state.fn(dict(self.ins), self.out_view, dict(self.state.config))
        except Abandon:
            self.leave()
            raise
        except BaseException as e:  # judged in exit(); SystemExit / KeyboardInterrupt included
            self.error = e

    def leave(self):
        if self.entered:
            self.entered = False
            self.audit.__exit__(None, None, None)

    def exit(self, raise_errors: bool = False):
        from harness import runner_protocol as rp
        from harness import timing
        from harness.correctness import FatalCudaError, classify_exception
        self.leave()
        e, where = self.error, self.where
        if isinstance(e, Exception):
            if raise_errors:
                raise e
            try:
                f = classify_exception(e, where)
            except FatalCudaError as fe:
                raise _Fatal(str(fe)) from None
            return rp.Failure(f.cls, f.message, f.rule)
        if e is not None:
            return rp.Failure("error", f"{where}: the candidate raised {type(e).__name__}: {e}")
        changed = [] if self.state.skip_flags else timing.flag_changes(self.flags)
        if changed:
            return rp.Failure("rejected", f"rejected [introspection] {where}: the candidate changed PyTorch global "
                              f"state ({', '.join(changed)})", "introspection")
        if self.audit.hits:
            return rp.Failure("rejected", self.audit.message(where), "torch-heavy-math")
        if self.ret is not None:
            return rp.Failure("wrong_result", f"{where}: the entry must return None and write into `out` "
                              f"(it returned {type(self.ret).__name__})", "output-contract")
        # the judge reads its own buffers anyway; this names the mistake instead of "unwritten"
        for k, t in self.outs.items():
            if self.out_view.get(k) is not t or set(self.out_view) != set(self.outs) or _meta(t) != self.out_meta[k]:
                return rp.Failure("wrong_result", f"{where}: output {k!r} was replaced, re-pointed or resized; "
                                  f"write into the pre-allocated tensors", "output-contract")
        return None


def _meta(t):
    return (type(t), t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype, t.device)


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    os._exit(code)
