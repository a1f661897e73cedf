"""The service's Prometheus door: its alert rules (``promtool check rules`` and
``promtool test rules`` on deploy/prometheus/), the Kubernetes ServiceMonitor and
PrometheusRule staying in step with them, the Grafana dashboard naming only metrics that
exist, the store-derived gauges of ``/metrics``, and a real Prometheus (Debian's
``prometheus``) scraping a running service, evaluating the rules and answering queries for
``sentinel_`` metrics and every dashboard expression."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

import service.api.app  # noqa: F401 - registers sentinel_api_requests_total
from service import metrics
from service.api import create_app
from service.classify.rulebook import RuleBook
from service.store import Store
from tests.api_support import WRITE, close_context, fluentbit_records, kube, make_context
from tests.e2e_support import REAL, Sentinel, fluent_bit_records, free_port, service_config, webhook
from tests.prom_support import Prometheus, binary, version, wait_for
from tests.receiver import Receiver

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "deploy" / "prometheus" / "sentinel-rules.yaml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "sentinel-rules.test.yaml"
KUBE = ROOT / "deploy" / "kubernetes" / "components" / "monitoring"
DASHBOARD = ROOT / "deploy" / "grafana" / "vllm-sentinel.json"
METRIC = re.compile(r"\bsentinel_[a-z_]+\b")


def exposed_names() -> set[str]:
    """Every sample name the service's registry can expose."""
    out: set[str] = set()
    for fam in metrics.REGISTRY.collect():
        if fam.type == "counter":
            out.add(fam.name + "_total")
        elif fam.type == "histogram":
            out |= {fam.name + s for s in ("_bucket", "_sum", "_count")}
        else:
            out.add(fam.name)
    return out


def rule_exprs() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [r["expr"] for g in groups for r in g["rules"]]


def dashboard_exprs() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]


def promql(expr: str) -> str:
    """A dashboard expression as Prometheus takes it (Grafana's variables filled in)."""
    return expr.replace("$__rate_interval", "1m").replace('job=~"$job"', 'job=~".*"')


