"""The HTTP sources' shared glue without the web framework (sources/http/endpoint.py): read,
decode under a lease, join across requests, store, and the outcomes the routes turn into
HTTP answers."""

from __future__ import annotations

import ast
import asyncio
import functools
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from service.ingest.budget import DECOMPRESSED, Lease
from service.records import LogRecord
from service.sources.http.body import BodyRefused, decode_body
from service.sources.http.endpoint import (
    HttpEndpoint,
    NotStored,
    Received,
    endpoint_of,
    flush_endpoint,
)
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


def receive(endpoint: HttpEndpoint, sink: Sink, body: bytes, key: str | None = None) -> Received:
    return asyncio.run(endpoint.receive(sink, reader(body), text_decoder(), key))


def test_a_body_is_decoded_stored_and_counted() -> None:
    sink, endpoint = Sink(), HttpEndpoint("http")
    got = receive(endpoint, sink, f"{ROUTES}\n{STARTUP}\n".encode())
    assert got == Received(accepted=2, rejected=0)
    assert sink.calls == [([ROUTES, STARTUP], "http", None)]


def test_runtime_chunks_are_joined_across_requests_and_flushed_at_shutdown() -> None:
    sink, endpoint = Sink(), HttpEndpoint("http")
    assert receive(endpoint, sink, CRI.format(flag="P", text="ab").encode()).accepted == 0
    assert endpoint.health().detail == {"held_lines": 1}
    assert receive(endpoint, sink, CRI.format(flag="F", text="cd").encode()).accepted == 1
    assert sink.calls[-1][0] == ["abcd"]
    receive(endpoint, sink, CRI.format(flag="P", text="unfinished").encode())
    asyncio.run(endpoint.flush(sink))
    assert sink.calls[-1] == (["unfinished"], "http", None)
    assert endpoint.health().detail == {"held_lines": 0}


def test_a_batch_the_sink_failed_to_store_leaves_the_joiner_as_it_was() -> None:
    """The collector resends the whole body: the chunks it held must neither be lost with
    the failed batch nor count twice."""
    sink, endpoint = Sink(), HttpEndpoint("http")
    receive(endpoint, sink, CRI.format(flag="P", text="ab").encode())
    sink.fail = True
    closing = f"{CRI.format(flag='P', text='cd')}\n{CRI.format(flag='F', text='ef')}\n"
    with pytest.raises(NotStored):
        receive(endpoint, sink, closing.encode())
    assert endpoint.health().detail == {"held_lines": 1}
    sink.fail = False
    assert receive(endpoint, sink, closing.encode()).accepted == 1
    assert sink.calls == [(["abcdef"], "http", None)]


def test_an_idempotency_key_becomes_a_chunk_id_namespaced_by_source() -> None:
    sink = Sink()
    receive(HttpEndpoint("http"), sink, f"{ROUTES}\n".encode(), key="k-1")
    receive(HttpEndpoint("otlp"), sink, f"{ROUTES}\n".encode(), key="k-1")
    (_, _, http_id), (_, _, otlp_id) = sink.calls
    assert http_id.startswith("http:") and otlp_id.startswith("otlp:")
    assert http_id[5:] == otlp_id[5:] and len(http_id) == 5 + 32


def test_a_failing_sink_is_not_stored() -> None:
    sink, endpoint = Sink(), HttpEndpoint("http")
    sink.fail = True
    with pytest.raises(NotStored, match="not stored, retry: OSError"):
        receive(endpoint, sink, f"{ROUTES}\n".encode())


def test_a_refused_body_passes_through_and_a_spent_budget_is_503() -> None:
    sink, endpoint = Sink(), HttpEndpoint("http")
    decode = functools.partial(decode_body, content_type="image/png", content_encoding=None)
    with pytest.raises(BodyRefused) as refused:
        asyncio.run(endpoint.receive(sink, reader(b"x"), decode))
    assert refused.value.status == 415
    hog = Lease(DECOMPRESSED.limit)
    hog.hold(DECOMPRESSED.limit - DECOMPRESSED.used)  # other requests hold everything
    before = rejects("http", "memory_budget")
    try:
        with pytest.raises(BodyRefused) as refused:
            receive(endpoint, sink, json.dumps([{"log": ROUTES}]).encode())
    finally:
        hog.release()
    assert refused.value.status == 503 and rejects("http", "memory_budget") == before + 1
    assert sink.calls == []


def test_one_endpoint_per_source_and_app() -> None:
    state, other = SimpleNamespace(), SimpleNamespace()
    assert endpoint_of(state, "http") is endpoint_of(state, "http")
    assert endpoint_of(state, "otlp") is not endpoint_of(state, "http")
    assert endpoint_of(other, "http") is not endpoint_of(state, "http")
    sink = Sink()
    asyncio.run(flush_endpoint(SimpleNamespace(), "http", sink))  # none made: nothing to do
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
