"""The FastAPI application: ``create_app(ctx)``.

Routers (one per resource) under ``service/api/routers``; the :class:`ServiceContext` is on
``app.state.ctx`` and reaches the routes through :func:`service.api.deps.get_ctx`. Store
calls are synchronous, so the routes that make them are plain ``def`` (run in FastAPI's
thread pool, never blocking the event loop that also serves ingest and probes).
"""

from __future__ import annotations

import logging
from importlib.metadata import PackageNotFoundError, version

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from prometheus_client import Counter
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service import metrics
from service.api.connections import InFlightLimit
from service.api.routers import (
    classify,
    feedback,
    health,
    incidents,
    ingest,
    oncall,
    otlp,
    quarantine,
    receivers,
    silences,
    slack,
    stats,
    streams,
)
from service.context import ServiceContext
from service.netguard import check_auth_config

log = logging.getLogger("vllm_sentinel.api")

API_REQUESTS = Counter(
    "sentinel_api_requests_total",
    "API requests, by method, route template and status.",
    ["method", "route", "status"],
    registry=metrics.REGISTRY,
)

DESCRIPTION = """\
Incidents classified from vLLM container logs (compatibility / integration / capacity),
their streams, silences and feedback; a paste-a-log classifier; an ingest endpoint for
Fluent Bit / Fluentd HTTP outputs and one for OpenTelemetry logs (OTLP/HTTP `/v1/logs`);
health and Prometheus metrics.

Auth: `Authorization: Bearer <api.token>` for writes, `/ingest` and `/v1/logs` when a token is set;
reads need `api.read_token` only when one is set. `/healthz`, `/readyz`, `/metrics` are open.
"""


def _version() -> str:
    try:
        return version("vllm-sentinel")
    except PackageNotFoundError:
        return "0.0.0"


class _CountRequests:
    """Pure ASGI middleware: count each response by route template (not raw path)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = [500]

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", None) or "unmatched"
            API_REQUESTS.labels(scope.get("method", ""), path, str(status[0])).inc()


def create_app(ctx: ServiceContext) -> FastAPI:
    """The API around a service context; refuses an unauthenticated API on a non-loopback
    address (see :mod:`service.netguard`). The dashboard is mounted on it by
    :func:`service.app.web_app`, one floor up: the API never imports the UI."""
    check_auth_config(ctx.settings.api)

    app = FastAPI(
        title="vllm-sentinel",
        version=_version(),
        description=DESCRIPTION,
        docs_url=None,  # /docs: service.ui serves Swagger UI from vendored files (no CDN)
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    app.state.ctx = ctx
    for module in (
        incidents,
        oncall,
        streams,
        stats,
        silences,
        feedback,
        classify,
        health,
        quarantine,
        slack,
        receivers,
    ):
        app.include_router(module.router)
    if ctx.settings.sources.http:  # sources.http: false turns POST /ingest off (404)
        app.include_router(ingest.router)
        app.include_router(otlp.router)  # POST /v1/logs (OpenTelemetry logs)

    @app.exception_handler(Exception)
    async def _unhandled(request: Request, exc: Exception) -> JSONResponse:
        log.exception("api: %s %s failed", request.method, request.url.path)
        return JSONResponse({"detail": "internal error"}, status_code=500)

    app.add_middleware(_CountRequests)
    app.add_middleware(InFlightLimit, limit=ctx.settings.api.max_requests_in_flight)
    return app
