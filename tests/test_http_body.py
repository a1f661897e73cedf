"""HTTP bodies of Fluent Bit's http output (msgpack, json, json_lines, json_stream) and
Fluentd's out_http, plain or gzip."""

from __future__ import annotations

import gzip
import json

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.ingest.lines import PARTIAL
from service.sources.http.body import TAG_HEADER, decode_http_body
from tests.ingest_samples import (
    CONTAINER_ID,
    CRI_EPOCH,
    ENGINE_FAILED,
    KV_CACHE,
    NAMESPACE,
    POD,
    ROUTES,
    STARTUP,
    STREAM,
    TAG,
    fluent_bit_record,
    fluentd_record,
    lines_in,
    rejects,
)

T0 = 1785147072


def event_time(seconds: int, nanos: int) -> msgpack.ExtType:
    return msgpack.ExtType(0, seconds.to_bytes(4, "big") + nanos.to_bytes(4, "big"))


def json_record(log: str, date: float = T0 + 0.25) -> dict:
    """A record as Fluent Bit's json formats print it: ``date`` first, no runtime time."""
    rec = fluent_bit_record(log=log)
    del rec["time"]
    return {"date": date, **rec}


def test_tag_header_convention():
    assert TAG_HEADER == "X-Fluent-Tag"


def test_fluent_bit_default_msgpack_body():
    body = msgpack.packb([event_time(T0, 250_000_000), json_record(ROUTES)]) + msgpack.packb(
        [event_time(T0 + 1, 0), fluent_bit_record()]
    )
    records, rejected = decode_http_body(body, "application/msgpack", None, tag=TAG)
    assert rejected == 0
    assert [r.text for r in records] == [ROUTES, ENGINE_FAILED]
    assert records[0].time == pytest.approx(T0 + 0.25)  # record ``date`` (same instant)
    assert records[1].time == pytest.approx(CRI_EPOCH, abs=1e-6)  # runtime ``time`` wins
    assert records[0].stream == STREAM and records[0].meta["tag"] == TAG


def test_fluent_bit_event_format_v2_with_group_markers():
    rec = fluent_bit_record(log=KV_CACHE)
    del rec["time"]
    body = (
        msgpack.packb([[-1, {"resource": {}}], {}])
        + msgpack.packb([[event_time(T0, 5), {"otlp": {}}], rec])
        + msgpack.packb([[-2, {}], {}])
    )
    records, rejected = decode_http_body(body, "application/msgpack", None)
    assert (rejected, [r.text for r in records]) == (0, [KV_CACHE])
    assert records[0].time == pytest.approx(T0 + 5e-9)


def test_bare_msgpack_maps_are_records_too():
    body = msgpack.packb(fluentd_record()) + msgpack.packb({"message": STARTUP})
    records, rejected = decode_http_body(body, "application/x-msgpack", None, tag="vllm")
    assert [(r.stream, r.text) for r in records] == [(STREAM, KV_CACHE), ("vllm", STARTUP)]
    assert rejected == 0


def test_fluent_bit_json_array():
    body = json.dumps([json_record(ROUTES), json_record(STARTUP, T0 + 1.5)]).encode()
    records, rejected = decode_http_body(body, "application/json", None, tag=TAG)
    assert [(r.text, r.time) for r in records] == [(ROUTES, T0 + 0.25), (STARTUP, T0 + 1.5)]
    assert rejected == 0
    assert records[0].meta["namespace"] == NAMESPACE and records[0].meta["pod"] == POD


def test_fluent_bit_json_lines():
    body = "".join(json.dumps(json_record(line)) + "\n" for line in (ROUTES, STARTUP)).encode()
    records, rejected = decode_http_body(body, "application/x-ndjson", None)
    assert [r.text for r in records] == [ROUTES, STARTUP] and rejected == 0


