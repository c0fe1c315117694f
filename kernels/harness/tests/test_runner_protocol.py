"""The judge <-> runner protocol against its golden examples (protocol/golden/runner/): every
good message parses with its parser (and requests survive an encode/parse round trip), every
bad one is a ProtocolError."""
import json

import pytest
from hpaths import REPO

from harness import runner_protocol as rp

GOLDEN = REPO / "protocol" / "golden" / "runner"
GOOD = sorted(p for p in GOLDEN.glob("*.json"))
BAD = sorted(p for p in (GOLDEN / "bad").glob("*.json"))


def test_there_are_examples_of_every_message():
    names = {p.stem for p in GOOD}
    for op in rp.REQUESTS:
        assert any(n == op or n.startswith(op + "_") for n in names), op
    assert {"ready", "reply_load", "reply_time", "reply_call_failure"} <= names
    assert len(BAD) >= 8


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.name)
def test_golden_parses(path):
    d = json.loads(path.read_text())
    line = json.dumps(d)
    if "event" in d:
        r = rp.parse_ready(line)
        assert r.pid == d["pid"] and r.mode == d["mode"]
    elif "op" in d:
        req = rp.parse_request(line.encode())
        assert req.op == d["op"] and req.id == d["id"]
        again = rp.parse_request(rp.encode(req))
        assert again == req
    else:
        rep = rp.parse_reply(line, d["id"])
        assert rep.ok == d["ok"]
        if "failure" in d:
            assert rep.failure.cls == d["failure"]["cls"] and rep.failure.fatal == d["failure"].get("fatal", False)
        for k in ("stream_us", "device_us", "host_us", "capture"):
            if k in d:
                assert getattr(rep, k) == d[k]


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_bad_is_a_protocol_error(path):
    d = json.loads(path.read_text())
    line = json.dumps(d["line"])
    with pytest.raises(rp.ProtocolError):
        if d["parser"] == "request":
            rp.parse_request(line)
        elif d["parser"] == "ready":
            rp.parse_ready(line)
        else:
            rp.parse_reply(line, 4)


def test_size_limit_and_garbage():
    with pytest.raises(rp.ProtocolError):
        rp.parse_request(b"{" + b" " * (rp.MAX_LINE + 1) + b"}")
    for raw in (b"\xff\xfe", b"[1,2]", b"not json", b'{"id": 1}'):
        with pytest.raises(rp.ProtocolError):
            rp.parse_reply(raw, 1)
