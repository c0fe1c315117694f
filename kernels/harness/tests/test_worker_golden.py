"""The daemon <-> judge protocol's golden files (protocol/golden/worker/, typed on the Rust side in
protocol/src/worker.rs): the judge reads every golden request and answers with at least every
field the golden replies carry (fields are added, never removed)."""
import json

from hpaths import DEMO, REPO

from harness import evaluate as ev
from test_worker_protocol import Worker

GOLDEN = REPO / "protocol" / "golden" / "worker"
SEED = str(DEMO / "seeds" / "tiled.py")


def load(name):
    return json.loads((GOLDEN / name).read_text())


def test_the_judge_answers_the_golden_evaluate_with_every_golden_field():
    req = load("evaluate.request.json")
    req.update(task_dir=str(DEMO), candidate=SEED)
    req.pop("id"), req.pop("op")
    got = ev.evaluate(req)
    want = load("evaluate.reply.json")["result"]
    assert got["class"] == "ok", got["message"]
    assert set(want) <= set(got), set(want) - set(got)
    assert set(want["shapes"][0]) <= set(got["shapes"][0]), set(want["shapes"][0]) - set(got["shapes"][0])
    assert set(want["checks"][0]) <= set(got["checks"][0])


def test_the_judge_answers_the_golden_describe():
    req = load("describe.request.json")
    req.update(task_dir=str(DEMO), candidate=SEED)
    got = ev.describe(req)
    want = load("describe.reply.json")
    assert set(want) - {"id", "ok"} <= set(got)


def test_the_judge_ready_line_has_every_golden_field():
    w = Worker(cwd="/tmp")
    try:
        assert set(load("ready.json")) <= set(w.ready)
        r = w.ask(load("shutdown.request.json"))
        assert r == load("shutdown.reply.json")
    finally:
        w.p.kill()
        w.p.wait()
