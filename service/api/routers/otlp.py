"""``POST /v1/logs``: OpenTelemetry logs over OTLP/HTTP (the SDKs' ``OTLPLogExporter``, the
Collector's ``otlphttp`` exporter), protobuf or JSON, optionally gzip.

The same door as ``POST /ingest`` (:class:`~service.sources.http.endpoint.HttpEndpoint`):
bearer token (``api.token``), body size limits (32 MiB as sent, 64 MiB once inflated, the
parsed message charged as well, 100k log records), the process-wide decompression budget,
the CRI chunk joiner and the sink (the answer is sent once the batch is stored). Decoding:
:mod:`service.sources.http.otlp` (stream identity from the resource attributes).

Answers follow the OTLP/HTTP specification, in the request's encoding: ``200`` with an
``ExportLogsServiceResponse`` (``partial_success.rejected_log_records`` for records without
a body); ``400`` (undecodable, not retried by exporters), ``413``, ``415``, and ``503`` with
``Retry-After`` when the batch could not be stored or the memory budget is in use
(exporters retry), each with a ``google.rpc.Status`` body. Off with ``sources.http: false``.
"""

from __future__ import annotations

import functools
import json
from typing import Annotated

from fastapi import APIRouter, FastAPI, Header, HTTPException, Request, Response

from service.api.auth import WriteAuth
from service.api.body import read_body
from service.api.deps import PipelineDep
from service.sources.base import Sink
from service.sources.http.body import BodyRefused
from service.sources.http.endpoint import NotStored, endpoint_of, flush_endpoint
from service.sources.http.otlp import SOURCE, decode_export, media, refuse

router = APIRouter(tags=["ingest"])
PROTOBUF = "application/x-protobuf"
# google.rpc.Code
INVALID_ARGUMENT, RESOURCE_EXHAUSTED, UNAVAILABLE = 3, 8, 14

_OPENAPI_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            PROTOBUF: {
                "schema": {"type": "string", "format": "binary"},
                "description": "opentelemetry.proto.collector.logs.v1.ExportLogsServiceRequest",
            },
            "application/json": {
                "schema": {"type": "object"},
                "example": {
                    "resourceLogs": [
                        {
                            "resource": {
                                "attributes": [
                                    {"key": "k8s.namespace.name", "value": {"stringValue": "llm"}},
                                    {"key": "k8s.pod.name", "value": {"stringValue": "vllm-0"}},
                                    {"key": "k8s.container.name", "value": {"stringValue": "vllm"}},
                                ]
                            },
                            "scopeLogs": [
                                {
                                    "logRecords": [
                                        {
                                            "timeUnixNano": "1785146472100000000",
                                            "body": {"stringValue": "..."},
                                        }
                                    ]
                                }
                            ],
                        }
                    ]
                },
            },
        },
    }
}


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _answer(
    kind: str | None,
    status: int,
    message: str | None = None,
    code: int = 0,
    rejected: int = 0,
    headers: dict[str, str] | None = None,
) -> Response:
    """An ``ExportLogsServiceResponse`` (2xx) or a ``google.rpc.Status`` (errors), encoded as
    the request was (JSON when it was neither)."""
    if kind == "protobuf":
        if status < 300:
            inner = b""
            if rejected:
                inner = b"\x08" + _varint(rejected)
                if message:
                    text = message.encode()
                    inner += b"\x12" + _varint(len(text)) + text
            body = (b"\x0a" + _varint(len(inner)) + inner) if inner else b""
        else:
            text = (message or "").encode()
            body = b"\x08" + _varint(code) + b"\x12" + _varint(len(text)) + text
        return Response(body, status_code=status, media_type=PROTOBUF, headers=headers)
    if status < 300:
        doc: dict[str, object] = {}
        if rejected:
            doc = {
                "partialSuccess": {
                    "rejectedLogRecords": str(rejected),
                    "errorMessage": message or "",
                }
            }
    else:
        doc = {"code": code, "message": message or ""}
    return Response(
        json.dumps(doc), status_code=status, media_type="application/json", headers=headers
    )


def _refused(kind: str | None, exc: BodyRefused) -> Response:
    if exc.status == 503:
        return _answer(kind, 503, exc.message, UNAVAILABLE, headers={"Retry-After": "5"})
    code = RESOURCE_EXHAUSTED if exc.status == 413 else INVALID_ARGUMENT
    return _answer(kind, exc.status, exc.message, code)


@router.post(
    "/v1/logs",
    dependencies=[WriteAuth],
    openapi_extra=_OPENAPI_BODY,
    response_class=Response,
    responses={
        200: {"description": "stored (ExportLogsServiceResponse)"},
        400: {"description": "undecodable body (google.rpc.Status)"},
        413: {"description": "too large, as sent, inflated or parsed, or too many log records"},
        415: {"description": "not protobuf or JSON, or not gzip"},
        503: {"description": "not stored; retry after Retry-After"},
    },
    summary="OpenTelemetry logs (OTLP/HTTP, protobuf or JSON, gzip)",
)
async def export_logs(
    request: Request,
    pipeline: PipelineDep,
    content_type: Annotated[str | None, Header()] = None,
    content_encoding: Annotated[str | None, Header()] = None,
    idempotency_key: Annotated[str | None, Header()] = None,
) -> Response:
    kind = media(content_type)
    if kind is None:
        return _refused(
            None,
            refuse(
                415,
                "unsupported_media_type",
                "send application/x-protobuf or application/json",
                f"Content-Type {content_type}",
            ),
        )
    endpoint = endpoint_of(request.app.state, SOURCE)
    try:
        received = await endpoint.receive(
            pipeline,
            functools.partial(read_body, request, endpoint.max_body),
            functools.partial(
                decode_export, content_type=content_type, content_encoding=content_encoding
            ),
            idempotency_key,
        )
    except HTTPException as exc:  # from the reader: 413 as sent, or a bad Content-Length
        status = exc.status_code
        return _refused(
            kind, refuse(status, "too_large" if status == 413 else "bad_request", str(exc.detail))
        )
    except BodyRefused as exc:
        return _refused(kind, exc)
    except NotStored as exc:
        return _answer(kind, 503, str(exc), UNAVAILABLE, headers={"Retry-After": "5"})
    rejected = received.rejected
    return _answer(kind, 200, "log records without a body" if rejected else None, rejected=rejected)


async def flush_joiner(app: FastAPI, sink: Sink | None) -> None:
    """Store the lines still held unfinished (at shutdown)."""
    await flush_endpoint(app.state, SOURCE, sink)
