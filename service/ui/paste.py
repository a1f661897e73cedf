"""Paste a log (``/ui/classify``): a textarea or a file (gzip allowed, up to the API's
``POST /classify`` limit: a larger one gets a page saying the limit and how to send it),
classified exactly as that endpoint and the CLI do; nothing is
stored, nobody is paged. The result shows each stream's incidents with their ladder and
facts.

Reading is enough to use it (it is the API's read rule), but the form still carries the
CSRF token so another site cannot make a browser post logs here.
"""

from __future__ import annotations

import anyio
from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, Response
from starlette.datastructures import UploadFile

from service.api.body import MiB
from service.api.deps import get_ctx
from service.api.routers import classify as classify_api
from service.ingest.compression import DecompressedTooLarge, gunzip
from service.ingest.junk import binary_input
from service.offline.report import StreamReport
from service.ui import auth, present
from service.ui.forms import read_form, write_guard
from service.ui.page import denied_read, login_redirect, render

router = APIRouter()

MAX_PASTE = classify_api.MAX_BODY
FORMATS = ("auto", "raw", "docker", "cri", "fluent")
SHOWN_BACK = 200_000  # characters of pasted text put back into the form with the result


class ShownReport(StreamReport):
    """A stream's report with what the page shows beside it."""

    ladders: list[list[present.Rung]]  # one per incident
    fact_rows: list[tuple[str, str, str]]


def shown(rep: StreamReport) -> ShownReport:
    timeline = rep.get("timeline") or {}
    return {
        **rep,
        "ladders": [  # a crash loop's: its latest failed start only
            present.ladder(
                {
                    "stage": i["stage"],
                    "status": i["status"],
                    "timeline": present.one_run(
                        timeline, present.failing_run(i.get("extra") or {})
                    ),
                }
            )
            for i in rep["incidents"]
        ],
        "fact_rows": present.facts_rows(rep.get("facts") or {}, rep.get("meta")),
    }


@router.get("/classify", response_class=HTMLResponse)
def classify_page(request: Request) -> Response:
    denied = denied_read(request)
    if denied:
        return denied
    return render(
        request,
        "classify.html",
        nav="classify",
        title="Paste a log",
        reports=None,
        text="",
        fmt="auto",
    )


@router.post("/classify", response_class=HTMLResponse)
async def classify_post(request: Request) -> Response:
    denied = denied_read(request)
    if denied:
        return denied
    try:
        form = await read_form(request, MAX_PASTE + MiB)
    except HTTPException as exc:
        if exc.status_code != 413:
            raise
        return _too_large(request)  # a page, not the API's JSON (nothing is written)
    if not auth.csrf_ok(request, str(form.get("csrf") or "")):
        return write_guard(request, form) or login_redirect(request)
    text = str(form.get("log") or "")
    fmt = str(form.get("format") or "auto")
    if fmt not in FORMATS:
        fmt = "auto"
    upload = form.get("file")
    data_bytes = text.encode("utf-8", "surrogatepass")
    name = None
    if isinstance(upload, UploadFile) and upload.filename:
        data_bytes = await upload.read(MAX_PASTE + 1)
        name = upload.filename
    if len(data_bytes) > MAX_PASTE:
        return _too_large(request)
    if data_bytes.startswith(b"\x1f\x8b"):
        try:
            data_bytes = gunzip(data_bytes, MAX_PASTE)
        except DecompressedTooLarge:
            return _too_large(request)
        except ValueError as exc:
            return _refused(request, 400, "", fmt, f"could not read the gzip file: {exc}")
    if not data_bytes.strip():
        return _refused(request, 400, text, fmt, "paste a log or choose a file first")
    why = binary_input((data_bytes,))
    if why is not None:  # the rule of the CLI and POST /classify (service.ingest.junk)
        return _refused(request, 400, "", fmt, f"{name or 'the pasted text'} {why}")
    reports = await anyio.to_thread.run_sync(
        classify_api.classify_bytes,
        get_ctx(request),
        data_bytes,
        fmt,
        name or "pasted",
        limiter=classify_api.limiter(),  # the API's own limiter, shared
    )
    return render(
        request,
        "classify.html",
        nav="classify",
        title="Paste a log: result",
        reports=[shown(rep) for rep in reports],
        primary=classify_api.primary_of(reports),
        text=get_ctx(request).rulebook.redactor.redact_lines(text)
        if len(text) <= SHOWN_BACK
        else "",
        fmt=fmt,
        filename=name,
    )


def _refused(request: Request, status: int, text: str, fmt: str, error: str) -> Response:
    """The form again, with what was wrong."""
    return render(
        request,
        "classify.html",
        status_code=status,
        nav="classify",
        title="Paste a log",
        reports=None,
        text=get_ctx(request).rulebook.redactor.redact_lines(text),
        fmt=fmt,
        error=error,
    )


def _too_large(request: Request) -> Response:
    """The form again, saying the limit and how to classify a larger log (the CLI, or
    ``POST /ingest``): never the API's JSON answer."""
    return render(
        request,
        "classify.html",
        status_code=413,
        nav="classify",
        title="Paste a log: too large",
        reports=None,
        text="",
        fmt="auto",
        too_large_mib=MAX_PASTE // MiB,
        ingest_url=str(request.base_url).rstrip("/") + "/ingest",
    )
