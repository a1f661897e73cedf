"""The linear-time engine: the same answers from Hyperscan and from its RE2 fallback, a
cached database that is checked before use, and a clear error for a pattern no engine
takes."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from service.classify import multimatch
from service.classify.multimatch import LiteralScanner, MultiMatcher, PatternError
from service.classify.rules import load_signatures

PATTERNS = [
    (r"CUDA out of memory", False),
    (r"\bdtype=torch\.(\w+)", False),
    (r"NCCL WARN (?!Failed to open)(?:Call to \w+)", False),  # lookahead: prefiltered
    (r"Engine core proc \w+ died", True),
]
LINES = [
    "torch.OutOfMemoryError: cuda OUT of memory. Tried to allocate",
    "dtype=torch.bfloat16, max_seq_len=4096",
    "NCCL WARN Call to connect failed",
    "NCCL WARN Failed to open libibverbs",
    "engine core proc EngineCore_DP0 died",  # case-sensitive: no
    "Engine core proc EngineCore_DP0 died",
    "nothing here",
]


def answers(mm: MultiMatcher) -> list[list[int] | None]:
    return [mm.matching(line) for line in LINES]


def test_hyperscan_answers(tmp_path: Path) -> None:
    mm = MultiMatcher(PATTERNS, tmp_path)
    assert mm.engine == "hyperscan"
    assert mm.plan.confirm == {2} and mm.plan.unseen == set()
    got = answers(mm)
    assert got[2] == [2] and got[3] in ([], [2])  # 2: a candidate, the caller confirms it
    assert got[:2] + got[4:] == [[0], [1], [], [3], []]
    assert mm.matching("dtype=torch.bfloat16 ✓") is None  # not ASCII: the caller's exact path
    assert mm.matching("dtype=torch.x\x1c") is None


def test_without_hyperscan_re2_answers_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(multimatch, "hyperscan", None)
    with caplog.at_level(logging.WARNING, logger="service.classify.multimatch"):
        mm = MultiMatcher(PATTERNS, tmp_path)
    assert mm.engine == "re2" and "hyperscan cannot be imported" in caplog.text
    assert mm.plan.unseen == {2}  # RE2 refuses the lookahead: searched on every line
    assert answers(mm) == [[0], [1], [], [], [], [3], []]


def test_the_database_is_cached_and_checked(tmp_path: Path) -> None:
    MultiMatcher(PATTERNS, tmp_path)
    (cached,) = tmp_path.glob("rules-*.hsdb")
    again = MultiMatcher(PATTERNS, tmp_path)  # loaded, same answers
    assert answers(again) == answers(MultiMatcher(PATTERNS, tmp_path / "fresh"))
    data = bytearray(cached.read_bytes())
    data[len(data) // 2] ^= 0xFF
    cached.write_bytes(bytes(data))
    rebuilt = MultiMatcher(PATTERNS, tmp_path)  # corrupt: rebuilt, not loaded
    assert answers(rebuilt) == answers(again)
    assert MultiMatcher(PATTERNS, tmp_path).matching("CUDA out of memory") == [0]
    other = MultiMatcher(PATTERNS[:2], tmp_path)  # other rules: another key
    assert len(list(tmp_path.glob("rules-*.hsdb"))) == 2 and other.matching("x") == []


def test_a_pattern_no_engine_takes_is_named(tmp_path: Path) -> None:
    with pytest.raises(PatternError, match=r"'x\(\?R\)': Hyperscan cannot compile it"):
        MultiMatcher([("CUDA", False), (r"x(?R)", False)], tmp_path)


def test_every_rule_example_gives_the_same_answer_without_hyperscan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sigs = load_signatures()
    pats = [(s.pattern, s.case_sensitive) for s in sigs]
    hs = MultiMatcher(pats, tmp_path)
    monkeypatch.setattr(multimatch, "hyperscan", None)
    fallback = MultiMatcher(pats, tmp_path)
    for sig in sigs:
        for ex in [*sig.examples.match, *sig.examples.no_match]:
            got = hs.matching(ex)
            if got is None:
                continue
            assert [i for i in got if i not in hs.plan.confirm] == [
                i for i in fallback.matching(ex) or [] if i not in hs.plan.confirm
            ], ex


def test_the_block_literal_scan_finds_what_the_automaton_finds() -> None:
    words = ["Throughput", "error", 'file "', "[e]", "core dumped"]
    text = 'ok\nAvg prompt THROUGHPUT: 1\nFile "x.py"\n[E] core dumped\nTypeError: x\nnone\n'
    low = text.lower()
    expected = sorted(
        i + len(w) - 1
        for w in {w.lower() for w in words}
        for i in range(len(low))
        if low.startswith(w, i)
    )
    assert LiteralScanner(words).ends(text) == expected
    assert LiteralScanner(words).ends("café error") is None  # not ASCII: the caller's automaton


def test_without_hyperscan_the_block_literal_scan_defers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(multimatch, "hyperscan", None)
    assert LiteralScanner(["error"]).ends("an error") is None


def test_threads_scan_one_database_at_once(tmp_path: Path) -> None:
    mm = MultiMatcher(PATTERNS, tmp_path)
    want = answers(mm)
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda _: [answers(mm) for _ in range(200)], range(8)))
    assert all(a == want for batch in got for a in batch)
