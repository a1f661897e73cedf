"""Prometheus metrics shared by every stage of the flow (one registry per process)."""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

disable_created_metrics()  # no *_created series: they double the series count for nothing

REGISTRY = CollectorRegistry(auto_describe=True)
log = logging.getLogger("vllm_sentinel.rejects")

LINES_IN = Counter(
    "sentinel_lines_total", "Log lines accepted, by source.", ["source"], registry=REGISTRY
)
REJECTS = Counter(
    "sentinel_rejects_total",
    "Input rejected (bad envelope, invalid UTF-8/JSON/msgpack, oversize, junk), by source and reason.",
    ["source", "reason"],
    registry=REGISTRY,
)
FINDINGS = Counter(
    "sentinel_findings_total", "Findings emitted, by category and method.",
    ["category", "method"], registry=REGISTRY,
)
DISAGREEMENTS = Counter(
    "sentinel_model_disagreements_total",
    "Events where the text model disagreed with a signature (the signature wins).",
    registry=REGISTRY,
)
INCIDENTS_OPEN = Gauge(
    "sentinel_incidents_open", "Open incidents in the store.", registry=REGISTRY
)
DELIVERIES = Counter(
    "sentinel_deliveries_total", "Webhook deliveries, by receiver and outcome.",
    ["receiver", "outcome"], registry=REGISTRY,
)
CONSUMER_LAG = Gauge(
    "sentinel_consumer_lag", "Kafka consumer lag (messages), by topic and partition.",
    ["topic", "partition"], registry=REGISTRY,
)
QUARANTINED = Counter(
    "sentinel_quarantined_total",
    "Records whose classification raised: stored in the quarantine table, position committed.",
    ["source"], registry=REGISTRY,
)
MODEL_LOADED = Gauge(
    "sentinel_text_model_loaded",
    "1 when the verified text model is in use, 0 when running on signatures only.",
    registry=REGISTRY,
)
MODEL_LOAD_FAILURES = Counter(
    "sentinel_model_load_failures_total",
    "Text model artifacts refused (digest, manifest or format check failed).",
    registry=REGISTRY,
)
ALERT_LATENCY = Histogram(
    "sentinel_alert_latency_seconds", "From incident change to webhook accepted.",
    ["receiver"], registry=REGISTRY,
)


def reject(source: str, reason: str, detail: str = "") -> None:
    """Count and log one rejected input; never raises."""
    REJECTS.labels(source=source, reason=reason).inc()
    log.warning("rejected input from %s: %s %s", source, reason, detail[:200])
