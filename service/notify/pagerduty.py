"""PagerDuty Events API v2: ``trigger`` on opened/updated, ``acknowledge`` once someone
acknowledged the incident, ``resolve`` on resolved, the incident id as ``dedup_key`` (so all
act on the same PagerDuty alert)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import NotRequired, TypedDict

from service.config import ReceiverSettings
from service.incidents.incident_json import FleetExtra
from service.notify.alert import Alert, HttpRequest, cut, fleet_of, where_it_ran

SUMMARY_MAX = 1024
EVIDENCE_LINES = 20
SEVERITY = {"critical": "critical", "warning": "warning"}


def build(alert: Alert, cfg: ReceiverSettings, now: float) -> HttpRequest:
    if not cfg.routing_key:
        raise ValueError(f"receiver {cfg.name}: pagerduty needs routing_key")
    return HttpRequest(
        cfg.url,
        json.dumps(event(alert, cfg.routing_key), default=str).encode(),
        {"Content-Type": "application/json"},
    )


class CustomDetails(TypedDict):
    tier: str
    category: str
    stage: str
    status: str
    root_cause: str
    rule: str | None
    confidence: float
    first_move: str
    explanation: str | None
    restarts: int
    resolution: str | None
    node: str | None
    facts: dict[str, str]
    evidence: list[str]
    stream: str
    fleet: NotRequired[FleetExtra]


# the Events API's payload (``class`` is a keyword, hence this form)
Payload = TypedDict(
    "Payload",
    {
        "summary": str,
        "source": str,
        "severity": str,
        "component": str,
        "group": str,
        "class": str,
        "custom_details": CustomDetails,
        "timestamp": NotRequired[str],
    },
)


class Link(TypedDict):
    href: str
    text: str


class Event(TypedDict):
    """One event of the Events API v2."""

    routing_key: str
    event_action: str  # trigger | resolve
    dedup_key: str
    payload: Payload
    client: str
    client_url: str
    links: list[Link]


def action(alert: Alert) -> str:
    """``resolve`` for the resolution; ``acknowledge`` once someone is on it (PagerDuty stops
    escalating; later updates keep it acknowledged); ``trigger`` otherwise, and for the first
    message (an alert must exist before it can be acknowledged)."""
    if alert.event == "resolved":
        return "resolve"
    if alert.ack is not None and alert.event != "opened":
        return "acknowledge"
    return "trigger"


def event(alert: Alert, routing_key: str) -> Event:
    s = alert.view()
    meta, facts = s["meta"], s["facts"]
    where, fleet = where_it_ran(s), fleet_of(s)
    opened = s.get("opened_at")
    payload: Payload = {
        "summary": cut(
            f"[{s['tier']}/{s['category']}] {s['stage']} on {where}: {s['line']}", SUMMARY_MAX
        ),
        "source": str(meta.get("pod") or meta.get("node") or s["stream"]),
        "severity": SEVERITY.get(s["severity"], "error"),
        "component": str(meta.get("container") or "vllm"),
        "group": str(meta.get("namespace") or s["tier"]),
        "class": s["category"],
        "custom_details": {
            "tier": s["tier"],
            "category": s["category"],
            "stage": s["stage"],
            "status": s["status"],
            "root_cause": s["line"],
            "rule": s["rule"],
            "confidence": s["confidence"],
            "first_move": s["remediation"],
            "explanation": s["explanation"],
            "restarts": s["restarts"],
            "resolution": s["resolution"],
            "node": meta.get("node"),
            "facts": facts,
            "evidence": s["evidence"][-EVIDENCE_LINES:],
            "stream": s["stream"],
        },
    }
    if fleet:
        payload["custom_details"]["fleet"] = fleet
    if isinstance(opened, int | float):
        payload["timestamp"] = datetime.fromtimestamp(opened, UTC).isoformat()
    return {
        "routing_key": routing_key,
        "event_action": action(alert),
        "dedup_key": alert.id,
        "payload": payload,
        "client": "vllm-sentinel",
        "client_url": alert.url,
        "links": [{"href": alert.url, "text": "Incident in vllm-sentinel"}],
    }
