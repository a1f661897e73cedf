"""The records one decoded text becomes: one :class:`LogRecord` per physical line.

Every envelope ends here once it has found the text, its time, its stream key and its meta.
A text holding several lines gives several records whose positions after the first get
``#1``, ``#2`` ... suffixes (so each stays unique); only the last may be unfinished, marked
``meta[PARTIAL] = True`` for :class:`service.ingest.joiner.Joiner`; a complete line that is a
vLLM JSON log record becomes the lines vLLM's text format prints.
"""

from __future__ import annotations

from typing import Final

from service.ingest.json_text import expand_vllm_json
from service.ingest.salvage import truncate
from service.records import LogRecord, Meta, Position

PARTIAL: Final = "partial"  # meta key set on chunks of a longer line (consumed by the joiner)


def line_records(
    text: str,
    key: str,
    t: float | None,
    meta: Meta,
    position: Position | None,
    partial: bool,
    source: str,
    max_line: int,
) -> list[LogRecord]:
    """One record per physical line of ``text`` (``meta`` is the last one's; the others get
    copies); lines over ``max_line`` characters are cut and counted."""
    if not partial and text[:1] == "{" and (lines := expand_vllm_json(text)) is not None:
        text = lines
    if "\n" not in text:
        if partial:
            meta[PARTIAL] = True
        if len(text) > max_line:
            text = truncate(text, max_line, source)
        return [LogRecord(key, text, t, meta, position)]
    pieces = text.split("\n")
    out = []
    last = len(pieces) - 1
    for i, piece in enumerate(pieces):
        if len(piece) > max_line:
            piece = truncate(piece, max_line, source)
        pos = position if i == 0 or position is None else position.sub(i)
        if i == last:
            if partial:
                if not piece:
                    break
                meta[PARTIAL] = True
            out.append(LogRecord(key, piece, t, meta, pos))
        else:
            out.append(LogRecord(key, piece, t, meta.copy(), pos))
    return out
