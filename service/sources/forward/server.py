"""Fluentd Forward Protocol v1 server (msgpack over TCP, optional TLS and shared key): the
listener, its limits and its lifecycle.

``await start()`` binds and accepts; each connection is a
:class:`~service.sources.forward.connection.Connection` (handshake, read, ack) decoding
:mod:`~service.sources.forward.messages`, its batches handed to the sink by
:class:`~service.sources.forward.delivery.Delivery` (runtime chunks joined; with
``chunk_ids`` the sink is ``sink(records, chunk_id)`` and returns False for a chunk it stored
before); ``await stop()`` closes everything and hands over the lines still held unfinished.
The sink must store durably before it returns: a chunk is acked only then (at least once).

Exposure and resources:

* Without a ``shared_key`` the server refuses to start on a non-loopback address
  (:class:`~service.netguard.InsecureConfigError`) unless ``allow_unauthenticated``.
* At most ``max_connections`` connections at once; one more is accepted and closed at once
  (counted). The cap is lowered, with a warning, to leave ``FD_RESERVE`` descriptors of the
  process limit to the API and the store.
* Per connection: ``idle_timeout``, the handshake bounds and ``max_message_bytes``; all
  connections together hold at most ``max_pending_bytes`` of unfinished frames (see
  :mod:`~service.sources.forward.connection`).
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
from collections.abc import Mapping
from typing import Any

from prometheus_client import Counter, Gauge

from service import metrics
from service.ingest.bounds import MAX_RECORDS
from service.ingest.envelope import MAX_LINE
from service.netguard import InsecureConfigError, is_loopback
from service.ratelog import RateLimitedLog, reject
from service.sources.base import SourceHealth
from service.sources.forward.connection import (
    CLOSED,
    READ_SIZE,
    Connection,
    ConnectionSettings,
    FrameBudget,
)
from service.sources.forward.delivery import Delivery, Handler
from service.sources.forward.descriptors import fd_soft_limit, open_spare
from service.sources.forward.messages import ForwardDecoder

DEFAULT_PORT = 24224
MAX_CONNECTIONS = 512
IDLE_TIMEOUT_S = 120.0
MAX_PENDING_BYTES = 128 << 20  # unfinished frames, all connections together
FD_RESERVE = 128  # descriptors of RLIMIT_NOFILE left to the API, the store and files
ACCEPT_BACKOFF_MIN = 0.05
ACCEPT_BACKOFF_MAX = 2.0
_RESOURCE_ERRNOS = frozenset((errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM))
log = logging.getLogger("vllm_sentinel.ingest.forward")
_limited = RateLimitedLog(log)

CONNECTIONS = Gauge(
    "sentinel_forward_connections", "Open Forward connections.", registry=metrics.REGISTRY
)
ACCEPT_ERRORS = Counter(
    "sentinel_forward_accept_errors_total",
    "accept() failures on the Forward port for lack of descriptors or memory, by errno.",
    ["errno"],
    registry=metrics.REGISTRY,
)


def tls_context(
    certfile: str, keyfile: str | None = None, cafile: str | None = None
) -> ssl.SSLContext:
    """Server TLS context from PEM paths (no ``keyfile``: the key is in ``certfile``); with
    ``cafile`` clients must present a certificate signed by it (mutual TLS)."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(certfile, keyfile)
    if cafile:
        ctx.load_verify_locations(cafile)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class _Accepted:
    """An accepted socket until its connection task has started."""

    __slots__ = ("conn", "peer", "started")

    def __init__(self, conn: socket.socket, peer: Any) -> None:
        self.conn = conn
        self.peer = peer
        self.started = False


class ForwardServer:
    """asyncio Forward server; ``await start()``, ``await stop()``, ``port`` once started."""

    def __init__(
        self,
        sink: Handler,
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
        if users and shared_key is None:
            raise ValueError(
                "username/password auth needs a shared_key (it rides on the handshake)"
            )
        if shared_key is not None and not shared_key.strip():
            raise ValueError("forward shared_key is empty or whitespace only")
        self.host = host
        self._port = port
        self.shared_key = shared_key
        self.tls = tls
        self.self_hostname = self_hostname or socket.gethostname()
        self.users = dict(users) if users else None
        self.handshake_timeout = handshake_timeout
        self.source = source
        self.decoder = ForwardDecoder(
            source,
            max_message_bytes=max_message_bytes,
            max_decompressed_bytes=max_decompressed_bytes,
            max_records=max_records,
            max_line=max_line,
            chunk_ids=chunk_ids,
        )
        self.delivery = Delivery(
            sink, source, chunk_ids=chunk_ids, join=join, max_line=max_line, idle_s=partial_timeout
        )
        self.max_connections = max_connections
        self.idle_timeout = idle_timeout
        self.frames = FrameBudget(max_pending_bytes)
        self.allow_unauthenticated = allow_unauthenticated
        self.open_connections = 0
        self._flusher: asyncio.Task[None] | None = None
        self._listeners: list[socket.socket] = []
        self._acceptors: list[asyncio.Task[None]] = []
        self._spare_fd: int | None = None
        self._connections: set[asyncio.Task[Any]] = set()

    @property
    def pending_bytes(self) -> int:
        """Bytes of unfinished frames held, all connections together."""
        return self.frames.held

    @property
    def port(self) -> int:
        """The bound port (the real one when constructed with port 0)."""
        if self._listeners:
            port: int = self._listeners[0].getsockname()[1]
            return port
        return self._port

    def health(self) -> SourceHealth:
        """Listening or not, where, and what it holds now."""
        joiner = self.delivery.joiner
        return SourceHealth(
            self.source,
            bool(self._listeners),
            {
                "address": f"{self.host}:{self.port}",
                "connections": self.open_connections,
                "pending_bytes": self.pending_bytes,
                "held_lines": len(joiner) if joiner is not None else 0,
            },
        )

    def check_exposure(self) -> None:
        """Refuse to listen beyond loopback without a shared key unless allowed (as the
        API refuses to start without a token, :func:`service.netguard.check_auth_config`)."""
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
        soft = fd_soft_limit()
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
        self._spare_fd = open_spare()
        self._acceptors = [asyncio.create_task(self._accept_loop(sock)) for sock in self._listeners]
        if self.delivery.joiner is not None:
            self._flusher = asyncio.create_task(self.delivery.flush_idle_lines())
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
        await self.delivery.flush()

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
            self._spare_fd = open_spare()
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
            self._spare_fd = open_spare()
        if shed:
            CLOSED.labels(reason="fd_exhausted").inc(shed)
            metrics.REJECTS.labels(source=self.source, reason="fd_exhausted").inc(shed)
        return shed

    async def _serve(self, accepted: _Accepted) -> None:
        accepted.started = True
        conn = accepted.conn
        loop = asyncio.get_running_loop()
        conn.setblocking(False)
        reader = asyncio.StreamReader(limit=READ_SIZE)
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
        settings = ConnectionSettings(
            self.idle_timeout,
            self.handshake_timeout,
            self.shared_key,
            self.self_hostname,
            self.users,
        )
        await Connection(
            reader, writer, settings, self.decoder, self.frames, self.delivery.deliver
        ).run()
