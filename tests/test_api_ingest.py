"""POST /ingest with what Fluent Bit's http output and Fluentd's out_http really send (real
vLLM captures inside): the incidents appear in GET /incidents; 200 only after the Pipeline
stored the batch; 400 / 413 / 401 / 503 / 204 where they belong."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import msgpack
import pytest
from fastapi.testclient import TestClient

from service.api import create_app
from service.api.routers import ingest as ingest_route
from service.classify.rulebook import RuleBook
from service.sources.http.endpoint import HttpEndpoint
from tests.api_support import (
    REAL,
    WRITE,
    close_context,
    endpoint_in,
    fluentbit_records,
    json_array,
    kube,
    make_context,
    ndjson,
)

KV = REAL / "kv-cache-too-small.cri.log"
WORKER = REAL / "worker-killed-while-serving.cri.log"
POD_TAG = "kube.var.log.containers.vllm-7f9c-abcde_llm-prod_vllm-" + "0123456789abcdef" * 4 + ".log"


@pytest.fixture(scope="module")
def rb() -> RuleBook:
    return RuleBook()


@pytest.fixture()
def ctx(tmp_path: Path, rb: RuleBook) -> Iterator:
    c = make_context(tmp_path / "s.db", rb)
    yield c
    close_context(c)


@pytest.fixture()
def client(ctx) -> Iterator[TestClient]:
    with TestClient(create_app(ctx)) as c:
        yield c


def http_endpoint(client: TestClient) -> HttpEndpoint:
    """The app's ``POST /ingest`` endpoint, whose limits a test lowers."""
    return endpoint_in(client.app.state.ctx, ingest_route.SOURCE)


def critical(client: TestClient, **params: str) -> list[dict]:
    r = client.get("/incidents", params={"severity": "critical", **params})
    assert r.status_code == 200
    return r.json()["items"]


def post(client: TestClient, body: bytes, content_type: str | None, **headers: str) -> object:
    h = {**WRITE, **headers}
    if content_type:
        h["Content-Type"] = content_type
    return client.post("/ingest", content=body, headers=h)


def test_fluent_bit_json_array_becomes_an_incident(client: TestClient) -> None:
    records = fluentbit_records(KV, kube("llm-prod", "qwen-0"))
    r = post(client, json_array(records), "application/json")
    assert r.status_code == 200
    assert r.json() == {"accepted": len(records), "rejected": 0}
    [inc] = critical(client)
    assert (inc["category"], inc["stage"], inc["stream"]) == (
        "oom_kv_cache",
        "kv_cache_init",
        "llm-prod/qwen-0/vllm",
    )
    assert inc["namespace"] == "llm-prod" and inc["pod"] == "qwen-0"
    assert inc["meta"]["image"] == "vllm/vllm-openai:v0.32.0"
    assert inc["opened_at"] == pytest.approx(
        datetime.fromisoformat("2026-12-02T14:39:00+00:00").timestamp(), abs=120
    )


def test_fluentd_ndjson_becomes_an_incident(client: TestClient) -> None:
    # Fluentd out_http (json_array false): NDJSON, kubernetes_metadata filter's maps, no time
    records = [
        {
            "log": r["log"] + "\n",
            "stream": r["stream"],
            "docker": {"container_id": "d" * 64},
            "kubernetes": {
                "namespace_name": "llm-dev",
                "pod_name": "qwen-1",
                "container_name": "vllm",
                "host": "gpu-node-2",
            },
        }
        for r in fluentbit_records(WORKER, {})
    ]
    r = post(client, ndjson(records), "application/x-ndjson")
    assert r.status_code == 200, r.text
    [inc] = critical(client, namespace="llm-dev")
    assert inc["category"] == "host_memory" and inc["node"] == "gpu-node-2"


def test_fluent_bit_json_lines_in_batches_across_requests(client: TestClient) -> None:
    records = fluentbit_records(KV, kube("llm-prod", "qwen-2"))
    for i in range(0, len(records), 25):  # one Fluent Bit flush per request
        r = post(client, ndjson(records[i : i + 25]), "application/x-ndjson")
        assert r.status_code == 200, r.text
    [inc] = critical(client)
    assert inc["category"] == "oom_kv_cache"
    st = client.get("/streams/llm-prod/qwen-2/vllm").json()
    whole = client.post("/classify", content=(REAL / "kv-cache-too-small.log").read_bytes())
    rep = whole.json()["reports"][0]
    assert (st["lines"], st["status"], st["stage"]) == (rep["lines"], "failed", rep["stage"])


