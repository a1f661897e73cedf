"""An OTLP logs export (``ExportLogsServiceRequest``), protobuf or JSON, to
:class:`LogRecord` s.

Before anything is built the export is charged to the body's
:class:`~service.ingest.budget.Lease`: JSON at :data:`PARSE_FACTOR` times its bytes,
protobuf at its bytes plus :data:`MESSAGE_COST` per nested message, counted by a pre-scan
(:mod:`service.ingest.otlp_scan`) that also refuses one over the record or field caps.
Reading either encoding: :mod:`service.ingest.otlp_values`.

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
body that does not parse is refused whole.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from service.ingest.bounds import MAX_FIELDS, RecordCap, check_containers, refuse
from service.ingest.budget import BudgetExhausted, Lease
from service.ingest.compression import DecompressedTooLarge
from service.ingest.envelope import decode_record
from service.ingest.fluent_record import stream_key
from service.ingest.otlp_scan import ScanLimit, scan_export
from service.ingest.otlp_values import (
    AnyValue,
    Attributes,
    Resources,
    json_resources,
    protobuf_resources,
)
from service.ingest.runtime_paths import path_meta
from service.ingest.salvage import clean_text
from service.ratelog import reject
from service.records import LogRecord, Meta, MetaText, fill_meta

# memory a parsed body takes beyond its bytes, charged to the lease before parsing: JSON
# at 3x its bytes; protobuf at its bytes plus MESSAGE_COST per nested message (an empty
# LogRecord is 2 bytes on the wire and about 140 parsed), counted by a pre-scan
PARSE_FACTOR = {"protobuf": 1, "json": 3}
MESSAGE_COST = 160
TOO_MANY = "export request holds more than {} log records"

# resource (or record) attribute → LogRecord.meta key
ATTRIBUTES: dict[str, MetaText] = {
    "k8s.namespace.name": "namespace",
    "k8s.pod.name": "pod",
    "k8s.container.name": "container",
    "k8s.node.name": "node",
    "container.id": "container_id",
    "k8s.pod.uid": "pod_id",
    "container.image.id": "image_id",
}
LABEL_PREFIX = "k8s.pod.labels."


def export_records(
    body: bytes | bytearray,
    kind: str,
    lease: Lease,
    source: str,
    max_records: int,
    max_line: int,
) -> tuple[list[LogRecord], int]:
    """``(records, rejected log records)`` of one export request, ``kind`` ``protobuf`` or
    ``json``, its parsed size charged to ``lease``; raises
    :class:`~service.ingest.bounds.Refused` when the body is refused whole."""
    if kind == "protobuf":
        messages = _prescan(body, source, max_records)
    else:
        check_containers(body, source)
        messages = 0
    try:
        lease.take(len(body) * PARSE_FACTOR[kind] + messages * MESSAGE_COST)
    except DecompressedTooLarge:
        raise refuse(
            source,
            "decompressed_too_large",
            f"export request too large to parse within {lease.limit} bytes",
        ) from None
    except BudgetExhausted as exc:
        raise refuse(source, "memory_budget", str(exc)) from None
    parse = protobuf_resources if kind == "protobuf" else json_resources
    resources = parse(body, source)
    del body
    return _records(resources, source, max_records, max_line)


def _prescan(body: bytes | bytearray, source: str, max_records: int) -> int:
    """Messages the protobuf ``body`` parses into; refuse one over the record or field cap
    before anything is built."""
    try:
        scan = scan_export(
            body, max_records=max_records, max_messages=MAX_FIELDS, max_fields=MAX_FIELDS
        )
    except ScanLimit as exc:
        if exc.what == "records":
            raise refuse(source, "too_many_records", TOO_MANY.format(max_records)) from None
        raise refuse(
            source, "too_complex", f"export request holds {exc} (send smaller batches)"
        ) from None
    return 0 if scan is None else scan.messages


def resource_meta(attrs: Mapping[str, AnyValue]) -> Meta:
    """``LogRecord.meta`` from OpenTelemetry resource (or record) attributes."""
    meta: Meta = {}
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


def _text(body: AnyValue, source: str) -> str | None:
    if body is None:
        return None
    if isinstance(body, str):
        return body if body.isascii() else clean_text(body, source)
    if isinstance(body, dict | list):
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"), default=str)
    return str(body)


def _records(
    resources: Resources, source: str, max_records: int, max_line: int
) -> tuple[list[LogRecord], int]:
    out: list[LogRecord] = []
    rejected = 0
    cap = RecordCap(max_records, source, TOO_MANY)
    for attrs, logs in resources:
        base = resource_meta(attrs)
        service = attrs.get("service.name")
        fallback = service if isinstance(service, str) and service else source
        for log in logs:
            cap.unit()
            text = _text(log.body, source)
            if text is None:
                reject(source, "no_log_field", "log record without a body")
                rejected += 1
                continue
            meta = base.copy()
            la = log.attributes
            if la:
                _fill(meta, la)
            record = {"log": text}
            fd = la.get("log.iostream") if la else None
            if fd == "stdout" or fd == "stderr":
                record["stream"] = fd
            out.extend(
                decode_record(
                    record,
                    stream=stream_key(meta, fallback),
                    time=log.time,
                    meta=meta,
                    source=source,
                    max_line=max_line,
                )
            )
    return out, rejected


def _fill(meta: Meta, la: Attributes) -> None:
    """What the record's own attributes add to its resource's meta."""
    fill_meta(meta, resource_meta(la))
    path = la.get("log.file.path")
    if isinstance(path, str) and "pod" not in meta:
        fill_meta(meta, path_meta(path))
