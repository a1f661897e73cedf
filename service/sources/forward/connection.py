"""One Forward connection: the shared-key handshake when a key is set, then read → decode →
deliver → ack until the peer closes, falls silent or sends what cannot be read on.

* ``{"ack": chunk}`` is written only after ``deliver`` returned for the batch holding the
  chunk (the sink stored it): at least once. When ``deliver`` raises, the connection is
  closed without an ack for its pending data, so the client resends it.
* Before the handshake ends a peer may send at most :data:`HANDSHAKE_MAX_BYTES`, and its PING
  must come within ``handshake_timeout`` seconds.
* A connection that sends nothing for ``idle_timeout`` seconds (or does not read its acks
  for as long) is closed.
* The unfinished frame a connection holds is charged to the server-wide
  :class:`FrameBudget`; the connection whose frame would pass it is closed (no ack).

Closes are counted in ``sentinel_forward_closed_total{reason}``, refusals in
``sentinel_rejects_total``; a failure never reaches the server's accept loop.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgpack
from prometheus_client import Counter, Gauge

from service import metrics
from service.ingest import gcpause
from service.ingest.msgpack_events import BuildCounter, new_unpacker
from service.ratelog import RateLimitedLog, reject
from service.records import LogRecord
from service.sources.forward.handshake import Handshake
from service.sources.forward.messages import Batch, DropConnection, ForwardDecoder, Frames

READ_SIZE = 1 << 18
INLINE_BYTES = 1 << 18  # buffered bytes decoded on the event loop; more: in a thread
HANDSHAKE_MAX_BYTES = 64 << 10  # what a peer may send before it is authenticated
log = logging.getLogger("vllm_sentinel.ingest.forward")
_limited = RateLimitedLog(log)

PENDING_BYTES = Gauge(
    "sentinel_forward_pending_bytes",
    "Bytes of unfinished Forward frames held, all connections together.",
    registry=metrics.REGISTRY,
)
CLOSED = Counter(
    "sentinel_forward_closed_total",
    "Forward connections closed by the server, by reason (idle_timeout, "
    "too_many_connections, frame_budget, fd_exhausted).",
    ["reason"],
    registry=metrics.REGISTRY,
)

# deliver(records, chunk_id): returns once the sink stored the batch, raises if it did not
Deliver = Callable[[list[LogRecord], str | None], Awaitable[None]]


class _IdleConnection(Exception):
    """Nothing came (or no ack was read) for ``idle_timeout`` seconds."""


class FrameBudget:
    """Bytes of unfinished frames held by all connections together, against ``limit``."""

    __slots__ = ("limit", "held")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def account(self, frames: Frames) -> bool:
        """Charge a connection's unfinished frame; False when the total would pass the
        limit (the caller closes the connection, which releases it)."""
        pending = frames.fed - frames.boundary
        delta = pending - frames.pending
        frames.pending = pending
        self.held += delta
        PENDING_BYTES.inc(delta)
        return delta <= 0 or self.held <= self.limit

    def release(self, frames: Frames) -> None:
        if frames.pending:
            self.held -= frames.pending
            PENDING_BYTES.dec(frames.pending)
            frames.pending = 0


@dataclass(frozen=True, slots=True)
class ConnectionSettings:
    """What a connection needs of the server's settings."""

    idle_timeout: float
    handshake_timeout: float
    shared_key: str | None
    self_hostname: str
    users: Mapping[str, str] | None


