"""Envelope decoding: raw, Docker json-file, CRI and Fluent Bit / Fluentd records."""

from __future__ import annotations

import json

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.ingest.container_lines import split_cri
from service.ingest.envelope import Format, decode_line, decode_record, decode_text
from service.ingest.fluent_record import stream_key
from service.ingest.lines import PARTIAL
from service.ingest.runtime_paths import path_meta
from service.ingest.timestamps import EventTime, ext_hook, parse_rfc3339, to_epoch
from service.records import Position
from tests.ingest_samples import (
    COLOURED,
    CONTAINER_ID,
    CONTAINER_ID_2,
    CRI_EPOCH,
    CRI_TIME,
    ENGINE_FAILED,
    KV_CACHE,
    NAMESPACE,
    NCCL_WARN,
    NO_KERNEL,
    POD,
    POD_ID,
    ROUTES,
    STARTUP,
    STREAM,
    TAG,
    fluent_bit_record,
    fluentd_record,
    rejects,
)

DOCKER_TIME = "2019-01-01T11:11:11.111111111Z"
DOCKER_EPOCH = 1546341071.111111111


def docker_line(log: str, stream: str = "stdout", time: str = DOCKER_TIME) -> str:
    return json.dumps({"log": log, "stream": stream, "time": time}) + "\n"


# --- raw -------------------------------------------------------------------------------


def test_raw_line_strips_only_the_newline_and_keeps_cr_and_ansi():
    (rec,) = decode_line(NO_KERNEL + "\n", "vllm.log")
    assert rec.text == NO_KERNEL and rec.text.endswith("\r")
    (rec,) = decode_line(COLOURED + "\n", "vllm.log", position=Position("file", "vllm.log", 3))
    assert rec.text == COLOURED
    assert (rec.stream, rec.time, rec.meta, str(rec.position)) == (
        "vllm.log",
        None,
        {},
        "file:vllm.log:3",
    )


def test_python_dict_repr_and_plain_json_without_log_field_stay_raw_text():
    line = "{'model': 'moonshotai/Kimi-K3', 'tensor_parallel_size': 8}"
    assert decode_line(line, "s")[0].text == line
    line = '{"object": "chat.completion", "usage": {"prompt_tokens": 12}}'
    assert decode_line(line, "s")[0].text == line


def test_raw_format_keeps_a_cri_looking_line_verbatim():
    line = f"{CRI_TIME} stderr F {STARTUP}"
    (rec,) = decode_line(line, "s", fmt=Format.RAW)
    assert rec.text == line and rec.time is None


def test_source_meta_fills_the_record_and_names_the_stream():
    meta = {"namespace": NAMESPACE, "pod": POD, "container": "vllm", "container_id": CONTAINER_ID}
    (rec,) = decode_line(ROUTES, "/var/log/containers/x.log", meta=meta)
    assert rec.stream == STREAM
    assert rec.meta == meta and rec.meta is not meta


# --- Docker json-file ------------------------------------------------------------------


def test_docker_json_file_line():
    (rec,) = decode_line(docker_line(ROUTES + "\n"), "/var/lib/docker/x-json.log")
    assert rec.text == ROUTES
    assert rec.time == pytest.approx(DOCKER_EPOCH, abs=1e-6)
    assert rec.meta == {"fd": "stdout"}
    assert rec.stream == "/var/lib/docker/x-json.log"


def test_docker_keeps_vllm_carriage_return_before_the_newline():
    (rec,) = decode_line(docker_line(NO_KERNEL + "\n", "stderr"), "c")
    assert rec.text == NO_KERNEL and rec.meta["fd"] == "stderr"


def test_docker_entry_without_newline_is_a_partial_chunk():
    (rec,) = decode_line(docker_line("x" * 16384), "c")
    assert rec.meta == {"fd": "stdout", PARTIAL: True}
    assert len(rec.text) == 16384