def test_fluent_bit_json_stream_of_concatenated_objects():
    body = "".join(json.dumps(json_record(line)) for line in (ROUTES, STARTUP, KV_CACHE)).encode()
    records, rejected = decode_http_body(body, "application/json", None)
    assert [r.text for r in records] == [ROUTES, STARTUP, KV_CACHE] and rejected == 0


def test_iso8601_date_format():
    rec = json_record(ROUTES, date=0)
    rec["date"] = "2026-07-27T10:11:12.500000Z"
    records, _ = decode_http_body(json.dumps([rec]).encode(), "application/json", None)
    assert records[0].time == pytest.approx(T0 + 0.5)


def test_fluentd_out_http_ndjson_and_json_array():
    lines = [fluentd_record(), fluentd_record(log=ROUTES + "\n")]
    ndjson = "\n".join(json.dumps(r) for r in lines).encode()
    records, rejected = decode_http_body(ndjson, "application/x-ndjson; charset=utf-8", None)
    assert [r.text for r in records] == [KV_CACHE, ROUTES] and rejected == 0
    assert records[0].meta["container_id"] == CONTAINER_ID
    records, rejected = decode_http_body(json.dumps(lines).encode(), "application/json", None)
    assert [r.text for r in records] == [KV_CACHE, ROUTES] and rejected == 0


def test_gzip_content_encoding():
    body = gzip.compress(json.dumps([json_record(ROUTES)]).encode())
    records, rejected = decode_http_body(body, "application/json", "gzip")
    assert [r.text for r in records] == [ROUTES] and rejected == 0


def test_bad_json_lines_are_counted_and_skipped_good_lines_kept():
    before = rejects("http", "bad_json")
    body = "\n".join(
        [
            json.dumps(json_record(ROUTES)),
            '{"log": "truncated by a proxy',
            json.dumps(json_record(STARTUP)),
            "not json at all",
            json.dumps(json_record(KV_CACHE)),
        ]
    ).encode()
    records, rejected = decode_http_body(body, "application/x-ndjson", None)
    assert [r.text for r in records] == [ROUTES, STARTUP, KV_CACHE]
    assert rejected == 2 and rejects("http", "bad_json") == before + 2


def test_records_without_a_log_field_are_rejected():
    body = json.dumps([{"date": 1.0, "cpu_p": 0.5}, json_record(ROUTES), 42]).encode()
    records, rejected = decode_http_body(body, "application/json", None)
    assert [r.text for r in records] == [ROUTES] and rejected == 2


def test_content_type_is_sniffed_when_missing():
    msgpack_body = msgpack.packb([T0, json_record(ROUTES)])
    assert decode_http_body(msgpack_body, None, None)[0][0].text == ROUTES
    json_body = b"  \n" + json.dumps(json_record(STARTUP)).encode()
    assert decode_http_body(json_body, None, None)[0][0].text == STARTUP
    gz = gzip.compress(json.dumps([json_record(KV_CACHE)]).encode())
    assert decode_http_body(gz, None, None)[0][0].text == KV_CACHE


def test_a_foreign_content_type_or_unsniffable_junk_is_refused_not_read_as_text():
    json_body = json.dumps(json_record(STARTUP)).encode()
    before = rejects("http", "unsupported_media_type")
    assert decode_http_body(json_body, "application/octet-stream", None) == ([], 1)
    assert decode_http_body(ROUTES.encode(), None, None) == ([], 1)  # text needs text/plain
    assert rejects("http", "unsupported_media_type") == before + 2
    assert decode_http_body(ROUTES.encode(), "text/plain", None)[0][0].text == ROUTES


def test_text_plain_lines_including_cri_lines():
    body = f"{ROUTES}\n2026-07-27T10:11:12.123456789Z stderr P {STARTUP}\n".encode()
    records, rejected = decode_http_body(body, "text/plain", None, tag="vllm.raw")
    assert [r.text for r in records] == [ROUTES, STARTUP] and rejected == 0
    assert records[1].meta == {"fd": "stderr", PARTIAL: True, "tag": "vllm.raw"}
    assert records[0].stream == "vllm.raw"


