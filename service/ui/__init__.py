"""The web dashboard: server-rendered pages under ``/ui/`` on the API's own app (a little
JavaScript only refreshes the incident list).

``mount(app)`` adds the pages, one module per resource (:data:`PAGES`, assembled into one
router here), their static files (vendored in ``static/``: no CDN, no build step),
``/`` → ``/ui/``, and Swagger UI at ``/docs`` served from the vendored ``swagger-ui-dist``
files (works on an air-gapped cluster).

Reads need what the API's reads need, writes what its writes need (see
:mod:`service.ui.auth`); every form posts back here and is answered with a redirect (303)
to the page that shows the result, so reload never re-submits (:mod:`service.ui.forms`,
:mod:`service.ui.page`). The pages read through the API's own models and the store, and
:mod:`service.ui.data` adds the queries only the dashboard needs.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from service.ui import (
    actions,
    incidents,
    oncall,
    paste,
    receivers,
    signin,
    silences,
    streams,
)

# the page modules, in the order their routes are matched
PAGES = (incidents, actions, oncall, streams, silences, receivers, paste, signin)
STATIC = Path(__file__).resolve().parent / "static"
DOCS_CSP = (
    "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
    "script-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'"
)


def pages() -> APIRouter:
    """Every dashboard page under ``/ui``, none of them in the OpenAPI schema."""
    router = APIRouter(prefix="/ui", include_in_schema=False)
    for module in PAGES:
        router.include_router(module.router)
    return router


def mount(app: FastAPI, docs_url: str = "/docs") -> None:
    app.include_router(pages())
    app.mount("/ui/static", StaticFiles(directory=str(STATIC)), name="ui-static")

    @app.get("/", include_in_schema=False)
    def root(request: Request) -> RedirectResponse:
        return RedirectResponse(str(request.scope.get("root_path") or "") + "/ui/", status_code=307)

    @app.get("/ui", include_in_schema=False)
    def ui_root(request: Request) -> RedirectResponse:
        return RedirectResponse(str(request.scope.get("root_path") or "") + "/ui/", status_code=307)

    if docs_url and app.openapi_url:

        @app.get(docs_url, include_in_schema=False)
        def docs(request: Request) -> Response:
            base = str(request.scope.get("root_path") or "")
            static = f"{base}/ui/static/swagger"
            html = (
                '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
                f"<title>{app.title} · API</title>"
                '<meta name="viewport" content="width=device-width, initial-scale=1">'
                f'<link rel="stylesheet" href="{static}/swagger-ui.css">'
                f'<link rel="icon" href="{base}/ui/static/favicon.svg">'
                f'</head><body><main id="swagger-ui" data-openapi="{base}{app.openapi_url}">'
                "<noscript><p>The interactive API reference needs JavaScript; the schema is "
                f'at <a href="{base}{app.openapi_url}">{app.openapi_url}</a>.</p></noscript>'
                f'</main><script src="{static}/swagger-ui-bundle.js"></script>'
                f'<script src="{static}/swagger-init.js"></script></body></html>'
            )
            return HTMLResponse(
                html,
                headers={"Content-Security-Policy": DOCS_CSP, "X-Content-Type-Options": "nosniff"},
            )
