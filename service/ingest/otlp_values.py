"""An OTLP ``ExportLogsServiceRequest`` in either encoding, read into one shape: per resource
its attributes and its log records (:class:`OtlpLog`: time, body, attributes), with every
``AnyValue`` rendered as a plain value (:data:`AnyValue`).

* Binary protobuf, parsed by the ``opentelemetry-proto`` classes (:func:`protobuf_resources`).
* OTLP/JSON (:func:`json_resources`): lowerCamelCase keys, snake_case accepted too, 64-bit
  integers as strings or numbers, ``AnyValue`` objects.

Nested values deeper than :data:`MAX_DEPTH` render as ``"..."``; bytes as base64. A body that
does not parse is refused whole (``bad_protobuf``, ``bad_json``).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from service.ingest.bounds import refuse
from service.ingest.json_text import parse_json
from service.ratelog import brief

MAX_DEPTH = 32  # nested AnyValue levels rendered (deeper: "...")

# an OTLP AnyValue as a plain value: text, a number, a list or a map of them
AnyValue = str | bool | int | float | list["AnyValue"] | dict[str, "AnyValue"] | None
Attributes = dict[str, AnyValue]


class OtlpLog(NamedTuple):
    """What is used of one log record, from either encoding."""

    time: float | None
    body: AnyValue  # None: the record has no body
    attributes: Attributes


Resources = Iterator[tuple[Attributes, Iterator[OtlpLog]]]


def protobuf_resources(body: bytes | bytearray, source: str) -> Resources:
    """The resources of a binary protobuf export request."""
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    try:
        req = ExportLogsServiceRequest.FromString(bytes(body))
    except (DecodeError, RecursionError, ValueError) as exc:
        raise refuse(
            source, "bad_protobuf", f"not an OTLP ExportLogsServiceRequest: {exc}", body[:80]
        ) from None

    def logs(rl: Any) -> Iterator[OtlpLog]:
        for sl in rl.scope_logs:
            for lr in sl.log_records:
                t = lr.time_unix_nano or lr.observed_time_unix_nano
                body_value = _pb_value(lr.body, 0) if lr.HasField("body") else None
                yield OtlpLog(t / 1e9 if t else None, body_value, _pb_attrs(lr.attributes))

    return ((_pb_attrs(rl.resource.attributes), logs(rl)) for rl in req.resource_logs)


def _pb_attrs(kvs: Any) -> Attributes:
    return {kv.key: _pb_value(kv.value, 1) for kv in kvs}


def _pb_value(v: Any, depth: int) -> AnyValue:
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which == "string_value":
        text: str = v.string_value
        return text
    if which == "kvlist_value":
        if depth >= MAX_DEPTH:
            return "..."
        return {kv.key: _pb_value(kv.value, depth + 1) for kv in v.kvlist_value.values}
    if which == "array_value":
        if depth >= MAX_DEPTH:
            return "..."
        return [_pb_value(x, depth + 1) for x in v.array_value.values]
    if which == "bytes_value":
        return base64.b64encode(v.bytes_value).decode()
    value: bool | int | float = getattr(v, which)
    return value


def json_resources(body: bytes | bytearray, source: str) -> Resources:
    """The resources of an OTLP/JSON export request; refused before the first one is
    yielded when the body is not an object with a ``resourceLogs`` array."""
    try:
        text = bytes(body).decode("utf-8")
        doc = parse_json(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise refuse(source, "bad_json", f"not OTLP/JSON: {exc}", body[:80]) from None
    if not isinstance(doc, dict):
        raise refuse(source, "bad_json", "OTLP/JSON: the body is not an object", brief(doc))
    resource_logs = _get(doc, "resourceLogs", "resource_logs")
    if not isinstance(resource_logs, list):
        raise refuse(source, "bad_json", "OTLP/JSON: no resourceLogs array", brief(doc))
    return _json_resources(resource_logs)


def _json_resources(resource_logs: list[Any]) -> Resources:
    for rl in resource_logs:
        if isinstance(rl, dict):
            res = rl.get("resource")
            attrs = _json_attrs(res.get("attributes")) if isinstance(res, dict) else {}
            yield attrs, _json_logs(rl)


def _json_logs(rl: Mapping[str, Any]) -> Iterator[OtlpLog]:
    for sl in _list(_get(rl, "scopeLogs", "scope_logs")):
        for lr in _list(_get(sl, "logRecords", "log_records")):
            if not isinstance(lr, dict):
                yield OtlpLog(None, None, {})
                continue
            t = _nanos(_get(lr, "timeUnixNano", "time_unix_nano")) or _nanos(
                _get(lr, "observedTimeUnixNano", "observed_time_unix_nano")
            )
            body_value = _json_value(lr.get("body"), 0)
            yield OtlpLog(t / 1e9 if t else None, body_value, _json_attrs(lr.get("attributes")))


def _get(d: Mapping[str, Any], camel: str, snake: str) -> Any:
    v = d.get(camel)
    return d.get(snake) if v is None else v


def _list(v: object) -> list[Any]:
    return v if isinstance(v, list) else []


def _nanos(v: object) -> int:
    if isinstance(v, bool):
        return 0
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.isdigit():
        return int(v)
    if isinstance(v, float) and v > 0:
        return int(v)
    return 0


def _json_value(v: object, depth: int) -> AnyValue:
    """An ``AnyValue`` object rendered; anything else (not an object) is None."""
    if not isinstance(v, dict):
        return None
    for key in ("stringValue", "string_value"):
        if key in v:
            return v[key] if isinstance(v[key], str) else str(v[key])
    for key in ("kvlistValue", "kvlist_value"):
        if key in v:
            if depth >= MAX_DEPTH:
                return "..."
            inner = v[key].get("values") if isinstance(v[key], dict) else None
            return _json_attrs(inner, depth + 1)
    for key in ("arrayValue", "array_value"):
        if key in v:
            if depth >= MAX_DEPTH:
                return "..."
            inner = v[key].get("values") if isinstance(v[key], dict) else None
            return [_json_value(x, depth + 1) for x in _list(inner)]
    for key in ("intValue", "int_value"):
        if key in v:  # int64: a JSON string or number
            x = v[key]
            if isinstance(x, str):
                try:
                    return int(x)
                except ValueError:
                    return x
            value: AnyValue = x
            return value
    for key in (
        "boolValue",
        "bool_value",
        "doubleValue",
        "double_value",
        "bytesValue",
        "bytes_value",
    ):
        if key in v:
            found: AnyValue = v[key]
            return found
    return None


def _json_attrs(kvs: object, depth: int = 1) -> Attributes:
    return {
        kv["key"]: _json_value(kv.get("value"), depth)
        for kv in _list(kvs)
        if isinstance(kv, dict) and isinstance(kv.get("key"), str)
    }
