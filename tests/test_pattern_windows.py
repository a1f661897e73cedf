"""Searching a bounded pattern only around its literals finds exactly what a full search
finds, and the linear-time engine finds exactly what both find: same patterns, same spans,
same groups (every corpus line, and long lines with the literal near the start, the middle
and the end)."""

from __future__ import annotations

from pathlib import Path

from service.classify.rulebook import RuleBook
from service.classify.signatures import max_width
from service.parse.line import parse_line

ROOT = Path(__file__).resolve().parents[1]
RB = RuleBook()
IDX = RB._index


def full(message: str) -> list:
    out = []
    for i in sorted(IDX.candidates(message)):
        m = IDX._compiled[i].search(message, timeout=1)
        if m is not None:
            out.append((i, m.span(), m.groups()))
    return out


def windowed(message: str) -> list:
    return [(i, m.span(), m.groups()) for i, m in IDX.search_exact(message)]


def engine(message: str) -> list:
    return [(i, m.span(), tuple(m.groups())) for i, m in IDX.search(message)]


def test_max_width() -> None:
    assert max_width("abc") == 3 and max_width("a.{0,10}b") == 12
    assert max_width("a.*b") is None and max_width("(?<name>x)") is None  # regex-only syntax


def test_every_corpus_line_gives_the_same_matches() -> None:
    n = 0
    for path in sorted((ROOT / "tests/corpus/cases").glob("*.log")):
        for line in path.read_text(errors="replace").splitlines():
            msg = parse_line(line).message
            if msg:
                assert windowed(msg) == full(msg), msg[:200]
                assert engine(msg) == full(msg), msg[:200]
                n += 1
    assert n > 5000


def test_long_lines_with_literals_anywhere() -> None:
    needles = [
        "RuntimeError: NCCL error: unhandled system error",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "Call to ibv_reg_mr failed with error Cannot allocate memory",
        "tokenizer not found",
        "custom_all_reduce failed",
    ]
    filler = "model='x', tokenizer='y', parser=None, custom_ops=['none'], " * 60
    for needle in needles:
        for text in (needle + filler, filler + needle, filler[:1500] + needle + filler):
            assert windowed(text) == full(text) == engine(text)
            assert windowed(text), needle


class _NoEngine:
    def matching(self, text: str) -> None:
        return None


def test_stage_evidence_is_the_same_from_the_engine() -> None:
    exact = RuleBook()
    exact._evidence_engine = _NoEngine()  # type: ignore[assignment]
    n = 0
    for path in sorted((ROOT / "tests/corpus/cases").glob("*.log")):
        for line in path.read_text(errors="replace").splitlines():
            msg = parse_line(line).message
            if msg:
                assert RB.stage_evidence(msg, None) == exact.stage_evidence(msg, None), msg[:200]
                n += RB.stage_evidence(msg, None) is not None
    assert n > 100
