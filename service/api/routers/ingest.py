"""``POST /ingest``: log batches from Fluent Bit's ``http`` output or Fluentd's ``out_http``.

Bodies: Fluent Bit ``format msgpack`` (its default), ``json`` (one array), ``json_lines`` /
Fluentd NDJSON, ``json_stream``, ``text/plain`` lines; ``Content-Encoding: gzip``. The tag
(stream-key fallback and Kubernetes metadata from a kubelet path) comes from the
``X-Fluent-Tag`` header (Fluent Bit ``header_tag X-Fluent-Tag``) or ``?tag=``.

The answer is sent only after :meth:`Pipeline.submit` returned, i.e. after the batch is
stored durably: ``200`` with counts, ``204`` when the body held nothing to store (e.g. only
event-group markers), ``400`` when nothing in it could be decoded, ``413`` over the size
limit, ``503`` when the pipeline could not store it (the collector retries). Runtime chunks
of an unfinished line (CRI ``P``) are held by one joiner across requests, as the forward
server does, and flushed when the closing chunk arrives, after ``IDLE_FLUSH_S``, or at
shutdown; collectors with ``multiline.parser docker, cri`` already send whole lines.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Annotated

import anyio
from fastapi import APIRouter, Header, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse

from service import metrics
from service.api.auth import WriteAuth
from service.api.body import MiB, read_body, too_large
from service.api.deps import PipelineDep
from service.api.schemas import IngestResult
from service.ingest.compression import GZIP_MAGIC, gunzip
from service.ingest.http_body import TAG_HEADER, decode_http_body
from service.ingest.joiner import Joiner
from service.records import LogRecord

log = logging.getLogger("vllm_sentinel.api")
router = APIRouter(tags=["ingest"])
SOURCE = "http"
MAX_BODY = 32 * MiB  # as sent (compressed); Fluent Bit chunks are a few MiB at most
MAX_DECOMPRESSED = 256 * MiB
IDLE_FLUSH_S = 30.0

_OPENAPI_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"type": "array", "items": {"type": "object"}},
                                 "example": [{"date": 1785146472.1, "log": "...",
                                              "kubernetes": {"namespace_name": "llm",
                                                             "pod_name": "vllm-0",
                                                             "container_name": "vllm"}}]},
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


@router.post("/ingest", dependencies=[WriteAuth], openapi_extra=_OPENAPI_BODY,
             response_model=IngestResult,
             responses={204: {"description": "nothing to store"},
                        400: {"description": "nothing decodable (reject counts in detail)"},
                        413: {"description": "body too large"},
                        503: {"description": "not stored; retry"}},
             summary="Log batches from Fluent Bit (http output) or Fluentd (out_http)")
async def ingest(
    request: Request,
    pipeline: PipelineDep,
    tag: Annotated[str | None, Query(max_length=1024)] = None,
    x_fluent_tag: Annotated[str | None, Header(alias=TAG_HEADER)] = None,
    content_type: Annotated[str | None, Header()] = None,
    content_encoding: Annotated[str | None, Header()] = None,
    idempotency_key: Annotated[str | None, Header()] = None,
) -> Response:
    body = await read_body(request, MAX_BODY)
    enc = (content_encoding or "").strip().lower()
    if enc in ("gzip", "x-gzip") or (enc in ("", "identity") and body.startswith(GZIP_MAGIC)):
        try:
            body = await anyio.to_thread.run_sync(gunzip, body, MAX_DECOMPRESSED)
        except ValueError as exc:
            metrics.reject(SOURCE, "bad_gzip", str(exc))
            if "beyond" in str(exc):
                raise too_large(MAX_DECOMPRESSED) from None
            raise HTTPException(status_code=400, detail={
                "message": f"bad gzip body: {exc}", "accepted": 0, "rejected": 1}) from None
    elif enc not in ("", "identity"):
        metrics.reject(SOURCE, "unsupported_encoding", enc)
        raise HTTPException(status_code=415, detail=f"unsupported Content-Encoding {enc}")

    records, rejected = await anyio.to_thread.run_sync(
        lambda: decode_http_body(body, content_type, "identity", x_fluent_tag or tag,
                                 source=SOURCE))
    joiner = joiner_of(request)
    records = joiner.feed(records) + joiner.flush_idle(IDLE_FLUSH_S)
    if not records:
        if rejected:
            raise HTTPException(status_code=400, detail={
                "message": "nothing decodable in the body", "accepted": 0,
                "rejected": rejected})
        return Response(status_code=204)
    await submit(pipeline, records, chunk_id_of(idempotency_key))
    return JSONResponse(IngestResult(accepted=len(records), rejected=rejected).model_dump())


async def submit(pipeline: object, records: list[LogRecord], chunk_id: str | None) -> None:
    try:
        await pipeline.submit(records, source=SOURCE, chunk_id=chunk_id)  # type: ignore[attr-defined]
    except Exception as exc:
        log.exception("ingest: pipeline refused a batch of %d records", len(records))
        raise HTTPException(status_code=503, detail=f"not stored, retry: {type(exc).__name__}",
                            headers={"Retry-After": "5"}) from None


async def flush_joiner(app: object, pipeline: object) -> None:
    """Store the lines still held unfinished (at shutdown)."""
    joiner = getattr(app.state, "http_joiner", None)  # type: ignore[attr-defined]
    if joiner is not None and pipeline is not None:
        rest = joiner.flush()
        if rest:
            await pipeline.submit(rest, source=SOURCE)  # type: ignore[attr-defined]
