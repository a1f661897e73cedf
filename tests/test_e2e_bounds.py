"""Every door bounded, against the real service (issue #20): a 30 KB OTLP protobuf bomb and a
58 KB gzip of ``{}`` are refused (413, counted) without the service's memory growing; idle
and slow-header connections beyond the cap neither lock out ``/healthz`` nor stay open."""

from __future__ import annotations

import gzip
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e_support import Sentinel, free_port, service_config, wait_until
from tests.test_door_bounds import empty_records

pytestmark = pytest.mark.slow
TOKEN = "bounds-e2e-token"
MiB = 1 << 20


def peak_rss(pid: int) -> int:
    """The process's peak resident set (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sentinel]:
    tmp = tmp_path_factory.mktemp("bounds")
    port = free_port()
    config = service_config(
        store_url=f"sqlite:///{tmp / 'sentinel.db'}", api_port=port, token=TOKEN
    )
    config["api"].update(max_connections=300, max_requests_in_flight=16, header_timeout_s=2)
    s = Sentinel(tmp, "sentinel", config)
    try:
        yield s.start().wait_ready()
    finally:
        s.close()


def post(svc: Sentinel, path: str, body: bytes, content_type: str) -> int:
    headers = {
        **svc.headers(),
        "Content-Type": content_type,
        "Content-Encoding": "gzip",
    }
    return svc.http.post(path, content=body, headers=headers, timeout=120).status_code


def test_an_otlp_protobuf_bomb_is_refused_with_bounded_memory(svc: Sentinel) -> None:
    bomb = gzip.compress(empty_records(15_700_000), compresslevel=9)
    assert len(bomb) < 32_000  # 15.7M empty LogRecords
    before = svc.metric("sentinel_rejects_total", source="otlp", reason="too_many_records")
    rss = peak_rss(svc.pid)
    assert post(svc, "/v1/logs", bomb, "application/x-protobuf") == 413
    after = svc.metric("sentinel_rejects_total", source="otlp", reason="too_many_records")
    assert after == before + 1
    assert peak_rss(svc.pid) - rss < 64 * MiB  # the 31 MB it inflates to, nothing parsed
    assert svc.http.get("/healthz").status_code == 200


def test_a_gzip_of_empty_objects_is_refused_with_bounded_memory(svc: Sentinel) -> None:
    bomb = gzip.compress(b"{}" * 19_900_000, compresslevel=9)
    assert len(bomb) < 60_000  # 19.9M records without a log
    before = svc.metric("sentinel_rejects_total", source="http", reason="too_complex")
    rss = peak_rss(svc.pid)
    assert post(svc, "/ingest", bomb, "application/x-ndjson") == 413
    after = svc.metric("sentinel_rejects_total", source="http", reason="too_complex")
    assert after == before + 1  # its 19.9M objects counted on the bytes, none built
    assert peak_rss(svc.pid) - rss < 64 * MiB
    assert svc.http.get("/healthz").status_code == 200


def test_a_body_of_units_that_do_not_decode_stops_at_the_record_cap(svc: Sentinel) -> None:
    body = gzip.compress(b"7\n" * 150_000)  # numbers: no brackets, no records, 150,000 units
    before = svc.metric("sentinel_rejects_total", source="http", reason="too_many_records")
    assert post(svc, "/ingest", body, "application/x-ndjson") == 413
    after = svc.metric("sentinel_rejects_total", source="http", reason="too_many_records")
    assert after == before + 1
    assert svc.http.get("/healthz").status_code == 200


def probe(svc: Sentinel, path: str) -> int:
    """The status of ``path`` on a connection of its own, as the kubelet's prober asks (its
    client keeps no connection alive: a pooled one may be the oldest idle one, evicted)."""
    with httpx.Client(base_url=f"http://127.0.0.1:{svc.api_port}", timeout=10.0) as c:
        return c.get(path, headers={"Connection": "close"}).status_code


def test_idle_connections_past_the_cap_do_not_lock_out_the_probes(svc: Sentinel) -> None:
    before = svc.metric("sentinel_rejects_total", source="api", reason="idle_connection_evicted")
    idle: list[socket.socket] = []
    try:
        for i in range(3000):  # ten times the cap: half never send a byte, half a partial header
            s = socket.create_connection(("127.0.0.1", svc.api_port))
            if i % 2:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            idle.append(s)
        for _ in range(5):  # a kubelet probe opens a new connection each time (no keep-alive)
            assert probe(svc, "/healthz") == 200
            assert probe(svc, "/readyz") == 200
        evicted = svc.metric(
            "sentinel_rejects_total", source="api", reason="idle_connection_evicted"
        )
        assert evicted - before >= 3000 - 300
    finally:
        for s in idle:
            s.close()


def test_a_connection_that_never_finishes_its_headers_is_closed(svc: Sentinel) -> None:
    before = svc.metric("sentinel_rejects_total", source="api", reason="header_timeout")
    with socket.create_connection(("127.0.0.1", svc.api_port)) as s:
        s.sendall(b"POST /ingest HTTP/1.1\r\nHost: x\r\n")
        s.settimeout(30)
        assert s.recv(1024) == b""  # closed by the service, no answer
    wait_until(
        lambda: (
            svc.metric("sentinel_rejects_total", source="api", reason="header_timeout") > before
        ),
        10,
        "the header timeout to be counted",
    )
