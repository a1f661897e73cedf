"""``POST /v1/logs`` (OTLP/HTTP logs): the real OpenTelemetry Python SDK (LoggerProvider +
OTLPLogExporter, protobuf + gzip) sending a real vLLM failure log to a running service, and
the door's decoding, limits and answers in-process (protobuf and OTLP/JSON, gzip, auth,
partial success, refusals)."""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from service.api import create_app
from service.classify.rulebook import RuleBook
from service.sources.http.otlp import decode_export
from tests.api_support import WRITE, WRITE_TOKEN, close_context, make_context
from tests.e2e_support import REAL, Sentinel, free_port, service_config, wait_until

NS, POD, CONTAINER, NODE = "llm-prod", "qwen-7b-0", "vllm", "gpu-node-3"
IMAGE = "vllm/vllm-openai"
RESOURCE = {
    "k8s.namespace.name": NS,
    "k8s.pod.name": POD,
    "k8s.container.name": CONTAINER,
    "k8s.node.name": NODE,
    "container.image.name": IMAGE,
    "container.image.tag": "v0.32.0",
    "service.name": "vllm",
    "k8s.pod.labels.app": "qwen",
}
PROTOBUF = {"Content-Type": "application/x-protobuf"}
JSON = {"Content-Type": "application/json"}


def failure_lines() -> list[str]:
    return (REAL / "kv-cache-too-small.log").read_text(encoding="utf-8").splitlines()


def export_request(
    lines: list[str],
    resource: dict[str, str] | None = None,
    *,
    end: float | None = None,
    attributes: dict[str, str] | None = None,
) -> ExportLogsServiceRequest:
    """An export request as an OTLP exporter builds it: one resource, one scope, a record
    per line (1 ms apart, ending at ``end``)."""
    end = time.time() if end is None else end
    res = Resource(
        attributes=[
            KeyValue(key=k, value=AnyValue(string_value=v))
            for k, v in (RESOURCE if resource is None else resource).items()
        ]
    )
    attrs = [KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in (attributes or {}).items()]
    recs = [
        LogRecord(
            time_unix_nano=int((end - (len(lines) - i) * 0.001) * 1e9),
            body=AnyValue(string_value=line),
            attributes=attrs,
        )
        for i, line in enumerate(lines)
    ]
    return ExportLogsServiceRequest(
        resource_logs=[ResourceLogs(resource=res, scope_logs=[ScopeLogs(log_records=recs)])]
    )


def as_json(req: ExportLogsServiceRequest) -> bytes:
    """The OTLP/JSON encoding (lowerCamelCase, int64 as strings)."""
    return json.dumps(MessageToDict(req)).encode()


@pytest.fixture()
def client(tmp_path: Path) -> Iterator[TestClient]:
    ctx = make_context(tmp_path / "sentinel.db", RuleBook())
    with TestClient(create_app(ctx)) as c:
        yield c
    close_context(ctx)


def _incident(client: TestClient) -> dict[str, Any]:
    items = client.get("/incidents", params={"category": "oom_kv_cache"}).json()["items"]
    assert len(items) == 1, items
    return client.get(f"/incidents/{items[0]['id']}").json()


