"""Decode an OTLP/HTTP logs export (``ExportLogsServiceRequest``) into :class:`LogRecord` s.

Encodings: binary protobuf (``application/x-protobuf``, parsed by the ``opentelemetry-proto``
classes) and OTLP/JSON (``application/json``: lowerCamelCase keys, snake_case accepted too,
64-bit integers as strings or numbers, ``AnyValue`` objects); ``Content-Encoding: gzip``
inflated under the same per-body limit and process-wide budget as ``POST /ingest``
(:mod:`service.ingest.budget`), with the parsed message charged to it as well.

Stream identity comes from the resource attributes (``k8s.namespace.name``,
``k8s.pod.name``, ``k8s.container.name``, ``k8s.node.name``, ``container.image.name`` [+
``container.image.tag``], ``container.id``, ``k8s.pod.uid``, ``k8s.pod.labels.<key>``),
else from the same keys on the log record, else from a kubelet path in ``log.file.path``
(the Collector's ``filelog`` receiver); the stream is ``namespace/pod/container`` as for
every other source, else the container id, else ``service.name``. ``log.iostream`` gives the
fd. Each record's ``body`` goes through the shared envelope (:func:`decode_record`): a
body that is still a CRI / Docker line is unwrapped, a multi-line body is split into lines,
a map body is one JSON line. Time: ``timeUnixNano``, else ``observedTimeUnixNano``.

A record without a body is rejected (counted, ``partial_success.rejected_log_records``); a
body that does not parse is refused whole (400).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Mapping
from typing import Any

from service import metrics
from service.ingest.budget import BudgetExhausted, Lease, gunzip_bounded
from service.ingest.compression import GZIP_MAGIC, DecompressedTooLarge
from service.ingest.envelope import MAX_LINE, decode_record
from service.ingest.fluent_record import stream_key
from service.ingest.json_text import parse_json
from service.ingest.otlp_scan import ScanLimit, scan_export
from service.ingest.runtime_paths import path_meta
from service.ingest.salvage import clean_text
from service.ratelog import brief, clip, reject
from service.records import LogRecord
from service.sources.http.body import MAX_DECOMPRESSED_BYTES, BodyRefused, check_containers
from service.sources.limits import MAX_FIELDS, MAX_RECORDS

SOURCE = "otlp"
PROTOBUF_TYPES = frozenset(
    ("application/x-protobuf", "application/protobuf", "application/vnd.google.protobuf")
)
JSON_TYPES = frozenset(("application/json",))
ACCEPTED_TYPES = "application/x-protobuf, application/json"
# memory a parsed body takes beyond its bytes, charged to the lease before parsing: JSON
# at 3x its bytes; protobuf at its bytes plus MESSAGE_COST per nested message (an empty
# LogRecord is 2 bytes on the wire and about 140 parsed), counted by a pre-scan
PARSE_FACTOR = {"protobuf": 1, "json": 3}
MESSAGE_COST = 160
MAX_DEPTH = 32  # nested AnyValue levels rendered (deeper: "...")

# resource (or record) attribute → LogRecord.meta key
ATTRIBUTES = {
    "k8s.namespace.name": "namespace",
    "k8s.pod.name": "pod",
    "k8s.container.name": "container",
    "k8s.node.name": "node",
    "container.id": "container_id",
    "k8s.pod.uid": "pod_id",
    "container.image.id": "image_id",
}
LABEL_PREFIX = "k8s.pod.labels."


def media(content_type: str | None) -> str | None:
    """``protobuf`` / ``json`` for the OTLP media types, None for anything else."""
    m = (content_type or "").split(";", 1)[0].strip().lower()
    if m in PROTOBUF_TYPES:
        return "protobuf"
    if m in JSON_TYPES:
        return "json"
    return None


def refuse(status: int, reason: str, message: str, detail: Any = "") -> BodyRefused:
    reject(SOURCE, reason, detail if detail != "" else message)
    return BodyRefused(status, reason, message)


def check_media(content_type: str | None) -> str:
    kind = media(content_type)
    if kind is None:
        raise refuse(
            415,
            "unsupported_media_type",
            f"unsupported Content-Type {clip(content_type, 80)} "
            f"(OTLP/HTTP sends one of {ACCEPTED_TYPES})",
            f"Content-Type {content_type}",
        )
    return kind


def decode_export(
    body: bytes | bytearray,
    content_type: str | None,
    content_encoding: str | None,
    *,
    lease: Lease | None = None,
    max_records: int = MAX_RECORDS,
    max_line: int = MAX_LINE,
) -> tuple[list[LogRecord], int]:
    """``(records, rejected log records)`` of one export request; raises
    :class:`BodyRefused` when the body is refused whole."""
    kind = check_media(content_type)
    own = lease is None
    if lease is None:
        lease = Lease(MAX_DECOMPRESSED_BYTES)
    try:
        encoding = (content_encoding or "").strip().lower()
        if encoding in ("gzip", "x-gzip") or (
            encoding in ("", "identity") and body[:2] == GZIP_MAGIC
        ):
            body = _inflate(body, lease)
        elif encoding not in ("", "identity"):
            raise refuse(
                415,
                "unsupported_encoding",
                f"unsupported Content-Encoding {clip(encoding, 40)} (gzip or none)",
            )
        if kind == "protobuf":
            messages = _prescan(body, max_records)
        else:
            check_containers(body, SOURCE)
            messages = 0
        try:
            lease.take(len(body) * PARSE_FACTOR[kind] + messages * MESSAGE_COST)
        except DecompressedTooLarge:
            raise refuse(
                413,
                "decompressed_too_large",
                f"export request too large to parse within {lease.limit} bytes",
            ) from None
        except BudgetExhausted as exc:
            raise refuse(503, "memory_budget", str(exc)) from None
        resources = _protobuf(body) if kind == "protobuf" else _json(body)
        del body
        records, rejected = _records(resources, max_records, max_line)
    except BodyRefused as exc:
        refused = exc
    else:
        if records:
            metrics.LINES_IN.labels(source=SOURCE).inc(len(records))
        return records, rejected
    finally:
        if own:
            lease.release()
    refused.__traceback__ = None  # free the body and what was decoded now (see http/body.py)
    refused.__context__ = None
    raise refused


def _inflate(body: bytes | bytearray, lease: Lease) -> bytearray:
    try:
        return gunzip_bounded(body, lease)
    except DecompressedTooLarge:
        raise refuse(
            413, "decompressed_too_large", f"gzip body expands beyond {lease.limit} bytes"
        ) from None
    except BudgetExhausted as exc:
        raise refuse(503, "memory_budget", str(exc)) from None
    except ValueError as exc:
        raise refuse(400, "bad_gzip", f"bad gzip body: {exc}") from None


def _prescan(body: bytes | bytearray, max_records: int) -> int:
    """Messages the protobuf ``body`` parses into; refuse (413) one over the record or
    field cap before anything is built."""
    try:
        scan = scan_export(
            body, max_records=max_records, max_messages=MAX_FIELDS, max_fields=MAX_FIELDS
        )
    except ScanLimit as exc:
        if exc.what == "records":
            raise refuse(
                413,
                "too_many_records",
                f"export request holds more than {max_records} log records",
            ) from None
        raise refuse(
            413, "too_complex", f"export request holds {exc} (send smaller batches)"
        ) from None
    return 0 if scan is None else scan.messages


# ---- one shape for both encodings: (resource attributes, [log record view]) ----------------
class _Log:
    """What is used of one log record, from either encoding."""

    __slots__ = ("attributes", "body", "time")

    def __init__(self, time: float | None, body: Any, attributes: dict[str, Any]) -> None:
        self.time = time
        self.body = body  # str, a rendered value, or None (no body)
        self.attributes = attributes


def _protobuf(body: bytes | bytearray) -> Iterator[tuple[dict[str, Any], Iterator[_Log]]]:
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    try:
        req = ExportLogsServiceRequest.FromString(bytes(body))
    except (DecodeError, RecursionError, ValueError) as exc:
        raise refuse(
            400, "bad_protobuf", f"not an OTLP ExportLogsServiceRequest: {exc}", body[:80]
        ) from None

    def logs(rl: Any) -> Iterator[_Log]:
        for sl in rl.scope_logs:
            for lr in sl.log_records:
                t = lr.time_unix_nano or lr.observed_time_unix_nano
                body_value = _pb_value(lr.body, 0) if lr.HasField("body") else None
                yield _Log(t / 1e9 if t else None, body_value, _pb_attrs(lr.attributes))

    return ((_pb_attrs(rl.resource.attributes), logs(rl)) for rl in req.resource_logs)


def _pb_attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: _pb_value(kv.value, 1) for kv in kvs}


def _pb_value(v: Any, depth: int) -> Any:
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which == "string_value":
        return v.string_value
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
    return getattr(v, which)  # bool, int, double


def _json(body: bytes | bytearray) -> Iterator[tuple[dict[str, Any], Iterator[_Log]]]:
    try:
        text = bytes(body).decode("utf-8")
        doc = parse_json(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise refuse(400, "bad_json", f"not OTLP/JSON: {exc}", body[:80]) from None
    if not isinstance(doc, dict):
        raise refuse(400, "bad_json", "OTLP/JSON: the body is not an object", brief(doc))
    resource_logs = _get(doc, "resourceLogs", "resource_logs")
    if not isinstance(resource_logs, list):
        raise refuse(400, "bad_json", "OTLP/JSON: no resourceLogs array", brief(doc))

    def logs(rl: Mapping[str, Any]) -> Iterator[_Log]:
        for sl in _list(_get(rl, "scopeLogs", "scope_logs")):
            for lr in _list(_get(sl, "logRecords", "log_records")):
                if not isinstance(lr, dict):
                    yield _Log(None, None, {})
                    continue
                t = _nanos(_get(lr, "timeUnixNano", "time_unix_nano")) or _nanos(
                    _get(lr, "observedTimeUnixNano", "observed_time_unix_nano")
                )
                raw = lr.get("body")
                body_value = _json_value(raw, 0) if isinstance(raw, dict) else None
                yield _Log(t / 1e9 if t else None, body_value, _json_attrs(lr.get("attributes")))

    for rl in resource_logs:
        if isinstance(rl, dict):
            res = rl.get("resource")
            attrs = _json_attrs(res.get("attributes")) if isinstance(res, dict) else {}
            yield attrs, logs(rl)


def _get(d: Mapping[str, Any], camel: str, snake: str) -> Any:
    v = d.get(camel)
    return d.get(snake) if v is None else v


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _nanos(v: Any) -> int:
    if isinstance(v, bool):
        return 0
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.isdigit():
        return int(v)
    if isinstance(v, float) and v > 0:
        return int(v)
    return 0


def _json_attrs(kvs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in _list(kvs):
        if isinstance(kv, dict) and isinstance(kv.get("key"), str):
            value = kv.get("value")
            out[kv["key"]] = _json_value(value, 1) if isinstance(value, dict) else None
    return out


def _json_value(v: Mapping[str, Any], depth: int) -> Any:
    for key in ("stringValue", "string_value"):
        if key in v:
            return v[key] if isinstance(v[key], str) else str(v[key])
    for key in ("kvlistValue", "kvlist_value"):
        if key in v:
            if depth >= MAX_DEPTH:
                return "..."
            inner = v[key].get("values") if isinstance(v[key], dict) else None
            return {
                kv["key"]: (
                    _json_value(kv["value"], depth + 1)
                    if isinstance(kv.get("value"), dict)
                    else None
                )
                for kv in _list(inner)
                if isinstance(kv, dict) and isinstance(kv.get("key"), str)
            }
    for key in ("arrayValue", "array_value"):
        if key in v:
            if depth >= MAX_DEPTH:
                return "..."
            inner = v[key].get("values") if isinstance(v[key], dict) else None
            return [
                _json_value(x, depth + 1) if isinstance(x, dict) else None for x in _list(inner)
            ]
    for key in ("intValue", "int_value"):
        if key in v:  # int64: a JSON string or number
            x = v[key]
            if isinstance(x, str):
                try:
                    return int(x)
                except ValueError:
                    return x
            return x
    for key in (
        "boolValue",
        "bool_value",
        "doubleValue",
        "double_value",
        "bytesValue",
        "bytes_value",
    ):
        if key in v:
            return v[key]
    return None


# ---- records -------------------------------------------------------------------------------
def resource_meta(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """``LogRecord.meta`` from OpenTelemetry resource (or record) attributes."""
    meta: dict[str, Any] = {}
    for attr, key in ATTRIBUTES.items():
        v = attrs.get(attr)
        if isinstance(v, str) and v:
            meta[key] = v
    node = attrs.get("host.name")
    if "node" not in meta and isinstance(node, str) and node:
        meta["node"] = node
    image = attrs.get("container.image.name")
    if isinstance(image, str) and image:
        tag = attrs.get("container.image.tag")
        tags = attrs.get("container.image.tags")
        if not (isinstance(tag, str) and tag) and isinstance(tags, list) and tags:
            tag = tags[0] if isinstance(tags[0], str) else None
        meta["image"] = f"{image}:{tag}" if tag and ":" not in image.rsplit("/", 1)[-1] else image
    labels = {
        k[len(LABEL_PREFIX) :]: str(v)
        for k, v in attrs.items()
        if k.startswith(LABEL_PREFIX) and v is not None
    }
    if labels:
        meta["labels"] = labels
    cid = meta.get("container_id")
    if cid is not None and "://" in cid:
        meta["container_id"] = cid.split("://", 1)[1]
    return meta


def _text(body: Any) -> str | None:
    if body is None:
        return None
    if isinstance(body, str):
        return body if body.isascii() else clean_text(body, SOURCE)
    if isinstance(body, dict | list):
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"), default=str)
    return str(body)


def _records(
    resources: Iterator[tuple[dict[str, Any], Iterator[_Log]]], max_records: int, max_line: int
) -> tuple[list[LogRecord], int]:
    out: list[LogRecord] = []
    rejected = 0
    seen = 0
    for attrs, logs in resources:
        base = resource_meta(attrs)
        service = attrs.get("service.name")
        fallback = service if isinstance(service, str) and service else SOURCE
        for log in logs:
            seen += 1
            if seen > max_records:
                raise refuse(
                    413,
                    "too_many_records",
                    f"export request holds more than {max_records} log records",
                )
            text = _text(log.body)
            if text is None:
                reject(SOURCE, "no_log_field", "log record without a body")
                rejected += 1
                continue
            meta = dict(base)
            la = log.attributes
            if la:
                for key, value in resource_meta(la).items():
                    meta.setdefault(key, value)
                path = la.get("log.file.path")
                if isinstance(path, str) and "pod" not in meta:
                    for key, value in path_meta(path).items():
                        meta.setdefault(key, value)
            record: dict[str, Any] = {"log": text}
            fd = la.get("log.iostream") if la else None
            if fd in ("stdout", "stderr"):
                record["stream"] = fd
            out.extend(
                decode_record(
                    record,
                    stream=stream_key(meta, fallback),
                    time=log.time,
                    meta=meta,
                    source=SOURCE,
                    max_line=max_line,
                )
            )
    return out, rejected
