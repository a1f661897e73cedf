"""Hostile input never crashes the core: junk, control bytes, huge and truncated lines."""

from __future__ import annotations

import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service import metrics
from service.classify.engine import Classifier
from service.classify.rulebook import RuleBook
from service.offline.report import classify_records
from service.parse.line import parse_line
from service.records import LogRecord
from service.sources.files import read_file

RB = RuleBook()
VLLMISH = st.sampled_from(
    [
        "(APIServer pid=1) ",
        "(VllmWorker rank=1 pid=4) ",
        "ERROR 01-01 00:00:00 [core.py:1] ",
        "\x1b[0;36m",
        "[rank0]:",
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in f',
        "NCCL WARN ",
        "RuntimeError: ",
        "CUDA out of memory",
        "\r",
        "\x00",
        "(",
        ")",
        "[",
        "]",
    ]
)
TEXT = st.lists(st.one_of(st.text(max_size=40), VLLMISH), max_size=12).map("".join)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(TEXT)
def test_parse_line_never_raises(text: str) -> None:
    line = parse_line(text)
    assert isinstance(line.message, str)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(TEXT, max_size=30))
def test_classifier_survives_any_stream(lines: list[str]) -> None:
    reps = classify_records([LogRecord("s", t) for t in lines], Classifier(RB))
    assert all(r["stream"] == "s" for r in reps)


def test_a_huge_hostile_line_is_bounded_in_time() -> None:
    # many near-misses for the patterns with bounded gaps, 2 MB long
    hostile = ("NCCL WARN " + "custom_all_reduce " * 5 + "x" * 100) * 10_000
    clf = Classifier(RB)
    t0 = time.perf_counter()
    clf.feed(LogRecord("s", hostile))
    assert time.perf_counter() - t0 < 10


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.binary(max_size=4096))
def test_binary_files_are_read_with_counted_rejects(tmp_path_factory, data: bytes) -> None:
    path = tmp_path_factory.mktemp("junk") / "junk.log"
    path.write_bytes(data)
    before = sum(
        s.value for m in metrics.REJECTS.collect() for s in m.samples if s.name.endswith("_total")
    )
    records = list(read_file(str(path)))
    classify_records(records, Classifier(RB))
    after = sum(
        s.value for m in metrics.REJECTS.collect() for s in m.samples if s.name.endswith("_total")
    )
    if b"\x00" in data:
        assert after > before  # NUL-laden junk is counted as a reject, never raised
    assert all(isinstance(r.text, str) for r in records)
