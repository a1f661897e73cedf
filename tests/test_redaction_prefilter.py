"""The redaction prefilter: on an ASCII line one Hyperscan scan of the literals says which
patterns to try and where their literals start - the same answer, in the same order, as the
Aho-Corasick automaton over the lower-cased line, which still serves every other line."""

from __future__ import annotations

import random

import pytest

from service.classify import multimatch
from service.classify.redaction import Redactor, load_redactor
from service.classify.rules import RULES_DIR

SHIPPED = load_redactor(RULES_DIR)
LINES = [
    "(APIServer pid=1) INFO Avg prompt throughput: 12.0 tokens/s, Avg generation throughput",
    "plain line with nothing in it",
    "vllm serve x --API-KEY abc123def --Hf-Token=opensesame77 --port 8000",
    "tokentoken keykey-key_key xoxoxox TOKEN: Secret=1 PASSWORD=hunter2",
    "GET /download?repo=a&KEY=abcdefgh12345&sig=zzzzzzzz HTTP/1.1 Bearer eyJabc.def.ghi",
    "café token=non-ascii-line-takes-the-automaton",
    "",
]


def automaton_only(redactor: Redactor, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redactor._scanner, "found", lambda text: None)


def _random_lines(n: int) -> list[str]:
    rng = random.Random(29)
    words = sorted({lit for p in SHIPPED.patterns for lit in p.literals})
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(0, 6)):
            w = rng.choice(words) if rng.random() < 0.6 else rng.choice(["a", "=", " ", ":"])
            parts.append("".join(c.upper() if rng.random() < 0.5 else c for c in w))
        out.append("".join(parts))
    return out


def test_the_scan_picks_what_the_automaton_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = LINES + _random_lines(3000)
    assert SHIPPED._scanner.found(LINES[2]) is not None  # the scan answers ASCII lines
    fast = [SHIPPED.wanted(t) for t in lines]
    redacted = [SHIPPED.redact(t, counted=False) for t in lines]
    automaton_only(SHIPPED, monkeypatch)
    assert [SHIPPED.wanted(t) for t in lines] == fast
    assert [list(SHIPPED.wanted(t)) for t in lines] == [list(w) for w in fast]  # same order
    assert [SHIPPED.redact(t, counted=False) for t in lines] == redacted


def test_a_non_ascii_line_takes_the_automaton() -> None:
    assert SHIPPED._scanner.found(LINES[5]) is None
    assert "non-ascii-line-takes-the-automaton" not in SHIPPED.redact(LINES[5], counted=False)


def test_without_hyperscan_the_automaton_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(multimatch, "hyperscan", None)
    redactor = Redactor(SHIPPED.patterns)
    assert redactor._scanner.found(LINES[2]) is None
    assert redactor.check_examples() == []
    assert [redactor.wanted(t) for t in LINES] == [SHIPPED.wanted(t) for t in LINES]


def test_a_serving_statistics_line_tries_no_pattern() -> None:
    line = (
        "(APIServer pid=1) INFO 07-21 05:00:10 [loggers.py:123] Engine 000: Avg prompt "
        "throughput: 1.5 tokens/s, Avg generation throughput: 98.0 tokens/s, Running: 3 reqs, "
        "Waiting: 0 reqs, GPU KV cache usage: 4.2%, Prefix cache hit rate: 51.0%"
    )
    assert SHIPPED._scanner.found(line) is not None
    assert SHIPPED.wanted(line) == {}
    assert SHIPPED.wanted(line.replace("tokens/s", "token=abc")) != {}


def _unfiltered(redactor: Redactor) -> Redactor:
    """The same patterns with no literals: every one tried on every line, everywhere."""
    return Redactor(p.model_copy(update={"literals": []}) for p in redactor.patterns)


def test_the_literals_hide_no_match_after_a_keyword() -> None:
    # every character after each keyword that a literal spells out with what follows it
    chars = [chr(c) for c in range(0x3001) if not 0xD800 <= c < 0xE000]
    shapes = ["--hf-token{}opensesame77", "hf_token{} opensesame77", "{{'hf_token'{}: 'os-77'}}"]
    lines = [s.format(c) for s in shapes for c in chars]
    bare = _unfiltered(SHIPPED)
    assert bare.wanted("tokens/s") != {}
    got = [SHIPPED.redact(t, counted=False) for t in lines]
    assert got == [bare.redact(t, counted=False) for t in lines]
    assert sum(t != g for t, g in zip(lines, got, strict=True)) >= 30  # some are masked
