"""One log collector's HTTP body, already inflated, to :class:`LogRecord` s.

Kinds (the door picks one from ``Content-Type``, or leaves it to :func:`sniff`):

* ``msgpack``: Fluent Bit's raw chunk, concatenated ``[time, record]`` /
  ``[[time, metadata], record]`` events (bare record maps too); event-format-v2 group
  markers (time -1/-2) are skipped.
* ``json``: one array of records, NDJSON or concatenated values (Fluent Bit ``json``,
  ``json_lines``, ``json_stream``; Fluentd ``out_http``); a bad value is counted and
  skipped to the next line, the rest kept.
* ``text``: one raw/CRI/Docker line per line.

A record's line that is binary junk (:mod:`service.ingest.junk`) is dropped and counted.

The stream key: ``namespace/pod/container`` from a record's Kubernetes metadata, else its
container id, else the Fluent tag (a kubelet-path tag names namespace, pod and container);
without a tag, what the record names itself (:func:`body_identity`), else the caller's
``default`` (the door: the client's address). A body refused whole raises :class:`~service.ingest.bounds.Refused`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from service.ingest.bounds import RecordCap, Refused, check_containers, refuse
from service.ingest.envelope import decode_record, decode_text
from service.ingest.fluent_record import has_line, record_meta, stream_key
from service.ingest.junk import junk_text
from service.ingest.msgpack_events import TooComplex, split_event, unpack_all
from service.ingest.salvage import clean_text, decode_bytes
from service.ratelog import brief, reject
from service.records import LogRecord, fill_meta

_SCAN_JSON = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # set by __init__
_WHITESPACE = " \t\r\n"
_SKIP_WS = re.compile(r"[ \t\r\n]*").match  # one character class: linear time


def sniff(body: bytes | bytearray) -> str | None:
    """``json`` or ``msgpack`` by the first byte that is not blank (a blank body is
    ``json``: nothing to decode); None for anything else."""
    for byte in body[:4096]:
        if byte in b" \t\r\n":
            continue
        if byte in b"{[":
            return "json"
        if 0x80 <= byte <= 0x9F or 0xDC <= byte <= 0xDF:
            return "msgpack"
        return None
    return None if body.strip(b" \t\r\n") else "json"


IDENTITY_FIELDS = ("container_name", "container_id", "hostname", "host")


def body_identity(record: Mapping[str, Any]) -> str | None:
    """The sender an untagged record names itself, for its stream key when it carries no
    Kubernetes metadata: Docker's fluentd driver's ``container_name`` / ``container_id``, a
    syslog-style ``hostname`` / ``host``."""
    for key in IDENTITY_FIELDS:
        value = record.get(key)
        if type(value) is str and value.strip("/ "):
            return value.strip("/ ")
    return None


def text_records(
    text: str,
    tag: str | None,
    source: str,
    max_records: int,
    max_line: int,
    default: str | None = None,
) -> list[LogRecord]:
    """The records of a ``text/plain`` body, each with what the tag names (``default``: the
    stream key without a tag, else ``source``)."""
    meta = record_meta({}, tag, None)  # a kubelet-path tag names namespace, pod, container
    RecordCap(max_records, source).lines(text)
    key = stream_key(meta, default or source)
    records = decode_text(text, key, source=source, max_line=max_line)
    for rec in records:
        fill_meta(rec.meta, meta)
    return records


def structured_records(
    body: bytes | bytearray,
    kind: str,
    tag: str | None,
    source: str,
    max_records: int,
    max_line: int,
    default: str | None = None,
) -> tuple[list[LogRecord], int]:
    """``(records, rejected units)`` of a ``msgpack`` or ``json`` body (``default``: the
    stream key of a record that names no sender, without a tag; else ``source``)."""
    stream = tag or default or source
    cap = RecordCap(max_records, source)
    if kind == "msgpack":
        return _msgpack(body, tag, stream, source, max_line, cap)
    check_containers(body, source)
    text = decode_bytes(body, source)
    del body
    return _json(text, tag, stream, source, max_line, cap)


def _msgpack(
    body: bytes | bytearray,
    tag: str | None,
    stream: str,
    source: str,
    max_line: int,
    cap: RecordCap,
) -> tuple[list[LogRecord], int]:
    records: list[LogRecord] = []
    rejected = 0
    try:
        for obj in unpack_all(body):
            cap.unit()
            rejected += _event(obj, tag, stream, source, max_line, records)
            cap.check(len(records))
    except Refused:
        raise
    except TooComplex as exc:
        raise refuse(source, "too_complex", f"msgpack body: {exc}") from None
    except Exception as exc:  # malformed or truncated stream: keep what came before
        reject(source, "bad_msgpack", str(exc))
        rejected += 1
    return records, rejected


def _skip_ws(text: str, i: int, n: int) -> int:
    if i < n and text[i] in _WHITESPACE:
        return _SKIP_WS(text, i).end()  # type: ignore[union-attr]  # [...]* always matches
    return i


def _json(
    text: str, tag: str | None, stream: str, source: str, max_line: int, cap: RecordCap
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
    obj: object, tag: str | None, stream: str, source: str, max_line: int, out: list[LogRecord]
) -> int:
    """Append the records of one event; return how many of its units were rejected (the
    event, or its junk lines: :mod:`service.ingest.junk`)."""
    if type(obj) is str:  # a bare line
        text = obj if obj.isascii() else clean_text(obj, source)
        return _keep(decode_text(text, stream, source=source, max_line=max_line), source, out)
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
    if tag is None:
        stream = body_identity(record) or stream
    records = decode_record(
        record, tag=tag, time=t, stream=stream, source=source, max_line=max_line
    )
    return _keep(records, source, out)


def _keep(records: list[LogRecord], source: str, out: list[LogRecord]) -> int:
    """Append ``records`` but their binary junk (the rule of a text line, counted); return
    how many were dropped."""
    dropped = 0
    for rec in records:
        if junk_text(rec.text):
            reject(source, "binary", rec.text[:80])
            dropped += 1
        else:
            out.append(rec)
    return dropped
