"""``POST /v1/logs``'s transport side: the OTLP/HTTP media types and encodings, and the
call of :mod:`service.ingest.otlp` that decodes one ``ExportLogsServiceRequest``.

Encodings: binary protobuf (``application/x-protobuf``) and OTLP/JSON (``application/json``);
``Content-Encoding: gzip`` inflated under the same per-body limit and process-wide budget as
``POST /ingest`` (:mod:`service.ingest.budget`), with the parsed message charged to it as
well. :func:`decode_export` raises :class:`~.decoding.BodyRefused` for a body refused whole.
"""

from __future__ import annotations

import functools

from service.ingest.bounds import MAX_RECORDS
from service.ingest.budget import Lease
from service.ingest.envelope import MAX_LINE
from service.ingest.otlp import export_records
from service.ratelog import clip
from service.sources.http.decoding import (
    MAX_DECOMPRESSED_BYTES,
    Decoded,
    content,
    decode_leased,
    refuse_body,
)

SOURCE = "otlp"
PROTOBUF_TYPES = frozenset(
    ("application/x-protobuf", "application/protobuf", "application/vnd.google.protobuf")
)
JSON_TYPES = frozenset(("application/json",))
ACCEPTED_TYPES = "application/x-protobuf, application/json"


def media(content_type: str | None) -> str | None:
    """``protobuf`` / ``json`` for the OTLP media types, None for anything else."""
    m = (content_type or "").split(";", 1)[0].strip().lower()
    if m in PROTOBUF_TYPES:
        return "protobuf"
    if m in JSON_TYPES:
        return "json"
    return None


def check_media(content_type: str | None) -> str:
    """:func:`media` of ``content_type``; refuse (415, counted) a foreign one."""
    kind = media(content_type)
    if kind is None:
        raise refuse_body(
            SOURCE,
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
) -> Decoded:
    """``(records, rejected log records)`` of one export request; raises
    :class:`~.decoding.BodyRefused` when the body is refused whole."""
    kind = check_media(content_type)
    decode = functools.partial(_decode, body, kind, content_encoding, max_records, max_line)
    del body  # only the decoder holds it now
    return decode_leased(SOURCE, lease, MAX_DECOMPRESSED_BYTES, decode)


def _decode(
    body: bytes | bytearray,
    kind: str,
    content_encoding: str | None,
    max_records: int,
    max_line: int,
    lease: Lease,
) -> Decoded:
    inner = content(body, content_encoding, lease, SOURCE, " (gzip or none)")
    del body
    return export_records(inner, kind, lease, SOURCE, max_records, max_line)
