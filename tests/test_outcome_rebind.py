"""A page needs an outcome, for a server's bind failure (block ``outcome`` ``binds`` /
``bound`` of ``rules/judgements.yaml``): a bind failure naming its port waits for the run; a
server that then binds the same port recovered it (an app restarted beside the engine retries
until the old process lets the port go): a warning. No bind of that port - the log ends, the
timer's ``hold_s`` passes, another port is bound - is a real conflict and pages; a raised
exception (the process died with it) pages at once. Wordings: uvicorn's own
(``uvicorn/server.py``: the bind error and "Uvicorn running on ..."), as vLLM's API server
printed them in vllm-project/vllm#7514; Go's ``net`` error and ollama's ``Listening on``
(``server/routes.go``)."""

from __future__ import annotations

from service.classify.engine import Classifier
from service.classify.judgements import outcome
from service.classify.rulebook import RuleBook
from service.classify.stream_state import StreamState
from service.offline.report import StreamReport, classify_records
from service.parse.line import parse_line
from service.records import LogRecord

RB = RuleBook()
PORTS = RB.judgements.get(outcome.KIND).ports()

BIND_FAILED = (
    "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): "
    "address already in use"
)
START = [
    "INFO:     Started server process [6593]",
    "INFO:     Waiting for application startup.",
    "INFO:     Application startup complete.",
]
STOP = ["INFO:     Waiting for application shutdown.", "INFO:     Application shutdown complete."]
RETRY = [
    "INFO:     Started server process [6611]",
    "INFO:     Waiting for application startup.",
    "INFO:     Application startup complete.",
]
BOUND = "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)"
OTHER_PORT = "INFO:     Uvicorn running on http://0.0.0.0:19000 (Press CTRL+C to quit)"
SERVED = 'INFO:     127.0.0.1:40000 - "GET /health HTTP/1.1" 200 OK'


def report(lines: list[str]) -> StreamReport:
    return classify_records([LogRecord("s", t) for t in lines], Classifier(RB))[0]


def test_the_port_is_read_from_the_programs_own_wordings() -> None:
    assert PORTS.failed(parse_line(BIND_FAILED)) == 8000
    go = "Error: listen tcp 127.0.0.1:11434: bind: address already in use"
    assert PORTS.failed(parse_line(go)) == 11434
    assert PORTS.bound(parse_line(BOUND).message) == 8000
    ollama = (
        'time=2025-08-21T14:19:24.701+09:00 level=INFO source=routes.go:1287 msg="Listening on '
        '127.0.0.1:11434 (version 0.9.0)"'
    )
    assert PORTS.bound(parse_line(ollama).message) == 11434
    raised = "OSError: [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already in use"
    assert PORTS.failed(parse_line(raised)) is None  # the process raised it: no retry
    assert PORTS.bound(parse_line(SERVED).message) is None


def test_a_bind_failure_then_a_restart_that_binds_the_port_is_a_warning() -> None:
    rep = report([*START, BIND_FAILED, *STOP, *RETRY, BOUND, SERVED])
    assert rep["incidents"] == []
    (warning,) = rep["warnings"]
    assert warning["rule"] == "port-in-use" and "port 8000" in (warning["detail"] or "")


def test_a_bind_failure_that_no_server_recovers_pages() -> None:
    rep = report([*START, BIND_FAILED, *STOP])
    assert [i["rule"] for i in rep["incidents"]] == ["port-in-use"]
    assert rep["incidents"][0]["stage"] == "api_server"


def test_a_server_bound_on_another_port_does_not_recover_it() -> None:
    rep = report([*START, BIND_FAILED, *STOP, *RETRY, OTHER_PORT, SERVED])
    assert [i["rule"] for i in rep["incidents"]] == ["port-in-use"]


def test_a_raised_bind_error_pages_at_once() -> None:
    clf = Classifier(RB)
    st = clf.state("s")
    changes = [
        c
        for t in [*START, "OSError: [Errno 98] Address already in use"]
        for c in clf.feed_text(st, t, 1.0)
    ]
    assert [(c.kind, c.incident.primary.rule) for c in changes] == [("opened", "port-in-use")]


def test_the_timer_pages_a_bind_failure_not_recovered_within_hold_s() -> None:
    clf = Classifier(RB)
    hold = clf.judgements.get(outcome.KIND).hold_s
    st = clf.state("s")
    t0 = 1_000_000.0
    for i, text in enumerate([*START, BIND_FAILED, *STOP]):
        assert clf.feed_text(st, text, t0 + i) == []
    back = StreamState.from_dict(st.to_dict())  # the held port survives a snapshot
    assert [(h.port, h.rebound) for h in back.checks.held] == [(8000, False)]
    changes = clf.tick(t0 + 10 + hold)
    assert [(c.kind, c.incident.primary.rule) for c in changes] == [("opened", "port-in-use")]


def test_the_timer_makes_a_recovered_bind_failure_a_warning() -> None:
    clf = Classifier(RB)
    hold = clf.judgements.get(outcome.KIND).hold_s
    st = clf.state("s")
    t0 = 1_000_000.0
    for i, text in enumerate([*START, BIND_FAILED, *STOP, *RETRY, BOUND]):
        clf.feed_text(st, text, t0 + i)
    changes = clf.tick(t0 + 20 + hold)
    assert {c.incident.severity for c in changes} == {"warning"}
