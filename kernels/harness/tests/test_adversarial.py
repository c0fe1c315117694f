"""The adversarial suite: one cheating candidate per row of FIELD_NOTES section 6 (and more),
each rejected with the right class and rule, in CPU mode (Triton interpreter)."""
import pytest
from hpaths import ADV, DEMO

from harness.evaluate import evaluate

EXPECTED = {
    # FIELD_NOTES row: output allocated with empty receives the reference's freed output
    # (which check fires depends on what the recycled block held: stale poison, NaN bit
    # patterns or finite garbage; each is a rejection of the same cheat)
    "empty_reuse.py": ("wrong_result", ("tolerance", "nonfinite", "unwritten")),
    # writes constants that pass a single fixed input
    "constant_output.py": ("wrong_result", "tolerance"),
    # mutates inputs so the reference agrees
    "input_mutation.py": ("wrong_result", "input-mutated"),
    # side stream / thread
    "side_stream.py": ("rejected", "concurrency"),
    "thread.py": ("rejected", "concurrency"),
    # caches outputs by pointer or fingerprint
    "pointer_cache.py": ("rejected", "introspection"),
    "object_cache.py": ("wrong_result", "tolerance"),
    # lazy tensors / subclasses
    "tensor_subclass.py": ("rejected", "introspection"),
    "output_replaced.py": ("wrong_result", "output-contract"),
    # patches timers or reads expected outputs via gc/frames
    "timer_patch.py": ("rejected", "timer"),
    "event_patch.py": ("rejected", "timer"),
    "gc_introspection.py": ("rejected", "introspection"),
    "frame_introspection.py": ("rejected", "introspection"),
    "timed_differently.py": ("wrong_result", "timed-output"),
    # NaN as a wildcard
    "nan_output.py": ("wrong_result", "nonfinite"),
    # lower precision than allowed
    "low_precision.py": ("wrong_result", "tolerance"),
    # PyTorch for the heavy math
    "torch_matmul.py": ("rejected", "torch-heavy-math"),
    "torch_heavy_runtime.py": ("rejected", "torch-heavy-math"),
    # specializes to the measured shape
    "shape_specialized.py": ("wrong_result", "unwritten"),
    # zeros where outputs are tiny
    "tiny_zeros.py": ("wrong_result", "tolerance"),
    # third-party kernel libraries, files
    "third_party.py": ("rejected", "banned-import"),
    "dynamic_import.py": ("rejected", "banned-import"),
    "file_io.py": ("rejected", "io"),
    # ending the worker; changing PyTorch global state under the baseline
    "system_exit.py": ("rejected", "io"),
    "global_flags.py": ("rejected", "introspection"),
}


def test_every_file_has_an_expectation():
    assert sorted(p.name for p in ADV.glob("*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_adversarial(name):
    cls, rule = EXPECTED[name]
    r = evaluate({"task_dir": str(DEMO), "candidate": str(ADV / name), "seeds": [5, 6, 7]})
    assert r["class"] == cls, r["message"]
    rules = rule if isinstance(rule, tuple) else (rule,)
    assert r.get("rule") in rules, r["message"]
    assert r["message"]
    assert not r["correct"]
    if cls == "rejected" and "line" in r["message"]:
        assert f"[{r['rule']}]" in r["message"]


def test_runtime_defences_behind_the_static_rules(monkeypatch):
    """With the static rules skipped: SystemExit is an error result (the worker survives), and a
    changed PyTorch flag is caught and restored by the integrity check."""
    import torch
    monkeypatch.setenv("KERNELD_UNSAFE_SKIP_STATIC_CHECKS", "1")
    r = evaluate({"task_dir": str(DEMO), "candidate": str(ADV / "system_exit.py"), "seeds": [1]})
    assert r["class"] == "error" and "SystemExit" in r["message"]
    assert not torch.are_deterministic_algorithms_enabled()
    r = evaluate({"task_dir": str(DEMO), "candidate": str(ADV / "global_flags.py"), "seeds": [1]})
    assert r["class"] == "rejected" and r["rule"] == "introspection" and "deterministic" in r["message"]
    assert not torch.are_deterministic_algorithms_enabled()  # restored
