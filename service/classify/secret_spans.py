"""Where a line's secrets are and how they are replaced (:mod:`service.classify.redaction`):
the window of a long line worth redacting and its cut, the spans found so far, and the line
with its spans replaced."""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import regex

LINE_CAP = 8192  # characters of a line kept past the door (the parser's and the store's cap)
WINDOW = 1024  # characters past the cut read for a secret that straddles it


def window(text: str) -> str:
    """The part of a long line worth redacting: up to :data:`WINDOW` characters past the
    cut, less a run of token characters that goes on past it (never seen whole)."""
    w = text[: LINE_CAP + WINDOW]
    if len(text) > len(w) and _TOKEN_CHAR.match(text, len(w)):
        w = _TRAILING_TOKEN.sub("", w)
    return w


def cut(text: str) -> str:
    """A long line's redacted window, cut where the parser and the store cut and marked."""
    return text[: LINE_CAP - 1] + "…"


class Found:
    """Spans masked so far, merged and sorted: whether one covers a new find, in log time."""

    __slots__ = ("starts", "ends")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def covers(self, s: int, e: int) -> bool:
        k = bisect.bisect_right(self.starts, s) - 1
        return k >= 0 and e <= self.ends[k]

    def add(self, spans: list[tuple[int, int, int]]) -> None:
        merged: list[tuple[int, int]] = []
        for a, b in sorted([*zip(self.starts, self.ends, strict=True), *[x[:2] for x in spans]]):
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        self.starts = [a for a, _ in merged]
        self.ends = [b for _, b in merged]


def replace(text: str, spans: list[tuple[int, int, int]], replacements: Sequence[str]) -> str:
    """``text`` with each span replaced by its pattern's replacement; overlapping spans are
    merged (the first one's replacement)."""
    spans.sort(key=lambda x: (x[0], -x[1]))
    out: list[str] = []
    last = 0
    cur_s, cur_e, cur_i = spans[0]
    for s, e, i in spans[1:]:
        if s < cur_e:
            cur_e = max(cur_e, e)
            continue
        out += [text[last:cur_s], replacements[cur_i]]
        last = cur_e
        cur_s, cur_e, cur_i = s, e, i
    out += [text[last:cur_s], replacements[cur_i], text[cur_e:]]
    return "".join(out)


_TOKEN_CHAR = regex.compile(r"[\w%+/=.~-]")
_TRAILING_TOKEN = regex.compile(r"[\w%+/=.~-]{1,1024}$")
