"""A log that ends mid-startup never reads healthy: it says where it stopped and for how long
(from its own timestamps), and is a stall past the stage's deadline (``--now`` for a live
capture) or when the same "waiting for ..." repeats with no progress."""

from __future__ import annotations

import json
from pathlib import Path

from service.classify.engine import Classifier
from service.classify.rulebook import RuleBook
from service.cli import main
from service.ingest.timestamps import line_time
from service.offline.report import classify_records
from service.records import LogRecord

REAL = Path(__file__).resolve().parent / "fixtures" / "real"
STALL = REAL / "stall-multinode-no-peer.log"
HEALTHY = REAL / "healthy-serving-prefix-caching-sigterm.log"
RB = RuleBook()


def test_line_times_come_from_the_line_itself() -> None:
    assert line_time("INFO 12-02 14:58:06 [core.py:1] x", 2026) == 1796223486.0
    assert line_time("[W1202 14:58:06.526004837 utils.cpp:68] Warning: x", 2026) == 1796223486.0
    assert line_time("2026-12-02T14:58:06.5Z stdout F x", 2000) == 1796223486.5
    assert line_time("no time here", 2026) is None


def test_a_log_ending_mid_startup_says_where_and_how_long(capsys) -> None:
    assert main(["classify", "--no-model", str(STALL)]) == 0
    out = capsys.readouterr().out
    assert "healthy: no incident" not in out
    assert "ended mid-start-up (during distributed_init): not healthy" in out
    assert main(["classify", "--json", "--no-model", str(STALL)]) == 0
    rep = json.loads(capsys.readouterr().out.splitlines()[0])
    assert rep["status"] == "starting" and rep["stopped"]["stage"] == "distributed_init"
    assert rep["stopped"]["no_progress_s"] is not None and rep["stopped"]["deadline_s"] == 900


def test_a_live_capture_past_the_deadline_is_a_stall(capsys) -> None:
    assert (
        main(["classify", "--json", "--no-model", "--now", "2026-12-02T15:30:00Z", str(STALL)]) == 1
    )
    rep = json.loads(capsys.readouterr().out.splitlines()[0])
    inc = rep["incidents"][0]
    assert (inc["tier"], inc["category"], inc["stage"]) == (
        "integration",
        "internode_network",
        "distributed_init",
    )


def test_a_finished_healthy_log_has_not_stopped() -> None:
    rep = classify_records(
        [LogRecord("h", t) for t in HEALTHY.read_text().splitlines()], Classifier(RB)
    )[0]
    assert rep["stopped"] is None and rep["incidents"] == []


def test_the_same_wait_repeated_without_progress_is_a_stall() -> None:
    head = [
        "INFO 07-16 10:00:00 [api_server.py:1] vLLM API server version 0.9.2",
        "INFO 07-16 10:00:01 [config.py:1] Using max model len 32768",
    ]
    wait = (
        "INFO 07-16 10:{m:02d}:{s:02d} [ray_utils.py:310] Waiting for creating a placement "
        "group of specs for {n} seconds. specs=[{{'node:10.0.0.1': 0.001, 'GPU': 1.0}}, "
        "{{'GPU': 1.0}}]. Check `ray status` and `ray list nodes` to see if you have enough "
        "resources."
    )
    lines = head + [wait.format(m=1 + i, s=10 * i, n=10 * 2**i) for i in range(6)]
    rep = classify_records([LogRecord("w", t) for t in lines], Classifier(RB))[0]
    inc = rep["incidents"][0]
    assert (inc["category"], inc["stage"]) == ("internode_network", "distributed_init")
    # the same lines a few seconds apart are not (yet) a stall
    quick = head + [wait.format(m=1, s=i, n=10) for i in range(6)]
    assert (
        classify_records([LogRecord("q", t) for t in quick], Classifier(RB))[0]["incidents"] == []
    )