# ---- files -----------------------------------------------------------------------------------
def test_rules_pass_promtool_check_and_unit_tests(tmp_path: Path) -> None:
    promtool = binary("promtool")
    print(version(promtool))
    out = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout
    out = subprocess.run(
        [promtool, "test", "rules", str(RULE_TESTS)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=RULES.parent,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    # the PrometheusRule's spec is a rule file too
    spec = yaml.safe_load((KUBE / "prometheusrule.yaml").read_text())["spec"]
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    out = subprocess.run(
        [promtool, "check", "rules", str(tmp_path / "spec.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_prometheusrule_carries_the_rule_file() -> None:
    rule = yaml.safe_load((KUBE / "prometheusrule.yaml").read_text())
    assert rule["kind"] == "PrometheusRule"
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]
    alerts = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert {
        "SentinelDown",
        "SentinelNoIngest",
        "SentinelKafkaLagGrowing",
        "SentinelOutboxBacklog",
        "SentinelDeliveryFailures",
        "SentinelStoreErrors",
    } <= alerts


def test_servicemonitor_scrapes_the_service_port() -> None:
    sm = yaml.safe_load((KUBE / "servicemonitor.yaml").read_text())
    svc = yaml.safe_load((KUBE.parents[1] / "base" / "service.yaml").read_text())
    assert sm["kind"] == "ServiceMonitor"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    ports = {p["name"] for p in svc["spec"]["ports"]}
    [endpoint] = sm["spec"]["endpoints"]
    assert endpoint["port"] in ports and endpoint["path"] == "/metrics"
    # the rules select job="<Service name>", the job name the operator gives the target
    assert all('job="vllm-sentinel"' in e for e in rule_exprs())
    assert svc["metadata"]["name"] == "vllm-sentinel" and "jobLabel" not in sm["spec"]


def test_rules_and_dashboard_name_only_metrics_that_exist() -> None:
    names = exposed_names()
    for expr in rule_exprs() + dashboard_exprs():
        unknown = set(METRIC.findall(expr)) - names
        assert not unknown, f"{expr}: {unknown}"
    used = {m for e in dashboard_exprs() for m in METRIC.findall(e)}
    assert {
        "sentinel_incidents_open",
        "sentinel_alert_latency_seconds_bucket",
        "sentinel_consumer_lag",
        "sentinel_rejects_total",
    } <= used


def test_open_incidents_keep_their_namespace_when_replicas_are_merged() -> None:
    """``max`` over replicas must keep the namespace label, or one team's count hides
    another's (a per-team alert rule or panel needs it)."""
    merged = [e for e in rule_exprs() + dashboard_exprs() if "sentinel_incidents_open" in e]
    assert merged
    for expr in merged:
        for by in re.findall(r"max by \(([^)]*)\) \(sentinel_incidents_open", expr):
            assert "namespace" in by, expr


def test_dashboard_is_importable_json() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["title"] == "vllm-sentinel"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    names = {v["name"] for v in dash["templating"]["list"]}
    assert names == {"datasource", "job"}
    for p in dash["panels"]:
        if p["type"] != "row":
            assert p["targets"] and p["datasource"]["uid"] == "${datasource}", p["title"]


def test_latency_buckets_reach_a_minute() -> None:
    [fam] = [f for f in metrics.REGISTRY.collect() if f.name == "sentinel_alert_latency_seconds"]
    metrics.ALERT_LATENCY.labels(receiver="bucket-probe").observe(50)
    buckets = {
        s.labels["le"]
        for f in metrics.REGISTRY.collect()
        if f.name == fam.name
        for s in f.samples
        if s.name.endswith("_bucket")
    }
    assert {"30.0", "45.0", "60.0", "+Inf"} <= buckets


# ---- /metrics --------------------------------------------------------------------------------
@pytest.fixture()
def client(tmp_path: Path) -> Iterator[TestClient]:
    ctx = make_context(tmp_path / "sentinel.db", RuleBook())
    with TestClient(create_app(ctx)) as c:
        yield c
    close_context(ctx)


def _samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(s.labels.items())): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == name
    }


def test_metrics_show_open_incidents_by_tier_and_category(client: TestClient) -> None:
    records = fluentbit_records(REAL / "kv-cache-too-small.cri.log", kube("ns", "p"))
    r = client.post(
        "/ingest",
        content="\n".join(json.dumps(x) for x in records),
        headers={**WRITE, "Content-Type": "application/x-ndjson"},
    )
    assert r.status_code == 200, r.text
    text = client.get("/metrics").text
    opened = _samples(text, "sentinel_incidents_open")
    assert opened[(("category", "oom_kv_cache"), ("namespace", "ns"), ("tier", "capacity"))] == 1.0
    # every finding counted (the dashboard's "findings" panels; #22: they were always empty)
    found = _samples(text, "sentinel_findings_total")
    key = (("category", "oom_kv_cache"), ("method", "signature"), ("tier", "capacity"))
    assert found.get(key, 0) >= 1.0, found
    # no dispatcher runs in this context: the change waits in the outbox
    assert _samples(text, "sentinel_outbox_pending") == {(): 1.0}
    assert _samples(text, "sentinel_outbox_pending_oldest_seconds")[()] >= 0.0
    assert _samples(text, "sentinel_store_errors_total").keys() == {
        (("op", "read"),),
        (("op", "write"),),
    }
    assert re.search(r"^# TYPE sentinel_alerts_pending gauge$", text, re.M)
    # resolved: the series goes away rather than staying at a stale 1
    [inc] = client.get("/incidents").json()["items"]
    client.post(f"/incidents/{inc['id']}/resolve", json={"reason": "fixed"}, headers=WRITE)
    assert not _samples(client.get("/metrics").text, "sentinel_incidents_open")


def test_store_errors_are_counted(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'missing-dir' / 'x.db'}")
    before = metrics.STORE_ERRORS.labels(op="read")._value.get()
    with pytest.raises(Exception):  # noqa: B017 - whatever the driver raises
        store.count_open()
    assert metrics.STORE_ERRORS.labels(op="read")._value.get() == before + 1
    store.close()


# ---- a real Prometheus -----------------------------------------------------------------------
def test_real_prometheus_scrapes_the_running_service(tmp_path: Path) -> None:
    prom_bin = binary("prometheus")
    print(version(prom_bin))
    port = free_port()
    with Receiver() as rx:
        svc = Sentinel(
            tmp_path,
            "sentinel",
            service_config(
                store_url=f"sqlite:///{tmp_path / 'sentinel.db'}",
                api_port=port,
                token="t",
                receivers=[webhook(rx.url)],
            ),
        )
        try:
            svc.start().wait_ready()
            records = fluent_bit_records(REAL / "kv-cache-too-small.cri.log", "llm", "qwen-0")
            r = svc.http.post(
                "/ingest",
                content=json.dumps(records).encode(),
                headers={**svc.headers(), "Content-Type": "application/json"},
            )
            assert r.status_code == 200, r.text
            assert rx.wait_for(1, timeout=30), "the webhook delivery"
            with Prometheus(tmp_path, [f"127.0.0.1:{port}"], rule_files=[RULES]) as prom:

                def up() -> bool:
                    return any(t["health"] == "up" for t in prom.targets())

                wait_for(up, 30, "the sentinel target to be up")

                def query(expr: str) -> list[dict[str, Any]]:
                    return prom.query(expr)

                [opened] = wait_for(
                    lambda: query('sentinel_incidents_open{job="vllm-sentinel"}'),
                    30,
                    "sentinel_incidents_open in Prometheus",
                )
                assert opened["metric"]["tier"] == "capacity"
                assert opened["metric"]["category"] == "oom_kv_cache"
                assert float(opened["value"][1]) == 1.0
                [lines] = query('sentinel_lines_total{source="http"}')
                assert float(lines["value"][1]) == len(records)
                [le60] = query('sentinel_alert_latency_seconds_bucket{le="60.0"}')
                assert float(le60["value"][1]) == 1.0  # the one delivery, under a minute
                [pending] = query('sentinel_alerts_pending{receiver="oncall"}')
                assert float(pending["value"][1]) == 0.0
                for expr in dashboard_exprs():  # every panel's query runs
                    prom.query(promql(expr))

                def evaluated() -> list[dict[str, Any]]:
                    rules = prom.rules()
                    return (
                        rules
                        if rules
                        and all(
                            r.get("lastEvaluation", "").startswith("2")
                            and not r["lastEvaluation"].startswith("0001")
                            for r in rules
                        )
                        else []
                    )

                rules = wait_for(evaluated, 30, "the rules to be evaluated")
                assert {r["health"] for r in rules} == {"ok"}, rules
                # a healthy service: once its target is scraped (absent(up) was true before
                # the first scrape) these are inactive, not even pending
                quiet = {
                    "SentinelDown",
                    "SentinelStoreErrors",
                    "SentinelOutboxBacklog",
                    "SentinelDeliveryFailures",
                    "SentinelAlertsPending",
                }
                wait_for(
                    lambda: (
                        not {r["name"] for r in prom.rules() if r.get("state") != "inactive"}
                        & quiet
                    ),
                    20,
                    f"{quiet} to be inactive",
                )
        finally:
            svc.close()
