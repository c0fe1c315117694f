"""Reference outputs kept for a rotating pool of secret seeds (issue #12): the fp32 oracle is
the battery's second-largest cost after the candidate's compile, and recomputing it for every
seed of every evaluation is wasted GPU time.

Per (task, shape, dtype) the judge keeps POOL_SIZE secret seeds (drawn from the OS's random
source, never sent anywhere: runners see the inputs made from them, never a seed, and results
label their rows `"seed": "pool"`). An evaluation's battery runs every seed the request names
(fresh per evaluation, reproducible from the log, references computed as before), topped up
to MIN_SEEDS per shape with seeds drawn from the pool, whose references are computed once
and kept. The daemon sends one seed (daemon/src/engine/evaluation.rs), so two come from the
pool; a request with two or more seeds runs exactly as before the pool existed. After each
evaluation one member of each used pool is replaced by a new secret seed, so the pool rotates:
a candidate that memorised outputs for some inputs (it cannot keep them: each runner's scratch
is deleted, and under the sandbox it can write nowhere else) would still face the fresh seed
and new pool members. Kept references are bounded in bytes; beyond it they are recomputed.
"""
from __future__ import annotations

import random

POOL_SIZE = 8
# The battery checks at least this many seeds per shape: the request's, topped up from the pool.
MIN_SEEDS = 3
MAX_BYTES = 2 * 2**30


class RefPool:
    def __init__(self, size: int = POOL_SIZE, min_seeds: int = MIN_SEEDS, max_bytes: int = MAX_BYTES,
                 keep: bool = True):
        # keep=False (KERNELD_REF_POOL=0): the top-up seeds are fresh secrets every time and no
        # reference is kept (the battery's cost before the pool, its seed count unchanged).
        self.size, self.min_seeds, self.max_bytes, self.keep = size, min_seeds, max_bytes, keep
        self._rng = random.SystemRandom()
        self._seeds: dict[tuple, list[int]] = {}
        self._refs: dict[tuple, dict] = {}
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    def _fresh(self, key, avoid) -> int:
        while True:
            s = self._rng.getrandbits(62)
            if s not in avoid and s not in self._seeds.get(key, ()):
                return s

    def draw(self, key: tuple, avoid=()) -> list[int]:
        """Distinct secret seeds of `key`'s pool (filled on first use) that top the request's
        seeds (`avoid`) up to `min_seeds`; none when the request brings enough."""
        # Only a one-seed request (what the daemon sends) opts in: requests naming several
        # seeds (tools, tests) run exactly those, as before the pool existed.
        given = len(list(avoid))
        n = self.min_seeds - given if given == 1 else 0
        if n == 0:
            return []
        if not self.keep:
            out: list[int] = []
            while len(out) < n:
                s = self._fresh(key, list(avoid) + out)
                out.append(s)
            return out
        pool = self._seeds.setdefault(key, [])
        while len(pool) < self.size:
            pool.append(self._fresh(key, avoid))
        return self._rng.sample(pool, min(n, len(pool)))

    def reference(self, key: tuple, seed: int, compute):
        """The kept reference for (key, seed), else compute() (kept when it fits)."""
        k = (key, seed)
        if not self.keep:
            return compute()
        if k in self._refs:
            self.hits += 1
            return self._refs[k]
        self.misses += 1
        ref = compute()
        n = sum(t.numel() * t.element_size() for t in ref.values())
        if self._bytes + n <= self.max_bytes:
            self._refs[k] = ref
            self._bytes += n
        return ref

    def rotate(self, key: tuple, avoid=()) -> None:
        """Replaces one member of `key`'s pool by a new secret seed (its reference dropped)."""
        pool = self._seeds.get(key)
        if not pool:
            return
        i = self._rng.randrange(len(pool))
        old = pool[i]
        pool[i] = self._fresh(key, avoid)
        ref = self._refs.pop((key, old), None)
        if ref is not None:
            self._bytes -= sum(t.numel() * t.element_size() for t in ref.values())

    def is_pool_seed(self, key: tuple, seed: int) -> bool:
        return seed in self._seeds.get(key, ())