def test_fluent_bit_default_msgpack_with_event_time_and_a_kubelet_tag(client: TestClient) -> None:
    body = b""
    for rec in fluentbit_records(KV, {}):
        sec = int(rec["date"])
        nsec = int(round((rec["date"] - sec) * 1e9)) % 1_000_000_000
        t = msgpack.ExtType(0, sec.to_bytes(4, "big") + nsec.to_bytes(4, "big"))
        body += msgpack.packb(
            [t, {"time": rec["time"], "stream": rec["stream"], "_p": "F", "log": rec["log"]}]
        )
    # no kubernetes map: pod/namespace/container come from the tag (kubelet path)
    r = post(client, body, "application/msgpack", **{"X-Fluent-Tag": POD_TAG})
    assert r.status_code == 200, r.text
    [inc] = critical(client)
    assert inc["category"] == "oom_kv_cache"
    assert inc["stream"] == "llm-prod/vllm-7f9c-abcde/vllm"


def test_tag_from_the_query_string(client: TestClient) -> None:
    records = [{"date": r["date"], "log": r["log"]} for r in fluentbit_records(KV, {})]
    r = client.post(
        "/ingest",
        params={"tag": POD_TAG},
        content=json_array(records),
        headers={**WRITE, "Content-Type": "application/json"},
    )
    assert r.status_code == 200
    assert critical(client)[0]["pod"] == "vllm-7f9c-abcde"


def test_gzip_compressed_body(client: TestClient) -> None:
    body = gzip.compress(json_array(fluentbit_records(KV, kube("ns", "gz"))))
    r = post(client, body, "application/json", **{"Content-Encoding": "gzip"})
    assert r.status_code == 200, r.text
    assert critical(client)[0]["pod"] == "gz"


def test_bad_entries_are_counted_and_the_rest_kept(client: TestClient) -> None:
    good = fluentbit_records(KV, kube("ns", "mixed"))
    body = (
        ndjson(good[:100])
        + b"{broken json\n"
        + json.dumps({"no_log": 1}).encode()
        + b"\n"
        + ndjson(good[100:])
    )
    r = post(client, body, "application/x-ndjson")
    assert r.status_code == 200
    assert r.json() == {"accepted": len(good), "rejected": 2}
    assert critical(client)[0]["category"] == "oom_kv_cache"


@pytest.mark.parametrize(
    ("body", "content_type", "rejected"),
    [
        (b"{broken", "application/json", 1),
        (b'[{"no_log": 1}, {"nor": 2}]', "application/json", 2),
        (b"\x1f\x8b\x08\x00garbage", "application/json", 1),
        (b"\x92\xc1", "application/msgpack", 1),
    ],
)
def test_nothing_decodable_is_400_with_reject_counts(
    client: TestClient, body: bytes, content_type: str, rejected: int
) -> None:
    r = post(client, body, content_type)
    assert r.status_code == 400, r.text
    detail = r.json()["detail"]
    assert detail["accepted"] == 0 and detail["rejected"] == rejected
    assert critical(client) == []


def test_an_empty_batch_is_204(client: TestClient) -> None:
    assert post(client, b"", "application/json").status_code == 204
    assert post(client, b"[]", "application/json").status_code == 204
    # Fluent Bit event-format-v2 group markers only
    body = msgpack.packb([[-1, {}], {}]) + msgpack.packb([[-2, {}], {}])
    assert post(client, body, "application/msgpack").status_code == 204


def test_unsupported_content_encoding_is_415(client: TestClient) -> None:
    assert post(client, b"[]", "application/json", **{"Content-Encoding": "br"}).status_code == 415


