"""``related`` lists each distinct cascade once: never the root cause again (another rank's
copy of it), never the same cascade from every rank."""

from __future__ import annotations

from service.classify.engine import Classifier
from service.classify.rulebook import RuleBook
from service.offline.report import classify_records
from service.records import LogRecord

RB = RuleBook()


def test_every_rank_printing_the_same_failure_gives_one_root_cause_and_no_repeats() -> None:
    lines = []
    for rank in range(8):
        lines.append(
            f"(VllmWorker rank={rank} pid={70 + rank}) ERROR 07-21 04:59:00 "
            "[multiproc_executor.py:470] RuntimeError: NCCL error: unhandled system "
            "error (run with NCCL_DEBUG=INFO for details)"
        )
    for rank in range(8):
        lines.append(
            f"(EngineCore_DP0 pid=9) ERROR 07-21 04:59:01 [multiproc_executor.py:154] "
            f"Worker proc VllmWorker-{rank} died unexpectedly, shutting down executor."
        )
    lines.append(
        "(APIServer pid=1) ERROR 07-21 04:59:02 [core_client.py:564] Engine core proc "
        "EngineCore_DP0 died unexpectedly, shutting down client."
    )
    rep = classify_records([LogRecord("s", t) for t in lines], Classifier(RB))[0]
    inc = rep["incidents"][0]
    assert inc["category"] == "nccl_error" and "rank=0" in inc["line"]
    keys = [(r["rule"], r["category"]) for r in inc["related"]]
    assert len(keys) == len(set(keys)), keys
    assert (inc["rule"], inc["category"]) not in keys
