"""Bounds on the API listener: open connections, requests in flight, and how long a
connection may sit without a request (docs/security.md's numbers are in ``SECURITY.md``).

* :class:`ConnectionGuard` keeps at most ``max_connections`` open. A connection past the cap
  evicts the oldest one with no request in flight (idle keep-alive, or still sending its
  headers); when every connection is busy the new one is closed at once. So idle or
  slow-header connections can never lock a probe out: the newest connection wins a slot.
* Its sweeper (once a second) closes a connection that has had no request in flight for
  ``header_timeout_s``: one that never completes its headers, or idles past uvicorn's own
  keep-alive timeout.
* :class:`InFlightLimit` (ASGI middleware) answers 503 (``Retry-After: 1``) to a request
  beyond ``max_in_flight`` at once; the probes (``/healthz``, ``/readyz``, ``/metrics``)
  always pass.

Every refusal is counted in ``sentinel_rejects_total{source="api"}``. ``accept()`` failing
for lack of descriptors backs off for a second (asyncio's listener) and is logged at a
bounded rate (:func:`service.ratelog.loop_exception_handler`); :func:`descriptor_room`
keeps the cap below the descriptor limit so it does not happen.
"""

from __future__ import annotations

import asyncio
import resource
import time
from collections import OrderedDict
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from service.ratelog import reject

SOURCE = "api"
PROBES = frozenset(("/healthz", "/readyz", "/metrics"))
SWEEP_S = 1.0
RESERVED_FDS = 128  # descriptors kept for the store, Kafka, files and the log


def descriptor_room(reserved: int) -> int:
    """Descriptors the API may use: the soft limit raised to the hard one where allowed,
    minus ``reserved`` for everything else the process opens."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = 1 << 16 if hard == resource.RLIM_INFINITY else hard
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return max(soft - reserved, 16)


def _busy(conn: Any) -> bool:
    """A request is in flight on ``conn`` (headers read, response not finished)."""
    cycle = getattr(conn, "cycle", None)
    return cycle is not None and not cycle.response_complete


class ConnectionGuard:
    """The API listener's open connections, oldest first (see the module docstring)."""

    def __init__(self, max_connections: int, header_timeout_s: float) -> None:
        self.max_connections = max_connections
        self.header_timeout_s = header_timeout_s
        # connection -> (the request cycle last seen, when it was last seen to change)
        self._open: OrderedDict[Any, tuple[int, float]] = OrderedDict()
        self._sweeper: asyncio.TimerHandle | None = None

    @property
    def open(self) -> int:
        return len(self._open)

    def opened(self, conn: Any) -> None:
        """Register ``conn``; make room past the cap, else close it."""
        self._open[conn] = (id(getattr(conn, "cycle", None)), time.monotonic())
        if len(self._open) > self.max_connections:
            victim = next((c for c in self._open if c is not conn and not _busy(c)), None)
            if victim is None:
                reject(SOURCE, "too_many_connections", f"all {self.max_connections} busy")
                self._close(conn)
            else:
                reject(SOURCE, "idle_connection_evicted", f"cap {self.max_connections}")
                self._close(victim)
        if self._sweeper is None:
            loop = asyncio.get_running_loop()
            self._sweeper = loop.call_later(SWEEP_S, self._sweep, loop)

    def closed(self, conn: Any) -> None:
        self._open.pop(conn, None)

    def _close(self, conn: Any) -> None:
        self._open.pop(conn, None)
        conn.transport.close()

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        now = time.monotonic()
        expired = []
        changed = []
        for conn, (seen, since) in self._open.items():
            cycle = id(getattr(conn, "cycle", None))
            if cycle != seen or _busy(conn):
                changed.append((conn, cycle))
            elif now - since > self.header_timeout_s:
                expired.append(conn)
        for conn, cycle in changed:
            self._open[conn] = (cycle, now)
        for conn in expired:
            reject(SOURCE, "header_timeout", f"no request for {self.header_timeout_s:g}s")
            self._close(conn)
        self._sweeper = loop.call_later(SWEEP_S, self._sweep, loop) if self._open else None


def guarded_protocol(guard: ConnectionGuard) -> type[H11Protocol]:
    """uvicorn's h11 protocol, its connections registered with ``guard``."""

    class GuardedH11Protocol(H11Protocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            guard.opened(self)

        def connection_lost(self, exc: Exception | None) -> None:
            guard.closed(self)
            super().connection_lost(exc)

    return GuardedH11Protocol


class InFlightLimit:
    """Pure ASGI middleware: at most ``limit`` requests at once (503 beyond, counted);
    the probes are never refused."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in PROBES:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            reject(SOURCE, "too_many_requests", f"{self.limit} requests in flight")
            await send(
                {
                    "type": "http.response.start",
                    "status": 503,
                    "headers": [(b"content-type", b"application/json"), (b"retry-after", b"1")],
                }
            )
            await send({"type": "http.response.body", "body": b'{"detail":"busy, retry"}'})
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
