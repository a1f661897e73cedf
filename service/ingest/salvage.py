"""Text that arrives damaged, repaired and counted: bytes that are not UTF-8, lone surrogates
(escaped ``\\udcxx`` in JSON, undecodable msgpack str bytes), lines over the length limit.

Each repair replaces what it cannot keep (U+FFFD, a cut) and counts one reject in
:mod:`service.ratelog` (``invalid_utf8``, ``oversize``) under the caller's ``source``; text
that needs no repair is returned unchanged. Nothing here raises on bad input.
"""

from __future__ import annotations

import re

from service import ratelog

_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str, source: str) -> str:
    """Replace lone surrogates with U+FFFD and count ``invalid_utf8``; valid text is
    returned unchanged."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        ratelog.reject(source, "invalid_utf8", text)
        return _SURROGATE.sub("\ufffd", text)


def decode_bytes(data: bytes | bytearray, source: str) -> str:
    """UTF-8 text of ``data``; invalid bytes become U+FFFD and count one ``invalid_utf8``."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        ratelog.reject(source, "invalid_utf8", repr(data[:200]))
        return data.decode("utf-8", "replace")


def truncate(text: str, max_line: int, source: str) -> str:
    """The first ``max_line`` characters of an over-long line, counted as ``oversize``."""
    ratelog.reject(source, "oversize", f"{len(text)} chars")
    return text[:max_line]
