"""What ``POST /ingest`` and ``POST /v1/logs`` share, free of the web framework: one
:class:`HttpEndpoint` per HTTP source, a :class:`~service.sources.base.Source` like the
others (``await start(sink)``, ``await stop()``, ``health()``) whose requests the API's
routes hand to :meth:`HttpEndpoint.receive` and whose outcome they turn back into HTTP.

For one request the endpoint reads the body (with the route's reader, which refuses one over
``max_body`` bytes as sent, :data:`MAX_BODY`), charges it to a
:class:`~service.ingest.budget.Lease` of ``max_decompressed`` bytes against the process-wide
budget, and decodes it off the event loop with the route's decoder
(:func:`~service.sources.http.body.decode_body`,
:func:`~service.sources.http.otlp.decode_export`), which charges what it inflates and parses
to the same lease; the lease goes back when decoding ends. The records then pass the
endpoint's joiner, which holds the runtime chunks of an unfinished line (CRI ``P``) across
requests, as the Forward server does: a line comes out when its closing chunk arrives,
after :data:`IDLE_FLUSH_S` (with the next request), or when the endpoint stops.
Collectors with ``multiline.parser docker, cri`` already send whole lines. What comes out is
submitted to the sink, which returns once it is stored; when it fails, the joiner is put
back as it was before the request, since the collector sends the whole body again.

Outcomes: :class:`Received` (``accepted`` lines stored, 0 when there was nothing to store;
``rejected`` units the decoder dropped); :class:`~service.sources.http.decoding.BodyRefused`
for a body refused whole (already counted: 400, 413, 415, or 503 when the memory budget is
in use); :class:`NotStored` when the sink failed (logged at a bounded rate) or the endpoint
is not started: the collector retries. A client's ``Idempotency-Key`` becomes the batch's
chunk id (namespaced by source), so a retried request is not applied twice.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio

from service.ingest.budget import BudgetExhausted, Lease, MiB
from service.ingest.joiner import Joiner
from service.ratelog import RateLimitedLog
from service.records import LogRecord
from service.sources.base import Sink, SourceHealth
from service.sources.http.decoding import MAX_DECOMPRESSED_BYTES, Decoded, refuse_body

MAX_BODY = 32 * MiB  # as sent (compressed); Fluent Bit chunks are a few MiB at most
IDLE_FLUSH_S = 30.0
log = logging.getLogger("vllm_sentinel.api")
_store_log = RateLimitedLog(log)

Reader = Callable[[], Awaitable[bytes]]
# decoder(body, lease=lease) -> (records, rejected); raises BodyRefused
Decoder = Callable[..., Decoded]


@dataclass(frozen=True, slots=True)
class Received:
    """A request's records are stored (``accepted`` lines, after joining)."""

    accepted: int
    rejected: int


class NotStored(Exception):
    """The sink could not store the batch (already logged); the client should retry."""


class HttpEndpoint:
    """One HTTP source: its joiner, its limits, its calls to the sink."""

    def __init__(
        self,
        source: str,
        *,
        max_body: int = MAX_BODY,
        max_decompressed: int = MAX_DECOMPRESSED_BYTES,
        idle_flush_s: float = IDLE_FLUSH_S,
    ) -> None:
        self.source = source
        self.max_body = max_body  # for the route's reader
        self.max_decompressed = max_decompressed
        self.idle_flush_s = idle_flush_s
        self.joiner = Joiner(source=source)
        self.sink: Sink | None = None  # set by start()

    async def start(self, sink: Sink) -> None:
        """Take requests, handing their records to ``sink``."""
        self.sink = sink

    async def stop(self) -> None:
        """Take no more requests; store the lines still held unfinished (logged when the
        sink fails)."""
        sink, self.sink = self.sink, None
        rest = self.joiner.flush()
        if rest and sink is not None:
            try:
                await sink.submit(rest, source=self.source)
            except Exception:
                log.exception("api: could not store the unfinished lines held at shutdown")

    def health(self) -> SourceHealth:
        return SourceHealth(self.source, self.sink is not None, {"held_lines": len(self.joiner)})

    async def receive(
        self, read: Reader, decode: Decoder, idempotency_key: str | None = None
    ) -> Received:
        """Read, decode, join and store one request's body (see the module docstring).
        What ``read`` raises (the route's own refusals) passes through unchanged."""
        sink = self.sink
        if sink is None:
            raise NotStored("pipeline not available")
        body = await read()
        lease = Lease(self.max_decompressed)
        try:
            lease.hold(len(body))
            work = functools.partial(decode, body, lease=lease)
            del body  # only the decoder holds it now
            records, rejected = await anyio.to_thread.run_sync(work)
            del work
        except BudgetExhausted as exc:
            raise refuse_body(self.source, "memory_budget", str(exc)) from None
        finally:
            lease.release()
        joiner = self.joiner
        mark = joiner.checkpoint()
        records = joiner.feed(records) + joiner.flush_idle(self.idle_flush_s)
        if records:
            try:
                await self._submit(sink, records, self.chunk_id(idempotency_key))
            except NotStored:
                joiner.rollback(mark)  # the collector resends the body, chunks and all
                raise
        return Received(len(records), rejected)

    def chunk_id(self, idempotency_key: str | None) -> str | None:
        """A client-given idempotency key, namespaced; Fluent Bit and Fluentd send none."""
        if not idempotency_key:
            return None
        return f"{self.source}:" + hashlib.sha256(idempotency_key.encode()).hexdigest()[:32]

    async def _submit(self, sink: Sink, records: list[LogRecord], chunk_id: str | None) -> None:
        try:
            await sink.submit(records, source=self.source, chunk_id=chunk_id)
        except Exception as exc:  # noqa: BLE001 - the collector retries
            _store_log.error(
                ("pipeline_refused", self.source),
                "%s: pipeline refused a batch of %d records",
                self.source,
                len(records),
                exc_info=True,
            )
            raise NotStored(f"not stored, retry: {type(exc).__name__}") from None


def http_sources(enabled: bool) -> tuple[HttpEndpoint, ...]:
    """The endpoints of ``POST /ingest`` (``http``) and ``POST /v1/logs`` (``otlp``); none
    when ``sources.http`` is off."""
    return (HttpEndpoint("http"), HttpEndpoint("otlp")) if enabled else ()
