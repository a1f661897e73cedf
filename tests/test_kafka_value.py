"""Kafka message values from Fluent Bit / Fluentd (JSON, msgpack) and raw producers."""

from __future__ import annotations

import json

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.ingest.lines import PARTIAL
from service.sources.kafka.value import decode_kafka_value
from tests.ingest_samples import (
    CONTAINER_ID,
    CRI_EPOCH,
    CRI_TIME,
    ENGINE_FAILED,
    KV_CACHE,
    NAMESPACE,
    NO_KERNEL,
    POD,
    ROUTES,
    STARTUP,
    STREAM,
    fluent_bit_record,
    fluentd_record,
    lines_in,
    rejects,
)

KEY = CONTAINER_ID.encode()


def fluent_bit_kafka_json(**changes) -> bytes:
    """Fluent Bit kafka output, format json: ``@timestamp`` inserted first."""
    return json.dumps({"@timestamp": 1785147072.123456, **fluent_bit_record(**changes)}).encode()


def test_fluent_bit_json_value():
    (rec,) = decode_kafka_value(fluent_bit_kafka_json(), KEY, "vllm-logs", 3, 1042)
    assert rec.text == ENGINE_FAILED
    assert rec.stream == STREAM
    assert rec.time == pytest.approx(CRI_EPOCH, abs=1e-6)  # the runtime's time beats @timestamp
    assert str(rec.position) == "kafka:vllm-logs:3:1042"
    assert rec.meta["namespace"] == NAMESPACE and rec.meta["fd"] == "stderr"


def test_at_timestamp_is_used_when_the_record_has_no_runtime_time():
    value = json.loads(fluent_bit_kafka_json())
    del value["time"]
    (rec,) = decode_kafka_value(json.dumps(value).encode(), None, "t", 0, 1)
    assert rec.time == 1785147072.123456


def test_fluentd_kafka2_json_value():
    value = json.dumps(fluentd_record()).encode()
    (rec,) = decode_kafka_value(value, None, "t", 0, 9)
    assert (rec.text, rec.stream, rec.meta["container_id"]) == (KV_CACHE, STREAM, CONTAINER_ID)
    assert rec.time is None  # Fluentd does not inject time unless configured


def test_msgpack_value():
    value = msgpack.packb(fluent_bit_record(log=ROUTES))
    (rec,) = decode_kafka_value(value, KEY, "t", 1, 2)
    assert (rec.text, rec.stream, str(rec.position)) == (ROUTES, STREAM, "kafka:t:1:2")


def test_msgpack_event_value():
    event = [
        msgpack.ExtType(0, (1785147072).to_bytes(4, "big") + (5).to_bytes(4, "big")),
        {"log": STARTUP},
    ]
    (rec,) = decode_kafka_value(msgpack.packb(event), KEY, "t", 1, 3)
    assert rec.text == STARTUP and rec.time == pytest.approx(1785147072 + 5e-9)
    assert rec.stream == CONTAINER_ID  # the message key names the stream


def test_raw_value_and_key_as_stream():
    (rec,) = decode_kafka_value(NO_KERNEL.encode(), KEY, "raw", 0, 5)
    assert (rec.text, rec.stream, rec.time) == (NO_KERNEL, CONTAINER_ID, None)


def test_raw_value_with_several_lines_gets_unique_positions():
    value = f"{ROUTES}\n{STARTUP}\n{KV_CACHE}\n".encode()
    out = decode_kafka_value(value, None, "raw", 2, 77)
    assert [r.text for r in out] == [ROUTES, STARTUP, KV_CACHE]
    assert [str(r.position) for r in out] == [
        "kafka:raw:2:77",
        "kafka:raw:2:77#1",
        "kafka:raw:2:77#2",
    ]
    assert {r.stream for r in out} == {"kafka:raw:2"}


def test_raw_cri_line_value():
    (rec,) = decode_kafka_value(f"{CRI_TIME} stdout P {ROUTES}".encode(), None, "t", 0, 1)
    assert rec.text == ROUTES and rec.meta == {"fd": "stdout", PARTIAL: True}


