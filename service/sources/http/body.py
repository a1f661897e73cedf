"""``POST /ingest``'s transport side: which bodies a log collector's HTTP output sends, and
the call of :mod:`service.ingest.collector_body` that decodes one.

Bodies understood (``Content-Type`` decides, sniffed when absent or generic):

* Fluent Bit ``http`` output, ``format msgpack`` (its default; ``application/msgpack``).
* Fluent Bit ``format json`` (one JSON array of records, ``application/json``), ``json_lines``
  (NDJSON, ``application/x-ndjson``) and ``json_stream`` (concatenated objects, also sent as
  ``application/json``); each record carries its time under ``json_date_key`` (``date``).
* Fluentd ``out_http``: NDJSON (``json_array false``, the default) or a JSON array.
* ``text/plain``: one raw/CRI/Docker line per line; a junk line (binary, mostly invalid
  UTF-8, NUL-heavy: the rule of :mod:`service.ingest.junk`) is dropped and counted as a
  rejected unit.
* ``Content-Encoding: gzip`` (Fluent Bit ``compress gzip``), inflated piece by piece under a
  per-body limit and the process-wide budget of :mod:`service.ingest.budget`.

Without a ``Content-Type`` the body is sniffed: JSON (``{``/``[``) and msgpack (a map or an
array header) are decoded, anything else, or a sniffed body with nothing decodable in it, is
refused (415), as is any other media type (``application/octet-stream``, ``image/png``,
forms ...): junk is never taken for text lines. A body that is nothing but binary (an
executable, random bytes: :func:`service.ingest.junk.binary_input`) sent as text is
refused (400, ``binary``).
A body may expand to at most :data:`~service.ingest.bounds.MAX_RECORDS` records, and a tag
is at most :data:`~service.ingest.bounds.MAX_TAG` characters. :func:`decode_body` raises
:class:`~.decoding.BodyRefused` (with the HTTP status that fits) for a body refused as a
whole; :func:`decode_http_body` turns that into ``([], 1)``. Every refusal is counted in
``sentinel_rejects_total`` and logged at a bounded rate (:mod:`service.ratelog`).

Neither collector puts the tag in the body. Convention: the tag travels in the
:data:`TAG_HEADER` header — Fluent Bit ``header_tag X-Fluent-Tag``; Fluentd
``headers_from_placeholders {"X-Fluent-Tag":"${tag}"}`` with ``<buffer tag>`` — and the
route passes it as ``tag``. Runtime chunks (``meta["partial"]``) are returned unjoined: run
them through a :class:`service.ingest.joiner.Joiner` kept across requests.
"""

from __future__ import annotations

import functools

from service.ingest.bounds import MAX_RECORDS, MAX_TAG, refuse
from service.ingest.budget import Lease
from service.ingest.collector_body import sniff, structured_records, text_records
from service.ingest.envelope import MAX_LINE
from service.ingest.junk import binary_input, text_lines
from service.ratelog import clip
from service.sources.http.decoding import (
    MAX_DECOMPRESSED_BYTES,
    BodyRefused,
    Decoded,
    content,
    decode_leased,
    refuse_body,
)

__all__ = ["TAG_HEADER", "BodyRefused", "check_media", "check_tag", "decode_body"]

TAG_HEADER = "X-Fluent-Tag"

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


def check_tag(tag: str | None, source: str = "http") -> None:
    """Refuse (400, counted) a tag longer than :data:`MAX_TAG` characters."""
    if tag is not None and len(tag) > MAX_TAG:
        raise refuse_body(
            source, "tag_too_long", f"tag of {len(tag)} characters (at most {MAX_TAG})", tag
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
        raise refuse_body(
            source,
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
    default: str | None = None,
) -> Decoded:
    """``(records, rejected)`` of one body; raises :class:`BodyRefused` when the whole body
    is refused. ``rejected`` counts dropped units (entries, JSON lines). ``lease`` (else one
    of ``max_decompressed_bytes`` over the global budget, released on return) is charged
    with the inflated bytes as they are produced. ``tag`` is the stream-key fallback;
    without one, a record's own sender fields, else ``default`` (else ``source``)."""
    check_tag(tag, source)
    kind = check_media(content_type, source)
    decode = functools.partial(
        _decode, body, kind, content_encoding, tag, max_records, max_line, source, default
    )
    del body  # only the decoder holds it now
    return decode_leased(source, lease, max_decompressed_bytes, decode)


def _decode(
    body: bytes | bytearray,
    kind: str,
    content_encoding: str | None,
    tag: str | None,
    max_records: int,
    max_line: int,
    source: str,
    default: str | None,
    lease: Lease,
) -> Decoded:
    body = content(body, content_encoding, lease, source)
    if kind == "text":
        why = binary_input((body,))
        if why is not None:  # an executable or random bytes: never lines of a log
            raise refuse(source, "binary", f"the body {why}", body[:80])
        text, junk_lines = text_lines(body, source)
        del body
        return text_records(text, tag, source, max_records, max_line, default), junk_lines
    if kind:
        return structured_records(body, kind, tag, source, max_records, max_line, default)
    kind = sniff(body) or ""
    if not kind:
        raise refuse(
            source,
            "unsupported_media_type",
            f"no Content-Type and not JSON or msgpack (send one of {ACCEPTED_TYPES})",
            body[:80],
        )
    records, rejected = structured_records(body, kind, tag, source, max_records, max_line, default)
    if rejected and not records:  # it only looked like JSON or msgpack: junk
        raise refuse(
            source,
            "unsupported_media_type",
            f"no Content-Type and nothing decodable as {kind} (send one of {ACCEPTED_TYPES})",
            body[:80],
        )
    return records, rejected


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
) -> Decoded:
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