def test_explicit_docker_format_rejects_a_cri_line():
    before = rejects("t", "bad_docker")
    assert decode_line(f"{CRI_TIME} stdout F {ROUTES}", "c", fmt="docker", source="t") == []
    assert rejects("t", "bad_docker") == before + 1


# --- CRI -------------------------------------------------------------------------------


def test_cri_full_line():
    (rec,) = decode_line(f"{CRI_TIME} stderr F {STARTUP}\n", "c")
    assert rec.text == STARTUP
    assert rec.time == pytest.approx(CRI_EPOCH, abs=1e-6)
    assert rec.meta == {"fd": "stderr"}


def test_cri_partial_chunk_is_marked():
    (rec,) = decode_line(f"{CRI_TIME} stdout P {'y' * 100}", "c")
    assert rec.meta == {"fd": "stdout", PARTIAL: True} and rec.text == "y" * 100


def test_cri_empty_line_and_content_with_spaces():
    (rec,) = decode_line(f"{CRI_TIME} stdout F ", "c")
    assert rec.text == ""
    (rec,) = decode_line(f"{CRI_TIME} stdout F   indented  text ", "c")
    assert rec.text == "  indented  text "


def test_cri_timestamp_with_offset():
    (rec,) = decode_line("2026-07-27T12:11:12.5+02:00 stdout F x", "c")
    assert rec.time == pytest.approx(1785147072.5)


def test_explicit_cri_rejects_other_lines():
    before = rejects("t", "bad_cri")
    assert decode_line(ROUTES, "c", fmt=Format.CRI, source="t") == []
    assert decode_line("2026-07-27T10:11:12Z stdlog F x", "c", fmt=Format.CRI, source="t") == []
    assert rejects("t", "bad_cri") == before + 2


def test_a_line_that_only_starts_like_a_timestamp_is_raw():
    line = "2026-07-27 10:11:12,123 - some other logger - hello"
    assert decode_line(line, "c")[0].text == line
    assert split_cri("2026-13-45T10:11:12Z stdout F x") is None


# --- Fluent Bit / Fluentd records --------------------------------------------------------


def test_fluent_bit_kubernetes_record():
    (rec,) = decode_record(fluent_bit_record(), tag=TAG, stream="fallback")
    assert rec.stream == STREAM
    assert rec.text == ENGINE_FAILED
    assert rec.time == pytest.approx(CRI_EPOCH, abs=1e-6)
    assert rec.meta == {
        "namespace": NAMESPACE,
        "pod": POD,
        "container": "vllm",
        "container_id": CONTAINER_ID,
        "pod_id": POD_ID,
        "node": "gpu-node-07",
        "image": "vllm/vllm-openai:kimi-k3",
        "image_id": "docker.io/vllm/vllm-openai@sha256:4b1d0c4e0b3a6f5e9c8d7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e",
        "labels": {"app.kubernetes.io/name": "vllm", "pod-template-hash": "7d9f8b6c4"},
        "fd": "stderr",
        "tag": TAG,
    }


def test_fluentd_kubernetes_metadata_record_with_docker_container_id():
    (rec,) = decode_record(fluentd_record(), time=1785147072)
    assert rec.text == KV_CACHE
    assert rec.time == 1785147072.0
    assert rec.meta["container_id"] == CONTAINER_ID
    assert rec.meta["image_id"] == "docker-pullable://vllm/vllm-openai@sha256:0123abcd"
    assert rec.stream == STREAM


def test_fluentd_docker_id_variant_and_namespace_alias():
    rec = fluentd_record(docker={"id": CONTAINER_ID_2})
    del rec["kubernetes"]["namespace_name"]
    rec["kubernetes"]["namespace"] = "serving"
    rec["kubernetes"].pop("container_name")
    (out,) = decode_record(rec, stream="s")
    assert out.meta["namespace"] == "serving"
    assert out.stream == CONTAINER_ID_2  # no container name: fall back to the container id


