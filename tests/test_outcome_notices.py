"""A page needs an outcome, for a subsystem whose notices are its own probes (block
``outcome`` ``notices_from`` of ``rules/judgements.yaml``): NCCL's RAS thread prints WARN
"Call to bind failed" when its client port is taken and goes on without it
(NVIDIA/nccl ``src/ras/client_support.cc``, ``rasClientInitSocket``). Held like a
``fatal: false`` signature: a warning when the run goes on, only related when the run then
fails (the failure is the root cause), the cause only when nothing better came."""

from __future__ import annotations

from service.classify.engine import Classifier
from service.classify.judgements import outcome
from service.classify.rulebook import RuleBook
from service.offline.report import StreamReport, classify_records
from service.parse.line import parse_line
from service.records import LogRecord
from tests.test_outcome import DEATH, NCCL_START, RAS_BIND, TRAINING

RB = RuleBook()
FILES = RB.judgements.get(outcome.KIND).notice_files()
# the same wording from NCCL's bootstrap (not the RAS thread) is no probe: it competes as before
BOOTSTRAP_BIND = (
    "A800:6801:6839 [1] misc/socket.cc:460 NCCL WARN Call to bind failed: Address already in use"
)


def report(lines: list[str]) -> StreamReport:
    return classify_records([LogRecord("s", t) for t in lines], Classifier(RB))[0]


def test_the_ras_files_are_read_from_the_rules() -> None:
    assert outcome.subsystem_notice(parse_line(RAS_BIND), FILES)
    assert not outcome.subsystem_notice(parse_line(BOOTSTRAP_BIND), FILES)
    assert not outcome.subsystem_notice(parse_line(DEATH[-1]), FILES)


def test_a_later_failure_is_the_root_cause_and_the_ras_notice_only_related() -> None:
    rep = report(NCCL_START + DEATH)
    (inc,) = rep["incidents"]
    assert inc["line"] == DEATH[-1]
    assert RAS_BIND in [r["line"] for r in inc["related"]]


def test_the_ras_notice_in_a_run_that_went_on_is_a_warning() -> None:
    rep = report(NCCL_START + TRAINING)
    assert rep["incidents"] == [] and [w["line"] for w in rep["warnings"]] == [RAS_BIND]
