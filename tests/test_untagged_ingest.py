"""``POST /ingest`` without a tag (issue #28): different senders are never one stream.

A line is keyed by what its body carries (Kubernetes metadata; a record's own
``container_name`` / ``container_id`` / ``hostname`` / ``host``), and only a line that names
nobody by the client's address (``http:<address>``); those get a ``warning`` in the answer
naming the tag to send, and a log line at a bounded rate. Two pods failing the same way are
two incidents, never one workload "restarting". The rule: deploy/README.md.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from service.app import web_app
from service.classify.rulebook import RuleBook
from service.ratelog import RateLimiter
from tests.api_support import (
    REAL,
    WRITE,
    close_context,
    fluentbit_records,
    json_array,
    kube,
    make_context,
)
from tests.e2e_support import Sentinel, free_port, service_config

KV = REAL / "kv-cache-too-small.cri.log"
KV_TEXT = REAL / "kv-cache-too-small.log"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def client(tmp_path: Path) -> Iterator[TestClient]:
    ctx = make_context(tmp_path / "sentinel.db", RuleBook())
    with TestClient(web_app(ctx), base_url="https://testserver") as c:
        yield c
    close_context(ctx)


def records_naming(field: str, value: str) -> list[dict[str, Any]]:
    """The real capture as records that carry no Kubernetes metadata, only ``field``."""
    out = []
    for rec in fluentbit_records(KV, kube("x", "y")):
        del rec["kubernetes"]
        rec[field] = value
        out.append(rec)
    return out


def post_json(c: TestClient, records: list[dict[str, Any]]) -> dict[str, Any]:
    r = c.post(
        "/ingest",
        content=json_array(records),
        headers={**WRITE, "Content-Type": "application/json"},
    )
    assert r.status_code == 200, r.text
    return dict(r.json())


def critical(c: TestClient) -> list[dict[str, Any]]:
    return list(c.get("/incidents", params={"severity": "critical"}).json()["items"])


@pytest.mark.parametrize(
    "field, values, keys",
    [
        ("hostname", ("gpu-host-a", "gpu-host-b"), ("gpu-host-a", "gpu-host-b")),
        ("host", ("10.0.0.7", "10.0.0.8"), ("10.0.0.7", "10.0.0.8")),
        # Docker's fluentd logging driver names the container with a leading slash
        ("container_name", ("/vllm-a", "/vllm-b"), ("vllm-a", "vllm-b")),
    ],
)
def test_untagged_senders_are_keyed_by_what_their_records_name(
    client: TestClient, field: str, values: tuple[str, str], keys: tuple[str, str]
) -> None:
    for value in values:
        answer = post_json(client, records_naming(field, value))
        assert "warning" not in answer  # every line named its sender
    found = critical(client)
    assert sorted(i["stream"] for i in found) == sorted(keys)
    assert [i["restarts"] for i in found] == [0, 0]  # two senders, not one restarting


def test_kubernetes_metadata_needs_no_tag(client: TestClient) -> None:
    for pod in ("llama-0", "llama-1"):
        answer = post_json(client, fluentbit_records(KV, kube("llm", pod)))
        assert "warning" not in answer
    assert sorted(i["stream"] for i in critical(client)) == [
        "llm/llama-0/vllm",
        "llm/llama-1/vllm",
    ]


def test_lines_that_name_nobody_get_the_address_and_a_warning_naming_the_tag(
    client: TestClient, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from service.api import untagged

    # a limiter of its own (an hour): no other test's line counts, and the second is held
    monkeypatch.setattr(untagged._LOG, "limiter", RateLimiter(3600))
    caplog.set_level(logging.WARNING, logger="vllm_sentinel.ingest")
    body = KV_TEXT.read_bytes()
    headers = {**WRITE, "Content-Type": "text/plain"}
    first = client.post("/ingest", content=body, headers=headers).json()
    assert "X-Fluent-Tag" in first["warning"] and "?tag=" in first["warning"]
    assert f"{first['accepted']} of {first['accepted']} lines" in first["warning"]
    assert "'http:testclient'" in first["warning"]
    (inc,) = critical(client)
    assert inc["stream"] == "http:testclient"
    again = client.post("/ingest", content=body, headers=headers).json()
    assert "warning" in again  # every answer says it ...
    logged = [r for r in caplog.records if "without a tag" in r.getMessage()]
    assert len(logged) == 1  # ... the log once per interval per sender
    assert "X-Fluent-Tag" in logged[0].getMessage()
    tagged = client.post("/ingest?tag=pod-a", content=body, headers=headers).json()
    assert "warning" not in tagged


@pytest.mark.integration
def test_two_senders_of_plain_text_are_two_streams_in_the_real_service(tmp_path: Path) -> None:
    """The real process, two clients on two loopback addresses sending the same failure
    as text: two streams, two incidents, neither a restart of the other."""
    cfg = service_config(store_url=f"sqlite:///{tmp_path / 's.db'}", api_port=free_port())
    svc = Sentinel(tmp_path, "untagged", cfg)
    try:
        svc.start().wait_ready(60)
        for address in ("127.0.0.2", "127.0.0.3"):
            transport = httpx.HTTPTransport(local_address=address)
            with httpx.Client(transport=transport, base_url=svc.http.base_url) as c:
                r = c.post(
                    "/ingest",
                    content=KV_TEXT.read_bytes(),
                    headers={"Content-Type": "text/plain"},
                )
            assert r.status_code == 200, r.text
            assert f"'http:{address}'" in r.json()["warning"]
        found = svc.incidents(severity="critical")
        assert sorted(i["stream"] for i in found) == ["http:127.0.0.2", "http:127.0.0.3"]
        assert [i["restarts"] for i in found] == [0, 0]
        assert "without a tag" in svc.log_tail()
    finally:
        svc.close()
