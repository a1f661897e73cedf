"""Every door counts before it builds: the OTLP protobuf pre-scan refuses a body of millions
of empty records (or fields) before parsing, and ``POST /ingest`` counts every unit it reads,
accepted or not, against the record cap (issue #20)."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest
from fastapi.testclient import TestClient
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from service.api import create_app
from service.api.routers import ingest as ingest_route
from service.classify.rulebook import RuleBook
from service.ingest.bounds import MAX_CONTAINERS, MAX_FIELDS
from service.ingest.otlp_scan import ScanLimit, scan_export
from service.sources.http.body import BodyRefused
from service.sources.http.otlp import decode_export
from tests.api_support import WRITE, close_context, make_context
from tests.ingest_samples import STARTUP, rejects
from tests.test_forward import T0, Client, Sink, record
from tests.test_forward_limits import forward

PROTOBUF = "application/x-protobuf"


def ld(tag: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field."""
    n, size = len(payload), bytearray()
    while True:
        size.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            break
    return bytes([tag]) + bytes(size) + payload


def empty_records(n: int) -> bytes:
    """An export of ``n`` empty LogRecords (2 bytes each on the wire)."""
    return ld(0x0A, ld(0x12, b"\x12\x00" * n))


def sample_request() -> ExportLogsServiceRequest:
    req = ExportLogsServiceRequest()
    rl = req.resource_logs.add()
    rl.resource.attributes.add(key="k8s.pod.name").value.string_value = "p"
    sl = rl.scope_logs.add()
    sl.scope.name = "s"
    for i in range(50):
        lr = sl.log_records.add()
        lr.body.string_value = f"line {i}"
        lr.time_unix_nano = 1
        kv = lr.attributes.add(key="a")
        kv.value.array_value.values.add().kvlist_value.values.add(key="b").value.int_value = i
    return req


# ---- the pre-scan ---------------------------------------------------------------------------
def test_the_scan_counts_what_the_parser_builds() -> None:
    req = sample_request()
    scan = scan_export(
        req.SerializeToString(), max_records=1000, max_messages=10**6, max_fields=10**6
    )
    assert scan is not None
    assert scan.records == 50
    # rl, resource, 1 attribute + value, scope_logs, scope, and per record: the record, its
    # body, one attribute, its value, an array, an AnyValue, a kvlist, a KeyValue, its value
    assert scan.messages == 6 + 50 * 9


@pytest.mark.parametrize(
    ("body", "what"),
    [
        (empty_records(101), "records"),
        (ld(0x0A, ld(0x12, ld(0x12, b"\x10\x01" * 2000))), "fields"),
        (ld(0x0A, ld(0x12, ld(0x12, ld(0x2A, ld(0x2A, b"") * 1001)))), "fields"),
    ],
)
def test_the_scan_stops_at_a_limit(body: bytes, what: str) -> None:
    with pytest.raises(ScanLimit) as exc:
        scan_export(body, max_records=100, max_messages=1000, max_fields=1000)
    assert exc.value.what == what


def test_deep_nesting_is_refused_by_the_scan() -> None:
    value = b""
    for _ in range(60):  # AnyValue.array_value -> ArrayValue.values -> AnyValue ...
        value = ld(0x2A, ld(0x0A, value))
    body = ld(0x0A, ld(0x12, ld(0x12, ld(0x2A, value))))
    with pytest.raises(ScanLimit) as exc:
        scan_export(body, max_records=10, max_messages=10**6, max_fields=10**6)
    assert exc.value.what == "nesting"


@pytest.mark.parametrize("body", [b"\xff\xff\xff garbage", ld(0x0A, b"\x12\x05ab"), b"\x0b"])
def test_malformed_wire_data_is_left_to_the_parser(body: bytes) -> None:
    assert scan_export(body, max_records=10, max_messages=10, max_fields=10) is None
    with pytest.raises(BodyRefused) as exc:
        decode_export(body, PROTOBUF, None)
    assert exc.value.status == 400


def test_a_protobuf_bomb_is_refused_before_it_is_parsed() -> None:
    """30 KB of gzip, 15.7M empty records: 413, counted, nothing parsed."""
    bomb = gzip.compress(empty_records(15_700_000), compresslevel=9)
    assert len(bomb) < 32_000
    before = rejects("otlp", "too_many_records")
    with pytest.raises(BodyRefused) as exc:
        decode_export(bomb, PROTOBUF, "gzip")
    assert exc.value.status == 413 and exc.value.reason == "too_many_records"
    assert rejects("otlp", "too_many_records") == before + 1


def test_too_many_fields_is_refused() -> None:
    body = ld(0x0A, ld(0x12, ld(0x12, b"\x10\x01" * (MAX_FIELDS + 1))))
    before = rejects("otlp", "too_complex")
    with pytest.raises(BodyRefused) as exc:
        decode_export(body, PROTOBUF, None)
    assert exc.value.status == 413
    assert rejects("otlp", "too_complex") == before + 1


