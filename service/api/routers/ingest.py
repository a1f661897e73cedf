"""``POST /ingest``: log batches from Fluent Bit's ``http`` output or Fluentd's ``out_http``.

Bodies: Fluent Bit ``format msgpack`` (its default), ``json`` (one array), ``json_lines`` /
Fluentd NDJSON, ``json_stream``, ``text/plain`` lines; ``Content-Encoding: gzip``. The tag
(stream-key fallback and Kubernetes metadata from a kubelet path) comes from the
``X-Fluent-Tag`` header (Fluent Bit ``header_tag X-Fluent-Tag``) or ``?tag=``.

The answer is sent only after :meth:`Pipeline.submit` returned, i.e. after the batch is
stored durably: ``200`` with counts, ``204`` when the body held nothing to store (e.g. only
event-group markers), ``400`` when nothing in it could be decoded or the tag is longer than
``MAX_TAG``, ``413`` over the size limit (as sent, once inflated, or more than
``MAX_RECORDS`` records), ``415`` for a media type or encoding we do not decode (or no
``Content-Type`` on a body that is neither JSON nor msgpack), ``503`` when the pipeline
could not store it or the process-wide decompression budget is in use (the collector
retries). Bodies and their inflated bytes are charged to that budget while they are decoded
(:mod:`service.ingest.budget`); every refusal is counted and logged at a bounded rate. Runtime chunks
of an unfinished line (CRI ``P``) are held by one joiner across requests, as the forward
server does, and flushed when the closing chunk arrives, after ``IDLE_FLUSH_S``, or at
shutdown; collectors with ``multiline.parser docker, cri`` already send whole lines.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from typing import Annotated

import anyio
from fastapi import APIRouter, Header, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse

from service.api.auth import WriteAuth
from service.api.body import MiB, read_body, too_large
from service.api.deps import PipelineDep
from service.api.schemas import IngestResult
from service.ingest.budget import BudgetExhausted, Lease
from service.ingest.joiner import Joiner
from service.ratelog import RateLimitedLog, reject
from service.records import LogRecord
from service.sources.http.body import (
    MAX_DECOMPRESSED_BYTES,
    TAG_HEADER,
    BodyRefused,
    check_media,
    check_tag,
    decode_body,
)
from service.sources.limits import MAX_RECORDS

log = logging.getLogger("vllm_sentinel.api")
router = APIRouter(tags=["ingest"])
SOURCE = "http"
MAX_BODY = 32 * MiB  # as sent (compressed); Fluent Bit chunks are a few MiB at most
MAX_DECOMPRESSED = MAX_DECOMPRESSED_BYTES  # one body once inflated (64 MiB)
IDLE_FLUSH_S = 30.0
_store_log = RateLimitedLog(log)

_OPENAPI_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {"type": "array", "items": {"type": "object"}},
                "example": [
                    {
                        "date": 1785146472.1,
                        "log": "...",
                        "kubernetes": {
                            "namespace_name": "llm",
                            "pod_name": "vllm-0",
                            "container_name": "vllm",
                        },
                    }
                ],
            },
            "application/x-ndjson": {"schema": {"type": "string"}},
            "application/msgpack": {"schema": {"type": "string", "format": "binary"}},
            "text/plain": {"schema": {"type": "string"}},
        },
    }
}


def joiner_of(request: Request) -> Joiner:
    state = request.app.state
    if getattr(state, "http_joiner", None) is None:
        state.http_joiner = Joiner(source=SOURCE)
    return state.http_joiner


def chunk_id_of(idempotency_key: str | None) -> str | None:
    """A client-given idempotency key, namespaced; Fluent Bit and Fluentd send none."""
    if not idempotency_key:
        return None
    return "http:" + hashlib.sha256(idempotency_key.encode()).hexdigest()[:32]


@router.post(
    "/ingest",
    dependencies=[WriteAuth],
    openapi_extra=_OPENAPI_BODY,
    response_model=IngestResult,
    responses={
        204: {"description": "nothing to store"},
        400: {
            "description": "nothing decodable (reject counts in detail), or a tag that is too long"
        },
        413: {"description": "body too large, as sent or once inflated, or too many records"},
        415: {"description": "media type or encoding not decoded"},
        503: {"description": "not stored; retry"},
    },
    summary="Log batches from Fluent Bit (http output) or Fluentd (out_http)",
)
async def ingest(
    request: Request,
    pipeline: PipelineDep,
    tag: Annotated[str | None, Query()] = None,
    x_fluent_tag: Annotated[str | None, Header(alias=TAG_HEADER)] = None,
    content_type: Annotated[str | None, Header()] = None,
    content_encoding: Annotated[str | None, Header()] = None,
    idempotency_key: Annotated[str | None, Header()] = None,
) -> Response:
    try:  # refuse what we can before reading the body
        check_tag(x_fluent_tag, SOURCE)
        check_tag(tag, SOURCE)
        check_media(content_type, SOURCE)
    except BodyRefused as exc:
        raise _refused(exc) from None
    body = await read_body(request, MAX_BODY)
    lease = Lease(MAX_DECOMPRESSED)
    try:
        lease.hold(len(body))
        decode = functools.partial(
            decode_body,
            body,
            content_type,
            content_encoding,
            x_fluent_tag or tag,
            lease=lease,
            max_records=MAX_RECORDS,
            source=SOURCE,
        )
        del body  # only the decoder holds it now
        records, rejected = await anyio.to_thread.run_sync(decode)
        del decode
    except BudgetExhausted as exc:
        reject(SOURCE, "memory_budget", str(exc))
        raise _refused(BodyRefused(503, "memory_budget", str(exc))) from None
    except BodyRefused as exc:
        raise _refused(exc) from None
    finally:
        lease.release()
    joiner = joiner_of(request)
    records = joiner.feed(records) + joiner.flush_idle(IDLE_FLUSH_S)
    if not records:
        if rejected:
            raise HTTPException(
                status_code=400,
                detail={
                    "message": "nothing decodable in the body",
                    "accepted": 0,
                    "rejected": rejected,
                },
            )
        return Response(status_code=204)
    await submit(pipeline, records, chunk_id_of(idempotency_key))
    return JSONResponse(IngestResult(accepted=len(records), rejected=rejected).model_dump())


def _refused(exc: BodyRefused) -> HTTPException:
    """The HTTP answer to a body refused as a whole (already counted and logged)."""
    if exc.status == 400 and exc.reason == "bad_gzip":
        return HTTPException(
            status_code=400, detail={"message": exc.message, "accepted": 0, "rejected": 1}
        )
    if exc.status == 413 and exc.reason == "decompressed_too_large":
        return too_large(MAX_DECOMPRESSED)
    if exc.status == 503:
        return HTTPException(status_code=503, detail=exc.message, headers={"Retry-After": "5"})
    return HTTPException(status_code=exc.status, detail=exc.message)


async def submit(pipeline: object, records: list[LogRecord], chunk_id: str | None) -> None:
    try:
        await pipeline.submit(records, source=SOURCE, chunk_id=chunk_id)  # type: ignore[attr-defined]
    except Exception as exc:
        _store_log.error(
            "pipeline_refused",
            "ingest: pipeline refused a batch of %d records",
            len(records),
            exc_info=True,
        )
        raise HTTPException(
            status_code=503,
            detail=f"not stored, retry: {type(exc).__name__}",
            headers={"Retry-After": "5"},
        ) from None


async def flush_joiner(app: object, pipeline: object) -> None:
    """Store the lines still held unfinished (at shutdown)."""
    joiner = getattr(app.state, "http_joiner", None)  # type: ignore[attr-defined]
    if joiner is not None and pipeline is not None:
        rest = joiner.flush()
        if rest:
            await pipeline.submit(rest, source=SOURCE)  # type: ignore[attr-defined]
