"""Read a request body with a size bound (413 beyond it, before the whole body is held).

And what the two ingest routes (``POST /ingest``, ``POST /v1/logs``) share: their shape
(write auth, the headers of the body), the endpoint of their source, and every way a request
fails as one :class:`~service.sources.http.decoding.BodyRefused` the route answers in its
own format."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, HTTPException, Request

from service.api.auth import WriteAuth
from service.api.deps import Ctx
from service.ratelog import reject
from service.sources.http.decoding import BodyRefused
from service.sources.http.endpoint import Decoder, HttpEndpoint, NotStored, Received

MiB = 1 << 20
RETRY_AFTER = {"Retry-After": "5"}
READ_REASONS = frozenset(("too_large", "bad_request"))  # the reader's own refusals


def too_large(limit: int) -> HTTPException:
    return HTTPException(
        status_code=413, detail=f"request body larger than {limit} bytes ({limit // MiB} MiB)"
    )


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body (still compressed if it was sent so); ``413`` when over ``limit`` bytes,
    decided from ``Content-Length`` when given, else while streaming."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                raise too_large(limit)
        except ValueError:
            raise HTTPException(status_code=400, detail="bad Content-Length") from None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


async def read_ingest_body(request: Request, limit: int) -> bytes:
    """:func:`read_body`, its refusals (not counted) as :class:`BodyRefused`: ``too_large``
    (413) or ``bad_request`` (400)."""
    try:
        return await read_body(request, limit)
    except HTTPException as exc:
        status = exc.status_code
        reason = "too_large" if status == 413 else "bad_request"
        raise BodyRefused(status, reason, str(exc.detail)) from None


class BodyHeaders:
    """The headers that say what a body is, and the client's idempotency key."""

    def __init__(
        self,
        content_type: Annotated[str | None, Header()] = None,
        content_encoding: Annotated[str | None, Header()] = None,
        idempotency_key: Annotated[str | None, Header()] = None,
    ) -> None:
        self.content_type = content_type
        self.content_encoding = content_encoding
        self.idempotency_key = idempotency_key


Headers = Annotated[BodyHeaders, Depends()]


def ingest_route(router: APIRouter, path: str, **kwargs: Any) -> Callable[[Any], Any]:
    """``POST path`` on ``router``, behind the write token."""
    return router.post(path, dependencies=[WriteAuth], **kwargs)


def endpoint_of(source: str) -> Callable[[Ctx], HttpEndpoint]:
    """A dependency: the started endpoint of ``source`` among the service's sources (503
    while there is none, as without a pipeline)."""

    def endpoint(ctx: Ctx) -> HttpEndpoint:
        for candidate in ctx.sources:
            if not isinstance(candidate, HttpEndpoint) or candidate.source != source:
                continue
            if candidate.sink is not None:  # started
                return candidate
        raise HTTPException(status_code=503, detail="pipeline not available")

    return endpoint


async def receive(
    request: Request,
    endpoint: HttpEndpoint,
    decode: Decoder,
    headers: BodyHeaders,
    *,
    count_read_refusals: bool = False,
) -> Received | BodyRefused:
    """What became of the request's body: stored (:class:`Received`) or refused, as sent,
    decoded or not stored (503, ``not_stored``); the reader's refusals are counted only
    with ``count_read_refusals``."""
    read = functools.partial(read_ingest_body, request, endpoint.max_body)
    try:
        return await endpoint.receive(read, decode, headers.idempotency_key)
    except BodyRefused as exc:
        if count_read_refusals and exc.reason in READ_REASONS:
            reject(endpoint.source, exc.reason, exc.message)
        return exc
    except NotStored as exc:
        return BodyRefused(503, "not_stored", str(exc))
