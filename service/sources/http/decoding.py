"""What the two HTTP decoders (:mod:`.body`, :mod:`.otlp`) share around the decoding of
:mod:`service.ingest`: the body's ``Content-Encoding``, the memory lease, the lines counted,
and a body refused whole answered with the HTTP status its reason calls for
(:class:`BodyRefused`, already counted where it was refused)."""

from __future__ import annotations

from collections.abc import Callable

from service import metrics
from service.ingest.bounds import Refused, inflate, refuse
from service.ingest.budget import Lease, MiB
from service.ingest.compression import GZIP_MAGIC
from service.ratelog import clip
from service.records import LogRecord

MAX_DECOMPRESSED_BYTES = 64 * MiB  # one body, once inflated

# the HTTP answer to each reason a body is refused for
STATUS = {
    "bad_request": 400,  # a bad Content-Length
    "tag_too_long": 400,
    "bad_gzip": 400,
    "bad_json": 400,
    "bad_protobuf": 400,
    "binary": 400,  # an executable or random bytes (service.ingest.junk)
    "too_large": 413,  # as sent
    "decompressed_too_large": 413,
    "too_many_records": 413,
    "too_complex": 413,
    "unsupported_media_type": 415,
    "unsupported_encoding": 415,
    "memory_budget": 503,
    "not_stored": 503,  # the sink failed: retry
}

Decoded = tuple[list[LogRecord], int]  # (records, rejected units)


class BodyRefused(Exception):
    """The body is refused as a whole (already counted): ``status`` is the HTTP answer
    (400 bad tag or corrupt gzip, 413 too large or too many records, 415 media type or
    encoding, 503 global memory budget spent), ``reason`` the reject reason."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message

    @classmethod
    def of(cls, refused: Refused) -> BodyRefused:
        return cls(STATUS[refused.reason], refused.reason, refused.message)


def refuse_body(source: str, reason: str, message: str, detail: object = "") -> BodyRefused:
    """Count a refusal of the whole body and return it to raise."""
    return BodyRefused.of(refuse(source, reason, message, detail))


def content(
    body: bytes | bytearray, content_encoding: str | None, lease: Lease, source: str, hint: str = ""
) -> bytes | bytearray:
    """The body as encoded inside: gzip (said, or sniffed when no encoding is given) is
    inflated under ``lease``; any other encoding is refused (``hint`` says what is taken)."""
    encoding = (content_encoding or "").strip().lower()
    if encoding in ("gzip", "x-gzip") or (encoding in ("", "identity") and body[:2] == GZIP_MAGIC):
        return inflate(body, lease, source)
    if encoding not in ("", "identity"):
        raise refuse(
            source,
            "unsupported_encoding",
            f"unsupported Content-Encoding {clip(encoding, 40)}{hint}",
        )
    return body


def decode_leased(
    source: str, lease: Lease | None, max_decompressed: int, decode: Callable[[Lease], Decoded]
) -> Decoded:
    """``decode(lease)`` with ``lease`` (else one of ``max_decompressed`` bytes over the
    global budget, released on return); the lines it gave are counted; a refusal is raised
    as :class:`BodyRefused`."""
    own = lease is None
    if lease is None:
        lease = Lease(max_decompressed)
    try:
        records, rejected = decode(lease)
    except Refused as exc:
        refused = BodyRefused.of(exc)
    else:
        if records:
            metrics.LINES_IN.labels(source=source).inc(len(records))
        return records, rejected
    finally:
        if own:
            lease.release()
    # Raised out of the except block, a new exception: no traceback nor the exception it
    # replaced, whose frames hold the inflated bytes and the records decoded so far, so they
    # are freed now and not whenever the exception is.
    raise refused
