"""Whole JSON documents in a file or on stdin (``kubectl get events -o json``,
``kubectl get pod -o json``, a pretty-printed array of records).

The file reader is line based; a document printed over many lines (its first line is a lone
``{`` or ``[``) is read whole instead, up to :data:`MAX_DOCUMENT` bytes, and each object in it
(the document, each element of an array) is decoded as one record by
:func:`service.ingest.envelope.decode_record`: a Kubernetes List, Event or Pod gives its
evidence lines, a Fluent Bit / vLLM JSON record its log lines.
"""

from __future__ import annotations

import json
from typing import BinaryIO

from service import ratelog
from service.ingest.envelope import MAX_LINE, decode_record
from service.records import LogRecord, Meta, Position

MAX_DOCUMENT = 64 << 20  # bytes


def looks_like_document(head: bytes) -> bool:
    """Whether a file starting with ``head`` holds a multi-line JSON document: its first
    non-blank line is a lone ``{`` or ``[`` (or ``[{`` / ``[ {``)."""
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    first = text.split(b"\n", 1)[0].strip()
    return first in (b"{", b"[", b"[{", b"[ {")


def read_document(
    fh: BinaryIO,
    stream: str,
    meta: Meta | None,
    position: Position,
    source: str = "file",
    max_line: int = MAX_LINE,
) -> list[LogRecord] | None:
    """The records of the JSON document ``fh`` holds, or None (nothing read) when its head
    is not one (``fh`` must have ``peek``, as the file reader's handles do)."""
    head = fh.peek(4096)[:4096]  # type: ignore[attr-defined]
    if not looks_like_document(head):
        return None
    data = fh.read(MAX_DOCUMENT + 1)
    if len(data) > MAX_DOCUMENT:
        ratelog.reject(source, "oversize", f"JSON document larger than {MAX_DOCUMENT} bytes")
        return []
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError) as exc:
        ratelog.reject(source, "bad_json", f"{exc}")
        return []
    items = obj if type(obj) is list else [obj]
    out: list[LogRecord] = []
    for i, item in enumerate(items):
        if type(item) is not dict:
            ratelog.reject(source, "bad_record", repr(item)[:200])
            continue
        out.extend(
            decode_record(
                item,
                stream=stream,
                position=position.sub(i),
                meta=meta,
                source=source,
                max_line=max_line,
            )
        )
    return out
