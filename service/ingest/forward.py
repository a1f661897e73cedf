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
counted (``sentinel_rejects_total``) and logged at a bounded rate (:mod:`service.ratelog`),
and never stops the server: a malformed msgpack stream or an over-size frame drops that
connection (the stream cannot be resynchronised), a well-formed message of an unknown shape
is skipped, a message with a tag over :data:`~service.ingest.http_body.MAX_TAG` characters
or more than ``max_records`` entries is dropped and acked (resending it would not help).
Runtime chunks (CRI ``P``) are joined across messages per stream; a line whose closing chunk
has not come within ``partial_timeout`` seconds, or is still unfinished at
:meth:`ForwardServer.stop`, is passed to the sink as it is.

Exposure and resources:

* Without a ``shared_key`` the server refuses to start on a non-loopback address
  (:class:`~service.netguard.InsecureConfigError`) unless ``allow_unauthenticated``.
* At most ``max_connections`` connections at once; one more is accepted and closed at once
  (counted). The cap is lowered, with a warning, to leave ``FD_RESERVE`` descriptors of the
  process limit to the API and the store.
* A connection that sends nothing for ``idle_timeout`` seconds (or does not read its acks
  for as long) is closed.
* The bytes of unfinished frames held across all connections are bounded by
  ``max_pending_bytes``: the connection whose frame would pass it is closed (counted, no
  ack, so the client resends). Before the handshake a peer may send at most
  ``HANDSHAKE_MAX_BYTES``.
* Gzip entries are inflated under the process-wide budget of :mod:`service.ingest.budget`.
* ``accept()`` failing for lack of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM)
  backs off (up to ``ACCEPT_BACKOFF_MAX`` s), closes the connections waiting in the backlog
  with a spare descriptor, and logs at most one line per 10 s with the count suppressed.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import os
import socket
import ssl
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import msgpack
from prometheus_client import Counter, Gauge

from service import metrics
from service.ingest.budget import BudgetExhausted, Lease, gunzip_bounded
from service.ingest.compression import GZIP_MAGIC, DecompressedTooLarge
from service.ingest.envelope import MAX_LINE, decode_record
from service.ingest.forward_handshake import Handshake
from service.ingest.http_body import MAX_RECORDS, MAX_TAG
from service.ingest.joiner import Joiner
from service.ingest.msgpack_events import new_unpacker, split_event, to_bytes, unpack_all
from service.netguard import InsecureConfigError, is_loopback
from service.ratelog import RateLimitedLog, brief, reject
from service.records import LogRecord

Sink = Callable[..., Awaitable[Any]]  # sink(records) or, with chunk_ids, sink(records, chunk_id)

DEFAULT_PORT = 24224
_READ_SIZE = 1 << 18
MAX_CONNECTIONS = 512
IDLE_TIMEOUT_S = 120.0
MAX_PENDING_BYTES = 128 << 20  # unfinished frames, all connections together
HANDSHAKE_MAX_BYTES = 64 << 10  # what a peer may send before it is authenticated
FD_RESERVE = 128  # descriptors of RLIMIT_NOFILE left to the API, the store and files
ACCEPT_BACKOFF_MIN = 0.05
ACCEPT_BACKOFF_MAX = 2.0
_RESOURCE_ERRNOS = frozenset((errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM))
log = logging.getLogger("vllm_sentinel.ingest.forward")
_limited = RateLimitedLog(log)

CONNECTIONS = Gauge(
    "sentinel_forward_connections", "Open Forward connections.", registry=metrics.REGISTRY
)
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
ACCEPT_ERRORS = Counter(
    "sentinel_forward_accept_errors_total",
    "accept() failures on the Forward port for lack of descriptors or memory, by errno.",
    ["errno"],
    registry=metrics.REGISTRY,
)


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


class _IdleConnection(Exception):
    """Nothing came (or no ack was read) for ``idle_timeout`` seconds."""


