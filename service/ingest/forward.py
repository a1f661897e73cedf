"""Fluentd Forward Protocol v1 server (msgpack over TCP, optional TLS and shared key).

Accepts all four modes — Message ``[tag, time, record, option?]``, Forward ``[tag,
[[time, record], ...], option?]``, PackedForward ``[tag, bin|str, option?]`` and
CompressedPackedForward (gzip, ``option.compressed == "gzip"``) — with integer or EventTime
times (and Fluent Bit's ``[[time, metadata], record]`` entries), ``nil`` heartbeats and the
``option`` map: ``chunk`` is answered with ``{"ack": chunk}`` only after ``sink`` returned
(the sink must store durably before returning: that gives at-least-once), ``fluent_signal``
other than 0 (metrics, traces) is acknowledged and dropped, ``size`` is informational.

With ``chunk_ids=True`` a message carrying a ``chunk`` is its own batch and the sink is called
as ``sink(records, chunk_id)`` (``chunk_id`` = ``forward:<chunk>``, None for messages without
one); it returns False when that chunk was stored before — a client resends a chunk whose ack
it did not get — and the server then acks it again without applying it twice.

Every complete message read in one go is decoded into one batch for the sink. Bad input is
counted with :func:`service.metrics.reject` and never stops the server: a malformed msgpack
stream or an over-size frame drops that connection (the stream cannot be resynchronised), a
well-formed message of an unknown shape is skipped. Runtime chunks (CRI ``P``) are joined
across messages per stream; a line whose closing chunk has not come within
``partial_timeout`` seconds, or is still unfinished at :meth:`ForwardServer.stop`, is passed
to the sink as it is.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import msgpack

from service import metrics
from service.ingest.compression import GZIP_MAGIC, gunzip
from service.ingest.envelope import MAX_LINE, decode_record
from service.ingest.forward_handshake import Handshake
from service.ingest.joiner import Joiner
from service.ingest.msgpack_events import new_unpacker, split_event, to_bytes, unpack_all
from service.records import LogRecord

Sink = Callable[..., Awaitable[Any]]  # sink(records) or, with chunk_ids, sink(records, chunk_id)

DEFAULT_PORT = 24224
_READ_SIZE = 1 << 18
log = logging.getLogger("vllm_sentinel.ingest.forward")


def tls_context(certfile: str, keyfile: str, cafile: str | None = None) -> ssl.SSLContext:
    """Server TLS context from PEM paths; with ``cafile`` clients must present a certificate
    signed by it (mutual TLS)."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(certfile, keyfile)
    if cafile:
        ctx.load_verify_locations(cafile)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def chunk_key(chunk: Any) -> str:
    """The store's id of a Forward chunk (``forward:`` + the client's chunk id)."""
    if isinstance(chunk, bytes | bytearray):
        return "forward:" + bytes(chunk).hex()
    return f"forward:{chunk}"


class _DropConnection(Exception):
    """The byte stream can no longer be trusted (already counted)."""


