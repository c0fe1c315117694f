"""ref_pool (issue #12): secret seeds with kept references, rotating; never in results."""
import json

import torch
from hpaths import DEMO

from harness import evaluate as ev
from harness.ref_pool import RefPool

SEED = str(DEMO / "seeds" / "tiled.py")
REQ = {"task_dir": str(DEMO), "seeds": [1], "timing": {"cpu_reps": 3}, "profile": False}


def test_references_are_computed_once_per_pool_seed_and_rotate():
    p = RefPool(size=4, min_seeds=3)
    key = ("t", "s", "fp32", "cpu")
    assert p.draw(key, avoid=[1, 2]) == []  # several seeds: exactly those run
    calls = []

    def compute():
        calls.append(1)
        return {"c": torch.zeros(4)}

    drawn = p.draw(key, avoid=[1])
    assert len(set(drawn)) == 2 and 1 not in drawn
    for s in drawn:
        p.reference(key, s, compute)
        p.reference(key, s, compute)
    assert len(calls) == 2 and p.hits == 2
    before = list(p._seeds[key])
    p.rotate(key)
    after = p._seeds[key]
    assert len(after) == 4 and sum(a != b for a, b in zip(before, after)) == 1


def test_kept_references_are_bounded_in_bytes():
    p = RefPool(size=2, min_seeds=3, max_bytes=16)
    key = ("t", "s", "fp32", "cpu")
    for s in p.draw(key, avoid=[7]):
        p.reference(key, s, lambda: {"c": torch.zeros(4)})  # 16 bytes each: the second is not kept
    assert len(p._refs) == 1 and p._bytes == 16


def test_the_judge_checks_pool_seeds_and_keeps_them_secret(monkeypatch):
    refs = RefPool(size=2, min_seeds=3)  # 1 request seed + both members drawn: after one rotation, one is kept
    monkeypatch.setattr(ev, "REFS", refs)
    r1 = ev.evaluate({**REQ, "candidate": SEED})
    assert r1["class"] == "ok", r1["message"]
    seeds = [c["seed"] for c in r1["checks"] if not str(c["output"]).startswith("check:")]
    # The request's seed, topped up by the pool's (labelled, never by number).
    assert seeds.count(1) == seeds.count("pool") / 2 > 0
    secret = {s for pool in refs._seeds.values() for s in pool}
    text = json.dumps(r1)
    assert not any(str(s) in text for s in secret), "a secret seed leaked into the result"
    misses = refs.misses
    r2 = ev.evaluate({**REQ, "candidate": SEED})
    assert r2["class"] == "ok", r2["message"]
    # The second evaluation found kept references (at most one pool member per shape rotated).
    shapes = len(refs._seeds)
    assert refs.hits >= shapes and refs.misses - misses == shapes, (refs.hits, refs.misses)


def test_a_wrong_candidate_is_still_caught_with_the_pool_on(monkeypatch, tmp_path):
    refs = RefPool()
    monkeypatch.setattr(ev, "REFS", refs)
    src = open(SEED).read()
    bad = tmp_path / "bad.py"
    # Right on the daemon's seed's shape only by accident: scale every output.
    bad.write_text(src.replace("def matmul(inputs: dict, out: dict, config: dict) -> None:",
                               "def _matmul_ok(inputs, out, config):")
                   + "\n\ndef matmul(inputs, out, config):\n    _matmul_ok(inputs, out, config)\n"
                   "    out['c'].mul_(1.5)\n")
    r = ev.evaluate({**REQ, "candidate": str(bad)})
    assert r["class"] in ("wrong_result", "rejected"), r


def test_without_keeping_the_top_up_seeds_are_fresh_every_time():
    p = RefPool(keep=False)
    key = ("t", "s", "fp32", "cpu")
    a, b = p.draw(key, avoid=[1]), p.draw(key, avoid=[1])
    assert len(a) == 2 and len(b) == 2 and not set(a) & set(b)
    calls = []
    for _ in range(2):
        p.reference(key, a[0], lambda: calls.append(1) or {"c": torch.zeros(1)})
    assert len(calls) == 2 and not p._refs