class Connection:
    """One accepted connection, from its first byte to its close (:meth:`run`)."""

    __slots__ = (
        "reader",
        "writer",
        "settings",
        "decoder",
        "budget",
        "deliver",
        "_packer",
        "_gc_held",
    )

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        settings: ConnectionSettings,
        decoder: ForwardDecoder,
        budget: FrameBudget,
        deliver: Deliver,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.settings = settings
        self.decoder = decoder
        self.budget = budget
        self.deliver = deliver
        self._packer = msgpack.Packer(use_bin_type=True, unicode_errors="surrogateescape")
        self._gc_held = False  # the collector paused for this connection's large message

    async def run(self) -> None:
        """Serve the connection until it ends; never raises."""
        writer = self.writer
        decoder = self.decoder
        peer = writer.get_extra_info("peername")
        built = BuildCounter()  # a message of millions of empty maps is refused as it is built
        unpacker = new_unpacker(decoder.max_message_bytes, built)
        frames = Frames(built)
        try:
            if self.settings.shared_key is not None and not await self._handshake(unpacker, frames):
                return
            while True:
                batches, healthy = await self._decode(unpacker, frames)
                if not self.budget.account(frames):
                    CLOSED.labels(reason="frame_budget").inc()
                    reject(
                        decoder.source,
                        "frame_budget",
                        f"{peer!r}: unfinished frame of {frames.pending} bytes; "
                        f"{self.budget.held} held, budget {self.budget.limit}",
                    )
                    return
                for records, acks, chunk_id in batches:
                    await self.deliver(records, chunk_id)
                    if acks:
                        for chunk in acks:
                            writer.write(self._packer.pack({"ack": chunk}))
                        await self._drain_writer()
                if not healthy:
                    return
                data = await self._read()
                if not data:
                    return
                decoder.feed(unpacker, data)
                frames.fed += len(data)
        except DropConnection:
            pass
        except _IdleConnection:
            log.debug(
                "forward connection %s closed: idle for %.0f s", peer, self.settings.idle_timeout
            )
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, TimeoutError) as exc:
            log.debug("forward connection %s ended: %s", peer, exc)
        except Exception:
            _limited.error(
                "connection_failed",
                "forward connection %s failed; no ack sent for its pending data",
                peer,
                exc_info=True,
            )
        finally:
            self._release_gc()
            self.budget.release(frames)
            writer.close()

    async def _decode(self, unpacker: Any, frames: Frames) -> tuple[list[Batch], bool]:
        """The complete messages buffered, decoded: on the event loop when they are small,
        else in a thread, one connection at a time (the decoder's gate), so that a message
        of a million entries (or four at once) never holds the probes back."""
        decoder = self.decoder
        if frames.fed - frames.boundary <= INLINE_BYTES and not self._gc_held:
            return decoder.batches(unpacker, frames)
        if not self._gc_held:  # from the first large piece of a message to its end
            gcpause.hold()
            self._gc_held = True
        try:
            async with decoder.gate:
                return await asyncio.to_thread(decoder.batches, unpacker, frames)
        finally:
            if frames.fed - frames.boundary <= INLINE_BYTES:
                self._release_gc()

    def _release_gc(self) -> None:
        if self._gc_held:
            self._gc_held = False
            gcpause.release()

    async def _read(self) -> bytes:
        try:
            return await asyncio.wait_for(self.reader.read(READ_SIZE), self.settings.idle_timeout)
        except TimeoutError:
            CLOSED.labels(reason="idle_timeout").inc()
            raise _IdleConnection from None

    async def _drain_writer(self) -> None:
        try:
            await asyncio.wait_for(self.writer.drain(), self.settings.idle_timeout)
        except TimeoutError:  # the client does not read its acks
            CLOSED.labels(reason="idle_timeout").inc()
            raise _IdleConnection from None

    async def _handshake(self, unpacker: Any, frames: Frames) -> bool:
        s = self.settings
        assert s.shared_key is not None
        source = self.decoder.source
        shake = Handshake(s.shared_key, s.self_hostname, s.users)
        self.writer.write(self._packer.pack(shake.helo()))
        await self._drain_writer()
        try:
            ping = await asyncio.wait_for(self._next_object(unpacker, frames), s.handshake_timeout)
        except TimeoutError:
            reject(source, "auth_failed", "no PING before the handshake timeout")
            return False
        ok, reason, salt = shake.check_ping(ping)
        self.writer.write(self._packer.pack(shake.pong(ok, reason, salt)))
        await self._drain_writer()
        if not ok:
            reject(source, "auth_failed", reason)
        return ok

    async def _next_object(self, unpacker: Any, frames: Frames) -> Any:
        source = self.decoder.source
        fed = 0
        while True:
            try:
                obj = next(unpacker)
                frames.boundary = unpacker.tell()
                return obj
            except StopIteration:
                pass
            except Exception as exc:
                reject(source, "bad_msgpack", str(exc))
                raise DropConnection from None
            data = await self.reader.read(READ_SIZE)
            if not data:
                raise DropConnection
            fed += len(data)
            if fed > HANDSHAKE_MAX_BYTES:
                reject(
                    source,
                    "auth_failed",
                    f"more than {HANDSHAKE_MAX_BYTES} bytes before the handshake ended",
                )
                raise DropConnection
            self.decoder.feed(unpacker, data)
            frames.fed += len(data)
