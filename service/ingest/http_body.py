"""Decode one HTTP request body from a log collector into :class:`LogRecord` s.

Bodies understood (``Content-Type`` decides, sniffed when absent or generic):

* Fluent Bit ``http`` output, ``format msgpack`` (its default; ``application/msgpack``): the
  raw chunk, i.e. concatenated ``[time, record]`` / ``[[time, metadata], record]`` events
  (bare record maps are accepted too); event-format-v2 group markers (time -1/-2) are skipped.
* Fluent Bit ``format json`` (one JSON array of records, ``application/json``), ``json_lines``
  (NDJSON, ``application/x-ndjson``) and ``json_stream`` (concatenated objects, also sent as
  ``application/json``); each record carries its time under ``json_date_key`` (``date``).
* Fluentd ``out_http``: NDJSON (``json_array false``, the default) or a JSON array.
* ``text/plain``: one raw/CRI/Docker line per line.
* ``Content-Encoding: gzip`` (Fluent Bit ``compress gzip``), decompressed with a size bound.

Neither collector puts the tag in the body. Convention: the tag travels in the
:data:`TAG_HEADER` header — Fluent Bit ``header_tag X-Fluent-Tag``; Fluentd
``headers_from_placeholders {"X-Fluent-Tag":"${tag}"}`` with ``<buffer tag>`` — and the
route passes it as ``tag``. A bad JSON line / entry is counted and skipped, the rest kept.
Runtime chunks (``meta["partial"]``) are returned unjoined: run them through a
:class:`service.ingest.joiner.Joiner` kept across requests.
"""

from __future__ import annotations

import json
from typing import Any

from service import metrics
from service.ingest.compression import GZIP_MAGIC, gunzip
from service.ingest.envelope import (
    MAX_LINE,
    clean_text,
    decode_bytes,
    decode_record,
    decode_text,
    text_field,
)
from service.ingest.msgpack_events import split_event, unpack_all
from service.records import LogRecord

TAG_HEADER = "X-Fluent-Tag"
_SCAN_JSON = json.JSONDecoder().scan_once
_WHITESPACE = " \t\r\n"
MAX_DECOMPRESSED_BYTES = 256 << 20

_MSGPACK_TYPES = frozenset(
    ("application/msgpack", "application/x-msgpack", "application/vnd.msgpack")
)
_JSON_TYPES = frozenset(
    (
        "application/json",
        "application/x-ndjson",
        "application/ndjson",
        "application/jsonlines",
        "application/x-jsonlines",
        "application/json-lines",
        "application/jsonl",
        "application/x-json-stream",
        "application/json-seq",
        "text/json",
    )
)
_TEXT_TYPES = frozenset(("text/plain",))


def decode_http_body(
    body: bytes,
    content_type: str | None,
    content_encoding: str | None,
    tag: str | None = None,
    *,
    max_decompressed_bytes: int = MAX_DECOMPRESSED_BYTES,
    max_line: int = MAX_LINE,
    source: str = "http",
) -> tuple[list[LogRecord], int]:
    """``(records, rejected)``: ``rejected`` counts dropped units (entries, JSON lines, or the
    whole body when it cannot be decompressed). ``tag`` is the stream-key fallback."""
    encoding = (content_encoding or "").strip().lower()
    if encoding in ("gzip", "x-gzip") or (not encoding and body.startswith(GZIP_MAGIC)):
        try:
            body = gunzip(body, max_decompressed_bytes)
        except ValueError as exc:
            metrics.reject(source, "bad_gzip", str(exc))
            return [], 1
    elif encoding not in ("", "identity"):
        metrics.reject(source, "unsupported_encoding", encoding)
        return [], 1
    kind = _kind(content_type, body)
    stream = tag or source
    if kind == "msgpack":
        records, rejected = _msgpack(body, tag, stream, source, max_line)
    elif kind == "json":
        records, rejected = _json(decode_bytes(body, source), tag, stream, source, max_line)
    else:
        records = decode_text(decode_bytes(body, source), stream, source=source, max_line=max_line)
        if tag:
            for rec in records:
                rec.meta.setdefault("tag", tag)
        rejected = 0
    if records:
        metrics.LINES_IN.labels(source=source).inc(len(records))
    return records, rejected


def _kind(content_type: str | None, body: bytes) -> str:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media in _MSGPACK_TYPES:
        return "msgpack"
    if media in _JSON_TYPES or media.endswith("+json"):
        return "json"
    if media in _TEXT_TYPES:
        return "text"
    head = body.lstrip(b" \t\r\n")[:1]
    if head in (b"{", b"["):
        return "json"
    if head and (0x80 <= head[0] <= 0x9F or 0xDC <= head[0] <= 0xDF):
        return "msgpack"
    return "text"


def _msgpack(
    body: bytes, tag: str | None, stream: str, source: str, max_line: int
) -> tuple[list[LogRecord], int]:
    records: list[LogRecord] = []
    rejected = 0
    try:
        for obj in unpack_all(body):
            rejected += _event(obj, tag, stream, source, max_line, records)
    except Exception as exc:  # malformed or truncated stream: keep what came before
        metrics.reject(source, "bad_msgpack", str(exc))
        rejected += 1
    return records, rejected


def _json(
    text: str, tag: str | None, stream: str, source: str, max_line: int
) -> tuple[list[LogRecord], int]:
    """A JSON array, NDJSON or concatenated values; a bad value skips to the next line."""
    records: list[LogRecord] = []
    rejected = 0
    i = 0
    n = len(text)
    while True:
        while i < n and text[i] in _WHITESPACE:
            i += 1
        if i >= n:
            break
        try:
            obj, i = _SCAN_JSON(text, i)
        except (StopIteration, ValueError, RecursionError) as exc:
            metrics.reject(source, "bad_json", f"{exc!r}: {text[i : i + 200]}")
            rejected += 1
            nl = text.find("\n", i)
            if nl < 0:
                break
            i = nl + 1
            continue
        if type(obj) is list:
            for item in obj:
                rejected += _event(item, tag, stream, source, max_line, records)
        else:
            rejected += _event(obj, tag, stream, source, max_line, records)
    return records, rejected


def _event(
    obj: Any, tag: str | None, stream: str, source: str, max_line: int, out: list[LogRecord]
) -> int:
    """Append the records of one event; return 1 if it was rejected, else 0."""
    if type(obj) is str:  # a bare line
        text = obj if obj.isascii() else clean_text(obj, source)
        out.extend(decode_text(text, stream, source=source, max_line=max_line))
        return 0
    event = split_event(obj)
    if event is None:
        metrics.reject(source, "bad_record", repr(obj)[:200])
        return 1
    t, record = event
    if type(t) is int and t < 0:
        return 0  # Fluent Bit event-format-v2 group start/end marker
    if not isinstance(text_field(record), str | bytes):
        metrics.reject(source, "no_log_field", repr(record)[:200])
        return 1
    out.extend(
        decode_record(record, tag=tag, time=t, stream=stream, source=source, max_line=max_line)
    )
    return 0
