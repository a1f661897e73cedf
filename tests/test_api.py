"""The REST API against the real Store (temp SQLite) and the real Pipeline: auth, incidents
(filters, pagination, 404s, resolve, feedback), streams, stats, silences, health, metrics.
Incidents come from real vLLM captures sent through POST /ingest as Fluent Bit sends them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from service.app import web_app
from service.classify.rulebook import RuleBook
from tests.api_support import (
    READ,
    READ_TOKEN,
    REAL,
    WRITE,
    close_context,
    fluentbit_records,
    json_array,
    kube,
    make_context,
)

# (capture, namespace, pod, node): four workloads, four different failures
WORKLOADS = [
    ("kv-cache-too-small", "llm-prod", "qwen-0", "gpu-node-1"),
    ("worker-killed-while-serving", "llm-prod", "qwen-1", "gpu-node-2"),
    ("model-unavailable-offline", "llm-dev", "llama-0", "gpu-node-1"),
    ("bad-unknown-cli-flag", "llm-dev", "llama-1", "gpu-node-3"),
]


def ingest_capture(client: TestClient, name: str, ns: str, pod: str, node: str) -> None:
    records = fluentbit_records(REAL / f"{name}.cri.log", kube(ns, pod, node=node))
    r = client.post(
        "/ingest",
        content=json_array(records),
        headers={**WRITE, "Content-Type": "application/json"},
    )
    assert r.status_code == 200, r.text


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    ctx = make_context(tmp_path_factory.mktemp("api") / "sentinel.db", RuleBook())
    with TestClient(web_app(ctx)) as c:
        for name, ns, pod, node in WORKLOADS:
            ingest_capture(c, name, ns, pod, node)
        yield c
    close_context(ctx)


@pytest.fixture()
def fresh(tmp_path: Path) -> Iterator[TestClient]:
    """A client on an empty store, for tests that change state."""
    ctx = make_context(tmp_path / "sentinel.db", RuleBook())
    with TestClient(web_app(ctx)) as c:
        yield c
    close_context(ctx)


def all_incidents(client: TestClient, **params: object) -> list[dict]:
    r = client.get("/incidents", params={"limit": 500, **params})
    assert r.status_code == 200, r.text
    return r.json()["items"]


# ---- auth -------------------------------------------------------------------------------
WRITES = [
    ("post", "/incidents/x/resolve", {"reason": "fixed"}),
    ("post", "/incidents/x/feedback", {"correct": True}),
    ("post", "/silences", {"matchers": {"namespace": ["a"]}, "duration": "1h", "comment": "c"}),
    ("delete", "/silences/x", None),
    ("post", "/ingest", [{"log": "hello"}]),
]


@pytest.mark.parametrize(("method", "path", "body"), WRITES)
def test_writes_without_a_token_are_refused_with_401(
    client: TestClient, method: str, path: str, body: object
) -> None:
    kwargs = {"json": body} if body is not None else {}
    r = client.request(method, path, **kwargs)
    assert r.status_code == 401
    assert r.headers["WWW-Authenticate"].startswith("Bearer")
    assert r.json() == {"detail": "missing bearer token"}


@pytest.mark.parametrize(("method", "path", "body"), WRITES)
def test_writes_with_a_wrong_token_are_refused_with_401(
    client: TestClient, method: str, path: str, body: object
) -> None:
    kwargs = {"json": body} if body is not None else {}
    for header in ("Bearer nope", "Basic d3JpdGU6dG9rZW4=", "Bearer " + READ_TOKEN):
        r = client.request(method, path, headers={"Authorization": header}, **kwargs)
        assert r.status_code == 401, header


@pytest.mark.parametrize(("method", "path", "body"), WRITES)
def test_writes_with_the_token_get_past_auth(
    client: TestClient, method: str, path: str, body: object
) -> None:
    kwargs = {"json": body} if body is not None else {}
    r = client.request(method, path, headers=WRITE, **kwargs)
    assert r.status_code not in (401, 403), r.text


def test_reads_are_open_when_no_read_token_is_configured(client: TestClient) -> None:
    for path in ("/incidents", "/stats", "/silences", "/feedback"):
        assert client.get(path).status_code == 200, path


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "::", "sentinel.example"])
def test_beyond_loopback_reads_need_the_write_token_when_no_read_token_is_set(
    tmp_path: Path, host: str
) -> None:
    ctx = make_context(tmp_path / "s.db", RuleBook(), host=host)
    try:
        with TestClient(web_app(ctx)) as c:
            for path in ("/incidents", "/incidents/x", "/stats", "/silences", "/feedback"):
                assert c.get(path).status_code == 401, path
                assert c.get(path, headers=READ).status_code == 401, path
                assert c.get(path, headers=WRITE).status_code in (200, 404), path
            assert c.post("/classify", content=b"x").status_code == 401
            r = c.get("/ui/incidents", follow_redirects=False)
            assert r.status_code in (302, 303, 401), r.status_code
            assert c.get("/ui/incidents", headers=WRITE).status_code == 200
            for path in ("/healthz", "/readyz", "/metrics"):
                assert c.get(path).status_code == 200, path
    finally:
        close_context(ctx)


def test_beyond_loopback_a_read_token_still_reads(tmp_path: Path) -> None:
    ctx = make_context(tmp_path / "s.db", RuleBook(), host="0.0.0.0", read_token=READ_TOKEN)
    try:
        with TestClient(web_app(ctx)) as c:
            assert c.get("/incidents").status_code == 401
            assert c.get("/incidents", headers=READ).status_code == 200
            assert c.get("/incidents", headers=WRITE).status_code == 200
    finally:
        close_context(ctx)


def test_read_token_guards_reads_and_the_write_token_also_reads(tmp_path: Path) -> None:
    ctx = make_context(tmp_path / "s.db", RuleBook(), read_token=READ_TOKEN)
    try:
        with TestClient(web_app(ctx)) as c:
            for path in (
                "/incidents",
                "/incidents/x",
                "/stats",
                "/silences",
                "/feedback",
                "/streams/a/b/c",
            ):
                assert c.get(path).status_code == 401, path
                assert c.get(path, headers={"Authorization": "Bearer bad"}).status_code == 401
                assert c.get(path, headers=READ).status_code in (200, 404), path
                assert c.get(path, headers=WRITE).status_code in (200, 404), path
            assert c.post("/classify", content=b"x").status_code == 401
            # the read token does not write
            r = c.post("/incidents/x/resolve", json={"reason": "r"}, headers=READ)
            assert r.status_code == 401
            # probes and metrics stay open
            for path in ("/healthz", "/readyz", "/metrics", "/openapi.json"):
                assert c.get(path).status_code == 200, path
    finally:
        close_context(ctx)


def test_without_any_token_everything_is_open_on_loopback(tmp_path: Path) -> None:
    ctx = make_context(tmp_path / "s.db", RuleBook(), token=None)
    try:
        with TestClient(web_app(ctx)) as c:
            r = c.post(
                "/silences",
                json={"matchers": {"namespace": ["n"]}, "duration": "1h", "comment": "maintenance"},
            )
            assert r.status_code == 201
    finally:
        close_context(ctx)


# ---- incidents ---------------------------------------------------------------------------
def test_ingested_captures_become_incidents_with_kubernetes_fields(client: TestClient) -> None:
    items = all_incidents(client, severity="critical")
    by_pod = {i["pod"]: i for i in items}
    assert set(by_pod) == {pod for _, _, pod, _ in WORKLOADS}
    kv = by_pod["qwen-0"]
    assert (kv["tier"], kv["category"], kv["stage"]) == (
        "capacity",
        "oom_kv_cache",
        "kv_cache_init",
    )
    assert kv["namespace"] == "llm-prod" and kv["node"] == "gpu-node-1"
    assert kv["stream"] == "llm-prod/qwen-0/vllm"
    assert kv["status"] == "open" and "KV cache" in kv["line"]
    assert by_pod["llama-0"]["category"] == "model_unavailable"


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("tier", "capacity"),
        ("category", "oom_kv_cache"),
        ("stage", "kv_cache_init"),
        ("status", "open"),
        ("severity", "critical"),
        ("namespace", "llm-dev"),
        ("pod", "qwen-1"),
        ("node", "gpu-node-1"),
        ("stream", "llm-dev/llama-0/vllm"),
    ],
)
def test_each_filter_keeps_only_matching_incidents(
    client: TestClient, param: str, value: str
) -> None:
    everything = all_incidents(client)
    got = all_incidents(client, **{param: value})
    assert got, f"nothing for {param}={value}"
    assert all(i[param] == value for i in got)
    assert {i["id"] for i in got} == {i["id"] for i in everything if i[param] == value}


def test_filters_combine(client: TestClient) -> None:
    got = all_incidents(client, namespace="llm-prod", node="gpu-node-1", severity="critical")
    assert [i["pod"] for i in got] == ["qwen-0"]


def test_since_accepts_epoch_seconds_and_iso_8601(client: TestClient) -> None:
    everything = all_incidents(client)
    cut = sorted(i["opened_at"] for i in everything)[len(everything) // 2]
    want = {i["id"] for i in everything if i["opened_at"] >= cut}
    assert {i["id"] for i in all_incidents(client, since=cut)} == want
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(cut))) + "Z"
    assert {i["id"] for i in all_incidents(client, since=iso)} == {
        i["id"] for i in everything if i["opened_at"] >= int(cut)
    }
    assert all_incidents(client, since="2999-01-01T00:00:00+00:00") == []


def test_pagination_walks_every_incident_once_newest_first(client: TestClient) -> None:
    everything = all_incidents(client)
    assert len(everything) >= 4
    seen: list[dict] = []
    cursor = None
    while True:
        params = {"limit": 1, **({"cursor": cursor} if cursor else {})}
        page = client.get("/incidents", params=params).json()
        assert page["count"] == len(page["items"]) <= 1
        seen += page["items"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert [i["id"] for i in seen] == [i["id"] for i in everything]
    opened = [i["opened_at"] for i in seen]
    assert opened == sorted(opened, reverse=True)


@pytest.mark.parametrize(
    "params",
    [
        {"limit": 0},
        {"limit": 501},
        {"tier": "gpu"},
        {"category": "oom_kvcache"},
        {"stage": "boot"},
        {"status": "closed"},
        {"severity": "page"},
        {"since": "yesterday"},
    ],
)
def test_bad_query_parameters_are_422(client: TestClient, params: dict) -> None:
    r = client.get("/incidents", params=params)
    assert r.status_code == 422
    assert "detail" in r.json()


def test_a_malformed_cursor_is_400(client: TestClient) -> None:
    r = client.get("/incidents", params={"cursor": "not-a-cursor!"})
    assert r.status_code == 400
    assert "cursor" in r.json()["detail"]


def test_get_one_incident_and_404_for_unknown_ids(client: TestClient) -> None:
    first = all_incidents(client)[0]
    r = client.get(f"/incidents/{first['id']}")
    assert r.status_code == 200
    body = r.json()
    assert body["id"] == first["id"] and body["category"] == first["category"]
    assert body["deliveries"] == [] and body["feedback"] == []
    for method, path, kw in [
        ("get", "/incidents/nope", {}),
        ("post", "/incidents/nope/resolve", {"json": {"reason": "r"}}),
        ("post", "/incidents/nope/feedback", {"json": {"correct": True}}),
    ]:
        r = client.request(method, path, headers=WRITE, **kw)
        assert r.status_code == 404, path
        assert r.json() == {"detail": "incident nope not found"}


def test_resolve_by_hand(fresh: TestClient) -> None:
    ingest_capture(fresh, "kv-cache-too-small", "ns", "p", "n")
    inc = all_incidents(fresh, severity="critical")[0]
    r = fresh.post(
        f"/incidents/{inc['id']}/resolve", json={"reason": "raised KV space"}, headers=WRITE
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "resolved" and body["resolution"] == "raised KV space"
    assert body["resolved_at"] is not None
    assert [i["id"] for i in all_incidents(fresh, status="resolved")] == [inc["id"]]
    assert fresh.post(f"/incidents/{inc['id']}/resolve", json={}, headers=WRITE).status_code == 422
    assert (
        fresh.post(
            f"/incidents/{inc['id']}/resolve", json={"reason": ""}, headers=WRITE
        ).status_code
        == 422
    )


def test_feedback_is_validated_against_the_taxonomy_and_listed(fresh: TestClient) -> None:
    ingest_capture(fresh, "worker-killed-while-serving", "ns", "p", "n")
    inc = all_incidents(fresh, severity="critical")[0]
    url = f"/incidents/{inc['id']}/feedback"
    bad = fresh.post(url, json={"correct": False, "category": "oom_kvcache"}, headers=WRITE)
    assert bad.status_code == 422
    assert fresh.post(url, json={"category": "oom_runtime"}, headers=WRITE).status_code == 422
    assert fresh.post(url, json={"correct": True, "extra": 1}, headers=WRITE).status_code == 422
    r = fresh.post(
        url,
        json={"correct": False, "category": "oom_runtime", "comment": "kernel OOM killer"},
        headers=WRITE,
    )
    assert r.status_code == 201, r.text
    fb = r.json()
    assert (fb["incident_id"], fb["correct"], fb["category"]) == (inc["id"], False, "oom_runtime")
    listed = fresh.get("/feedback").json()
    assert [f["id"] for f in listed] == [fb["id"]]
    assert listed[0]["incident_category"] == inc["category"]
    assert fresh.get(f"/incidents/{inc['id']}").json()["feedback"][0]["id"] == fb["id"]


# ---- streams and stats -------------------------------------------------------------------
def test_stream_by_its_slashed_key(client: TestClient) -> None:
    r = client.get("/streams/llm-prod/qwen-0/vllm")
    assert r.status_code == 200, r.text
    st = r.json()
    assert st["stream"] == "llm-prod/qwen-0/vllm"
    assert st["status"] == "failed"
    assert "cuda_init" in st["timeline"] or st["timeline"]
    assert st["facts"].get("vllm_version") == "0.32.0"
    assert st["lines"] > 100
    assert st["open_incidents"]
    assert client.get("/streams/llm-prod/nobody/vllm").status_code == 404


def test_stats_count_what_is_stored(client: TestClient) -> None:
    s = client.get("/stats").json()
    everything = all_incidents(client)
    assert s["incidents_total"] == len(everything)
    assert s["incidents_open"] == sum(i["status"] == "open" for i in everything)
    assert s["incidents_by_category"]["oom_kv_cache"] >= 1
    assert s["streams"] >= len(WORKLOADS)  # (+ the stream the auth tests ingested into)


# ---- silences ----------------------------------------------------------------------------
def test_silence_lifecycle(fresh: TestClient) -> None:
    r = fresh.post(
        "/silences",
        headers=WRITE,
        json={
            "matchers": {"namespace": ["llm-prod"], "category": "oom_*", "label:team": ["infer"]},
            "duration": "2h",
            "comment": "node maintenance",
        },
    )
    assert r.status_code == 201, r.text
    s = r.json()
    assert s["matchers"] == {
        "namespace": ["llm-prod"],
        "category": ["oom_*"],
        "label:team": ["infer"],
    }
    assert s["active"] is True and s["created_by"] == "token"  # api.token's actor
    assert abs(s["ends_at"] - (time.time() + 7200)) < 60
    later = fresh.post(
        "/silences",
        headers=WRITE,
        json={
            "matchers": {"pod": ["p-*"]},
            "cluster_wide": True,
            "starts_at": time.time() + 3600,
            "ends_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 7200)),
            "comment": "tomorrow",
        },
    ).json()
    assert later["active"] is False
    assert {x["id"] for x in fresh.get("/silences").json()} == {s["id"], later["id"]}
    assert [x["id"] for x in fresh.get("/silences", params={"active": True}).json()] == [s["id"]]
    assert fresh.delete(f"/silences/{s['id']}", headers=WRITE).status_code == 204
    assert fresh.delete(f"/silences/{s['id']}", headers=WRITE).status_code == 404
    assert fresh.get("/silences", params={"active": True}).json() == []
    ended = fresh.get(f"/silences/{s['id']}").json()  # expired, kept for the record
    assert ended["active"] is False and ended["ends_at"] <= time.time()


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"matchers": {}, "duration": "1h", "comment": "c"}, "at least one matcher"),
        ({"matchers": {"colour": ["red"]}, "duration": "1h", "comment": "c"}, "colour"),
        ({"matchers": {"label:": ["x"]}, "duration": "1h", "comment": "c"}, "label"),
        ({"matchers": {"pod": []}, "duration": "1h", "comment": "c"}, "pod"),
        ({"matchers": {"pod": [""]}, "duration": "1h", "comment": "c"}, "non-empty"),
        ({"matchers": {"tier": ["gpu"]}, "duration": "1h", "comment": "c"}, "gpu"),
        (
            {"matchers": {"category": ["oom_kvcache"]}, "duration": "1h", "comment": "c"},
            "oom_kvcache",
        ),
        ({"matchers": {"severity": ["page"]}, "duration": "1h", "comment": "c"}, "page"),
        ({"matchers": {"pod": ["p"]}, "comment": "c"}, "exactly one of ends_at or duration"),
        (
            {"matchers": {"pod": ["p"]}, "duration": "1h", "ends_at": 4e9, "comment": "c"},
            "exactly one",
        ),
        ({"matchers": {"pod": ["p"]}, "ends_at": 1000, "comment": "c"}, "future"),
        ({"matchers": {"pod": ["p"]}, "ends_at": "2020-01-01T00:00:00Z", "comment": "c"}, "future"),
        ({"matchers": {"pod": ["p"]}, "ends_at": "next week", "comment": "c"}, "ISO 8601"),
        ({"matchers": {"pod": ["p"]}, "duration": "forever", "comment": "c"}, "duration"),
        ({"matchers": {"pod": ["p"]}, "duration": "-1h", "comment": "c"}, "duration"),
        ({"matchers": {"pod": ["p"]}, "duration": "0s", "comment": "c"}, "positive"),
        (
            {"matchers": {"pod": ["p"]}, "ends_at": 4e9, "starts_at": 5e9, "comment": "c"},
            "before ends_at",
        ),
        ({"matchers": {"pod": ["p"]}, "duration": "1h"}, "comment"),
        ({"matchers": {"pod": ["p"]}, "duration": "1h", "comment": "c", "creator": "x"}, "creator"),
    ],
)
def test_bad_silences_are_422_with_a_reason(client: TestClient, body: dict, needle: str) -> None:
    r = client.post("/silences", json=body, headers=WRITE)
    assert r.status_code == 422, r.text
    assert needle in r.text


# ---- health and metrics ------------------------------------------------------------------
def test_healthz_and_readyz(client: TestClient) -> None:
    h = client.get("/healthz").json()
    assert h["status"] == "ok" and h["uptime_s"] >= 0 and h["instance_id"]
    r = client.get("/readyz")
    assert r.status_code == 200 and r.json() == {
        "ready": True,
        "checks": {"started": True, "store": True},
    }


def test_readyz_is_503_until_started_and_when_the_store_is_gone(tmp_path: Path) -> None:
    ctx = make_context(tmp_path / "s.db", RuleBook())
    try:
        with TestClient(web_app(ctx)) as c:
            ctx.ready = False
            r = c.get("/readyz")
            assert r.status_code == 503 and r.json()["checks"]["started"] is False
            ctx.ready = True
            assert c.get("/readyz").status_code == 200
            saved, ctx.store = ctx.store, _BrokenStore()
            r = c.get("/readyz")
            assert r.status_code == 503
            assert r.json()["checks"]["store"] is False
            assert "database is gone" in r.json()["checks"]["store_error"]
            assert c.get("/healthz").status_code == 200  # liveness ignores the store
            assert c.get("/metrics").status_code == 200  # a scrape survives it too
            ctx.store = saved
    finally:
        close_context(ctx)


class _BrokenStore:
    """A store whose database is gone: what readiness and /metrics call fails."""

    def ping(self) -> list[str]:
        raise OSError("database is gone")

    gauges = ping


def test_metrics_expose_sentinel_counters_and_the_open_incident_gauge(client: TestClient) -> None:
    client.get("/incidents")
    r = client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    text = r.text
    for name in (
        "sentinel_lines_total",
        "sentinel_rejects_total",
        "sentinel_incidents_open",
        "sentinel_api_requests_total",
    ):
        assert f"# TYPE {name.removesuffix('_total')}" in text, name
    stats = client.get("/stats").json()
    by_labels = {
        (s.labels["tier"], s.labels["category"]): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == "sentinel_incidents_open"
    }
    assert sum(by_labels.values()) == stats["incidents_open"]  # by tier and category
    assert {t for t, _ in by_labels} <= set(stats["incidents_by_tier"])
    assert 'sentinel_lines_total{source="http"}' in text
    assert 'sentinel_api_requests_total{method="GET",route="/incidents",status="200"}' in text


def test_openapi_lists_every_resource(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    assert spec["info"]["title"] == "vllm-sentinel"
    paths = set(spec["paths"])
    assert {
        "/incidents",
        "/incidents/{incident_id}",
        "/incidents/{incident_id}/resolve",
        "/incidents/{incident_id}/feedback",
        "/streams/{key}",
        "/stats",
        "/silences",
        "/silences/{silence_id}",
        "/classify",
        "/ingest",
        "/healthz",
        "/readyz",
        "/metrics",
        "/feedback",
    } <= paths
    assert client.get("/docs").status_code == 200


def test_unknown_routes_are_json_404(client: TestClient) -> None:
    r = client.get("/nope")
    assert r.status_code == 404 and r.json() == {"detail": "Not Found"}
