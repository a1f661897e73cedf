"""Prometheus Alertmanager, API v2 (``POST /api/v2/alerts``): one alert per incident.

Labels (what Alertmanager routes, groups, inhibits and silences on): ``alertname``
(``VllmIncident``), ``severity``, ``tier``, ``category``, ``stage``, ``namespace``, ``pod``,
``node``, ``fleet`` (``key=value`` on a fleet incident), ``incident`` (its id: two incidents
are two alerts) and the receiver's static ``labels`` (which may override any of them).
Annotations: ``summary``, ``description``, ``first_move``, ``root_cause``,
``incident_url`` (also ``generatorURL``: the incident under ``notify.external_url``).

Alertmanager forgets an alert nobody posts again: each post carries
``endsAt = now + 4 x resend_interval_s`` and the open alerts this receiver was told about are
posted again every ``resend_interval_s`` (:func:`resend`, run by the dispatcher), as
Prometheus does. A resolution is posted with ``endsAt`` = the time the incident resolved.
If vllm-sentinel stops, its alerts end by themselves after 4 intervals (page on the
service's own ``SentinelDown`` rule for that).

The labels are the incident's current ones: when an update moves the root cause to another
category or stage, the new label set is a new alert and the former one ends by its
``endsAt``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import TypedDict

import httpx

from service import metrics
from service.config import NotifySettings, ReceiverSettings
from service.incidents.incident_json import IncidentBody
from service.notify.alert import Alert, HttpRequest, cut
from service.ratelog import RateLimitedLog
from service.store import Store

log = logging.getLogger("vllm_sentinel.notify")
_resend_log = RateLimitedLog(log)
API_PATH = "/api/v2/alerts"
ALERTNAME = "VllmIncident"
TTL_INTERVALS = 4  # endsAt of a firing alert: this many resend intervals ahead
ANNOTATION_MAX = 1024
LABEL_MAX = 256
RESEND_BATCH = 200  # alerts per re-post request


def endpoint(cfg: ReceiverSettings) -> str:
    """``cfg.url`` is Alertmanager's base URL (or already ends with the API path)."""
    url = cfg.url.rstrip("/")
    return url if url.endswith(API_PATH) else url + API_PATH


def rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def labels(alert: Alert, cfg: ReceiverSettings) -> dict[str, str]:
    s = alert.view()
    meta = s["meta"] or {}
    out = {
        "alertname": ALERTNAME,
        "severity": s.get("severity"),
        "tier": s.get("tier"),
        "category": s.get("category"),
        "stage": s.get("stage"),
        "namespace": meta.get("namespace"),
        "pod": meta.get("pod"),
        "node": meta.get("node"),
        "incident": alert.id,
    }
    fleet = (s.get("extra") or {}).get("fleet") if meta.get("fleet") else None
    if isinstance(fleet, dict) and fleet.get("key"):
        out["fleet"] = f"{fleet.get('key')}={fleet.get('value')}"
    out.update(cfg.labels)
    # an empty value is no label at all in Alertmanager
    return {k: cut(str(v), LABEL_MAX) for k, v in out.items() if v not in (None, "")}


def alert_annotations(alert: Alert) -> dict[str, str]:
    s = alert.view()
    meta = s["meta"] or {}
    where = "/".join(x for x in (meta.get("namespace"), meta.get("pod")) if x) or s["stream"]
    out = {
        "summary": f"[{s['tier']}/{s['category']}] {s['stage']} on {where}: {s['line']}",
        "description": s.get("explanation") or s["line"],
        "first_move": s.get("remediation") or "",
        "root_cause": s["line"],
        "incident_url": alert.url,
    }
    return {k: cut(str(v), ANNOTATION_MAX) for k, v in out.items() if v}


class PostableAlert(TypedDict):
    """One alert of Alertmanager's API v2 (``postableAlert``)."""

    labels: dict[str, str]
    annotations: dict[str, str]
    startsAt: str  # (the API's names)
    endsAt: str
    generatorURL: str