def test_container_runtime_scheme_is_removed_from_container_ids():
    rec = fluentd_record(docker={"container_id": "containerd://" + CONTAINER_ID})
    del rec["kubernetes"]
    (out,) = decode_record(rec, stream="s")
    assert out.meta["container_id"] == CONTAINER_ID and out.stream == CONTAINER_ID


def test_container_restart_keeps_the_stream_of_the_pod_container():
    first = decode_record(fluent_bit_record())[0]
    restarted = fluent_bit_record()
    restarted["kubernetes"]["docker_id"] = CONTAINER_ID_2
    second = decode_record(restarted)[0]
    assert first.meta["container_id"] != second.meta["container_id"]
    assert first.stream == second.stream == STREAM


def test_classic_cri_parser_fields_logtag_and_message():
    rec = {"time": CRI_TIME, "stream": "stdout", "logtag": "P", "message": "z" * 10}
    (out,) = decode_record(rec, stream="s")
    assert out.text == "z" * 10 and out.meta == {"fd": "stdout", PARTIAL: True}
    rec["logtag"] = "F"
    assert PARTIAL not in decode_record(rec, stream="s")[0].meta


def test_record_whose_log_is_an_unparsed_cri_line():
    rec = fluent_bit_record(log=f"{CRI_TIME} stdout P {'q' * 50}\n")
    for key in ("time", "stream", "_p"):
        del rec[key]
    (out,) = decode_record(rec, time=1.0)
    assert out.text == "q" * 50
    assert out.time == pytest.approx(CRI_EPOCH, abs=1e-6)
    assert out.meta["fd"] == "stdout" and out.meta[PARTIAL] is True
    assert out.stream == STREAM


def test_record_whose_log_is_an_unparsed_docker_line():
    rec = {"log": docker_line(ROUTES + "\n", "stderr"), "kubernetes": {"docker_id": CONTAINER_ID}}
    (out,) = decode_record(rec)
    assert out.text == ROUTES and out.meta["fd"] == "stderr" and out.stream == CONTAINER_ID
    assert out.time == pytest.approx(DOCKER_EPOCH, abs=1e-6)


def test_explicit_cri_on_a_record_whose_log_is_not_cri_is_rejected():
    before = rejects("t", "bad_cri")
    assert decode_record({"log": ROUTES}, fmt="cri", source="t") == []
    assert rejects("t", "bad_cri") == before + 1


def test_record_time_precedence():
    rec = {"log": "x", "time": CRI_TIME, "@timestamp": 5.0, "date": 6.0}
    assert decode_record(rec, time=EventTime(7.0))[0].time == pytest.approx(CRI_EPOCH, abs=1e-6)
    del rec["time"]
    assert decode_record(rec, time=EventTime(7.0))[0].time == 7.0
    assert decode_record(rec)[0].time == 5.0
    del rec["@timestamp"]
    assert decode_record(rec)[0].time == 6.0
    rec["date"] = "2018-05-30T09:39:52.000681Z"  # Fluent Bit json_date_format iso8601
    assert decode_record(rec)[0].time == pytest.approx(1527673192.000681)


def test_kafka_style_timestamp_key_and_message_field():
    rec = {"@timestamp": 1785146472.123456, "message": STARTUP, "stream": "stderr"}
    (out,) = decode_record(rec, stream="k")
    assert (out.text, out.time, out.stream) == (STARTUP, 1785146472.123456, "k")


def test_record_with_several_lines_becomes_several_records():
    rec = fluent_bit_record(log=f"{ROUTES}\r\n{NCCL_WARN}\n")
    out = decode_record(rec, position=Position("kafka", "logs:0", 7))
    assert [r.text for r in out] == [ROUTES + "\r", NCCL_WARN]
    assert [str(r.position) for r in out] == ["kafka:logs:0:7", "kafka:logs:0:7#1"]
    assert out[0].meta == out[1].meta and out[0].meta is not out[1].meta


