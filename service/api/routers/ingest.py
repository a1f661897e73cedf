"""``POST /ingest``: log batches from Fluent Bit's ``http`` output or Fluentd's ``out_http``.

Bodies: Fluent Bit ``format msgpack`` (its default), ``json`` (one array), ``json_lines`` /
Fluentd NDJSON, ``json_stream``, ``text/plain`` lines; ``Content-Encoding: gzip``. The tag
(stream-key fallback and Kubernetes metadata from a kubelet path) comes from the
``X-Fluent-Tag`` header (Fluent Bit ``header_tag X-Fluent-Tag``) or ``?tag=``. Without one,
a record is keyed by what it carries (Kubernetes metadata, a container or host name), else
by the client's address, and the answer's ``warning`` names the tag (see
:mod:`service.api.untagged`).

HTTP only: the body is decoded, joined and stored by the source's
:class:`~service.sources.http.endpoint.HttpEndpoint` (decoding:
:mod:`service.sources.http.body`; what both ingest routes share: :mod:`service.api.body`). The answer is sent only after the batch is stored
durably: ``200`` with counts, ``204`` when the body held nothing to store (e.g. only
event-group markers), ``400`` when nothing in it could be decoded or the tag is longer than
``MAX_TAG``, ``413`` over the size limit (as sent, once inflated, or more than
``MAX_RECORDS`` records), ``415`` for a media type or encoding we do not decode (or no
``Content-Type`` on a body that is neither JSON nor msgpack), ``503`` when the pipeline
could not store it or the process-wide decompression budget is in use (the collector
retries). Every refusal is counted and logged at a bounded rate.
"""

from __future__ import annotations

import functools
from typing import Annotated

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse

from service.api.body import RETRY_AFTER, Headers, endpoint_of, ingest_route, receive, too_large
from service.api.schemas import IngestResult
from service.api.untagged import Untagged
from service.ingest.bounds import MAX_RECORDS
from service.sources.http.body import TAG_HEADER, BodyRefused, check_media, check_tag, decode_body
from service.sources.http.endpoint import Decoder, HttpEndpoint

router = APIRouter(tags=["ingest"])
SOURCE = "http"
Endpoint = Annotated[HttpEndpoint, Depends(endpoint_of(SOURCE))]

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


@ingest_route(
    router,
    "/ingest",
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
    endpoint: Endpoint,
    headers: Headers,
    tag: Annotated[str | None, Query()] = None,
    x_fluent_tag: Annotated[str | None, Header(alias=TAG_HEADER)] = None,
) -> Response:
    try:
        check_tag(x_fluent_tag, SOURCE)  # refuse what we can before reading the body
        check_tag(tag, SOURCE)
        check_media(headers.content_type, SOURCE)
    except BodyRefused as exc:
        raise _refused(exc, endpoint.max_decompressed) from None
    untagged = None if (x_fluent_tag or tag) else Untagged(request)
    decode: Decoder = functools.partial(
        decode_body,
        content_type=headers.content_type,
        content_encoding=headers.content_encoding,
        tag=x_fluent_tag or tag,
        max_records=MAX_RECORDS,
        source=SOURCE,
        default=untagged.key if untagged else None,
    )
    if untagged is not None:
        decode = untagged.watching(decode)
    received = await receive(request, endpoint, decode, headers)
    if isinstance(received, BodyRefused):
        raise _refused(received, endpoint.max_decompressed)
    if not received.accepted:
        if received.rejected:
            raise HTTPException(
                status_code=400,
                detail={
                    "message": "nothing decodable in the body",
                    "accepted": 0,
                    "rejected": received.rejected,
                },
            )
        return Response(status_code=204)
    result = IngestResult(
        accepted=received.accepted,
        rejected=received.rejected,
        warning=untagged.warning() if untagged else None,
    )
    return JSONResponse(result.model_dump(exclude_none=True))


def _refused(exc: BodyRefused, max_decompressed: int) -> HTTPException:
    """The HTTP answer to a body refused as a whole (already counted and logged)."""
    if exc.reason in ("bad_gzip", "binary"):
        return HTTPException(
            status_code=400, detail={"message": exc.message, "accepted": 0, "rejected": 1}
        )
    if exc.reason == "decompressed_too_large":
        return too_large(max_decompressed)
    if exc.status == 503:
        return HTTPException(status_code=503, detail=exc.message, headers=RETRY_AFTER)
    return HTTPException(status_code=exc.status, detail=exc.message)
