"""``POST /v1/logs``: OpenTelemetry logs over OTLP/HTTP (the SDKs' ``OTLPLogExporter``, the
Collector's ``otlphttp`` exporter), protobuf or JSON, optionally gzip.

The same door as ``POST /ingest`` (:class:`~service.sources.http.endpoint.HttpEndpoint`):
bearer token (``api.token``), body size limits (32 MiB as sent, 64 MiB once inflated, the
parsed message charged as well, 100k log records), the process-wide decompression budget,
the CRI chunk joiner and the sink (the answer is sent once the batch is stored). Decoding:
:mod:`service.ingest.otlp` (stream identity from the resource attributes); what both ingest
routes share: :mod:`service.api.body`.

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

from fastapi import APIRouter, Depends, Request, Response

from service.api.body import RETRY_AFTER, Headers, endpoint_of, ingest_route, receive
from service.sources.http.decoding import BodyRefused, refuse_body
from service.sources.http.endpoint import HttpEndpoint
from service.sources.http.otlp import SOURCE, decode_export, media

router = APIRouter(tags=["ingest"])
PROTOBUF = "application/x-protobuf"
# google.rpc.Code
INVALID_ARGUMENT, RESOURCE_EXHAUSTED, UNAVAILABLE = 3, 8, 14
Endpoint = Annotated[HttpEndpoint, Depends(endpoint_of(SOURCE))]

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
        return _answer(kind, 503, exc.message, UNAVAILABLE, headers=RETRY_AFTER)
    code = RESOURCE_EXHAUSTED if exc.status == 413 else INVALID_ARGUMENT
    return _answer(kind, exc.status, exc.message, code)


@ingest_route(
    router,
    "/v1/logs",
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
async def export_logs(request: Request, endpoint: Endpoint, headers: Headers) -> Response:
    kind = media(headers.content_type)
    if kind is None:
        return _refused(
            None,
            refuse_body(
                SOURCE,
                "unsupported_media_type",
                "send application/x-protobuf or application/json",
                f"Content-Type {headers.content_type}",
            ),
        )
    decode = functools.partial(
        decode_export,
        content_type=headers.content_type,
        content_encoding=headers.content_encoding,
    )
    received = await receive(request, endpoint, decode, headers, count_read_refusals=True)
    if isinstance(received, BodyRefused):
        return _refused(kind, received)
    rejected = received.rejected
    return _answer(kind, 200, "log records without a body" if rejected else None, rejected=rejected)
