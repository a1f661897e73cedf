"""Read a request body with a size bound (413 beyond it, before the whole body is held)."""

from __future__ import annotations

from fastapi import HTTPException, Request

MiB = 1 << 20


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
