"""The hostile suite, in-process and gaming classes (PROCESS_MODEL.md "Hostile candidates"),
driven through the judge directly in CPU mode.

Each file in tests/hostile/ says what it tries and its expected verdict (`# expect:`, with the
static rules on, as the daemon runs them) and, for the ones whose point is what happens
*behind* the static rules, `# expect-runtime:` (the judge with KERNELD_UNSAFE_SKIP_STATIC_CHECKS=1,
so the candidate really runs in its runner). After every hostile candidate: no token in the
result, nothing new in the marker or state directory, no connection accepted, and the honest
seed evaluated next in the same judge gets the class a fresh judge gives it.
"""
import json
import re
import secrets
import socket
import threading
from pathlib import Path

import pytest
from hpaths import DEMO

from harness import evaluate as ev

HOSTILE = Path(__file__).resolve().parent / "hostile"
SEED = str(DEMO / "seeds" / "tiled.py")
FILES = sorted(p.name for p in HOSTILE.glob("*.py"))
REQ = {"task_dir": str(DEMO), "seeds": [5, 6, 7], "timing": {"cpu_reps": 3}, "profile": False}
EXPECT = re.compile(r"^# expect(-runtime)?: (no-effect|class=(\S+) rule=(\S+))\s*$", re.M)


def expectations(src: str) -> dict:
    out = {}
    for m in EXPECT.finditer(src):
        out["runtime" if m.group(1) else "static"] = None if m.group(2) == "no-effect" else (m.group(3), m.group(4))
    return out


class World:
    """The placeholders' real things: a secret file and env variable, a marker and a state
    directory, and a TCP listener that counts connections."""

    def __init__(self, tmp: Path, monkeypatch):
        self.token = secrets.token_hex(16)
        self.secret_file = tmp / "secret.txt"
        self.secret_file.write_text(self.token)
        self.secret_file.chmod(0o600)
        self.env = "KERNELD_TEST_SECRET_" + secrets.token_hex(4).upper()
        monkeypatch.setenv(self.env, self.token)
        self.marker = tmp / "marker"
        self.marker.mkdir()
        self.state = tmp / "state"
        self.state.mkdir()
        self.accepted = 0
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(8)
        self.srv.settimeout(0.2)
        self.port = self.srv.getsockname()[1]
        self.stop = False
        self.t = threading.Thread(target=self._accept, daemon=True)
        self.t.start()
        self.tmp = tmp

    def _accept(self):
        while not self.stop:
            try:
                c, _ = self.srv.accept()
                self.accepted += 1
                c.close()
            except OSError:
                pass

    def materialise(self, name: str) -> Path:
        src = (HOSTILE / name).read_text()
        for k, v in {"@@SECRET_FILE@@": str(self.secret_file), "@@SECRET_ENV@@": self.env,
                     "@@MARKER_DIR@@": str(self.marker), "@@STATE_DIR@@": str(self.state),
                     "@@TCP_PORT@@": str(self.port)}.items():
            src = src.replace(k, v)
        p = self.tmp / name
        p.write_text(src)
        return p

    def global_checks(self, result: dict, what: str):
        blob = json.dumps(result)
        assert self.token not in blob, f"{what}: the token leaked into the result"
        assert not list(self.marker.iterdir()), f"{what}: files appeared in the marker directory"
        assert not list(self.state.iterdir()), f"{what}: files appeared in the state directory"
        assert self.accepted == 0, f"{what}: the listener accepted a connection"

    def close(self):
        self.stop = True
        self.t.join(timeout=2)
        self.srv.close()


@pytest.fixture
def world(tmp_path, monkeypatch):
    w = World(tmp_path, monkeypatch)
    yield w
    w.close()


@pytest.fixture(scope="module", autouse=True)
def judge_is_subreaper():
    """As worker.py is: a candidate's escaped descendants re-parent to the judge, which kills
    them with their runner (fork_setsid_survivor.py)."""
    from harness import strays
    strays.become_subreaper()
    yield
    strays.become_subreaper(False)


@pytest.fixture(scope="module")
def fresh_honest():
    """The honest seed in a judge nothing hostile touched."""
    return ev.evaluate({**REQ, "candidate": SEED}, pool=ev.Pool())


def _check(r: dict, want, what: str):
    if want is None:
        return
    cls, rule = want
    assert (r["class"], r.get("rule")) == (cls, rule), f"{what}: {r['class']} [{r.get('rule')}] {r['message']}"
    assert r["message"]


def test_every_file_names_its_attempt_and_verdict():
    assert len(FILES) >= 20
    for name in FILES:
        src = (HOSTILE / name).read_text()
        assert src.startswith("# hostile: "), name
        assert "static" in expectations(src), name


@pytest.mark.parametrize("name", FILES)
def test_hostile(name, world, monkeypatch, fresh_honest):
    src = (HOSTILE / name).read_text()
    exp = expectations(src)
    cand = str(world.materialise(name))
    r = ev.evaluate({**REQ, "candidate": cand})
    _check(r, exp["static"], f"{name} (static rules on)")
    world.global_checks(r, name)
    ran_code = r.get("rule") not in ("io", "introspection", "concurrency", "banned-import", "allow-list", "timer") \
        or r["class"] != "rejected" or "line" not in (r["message"] or "")
    if "runtime" in exp:
        monkeypatch.setenv("KERNELD_UNSAFE_SKIP_STATIC_CHECKS", "1")
        r = ev.evaluate({**REQ, "candidate": cand})
        monkeypatch.delenv("KERNELD_UNSAFE_SKIP_STATIC_CHECKS")
        _check(r, exp["runtime"], f"{name} (static rules skipped)")
        world.global_checks(r, name + " (runtime)")
        ran_code = True
    if ran_code:
        honest = ev.evaluate({**REQ, "candidate": SEED})
        assert honest["class"] == fresh_honest["class"] == "ok", honest["message"]
        assert all(c["passed"] for c in honest["checks"])
        assert honest["config"] == fresh_honest["config"]
        # effects that come late (a descendant that outlived its runner, fork_setsid_survivor.py)
        world.global_checks(honest, name + " (after the honest seed)")