def test_partial_chunks_are_returned_for_a_joiner():
    rec = fluent_bit_record(log="x" * 100, _p="P")
    records, _ = decode_http_body(json.dumps([rec]).encode(), "application/json", None)
    assert records[0].meta[PARTIAL] is True


def test_corrupt_gzip_rejects_the_body():
    before = rejects("http", "bad_gzip")
    body = gzip.compress(b'[{"log": "x"}]')[:-6]
    assert decode_http_body(body, "application/json", "gzip") == ([], 1)
    assert rejects("http", "bad_gzip") == before + 1


def test_gzip_bomb_is_bounded():
    body = gzip.compress(b"[" + b" " * (5 << 20) + b"]")
    assert decode_http_body(body, "application/json", "gzip", max_decompressed_bytes=1 << 20) == (
        [],
        1,
    )


def test_unsupported_encoding_is_rejected():
    assert decode_http_body(b"\x28\xb5\x2f\xfd", "application/json", "zstd") == ([], 1)


def test_truncated_msgpack_keeps_what_came_before():
    before = rejects("http", "bad_msgpack")
    body = msgpack.packb([T0, json_record(ROUTES)]) + msgpack.packb([T0, json_record(STARTUP)])
    records, rejected = decode_http_body(body[:-10], "application/msgpack", None)
    assert [r.text for r in records] == [ROUTES] and rejected == 1
    assert rejects("http", "bad_msgpack") == before + 1


def test_lines_in_is_counted():
    before = lines_in("http")
    decode_http_body(json.dumps([json_record(ROUTES)] * 3).encode(), "application/json", None)
    assert lines_in("http") == before + 3


content_types = st.sampled_from(
    [
        None,
        "application/msgpack",
        "application/json",
        "application/x-ndjson",
        "text/plain",
        "application/octet-stream",
    ]
)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=2000), content_types, st.sampled_from([None, "gzip", "identity"]))
def test_any_body_decodes_without_exception(body, content_type, encoding):
    records, rejected = decode_http_body(body, content_type, encoding, tag="t")
    assert rejected >= 0
    for rec in records:
        rec.text.encode("utf-8")


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([ROUTES, STARTUP, KV_CACHE]), min_size=1, max_size=5),
    st.integers(1, 400),
)
def test_truncated_ndjson_loses_exactly_the_cut_line(lines, cut):
    encoded = [json.dumps(json_record(line)) for line in lines]
    assert min(map(len, encoded)) > 400  # so the cut stays inside the last line
    body = "\n".join(encoded).encode()
    records, rejected = decode_http_body(body[:-cut], "application/x-ndjson", None)
    assert [r.text for r in records] == lines[:-1]
    assert rejected == 1


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.integers(1, 5))
def test_msgpack_junk_tail_is_one_reject_and_the_events_before_it_are_kept(junk, count):
    body = b"".join(msgpack.packb([T0 + i, json_record(ROUTES)]) for i in range(count))
    before = rejects("http", "bad_msgpack")
    records, rejected = decode_http_body(body + b"\xc1" + junk, "application/msgpack", None)
    assert [r.time for r in records] == [T0 + i for i in range(count)]  # event time wins
    assert rejected == 1 and rejects("http", "bad_msgpack") == before + 1


def test_gunzip_tells_too_large_from_corrupt():
    from service.ingest.compression import DecompressedTooLarge, gunzip

    with pytest.raises(DecompressedTooLarge):
        gunzip(gzip.compress(b"x" * 10_000), 1000)
    with pytest.raises(ValueError) as corrupt:
        gunzip(gzip.compress(b"x" * 10_000)[:-9], 100_000)
    assert not isinstance(corrupt.value, DecompressedTooLarge)
    assert gunzip(gzip.compress(b"ok"), 2) == b"ok"
