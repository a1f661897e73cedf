"""What ``POST /ingest`` and ``POST /v1/logs`` share, free of the web framework: the route
turns HTTP into a call of :meth:`HttpEndpoint.receive` and its outcome back into HTTP.

For one request the endpoint reads the body (with the route's reader, which refuses one over
``max_body`` bytes as sent, :data:`MAX_BODY`), charges it to a
:class:`~service.ingest.budget.Lease` of ``max_decompressed`` bytes against the process-wide
budget, and decodes it off the event loop with the route's decoder
(:func:`~service.sources.http.body.decode_body`,
:func:`~service.sources.http.otlp.decode_export`), which charges what it inflates and parses
to the same lease; the lease goes back when decoding ends. The records then pass the
endpoint's joiner, which holds the runtime chunks of an unfinished line (CRI ``P``) across
requests, as the Forward server does: a line comes out when its closing chunk arrives,
after :data:`IDLE_FLUSH_S` (with the next request), or at shutdown
(:meth:`HttpEndpoint.flush`).
Collectors with ``multiline.parser docker, cri`` already send whole lines. What comes out is
submitted to the sink, which returns once it is stored; when it fails, the joiner is put
back as it was before the request, since the collector sends the whole body again.

Outcomes: :class:`Received` (``accepted`` lines stored, 0 when there was nothing to store;
``rejected`` units the decoder dropped); :class:`~service.sources.http.body.BodyRefused` for
a body refused whole (already counted: 400, 413, 415, or 503 when the memory budget is in
use); :class:`NotStored` when the sink failed (logged at a bounded rate): the collector
retries. A client's ``Idempotency-Key`` becomes the batch's chunk id (namespaced by source),
so a retried request is not applied twice.

One endpoint per source and app (:func:`endpoint_of`), the one owner of that source's joiner.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio

from service.ingest.budget import BudgetExhausted, Lease, MiB
from service.ingest.joiner import Joiner
from service.ratelog import RateLimitedLog, reject
from service.records import LogRecord
from service.sources.base import Sink, SourceHealth
from service.sources.http.body import MAX_DECOMPRESSED_BYTES, BodyRefused

MAX_BODY = 32 * MiB  # as sent (compressed); Fluent Bit chunks are a few MiB at most
IDLE_FLUSH_S = 30.0
log = logging.getLogger("vllm_sentinel.api")
_store_log = RateLimitedLog(log)

Reader = Callable[[], Awaitable[bytes]]
# decoder(body, lease=lease) -> (records, rejected); raises BodyRefused
Decoder = Callable[..., tuple[list[LogRecord], int]]


@dataclass(frozen=True, slots=True)
class Received:
    """A request's records are stored (``accepted`` lines, after joining)."""

    accepted: int
    rejected: int


class NotStored(Exception):
    """The sink could not store the batch (already logged); the client should retry."""


class HttpEndpoint:
    """One HTTP source of one app: its joiner, its limits, its calls to the sink."""

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

    async def receive(
        self, sink: Sink, read: Reader, decode: Decoder, idempotency_key: str | None = None
    ) -> Received:
        """Read, decode, join and store one request's body (see the module docstring).
        What ``read`` raises (the route's own refusals) passes through unchanged."""
        body = await read()
        lease = Lease(self.max_decompressed)
        try:
            lease.hold(len(body))
            work = functools.partial(decode, body, lease=lease)
            del body  # only the decoder holds it now
            records, rejected = await anyio.to_thread.run_sync(work)
            del work
        except BudgetExhausted as exc:
            reject(self.source, "memory_budget", str(exc))
            raise BodyRefused(503, "memory_budget", str(exc)) from None
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

    async def flush(self, sink: Sink) -> None:
        """Store the lines still held unfinished (at shutdown)."""
        rest = self.joiner.flush()
        if rest:
            await sink.submit(rest, source=self.source)

    def health(self) -> SourceHealth:
        return SourceHealth(self.source, True, {"held_lines": len(self.joiner)})

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


def endpoint_of(state: Any, source: str) -> HttpEndpoint:
    """The endpoint of ``source`` kept in an app's ``state`` (made at its first request, so
    it lives as long as the app)."""
    endpoints: dict[str, HttpEndpoint] | None = getattr(state, "http_endpoints", None)
    if endpoints is None:
        endpoints = state.http_endpoints = {}
    endpoint = endpoints.get(source)
    if endpoint is None:
        endpoint = endpoints[source] = HttpEndpoint(source)
    return endpoint


async def flush_endpoint(state: Any, source: str, sink: Sink | None) -> None:
    """Store what the app's endpoint of ``source`` still holds (at shutdown)."""
    endpoints: dict[str, HttpEndpoint] = getattr(state, "http_endpoints", None) or {}
    endpoint = endpoints.get(source)
    if endpoint is not None and sink is not None:
        await endpoint.flush(sink)
