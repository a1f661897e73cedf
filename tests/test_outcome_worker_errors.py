"""A page needs an outcome, for an application error in a worker beside the engine (block
``outcome`` ``deaths`` / ``engine_processes`` of ``rules/judgements.yaml``): in an RL run
(verl, OpenRLHF, TRL with vLLM roll-outs) a roll-out or reward worker - a Ray actor - logs an
exception at ERROR while the training loop goes on. Once the run is doing its work, such an
exception waits: a later progress line (verl's step metrics, ``verl/utils/logger/
aggregate_logger.py`` ``concat_dict_to_str``: "step:N - key:value ...") makes it a warning;
none by the end pages it. The engine's own processes (EngineCore, APIServer, Worker) and an
exception that says a process died (torch's DataLoader "is killed by signal") page as before.
Process names as Ray prefixes them (verl's ``AgentLoopWorker``, ``TaskRunner``)."""

from __future__ import annotations

from service.classify.engine import Classifier
from service.classify.judgements import outcome
from service.classify.rulebook import RuleBook
from service.offline.report import StreamReport, classify_records
from service.records import LogRecord

RB = RuleBook()
WORKING = [
    "(TaskRunner pid=100) Training Progress:   0%|          | 0/20 [00:00<?, ?it/s]",
]
APP_ERROR = [
    "(AgentLoopWorker pid=200) Traceback (most recent call last):",
    '(AgentLoopWorker pid=200)   File "/app/reward.py", line 41, in compute_score',
    "(AgentLoopWorker pid=200)     answer = parse(text)",
    "(AgentLoopWorker pid=200) ValueError: no <answer> tag in the completion",
]
STEP = "(TaskRunner pid=100) step:1 - actor/entropy:0.51 - actor/pg_loss:-0.002 - critic/score/mean:0.31"


def report(lines: list[str]) -> StreamReport:
    return classify_records([LogRecord("s", t) for t in lines], Classifier(RB))[0]


def test_a_workers_error_while_training_steps_go_on_is_a_warning() -> None:
    rep = report([*WORKING, *APP_ERROR, STEP])
    assert rep["incidents"] == []
    assert [w["line"] for w in rep["warnings"]] == [APP_ERROR[-1]]


def test_a_workers_error_after_which_no_step_comes_pages() -> None:
    rep = report([*WORKING, *APP_ERROR])
    assert [i["line"] for i in rep["incidents"]] == [APP_ERROR[-1]]


def test_the_engines_own_exception_pages_at_once() -> None:
    clf = Classifier(RB)
    st = clf.state("s")
    engine = [t.replace("AgentLoopWorker", "EngineCore_DP0") for t in APP_ERROR]
    changes = [c for t in [*WORKING, *engine] for c in clf.feed_text(st, t, 1.0)]
    assert [c.kind for c in changes] == ["opened"]


def test_an_exception_that_says_a_process_died_pages_even_if_a_step_follows() -> None:
    killed = "(TaskRunner pid=100) RuntimeError: DataLoader worker (pid 563) is killed by signal: Killed."
    rep = report([*WORKING, killed, STEP])
    assert [i["line"] for i in rep["incidents"]] == [killed]


def test_the_timer_pages_a_workers_error_no_progress_followed() -> None:
    clf = Classifier(RB)
    hold = clf.judgements.get(outcome.KIND).hold_s
    st = clf.state("s")
    t0 = 1_000_000.0
    for i, text in enumerate([*WORKING, *APP_ERROR]):
        assert clf.feed_text(st, text, t0 + i) == []
    changes = clf.tick(t0 + 10 + hold)
    assert [(c.kind, c.incident.severity) for c in changes] == [("opened", "critical")]
