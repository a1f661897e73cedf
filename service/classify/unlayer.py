"""The layers a secret hides under in a log line, undone for finding it: JSON string escapes
(``{\\"api_key\\": \\"...\\"}`` inside a string), percent-encoding (``token%3D...``) and
Unicode look-alikes (NFKC: a fullwidth ``＝``, a no-break space; zero-width and other format
characters dropped).

:func:`unlayer` returns the plain text and, for each of its characters, the span of the
original line it came from, so a secret found in the plain text is masked in the line as it
was (:mod:`service.classify.redaction`): normalisation is for finding only. Each layer is one
pass over the line (escapes are undone at most :data:`ROUNDS` times, for a value escaped
twice), so the cost stays linear; a line with no backslash, no ``%`` and only ASCII is
returned as it is, with no map.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

ROUNDS = 3  # an escaped value escaped again (a JSON log line quoting a JSON body) and once more
_JSON_ESCAPE = re.compile(r'\\(?:u([0-9A-Fa-f]{4})|(["\\/\'])|([nrtbf]))')
_PERCENT = re.compile(r"%([2-7][0-9A-Fa-f])")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_SPACES = {"n": " ", "r": " ", "t": " ", "b": " ", "f": " "}  # kept on one line


@dataclass(slots=True)
class Plain:
    """The text with its layers undone; ``lo[i]``/``hi[i]``: the span of the original line
    that plain character ``i`` came from (None: the text is the line itself)."""

    text: str
    lo: list[int] | None = None
    hi: list[int] | None = None

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The original line's span behind plain ``[start, end)`` (``end > start``)."""
        if self.lo is None or self.hi is None:
            return start, end
        return self.lo[start], self.hi[end - 1]


Decode = Callable[[re.Match[str]], str | None]


def _layer(p: Plain, rx: re.Pattern[str], decode: Decode) -> bool:
    """Replace each match of ``rx`` in ``p`` by what ``decode`` makes of it (None: keep it),
    carrying the map; whether anything changed."""
    text = p.text
    parts: list[str] = []
    lo: list[int] = []
    hi: list[int] = []
    old_lo = p.lo if p.lo is not None else range(len(text))
    old_hi = p.hi if p.hi is not None else range(1, len(text) + 1)
    last = 0
    changed = False
    for m in rx.finditer(text):
        out = decode(m)
        if out is None:
            continue
        s, e = m.span()
        parts.append(text[last:s])
        lo.extend(old_lo[last:s])
        hi.extend(old_hi[last:s])
        start, end = old_lo[s], old_hi[e - 1]
        parts.append(out)
        lo.extend([start] * len(out))
        hi.extend([end] * len(out))
        last = e
        changed = True
    if not changed:
        return False
    parts.append(text[last:])
    lo.extend(old_lo[last:])
    hi.extend(old_hi[last:])
    p.text, p.lo, p.hi = "".join(parts), lo, hi
    return True


def _json(m: re.Match[str]) -> str | None:
    hexa, char, space = m.groups()
    if hexa is not None:
        return chr(int(hexa, 16))
    return char if char is not None else _SPACES[space]


def _percent(m: re.Match[str]) -> str | None:
    c = chr(int(m.group(1), 16))
    return c if c.isprintable() else None


def _unicode(m: re.Match[str]) -> str | None:
    c = m.group(0)
    if unicodedata.category(c) == "Cf":  # zero-width space and joiners, BOM, soft hyphen
        return ""
    n = unicodedata.normalize("NFKC", c)
    return None if n == c else n


def unlayer(text: str) -> Plain:
    """``text`` with its escapes, percent-encoding and look-alikes undone (see above)."""
    p = Plain(text)
    if text.isascii() and "\\" not in text and "%" not in text:
        return p
    for _ in range(ROUNDS):
        changed = False
        if "\\" in p.text:
            changed |= _layer(p, _JSON_ESCAPE, _json)
        if "%" in p.text:
            changed |= _layer(p, _PERCENT, _percent)
        if not p.text.isascii():
            changed |= _layer(p, _NON_ASCII, _unicode)
        if not changed:
            break
    return p