def test_over_the_size_limit_is_413(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_endpoint(client), "max_body", 1000)
    monkeypatch.setattr(http_endpoint(client), "max_decompressed", 5000)
    big = json_array(fluentbit_records(KV, kube("ns", "big")))
    assert post(client, big, "application/json").status_code == 413
    # streamed without Content-Length
    r = client.post(
        "/ingest",
        content=iter([big[:800], big[800:]]),
        headers={**WRITE, "Content-Type": "application/json"},
    )
    assert r.status_code == 413
    # a gzip bomb: small on the wire, beyond the decompressed bound
    bomb = gzip.compress(b"[" + b" " * 100_000 + b"]")
    assert len(bomb) < 1000
    r = post(client, bomb, "application/json", **{"Content-Encoding": "gzip"})
    assert r.status_code == 413
    assert critical(client) == []


def test_ingest_requires_the_token(client: TestClient) -> None:
    body = json_array(fluentbit_records(KV, kube("ns", "anon")))
    r = client.post("/ingest", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 401
    r = client.post(
        "/ingest",
        content=body,
        headers={"Content-Type": "application/json", "Authorization": "Bearer wrong"},
    )
    assert r.status_code == 401
    assert critical(client) == []


def test_answer_comes_only_after_the_pipeline_stored_the_batch(ctx, client: TestClient) -> None:
    calls: list[int] = []
    real_submit = ctx.pipeline.submit

    async def submit(records, source, chunk_id=None):
        await real_submit(records, source, chunk_id)
        calls.append(len(ctx.store.list_incidents()[0]))  # durable before we answer

    ctx.pipeline.submit = submit
    r = post(client, json_array(fluentbit_records(KV, kube("ns", "durable"))), "application/json")
    assert r.status_code == 200 and calls == [1]


def test_a_failing_store_is_503_so_the_collector_retries(ctx, client: TestClient) -> None:
    async def submit(records, source, chunk_id=None):
        raise OSError("disk full")

    real = ctx.pipeline.submit
    ctx.pipeline.submit = submit
    body = json_array(fluentbit_records(KV, kube("ns", "retry")))
    r = post(client, body, "application/json")
    assert r.status_code == 503 and r.headers["Retry-After"] == "5"
    ctx.pipeline.submit = real
    assert post(client, body, "application/json").status_code == 200  # the retry
    assert critical(client)[0]["pod"] == "retry"


def test_an_idempotency_key_makes_a_retried_request_count_once(client: TestClient) -> None:
    records = fluentbit_records(KV, kube("ns", "idem"))
    for _ in range(2):
        r = post(client, json_array(records), "application/json", **{"Idempotency-Key": "c-1"})
        assert r.status_code == 200
    once = client.get("/streams/ns/idem/vllm").json()["lines"]
    post(client, json_array(records), "application/json", **{"Idempotency-Key": "c-1"})
    assert client.get("/streams/ns/idem/vllm").json()["lines"] == once
    post(client, json_array(records), "application/json", **{"Idempotency-Key": "c-2"})
    assert client.get("/streams/ns/idem/vllm").json()["lines"] == 2 * once


def test_cri_partial_chunks_are_joined_across_requests(client: TestClient) -> None:
    k8s = kube("ns", "partial")
    full = fluentbit_records(KV, k8s)
    line = next(r for r in full if "KV cache is needed" in r["log"])
    i = full.index(line)
    head = [dict(r) for r in full[:i]]
    p1 = {**line, "_p": "P", "log": line["log"][:40]}
    p2 = {**line, "_p": "F", "log": line["log"][40:]}
    assert post(client, ndjson(head + [p1]), "application/x-ndjson").status_code == 200
    assert post(client, ndjson([p2] + full[i + 1 :]), "application/x-ndjson").status_code == 200
    [inc] = critical(client)
    assert inc["category"] == "oom_kv_cache"
    assert line["log"] in inc["line"]


def test_ingest_is_off_when_sources_http_is_false(tmp_path: Path, rb: RuleBook) -> None:
    ctx = make_context(tmp_path / "off.db", rb, http=False)
    try:
        with TestClient(create_app(ctx)) as c:
            r = c.post("/ingest", content=b"[]", headers=WRITE)
            assert r.status_code == 404
            assert "/ingest" not in c.get("/openapi.json").json()["paths"]
    finally:
        close_context(ctx)