def alert_json(alert: Alert, cfg: ReceiverSettings, now: float) -> PostableAlert:
    """One ``postableAlert``: firing until ``now + 4 x resend_interval_s``, or resolved at
    the incident's resolution time."""
    inc = alert.incident
    opened = inc.get("opened_at")
    starts = float(opened) if isinstance(opened, int | float) else now
    if alert.event == "resolved" or inc.get("status") == "resolved":
        at = inc.get("resolved_at")
        ends = float(at) if isinstance(at, int | float) else now
        ends = max(starts, min(ends, now))
    else:
        ends = now + TTL_INTERVALS * cfg.resend_interval_s
    return {
        "labels": labels(alert, cfg),
        "annotations": alert_annotations(alert),
        "startsAt": rfc3339(starts),
        "endsAt": rfc3339(ends),
        "generatorURL": alert.url,
    }


def request(alerts: list[PostableAlert], cfg: ReceiverSettings) -> HttpRequest:
    body = json.dumps(alerts, separators=(",", ":"), ensure_ascii=False, default=str).encode()
    return HttpRequest(
        endpoint(cfg), body, {"Content-Type": "application/json", "User-Agent": "vllm-sentinel"}
    )


def build(alert: Alert, cfg: ReceiverSettings, now: float) -> HttpRequest:
    return request([alert_json(alert, cfg, now)], cfg)


# ---- re-posting open alerts ------------------------------------------------------------------
def resend(
    store: Store,
    http: httpx.Client,
    cfg: ReceiverSettings,
    settings: NotifySettings,
    clock: Callable[[], float] = time.time,
) -> int:
    """Post again every open incident this receiver was told about (a ``sent`` delivery);
    returns the alerts Alertmanager accepted. Afterwards the incidents are read again: one
    that resolved meanwhile (its resolution may have been delivered, by this or another
    instance, before this post landed) is posted once more as resolved, so a re-post never
    leaves a resolved incident firing."""
    told = store.open_told(cfg.name)
    accepted = 0
    for batch in _chunks(told, RESEND_BATCH):
        now = clock()
        alerts = [
            alert_json(Alert("updated", inc, 0, settings.external_url), cfg, now) for inc in batch
        ]
        if not _post(http, cfg, alerts, "resent"):
            break
        accepted += len(alerts)
        ids = [str(inc["id"]) for inc in batch]
        ended = [inc for inc in store.incidents_by_id(ids) if inc.get("status") != "open"]
        if ended:
            _post(
                http,
                cfg,
                [
                    alert_json(Alert("resolved", inc, 0, settings.external_url), cfg, clock())
                    for inc in ended
                ],
                "resent",
            )
    return accepted


def _post(
    http: httpx.Client, cfg: ReceiverSettings, alerts: list[PostableAlert], outcome: str
) -> bool:
    req = request(alerts, cfg)
    try:
        resp = http.post(req.url, content=req.body, headers=req.headers, timeout=cfg.timeout_s)
        error = (
            None if 200 <= resp.status_code < 300 else f"HTTP {resp.status_code}: {resp.text[:200]}"
        )
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}"[:300]
    if error is None:
        metrics.DELIVERIES.labels(receiver=cfg.name, outcome=outcome).inc(len(alerts))
        return True
    metrics.DELIVERIES.labels(receiver=cfg.name, outcome="resend_failed").inc(len(alerts))
    _resend_log.warning(
        f"resend:{cfg.name}",
        "receiver %s: re-posting %d open alerts failed (%s); tried again in %.0fs",
        cfg.name,
        len(alerts),
        error,
        cfg.resend_interval_s,
    )
    return False


def _chunks(items: Iterable[IncidentBody], n: int) -> Iterable[list[IncidentBody]]:
    batch: list[IncidentBody] = []
    for item in items:
        batch.append(item)
        if len(batch) >= n:
            yield batch
            batch = []
    if batch:
        yield batch
