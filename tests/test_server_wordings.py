"""Other programs' own wordings around the engine (rules/signatures/servers.yaml,
rules/stages.yaml): a scheduler's cancellation at an operator's request is an orderly
stop, a time limit or a node failure is not; a shell's 'Killed' job notice pages."""

from __future__ import annotations

import itertools
import re

import pytest

from service.classify.loader import build_classifier
from service.classify.rulebook import RuleBook
from service.offline.report import classify_records
from service.records import LogRecord

RB = RuleBook()
CLF = build_classifier()
_N = itertools.count()


def is_shutdown(line: str) -> bool:
    return any(re.search(p.pattern, line) for p in RB.stage_rules.shutdown)


@pytest.mark.parametrize(
    "line, stop",
    [
        ("slurmstepd: error: *** JOB 524549 ON ault43 CANCELLED AT 2024-10-09T23:25:32 ***", True),
        (
            "slurmstepd: error: *** STEP 557341.0 ON c4-n12 CANCELLED AT 2025-03-11T13:26:25 "
            "DUE TO PREEMPTION ***",
            False,
        ),
        (
            "slurmstepd: error: *** JOB 42196 ON clr0710 CANCELLED AT 2022-04-14T16:17:16 "
            "DUE TO TIME LIMIT ***",
            False,
        ),
    ],
)
def test_only_an_operators_cancellation_is_an_orderly_stop(line: str, stop: bool) -> None:
    assert is_shutdown(line) is stop


def test_a_shell_killed_notice_after_serving_pages_as_host_memory() -> None:
    lines = [
        "INFO:     Application startup complete.",
        'INFO:     10.0.0.7:54182 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        "./serve.sh: line 40:  8812 Killed                  python3 -m vllm.entrypoints.openai.api_server --model m",
    ]
    name = f"k{next(_N)}"
    reps = classify_records([LogRecord(name, t) for t in lines], CLF)
    inc = reps[0]["incidents"]
    assert [(i["category"], i["stage"]) for i in inc][:1] == [("host_memory", "serving")]
