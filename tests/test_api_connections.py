"""The API listener's bounds (issue #20): requests in flight capped with the probes always
answered, the settings checked, and the connection guard's eviction and header timeout."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

from service.api import connections
from service.api.connections import ConnectionGuard, InFlightLimit
from service.config import ApiSettings
from tests.ingest_samples import rejects


def test_the_settings_keep_room_for_the_probes() -> None:
    assert ApiSettings().max_connections > ApiSettings().max_requests_in_flight
    with pytest.raises(ValidationError, match="max_requests_in_flight"):
        ApiSettings(max_connections=20, max_requests_in_flight=16)


def run_requests(paths: list[str], limit: int) -> list[int]:
    """Start ``paths`` at once through :class:`InFlightLimit` over an app that waits until
    released; the status each got."""

    async def main() -> list[int]:
        release = asyncio.Event()

        async def app(scope: Any, receive: Any, send: Any) -> None:
            await release.wait()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b""})

        guard = InFlightLimit(app, limit)
        statuses: list[int] = []

        async def one(path: str) -> None:
            async def send(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    statuses.append(message["status"])

            await guard({"type": "http", "path": path}, None, send)

        tasks = [asyncio.create_task(one(p)) for p in paths]
        await asyncio.sleep(0.05)
        release.set()
        await asyncio.gather(*tasks)
        assert guard.in_flight == 0
        return sorted(statuses)

    return asyncio.run(main())


def test_requests_beyond_the_cap_are_503_and_counted_but_probes_pass() -> None:
    before = rejects("api", "too_many_requests")
    statuses = run_requests(["/ingest"] * 5 + ["/healthz", "/readyz", "/metrics"], limit=2)
    assert statuses == [200] * 5 + [503] * 3
    assert rejects("api", "too_many_requests") == before + 3


class FakeConn:
    def __init__(self, busy: bool = False) -> None:
        self.cycle = SimpleNamespace(response_complete=False) if busy else None
        self.transport = SimpleNamespace(closed=False)
        self.transport.close = lambda: setattr(self.transport, "closed", True)


def test_past_the_cap_the_oldest_idle_connection_is_closed() -> None:
    async def main() -> None:
        guard = ConnectionGuard(max_connections=3, header_timeout_s=60)
        busy, idle1, idle2, new = FakeConn(busy=True), FakeConn(), FakeConn(), FakeConn()
        for c in (busy, idle1, idle2):
            guard.opened(c)
        before = rejects("api", "idle_connection_evicted")
        guard.opened(new)
        assert idle1.transport.closed and not busy.transport.closed
        assert not new.transport.closed and guard.open == 3
        assert rejects("api", "idle_connection_evicted") == before + 1
        # every slot busy: the newcomer is closed
        full = ConnectionGuard(max_connections=1, header_timeout_s=60)
        full.opened(FakeConn(busy=True))
        late = FakeConn()
        full.opened(late)
        assert late.transport.closed

    asyncio.run(main())


def test_a_connection_without_a_request_past_the_header_timeout_is_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connections, "SWEEP_S", 0.01)

    async def main() -> None:
        guard = ConnectionGuard(max_connections=10, header_timeout_s=0.05)
        idle, busy = FakeConn(), FakeConn(busy=True)
        guard.opened(idle)
        guard.opened(busy)
        before = rejects("api", "header_timeout")
        for _ in range(100):
            await asyncio.sleep(0.01)
            if idle.transport.closed:
                break
        assert idle.transport.closed and not busy.transport.closed
        assert rejects("api", "header_timeout") == before + 1

    asyncio.run(main())