class _Accepted:
    """An accepted socket until its connection task has started."""

    __slots__ = ("conn", "peer", "started")

    def __init__(self, conn: socket.socket, peer: Any) -> None:
        self.conn = conn
        self.peer = peer
        self.started = False


class _Frames:
    """Per-connection byte accounting: fed in total, consumed up to the end of the last
    complete message, and the unfinished remainder charged to the server's budget."""

    __slots__ = ("fed", "boundary", "pending")

    def __init__(self) -> None:
        self.fed = 0
        self.boundary = 0
        self.pending = 0


def _open_spare() -> int | None:
    try:
        return os.open(os.devnull, os.O_RDONLY)
    except OSError:
        return None


def _fd_soft_limit() -> int | None:
    try:
        import resource

        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY else soft


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
        max_connections: int = MAX_CONNECTIONS,
        idle_timeout: float = IDLE_TIMEOUT_S,
        max_pending_bytes: int = MAX_PENDING_BYTES,
        max_records: int = MAX_RECORDS,
        allow_unauthenticated: bool = False,
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
        self.max_connections = max_connections
        self.idle_timeout = idle_timeout
        self.max_pending_bytes = max_pending_bytes
        self.max_records = max_records
        self.allow_unauthenticated = allow_unauthenticated
        self.pending_bytes = 0  # unfinished frames held, all connections
        self.open_connections = 0
        self._flusher: asyncio.Task[None] | None = None
        self._listeners: list[socket.socket] = []
        self._acceptors: list[asyncio.Task[None]] = []
        self._spare_fd: int | None = None
        self._connections: set[asyncio.Task[Any]] = set()
        self._packer = msgpack.Packer(use_bin_type=True, unicode_errors="surrogateescape")
        self._lines_in = metrics.LINES_IN.labels(source=source)
        if users and shared_key is None:
            raise ValueError(
                "username/password auth needs a shared_key (it rides on the handshake)"
            )
        if shared_key is not None and not shared_key.strip():
            raise ValueError("forward shared_key is empty or whitespace only")

    @property
    def port(self) -> int:
        """The bound port (the real one when constructed with port 0)."""
        if self._listeners:
            return self._listeners[0].getsockname()[1]
        return self._port

    def check_exposure(self) -> None:
        """Refuse to listen beyond loopback without a shared key unless allowed (as the
        API refuses to start without a token, :func:`service.api.auth.check_auth_config`)."""
        if self.shared_key is not None or is_loopback(self.host):
            return
        if not self.allow_unauthenticated:
            raise InsecureConfigError(
                f"refusing to serve the forward protocol on {self.host or '*'}:{self._port} "
                "without a shared key: anyone who reaches the port could inject log lines "
                "(set SENTINEL_SOURCES__FORWARD__SHARED_KEY, bind 127.0.0.1, or set "
                "sources.forward.allow_unauthenticated: true behind your own network policy)"
            )
        log.warning(
            "forward: NO AUTHENTICATION on %s:%s: anyone who reaches the port can "
            "inject log lines (sources.forward.allow_unauthenticated is set)",
            self.host or "*",
            self._port,
        )

    async def start(self) -> None:
        """Bind and start accepting connections."""
        self.check_exposure()
        soft = _fd_soft_limit()
        if soft is not None and self.max_connections > soft - FD_RESERVE:
            cap = max(1, soft - FD_RESERVE)
            log.warning(
                "forward: at most %d connections instead of %d: the descriptor limit "
                "is %d and %d are kept for the API and the store (raise ulimit -n)",
                cap,
                self.max_connections,
                soft,
                FD_RESERVE,
            )
            self.max_connections = cap
        self._listeners = await self._bind()
        self._spare_fd = _open_spare()
        self._acceptors = [asyncio.create_task(self._accept_loop(sock)) for sock in self._listeners]
        if self.joiner is not None:
            self._flusher = asyncio.create_task(self._flush_idle_lines())
        log.info(
            "forward server listening on %s:%d (at most %d connections, idle timeout %.0f s, %s)",
            self.host,
            self.port,
            self.max_connections,
            self.idle_timeout,
            "shared key" if self.shared_key else "no shared key",
        )

    async def _bind(self) -> list[socket.socket]:
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(
            self.host or None, self._port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        socks: list[socket.socket] = []
        port = self._port
        try:
            for family, kind, proto, _name, addr in dict.fromkeys(infos):
                sock = socket.socket(family, kind, proto)
                socks.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6 and hasattr(socket, "IPV6_V6ONLY"):
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                if port == 0 and len(socks) > 1:  # port 0: one port for every address
                    addr = (addr[0], socks[0].getsockname()[1], *addr[2:])
                sock.bind(addr)
                sock.listen(min(socket.SOMAXCONN, 1024))
                sock.setblocking(False)
        except BaseException:
            for sock in socks:
                sock.close()
            raise
        return socks

    async def stop(self) -> None:
        """Stop accepting, close open connections, flush unfinished lines to the sink."""
        for task in self._acceptors:
            task.cancel()
        await asyncio.gather(*self._acceptors, return_exceptions=True)
        self._acceptors = []
        for sock in self._listeners:
            sock.close()
        if self._flusher is not None:
            self._flusher.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)
            self._flusher = None
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        self._listeners = []
        if self._spare_fd is not None:
            os.close(self._spare_fd)
            self._spare_fd = None
        if self.joiner is not None:
            rest = self.joiner.flush()
            if rest:
                await self._hand(rest, None)
                self._lines_in.inc(len(rest))

    async def _hand(self, records: list[LogRecord], chunk_id: str | None) -> Any:
        """Call the sink as it was given: ``sink(records, chunk_id)`` with ``chunk_ids``
        (``chunk_id`` None for lines that belong to no chunk), else ``sink(records)``."""
        if self.chunk_ids:
            return await self.sink(records, chunk_id)
        return await self.sink(records)

    async def _flush_idle_lines(self) -> None:
        """Emit lines whose closing chunk never came (the container died mid-line)."""
        assert self.joiner is not None
        while True:
            await asyncio.sleep(self.partial_timeout / 2)
            stale = self.joiner.flush_idle(self.partial_timeout)
            if stale:
                try:
                    await self._hand(stale, None)
                    self._lines_in.inc(len(stale))
                except Exception:
                    _limited.error(
                        "sink_unfinished",
                        "forward: sink refused %d unfinished lines",
                        len(stale),
                        exc_info=True,
                    )

    # ---- accepting ----------------------------------------------------------------------

    async def _accept_loop(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        delay = 0.0
        while True:
            try:
                conn, peer = await loop.sock_accept(sock)
            except OSError as exc:
                if exc.errno in _RESOURCE_ERRNOS:
                    delay = min(max(2 * delay, ACCEPT_BACKOFF_MIN), ACCEPT_BACKOFF_MAX)
                    name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
                    ACCEPT_ERRORS.labels(errno=name).inc()
                    shed = self._shed(sock)
                    _limited.error(
                        ("accept", name),
                        "forward: cannot accept connections "
                        "(%s: %s); backing off %.2f s, %d waiting connection(s) "
                        "closed",
                        name,
                        exc.strerror,
                        delay,
                        shed,
                    )
                    await asyncio.sleep(delay)
                    continue
                if exc.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EPERM, errno.EINTR):
                    continue  # the client gave up before we accepted, or a firewall said no
                _limited.error(("accept", "other"), "forward: accept failed: %s", exc)
                await asyncio.sleep(ACCEPT_BACKOFF_MAX)
                continue
            delay = 0.0
            if self.open_connections >= self.max_connections:
                conn.close()
                CLOSED.labels(reason="too_many_connections").inc()
                reject(
                    self.source,
                    "too_many_connections",
                    f"{peer!r}: {self.open_connections} open, at most {self.max_connections}",
                )
                continue
            self.open_connections += 1
            CONNECTIONS.inc()
            accepted = _Accepted(conn, peer)
            task = asyncio.create_task(self._serve(accepted))
            self._connections.add(task)
            task.add_done_callback(functools.partial(self._served, accepted))

    def _served(self, accepted: _Accepted, task: asyncio.Task[Any]) -> None:
        self._connections.discard(task)
        self.open_connections -= 1
        CONNECTIONS.dec()
        if not accepted.started:  # cancelled (stop) before it ran: nobody else closes it
            accepted.conn.close()

    def _shed(self, sock: socket.socket) -> int:
        """Out of descriptors: free the spare one and use it to accept and close the
        connections waiting in the backlog (they get a clean close, not a hang)."""
        if self._spare_fd is None:
            self._spare_fd = _open_spare()
            return 0
        os.close(self._spare_fd)
        self._spare_fd = None
        shed = 0
        try:
            for _ in range(256):
                try:
                    conn, _peer = sock.accept()
                except OSError:
                    break
                conn.close()
                shed += 1
        finally:
            self._spare_fd = _open_spare()
        if shed:
            CLOSED.labels(reason="fd_exhausted").inc(shed)
            metrics.REJECTS.labels(source=self.source, reason="fd_exhausted").inc(shed)
        return shed

    async def _serve(self, accepted: _Accepted) -> None:
        accepted.started = True
        conn = accepted.conn
        loop = asyncio.get_running_loop()
        conn.setblocking(False)
        reader = asyncio.StreamReader(limit=_READ_SIZE)
        protocol = asyncio.StreamReaderProtocol(reader)
        try:  # the transport owns (and on failure closes) the socket from here on
            transport, _ = await loop.connect_accepted_socket(
                lambda: protocol,
                conn,
                ssl=self.tls,
                **({"ssl_handshake_timeout": self.handshake_timeout} if self.tls else {}),
            )
        except (OSError, ssl.SSLError, TimeoutError) as exc:
            log.debug("forward connection %s: TLS handshake failed: %s", accepted.peer, exc)
            conn.close()
            return
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        await self._handle(reader, writer)

    # ---- one connection -------------------------------------------------------------------

    async def _read(self, reader: asyncio.StreamReader) -> bytes:
        try:
            return await asyncio.wait_for(reader.read(_READ_SIZE), self.idle_timeout)
        except TimeoutError:
            CLOSED.labels(reason="idle_timeout").inc()
            raise _IdleConnection from None

    async def _drain_writer(self, writer: asyncio.StreamWriter) -> None:
        try:
            await asyncio.wait_for(writer.drain(), self.idle_timeout)
        except TimeoutError:  # the client does not read its acks
            CLOSED.labels(reason="idle_timeout").inc()
            raise _IdleConnection from None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        unpacker = new_unpacker(self.max_message_bytes)
        frames = _Frames()
        try:
            if self.shared_key is not None and not await self._handshake(
                reader, writer, unpacker, frames
            ):
                return
            while True:
                batches, healthy = self._batches(unpacker, frames)
                if not self._account(frames):
                    CLOSED.labels(reason="frame_budget").inc()
                    reject(
                        self.source,
                        "frame_budget",
                        f"{peer!r}: unfinished frame of {frames.pending} bytes; "
                        f"{self.pending_bytes} held, budget {self.max_pending_bytes}",
                    )
                    return
                for records, acks, chunk_id in batches:
                    await self._deliver(records, chunk_id)
                    if acks:
                        for chunk in acks:
                            writer.write(self._packer.pack({"ack": chunk}))
                        await self._drain_writer(writer)
                if not healthy:
                    return
                data = await self._read(reader)
                if not data:
                    return
                self._feed(unpacker, data)
                frames.fed += len(data)
        except _DropConnection:
            pass
        except _IdleConnection:
            log.debug("forward connection %s closed: idle for %.0f s", peer, self.idle_timeout)
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
            self._release(frames)
            writer.close()

    def _account(self, frames: _Frames) -> bool:
        """Charge this connection's unfinished frame to the budget; False when the total
        would pass it (the caller closes the connection, which releases it)."""
        pending = frames.fed - frames.boundary
        delta = pending - frames.pending
        frames.pending = pending
        self.pending_bytes += delta
        PENDING_BYTES.inc(delta)
        return delta <= 0 or self.pending_bytes <= self.max_pending_bytes

    def _release(self, frames: _Frames) -> None:
        if frames.pending:
            self.pending_bytes -= frames.pending
            PENDING_BYTES.dec(frames.pending)
            frames.pending = 0

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
            applied = await self._hand(records, chunk_id)
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
            reject(self.source, "oversize", f"frame over {self.max_message_bytes} bytes")
            raise _DropConnection from None

    async def _handshake(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        unpacker: Any,
        frames: _Frames | None = None,
    ) -> bool:
        assert self.shared_key is not None
        shake = Handshake(self.shared_key, self.self_hostname, self.users)
        writer.write(self._packer.pack(shake.helo()))
        await self._drain_writer(writer)
        try:
            ping = await asyncio.wait_for(
                self._next_object(reader, unpacker, frames), self.handshake_timeout
            )
        except TimeoutError:
            reject(self.source, "auth_failed", "no PING before the handshake timeout")
            return False
        ok, reason, salt = shake.check_ping(ping)
        writer.write(self._packer.pack(shake.pong(ok, reason, salt)))
        await self._drain_writer(writer)
        if not ok:
            reject(self.source, "auth_failed", reason)
        return ok

    async def _next_object(
        self, reader: asyncio.StreamReader, unpacker: Any, frames: _Frames | None = None
    ) -> Any:
        fed = 0
        while True:
            try:
                obj = next(unpacker)
                if frames is not None:
                    frames.boundary = unpacker.tell()
                return obj
            except StopIteration:
                pass
            except Exception as exc:
                reject(self.source, "bad_msgpack", str(exc))
                raise _DropConnection from None
            data = await reader.read(_READ_SIZE)
            if not data:
                raise _DropConnection
            fed += len(data)
            if fed > HANDSHAKE_MAX_BYTES:
                reject(
                    self.source,
                    "auth_failed",
                    f"more than {HANDSHAKE_MAX_BYTES} bytes before the handshake ended",
                )
                raise _DropConnection
            self._feed(unpacker, data)
            if frames is not None:
                frames.fed += len(data)

    def _messages(self, unpacker: Any, frames: _Frames | None) -> Any:
        """The complete messages buffered; notes where the last one ended."""
        for message in unpacker:
            if frames is not None:
                frames.boundary = unpacker.tell()
            yield message

    def _drain(
        self, unpacker: Any, frames: _Frames | None = None
    ) -> tuple[list[LogRecord], list[Any], bool]:
        """Decode every complete message buffered: (records, chunk ids to ack, stream ok)."""
        records: list[LogRecord] = []
        acks: list[Any] = []
        try:
            for message in self._messages(unpacker, frames):
                chunk = self._message(message, records)
                if chunk is not None:
                    acks.append(chunk)
        except _DropConnection:
            raise
        except Exception as exc:  # malformed msgpack: the rest of the stream is unusable
            reject(self.source, "bad_msgpack", str(exc))
            return records, acks, False
        return records, acks, True

    def _batches(
        self, unpacker: Any, frames: _Frames | None = None
    ) -> tuple[list[tuple[list[LogRecord], list[Any], str | None]], bool]:
        """Every complete message buffered as batches ``(records, chunks to ack, chunk id)``,
        and whether the stream is still usable: one batch, or with ``chunk_ids`` one per
        chunk-carrying message (its own records only) and one per run of the others."""
        if not self.chunk_ids:
            records, acks, healthy = self._drain(unpacker, frames)
            return ([(records, acks, None)] if records or acks else []), healthy
        batches: list[tuple[list[LogRecord], list[Any], str | None]] = []
        records = []
        healthy = True
        try:
            for message in self._messages(unpacker, frames):
                mine: list[LogRecord] = []
                chunk = self._message(message, mine)
                if chunk is None:
                    records += mine
                    continue
                if records:  # what came before it is not part of the chunk
                    batches.append((records, [], None))
                    records = []
                batches.append((mine, [chunk], chunk_key(chunk)))
        except _DropConnection:
            raise
        except Exception as exc:  # malformed msgpack: the rest of the stream is unusable
            reject(self.source, "bad_msgpack", str(exc))
            healthy = False
        if records:
            batches.append((records, [], None))
        return batches, healthy

    def _message(self, message: Any, out: list[LogRecord]) -> Any:
        """Decode one Forward message into ``out``; return its ``chunk`` option (or None)."""
        if message is None:
            return None  # heartbeat
        if type(message) is not list or len(message) < 2:
            reject(self.source, "bad_message", brief(message))
            return None
        tag, second = message[0], message[1]
        if type(tag) is not str:
            if type(tag) is not bytes:
                reject(self.source, "bad_message", brief(message))
                return None
            tag = tag.decode("utf-8", "replace")  # a client that packs the tag as bin
        kind = type(second)
        if kind is list or kind is bytes or kind is str:
            option = message[2] if len(message) > 2 else None
        elif len(message) >= 3:
            option = message[3] if len(message) > 3 else None
        else:
            reject(self.source, "bad_message", brief(message))
            return None
        if type(option) is not dict:
            option = None
        chunk = option.get("chunk") if option else None
        if len(tag) > MAX_TAG:
            reject(self.source, "tag_too_long", f"tag of {len(tag)} characters: {tag}")
            return chunk
        signal = option.get("fluent_signal", 0) if option else 0
        if signal not in (0, None):
            reject(self.source, "not_logs", f"fluent_signal={signal!r} tag={tag}")
            return chunk
        if kind is list:
            entries = second
        elif kind is bytes or kind is str:
            entries = self._packed(second, option)
        else:
            entries = [[second, message[2]]]
        if len(entries) > self.max_records:
            reject(
                self.source,
                "too_many_records",
                f"message of {len(entries)} entries (at most {self.max_records})",
            )
            return chunk
        self._entries(tag, entries, out)
        return chunk

    def _packed(self, blob: str | bytes, option: dict[str, Any] | None) -> list[Any]:
        data: bytes | bytearray = to_bytes(blob) or b""
        compressed = type(option) is dict and option.get("compressed") == "gzip"
        with Lease(self.max_decompressed_bytes) as lease:
            if compressed or data.startswith(GZIP_MAGIC):
                try:
                    data = gunzip_bounded(data, lease)
                except DecompressedTooLarge as exc:
                    reject(self.source, "decompressed_too_large", str(exc))
                    return []
                except BudgetExhausted as exc:  # busy, not bad: no ack, the client resends
                    reject(self.source, "memory_budget", str(exc))
                    raise _DropConnection from None
                except ValueError as exc:
                    reject(self.source, "bad_gzip", str(exc))
                    return []
            entries: list[Any] = []
            try:
                for entry in unpack_all(data):
                    entries.append(entry)
                    if len(entries) > self.max_records:
                        break  # refused by the caller
            except Exception as exc:
                reject(self.source, "bad_msgpack", f"packed entries: {exc}")
            del data
        return entries

    def _entries(self, tag: str, entries: list[Any], out: list[LogRecord]) -> None:
        source = self.source
        max_line = self.max_line
        for entry in entries:
            event = split_event(entry)
            if event is None:
                reject(source, "bad_entry", brief(entry))
                continue
            t, record = event
            out.extend(
                decode_record(record, tag=tag, time=t, stream=tag, source=source, max_line=max_line)
            )
