"""What one pushed body may expand to, and its refusal as a whole.

Limits on what one pushed request or message may hold, shared by the HTTP, OTLP and
Forward sources (``SECURITY.md`` lists them with the rest).

A decoder refuses a body whole by raising :class:`Refused` (made by :func:`refuse`, which
counts it in ``sentinel_rejects_total`` and logs it at a bounded rate): ``reason`` says why,
``message`` is the text the door answers with; the door picks the status
(:mod:`service.sources.http.decoding`). The bounds every body shares: gzip inflated under a
:class:`~service.ingest.budget.Lease` (:func:`inflate`), JSON objects and arrays counted
before any is built (:func:`check_containers`), and a record cap (:class:`RecordCap`).
"""

from __future__ import annotations

from service.ingest.budget import BudgetExhausted, Lease, gunzip_bounded
from service.ingest.compression import DecompressedTooLarge
from service.ratelog import reject

# The longest tag a kubelet path can give: "kube.var.log.containers." + pod (253) + "_" +
# namespace (63) + "_" + container (63) + "-" + container id (64) + ".log" = 474 characters.
MAX_TAG = 512
MAX_RECORDS = 100_000  # records one body may expand to (a Fluent Bit chunk holds far fewer)
# JSON objects and arrays one body may hold, counted as its "{" and "[" bytes before it is
# decoded (an upper bound: brackets inside strings count too); `{}` is 2 bytes as sent and
# about 64 parsed, so this bounds what decoding may build (100,000 Fluent Bit records with
# their Kubernetes metadata hold about 600,000)
MAX_CONTAINERS = 1_000_000
# protobuf fields one OTLP export may hold (its pre-scan walks each once)
MAX_FIELDS = 1_000_000


class Refused(Exception):
    """A body refused as a whole (already counted): ``reason`` is the reject reason,
    ``message`` what the door answers."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def refuse(source: str, reason: str, message: str, detail: object = "") -> Refused:
    """Count and log the refusal (``detail``, else ``message``) and return it to raise."""
    reject(source, reason, detail if detail != "" else message)
    return Refused(reason, message)


def inflate(body: bytes | bytearray, lease: Lease, source: str) -> bytearray:
    """A gzip body inflated piece by piece, charged to ``lease``; refused beyond its limit
    (``decompressed_too_large``), when the process-wide budget is spent (``memory_budget``)
    or when it is not gzip (``bad_gzip``)."""
    try:
        return gunzip_bounded(body, lease)
    except DecompressedTooLarge:
        raise refuse(
            source, "decompressed_too_large", f"gzip body expands beyond {lease.limit} bytes"
        ) from None
    except BudgetExhausted as exc:
        raise refuse(source, "memory_budget", str(exc)) from None
    except ValueError as exc:
        raise refuse(source, "bad_gzip", f"bad gzip body: {exc}") from None


def check_containers(body: bytes | bytearray, source: str) -> None:
    """Refuse (``too_complex``) a JSON body that may hold more than :data:`MAX_CONTAINERS`
    objects and arrays, before any is built."""
    count = body.count(b"{") + body.count(b"[")
    if count > MAX_CONTAINERS:
        raise refuse(
            source,
            "too_complex",
            f"JSON body of {count} objects and arrays (at most {MAX_CONTAINERS})",
        )


class RecordCap:
    """At most ``limit`` records per body, and as many units (JSON values, msgpack objects,
    lines) read, accepted or not, so a body of junk stops as early as one of records
    (``too_many_records`` beyond, counted once)."""

    def __init__(
        self, limit: int, source: str, message: str = "body expands to more than {} records"
    ) -> None:
        self.limit = limit
        self.source = source
        self.message = message  # formatted with the limit
        self.units = 0

    def check(self, count: int) -> None:
        if count > self.limit:
            raise refuse(self.source, "too_many_records", self.message.format(self.limit))

    def unit(self) -> None:
        """One more unit read; refuse the body past ``limit`` of them."""
        self.units += 1
        self.check(self.units)

    def lines(self, text: str) -> None:
        """Refuse a text body with too many lines before splitting it."""
        self.check(text.count("\n") + (0 if text.endswith("\n") else 1))
