"""A cheap walk of an OTLP ``ExportLogsServiceRequest`` in protobuf wire format: how many
log records and nested messages parsing it would build, without building any.

An empty ``LogRecord`` is 2 bytes on the wire and about 140 bytes parsed, so a 30 KB gzip
body can stand for millions of them; :func:`scan_export` lets the OTLP door refuse such a
body (and charge what it will parse) before the protobuf parser runs. The walk stops as soon
as a limit is passed, so its cost is bounded by the limits, not by the body. Malformed wire
data is left to the parser to refuse.
"""

from __future__ import annotations

from dataclasses import dataclass

# (message, field number) -> the message type a length-delimited field holds
_R, _RL, _RES, _SL, _SCOPE, _LR, _KV, _AV, _ARR, _KVL = range(10)
_CHILD: dict[tuple[int, int], int] = {
    (_R, 1): _RL,  # ExportLogsServiceRequest.resource_logs
    (_RL, 1): _RES,  # ResourceLogs.resource
    (_RL, 2): _SL,  # ResourceLogs.scope_logs
    (_RES, 1): _KV,  # Resource.attributes
    (_SL, 1): _SCOPE,  # ScopeLogs.scope
    (_SL, 2): _LR,  # ScopeLogs.log_records
    (_SCOPE, 3): _KV,  # InstrumentationScope.attributes
    (_LR, 5): _AV,  # LogRecord.body
    (_LR, 6): _KV,  # LogRecord.attributes
    (_KV, 2): _AV,  # KeyValue.value
    (_AV, 5): _ARR,  # AnyValue.array_value
    (_AV, 6): _KVL,  # AnyValue.kvlist_value
    (_ARR, 1): _AV,  # ArrayValue.values
    (_KVL, 1): _KV,  # KeyValueList.values
}
MAX_NESTING = 100  # the protobuf parser's own recursion limit


class ScanLimit(Exception):
    """The body passes a limit: ``what`` is ``records``, ``messages``, ``fields`` or
    ``nesting``."""

    def __init__(self, what: str, limit: int) -> None:
        super().__init__(f"more than {limit} {what}")
        self.what = what
        self.limit = limit


@dataclass(frozen=True)
class Scan:
    """What one export request holds: log records, messages of any kind, fields walked."""

    records: int
    messages: int
    fields: int


def _varint(buf: memoryview, i: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while i < end:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7
        if shift > 63:
            break
    raise ValueError("bad varint")


def scan_export(
    body: bytes | bytearray, *, max_records: int, max_messages: int, max_fields: int
) -> Scan | None:
    """Count what ``body`` would parse into; raise :class:`ScanLimit` when it passes a limit,
    return None when it is not well-formed wire data (the parser then says why)."""
    buf = memoryview(body)
    records = messages = fields = 0
    stack: list[tuple[int, int]] = []  # (message type, end) of the enclosing messages
    kind, i, end = _R, 0, len(buf)
    try:
        while True:
            if i >= end:
                if i > end:
                    return None
                if not stack:
                    return Scan(records, messages, fields)
                kind, end = stack.pop()
                continue
            key, i = _varint(buf, i, end)
            fields += 1
            if fields > max_fields:
                raise ScanLimit("fields", max_fields)
            wire = key & 7
            if wire == 0:
                _, i = _varint(buf, i, end)
            elif wire == 1:
                i += 8
            elif wire == 5:
                i += 4
            elif wire == 2:
                size, i = _varint(buf, i, end)
                child = _CHILD.get((kind, key >> 3))
                if child is None:
                    i += size
                    continue
                if i + size > end:
                    return None
                messages += 1
                if messages > max_messages:
                    raise ScanLimit("messages", max_messages)
                if child == _LR:
                    records += 1
                    if records > max_records:
                        raise ScanLimit("records", max_records)
                if len(stack) >= MAX_NESTING:
                    raise ScanLimit("nesting", MAX_NESTING)
                stack.append((kind, end))
                kind, end = child, i + size
            else:
                return None  # groups (3, 4) are not in the OTLP schema; 6, 7 are invalid
    except ValueError:
        return None
