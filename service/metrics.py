"""Prometheus metrics shared by every stage of the flow (one registry per process)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Protocol, TypedDict

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

disable_created_metrics()  # type: ignore[no-untyped-call]  # no *_created series: they double the series count for nothing

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
    "sentinel_findings_total",
    "Findings emitted (one per classified line, judgement or cut-off traceback), by tier, "
    "category and method.",
    ["tier", "category", "method"],
    registry=REGISTRY,
)
DISAGREEMENTS = Counter(
    "sentinel_model_disagreements_total",
    "Events where the text model disagreed with a signature (the signature wins).",
    registry=REGISTRY,
)
INCIDENTS_OPEN = Gauge(
    "sentinel_incidents_open",
    "Open incidents in the store, by tier, category and namespace (read from the store at each "
    "scrape: the same numbers on every replica, aggregate with max).",
    ["tier", "category", "namespace"],
    registry=REGISTRY,
)
ALERTS_PENDING = Gauge(
    "sentinel_alerts_pending",
    "Deliveries not sent yet (waiting, backing off or held), by receiver.",
    ["receiver"],
    registry=REGISTRY,
)
ALERTS_PENDING_AGE = Gauge(
    "sentinel_alerts_pending_oldest_seconds",
    "Age of the oldest delivery not sent yet, by receiver (0 when none).",
    ["receiver"],
    registry=REGISTRY,
)
OUTBOX_PENDING = Gauge(
    "sentinel_outbox_pending",
    "Incident changes committed but not yet turned into deliveries.",
    registry=REGISTRY,
)
OUTBOX_PENDING_AGE = Gauge(
    "sentinel_outbox_pending_oldest_seconds",
    "Age of the oldest incident change not yet turned into deliveries (0 when none).",
    registry=REGISTRY,
)
STORE_ERRORS = Counter(
    "sentinel_store_errors_total",
    "Database operations that failed (connection lost, timeout, constraint ...), by read/write.",
    ["op"],
    registry=REGISTRY,
)
for _op in ("read", "write"):
    STORE_ERRORS.labels(op=_op)  # exposed at 0 from the start (rate() and dashboards)
DELIVERIES = Counter(
    "sentinel_deliveries_total",
    "Webhook deliveries, by receiver and outcome.",
    ["receiver", "outcome"],
    registry=REGISTRY,
)
CONSUMER_LAG = Gauge(
    "sentinel_consumer_lag",
    "Kafka consumer lag (messages), by topic and partition.",
    ["topic", "partition"],
    registry=REGISTRY,
)
REDACTIONS = Counter(
    "sentinel_redactions_total",
    "Secret-shaped values masked in log lines before classification, by pattern "
    "(rules/redaction.yaml).",
    ["pattern"],
    registry=REGISTRY,
)
PIPELINE_SLOWED = Counter(
    "sentinel_pipeline_slowed_records_total",
    "Records of a heavy stream whose slice waited over 1 s while lighter streams' ran first "
    "(service/fairshare.py): slowed, never dropped.",
    ["source"],
    registry=REGISTRY,
)
PIPELINE_QUEUED = Gauge(
    "sentinel_pipeline_queued_slices",
    "Slices of batches waiting for the classifier's worker.",
    registry=REGISTRY,
)
QUARANTINED = Counter(
    "sentinel_quarantined_total",
    "Records whose classification raised: stored in the quarantine table, position committed.",
    ["source"],
    registry=REGISTRY,
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
    "sentinel_alert_latency_seconds",
    "From incident change to webhook accepted.",
    ["receiver"],
    registry=REGISTRY,
    # group_wait (1 s) + fleet hold (20 s) + a few retries fit under a minute
    buckets=(0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 15, 20, 25, 30, 45, 60, float("inf")),
)


# held while the store gauges are re-set (and by /metrics while it renders them)
GAUGE_LOCK = threading.RLock()


class StoreGauges(TypedDict):
    """What the store-derived gauges are set from: open incidents by (tier, category), per
    receiver the deliveries not sent yet and the oldest one's age (s), and the outbox
    backlog (events not expanded, the oldest one's age)."""

    open: dict[tuple[str, str, str], int]  # (tier, category, namespace or "")
    pending: dict[str, tuple[int, float]]
    outbox: tuple[int, float]


class GaugeSource(Protocol):
    """Where they are read (the store)."""

    def gauges(self) -> StoreGauges: ...


def refresh_store_gauges(store: GaugeSource, receivers: Iterable[str] = ()) -> bool:
    """Set the store-derived gauges (open incidents by tier, category and namespace, pending alerts of
    ``receivers`` and any other receiver with some, outbox backlog) from ``store.gauges()``;
    False (gauges left as they were) when the store failed."""
    try:
        g = store.gauges()
    except Exception:  # noqa: BLE001 - counted by the store; the scrape still answers
        return False
    with GAUGE_LOCK:
        INCIDENTS_OPEN.clear()
        for (tier, category, namespace), n in g["open"].items():
            INCIDENTS_OPEN.labels(tier=tier, category=category, namespace=namespace).set(n)
        ALERTS_PENDING.clear()
        ALERTS_PENDING_AGE.clear()
        for receiver in receivers:
            ALERTS_PENDING.labels(receiver=receiver).set(0)
            ALERTS_PENDING_AGE.labels(receiver=receiver).set(0)
        for receiver, (n, age) in g["pending"].items():
            ALERTS_PENDING.labels(receiver=receiver).set(n)
            ALERTS_PENDING_AGE.labels(receiver=receiver).set(age)
        OUTBOX_PENDING.set(g["outbox"][0])
        OUTBOX_PENDING_AGE.set(g["outbox"][1])
    return True
