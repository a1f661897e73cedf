"""Decode one Kafka message value into :class:`LogRecord` s (the consumer lives elsewhere).

Values understood, detected from the first byte:

* Fluent Bit ``kafka`` output ``format json`` (default): the record with ``@timestamp``
  (double or ISO 8601 per ``timestamp_format``) first; Fluentd ``kafka2`` with ``<format>
  @type json``: the bare record. Records may be ``log``/``message`` + CRI or Docker fields
  + ``kubernetes``/``docker`` metadata, or a ``log`` that is still a CRI/Docker line.
* ``format msgpack``: the record map (or a ``[time, record]`` event).
* ``format raw`` or any plain producer: one or more text lines (raw, CRI or Docker JSON).

``position`` is ``kafka:<topic>:<partition>:<offset>`` (``#<i>`` appended for the 2nd, 3rd ...
record of a value holding several lines). The stream-key fallback is the message key (the
collector's ``message_key``/``message_key_field``, typically a container id) or
``kafka:<topic>:<partition>``. Runtime chunks (``meta["partial"]``) are returned unjoined:
run them through a :class:`service.ingest.joiner.Joiner` kept per partition assignment.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from service import metrics, ratelog
from service.ingest.envelope import MAX_LINE, Format, decode_record, decode_text
from service.ingest.fluent_record import has_line
from service.ingest.json_text import parse_json
from service.ingest.msgpack_events import split_event, unpack_all
from service.ingest.salvage import decode_bytes
from service.records import LogRecord, Position


def decode_kafka_value(
    value: bytes | None,
    key: bytes | None,
    topic: str,
    partition: int,
    offset: int,
    *,
    fmt: Format | str = Format.AUTO,
    max_line: int = MAX_LINE,
    source: str = "kafka",
) -> list[LogRecord]:
    """Records of one message; ``[]`` (counted) for tombstones and undecodable values."""
    position = Position("kafka", f"{topic}:{partition}", offset)
    if not value:
        ratelog.reject(source, "empty", str(position))
        return []
    stream = _key_text(key) or f"kafka:{topic}:{partition}"
    first = value[0]
    records: list[LogRecord] | None = None
    text: str | None = None
    if fmt == Format.AUTO or fmt == Format.FLUENT:
        if first == 0x7B or first == 0x5B:  # "{" or "["
            text = decode_bytes(value, source)
            records = _json(text, stream, position, source, max_line)
        elif 0x80 <= first <= 0x9F or 0xDC <= first <= 0xDF:
            records = _msgpack(value, stream, position, source, max_line)
        if records is None and fmt == Format.FLUENT:
            ratelog.reject(source, "bad_record", repr(value[:200]))
            return []
    if records is None:
        if text is None:
            text = decode_bytes(value, source)
        records = decode_text(
            text, stream, fmt=fmt, position=position, source=source, max_line=max_line
        )
    if records:
        _lines_in(source).inc(len(records))
    return records


@lru_cache(maxsize=64)
def _lines_in(source: str) -> Any:
    return metrics.LINES_IN.labels(source=source)  # labels() takes a lock: look it up once


def _key_text(key: bytes | None) -> str | None:
    if not key:
        return None
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if text.isprintable() else None


def _json(
    text: str, stream: str, position: Position, source: str, max_line: int
) -> list[LogRecord] | None:
    """Records of a JSON record (or array of records); ``None`` if it is not one."""
    try:
        obj = parse_json(text)
    except (ValueError, RecursionError):
        return None
    items = obj if type(obj) is list else [obj]
    return _records(items, stream, position, source, max_line)


def _msgpack(
    value: bytes, stream: str, position: Position, source: str, max_line: int
) -> list[LogRecord] | None:
    try:
        items = list(unpack_all(value))
    except Exception:
        return None
    return _records(items, stream, position, source, max_line)


def _records(
    items: list[Any], stream: str, position: Position, source: str, max_line: int
) -> list[LogRecord] | None:
    out: list[LogRecord] = []
    for item in items:
        event = split_event(item)
        if event is None or not has_line(event[1]):
            if len(items) == 1:
                return None  # a lone non-record value is taken as text
            ratelog.reject(source, "bad_record", repr(item)[:200])
            continue
        pos = position if not out else position.sub(len(out))
        out.extend(
            decode_record(
                event[1],
                time=event[0],
                stream=stream,
                position=pos,
                source=source,
                max_line=max_line,
            )
        )
    return out
