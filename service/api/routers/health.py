"""``/healthz`` (process alive), ``/readyz`` (store reachable with its schema — re-created
if the database came back empty — and service ready),
``/metrics`` (Prometheus). All open: probes and scrapers carry no token."""

from __future__ import annotations

import logging
import time

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service import metrics
from service.api.deps import Ctx
from service.api.schemas import Checks, Health, KafkaCheck, Readiness
from service.context import ServiceContext
from service.sources.kafka.factory import SOURCE as KAFKA

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
        repaired = ctx.store.ping()
        if repaired:
            ctx.schema_recreated_at = time.time()
            log.warning("readiness: store schema re-created (%s)", ", ".join(repaired))
        return True, None
    except Exception as exc:  # any failure means not ready
        return False, f"{type(exc).__name__}: {exc}"[:300]


def kafka_status(ctx: ServiceContext) -> KafkaCheck | None:
    """Whether this replica's Kafka consumer runs and which partitions it owns now
    (``topic:partition``), from the source's health; None without a Kafka source."""
    for source in ctx.sources:
        if source.source == KAFKA:
            health = source.health()
            return {"running": health.running, "assigned": list(health.detail["assigned"])}
    return None


@router.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness}})
def readyz(ctx: Ctx) -> Response:
    """Ready to take traffic: the service finished starting and the store answers. With a
    Kafka source, ``checks.kafka`` also shows the partitions this replica owns."""
    store_ok, error = store_check(ctx)
    checks: Checks = {"started": ctx.ready, "store": store_ok}
    if error:
        checks["store_error"] = error
    if ctx.schema_recreated_at is not None:
        checks["store_schema_recreated_at"] = ctx.schema_recreated_at
    kafka = kafka_status(ctx)
    if kafka is not None:
        checks["kafka"] = kafka
    ready = bool(ctx.ready and store_ok)
    body = Readiness(ready=ready, checks=checks).model_dump()
    return JSONResponse(body, status_code=200 if ready else 503)


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