# ---- in-process ------------------------------------------------------------------------------
def test_protobuf_gzip_export_is_one_stream_per_resource(client: TestClient) -> None:
    body = gzip.compress(export_request(failure_lines()).SerializeToString())
    r = client.post(
        "/v1/logs", content=body, headers={**WRITE, **PROTOBUF, "Content-Encoding": "gzip"}
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/x-protobuf"
    assert not ExportLogsServiceResponse.FromString(r.content).HasField("partial_success")
    inc = _incident(client)
    assert inc["stream"] == f"{NS}/{POD}/{CONTAINER}"
    assert (inc["tier"], inc["stage"]) == ("capacity", "kv_cache_init")
    meta = inc["meta"]
    assert (meta["namespace"], meta["pod"], meta["node"]) == (NS, POD, NODE)
    assert meta["image"] == f"{IMAGE}:v0.32.0" and meta["labels"] == {"app": "qwen"}


def test_json_encoding_gives_the_same_records() -> None:
    req = export_request(
        failure_lines()[:40], end=1_790_000_000.0, attributes={"log.iostream": "stderr"}
    )
    from_pb, rej_pb = decode_export(req.SerializeToString(), "application/x-protobuf", None)
    from_json, rej_json = decode_export(gzip.compress(as_json(req)), "application/json", "gzip")
    assert rej_pb == rej_json == 0
    assert [(r.stream, r.text, r.time, r.meta) for r in from_pb] == [
        (r.stream, r.text, r.time, r.meta) for r in from_json
    ]
    assert from_pb[0].meta["fd"] and from_pb[0].time == pytest.approx(1_790_000_000.0 - 0.04)


def test_json_export_over_http(client: TestClient) -> None:
    r = client.post(
        "/v1/logs", content=as_json(export_request(failure_lines())), headers={**WRITE, **JSON}
    )
    assert r.status_code == 200 and r.json() == {}
    assert _incident(client)["stream"] == f"{NS}/{POD}/{CONTAINER}"


def test_identity_without_resource_comes_from_the_kubelet_path() -> None:
    path = f"/var/log/pods/{NS}_{POD}_0f1e2d3c-aaaa-bbbb-cccc-000000000000/{CONTAINER}/0.log"
    cri = "2026-12-02T14:39:21.000000001Z stderr F ERROR something broke"
    req = export_request([cri], resource={}, attributes={"log.file.path": path})
    [rec], _ = decode_export(req.SerializeToString(), "application/x-protobuf", None)
    assert rec.stream == f"{NS}/{POD}/{CONTAINER}"
    assert rec.text == "ERROR something broke" and rec.meta["fd"]  # CRI envelope removed


def test_service_name_is_the_stream_without_kubernetes() -> None:
    req = export_request(["hello"], resource={"service.name": "vllm-bare-metal"})
    [rec], _ = decode_export(req.SerializeToString(), "application/x-protobuf", None)
    assert rec.stream == "vllm-bare-metal"


def test_map_bodies_are_json_lines_and_records_without_body_are_partial(client: TestClient) -> None:
    req = export_request(["first"])
    recs = req.resource_logs[0].scope_logs[0].log_records
    structured = recs.add()
    structured.body.kvlist_value.values.add(key="message", value=AnyValue(string_value="x"))
    recs.add()  # no body
    [first, second], rejected = decode_export(
        req.SerializeToString(), "application/x-protobuf", None
    )
    assert rejected == 1 and json.loads(second.text) == {"message": "x"}
    r = client.post("/v1/logs", content=req.SerializeToString(), headers={**WRITE, **PROTOBUF})
    assert r.status_code == 200
    partial = ExportLogsServiceResponse.FromString(r.content).partial_success
    assert partial.rejected_log_records == 1 and partial.error_message
    r = client.post("/v1/logs", content=as_json(req), headers={**WRITE, **JSON})
    assert r.json()["partialSuccess"]["rejectedLogRecords"] == "1"


def test_same_auth_as_ingest(client: TestClient) -> None:
    body = export_request(["x"]).SerializeToString()
    assert client.post("/v1/logs", content=body, headers=PROTOBUF).status_code == 401
    assert (
        client.post(
            "/v1/logs", content=body, headers={**PROTOBUF, "Authorization": "Bearer wrong"}
        ).status_code
        == 401
    )
    assert (
        client.post(
            "/v1/logs", content=body, headers={**PROTOBUF, "Authorization": f"Bearer {WRITE_TOKEN}"}
        ).status_code
        == 200
    )


def test_refusals(client: TestClient) -> None:
    post = lambda body, **h: client.post("/v1/logs", content=body, headers={**WRITE, **h})  # noqa: E731
    r = post(b"hello", **{"Content-Type": "text/plain"})
    assert r.status_code == 415 and r.json()["code"] == 3
    r = post(b"\xff\xff\xff garbage", **PROTOBUF)
    assert r.status_code == 400 and r.headers["content-type"] == "application/x-protobuf"
    assert post(b"{not json", **JSON).status_code == 400
    assert post(b"[1, 2]", **JSON).status_code == 400
    assert post(b"not gzip", **JSON, **{"Content-Encoding": "gzip"}).status_code == 400
    assert post(b"{}", **JSON, **{"Content-Encoding": "br"}).status_code == 415
    bomb = gzip.compress(b"\0" * (70 << 20), compresslevel=1)  # inflates past 64 MiB
    assert post(bomb, **PROTOBUF, **{"Content-Encoding": "gzip"}).status_code == 413


def test_record_cap() -> None:
    from service.sources.http.body import BodyRefused

    with pytest.raises(BodyRefused) as exc:
        decode_export(
            export_request(["a"] * 11).SerializeToString(),
            "application/x-protobuf",
            None,
            max_records=10,
        )
    assert exc.value.status == 413


def test_off_with_sources_http_false(tmp_path: Path) -> None:
    ctx = make_context(tmp_path / "s.db", RuleBook(), http=False)
    try:
        with TestClient(create_app(ctx)) as c:
            assert c.post("/v1/logs", content=b"", headers={**WRITE, **PROTOBUF}).status_code == 404
    finally:
        close_context(ctx)


# ---- the real SDK against the running service ------------------------------------------------
def test_opentelemetry_sdk_exporter_into_the_running_service(tmp_path: Path) -> None:
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.resources import Resource as SdkResource

    print(
        "opentelemetry-sdk",
        version("opentelemetry-sdk"),
        "opentelemetry-exporter-otlp-proto-http",
        version("opentelemetry-exporter-otlp-proto-http"),
    )
    token = "otlp-e2e-token"
    port = free_port()
    svc = Sentinel(
        tmp_path,
        "sentinel",
        service_config(
            store_url=f"sqlite:///{tmp_path / 'sentinel.db'}", api_port=port, token=token
        ),
    )
    try:
        svc.start().wait_ready()
        exporter = OTLPLogExporter(
            endpoint=f"http://127.0.0.1:{port}/v1/logs",
            headers={"Authorization": f"Bearer {token}"},
            compression=Compression.Gzip,
            timeout=10,
        )
        provider = LoggerProvider(resource=SdkResource.create(RESOURCE))
        provider.add_log_record_processor(
            BatchLogRecordProcessor(exporter, max_export_batch_size=64, schedule_delay_millis=100)
        )
        logger = provider.get_logger("vllm.entrypoints")
        lines = failure_lines()
        end = time.time()
        for i, line in enumerate(lines):
            logger.emit(
                timestamp=int((end - (len(lines) - i) * 0.001) * 1e9),
                body=line,
                severity_text="ERROR" if " ERROR " in line else "INFO",
                attributes={"log.iostream": "stderr"},
            )
        assert provider.force_flush(30_000)
        provider.shutdown()

        def incident() -> list[dict[str, Any]]:
            return svc.incidents(category="oom_kv_cache")

        [inc] = wait_until(incident, 30, "the incident from the OTLP export")
        assert inc["stream"] == f"{NS}/{POD}/{CONTAINER}"
        assert (inc["tier"], inc["stage"], inc["status"]) == ("capacity", "kv_cache_init", "open")
        full = svc.http.get(f"/incidents/{inc['id']}").json()
        assert (full["meta"]["namespace"], full["meta"]["pod"], full["meta"]["node"]) == (
            NS,
            POD,
            NODE,
        )
        assert full["meta"]["image"] == f"{IMAGE}:v0.32.0"
        stream = svc.stream(f"{NS}/{POD}/{CONTAINER}")
        # every line arrived, once (the stream counts the non-blank ones)
        assert stream is not None and stream["lines"] == sum(1 for x in lines if x.strip())
        assert svc.metric("sentinel_lines_total", source="otlp") == len(lines)
        # the same door refuses the same SDK without the token
        bad = OTLPLogExporter(endpoint=f"http://127.0.0.1:{port}/v1/logs", timeout=5)
        provider = LoggerProvider(resource=SdkResource.create(RESOURCE))
        provider.add_log_record_processor(BatchLogRecordProcessor(bad))
        provider.get_logger("x").emit(body="ERROR unauthenticated line")
        provider.force_flush(10_000)
        provider.shutdown()
        assert svc.metric("sentinel_lines_total", source="otlp") == len(lines)
        assert svc.metric("sentinel_api_requests_total", route="/v1/logs", status="401") >= 1
    finally:
        svc.close()