def test_docker_log_with_embedded_newline_and_unfinished_tail():
    out = decode_line(docker_line("first\nsecond"), "c", position=Position("p", "p", 0))
    assert [(r.text, PARTIAL in r.meta) for r in out] == [("first", False), ("second", True)]


def test_stream_key_fallbacks():
    assert stream_key({"namespace": "a", "pod": "b", "container": "c"}, "d") == "a/b/c"
    assert stream_key({"pod": "b", "container_id": "id", "tag": "t"}, "d") == "id"
    assert stream_key({"tag": "t"}, "d") == "t"
    assert stream_key({}, "d") == "d"
    (rec,) = decode_record({"log": "x"}, tag="vllm.app")
    assert rec.stream == "vllm.app" and rec.meta == {"tag": "vllm.app"}


def test_kubelet_tag_names_the_stream_without_kubernetes_filter():
    (rec,) = decode_record({"log": ROUTES, "stream": "stdout"}, tag=TAG)
    assert rec.stream == STREAM and rec.meta["container_id"] == CONTAINER_ID


def test_record_without_log_field_is_rejected():
    before = rejects("t", "no_log_field")
    assert decode_record({"level": "info", "kubernetes": {}}, source="t") == []
    assert decode_record({"log": 42}, source="t") == []
    assert rejects("t", "no_log_field") == before + 2


def test_msgpack_bin_log_is_decoded_with_replacement():
    before = rejects("t", "invalid_utf8")
    (rec,) = decode_record({"log": b"caf\xe9 \xff\n"}, source="t")
    assert rec.text == "caf\ufffd \ufffd"
    assert rejects("t", "invalid_utf8") == before + 1


def test_escaped_lone_surrogate_is_replaced_and_counted():
    before = rejects("t", "invalid_utf8")
    (rec,) = decode_line('{"log": "bad \\udc80 char\\n", "stream": "stdout"}', "c", source="t")
    assert rec.text == "bad \ufffd char"
    assert rejects("t", "invalid_utf8") == before + 1


def test_oversize_line_is_truncated_and_counted():
    before = rejects("t", "oversize")
    (rec,) = decode_line("x" * 5000, "c", max_line=1000, source="t")
    assert rec.text == "x" * 1000
    out = decode_record({"log": "a" * 3000 + "\nb"}, max_line=1000, source="t")
    assert [len(r.text) for r in out] == [1000, 1]
    assert rejects("t", "oversize") == before + 2


def test_decode_text_splits_a_blob_into_positioned_lines():
    blob = f"{ROUTES}\n{CRI_TIME} stderr F {STARTUP}\n"
    out = decode_text(blob, "k", position=Position("kafka", "t:0", 1))
    assert [(r.text, str(r.position)) for r in out] == [
        (ROUTES, "kafka:t:0:1"),
        (STARTUP, "kafka:t:0:1#1"),
    ]


# --- timestamps and runtime paths --------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "epoch"),
    [
        ("2019-01-01T11:11:11.111111111Z", 1546341071.111111111),
        ("2026-07-27T10:11:12Z", 1785147072.0),
        ("2026-07-27T12:11:12.25+02:00", 1785147072.25),
        ("2026-07-27T08:11:12-0200", 1785147072.0),
        ("2026-07-27 10:11:12.000681", 1785147072.000681),  # java_sql_timestamp
        ("2026-07-27T10:11:12", 1785147072.0),
    ],
)
def test_rfc3339_variants(text, epoch):
    assert parse_rfc3339(text) == pytest.approx(epoch, abs=1e-6)


@pytest.mark.parametrize(
    "text", ["2026-02-30T00:00:00Z", "2026-07-27T25:00:00Z", "2026-07-27T10:11:12.Z", "hello"]
)
def test_invalid_timestamps(text):
    assert parse_rfc3339(text) is None


