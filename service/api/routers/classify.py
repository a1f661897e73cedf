"""``POST /classify``: classify a pasted log; nothing is stored, nobody is paged.

Body: the log as ``text/plain`` (raw, Docker json-file or CRI lines; gzip allowed), or JSON
``{"log": "...", "format": "auto", "stream": "name"}``. Junk lines (binary, mostly invalid
UTF-8, NUL-heavy) are dropped and counted as the CLI drops them; a body that is nothing but
binary (an executable, random bytes) is refused (400) with one line saying so
(:mod:`service.ingest.junk`). The answer holds the same per-stream
reports as ``vllm-sentinel classify --json`` (a fresh classifier per request, built on the
service's shared rule book and text model, so one paste never sees another's state).
"""

from __future__ import annotations

import io
from typing import Annotated

import anyio
from fastapi import APIRouter, Header, HTTPException, Request
from pydantic import ValidationError

from service.api.auth import ReadAuth
from service.api.body import MiB, read_body, too_large
from service.api.deps import Ctx
from service.api.schemas import ClassifyRequest, ClassifyResponse
from service.classify.engine import Classifier
from service.classify.novelty import NoveltyDetector
from service.context import ServiceContext
from service.incidents.incident_json import IncidentSummary
from service.ingest.compression import GZIP_MAGIC, gunzip
from service.ingest.junk import binary_input
from service.offline.report import StreamReport, classify_records
from service.sources.files import read_file

router = APIRouter(tags=["classify"])
MAX_BODY = 20 * MiB
SOURCE = "classify"
# Classification is CPU-bound: run it off the event loop, a couple at a time, so a big paste
# cannot starve ingest and health probes.
_LIMITER: anyio.CapacityLimiter | None = None

_OPENAPI_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "text/plain": {
                "schema": {"type": "string"},
                "example": "(APIServer pid=1) ERROR ... CUDA out of memory ...",
            },
            "application/json": {"schema": ClassifyRequest.model_json_schema()},
        },
    }
}


def limiter() -> anyio.CapacityLimiter:
    """The capacity limiter every classification runs under (the dashboard's paste too)."""
    global _LIMITER
    if _LIMITER is None:
        _LIMITER = anyio.CapacityLimiter(2)
    return _LIMITER


def classify_bytes(
    ctx: ServiceContext, data: bytes, fmt: str = "auto", stream: str | None = None
) -> list[StreamReport]:
    """Reports for one pasted log (exactly what the CLI does with a file)."""
    clf = Classifier(ctx.rulebook, text_model=ctx.text_model, novelty=NoveltyDetector())
    records = read_file(
        "-", stdin=io.BytesIO(data), fmt=fmt, stream=stream or "pasted", source=SOURCE
    )
    return classify_records(records, clf)


def primary_of(reports: list[StreamReport]) -> IncidentSummary | None:
    """The first critical incident of the first stream that has one (its root cause)."""
    for rep in reports:
        for inc in rep["incidents"]:
            if inc["severity"] == "critical":
                return inc
    return None


@router.post(
    "/classify",
    response_model=ClassifyResponse,
    dependencies=[ReadAuth],
    openapi_extra=_OPENAPI_BODY,
    responses={
        400: {"description": "an empty log, or nothing but binary (an executable)"},
        413: {"description": "log too large"},
    },
    summary="Classify a pasted log (nothing is stored)",
)
async def classify(
    request: Request,
    ctx: Ctx,
    content_type: Annotated[str | None, Header()] = None,
    content_encoding: Annotated[str | None, Header()] = None,
) -> ClassifyResponse:
    body = await read_body(request, MAX_BODY)
    enc = (content_encoding or "").strip().lower()
    if enc in ("gzip", "x-gzip") or body.startswith(GZIP_MAGIC):
        try:
            body = gunzip(body, MAX_BODY)
        except ValueError as exc:
            if "beyond" in str(exc):
                raise too_large(MAX_BODY) from None
            raise HTTPException(status_code=400, detail=f"bad gzip body: {exc}") from None
    elif enc not in ("", "identity"):
        raise HTTPException(status_code=415, detail=f"unsupported Content-Encoding {enc}")
    media = (content_type or "").split(";", 1)[0].strip().lower()
    fmt, stream = "auto", None
    if media == "application/json" or media.endswith("+json"):
        try:
            req = ClassifyRequest.model_validate_json(body)
        except ValidationError as exc:
            errors = exc.errors(include_url=False, include_context=False, include_input=False)
            raise HTTPException(status_code=422, detail=errors) from None
        body, fmt, stream = req.log.encode("utf-8", "surrogatepass"), req.format, req.stream
    if not body.strip():
        raise HTTPException(status_code=400, detail="empty log")
    why = binary_input((body,))
    if why is not None:  # one rule with the CLI and the paste page (service.ingest.junk)
        raise HTTPException(status_code=400, detail=f"the body {why}")
    reports = await anyio.to_thread.run_sync(
        classify_bytes, ctx, body, fmt, stream, limiter=limiter()
    )
    return ClassifyResponse(reports=reports, primary=primary_of(reports))
