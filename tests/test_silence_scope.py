"""A silence says what it hides: matchers that pin no single namespace are refused unless
``cluster_wide`` is chosen, ``POST /silences/preview`` (and the dashboard's preview) list the
open and last day's incidents it would match, and silenced incidents are marked in the list
and the detail. Real Store, real pipeline, real vLLM captures through ``POST /ingest``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import web_app
from service.classify.rulebook import RuleBook
from service.labels import pins_one_namespace
from tests.api_support import WRITE, close_context, make_context
from tests.test_api import WORKLOADS, ingest_capture


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    ctx = make_context(tmp_path_factory.mktemp("scope") / "sentinel.db", RuleBook())
    with TestClient(web_app(ctx)) as c:
        for name, ns, pod, node in WORKLOADS:
            ingest_capture(c, name, ns, pod, node)
        yield c
    close_context(ctx)


def critical(client: TestClient) -> list[dict]:
    r = client.get("/incidents", params={"limit": 500, "severity": "critical"})
    return r.json()["items"]


@pytest.mark.parametrize(
    ("matchers", "pinned"),
    [
        ({"namespace": ["llm-prod"]}, True),
        ({"namespace": ["llm-prod"], "category": ["oom_*"]}, True),
        ({"stream": ["llm-prod/qwen-0/vllm"]}, True),
        ({"incident": ["abc"]}, True),
        ({"category": ["oom_kv_cache"]}, False),
        ({"pod": ["qwen-0"]}, False),
        ({"namespace": ["llm-*"]}, False),
        ({"namespace": ["llm-prod", "llm-dev"]}, False),
        ({"stream": ["llm-prod/*"]}, False),
    ],
)
def test_pins_one_namespace(matchers: dict[str, list[str]], pinned: bool) -> None:
    assert pins_one_namespace(matchers) is pinned


def test_a_namespace_less_silence_needs_an_explicit_cluster_wide_choice(
    client: TestClient,
) -> None:
    inc = critical(client)[0]
    body = {"matchers": {"category": [inc["category"]]}, "duration": "1h", "comment": "c"}
    r = client.post("/silences", headers=WRITE, json=body)
    assert r.status_code == 422 and "cluster_wide" in r.text
    assert client.get("/silences").json() == []
    r = client.post("/silences", headers=WRITE, json={**body, "cluster_wide": True})
    assert r.status_code == 201, r.text
    assert client.delete(f"/silences/{r.json()['id']}", headers=WRITE).status_code == 204


def test_preview_lists_what_a_silence_would_hide_and_creates_nothing(client: TestClient) -> None:
    items = critical(client)
    prod = [i for i in items if i["namespace"] == "llm-prod"]
    assert prod and len(prod) < len(items)
    before = client.get("/silences").json()  # (expired ones of other tests stay listed)
    r = client.post("/silences/preview", json={"matchers": {"namespace": ["llm-prod"]}})
    assert r.status_code == 200, r.text
    seen = r.json()
    assert {i["id"] for i in seen["open"]} >= {i["id"] for i in prod if i["status"] == "open"}
    assert {i["namespace"] for i in seen["open"] + seen["recent"]} == {"llm-prod"}
    assert seen["namespaces"] == ["llm-prod"] and seen["cluster_wide"] is False
    wide = client.post("/silences/preview", json={"matchers": {"tier": ["*"]}}).json()
    assert wide["cluster_wide"] is True
    assert set(wide["namespaces"]) >= {"llm-prod", "llm-dev"}
    assert wide["open_count"] >= len([i for i in items if i["status"] == "open"])
    assert client.get("/silences").json() == before
    bad = client.post("/silences/preview", json={"matchers": {"colour": ["red"]}})
    assert bad.status_code == 422


def test_dashboard_previews_and_marks_silenced_incidents(client: TestClient) -> None:
    items = critical(client)
    dev = next(i for i in items if i["namespace"] == "llm-dev")
    prod = next(i for i in items if i["namespace"] == "llm-prod")
    form = {"use_category": "1", "value_category": dev["category"]}
    page = client.post("/ui/silences/preview", data=form, headers=WRITE)
    assert page.status_code == 200
    assert 'id="silence-preview"' in page.text
    assert "It reaches <strong>every namespace</strong>" in page.text
    assert dev["id"] in page.text
    r = client.post(
        "/silences",
        headers=WRITE,
        json={"matchers": {"namespace": ["llm-dev"]}, "duration": "1h", "comment": "dev drill"},
    )
    assert r.status_code == 201
    try:
        listing = client.get("/ui/incidents", headers=WRITE).text
        rows = dict(re.findall(r'data-id="([0-9a-f]+)">(.*?)</tr>', listing, re.S))
        assert "badge silenced" in rows[dev["id"]]
        assert "badge silenced" not in rows[prod["id"]]
        detail = client.get(f"/ui/incidents/{dev['id']}", headers=WRITE).text
        assert "silenced until" in detail and "badge silenced" in detail
        assert "badge silenced" not in client.get(f"/ui/incidents/{prod['id']}", headers=WRITE).text
    finally:
        client.delete(f"/silences/{r.json()['id']}", headers=WRITE)


def test_fresh_store_preview_is_empty(tmp_path: Path) -> None:
    ctx = make_context(tmp_path / "s.db", RuleBook())
    try:
        with TestClient(web_app(ctx)) as c:
            seen = c.post("/silences/preview", json={"matchers": {"namespace": ["x"]}}).json()
            assert seen["open"] == [] and seen["recent"] == [] and seen["open_count"] == 0
    finally:
        close_context(ctx)
