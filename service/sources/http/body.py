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
* ``Content-Encoding: gzip`` (Fluent Bit ``compress gzip``), inflated piece by piece under a
  per-body limit and the process-wide budget of :mod:`service.ingest.budget`.

Without a ``Content-Type`` the body is sniffed: JSON (``{``/``[``) and msgpack (a map or an
array header) are decoded, anything else, or a sniffed body with nothing decodable in it, is
refused (415), as is any other media type (``application/octet-stream``, ``image/png``,
forms ...): junk is never taken for text lines.
A body may expand to at most :data:`~service.sources.limits.MAX_RECORDS` records, and a tag
is at most :data:`~service.sources.limits.MAX_TAG` characters. :func:`decode_body` raises
:class:`BodyRefused` (with the HTTP status that fits) for a body refused as a whole;
:func:`decode_http_body` turns that into ``([], 1)``. Every refusal is counted in
``sentinel_rejects_total`` and logged at a bounded rate (:mod:`service.ratelog`).

Neither collector puts the tag in the body. Convention: the tag travels in the
:data:`TAG_HEADER` header — Fluent Bit ``header_tag X-Fluent-Tag``; Fluentd
``headers_from_placeholders {"X-Fluent-Tag":"${tag}"}`` with ``<buffer tag>`` — and the
route passes it as ``tag``. A bad JSON line / entry is counted and skipped, the rest kept.
Runtime chunks (``meta["partial"]``) are returned unjoined: run them through a
:class:`service.ingest.joiner.Joiner` kept across requests.
"""

from __future__ import annotations

import json
import re
from typing import Any

from service import metrics
from service.ingest.budget import BudgetExhausted, Lease, MiB, gunzip_bounded
from service.ingest.compression import GZIP_MAGIC, DecompressedTooLarge
from service.ingest.envelope import MAX_LINE, decode_record, decode_text
from service.ingest.fluent_record import has_line, record_meta, stream_key
from service.ingest.msgpack_events import TooComplex, split_event, unpack_all
from service.ingest.salvage import clean_text, decode_bytes
from service.ratelog import brief, clip, reject
from service.records import LogRecord
from service.sources.limits import MAX_CONTAINERS, MAX_RECORDS, MAX_TAG

TAG_HEADER = "X-Fluent-Tag"
MAX_DECOMPRESSED_BYTES = 64 * MiB  # one body, once inflated
_SCAN_JSON = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # set by __init__
_WHITESPACE = " \t\r\n"
_SKIP_WS = re.compile(r"[ \t\r\n]*").match  # one character class: linear time

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
ACCEPTED_TYPES = "application/msgpack, application/json, application/x-ndjson, text/plain"


class BodyRefused(Exception):
    """The body is refused as a whole (already counted): ``status`` is the HTTP answer
    (400 bad tag or corrupt gzip, 413 too large or too many records, 415 media type or
    encoding, 503 global memory budget spent), ``reason`` the reject reason."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


def _refuse(source: str, status: int, reason: str, message: str, detail: Any = "") -> BodyRefused:
    reject(source, reason, detail if detail != "" else message)
    return BodyRefused(status, reason, message)


def check_tag(tag: str | None, source: str = "http") -> None:
    """Refuse (400, counted) a tag longer than :data:`MAX_TAG` characters."""
    if tag is not None and len(tag) > MAX_TAG:
        raise _refuse(
            source, 400, "tag_too_long", f"tag of {len(tag)} characters (at most {MAX_TAG})", tag
        )


def media_kind(content_type: str | None) -> str | None:
    """``msgpack``, ``json`` or ``text`` for a media type we decode, ``""`` when there is
    none (sniff the body), ``None`` for any other (refused)."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if not media:
        return ""
    if media in _MSGPACK_TYPES:
        return "msgpack"
    if media in _JSON_TYPES or media.endswith("+json"):
        return "json"
    if media in _TEXT_TYPES:
        return "text"
    return None


def check_media(content_type: str | None, source: str = "http") -> str:
    """:func:`media_kind` of ``content_type``; refuse (415, counted) a foreign one."""
    kind = media_kind(content_type)
    if kind is None:
        raise _refuse(
            source,
            415,
            "unsupported_media_type",
            f"unsupported Content-Type {clip(content_type, 80)} (send one of {ACCEPTED_TYPES})",
            f"Content-Type {content_type}",
        )
    return kind


def decode_body(
    body: bytes | bytearray,
    content_type: str | None,
    content_encoding: str | None,
    tag: str | None = None,
    *,
    lease: Lease | None = None,
    max_decompressed_bytes: int = MAX_DECOMPRESSED_BYTES,
    max_records: int = MAX_RECORDS,
    max_line: int = MAX_LINE,
    source: str = "http",
) -> tuple[list[LogRecord], int]:
    """``(records, rejected)`` of one body; raises :class:`BodyRefused` when the whole body
    is refused. ``rejected`` counts dropped units (entries, JSON lines). ``lease`` (else one
    of ``max_decompressed_bytes`` over the global budget, released on return) is charged
    with the inflated bytes as they are produced. ``tag`` is the stream-key fallback."""
    check_tag(tag, source)
    kind = check_media(content_type, source)
    own = lease is None
    if lease is None:
        lease = Lease(max_decompressed_bytes)
    try:
        records, rejected = _decode(
            body, kind, content_encoding, tag, lease, max_records, max_line, source
        )
    except BodyRefused as exc:
        refused = exc
    else:
        if records:
            metrics.LINES_IN.labels(source=source).inc(len(records))
        return records, rejected
    finally:
        if own:
            lease.release()
    # Out of the except block: drop the traceback and the exception it replaced, whose
    # frames hold the inflated bytes and the records decoded so far, so they are freed now
    # and not whenever the exception is.
    refused.__traceback__ = None
    refused.__context__ = None
    raise refused


def _decode(
    body: bytes | bytearray,
    kind: str,
    content_encoding: str | None,
    tag: str | None,
    lease: Lease,
    max_records: int,
    max_line: int,
    source: str,
) -> tuple[list[LogRecord], int]:
    encoding = (content_encoding or "").strip().lower()
    if encoding in ("gzip", "x-gzip") or (encoding in ("", "identity") and body[:2] == GZIP_MAGIC):
        body = _inflate(body, lease, source)
    elif encoding not in ("", "identity"):
        raise _refuse(
            source,
            415,
            "unsupported_encoding",
            f"unsupported Content-Encoding {clip(encoding, 40)}",
        )
    if not kind:
        kind = _sniff(body) or ""
        if not kind:
            raise _refuse(
                source,
                415,
                "unsupported_media_type",
                f"no Content-Type and not JSON or msgpack (send one of {ACCEPTED_TYPES})",
                body[:80],
            )
        records, rejected = _structured(body, kind, tag, source, max_records, max_line)
        if rejected and not records:  # it only looked like JSON or msgpack: junk
            raise _refuse(
                source,
                415,
                "unsupported_media_type",
                f"no Content-Type and nothing decodable as {kind} (send one of {ACCEPTED_TYPES})",
                body[:80],
            )
        return records, rejected
    if kind != "text":
        return _structured(body, kind, tag, source, max_records, max_line)
    meta = record_meta({}, tag, None)  # a kubelet-path tag names namespace, pod, container
    cap = _Cap(max_records, source)
    text = decode_bytes(body, source)
    del body
    cap.lines(text)
    records = decode_text(text, stream_key(meta, source), source=source, max_line=max_line)
    for rec in records:
        for key, value in meta.items():
            rec.meta.setdefault(key, value)
    return records, 0


def decode_http_body(
    body: bytes | bytearray,
    content_type: str | None,
    content_encoding: str | None,
    tag: str | None = None,
    *,
    max_decompressed_bytes: int = MAX_DECOMPRESSED_BYTES,
    max_records: int = MAX_RECORDS,
    max_line: int = MAX_LINE,
    source: str = "http",
) -> tuple[list[LogRecord], int]:
    """As :func:`decode_body`, but a body refused as a whole is ``([], 1)``."""
    try:
        return decode_body(
            body,
            content_type,
            content_encoding,
            tag,
            max_decompressed_bytes=max_decompressed_bytes,
            max_records=max_records,
            max_line=max_line,
            source=source,
        )
    except BodyRefused:
        return [], 1


def _structured(
    body: bytes | bytearray,
    kind: str,
    tag: str | None,
    source: str,
    max_records: int,
    max_line: int,
) -> tuple[list[LogRecord], int]:
    stream = tag or source
    cap = _Cap(max_records, source)
    if kind == "msgpack":
        return _msgpack(body, tag, stream, source, max_line, cap)
    check_containers(body, source)
    text = decode_bytes(body, source)
    del body
    return _json(text, tag, stream, source, max_line, cap)


def check_containers(body: bytes | bytearray, source: str) -> None:
    """Refuse (413, counted) a JSON body that may hold more than :data:`MAX_CONTAINERS`
    objects and arrays, before any is built."""
    count = body.count(b"{") + body.count(b"[")
    if count > MAX_CONTAINERS:
        raise _refuse(
            source,
            413,
            "too_complex",
            f"JSON body of {count} objects and arrays (at most {MAX_CONTAINERS})",
        )


def _inflate(body: bytes | bytearray, lease: Lease, source: str) -> bytearray:
    try:
        return gunzip_bounded(body, lease)
    except DecompressedTooLarge:
        raise _refuse(
            source, 413, "decompressed_too_large", f"gzip body expands beyond {lease.limit} bytes"
        ) from None
    except BudgetExhausted as exc:
        raise _refuse(source, 503, "memory_budget", str(exc)) from None
    except ValueError as exc:
        raise _refuse(source, 400, "bad_gzip", f"bad gzip body: {exc}") from None


class _Cap:
    """At most ``limit`` records per body, and as many units (JSON values, msgpack objects,
    lines) read, accepted or not, so a body of junk stops as early as one of records
    (413 beyond, counted once)."""

    def __init__(self, limit: int, source: str) -> None:
        self.limit = limit
        self.source = source
        self.units = 0

    def check(self, count: int) -> None:
        if count > self.limit:
            raise _refuse(
                self.source,
                413,
                "too_many_records",
                f"body expands to more than {self.limit} records",
            )

    def unit(self) -> None:
        """One more unit read; refuse the body past ``limit`` of them."""
        self.units += 1
        self.check(self.units)

    def lines(self, text: str) -> None:
        """Refuse a text body with too many lines before splitting it."""
        self.check(text.count("\n") + (0 if text.endswith("\n") else 1))


def _sniff(body: bytes | bytearray) -> str | None:
    for byte in body[:4096]:
        if byte in b" \t\r\n":
            continue
        if byte in b"{[":
            return "json"
        if 0x80 <= byte <= 0x9F or 0xDC <= byte <= 0xDF:
            return "msgpack"
        return None
    return None if body.strip(b" \t\r\n") else "json"  # blank: nothing to decode


def _msgpack(
    body: bytes | bytearray,
    tag: str | None,
    stream: str,
    source: str,
    max_line: int,
    cap: _Cap,
) -> tuple[list[LogRecord], int]:
    records: list[LogRecord] = []
    rejected = 0
    try:
        for obj in unpack_all(body):
            cap.unit()
            rejected += _event(obj, tag, stream, source, max_line, records)
            cap.check(len(records))
    except BodyRefused:
        raise
    except TooComplex as exc:
        raise _refuse(source, 413, "too_complex", f"msgpack body: {exc}") from None
    except Exception as exc:  # malformed or truncated stream: keep what came before
        reject(source, "bad_msgpack", str(exc))
        rejected += 1
    return records, rejected


def _skip_ws(text: str, i: int, n: int) -> int:
    if i < n and text[i] in _WHITESPACE:
        return _SKIP_WS(text, i).end()  # type: ignore[union-attr]  # [...]* always matches
    return i


def _json(
    text: str, tag: str | None, stream: str, source: str, max_line: int, cap: _Cap
) -> tuple[list[LogRecord], int]:
    """A JSON array, NDJSON or concatenated values; a bad value skips to the next line.
    A top-level array is read one element at a time, so the record cap stops it early."""
    records: list[LogRecord] = []
    rejected = 0
    i = 0
    n = len(text)
    while True:
        i = _skip_ws(text, i, n)
        if i >= n:
            break
        at = i
        try:
            if text[i] == "[":
                i = _skip_ws(text, i + 1, n)
                if i < n and text[i] == "]":
                    i += 1
                    continue
                while True:
                    at = i
                    cap.unit()
                    obj, i = _SCAN_JSON(text, i)
                    rejected += _event(obj, tag, stream, source, max_line, records)
                    cap.check(len(records))
                    i = _skip_ws(text, i, n)
                    if i < n and text[i] == ",":
                        i = _skip_ws(text, i + 1, n)
                        continue
                    if i < n and text[i] == "]":
                        i += 1
                        break
                    at = i
                    raise ValueError("expected ',' or ']' in a JSON array")
            else:
                cap.unit()
                obj, i = _SCAN_JSON(text, i)
                rejected += _event(obj, tag, stream, source, max_line, records)
                cap.check(len(records))
        except (StopIteration, ValueError, RecursionError) as exc:
            reject(source, "bad_json", f"{exc!r}: {text[at : at + 80]}")
            rejected += 1
            nl = text.find("\n", at)
            if nl < 0:
                break
            i = nl + 1
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
        reject(source, "bad_record", brief(obj))
        return 1
    t, record = event
    if type(t) is int and t < 0:
        return 0  # Fluent Bit event-format-v2 group start/end marker
    if not has_line(record):
        reject(source, "no_log_field", brief(record))
        return 1
    out.extend(
        decode_record(record, tag=tag, time=t, stream=stream, source=source, max_line=max_line)
    )
    return 0
