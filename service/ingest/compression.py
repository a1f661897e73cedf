"""Bounded gzip decompression for untrusted bodies (HTTP ``Content-Encoding: gzip``,
Forward ``compressed: gzip``)."""

from __future__ import annotations

import zlib

GZIP_MAGIC = b"\x1f\x8b"


class DecompressedTooLarge(ValueError):
    """The body inflates beyond the allowed size (a client error worth a 413, not a 400)."""


def gunzip(data: bytes, limit: int) -> bytes:
    """Decompress gzip data (several concatenated members allowed, as Fluentd writes them)
    to at most ``limit`` bytes; raise ``ValueError`` if corrupt or truncated,
    :class:`DecompressedTooLarge` (a ``ValueError``) if larger."""
    out: list[bytes] = []
    total = 0
    while data:
        inflater = zlib.decompressobj(wbits=31)
        try:
            chunk = inflater.decompress(data, limit - total + 1)
        except zlib.error as exc:
            raise ValueError(f"corrupt gzip: {exc}") from None
        total += len(chunk)
        if total > limit or inflater.unconsumed_tail:
            raise DecompressedTooLarge(f"gzip expands beyond {limit} bytes")
        if not inflater.eof:
            raise ValueError("truncated gzip")
        out.append(chunk)
        data = inflater.unused_data
        if data and not data.startswith(GZIP_MAGIC):
            if data.strip(b"\x00"):
                raise ValueError("trailing garbage after gzip member")
            break
    return b"".join(out)
