"""Joining Docker 16 KiB partials and CRI P/F chunks, bounded and flushable."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from service.ingest.envelope import decode_line
from service.ingest.joiner import Joiner
from service.ingest.lines import PARTIAL
from service.records import LogRecord, Position
from tests.ingest_samples import ENGINE_FAILED, NCCL_WARN, ROUTES, STARTUP, rejects

CHUNK = 16384


def docker(log: str, stream: str = "stdout", second: int = 11) -> str:
    return json.dumps(
        {"log": log, "stream": stream, "time": f"2026-07-27T10:11:{second:02d}.000000001Z"}
    )


def cri(content: str, flag: str = "F", fd: str = "stdout", second: int = 12) -> str:
    return f"2026-07-27T10:11:{second:02d}.5Z {fd} {flag} {content}"


def decode_all(lines: list[str], stream: str = "c") -> list[LogRecord]:
    out: list[LogRecord] = []
    for i, line in enumerate(lines, 1):
        out.extend(decode_line(line, stream, position=Position("file", "c", i)))
    return out


def test_docker_16k_partials_are_concatenated():
    # A vLLM config dump longer than 16 KiB: Docker writes two unterminated entries + the tail.
    line = "(APIServer pid=1) INFO 07-27 10:11:12 [api_server.py:1] args: " + "x" * 40000
    parts = [line[:CHUNK], line[CHUNK : 2 * CHUNK], line[2 * CHUNK :] + "\n"]
    records = decode_all([docker(p, second=11 + i) for i, p in enumerate(parts)])
    assert [PARTIAL in r.meta for r in records] == [True, True, False]
    (joined,) = Joiner().feed(records)
    assert joined.text == line
    assert str(joined.position) == "file:c:1"  # where the line starts
    assert joined.time == records[0].time
    assert joined.meta == {"fd": "stdout"}


def test_cri_p_chunks_join_until_f():
    parts = ["Traceback payload " * 1000, "more " * 3000, "end of line"]
    lines = [cri(parts[0], "P"), cri(parts[1], "P"), cri(parts[2], "F")]
    (joined,) = Joiner().feed(decode_all(lines))
    assert joined.text == "".join(parts)
    assert joined.meta == {"fd": "stdout"}


def test_other_fd_and_other_streams_are_not_joined_into_a_pending_line():
    joiner = Joiner()
    out = joiner.feed(
        decode_all([cri("half of a stdout line ", "P"), cri(STARTUP, "F", fd="stderr")], "pod-a")
        + decode_all([cri(ROUTES)], "pod-b")
        + decode_all([cri("and its end", "F")], "pod-a")
    )
    assert [(r.stream, r.text) for r in out] == [
        ("pod-a", STARTUP),
        ("pod-b", ROUTES),
        ("pod-a", "half of a stdout line and its end"),
    ]
    assert len(joiner) == 0


def test_complete_records_pass_through_untouched():
    joiner = Joiner()
    rec = decode_line(cri(ENGINE_FAILED), "c")[0]
    assert joiner.feed([rec])[0] is rec


def test_oversize_line_is_truncated_counted_once_and_the_next_line_is_intact():
    before = rejects("j", "oversize")
    joiner = Joiner(max_line=100, source="j")
    lines = [
        cri("a" * 60, "P"),
        cri("b" * 60, "P"),
        cri("c" * 60, "P"),
        cri("d" * 10),
        cri(NCCL_WARN),
    ]
    out = joiner.feed(decode_all(lines))
    assert [r.text for r in out] == ["a" * 60 + "b" * 40, NCCL_WARN]
    assert rejects("j", "oversize") == before + 1


def test_single_chunk_larger_than_max_is_cut():
    before = rejects("j", "oversize")
    joiner = Joiner(max_line=10, source="j")
    out = joiner.feed(decode_all([cri("z" * 50, "P"), cri("tail")]))
    assert [r.text for r in out] == ["z" * 10]
    assert rejects("j", "oversize") == before + 1


def test_flush_emits_unfinished_lines_all_or_per_stream():
    joiner = Joiner()
    joiner.feed(decode_all([cri("dying mid-line", "P")], "a") + decode_all([cri("x", "P")], "b"))
    assert len(joiner) == 2
    assert [r.text for r in joiner.flush("a")] == ["dying mid-line"]
    assert [(r.stream, r.text) for r in joiner.flush()] == [("b", "x")]
    assert joiner.flush() == []


def test_flush_idle_emits_only_old_lines():
    joiner = Joiner()
    joiner.feed(decode_all([cri("old", "P")], "a"))
    started = joiner._pending[("a", "stdout")].since
    joiner.feed(decode_all([cri("new", "P")], "b"))
    joiner._pending[("b", "stdout")].since = started + 10
    assert [r.text for r in joiner.flush_idle(5, now=started + 12)] == ["old"]
    assert len(joiner) == 1


def test_max_streams_evicts_the_oldest_pending_line():
    joiner = Joiner(max_streams=2)
    out = joiner.feed(
        decode_all([cri("one", "P")], "s1")
        + decode_all([cri("two", "P")], "s2")
        + decode_all([cri("three", "P")], "s3")
    )
    assert [(r.stream, r.text) for r in out] == [("s1", "one")]
    assert len(joiner) == 2


def test_join_generator_yields_in_order():
    records = decode_all([cri("a", "P"), cri("b"), cri(ROUTES)])
    assert [r.text for r in Joiner().join(records)] == ["ab", ROUTES]


@settings(max_examples=200, deadline=None)
@given(
    st.text(st.characters(codec="utf-8", exclude_characters="\n"), min_size=1, max_size=2000),
    st.lists(st.integers(1, 500), max_size=20),
    st.booleans(),
)
def test_any_split_rejoins_to_the_original_line(line, cuts, use_docker):
    chunks, i = [], 0
    for size in cuts:
        if i >= len(line) - 1:
            break
        chunks.append(line[i : i + size])
        i += size
    chunks.append(line[i:])
    chunks = [c for c in chunks if c]
    if use_docker:
        lines = [docker(c) for c in chunks[:-1]] + [docker(chunks[-1] + "\n")]
    else:
        lines = [cri(c, "P") for c in chunks[:-1]] + [cri(chunks[-1], "F")]
    out = Joiner().feed(decode_all(lines))
    assert [r.text for r in out] == [line]


def test_rollback_undoes_a_batch_that_could_not_be_stored():
    joiner = Joiner()
    joiner.feed(decode_all([cri("held ", "P")], "a"))  # an earlier, stored batch
    mark = joiner.checkpoint()
    batch = decode_all([cri("chunk ", "P"), cri("end")], "a") + decode_all([cri("x", "P")], "b")
    assert [r.text for r in joiner.feed(batch)] == ["held chunk end"]
    joiner.rollback(mark)  # the sink failed; the sender will resend the same batch
    retry = decode_all([cri("chunk ", "P"), cri("end")], "a") + decode_all([cri("x", "P")], "b")
    assert [r.text for r in joiner.feed(retry)] == ["held chunk end"]
    assert [r.text for r in joiner.flush()] == ["x"]
