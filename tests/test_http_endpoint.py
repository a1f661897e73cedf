"""The HTTP sources' shared glue without the web framework (sources/http/endpoint.py): read,
decode under a lease, join across requests, store, and the outcomes the routes turn into
HTTP answers."""

from __future__ import annotations

import ast
import asyncio
import functools
import json
from pathlib import Path

import pytest

from service.ingest.budget import DECOMPRESSED, Lease
from service.records import LogRecord
from service.sources.base import SourceHealth
from service.sources.http.body import BodyRefused, decode_body
from service.sources.http.endpoint import HttpEndpoint, NotStored, Received, http_sources
from tests.ingest_samples import ROUTES, STARTUP, rejects

ROOT = Path(__file__).resolve().parents[1]
CRI = "2026-07-27T10:11:12.100000000Z stdout {flag} {text}"


class Sink:
    """Stores what it is given; fails on demand; says False for a chunk id seen before."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], str, str | None]] = []
        self.fail = False

    async def submit(
        self, records: list[LogRecord], source: str, chunk_id: str | None = None
    ) -> bool:
        if self.fail:
            raise OSError("disk full")
        self.calls.append(([r.text for r in records], source, chunk_id))
        return True


def reader(body: bytes):
    async def read() -> bytes:
        return body

    return read


def text_decoder(**kw):
    return functools.partial(decode_body, content_type="text/plain", content_encoding=None, **kw)


def started(source: str, sink: Sink) -> HttpEndpoint:
    endpoint = HttpEndpoint(source)
    asyncio.run(endpoint.start(sink))
    return endpoint


def receive(endpoint: HttpEndpoint, body: bytes, key: str | None = None) -> Received:
    return asyncio.run(endpoint.receive(reader(body), text_decoder(), key))


def test_a_body_is_decoded_stored_and_counted() -> None:
    sink = Sink()
    endpoint = started("http", sink)
    got = receive(endpoint, f"{ROUTES}\n{STARTUP}\n".encode())
    assert got == Received(accepted=2, rejected=0)
    assert sink.calls == [([ROUTES, STARTUP], "http", None)]


def test_runtime_chunks_are_joined_across_requests_and_flushed_at_shutdown() -> None:
    sink = Sink()
    endpoint = started("http", sink)
    assert receive(endpoint, CRI.format(flag="P", text="ab").encode()).accepted == 0
    assert endpoint.health().detail == {"held_lines": 1}
    assert receive(endpoint, CRI.format(flag="F", text="cd").encode()).accepted == 1
    assert sink.calls[-1][0] == ["abcd"]
    receive(endpoint, CRI.format(flag="P", text="unfinished").encode())
    assert endpoint.health().running
    asyncio.run(endpoint.stop())
    assert sink.calls[-1] == (["unfinished"], "http", None)
    assert endpoint.health() == SourceHealth("http", False, {"held_lines": 0})


def test_a_batch_the_sink_failed_to_store_leaves_the_joiner_as_it_was() -> None:
    """The collector resends the whole body: the chunks it held must neither be lost with
    the failed batch nor count twice."""
    sink = Sink()
    endpoint = started("http", sink)
    receive(endpoint, CRI.format(flag="P", text="ab").encode())
    sink.fail = True
    closing = f"{CRI.format(flag='P', text='cd')}\n{CRI.format(flag='F', text='ef')}\n"
    with pytest.raises(NotStored):
        receive(endpoint, closing.encode())
    assert endpoint.health().detail == {"held_lines": 1}
    sink.fail = False
    assert receive(endpoint, closing.encode()).accepted == 1
    assert sink.calls == [(["abcdef"], "http", None)]


def test_an_idempotency_key_becomes_a_chunk_id_namespaced_by_source() -> None:
    sink = Sink()
    receive(started("http", sink), f"{ROUTES}\n".encode(), key="k-1")
    receive(started("otlp", sink), f"{ROUTES}\n".encode(), key="k-1")
    (_, _, http_id), (_, _, otlp_id) = sink.calls
    assert http_id.startswith("http:") and otlp_id.startswith("otlp:")
    assert http_id[5:] == otlp_id[5:] and len(http_id) == 5 + 32


def test_a_failing_sink_is_not_stored() -> None:
    sink = Sink()
    endpoint = started("http", sink)
    sink.fail = True
    with pytest.raises(NotStored, match="not stored, retry: OSError"):
        receive(endpoint, f"{ROUTES}\n".encode())


def test_a_refused_body_passes_through_and_a_spent_budget_is_503() -> None:
    sink = Sink()
    endpoint = started("http", sink)
    decode = functools.partial(decode_body, content_type="image/png", content_encoding=None)
    with pytest.raises(BodyRefused) as refused:
        asyncio.run(endpoint.receive(reader(b"x"), decode))
    assert refused.value.status == 415
    hog = Lease(DECOMPRESSED.limit)
    hog.hold(DECOMPRESSED.limit - DECOMPRESSED.used)  # other requests hold everything
    before = rejects("http", "memory_budget")
    try:
        with pytest.raises(BodyRefused) as refused:
            receive(endpoint, json.dumps([{"log": ROUTES}]).encode())
    finally:
        hog.release()
    assert refused.value.status == 503 and rejects("http", "memory_budget") == before + 1
    assert sink.calls == []


def test_the_endpoints_are_the_http_sources_and_take_nothing_before_they_start() -> None:
    assert [e.source for e in http_sources(True)] == ["http", "otlp"]
    assert http_sources(False) == ()
    sink, endpoint = Sink(), HttpEndpoint("http")
    assert not endpoint.health().running
    with pytest.raises(NotStored, match="pipeline not available"):
        receive(endpoint, f"{ROUTES}\n".encode())
    asyncio.run(endpoint.stop())  # never started: nothing to store
    assert sink.calls == []


def test_the_sources_import_no_web_framework() -> None:
    """The routes do HTTP; the sources take plain bytes and callables."""
    for path in (ROOT / "service" / "sources").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                names.append(getattr(node, "module", None) or "")
                for name in names:
                    top = name.split(".")[0]
                    assert top not in ("fastapi", "starlette", "uvicorn"), path
