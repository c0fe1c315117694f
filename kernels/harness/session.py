"""The judge's side of one evaluation: a runner, its shared slots per shape, the phase clock.

A `Slots` object is one shape's arena: `n` input slots and `n` output buffers, each slot the
task's inputs for that shape (contiguous copies of what make_inputs returns; non-tensor inputs
travel as JSON scalars). The judge fills, poisons and reads them in its own mapping.
"""
from __future__ import annotations

import contextlib
import time

import torch

from . import runner_protocol as rp
from .arena import JudgeArena
from .correctness import _POISON, CheckFailure
from .spawn import Runner, RunnerDied

FIRST_CALL_TIMEOUT_S = 600.0   # the first call compiles (Triton, autotuning; the interpreter is slow)
CALL_TIMEOUT_S = 180.0


class Phases:
    """Seconds per phase of an evaluation (HARNESS.md: what the checks cost)."""
    NAMES = ("static", "runner_start", "runner_wait", "import", "compile", "correctness_candidate",
             "correctness_reference", "baseline", "timing", "timed_checks", "profile", "transfers")

    def __init__(self):
        self.s = {k: 0.0 for k in self.NAMES}

    @contextlib.contextmanager
    def __call__(self, name):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.s[name] += time.perf_counter() - t0

    def add(self, name, secs):
        self.s[name] += secs

    def rounded(self) -> dict:
        return {k: round(v, 4) for k, v in self.s.items()}


def poison(t: torch.Tensor) -> None:
    if t.dtype in _POISON:
        idt, bits = _POISON[t.dtype]
        t.view(idt).fill_(bits)
    elif t.dtype == torch.bool:
        t.fill_(True)
    elif t.dtype.is_floating_point:
        t.fill_(float("nan"))
    else:
        t.fill_(torch.iinfo(t.dtype).min + 7)


def _jsonable(v):
    return isinstance(v, (int, float, str, bool)) or v is None


class Slots:
    def __init__(self, task, shape_name: str, shape: dict, sample: dict, n: int, gpu: bool, scratch: str):
        self.names = [k for k, v in sample.items() if isinstance(v, torch.Tensor)]
        self.scalars = {k: v for k, v in sample.items() if not isinstance(v, torch.Tensor)}
        for k, v in self.scalars.items():
            if not _jsonable(v):
                raise RuntimeError(f"task.make_inputs returned {type(v).__name__} for {k!r}: inputs must be "
                                   f"tensors or JSON scalars")
        for k in self.names:
            if type(sample[k]) is not torch.Tensor:
                raise RuntimeError(f"task.make_inputs returned a {type(sample[k]).__name__} for {k!r}")
        self.out_spec = {k: (tuple(s), dt) for k, (s, dt) in task.output_spec(shape, sample).items()}
        self.in_spec = {k: (tuple(sample[k].shape), sample[k].dtype) for k in self.names}
        specs = {}
        for j in range(n):
            for k in self.names:
                specs[f"i{j}.{k}"] = self.in_spec[k]
            for k, sd in self.out_spec.items():
                specs[f"o{j}.{k}"] = sd
        self.n = n
        self.shape_name = shape_name
        self.arena = JudgeArena(specs, gpu, scratch, shape_name)

    def in_keys(self, j):
        return {k: f"i{j}.{k}" for k in self.names}

    def out_keys(self, j):
        return {k: f"o{j}.{k}" for k in self.out_spec}

    def tin(self, j):
        return {k: self.arena.t[f"i{j}.{k}"] for k in self.names}

    def tout(self, j):
        return {k: self.arena.t[f"o{j}.{k}"] for k in self.out_spec}

    def fits(self, inputs: dict) -> bool:
        return (set(k for k, v in inputs.items() if isinstance(v, torch.Tensor)) == set(self.names)
                and all(tuple(inputs[k].shape) == self.in_spec[k][0] and inputs[k].dtype == self.in_spec[k][1]
                        for k in self.names)
                and {k: v for k, v in inputs.items() if not isinstance(v, torch.Tensor)} == self.scalars)

    def fill(self, j, inputs: dict):
        for k, t in self.tin(j).items():
            t.copy_(inputs[k])

    def poison(self, j):
        for t in self.tout(j).values():
            poison(t)

    def free(self):
        self.arena.free()


class Session:
    """One candidate's runner plus the judge's bookkeeping for it."""

    def __init__(self, runner: Runner, gpu: bool, phases: Phases, timeout_s: float | None = None):
        self.r, self.gpu, self.phases = runner, gpu, phases
        # per runner request; the first call compiles. A request's runner_timeout_s caps both.
        self.first_timeout = min(FIRST_CALL_TIMEOUT_S, timeout_s or FIRST_CALL_TIMEOUT_S)
        self.timeout = min(CALL_TIMEOUT_S, timeout_s or CALL_TIMEOUT_S)
        self.slots: dict[str, Slots] = {}
        self.mapped: str | None = None
        self.first_call = True

    def slots_for(self, task, shape_name, shape, sample, n) -> Slots:
        s = self.slots.get(shape_name)
        if s is None or s.n < n:
            if s is not None:
                self._unmap(s)
            with self.phases("transfers"):
                s = Slots(task, shape_name, shape, sample, n, self.gpu, self.r.scratch)
            self.slots[shape_name] = s
        return s

    def _unmap(self, s: Slots):
        s.free()
        self.slots.pop(s.shape_name, None)
        if self.mapped == s.shape_name:
            self.mapped = None

    def use(self, s: Slots):
        if self.mapped != s.shape_name:
            with self.phases("transfers"):
                rep = self.r.request(rp.Map(0, s.arena.desc, s.arena.refs), self.timeout)
            if not rep.ok:
                raise RunnerDied("protocol", f"the runner could not map the arena: {rep.error}")
            self.mapped = s.shape_name

    def call(self, s: Slots, j: int, where: str, phase="correctness_candidate") -> rp.Reply:
        self.use(s)
        if self.gpu:
            torch.cuda.synchronize()  # the slot's contents are written before the runner reads them
        first = self.first_call
        self.first_call = False
        t0 = time.perf_counter()
        rep = self.r.request(rp.Call(0, s.in_keys(j), s.out_keys(j), where, dict(s.scalars)),
                             self.first_timeout if first else self.timeout)
        self.phases.add("compile" if first else phase, time.perf_counter() - t0)
        failed(rep)
        return rep

    def close(self):
        # one-shot: no polite exit needed. The runner first: its mappings go with it.
        self.r.kill()
        for s in list(self.slots.values()):
            s.free()
        self.slots.clear()


def failed(rep: rp.Reply):
    """Raise the candidate failure a reply carries (a fatal one ends the runner: `crashed`)."""
    if rep.failure is not None:
        f = rep.failure
        if f.fatal:
            raise RunnerDied("crashed", f.message, fatal=True)
        raise CheckFailure(f.cls, f.message, f.rule)
    if not rep.ok:
        raise RunnerDied("protocol", f"the runner failed a request: {rep.error or 'no reason given'}")