def test_an_ordinary_export_still_decodes() -> None:
    records, rejected = decode_export(sample_request().SerializeToString(), PROTOBUF, None)
    assert len(records) == 50 and rejected == 0


# ---- every unit counts on POST /ingest --------------------------------------------------------
@pytest.fixture()
def client(tmp_path: Path) -> Iterator[TestClient]:
    ctx = make_context(tmp_path / "s.db", RuleBook())
    try:
        with TestClient(create_app(ctx)) as c:
            yield c
    finally:
        close_context(ctx)


@pytest.mark.parametrize(
    ("content_type", "make"),
    [
        ("application/x-ndjson", lambda n: b"{}\n" * n),
        ("application/json", lambda n: json.dumps([{}] * n).encode()),
        ("application/json", lambda n: json.dumps(list(range(n))).encode()),
        ("application/x-ndjson", lambda n: b"not json\n" * n),
        ("application/msgpack", lambda n: msgpack.packb({"no": "log"}) * n),
        ("application/msgpack", lambda n: msgpack.packb(7) * n),
    ],
)
def test_units_that_do_not_decode_count_against_the_cap(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, content_type: str, make
) -> None:
    monkeypatch.setattr(ingest_route, "MAX_RECORDS", 1000)
    before = rejects("http", "too_many_records")
    body = gzip.compress(make(1001))
    headers = {**WRITE, "Content-Type": content_type, "Content-Encoding": "gzip"}
    r = client.post("/ingest", content=body, headers=headers)
    assert r.status_code == 413 and "records" in r.text
    assert rejects("http", "too_many_records") == before + 1
    r = client.post("/ingest", content=make(1000), headers={**WRITE, "Content-Type": content_type})
    assert r.status_code != 413


# ---- one unit cannot hide millions of containers ----------------------------------------------
@pytest.mark.parametrize(
    "body",
    [
        b"[[" + b"{}," * MAX_CONTAINERS + b"{}]]",  # one element of the top-level array
        b'{"log": "x", "a": [' + b"[]," * MAX_CONTAINERS + b"[]]}",  # one object
    ],
)
def test_a_json_unit_holding_millions_of_containers_is_refused_before_decoding(
    client: TestClient, body: bytes
) -> None:
    before = rejects("http", "too_complex")
    headers = {**WRITE, "Content-Type": "application/json", "Content-Encoding": "gzip"}
    r = client.post("/ingest", content=gzip.compress(body), headers=headers)
    assert r.status_code == 413
    assert rejects("http", "too_complex") == before + 1


def test_an_otlp_json_body_of_millions_of_objects_is_refused() -> None:
    records = b"{}," * MAX_CONTAINERS + b"{}"
    body = b'{"resourceLogs":[{"scopeLogs":[{"logRecords":[' + records + b"]}]}]}"
    before = rejects("otlp", "too_complex")
    with pytest.raises(BodyRefused) as exc:
        decode_export(gzip.compress(body), "application/json", "gzip")
    assert exc.value.status == 413
    assert rejects("otlp", "too_complex") == before + 1


def test_a_msgpack_unit_holding_millions_of_maps_is_refused(client: TestClient) -> None:
    # one array of arrays of empty maps: each map is 1 byte packed and ~64 parsed
    inner = b"\xdd" + (1 << 20).to_bytes(4, "big") + b"\x80" * (1 << 20)
    body = b"\x92" + inner + inner
    before = rejects("http", "too_complex")
    headers = {**WRITE, "Content-Type": "application/msgpack", "Content-Encoding": "gzip"}
    r = client.post("/ingest", content=gzip.compress(body), headers=headers)
    assert r.status_code == 413
    assert rejects("http", "too_complex") == before + 1


# ---- Forward: one message cannot build millions of maps ------------------------------------
def test_a_forward_message_of_millions_of_empty_maps_closes_the_connection() -> None:
    async def main() -> None:
        sink = Sink()
        server = await forward(sink)
        before = rejects("forward", "bad_msgpack")
        try:
            bomb = await Client.connect(server)
            inner = b"\xdd" + (1 << 20).to_bytes(4, "big") + b"\x80" * (1 << 20)
            await bomb.send_raw(b"\x92\xa1t\x92" + inner + inner)  # ["t", [2M empty maps]]
            assert await bomb.closed_by_server(10)
            assert rejects("forward", "bad_msgpack") == before + 1
            ok = await Client.connect(server)  # other connections are not affected
            await ok.send(["t", T0, record(STARTUP), {"chunk": "ok"}])
            assert await ok.receive() == {"ack": "ok"}
            await ok.close()
        finally:
            await server.stop()

    asyncio.run(main())
