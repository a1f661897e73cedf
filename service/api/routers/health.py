"""``/healthz`` (process alive), ``/readyz`` (store reachable with its schema — re-created
if the database came back empty — and service ready),
``/metrics`` (Prometheus). All open: probes and scrapers carry no token."""

from __future__ import annotations

import logging
import time
from typing import Any

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service import metrics
from service.api.deps import Ctx
from service.api.schemas import Health, Readiness
from service.context import ServiceContext

log = logging.getLogger("vllm_sentinel.api")
router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health)
async def healthz(ctx: Ctx) -> Health:
    """The process answers (liveness): no store or broker call, so a database outage does not
    get every replica restarted."""
    return Health(instance_id=ctx.instance_id, uptime_s=round(time.time() - ctx.started_at, 3))


def store_check(ctx: ServiceContext) -> tuple[bool, str | None]:
    """Whether the store answers with every table. A database that came back empty (dropped
    and re-created, restored from nothing) gets its schema again here (``Store.ping`` runs
    the migrations), so readiness returns without a restart."""
    if ctx.store is None:
        return False, "no store"
    try:
        for probe in ("ping", "count_open", "stats"):  # the cheapest the store offers
            fn = getattr(ctx.store, probe, None)
            if callable(fn):
                repaired = fn()
                if probe == "ping" and repaired:
                    ctx.extra["schema_recreated_at"] = time.time()
                    log.warning(
                        "readiness: store schema re-created (%s)", ", ".join(map(str, repaired))
                    )
                break
        return True, None
    except Exception as exc:  # any failure means not ready
        return False, f"{type(exc).__name__}: {exc}"[:300]


def kafka_status(ctx: ServiceContext) -> dict[str, Any] | None:
    """Whether this replica's Kafka consumer runs and which partitions it owns now
    (``topic:partition``); None without a Kafka source."""
    source = getattr(ctx.extra.get("service"), "kafka", None)
    if source is None:
        return None
    try:
        assigned = sorted(f"{tp[0]}:{tp[1]}" for tp in source.assigned)
    except Exception:  # noqa: BLE001 - changing under a rebalance: report it next time
        assigned = None
    return {"running": bool(source.running), "assigned": assigned}


@router.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness}})
def readyz(ctx: Ctx) -> Response:
    """Ready to take traffic: the service finished starting and the store answers. With a
    Kafka source, ``checks.kafka`` also shows the partitions this replica owns."""
    store_ok, error = store_check(ctx)
    checks: dict[str, Any] = {"started": ctx.ready, "store": store_ok}
    if error:
        checks["store_error"] = error
    if "schema_recreated_at" in ctx.extra:  # informational: the database came back empty
        checks["store_schema_recreated_at"] = ctx.extra["schema_recreated_at"]
    kafka = kafka_status(ctx)
    if kafka is not None:
        checks["kafka"] = kafka  # informational: a replica without partitions is still ready
    ready = bool(ctx.ready and store_ok)
    body = Readiness(ready=ready, checks=checks).model_dump()
    return JSONResponse(body, status_code=200 if ready else 503)


def open_incidents(stats: dict[str, Any]) -> float | None:
    """The open-incident count from ``store.stats()``: a top-level ``open`` /
    ``open_incidents`` number, or ``incidents.open``, or the sum of ``open`` by something."""
    for key in ("open_incidents", "incidents_open", "open"):
        v = stats.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool):
            return float(v)
        if isinstance(v, dict) and v and all(isinstance(x, int | float) for x in v.values()):
            return float(sum(v.values()))
    inc = stats.get("incidents")
    if isinstance(inc, dict):
        return open_incidents(inc)
    return None


@router.get(
    "/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}}
)
def prometheus(ctx: Ctx) -> Response:
    """Prometheus text format. ``sentinel_incidents_open`` (by tier and category),
    ``sentinel_alerts_pending*`` and ``sentinel_outbox_pending*`` are read from the store at
    scrape time (the same numbers on every replica: aggregate them with max, not sum); when
    the store fails they keep their last values and ``sentinel_store_errors_total`` counts."""
    with metrics.GAUGE_LOCK:
        if ctx.store is not None and not metrics.refresh_store_gauges(
            ctx.store, [r.name for r in ctx.settings.receivers]
        ):
            log.warning("metrics: the store gauges could not be read; they are stale")
        body = generate_latest(metrics.REGISTRY)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
