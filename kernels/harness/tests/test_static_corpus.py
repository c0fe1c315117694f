"""Honest code passes (issue 25): public Triton kernel files, each wrapped as a candidate with the
smallest honest change, through the static rules with every task's settings (demo, mla, kda).

The files are not in the repository (public code stays out of this project's commits): they live in
tests/corpus/public/ on the machine that assembled them (or $KERNELD_STATIC_CORPUS), and
tests/corpus/SOURCES.toml names each one (repository, path, commit, licence, the changes, the sha256
of the wrapped file). Where they are absent this module is skipped and says so; the idioms they
exercise are covered by test_static_idioms.py, which is committed and always runs.

Two sets, both asserted file by file:
- CORPUS: candidates. At least 95 % must pass with every task's settings; each rejection is listed in
  EXPECTED_REJECTIONS with the capability it names.
- REFUSED_BY_DESIGN: public files that contain what a candidate of these tasks may not do whatever its
  intent (a matmul through PyTorch, torch.compile, torch.distributed, a torch call a task bans). They
  were wrapped like the others, then set apart after their verdicts were read (see corpus/README.md):
  they are rejected with the rule listed here, and are not counted in the fraction.
"""
import hashlib
import os
import tomllib
from pathlib import Path

import pytest
from hpaths import KERNELS

from harness.static_check import check_source

HERE = Path(__file__).resolve().parent / "corpus"
PUBLIC = Path(os.environ.get("KERNELD_STATIC_CORPUS", HERE / "public"))
MANIFEST = tomllib.loads((HERE / "SOURCES.toml").read_text())["file"]
TASKS = {t: tomllib.loads((KERNELS / t / "task.toml").read_text()).get("banned_calls", []) for t in ("demo", "mla", "kda")}

# name -> ({task or "*": set of rules every violation falls under}, why): rejections in CORPUS
EXPECTED_REJECTIONS = {
    "triton_extern_functions.py": ({"*": {"introspection", "io"}},
                                   "locates libdevice on disk: inspect.currentframe() (frames), os.path and pathlib "
                                   "(files)"),
    "triton_grouped_gemm.py": ({"*": {"introspection"}},
                               ".data_ptr() (memory identity, the tool of caching outputs by pointer) to build its "
                               "device pointer arrays"),
}
REFUSED_BY_DESIGN = {
    "liger_swiglu.py": ({"*": {"concurrency", "introspection"}},
                        "its tensor-parallel variant calls torch.distributed.tensor (process groups); its "
                        "device_context reads getattr(torch, device.type) (an attribute by computed name)"),
    "fla_activations.py": ({"*": {"concurrency", "torch-heavy-math"}},
                           "torch.compile'd PyTorch activations (Inductor compiles and runs them) and a "
                           "torch.distributed.tensor import"),
    "mamba_layer_norm.py": ({"*": {"torch-heavy-math"}}, "LayerNormLinearFn: a linear layer through F.linear"),
    "fla_fused_norm_gate.py": ({"*": {"torch-heavy-math"}}, "LayerNormGatedLinearFunction: F.linear, torch.einsum"),
    "fla_fused_kl_div.py": ({"*": {"torch-heavy-math"}}, "the fused linear of its KL loss: F.linear, torch.mm/addmm"),
    "fla_logsumexp.py": ({"mla": {"torch-heavy-math"}}, "a .logsumexp() reference on the host (the mla task bans "
                                                        "logsumexp)"),
    **{name: ({"kda": {"torch-heavy-math"}}, "fla's variable-length index helpers compute chunk indices with a host "
                                             "torch .cumsum() (the kda task bans cumsum)")
       for name in ("fla_index.py", "fla_cumsum.py", "fla_solve_tril.py", "fla_chunk_scaled_dot_kkt.py",
                    "fla_pooling.py")},
}


def _present():
    return PUBLIC.is_dir() and any(PUBLIC.glob("*.py"))


pytestmark = pytest.mark.skipif(not _present(), reason=f"the public corpus is not on this machine ({PUBLIC}): "
                                "public code is not committed, see kernels/harness/tests/corpus/README.md")


def _expected(name, task):
    for table in (EXPECTED_REJECTIONS, REFUSED_BY_DESIGN):
        if name in table:
            rules = table[name][0].get(task, table[name][0].get("*"))
            return rules
    return None


@pytest.fixture(scope="module")
def verdicts():
    out = {}
    for entry in MANIFEST:
        path = PUBLIC / entry["name"]
        src = path.read_text()
        assert hashlib.sha256(src.encode()).hexdigest() == entry["sha256"], \
            f"{entry['name']} differs from the file SOURCES.toml describes"
        for task, banned in TASKS.items():
            out[entry["name"], task] = check_source(src, banned_calls=banned)
    return out


def test_manifest_covers_the_corpus():
    names = {e["name"] for e in MANIFEST}
    assert names == {p.name for p in PUBLIC.glob("*.py")}
    assert set(EXPECTED_REJECTIONS) | set(REFUSED_BY_DESIGN) <= names
    assert len(names - set(REFUSED_BY_DESIGN)) >= 30
    assert len({e["repo"] for e in MANIFEST if e["name"] not in REFUSED_BY_DESIGN}) >= 5
    assert all(e["licence"] in ("MIT", "BSD-2-Clause", "BSD-3-Clause", "Apache-2.0") for e in MANIFEST)


@pytest.mark.parametrize("task", sorted(TASKS))
def test_every_file_gets_its_expected_verdict(verdicts, task):
    wrong = []
    for entry in MANIFEST:
        name = entry["name"]
        vs = verdicts[name, task]
        want = _expected(name, task)
        if want is None and vs:
            wrong.append(f"{name}: rejected, expected to pass: {vs[0]}")
        elif want is not None and not vs:
            wrong.append(f"{name}: passed, expected a rejection under {sorted(want)}")
        elif want is not None and not {v.rule for v in vs} <= want:
            wrong.append(f"{name}: rules {sorted({v.rule for v in vs})}, expected within {sorted(want)}: {vs[0]}")
        for v in vs:
            if not v.fix:
                wrong.append(f"{name}: a violation without a fix: {v}")
    assert not wrong, "\n".join(wrong)


def test_accepted_fraction(verdicts, capsys):
    corpus = [e["name"] for e in MANIFEST if e["name"] not in REFUSED_BY_DESIGN]
    lines = []
    for task in sorted(TASKS):
        ok = sum(1 for n in corpus if not verdicts[n, task])
        every = sum(1 for e in MANIFEST if not verdicts[e["name"], task])
        lines.append(f"  {task}: {ok}/{len(corpus)} candidates accepted ({100 * ok / len(corpus):.1f} %); "
                     f"all {len(MANIFEST)} public files: {every} accepted ({100 * every / len(MANIFEST):.1f} %)")
        assert ok / len(corpus) >= 0.95, lines[-1]
    with capsys.disabled():
        print("\nstatic rules on the public corpus:\n" + "\n".join(lines))
