"""torch's c10 log header and the repeated-wait judgement (block ``waiting``).

torch writes its month without a leading zero (``[W821 08:26:20.536421538 file:line]`` is
21 August): such a line carries its level (a warning is a notice, held for an outcome) and
its rank. Every rank printing torch's "Waiting for pending NCCL work to finish before starting
graph capture" once (aten ``CUDAGraph.cpp``, pytorch/pytorch#110665) is no hang: a wait is
repeated only when one process says it again. Lines: vllm-project/vllm-ascend#2473 (eight
ranks capturing ACL graphs)."""

from __future__ import annotations

from pathlib import Path

import yaml

from service.classify.engine import Classifier
from service.classify.ruletest import load_rule_set
from service.offline.report import StreamReport, classify_records
from service.parse import line as L
from service.parse.line import parse_line
from service.records import LogRecord

W = "Warning: Waiting for pending NCCL work to finish before starting graph capture. (function operator())"
RANKS = [
    f"[rank4]:[W821 08:26:20.536421538 compiler_depend.ts:149] {W}",
    f"[rank1]:[W821 08:26:20.548242047 compiler_depend.ts:149] {W}",
    f"[rank0]:[W821 08:26:20.555928992 compiler_depend.ts:149] {W}",
]
CAPTURE = (
    "(VllmWorker rank=0 pid=36105) INFO 08-21 08:26:19 [kv_cache_utils.py:837] Maximum "
    "concurrency for 4,096 tokens per request: 203.31x"
)


def classify(tmp_path: Path, lines: list[str]) -> StreamReport:
    """The lines through a classifier whose team file says a wait repeated three times is a
    stall (the shipped five would need more ranks than the source shows)."""
    (tmp_path / "judgements.yaml").write_text(yaml.safe_dump({"waiting": {"repeats": 3}}))
    clf = Classifier(load_rule_set([tmp_path]).rulebook())
    return classify_records([LogRecord("s", t) for t in lines], clf)[0]


def test_a_torch_line_of_a_month_before_october_carries_its_level_and_rank() -> None:
    line = parse_line(RANKS[0])
    assert (line.kind, line.level, line.rank, line.fileinfo) == (
        L.TORCH,
        "WARNING",
        4,
        "compiler_depend.ts:149",
    )
    assert line.message == W
    assert parse_line(RANKS[0].replace("[W821", "[W1021")).level == "WARNING"


def test_each_rank_saying_the_wait_once_is_no_stall(tmp_path: Path) -> None:
    rep = classify(tmp_path, [CAPTURE, *RANKS])
    assert rep["incidents"] == []


def test_one_rank_saying_it_again_and_again_is_a_stall(tmp_path: Path) -> None:
    rep = classify(tmp_path, [CAPTURE, RANKS[2], RANKS[2], RANKS[2]])
    (inc,) = rep["incidents"]
    assert inc["rule"] == "stall-kv_cache_init"