def test_record_whose_log_is_an_unparsed_cri_line():
    value = json.dumps(
        {
            "@timestamp": 1.0,
            "log": f"{CRI_TIME} stderr F {STARTUP}\n",
            "kubernetes": {"pod_name": POD, "namespace_name": NAMESPACE, "container_name": "vllm"},
        }
    ).encode()
    (rec,) = decode_kafka_value(value, None, "t", 0, 1)
    assert (rec.text, rec.stream, rec.meta["fd"]) == (STARTUP, STREAM, "stderr")
    assert rec.time == pytest.approx(CRI_EPOCH, abs=1e-6)


def test_multi_line_log_record_positions():
    value = fluent_bit_kafka_json(log=f"{ROUTES}\n{STARTUP}\n")
    out = decode_kafka_value(value, None, "t", 0, 10)
    assert [(r.text, str(r.position)) for r in out] == [
        (ROUTES, "kafka:t:0:10"),
        (STARTUP, "kafka:t:0:10#1"),
    ]


def test_json_that_is_not_a_record_is_kept_as_text():
    value = b'{"object": "chat.completion", "id": "cmpl-1"}'
    (rec,) = decode_kafka_value(value, None, "t", 0, 1)
    assert rec.text == value.decode()


def test_explicit_fluent_format_rejects_raw_values():
    before = rejects("kafka", "bad_record")
    assert decode_kafka_value(ROUTES.encode(), None, "t", 0, 1, fmt="fluent") == []
    assert rejects("kafka", "bad_record") == before + 1


def test_non_printable_key_is_not_a_stream_name():
    (rec,) = decode_kafka_value(ROUTES.encode(), b"\x00\x01\xff", "t", 4, 1)
    assert rec.stream == "kafka:t:4"


def test_tombstone_is_counted():
    before = rejects("kafka", "empty")
    assert decode_kafka_value(None, KEY, "t", 0, 1) == []
    assert decode_kafka_value(b"", KEY, "t", 0, 2) == []
    assert rejects("kafka", "empty") == before + 2


def test_invalid_utf8_is_kept_and_counted_once():
    before = rejects("kafka", "invalid_utf8")
    (rec,) = decode_kafka_value(b'{"log": "caf\xe9\\n"}', None, "t", 0, 1)
    assert rec.text == "caf\ufffd"
    (rec,) = decode_kafka_value(b"{caf\xe9 not json", None, "t", 0, 2)
    assert rec.text == "{caf\ufffd not json"
    assert rejects("kafka", "invalid_utf8") == before + 2


def test_lines_in_is_counted():
    before = lines_in("kafka")
    decode_kafka_value(f"{ROUTES}\n{STARTUP}".encode(), None, "t", 0, 1)
    assert lines_in("kafka") == before + 2


@settings(max_examples=500, deadline=None)
@given(
    st.binary(max_size=2000),
    st.none() | st.binary(max_size=70),
    st.sampled_from(["auto", "raw", "cri", "docker", "fluent"]),
)
def test_any_value_decodes_without_exception(value, key, fmt):
    for rec in decode_kafka_value(value, key, "t", 0, 1, fmt=fmt):
        rec.text.encode("utf-8")
        assert str(rec.position).startswith("kafka:t:0:1")


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 200))
def test_truncated_json_value_is_kept_as_text(cut):
    value = fluent_bit_kafka_json()
    (rec,) = decode_kafka_value(value[:-cut], None, "t", 0, 1)
    assert rec.text == value[:-cut].decode()


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=1, max_size=300).filter(lambda b: b[0] not in b"{[" and b[0] < 0x80))
def test_explicit_fluent_format_counts_every_non_record(value):
    before = rejects("kafka", "bad_record")
    assert decode_kafka_value(value, None, "t", 0, 1, fmt="fluent") == []
    assert rejects("kafka", "bad_record") == before + 1