class ForwardServer:
    """asyncio Forward server; ``await start()``, ``await stop()``, ``port`` once started."""

    def __init__(
        self,
        sink: Sink,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        shared_key: str | None = None,
        tls: ssl.SSLContext | None = None,
        max_message_bytes: int = 32 << 20,
        *,
        self_hostname: str | None = None,
        users: Mapping[str, str] | None = None,
        max_decompressed_bytes: int | None = None,
        max_line: int = MAX_LINE,
        join: bool = True,
        partial_timeout: float = 5.0,
        handshake_timeout: float = 10.0,
        source: str = "forward",
        chunk_ids: bool = False,
    ) -> None:
        self.sink = sink
        self.chunk_ids = chunk_ids
        self.host = host
        self._port = port
        self.shared_key = shared_key
        self.tls = tls
        self.max_message_bytes = max_message_bytes
        self.max_decompressed_bytes = max_decompressed_bytes or 4 * max_message_bytes
        self.self_hostname = self_hostname or socket.gethostname()
        self.users = dict(users) if users else None
        self.max_line = max_line
        self.handshake_timeout = handshake_timeout
        self.source = source
        self.joiner = Joiner(max_line, source=source) if join else None
        self.partial_timeout = partial_timeout
        self._flusher: asyncio.Task[None] | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[Any]] = set()
        self._packer = msgpack.Packer(use_bin_type=True, unicode_errors="surrogateescape")
        self._lines_in = metrics.LINES_IN.labels(source=source)
        if users and shared_key is None:
            raise ValueError(
                "username/password auth needs a shared_key (it rides on the handshake)"
            )

    @property
    def port(self) -> int:
        """The bound port (the real one when constructed with port 0)."""
        if self._server is not None and self._server.sockets:
            return self._server.sockets[0].getsockname()[1]
        return self._port

    async def start(self) -> None:
        """Bind and start accepting connections."""
        self._server = await asyncio.start_server(
            self._handle, self.host, self._port, ssl=self.tls, limit=_READ_SIZE
        )
        if self.joiner is not None:
            self._flusher = asyncio.create_task(self._flush_idle_lines())
        log.info("forward server listening on %s:%d", self.host, self.port)

    async def stop(self) -> None:
        """Stop accepting, close open connections, flush unfinished lines to the sink."""
        if self._server is not None:
            self._server.close()
        if self._flusher is not None:
            self._flusher.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)
            self._flusher = None
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        if self.joiner is not None:
            rest = self.joiner.flush()
            if rest:
                await self.sink(rest)
                self._lines_in.inc(len(rest))

    async def _flush_idle_lines(self) -> None:
        """Emit lines whose closing chunk never came (the container died mid-line)."""
        assert self.joiner is not None
        while True:
            await asyncio.sleep(self.partial_timeout / 2)
            stale = self.joiner.flush_idle(self.partial_timeout)
            if stale:
                try:
                    await self.sink(stale)
                    self._lines_in.inc(len(stale))
                except Exception:
                    log.exception("forward: sink refused %d unfinished lines", len(stale))

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        peer = writer.get_extra_info("peername")
        unpacker = new_unpacker(self.max_message_bytes)
        try:
            if self.shared_key is not None and not await self._handshake(reader, writer, unpacker):
                return
            while True:
                batches, healthy = self._batches(unpacker)
                for records, acks, chunk_id in batches:
                    await self._deliver(records, chunk_id)
                    if acks:
                        for chunk in acks:
                            writer.write(self._packer.pack({"ack": chunk}))
                        await writer.drain()
                if not healthy:
                    return
                data = await reader.read(_READ_SIZE)
                if not data:
                    return
                self._feed(unpacker, data)
        except _DropConnection:
            pass
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, TimeoutError) as exc:
            log.debug("forward connection %s ended: %s", peer, exc)
        except Exception:
            log.exception("forward connection %s failed; no ack sent for its pending data", peer)
        finally:
            writer.close()
            if task is not None:
                self._connections.discard(task)

    async def _deliver(self, records: list[LogRecord], chunk_id: str | None) -> None:
        """Join runtime chunks and hand the lines to the sink (raises when it refused them;
        the joiner then forgets what this batch fed it, since the client resends it)."""
        mark = None
        if self.joiner is not None and records:
            mark = self.joiner.checkpoint()
            records = self.joiner.feed(records)
        if not records and chunk_id is None:
            return
        try:
            if self.chunk_ids:
                applied = await self.sink(records, chunk_id)
            else:
                applied = await self.sink(records)
        except Exception:
            if mark is not None and self.joiner is not None:
                self.joiner.rollback(mark)  # the client will resend these chunks
            raise
        if applied is False:  # a resent chunk, stored before: keep none of its pieces
            if mark is not None and self.joiner is not None:
                self.joiner.rollback(mark)
            return
        self._lines_in.inc(len(records))

    def _feed(self, unpacker: msgpack.Unpacker, data: bytes) -> None:
        try:
            unpacker.feed(data)
        except msgpack.BufferFull:
            metrics.reject(self.source, "oversize", f"frame over {self.max_message_bytes} bytes")
            raise _DropConnection from None

    async def _handshake(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, unpacker: Any
    ) -> bool:
        assert self.shared_key is not None
        shake = Handshake(self.shared_key, self.self_hostname, self.users)
        writer.write(self._packer.pack(shake.helo()))
        await writer.drain()
        try:
            ping = await asyncio.wait_for(
                self._next_object(reader, unpacker), self.handshake_timeout
            )
        except TimeoutError:
            metrics.reject(self.source, "auth_failed", "no PING before the handshake timeout")
            return False
        ok, reason, salt = shake.check_ping(ping)
        writer.write(self._packer.pack(shake.pong(ok, reason, salt)))
        await writer.drain()
        if not ok:
            metrics.reject(self.source, "auth_failed", reason)
        return ok

    async def _next_object(self, reader: asyncio.StreamReader, unpacker: Any) -> Any:
        while True:
            try:
                return next(unpacker)
            except StopIteration:
                pass
            except Exception as exc:
                metrics.reject(self.source, "bad_msgpack", str(exc))
                raise _DropConnection from None
            data = await reader.read(_READ_SIZE)
            if not data:
                raise _DropConnection
            self._feed(unpacker, data)

    def _drain(self, unpacker: Any) -> tuple[list[LogRecord], list[Any], bool]:
        """Decode every complete message buffered: (records, chunk ids to ack, stream ok)."""
        records: list[LogRecord] = []
        acks: list[Any] = []
        try:
            for message in unpacker:
                chunk = self._message(message, records)
                if chunk is not None:
                    acks.append(chunk)
        except Exception as exc:  # malformed msgpack: the rest of the stream is unusable
            metrics.reject(self.source, "bad_msgpack", str(exc))
            return records, acks, False
        return records, acks, True

    def _batches(self, unpacker: Any) -> tuple[list[tuple[list[LogRecord], list[Any],
                                                          str | None]], bool]:
        """Every complete message buffered as batches ``(records, chunks to ack, chunk id)``,
        and whether the stream is still usable: one batch, or with ``chunk_ids`` one per
        chunk-carrying message (its own records only) and one per run of the others."""
        if not self.chunk_ids:
            records, acks, healthy = self._drain(unpacker)
            return ([(records, acks, None)] if records or acks else []), healthy
        batches: list[tuple[list[LogRecord], list[Any], str | None]] = []
        records = []
        healthy = True
        try:
            for message in unpacker:
                mine: list[LogRecord] = []
                chunk = self._message(message, mine)
                if chunk is None:
                    records += mine
                    continue
                if records:  # what came before it is not part of the chunk
                    batches.append((records, [], None))
                    records = []
                batches.append((mine, [chunk], chunk_key(chunk)))
        except Exception as exc:  # malformed msgpack: the rest of the stream is unusable
            metrics.reject(self.source, "bad_msgpack", str(exc))
            healthy = False
        if records:
            batches.append((records, [], None))
        return batches, healthy

    def _message(self, message: Any, out: list[LogRecord]) -> Any:
        """Decode one Forward message into ``out``; return its ``chunk`` option (or None)."""
        if message is None:
            return None  # heartbeat
        if type(message) is not list or len(message) < 2:
            metrics.reject(self.source, "bad_message", repr(message)[:200])
            return None
        tag, second = message[0], message[1]
        if type(tag) is not str:
            if type(tag) is not bytes:
                metrics.reject(self.source, "bad_message", repr(message)[:200])
                return None
            tag = tag.decode("utf-8", "replace")  # a client that packs the tag as bin
        kind = type(second)
        if kind is list:
            option = message[2] if len(message) > 2 else None
            entries = second
        elif kind is bytes or kind is str:
            option = message[2] if len(message) > 2 else None
            entries = self._packed(second, option)
        elif len(message) >= 3:
            option = message[3] if len(message) > 3 else None
            entries = [[second, message[2]]]
        else:
            metrics.reject(self.source, "bad_message", repr(message)[:200])
            return None
        if type(option) is not dict:
            option = None
        signal = option.get("fluent_signal", 0) if option else 0
        if signal not in (0, None):
            metrics.reject(self.source, "not_logs", f"fluent_signal={signal!r} tag={tag}")
        else:
            self._entries(tag, entries, out)
        return option.get("chunk") if option else None

    def _packed(self, blob: str | bytes, option: dict[str, Any] | None) -> list[Any]:
        data = to_bytes(blob) or b""
        compressed = type(option) is dict and option.get("compressed") == "gzip"
        if compressed or data.startswith(GZIP_MAGIC):
            try:
                data = gunzip(data, self.max_decompressed_bytes)
            except ValueError as exc:
                metrics.reject(self.source, "bad_gzip", str(exc))
                return []
        entries: list[Any] = []
        try:
            for entry in unpack_all(data):
                entries.append(entry)
        except Exception as exc:
            metrics.reject(self.source, "bad_msgpack", f"packed entries: {exc}")
        return entries

    def _entries(self, tag: str, entries: list[Any], out: list[LogRecord]) -> None:
        source = self.source
        max_line = self.max_line
        for entry in entries:
            event = split_event(entry)
            if event is None:
                metrics.reject(source, "bad_entry", repr(entry)[:200])
                continue
            t, record = event
            out.extend(
                decode_record(record, tag=tag, time=t, stream=tag, source=source, max_line=max_line)
            )