def test_to_epoch_numbers_and_ext_types():
    assert to_epoch(1785146472) == 1785146472.0
    assert to_epoch(1785146472123) == pytest.approx(1785146472.123)  # milliseconds
    assert to_epoch(1785146472123456789) == pytest.approx(1785146472.123456789)  # ns
    assert to_epoch("1785146472.5") == 1785146472.5
    assert to_epoch(0) is None and to_epoch(float("nan")) is None and to_epoch(True) is None
    packed = msgpack.packb(msgpack.ExtType(0, b"\x6a\x7d\x5b\x48\x07\x5b\xcd\x15"))
    event_time = msgpack.unpackb(packed, ext_hook=ext_hook)
    assert isinstance(event_time, EventTime)
    assert event_time == pytest.approx(0x6A7D5B48 + 123456789 / 1e9)
    assert to_epoch(msgpack.Timestamp(1785146472, 500_000_000)) == 1785146472.5


def test_runtime_path_conventions():
    assert path_meta(f"/var/log/containers/{POD}_{NAMESPACE}_vllm-{CONTAINER_ID}.log") == {
        "pod": POD,
        "namespace": NAMESPACE,
        "container": "vllm",
        "container_id": CONTAINER_ID,
    }
    assert path_meta(f"/var/log/pods/{NAMESPACE}_{POD}_{POD_ID}/vllm/3.log.20260727-101112.gz") == {
        "namespace": NAMESPACE,
        "pod": POD,
        "pod_id": POD_ID,
        "container": "vllm",
    }
    assert path_meta(f"/var/lib/docker/containers/{CONTAINER_ID}/{CONTAINER_ID}-json.log") == {
        "container_id": CONTAINER_ID
    }
    assert path_meta("vllm.log") == {} and path_meta(None) == {}


# --- properties --------------------------------------------------------------------------

any_text = st.text(st.characters(codec=None), max_size=300)
clean_text = st.text(st.characters(codec="utf-8"), max_size=300)  # what byte decoding yields
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | any_text | st.binary(max_size=50),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "log",
                    "message",
                    "time",
                    "stream",
                    "_p",
                    "logtag",
                    "kubernetes",
                    "docker",
                    "labels",
                    "docker_id",
                    "host",
                    "pod_name",
                    "namespace_name",
                    "container_name",
                    "date",
                    "@timestamp",
                    "id",
                    "container_id",
                ]
            )
            | any_text,
            children,
            max_size=6,
        )
    ),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(
    st.text(st.characters(codec=None, exclude_characters="\n"), max_size=300),
    st.sampled_from(list(Format)),
)
def test_any_text_line_decodes_without_exception(line, fmt):
    for rec in decode_line(line + "\n", "s", fmt=fmt, source="prop"):
        assert isinstance(rec.text, str) and isinstance(rec.stream, str)
        assert "\n" not in rec.text


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(["{", "2026-07-27T10:11:12.1Z stdout ", '{"log":', "2026-07-27T10:11:12Z "]),
    clean_text,
)
def test_envelope_lookalikes_decode_without_exception(head, tail):
    for fmt in Format:
        for rec in decode_line(head + tail, "s", fmt=fmt, source="prop"):
            rec.text.encode("utf-8")  # never a lone surrogate


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "log",
                "message",
                "time",
                "stream",
                "_p",
                "logtag",
                "kubernetes",
                "docker",
                "date",
                "@timestamp",
            ]
        ),
        json_values,
        max_size=8,
    ),
    json_values,
)
def test_any_record_decodes_without_exception(record, event_time):
    for fmt in (Format.AUTO, Format.CRI, Format.DOCKER, Format.RAW):
        for rec in decode_record(record, time=event_time, tag="t", fmt=fmt, source="prop"):
            rec.text.encode("utf-8")
            assert rec.time is None or isinstance(rec.time, float)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_to_epoch_never_raises(value):
    result = to_epoch(value)
    assert result is None or isinstance(result, float)


def test_line_with_huge_nesting_is_raw_not_a_crash():
    line = "{" * 100_000
    assert decode_line(line, "s")[0].text == line
    assert decode_line('{"log": ' + "[" * 100_000, "s", fmt="docker", source="prop") == []
